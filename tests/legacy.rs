//! Legacy `SETNX` lock code through the proxy: the spec's timestamp algorithm run unmodified by
//! concurrent workers while masters die, the `GETSET` takeover race, the deadlock guard (and
//! `SET ... KEEPTTL`, which could leave a key without a TTL), each command's majority rule where
//! masters disagree, and differential runs against a single `redis-server`. (The `WATCH`/`MULTI`/
//! `EXEC` release is in tests/transactions.rs.)
//!
//! The two safety claims that could be taken for granted (the majority rule, the deadlock
//! guard) also run with the protection switched off (`legacy_decision = "first-master"`,
//! `legacy_guard_ttl_ms = 0`), and there the checks must fail.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::*;
use tokio::sync::Mutex;
use tokio::time::sleep;

/// Three masters and a proxy in front of them, with the test defaults.
async fn three_masters() -> (Vec<Master>, String) {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    (ms, p)
}

fn bulk(r: &Reply) -> Option<String> {
    match r {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The legacy algorithm, unmodified.

/// How long a legacy lock is good for (the timestamp's distance into the future).
const LOCK_TIMEOUT_MS: u64 = 400;

/// Takes `lock` the spec's way: `SETNX lock <expiry>`; on 0, `GET`; an expired timestamp is
/// taken over with `GETSET`, and only the client that gets the expired value back owns it.
/// Returns the expiry it holds.
async fn legacy_acquire(c: &mut Client, lock: &str) -> u64 {
    loop {
        let mine = now_ms() + LOCK_TIMEOUT_MS + 1;
        if c.cmd(&["SETNX", lock, &mine.to_string()]).await == Reply::Integer(1) {
            return mine;
        }
        let held: Option<u64> = bulk(&c.cmd(&["GET", lock]).await).and_then(|v| v.parse().ok());
        if let Some(held) = held
            && held < now_ms()
        {
            let mine = now_ms() + LOCK_TIMEOUT_MS + 1;
            let old = bulk(&c.cmd(&["GETSET", lock, &mine.to_string()]).await);
            if old.and_then(|v| v.parse::<u64>().ok()) == Some(held) {
                return mine;
            }
        }
        sleep(Duration::from_millis(1)).await;
    }
}

/// Releases the spec's way: only while the own timeout has not passed.
async fn legacy_release(c: &mut Client, lock: &str, mine: u64) {
    if now_ms() < mine {
        c.cmd(&["DEL", lock]).await;
    }
}

/// Runs `workers` legacy clients, each making `rounds` read–sleep–write increments of a counter
/// kept in the test, under the lock. Every `crash_every`-th round a worker "dies" holding the
/// lock (no `DEL`), so the others must take it over with `GETSET`. Returns the counter.
async fn legacy_run(addr: &str, workers: u64, rounds: u64, crash_every: u64) -> u64 {
    let counter = Arc::new(Mutex::new(0u64));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (addr, counter) = (addr.to_string(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&addr).await;
            for round in 1..=rounds {
                let mine = legacy_acquire(&mut c, "legacy:lock").await;
                let seen = *counter.lock().await;
                sleep(Duration::from_millis(3)).await;
                *counter.lock().await = seen + 1;
                if crash_every > 0 && (round + w) % crash_every == 0 {
                    continue;
                }
                legacy_release(&mut c, "legacy:lock", mine).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    *counter.lock().await
}

async fn legacy_algorithm_with_a_master_killed(n: usize, restart: bool) {
    let mut ms = masters(n);
    let addr = proxy_for(&ms).await.to_string();
    let (workers, rounds) = (5, 12);
    let run = tokio::spawn({
        let addr = addr.clone();
        async move { legacy_run(&addr, workers, rounds, 4).await }
    });
    sleep(Duration::from_millis(300)).await;
    ms[0].kill();
    if restart {
        sleep(Duration::from_millis(300)).await;
        ms[0].restart();
    }
    let counted = run.await.expect("run");
    assert_eq!(
        counted,
        workers * rounds,
        "lost updates under the legacy lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_algorithm_loses_no_update_n3_master_killed_and_restarted_empty() {
    legacy_algorithm_with_a_master_killed(3, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_algorithm_loses_no_update_n5_master_killed() {
    legacy_algorithm_with_a_master_killed(5, false).await;
}

/// Workers hold the lock while master 0 restarts empty, again and again; returns the lost
/// updates. Under the majority rule the empty master alone cannot grant the lock again.
async fn lost_updates_with_master_0_restarting(decision: LegacyDecision) -> u64 {
    let mut ms = masters(3);
    let addr = proxy_with(&ms, |c| c.legacy_decision = decision).await;
    let counter = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (addr, counter, done, stop) =
            (addr.clone(), counter.clone(), done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&addr).await;
            while stop.load(Ordering::SeqCst) == 0 {
                let mine = legacy_acquire(&mut c, "legacy:restart").await;
                let seen = counter.load(Ordering::SeqCst);
                sleep(Duration::from_millis(100)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                legacy_release(&mut c, "legacy:restart", mine).await;
            }
        }));
    }
    // The majority rule must hold through six restarts; the control restarts until it shows a
    // loss (a loaded CI machine can restart master 0 between critical sections several times in
    // a row), up to thirty.
    let restarts = if decision == LegacyDecision::Majority {
        6
    } else {
        30
    };
    for _ in 0..restarts {
        sleep(Duration::from_millis(250)).await;
        ms[0].restart();
        // Workers between their write and their count make `counted` run ahead of `done` for
        // a moment, never behind: `done` above `counted` is a loss already made.
        let (d, c) = (done.load(Ordering::SeqCst), counter.load(Ordering::SeqCst));
        if decision != LegacyDecision::Majority && d > c {
            break;
        }
    }
    sleep(Duration::from_millis(300)).await;
    stop.store(1, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("worker");
    }
    let (done, counted) = (done.load(Ordering::SeqCst), counter.load(Ordering::SeqCst));
    assert!(done > 5, "too few rounds to judge: {done}");
    done - counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_cannot_grant_a_legacy_lock_alone() {
    assert_eq!(
        lost_updates_with_master_0_restarting(LegacyDecision::Majority).await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_first_master_decision_loses_updates() {
    // The checker works: answering like a plain proxy in front of master 0 lets a restarted,
    // empty master 0 hand out a lock that masters 1 and 2 still give to someone else.
    assert!(lost_updates_with_master_0_restarting(LegacyDecision::FirstMaster).await > 0);
}

// ---------------------------------------------------------------------------------------------
// The takeover race.

/// One racer's takeover: `GETSET` a fresh expiry; won when the dead holder's value came back.
async fn take_over(c: &mut Client, dead: &str, who: &str) -> (bool, Option<String>) {
    let fresh = format!("{}-{who}", now_ms() + 10_000);
    let old = bulk(&c.cmd(&["GETSET", "race", &fresh]).await);
    (old.as_deref() == Some(dead), old)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_race_has_exactly_one_winner() {
    let ms = masters(3);
    // Two proxies on the same masters, so each master may see the two GETSETs in either order.
    let a = proxy_for(&ms).await.to_string();
    let b = proxy_for(&ms).await.to_string();
    let (mut ca, mut cb) = (Client::connect(&a).await, Client::connect(&b).await);
    let mut setup = Client::connect(&a).await;
    for round in 0..60 {
        let dead = (now_ms() - 10_000 - round).to_string();
        setup.cmd(&["DEL", "race"]).await;
        assert_eq!(
            setup.cmd(&["SETNX", "race", &dead]).await,
            Reply::Integer(1)
        );
        assert_eq!(values_on(&ms, "race").await, vec![Some(dead.clone()); 3]);
        let ((wa, oa), (wb, ob)) = tokio::join!(
            take_over(&mut ca, &dead, "a"),
            take_over(&mut cb, &dead, "b")
        );
        assert!(
            wa ^ wb,
            "round {round}: a won {wa} ({oa:?}), b won {wb} ({ob:?}), dead {dead}, now {:?}",
            values_on(&ms, "race").await
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The deadlock guard.

async fn holder_dies_after_setnx(guard_ms: u64) -> Reply {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| {
        c.max_ttl_ms = 2000;
        c.legacy_guard_ttl_ms = guard_ms;
    })
    .await;
    {
        let mut dying = Client::connect(&p).await;
        assert_eq!(
            dying.cmd(&["SETNX", "guard:lock", "1"]).await,
            Reply::Integer(1)
        );
        // ...and dies before its EXPIRE.
    }
    sleep(Duration::from_millis(900)).await;
    Client::connect(&p)
        .await
        .cmd(&["SETNX", "guard:lock", "2"])
        .await
}

#[tokio::test]
async fn deadlock_guard_frees_a_lock_whose_holder_died_before_expire() {
    assert_eq!(holder_dies_after_setnx(600).await, Reply::Integer(1));
}

#[tokio::test]
async fn negative_control_without_the_guard_the_lock_stays_blocked() {
    assert_eq!(holder_dies_after_setnx(0).await, Reply::Integer(0));
}

#[tokio::test]
async fn set_keepttl_never_leaves_a_key_without_a_ttl() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.legacy_guard_ttl_ms = 60_000).await;
    let reference = Master::start();
    let mut one = reference.client().await;
    let mut c = Client::connect(&p).await;
    // The replies are Redis's, from every starting state.
    for client in [&mut one, &mut c] {
        assert_eq!(client.raw(&["SET", "kt", "a", "KEEPTTL"]).await, "+OK\r\n");
        assert_eq!(
            client.raw(&["SET", "kt", "b", "KEEPTTL", "GET"]).await,
            "$1\r\na\r\n"
        );
        assert_eq!(
            client.raw(&["SET", "nokt", "b", "XX", "KEEPTTL"]).await,
            "$-1\r\n"
        );
        assert_eq!(
            client.raw(&["SET", "held", "x", "PX", "5000"]).await,
            "+OK\r\n"
        );
        assert_eq!(
            client.raw(&["SET", "held", "y", "KEEPTTL"]).await,
            "+OK\r\n"
        );
        assert_eq!(client.raw(&["GET", "kt"]).await, "$1\r\nb\r\n");
    }
    for m in &ms {
        let mut d = m.client().await;
        // A new key gets the deadlock guard's TTL; a key that had one keeps it.
        let t = d.cmd(&["PTTL", "kt"]).await;
        assert!(
            matches!(t, Reply::Integer(t) if t > 50_000 && t <= 60_000),
            "{t:?}"
        );
        let t = d.cmd(&["PTTL", "held"]).await;
        assert!(
            matches!(t, Reply::Integer(t) if t > 0 && t <= 5_000),
            "{t:?}"
        );
        assert_eq!(d.cmd(&["EXISTS", "nokt"]).await, Reply::Integer(0));
    }
}

#[tokio::test]
async fn expiries_beyond_max_ttl_are_refused() {
    let (_ms, p) = three_masters().await;
    let mut c = Client::connect(&p).await;
    c.cmd(&["SETNX", "cap", "1"]).await;
    let ttl = c.cmd(&["PTTL", "cap"]).await;
    assert!(
        matches!(ttl, Reply::Integer(t) if t > 290_000 && t <= 300_000),
        "guard TTL {ttl:?}"
    );
    assert_eq!(
        c.raw(&["EXPIRE", "cap", "301"]).await,
        "-ERR expiry of 301000 ms exceeds the proxy's max_ttl_ms (300000 ms)\r\n"
    );
    assert!(
        c.raw(&["SET", "cap", "x", "PX", "300001"])
            .await
            .starts_with("-ERR expiry of 300001 ms")
    );
    assert_eq!(c.raw(&["EXPIRE", "cap", "30"]).await, ":1\r\n");
}

// ---------------------------------------------------------------------------------------------
// The majority rules where masters disagree.

/// Writes `values[i]` (or nothing) for `key` directly on master i.
async fn plant(ms: &[Master], key: &str, values: &[Option<&str>]) {
    for (m, v) in ms.iter().zip(values) {
        let mut c = m.client().await;
        c.cmd(&["DEL", key]).await;
        if let Some(v) = v {
            c.cmd(&["SET", key, v]).await;
        }
    }
}

#[tokio::test]
async fn disagreeing_masters_get_conservative_answers() {
    let (ms, p) = three_masters().await;
    let mut c = Client::connect(&p).await;
    let s = |v: &str| Some(v.to_string());

    // SETNX that only the minority (master 0) accepts: 0, and rolled back there only.
    plant(&ms, "d:setnx", &[None, Some("a"), Some("b")]).await;
    assert_eq!(c.raw(&["SETNX", "d:setnx", "mine"]).await, ":0\r\n");
    assert_eq!(values_on(&ms, "d:setnx").await, vec![None, s("a"), s("b")]);
    // With a majority it is granted.
    plant(&ms, "d:setnx", &[Some("a"), None, None]).await;
    assert_eq!(c.raw(&["SETNX", "d:setnx", "mine"]).await, ":1\r\n");
    assert_eq!(
        values_on(&ms, "d:setnx").await,
        vec![s("a"), s("mine"), s("mine")]
    );

    // GET with no majority value: nil.
    plant(&ms, "d:get", &[Some("a"), Some("b"), None]).await;
    assert_eq!(c.raw(&["GET", "d:get"]).await, "$-1\r\n");
    plant(&ms, "d:get", &[Some("a"), Some("b"), Some("b")]).await;
    assert_eq!(c.raw(&["GET", "d:get"]).await, "$1\r\nb\r\n");

    // GETSET with no majority old value: the caller gets its own value back, so a takeover
    // cannot be won; with a majority, the majority's value.
    plant(&ms, "d:getset", &[Some("old"), Some("x"), Some("y")]).await;
    assert_eq!(c.raw(&["GETSET", "d:getset", "new"]).await, "$3\r\nnew\r\n");
    // ...and its value is taken back, so split takeovers cannot leave the lock blocked.
    sleep(Duration::from_millis(50)).await;
    assert_eq!(values_on(&ms, "d:getset").await, vec![None, None, None]);
    plant(&ms, "d:getset", &[Some("x"), Some("old"), Some("old")]).await;
    assert_eq!(c.raw(&["GETSET", "d:getset", "new"]).await, "$3\r\nold\r\n");
    assert_eq!(values_on(&ms, "d:getset").await, vec![s("new"); 3]);

    // DEL, EXISTS: what a majority did / have.
    plant(&ms, "d:del", &[Some("a"), None, None]).await;
    assert_eq!(c.raw(&["EXISTS", "d:del"]).await, ":0\r\n");
    assert_eq!(c.raw(&["DEL", "d:del"]).await, ":0\r\n");
    plant(&ms, "d:del", &[Some("a"), Some("a"), None]).await;
    assert_eq!(c.raw(&["EXISTS", "d:del"]).await, ":1\r\n");
    assert_eq!(c.raw(&["DEL", "d:del"]).await, ":1\r\n");

    // SET XX: nil unless a majority had the key.
    plant(&ms, "d:xx", &[Some("a"), None, None]).await;
    assert_eq!(c.raw(&["SET", "d:xx", "v", "XX"]).await, "$-1\r\n");

    // TTL: the time a majority still keep the key.
    plant(&ms, "d:ttl", &[Some("a"), Some("a"), None]).await;
    ms[0].client().await.cmd(&["EXPIRE", "d:ttl", "50"]).await;
    ms[1].client().await.cmd(&["EXPIRE", "d:ttl", "100"]).await;
    assert_eq!(c.raw(&["TTL", "d:ttl"]).await, ":50\r\n");
    plant(&ms, "d:ttl", &[Some("a"), None, None]).await;
    assert_eq!(c.raw(&["TTL", "d:ttl"]).await, ":-2\r\n");
}

#[tokio::test]
async fn a_refused_setnx_never_removes_the_same_value_written_by_the_holder() {
    // Legacy values are timestamps: clients racing in the same millisecond write the same one.
    // The losers' clean-up must leave the winner's key alone on every master.
    let (ms, p) = three_masters().await;
    for round in 0..10 {
        let key = format!("same:{round}");
        let mut cs = Vec::new();
        for _ in 0..4 {
            cs.push(Client::connect(&p).await);
        }
        let args = ["SETNX", key.as_str(), "1795000000000"];
        let replies = futures_util::future::join_all(cs.iter_mut().map(|c| c.cmd(&args))).await;
        assert_eq!(
            replies.iter().filter(|r| **r == Reply::Integer(1)).count(),
            1
        );
        sleep(Duration::from_millis(20)).await;
        assert_eq!(
            values_on(&ms, &key).await,
            vec![Some("1795000000000".to_string()); 3]
        );
    }
}

#[tokio::test]
async fn negative_control_first_master_grants_a_minority_setnx() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.legacy_decision = LegacyDecision::FirstMaster).await;
    plant(&ms, "d:setnx", &[None, Some("a"), Some("a")]).await;
    // A plain proxy in front of master 0 hands out a lock that a majority gives to "a".
    assert_eq!(
        Client::connect(&p)
            .await
            .raw(&["SETNX", "d:setnx", "mine"])
            .await,
        ":1\r\n"
    );
}

// ---------------------------------------------------------------------------------------------
// Differential: the proxy against one redis-server.

#[tokio::test]
async fn differential_legacy_commands() {
    differential(&[
        "SETNX k v1",
        "SETNX k v2",
        "GET k",
        "GETSET k v3",
        "GET k",
        "GETSET fresh v",
        "EXISTS k nokey k",
        "TTL k",
        "PTTL nokey",
        "EXPIRE k 100",
        "TTL k",
        "PEXPIRE k 200000",
        "TTL k",
        "PEXPIREAT k {at}",
        "TTL k",
        "EXPIREAT k {at_s}",
        "TTL k",
        "EXPIREAT nokey {at_s}",
        "EXPIREAT k soon",
        "EXPIRE nokey 10",
        "EXPIRE k notanumber",
        "SET k v4 XX",
        "SET nokey v XX",
        "SET k v5 GET",
        "SET k v6 XX GET",
        "SET k2 plain",
        "SET k3 v EX 10",
        "TTL k3",
        "DEL k k2 nokey k3",
        "DEL k",
        "SETNX k v7",
        "SETNX",
        "GET k extra",
        "GETSET k",
        "DEL",
        "TTL",
        "SET k v NX XX",
        "SETEX k 100 v8",
        "GET k",
        "TTL k",
        "PSETEX k 200000 v9",
        "TTL k",
        "SETEX k 0 v",
        "SETEX k x v",
        "PSETEX k -5 v",
        "SETEX k 10",
        "SETEX k 9223372036854775807 v",
        "SETEX k 9223372036854775 v",
        "SETEX k -9223372036854775808 v",
        "PSETEX k 9223372036854775807 v",
        "SET k v EX 9223372036854775807",
        "SET k v PX -0",
        "SET k v EX 100 PX 100",
        "SET k v NX XX",
        "EXPIRE k 0 NX XX",
        "UNLINK k nokey",
        "GET k",
        "UNLINK",
        // A blocking pop's timeout as Redis 7.0 reads it (those that return at once).
        "BLPOP q 0x0.2",
        "BLPOP q 0.0001",
        "BLPOP q +0.01",
        "BLPOP q 1e-2",
        "BLPOP q inf",
        "BLPOP q -Infinity",
        "BLPOP q 1e400",
        "BLPOP q 9223372036854776",
        "BLPOP q -1",
        "BLPOP q nan",
        "BLPOP q 0x",
        "BLPOP q 1_0",
        "BLPOP q ",
    ])
    .await;
}

#[tokio::test]
async fn documented_differences_from_one_redis() {
    let (_ms, p) = three_masters().await;
    let mut c = Client::connect(&p).await;
    let mut other = Client::connect(&p).await;
    // 1. The deadlock guard: a legacy write with no expiry gets one (Redis: TTL -1).
    c.cmd(&["SETNX", "diff", "v"]).await;
    assert_eq!(c.raw(&["TTL", "diff"]).await, ":300\r\n");
    c.cmd(&["GETSET", "diff", "w"]).await;
    assert_eq!(c.raw(&["TTL", "diff"]).await, ":300\r\n");
    // 2. WATCH compares values: writing the same value again does not abort EXEC (Redis
    //    aborts on any write to the key).
    c.cmd(&["WATCH", "diff"]).await;
    other.cmd(&["SET", "diff", "w"]).await;
    c.cmd(&["MULTI"]).await;
    c.cmd(&["GET", "diff"]).await;
    assert_eq!(c.raw(&["EXEC"]).await, "*1\r\n$1\r\nw\r\n");
    // 3. A lock proxy, not a general one: other data commands are unknown.
    assert_eq!(
        c.raw(&["INCR", "diff"]).await,
        "-ERR unknown command 'INCR', with args beginning with: 'diff' \r\n"
    );
    // Among them those that would leave a lock without a TTL, or take it without a quorum
    // rule (functions and read-only scripts are not analysed): the lock keeps its TTL.
    for cmd in [
        &["PERSIST", "diff"][..],
        &["GETEX", "diff", "PERSIST"],
        &["GETDEL", "diff"],
        &["FCALL", "f", "1", "diff"],
        &["EVAL_RO", "return 1", "1", "diff"],
        &[
            "EVALSHA_RO",
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
            "1",
            "diff",
        ],
    ] {
        assert!(
            c.raw(cmd)
                .await
                .starts_with(&format!("-ERR unknown command '{}'", cmd[0])),
            "{cmd:?}"
        );
    }
    assert_eq!(c.raw(&["TTL", "diff"]).await, ":300\r\n");
}

/// Sets `key` on each master by `write` (a command per master), bypassing the proxy.
async fn on_each(ms: &[Master], write: &[&[&str]]) {
    for (m, cmd) in ms.iter().zip(write) {
        if !cmd.is_empty() {
            m.client().await.cmd(cmd).await;
        }
    }
}

#[tokio::test]
async fn hash_and_list_reads_follow_the_majority() {
    let (ms, p) = three_masters().await;
    let mut c = Client::connect(&p).await;
    // A Redisson-style hash lock held by `uuid:1` on two masters, by another on the third.
    on_each(
        &ms,
        &[
            &["HSET", "h", "uuid:1", "2"],
            &["HSET", "h", "uuid:1", "2"],
            &["HSET", "h", "uuid:9", "1"],
        ],
    )
    .await;
    assert_eq!(c.raw(&["HEXISTS", "h", "uuid:1"]).await, ":1\r\n");
    assert_eq!(c.raw(&["HEXISTS", "h", "uuid:9"]).await, ":0\r\n");
    assert_eq!(c.raw(&["HGET", "h", "uuid:1"]).await, "$1\r\n2\r\n");
    assert_eq!(c.raw(&["HGET", "h", "uuid:9"]).await, "$-1\r\n");
    assert_eq!(
        c.raw(&["HGETALL", "h"]).await,
        "*2\r\n$6\r\nuuid:1\r\n$1\r\n2\r\n"
    );
    // RESP3 gets a map, as from Redis.
    c.raw(&["HELLO", "3"]).await;
    assert_eq!(
        c.raw(&["HGETALL", "h"]).await,
        "%1\r\n$6\r\nuuid:1\r\n$1\r\n2\r\n"
    );
    c.raw(&["HELLO", "2"]).await;
    // No two masters agree: nothing is held.
    on_each(&ms, &[&["HSET", "h", "x", "1"], &[], &[]]).await;
    assert_eq!(c.raw(&["HGETALL", "h"]).await, "*0\r\n");
    // A signal list that a majority hold.
    on_each(&ms, &[&["LPUSH", "sig", "1"], &["LPUSH", "sig", "1"], &[]]).await;
    assert_eq!(c.raw(&["LLEN", "sig"]).await, ":1\r\n");
    assert_eq!(c.raw(&["LLEN", "nolist"]).await, ":0\r\n");
    // Wrong arity reads like Redis.
    assert_eq!(
        c.raw(&["HGET", "h"]).await,
        "-ERR wrong number of arguments for 'hget' command\r\n"
    );
}

#[tokio::test]
async fn blpop_answers_when_a_majority_pushed_and_times_out_as_redis() {
    let (ms, p) = three_masters().await;
    let reference = Master::start();
    let mut one = reference.client().await;
    let mut c = Client::connect(&p).await;
    // Timeouts and errors read exactly as one Redis.
    for args in [
        vec!["BLPOP", "sig", "0.1"],
        vec!["BLPOP", "sig", "-1"],
        vec!["BLPOP", "sig", "soon"],
        vec!["BLPOP", "sig"],
    ] {
        assert_eq!(c.raw(&args).await, one.raw(&args).await, "{args:?}");
    }
    // A push on one master only is not a signal; the waiter times out.
    on_each(&ms, &[&["LPUSH", "sig", "1"], &[], &[]]).await;
    assert_eq!(c.raw(&["BLPOP", "sig", "0.2"]).await, "*-1\r\n");
    // A waiter wakes once a majority have pushed (as a release through the proxy does).
    let waiter = tokio::spawn({
        let p = p.clone();
        async move {
            let mut w = Client::connect(&p).await;
            let started = tokio::time::Instant::now();
            let r = w.raw(&["BLPOP", "other", "sig2", "5"]).await;
            (r, started.elapsed())
        }
    });
    sleep(Duration::from_millis(300)).await;
    on_each(
        &ms,
        &[&["LPUSH", "sig2", "1"], &["LPUSH", "sig2", "1"], &[]],
    )
    .await;
    let (r, waited) = waiter.await.unwrap();
    assert_eq!(r, "*2\r\n$4\r\nsig2\r\n$1\r\n1\r\n");
    assert!(
        waited < Duration::from_millis(600),
        "woke {waited:?} after the push"
    );
    // RESP3 timeout is null, as from Redis.
    c.raw(&["HELLO", "3"]).await;
    assert_eq!(c.raw(&["BLPOP", "sig", "0.05"]).await, "_\r\n");
}
