//! Scripts through the proxy: Redis's script-cache semantics and every loading pattern, a
//! bounded cache, masters that forget their scripts, each library script answering exactly what
//! one Redis answers, multi-key and reentrant acquisitions with exact rollback, extension rules,
//! unknown and declared scripts, and scripts that would break a master or the proxy. (The TTL
//! cap, binary tokens and the `SET` forms lock owners use are in tests/locks.rs.)

mod support;

use std::time::Duration;

use support::*;

const NOSCRIPT: &str = "-NOSCRIPT No matching script. Please use EVAL.\r\n";

async fn lock(c: &mut Client, key: &str) {
    assert_eq!(
        c.cmd(&["SET", key, "tok", "NX", "PX", "10000"]).await,
        Reply::ok()
    );
}

#[tokio::test]
async fn every_loading_pattern_works() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let release = lua("redispy_release");
    let sha = sha1(&release);
    assert_eq!(sha, "c3f8721cbb97f72bc19e972846bd7aaf91901658");

    // EVALSHA, NOSCRIPT, then EVAL (node-redlock, redsync); EVAL caches, as in Redis.
    lock(&mut c, "lp:1").await;
    assert_eq!(
        c.raw(&["EVALSHA", &sha, "1", "lp:1", "tok"]).await,
        NOSCRIPT
    );
    assert_eq!(
        c.raw(&["EVAL", &release, "1", "lp:1", "tok"]).await,
        ":1\r\n"
    );
    assert_eq!(
        c.raw(&["EVALSHA", &sha, "1", "lp:1", "tok"]).await,
        ":0\r\n"
    );
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]).await, Reply::ok());

    // EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA (redis-py, redlock-rb, rslock).
    lock(&mut c, "lp:2").await;
    assert_eq!(
        c.raw(&["EVALSHA", &sha, "1", "lp:2", "tok"]).await,
        NOSCRIPT
    );
    assert_eq!(c.text(&["SCRIPT", "LOAD", &release]).await, sha);
    assert_eq!(
        c.raw(&["EVALSHA", &sha, "1", "lp:2", "tok"]).await,
        ":1\r\n"
    );
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH", "ASYNC"]).await, Reply::ok());

    // SCRIPT LOAD first, then EVALSHA (RedLock.net), pipelined; the SHA1 in any case.
    lock(&mut c, "lp:3").await;
    c.send(&["SCRIPT", "LOAD", &release]).await;
    c.send(&["EVALSHA", &sha.to_uppercase(), "1", "lp:3", "tok"])
        .await;
    assert_eq!(
        String::from_utf8_lossy(&c.read_raw().await),
        format!("$40\r\n{sha}\r\n")
    );
    assert_eq!(String::from_utf8_lossy(&c.read_raw().await), ":1\r\n");

    // Plain EVAL only (PHP), with CRLF line endings: another SHA1, the same meaning.
    lock(&mut c, "lp:4").await;
    let crlf = release.replace('\n', "\r\n");
    assert_eq!(
        c.raw(&["EVAL", &crlf, "1", "lp:4", "other"]).await,
        ":0\r\n"
    );
    assert_eq!(c.raw(&["EVAL", &crlf, "1", "lp:4", "tok"]).await, ":1\r\n");
    assert_eq!(
        c.cmd(&["SCRIPT", "EXISTS", &sha, &sha1(&crlf), "0000"])
            .await,
        Reply::Array(vec![
            Reply::Integer(1),
            Reply::Integer(1),
            Reply::Integer(0)
        ])
    );
    // The masters never saw the client's text: their caches are empty.
    for m in &ms {
        let mut d = m.client().await;
        assert_eq!(
            d.cmd(&["SCRIPT", "EXISTS", &sha]).await,
            Reply::Array(vec![Reply::Integer(0)])
        );
    }
}

#[tokio::test]
async fn script_command_errors_read_like_redis() {
    let ms = masters(1);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    for (args, want) in [
        (
            vec!["SCRIPT", "FLUSH", "LATER"],
            "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n",
        ),
        (
            vec!["SCRIPT", "KILL"],
            "-NOTBUSY No scripts in execution right now.\r\n",
        ),
        (
            vec!["SCRIPT", "LOAD"],
            "-ERR wrong number of arguments for 'script|load' command\r\n",
        ),
        (
            vec!["SCRIPT", "NOPE"],
            "-ERR unknown subcommand 'NOPE'. Try SCRIPT HELP.\r\n",
        ),
        (
            vec!["EVAL", "return 1", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            vec!["EVAL", "return 1", "-1"],
            "-ERR Number of keys can't be negative\r\n",
        ),
        (
            vec!["EVAL", "return 1", "2", "k"],
            "-ERR Number of keys can't be greater than number of args\r\n",
        ),
        (
            vec!["SCRIPT", "FLUSH", "ASYNC", "SYNC"],
            "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n",
        ),
        (vec!["EVALSHA", "nope", "0"], NOSCRIPT),
        (vec!["EVALSHA", "nope", "-1"], NOSCRIPT),
        // A SHA1 of the right length: `numkeys` is checked before the script is looked up.
        (
            vec!["EVALSHA", &"0".repeat(40), "-1"],
            "-ERR Number of keys can't be negative\r\n",
        ),
        (
            vec!["EVALSHA", &"0".repeat(40), "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (vec!["EVALSHA", &"0".repeat(40), "0"], NOSCRIPT),
    ] {
        assert_eq!(c.raw(&args).await, want, "{args:?}");
    }
}

#[tokio::test]
async fn masters_that_forget_their_scripts_never_cause_noscript() {
    let mut ms = masters(3);
    // Unknown scripts allowed, so the plain one below runs too.
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Majority).await;
    let mut c = Client::connect(&p).await;
    let extend = lua("redispy_extend");
    let release = lua("redispy_release");
    let other = "return 'plain'";
    let shas: Vec<String> = [&extend, &release, &other.to_string()]
        .iter()
        .map(|s| sha1(s))
        .collect();
    for s in [&extend, &release, &other.to_string()] {
        c.text(&["SCRIPT", "LOAD", s]).await;
    }
    // One master restarts empty; the others flush their script caches.
    ms[0].restart();
    for m in &ms[1..] {
        assert_eq!(
            m.client().await.cmd(&["SCRIPT", "FLUSH"]).await,
            Reply::ok()
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        c.cmd(&["SET", "fg", "tok", "NX", "PX", "10000"]).await,
        Reply::ok()
    );
    assert_eq!(
        c.raw(&["EVALSHA", &shas[0], "1", "fg", "tok", "5000", "1"])
            .await,
        ":1\r\n"
    );
    assert_eq!(
        c.raw(&["EVALSHA", &shas[1], "1", "fg", "tok"]).await,
        ":1\r\n"
    );
    assert_eq!(c.raw(&["EVALSHA", &shas[2], "0"]).await, "$5\r\nplain\r\n");
}

#[tokio::test]
async fn a_full_script_cache_never_breaks_a_client() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.script_cache_bytes = 16 * 1024).await;
    let mut c = Client::connect(&p).await;
    // redis-py's loading pattern: SCRIPT LOAD, then EVALSHA (NOSCRIPT → load again).
    let sha = c.text(&["SCRIPT", "LOAD", UNLOCK]).await;
    // Another client fills the cache far beyond its budget.
    let mut flood = Client::connect(&p).await;
    for i in 0..300 {
        let body = format!("return {i} --{}", "x".repeat(1000));
        assert!(!flood.cmd(&["SCRIPT", "LOAD", &body]).await.is_error());
    }
    assert_eq!(
        c.raw(&["SCRIPT", "EXISTS", &sha]).await,
        "*1\r\n:0\r\n",
        "forgotten"
    );
    assert_eq!(
        c.cmd(&["SET", "sc", "t", "NX", "PX", "5000"]).await,
        Reply::ok()
    );
    assert_eq!(
        c.raw(&["EVALSHA", &sha, "1", "sc", "t"]).await,
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(c.text(&["SCRIPT", "LOAD", UNLOCK]).await, sha);
    assert_eq!(c.raw(&["EVALSHA", &sha, "1", "sc", "t"]).await, ":1\r\n");
    // EVAL always works, even for a script too big to cache.
    assert_eq!(
        c.cmd(&["SET", "sc", "t", "NX", "PX", "5000"]).await,
        Reply::ok()
    );
    let big = format!("{UNLOCK} --{}", "y".repeat(40 * 1024));
    assert_eq!(c.raw(&["EVAL", &big, "1", "sc", "t"]).await, ":1\r\n");
    assert!(
        c.raw(&["SCRIPT", "LOAD", &big])
            .await
            .starts_with("-ERR redlock-proxy: a script of")
    );
}

/// How a key stands before a script runs.
#[derive(Clone, Copy, Debug)]
enum Held {
    Mine,
    Other,
    Missing,
}

/// The outcome on one Redis: the reply and, per key, its value and TTL in whole seconds.
type Outcome = (String, Vec<(Option<String>, i64)>);

fn ttl_bucket(pttl: &Reply) -> i64 {
    match pttl {
        Reply::Integer(t) if *t > 0 => (t + 999) / 1000,
        Reply::Integer(t) => *t,
        other => panic!("PTTL answered {other:?}"),
    }
}

async fn state(c: &mut Client, key: &str) -> (Option<String>, i64) {
    let v = match c.cmd(&["GET", key]).await {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    };
    (v, ttl_bucket(&c.cmd(&["PTTL", key]).await))
}

/// Runs `script` on one plain Redis and through the proxy, from the same starting state, and
/// returns both outcomes (for the proxy: the state a majority of masters agree on).
async fn both(
    reference: &Master,
    ms: &[Master],
    proxy: &str,
    script: &str,
    keys: &[String],
    held: &[Held],
    argv: &[&str],
) -> (Outcome, Outcome) {
    let values: Vec<Option<&str>> = held
        .iter()
        .map(|h| match h {
            Held::Mine => Some("tok"),
            Held::Other => Some("other"),
            Held::Missing => None,
        })
        .collect();
    both_values(reference, ms, proxy, script, keys, &values, argv).await
}

/// [`both`] with the keys holding the given values first (set with a 10 s TTL).
async fn both_values(
    reference: &Master,
    ms: &[Master],
    proxy: &str,
    script: &str,
    keys: &[String],
    values: &[Option<&str>],
    argv: &[&str],
) -> (Outcome, Outcome) {
    let mut r = reference.client().await;
    let mut p = Client::connect(proxy).await;
    for (key, v) in keys.iter().zip(values) {
        let Some(token) = *v else {
            continue;
        };
        assert_eq!(
            r.cmd(&["SET", key, token, "PX", "10000"]).await,
            Reply::ok()
        );
        assert_eq!(
            p.cmd(&["SET", key, token, "NX", "PX", "10000"]).await,
            Reply::ok()
        );
    }
    let n = keys.len().to_string();
    let mut args: Vec<&str> = vec!["EVAL", script, &n];
    args.extend(keys.iter().map(|k| k.as_str()));
    args.extend(argv);
    let want = r.raw(&args).await;
    let got = p.raw(&args).await;
    let mut want_state = Vec::new();
    let mut got_state = Vec::new();
    for key in keys {
        want_state.push(state(&mut r, key).await);
        let mut per_master = Vec::new();
        for m in ms {
            per_master.push(state(&mut m.client().await, key).await);
        }
        let agreed = per_master
            .iter()
            .find(|s| per_master.iter().filter(|o| o == s).count() > ms.len() / 2)
            .cloned()
            .unwrap_or((Some("no majority".into()), 0));
        got_state.push(agreed);
    }
    ((want, want_state), (got, got_state))
}

#[tokio::test]
async fn library_scripts_answer_what_one_redis_answers() {
    use Held::*;
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let single: &[&[Held]] = &[&[Mine], &[Other], &[Missing]];
    let multi: &[&[Held]] = &[
        &[Mine, Mine],
        &[Mine, Missing],
        &[Other, Missing],
        &[Missing, Missing],
    ];
    /// Script fixture, ARGV, starting states to try.
    type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a [Held]]);
    let cases: &[Case] = &[
        ("redispy_release", &["tok"], single),
        ("redispy_extend", &["tok", "20000", "0"], single),
        ("redispy_extend", &["tok", "20000", "1"], single),
        ("redispy_reacquire", &["tok", "20000"], single),
        ("redlock5_ACQUIRE_SCRIPT", &["tok", "20000"], multi),
        ("redlock5_EXTEND_SCRIPT", &["tok", "20000"], multi),
        ("redlock5_RELEASE_SCRIPT", &["tok"], multi),
        ("redlock4_lockScript", &["tok", "20000"], multi),
        ("redsync_deleteScript", &["tok"], single),
        ("redsync_old_deleteScript", &["tok"], single),
        ("redsync_touchScript", &["tok", "20000"], single),
        ("redsync_touchWithSetNXScript", &["tok", "20000"], single),
        ("redlocknet_Unlock_lua", &["tok"], single),
        ("redlocknet_Extend_lua", &["tok", "20000"], single),
        ("redlockrb_UNLOCK_SCRIPT", &["tok"], single),
        ("redlockrb_LOCK_SCRIPT", &["tok", "20000", "yes"], single),
        ("redlockrb_LOCK_SCRIPT", &["tok", "20000", "no"], single),
        ("php_ronnylt_unlock", &["tok"], single),
        ("rslock_UNLOCK_SCRIPT", &["tok"], single),
        ("rslock_EXTEND_SCRIPT", &["tok", "20000"], single),
        ("redlockcrate2_UNLOCK_SCRIPT", &["tok"], single),
        ("warlock_parityDel", &["tok"], single),
        ("distlock_RELEASE_SCRIPT", &["tok"], single),
    ];
    let mut case = 0;
    for (name, argv, states) in cases {
        let script = lua(name);
        for held in *states {
            case += 1;
            let keys: Vec<String> = (0..held.len()).map(|i| format!("lib:{case}:{i}")).collect();
            let (want, got) = both(&reference, &ms, &p, &script, &keys, held, argv).await;
            assert_eq!(got, want, "{name} {argv:?} with keys {held:?}");
        }
    }
}

/// A lock script run on a key of another type (a hash) answers as one Redis does: where Redis
/// raises `WRONGTYPE`, the proxy answers the same error (without the `script: <sha>` origin,
/// which would name the proxy's own script), never a missing-masters error; where Redis
/// answers a value, the same value. The hash is left alone.
#[tokio::test]
async fn lock_scripts_on_a_key_of_another_type_answer_what_one_redis_answers() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let cases: &[(&str, &[&str])] = &[
        ("redispy_release", &["tok"]),
        ("redispy_extend", &["tok", "20000", "0"]),
        ("redispy_reacquire", &["tok", "20000"]),
        ("redsync_deleteScript", &["tok"]),
        ("redsync_touchScript", &["tok", "20000"]),
        ("redlocknet_Unlock_lua", &["tok"]),
        ("redlocknet_Extend_lua", &["tok", "20000"]),
        ("rslock_EXTEND_SCRIPT", &["tok", "20000"]),
        ("warlock_parityDel", &["tok"]),
        ("distlock_RELEASE_SCRIPT", &["tok"]),
    ];
    for (i, (name, argv)) in cases.iter().enumerate() {
        let key = format!("hash:{i}");
        for m in ms.iter().chain([&reference]) {
            let mut mc = m.client().await;
            assert_eq!(mc.cmd(&["HSET", &key, "f", "v"]).await, Reply::Integer(1));
        }
        let script = lua(name);
        let mut args: Vec<&str> = vec!["EVAL", &script, "1", &key];
        args.extend(*argv);
        let want = reference.client().await.raw(&args).await;
        let got = c.raw(&args).await;
        match want.find(" script: ") {
            Some(at) if want.starts_with('-') => {
                assert_eq!(got, format!("{}\r\n", &want[..at]), "{name}")
            }
            _ => assert_eq!(got, want, "{name}"),
        }
        for m in &ms {
            let mut mc = m.client().await;
            assert_eq!(mc.cmd(&["HGET", &key, "f"]).await, Reply::Bulk("v".into()));
            assert_eq!(mc.cmd(&["PTTL", &key]).await, Reply::Integer(-1), "{name}");
        }
    }
    // Redisson's read and write lock acquisitions, which the masters run wrapped: the error
    // names no SHA the client never sent.
    let cases: &[(&str, &[&str])] = &[
        (
            "redisson_rw_read_lock",
            &["str", "{str}:f:rwlock_timeout", "30000", "f", "f:write"],
        ),
        ("redisson_rw_write_lock", &["str", "30000", "f:write"]),
    ];
    for (name, rest) in cases {
        for m in ms.iter().chain([&reference]) {
            m.client().await.cmd(&["SET", "str", "v"]).await;
        }
        let script = lua(name);
        let n = if rest.len() == 5 { "2" } else { "1" };
        let mut args: Vec<&str> = vec!["EVAL", &script, n];
        args.extend(*rest);
        let want = reference.client().await.raw(&args).await;
        let at = want.find(" script: ").expect(&want);
        assert_eq!(c.raw(&args).await, format!("{}\r\n", &want[..at]), "{name}");
    }
}

/// Scripts recognised by what they do, not by a known text, run as lock operations even when
/// unknown scripts are refused, and answer what one Redis answers: warlock's `parityRelock`
/// (token and TTL passed in KEYS) and an extension in seconds.
#[tokio::test]
async fn scripts_recognised_by_behaviour_answer_what_one_redis_answers() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let relock = lua("warlock_parityRelock");
    let expire = "local key, token = KEYS[1], ARGV[1]\n\
        if redis.call('GET', key) ~= token then return 0 end\n\
        return redis.call('EXPIRE', key, tonumber(ARGV[2]))";
    let mut r = reference.client().await;
    let mut c = Client::connect(&p.to_string()).await;
    for (i, held) in ["tok", "other", ""].iter().enumerate() {
        let key = format!("behaviour:{i}");
        if !held.is_empty() {
            assert_eq!(
                r.cmd(&["SET", &key, held, "PX", "10000"]).await,
                Reply::ok()
            );
            assert_eq!(
                c.cmd(&["SET", &key, held, "NX", "PX", "10000"]).await,
                Reply::ok()
            );
        }
        let args = ["EVAL", relock.as_str(), "3", &key, "30000", "tok"];
        let want = r.raw(&args).await;
        assert_eq!(c.raw(&args).await, want, "parityRelock with {held:?}");
        assert_eq!(want, if *held == "tok" { "+OK\r\n" } else { ":0\r\n" });
        let args = ["EVAL", expire, "1", &key, "tok", "40"];
        let want = r.raw(&args).await;
        assert_eq!(c.raw(&args).await, want, "expire with {held:?}");
        let mut pttl = Vec::new();
        for m in &ms {
            pttl.push(ttl_bucket(&m.client().await.cmd(&["PTTL", &key]).await));
        }
        let plain = ttl_bucket(&r.cmd(&["PTTL", &key]).await);
        assert!(pttl.iter().all(|t| *t == plain), "{pttl:?} vs {plain}");
        if *held == "tok" {
            assert_eq!(plain, 40, "the TTL is in seconds");
        }
    }
}

#[tokio::test]
async fn a_refused_multi_key_acquire_undoes_exactly_what_it_wrote() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let acquire = lua("redlock5_ACQUIRE_SCRIPT");
    // Another client holds `b` on two masters: a quorum refuses [a, b, c].
    held_by_other(&ms[..2], "mk:b").await;
    assert_eq!(
        c.raw(&[
            "EVAL", &acquire, "3", "mk:a", "mk:b", "mk:c", "tok", "10000"
        ])
        .await,
        ":0\r\n"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(values_on(&ms, "mk:a").await, vec![None, None, None]);
    assert_eq!(values_on(&ms, "mk:c").await, vec![None, None, None]);
    let other = Some("other".to_string());
    assert_eq!(
        values_on(&ms, "mk:b").await,
        vec![other.clone(), other, None],
        "the other holder's keys stay"
    );
    // With `b` held on one master only, a quorum grants all three keys.
    ms[0].client().await.cmd(&["DEL", "mk:b"]).await;
    assert_eq!(
        c.raw(&[
            "EVAL", &acquire, "3", "mk:a", "mk:b", "mk:c", "tok", "10000"
        ])
        .await,
        ":3\r\n"
    );
}

#[tokio::test]
async fn a_refused_reentrant_acquire_keeps_keys_that_were_already_mine() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let touch_or_take = lua("redsync_touchWithSetNXScript");
    // Mine on master 0, someone else's on 1 and 2: refused; my key on 0 must not be deleted
    // by the rollback (it may belong to my earlier, still valid grant).
    let set = |i: usize, v: &'static str| {
        let addr = ms[i].addr();
        async move {
            Client::connect(&addr)
                .await
                .cmd(&["SET", "re:k", v, "PX", "10000"])
                .await
        }
    };
    set(0, "tok").await;
    set(1, "other").await;
    set(2, "other").await;
    assert_eq!(
        c.raw(&["EVAL", &touch_or_take, "1", "re:k", "tok", "20000"])
            .await,
        ":0\r\n"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(values_on(&ms, "re:k").await[0].as_deref(), Some("tok"));
    // Missing on master 0 this time: the attempt created it there, so the rollback removes it.
    ms[0].client().await.cmd(&["DEL", "re:k"]).await;
    assert_eq!(
        c.raw(&["EVAL", &touch_or_take, "1", "re:k", "tok", "20000"])
            .await,
        ":0\r\n"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(values_on(&ms, "re:k").await[0], None);
}

#[tokio::test]
async fn extend_needs_a_majority() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let extend = lua("redispy_extend");
    assert_eq!(
        c.cmd(&["SET", "ex:k", "tok", "NX", "PX", "10000"]).await,
        Reply::ok()
    );
    // The lock expired on two masters: extending on the third alone is not an extension.
    for m in &ms[..2] {
        m.client().await.cmd(&["DEL", "ex:k"]).await;
    }
    assert_eq!(
        c.raw(&["EVAL", &extend, "1", "ex:k", "tok", "20000", "1"])
            .await,
        ":0\r\n"
    );
    // With two of three it is.
    ms[0]
        .client()
        .await
        .cmd(&["SET", "ex:k", "tok", "PX", "10000"])
        .await;
    assert_eq!(
        c.raw(&["EVAL", &extend, "1", "ex:k", "tok", "20000", "1"])
            .await,
        ":1\r\n"
    );
    let mut d = ms[0].client().await;
    assert!(matches!(d.cmd(&["PTTL", "ex:k"]).await, Reply::Integer(t) if t > 19_000));
}

#[tokio::test]
async fn unknown_scripts_are_rejected_by_default_and_need_a_majority_when_allowed() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Majority).await;
    let mut c = Client::connect(&p).await;
    assert_eq!(c.raw(&["EVAL", "return 7", "0"]).await, ":7\r\n");
    // Two masters agree, one differs: the majority answer.
    for (m, v) in ms.iter().zip(["a", "a", "b"]) {
        m.client().await.cmd(&["SET", "u:k", v]).await;
    }
    let read = "return redis.call('get', KEYS[1])";
    assert_eq!(c.raw(&["EVAL", read, "1", "u:k"]).await, "$1\r\na\r\n");
    // No two agree: a clear error.
    ms[1].client().await.cmd(&["SET", "u:k", "c"]).await;
    let no_majority = c.raw(&["EVAL", read, "1", "u:k"]).await;
    assert!(
        no_majority.starts_with("-ERR") && no_majority.contains("majority"),
        "{no_majority}"
    );
    // The default refuses what it does not understand, and still runs lock scripts.
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let refused = c.raw(&["EVAL", "return 7", "0"]).await;
    assert!(
        refused.starts_with("-ERR") && refused.contains("reject"),
        "{refused}"
    );
    assert_eq!(
        c.cmd(&["SET", "u:l", "t", "NX", "PX", "5000"]).await,
        Reply::ok()
    );
    assert_eq!(
        c.raw(&["EVAL", &lua("redispy_release"), "1", "u:l", "t"])
            .await,
        ":1\r\n"
    );
}

#[tokio::test]
async fn declared_scripts_get_their_meaning() {
    let ms = masters(3);
    // An in-house release that answers strings; declared as a release that answers 1/0.
    let own = "local v = redis.call('get', KEYS[2]) if v == ARGV[2] then redis.call('del', KEYS[2]) return 'gone' end return 'kept'";
    let p = proxy_with(&ms, |c| {
        c.unknown_scripts = UnknownScripts::Reject;
        c.scripts = vec![ScriptDecl {
            sha: Some(sha1(own)),
            text: None,
            meaning: Op::Release,
            reply: Answer::OneZero,
            token_arg: 2,
            ttl_arg: 1,
            all_keys: false,
        }];
    })
    .await;
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.cmd(&["SET", "own", "t", "NX", "PX", "5000"]).await,
        Reply::ok()
    );
    // KEYS[1] is what a one-key declaration uses.
    assert_eq!(c.raw(&["EVAL", own, "1", "own", "x", "t"]).await, ":1\r\n");
    assert_eq!(values_on(&ms, "own").await, vec![None, None, None]);
}

#[tokio::test]
async fn redlock_rb_reads_what_a_majority_hold() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let pttl = lua("redlockrb_PTTL_SCRIPT");
    assert_eq!(
        c.raw(&["EVAL", &pttl, "1", "rb:k"]).await,
        "*2\r\n$-1\r\n:-2\r\n",
        "a free lock"
    );
    // Held on two masters with 10 s and 4 s left, someone else's on the third: a majority
    // hold `tok` for at least 4 s.
    for (m, (v, ttl)) in ms
        .iter()
        .zip([("tok", "10000"), ("tok", "4000"), ("x", "20000")])
    {
        m.client().await.cmd(&["SET", "rb:k", v, "PX", ttl]).await;
    }
    match c.cmd(&["EVAL", &pttl, "1", "rb:k"]).await {
        Reply::Array(pair) => {
            assert_eq!(pair[0], Reply::bulk("tok"));
            assert!(
                matches!(pair[1], Reply::Integer(t) if t > 3000 && t <= 4000),
                "{pair:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // No value on a majority: not locked.
    ms[1]
        .client()
        .await
        .cmd(&["SET", "rb:k", "y", "PX", "10000"])
        .await;
    assert_eq!(
        c.raw(&["EVAL", &pttl, "1", "rb:k"]).await,
        "*2\r\n$-1\r\n:-2\r\n"
    );
}

/// A script that returns a table nested 7,000 levels deep. The masters send it; decoding,
/// converting, encoding or dropping it recursively overflowed the proxy's stack and aborted the
/// process (every client lost).
const DEEP: &str = "local t={} local c=t for i=1,7000 do local n={} c[1]=n c=n end c[1]=1 return t";

#[tokio::test]
async fn a_deeply_nested_script_reply_is_an_error_not_a_crash() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Majority).await;
    let mut bystander = Client::connect(&p).await;
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.raw(&["EVAL", DEEP, "0"]).await,
        "-ERR redlock-proxy: a master's reply is nested more than 32 levels deep\r\n"
    );
    // The process is alive, this connection and everyone else's too.
    assert_eq!(c.raw(&["PING"]).await, "+PONG\r\n");
    assert_eq!(
        bystander
            .cmd(&["SET", "deep:l", "t", "NX", "PX", "5000"])
            .await,
        Reply::ok()
    );
    // In the default mode the script never reaches a master.
    let p = proxy_for(&ms).await.to_string();
    let refused = Client::connect(&p).await.raw(&["EVAL", DEEP, "0"]).await;
    assert!(refused.contains("unknown_scripts"), "{refused}");
}

/// Masters that start answering `BUSY` after 300 ms of a running script (Redis's default is 5 s).
fn busy_masters(n: usize) -> Vec<Master> {
    (0..n)
        .map(|_| Master::start_with(&["--busy-reply-threshold", "300"]))
        .collect()
}

/// Tries to take `key` every 100 ms for up to `within`; true when granted.
async fn lock_within(p: &str, key: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if let Some(mut c) = Client::try_connect(p).await
            && c.cmd(&["SET", key, "t", "NX", "PX", "5000"]).await == Reply::ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_busy_with_an_endless_script_are_recovered_by_the_proxy() {
    let ms = busy_masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Majority).await;
    let mut c = Client::connect(&p).await;
    // Every master runs it; none answers in time.
    let r = c.raw(&["EVAL", "while true do end", "0"]).await;
    assert!(r.starts_with('-'), "{r}");
    // The proxy notices the stall, reconnects, sees BUSY and sends SCRIPT KILL: locks work
    // again without anyone's help.
    assert!(
        lock_within(&p, "busy:l", Duration::from_secs(8)).await,
        "masters still busy"
    );
    for m in &ms {
        assert_eq!(m.client().await.raw(&["PING"]).await, "+PONG\r\n");
    }
    // The control: a script that wrote before looping cannot be killed (Redis answers
    // UNKILLABLE), and then nothing recovers: the check above would have seen it.
    let r = c
        .raw(&[
            "EVAL",
            "redis.call('set', KEYS[1], 1) while true do end",
            "1",
            "w",
        ])
        .await;
    assert!(r.starts_with('-'), "{r}");
    assert!(!lock_within(&p, "busy:m", Duration::from_secs(3)).await);
}

#[tokio::test]
async fn by_default_no_client_script_can_touch_what_it_did_not_name() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.cmd(&["SET", "victim", "t", "NX", "PX", "10000"]).await,
        Reply::ok()
    );
    for script in [
        "return redis.call('flushall')",
        "return redis.call('del', 'victim')",
        "return redis.call('set', KEYS[1], 'x')",
        "return redis.call('keys', '*')",
        "return redis.call('select', 1)",
        "while true do end",
    ] {
        let r = c.raw(&["EVAL", script, "1", "k"]).await;
        assert!(
            r.starts_with("-ERR redlock-proxy does not know what script"),
            "{script}: {r}"
        );
    }
    assert_eq!(
        values_on(&ms, "victim").await,
        vec![Some("t".to_string()); 3]
    );
    assert_eq!(values_on(&ms, "k").await, vec![None, None, None]);
}

/// A signal list's elements and TTL bucket.
async fn list_state(c: &mut Client, key: &str) -> (String, i64) {
    let items = c.raw(&["LRANGE", key, "0", "-1"]).await;
    (items, ttl_bucket(&c.cmd(&["PTTL", key]).await))
}

/// python-redis-lock 4.0's unlock, reset and extend (`KEYS` = lock, signal list) from every
/// starting state of the lock (the caller's, another's, missing) and with an old signal list
/// or none: the reply, the lock and the signal list (elements and TTL) a majority of masters
/// hold are what one plain Redis answers and holds, with unknown scripts refused.
#[tokio::test]
async fn python_redis_lock_scripts_answer_what_one_redis_answers() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut r = reference.client().await;
    let mut c = Client::connect(&p).await;
    let mut direct = Vec::new();
    for m in &ms {
        direct.push(m.client().await);
    }
    let cases: [(&str, &[&str]); 3] = [
        ("redislock4_UNLOCK_SCRIPT", &["tok", "1000"]),
        ("redislock4_RESET_SCRIPT", &["tok", "1000"]),
        ("redislock4_EXTEND_SCRIPT", &["tok", "30"]),
    ];
    let mut case = 0;
    for (name, argv) in cases {
        let script = lua(name);
        for held in ["tok", "other", ""] {
            for old_signal in [false, true] {
                case += 1;
                let (key, signal) = (format!("lock:{case}"), format!("lock-signal:{case}"));
                if !held.is_empty() {
                    let set = ["SET", key.as_str(), held, "PX", "10000"];
                    assert_eq!(r.cmd(&set).await, Reply::ok());
                    let nx = ["SET", key.as_str(), held, "NX", "PX", "10000"];
                    assert_eq!(c.cmd(&nx).await, Reply::ok());
                }
                if old_signal {
                    for d in direct.iter_mut().chain([&mut r]) {
                        d.cmd(&["RPUSH", &signal, "a", "b"]).await;
                        d.cmd(&["PEXPIRE", &signal, "5000"]).await;
                    }
                }
                let mut args = vec!["EVAL", script.as_str(), "2", &key, &signal];
                args.extend(argv);
                let want = r.raw(&args).await;
                let got = c.raw(&args).await;
                let what = format!("{name} with {held:?}, old signal {old_signal}");
                assert_eq!(got, want, "reply of {what}");
                let want = (state(&mut r, &key).await, list_state(&mut r, &signal).await);
                let mut per_master = Vec::new();
                for d in direct.iter_mut() {
                    per_master.push((state(d, &key).await, list_state(d, &signal).await));
                }
                let agreed = per_master.iter().filter(|s| **s == want).count();
                assert!(
                    agreed >= 2,
                    "{what}: one Redis {want:?}, masters {per_master:?}"
                );
            }
        }
    }
}

/// A hash lock's fields and TTL bucket.
async fn hash_state(c: &mut Client, key: &str) -> (String, i64) {
    let fields = c.raw(&["HGETALL", key]).await;
    (fields, ttl_bucket(&c.cmd(&["PTTL", key]).await))
}

/// A reply with any PTTL in it bucketed to whole seconds (masters differ by milliseconds), and
/// an error cut to its code (a script error names the script that ran, and the masters run the
/// proxy's own).
fn bucketed(r: Reply) -> Reply {
    match r {
        Reply::Integer(t) if t > 100 => Reply::Integer(ttl_bucket(&Reply::Integer(t))),
        Reply::Error(e) => {
            let code = e.split(|b| *b == b' ').next().unwrap_or_default().to_vec();
            Reply::Error(code.into())
        }
        r => r,
    }
}

/// Redisson's `RLock` scripts (lock, unlock with its latch, the older unlock, renew and
/// forceUnlock) from each starting state of the lock (missing, held by the caller once,
/// re-entered, held by another, expired): the reply, the hash and the latch a majority of
/// masters hold are what one plain Redis answers and holds, with unknown scripts refused (so
/// every one of them runs as a hash-lock quorum operation). A retried unlock (same latch)
/// answers what the first one did.
#[tokio::test]
async fn redisson_scripts_answer_what_one_redis_answers() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut r = reference.client().await;
    let mut c = Client::connect(&p).await;
    let mut direct = Vec::new();
    for m in &ms {
        direct.push(m.client().await);
    }
    let lock = lua("redisson_lock");
    let me = "uuid-1:7";
    for cl in [&mut r, &mut c] {
        let take = ["EVAL", lock.as_str(), "1", "rlock:mine", "120000", me];
        assert_eq!(cl.cmd(&take).await, Reply::Nil);
    }
    let mut case = 0;
    for name in [
        "redisson_lock",
        "redisson_lock_old",
        "redisson_unlock",
        "redisson_unlock_old",
        "redisson_renew",
        "redisson_LockTask_chunk",
        "redisson_forceUnlock",
    ] {
        let script = lua(name);
        for start in [
            "missing",
            "mine",
            "mine twice",
            "other",
            "expired",
            "a string",
        ] {
            case += 1;
            let key = format!("rlock:{case}");
            let channel = format!("redisson_lock__channel:{{rlock:{case}}}");
            let latch = format!("redisson_unlock_latch:{{rlock:{case}}}:req{case}");
            let (holder, times, ttl) = match start {
                "missing" => ("", 0, "10000"),
                "mine" => (me, 1, "10000"),
                "mine twice" => (me, 2, "10000"),
                "other" => ("uuid-2:9", 1, "10000"),
                "a string" => ("", 0, "10000"),
                _ => (me, 1, "60"),
            };
            for _ in 0..times {
                let take = ["EVAL", lock.as_str(), "1", key.as_str(), ttl, holder];
                assert_eq!(r.cmd(&take).await, Reply::Nil);
                assert_eq!(c.cmd(&take).await, Reply::Nil, "{name}: set up {start}");
            }
            if start == "a string" {
                let set = ["SET", key.as_str(), "v", "PX", "10000"];
                assert_eq!(r.cmd(&set).await, Reply::ok());
                assert_eq!(c.cmd(&set).await, Reply::ok());
            }
            if start == "expired" {
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            let args: Vec<&str> = match name {
                "redisson_lock" | "redisson_lock_old" | "redisson_renew" => {
                    vec!["1", &key, "30000", me]
                }
                // With a second lock, held by the caller, renewed alongside.
                "redisson_LockTask_chunk" => vec!["2", &key, "rlock:mine", "30000", me, me],
                "redisson_unlock" => {
                    vec![
                        "3", &key, &channel, &latch, "0", "30000", me, "publish", "5000",
                    ]
                }
                "redisson_unlock_old" => vec!["2", &key, &channel, "0", "30000", me],
                _ => vec!["2", &key, &channel, "0", "publish"],
            };
            let mut full = vec!["EVALSHA", ""];
            let sha = sha1(&script);
            full[1] = &sha;
            full.extend(&args);
            // Redisson's way: EVALSHA, and EVAL on NOSCRIPT.
            let call = async |cl: &mut Client| {
                let first = cl.cmd(&full).await;
                if matches!(&first, Reply::Error(e) if e.starts_with(b"NOSCRIPT")) {
                    let mut eval = vec!["EVAL", script.as_str()];
                    eval.extend(&args);
                    bucketed(cl.cmd(&eval).await)
                } else {
                    bucketed(first)
                }
            };
            let want = call(&mut r).await;
            let got = call(&mut c).await;
            let what = format!("{name} from {start}");
            assert_eq!(got, want, "reply of {what}");
            if name == "redisson_unlock" {
                // A retry with the same latch answers the same and changes nothing.
                assert_eq!(call(&mut c).await, want, "retried {what}");
                assert_eq!(call(&mut r).await, want, "retried {what} on one Redis");
            }
            let want = (hash_state(&mut r, &key).await, state(&mut r, &latch).await);
            let mut per_master = Vec::new();
            for d in direct.iter_mut() {
                per_master.push((hash_state(d, &key).await, state(d, &latch).await));
            }
            let agreed = per_master.iter().filter(|s| **s == want).count();
            assert!(
                agreed >= 2,
                "{what}: one Redis {want:?}, masters {per_master:?}"
            );
        }
    }
}

/// A refused Redisson lock is undone exactly where it wrote: a hash it created is deleted, a
/// re-entry is counted back down, and another holder's hash is left alone; the refusal answers
/// how long a majority still hold the lock (the quorum-th largest PTTL).
#[tokio::test]
async fn a_refused_redisson_lock_undoes_exactly_what_it_wrote() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut c = Client::connect(&p).await;
    let mut direct = Vec::new();
    for m in &ms {
        direct.push(m.client().await);
    }
    let lock = lua("redisson_lock");
    let me = "uuid-1:7";
    // Another holds it on masters 1 and 2 (TTLs 8 s and 6 s); master 0 is free.
    for (d, ttl) in direct.iter_mut().zip(["0", "8000", "6000"]).skip(1) {
        d.cmd(&["HSET", "r1", "uuid-2:9", "1"]).await;
        d.cmd(&["PEXPIRE", "r1", ttl]).await;
    }
    let got = c.cmd(&["EVAL", &lock, "1", "r1", "30000", me]).await;
    let Reply::Integer(pttl) = got else {
        panic!("refusal answers a PTTL: {got:?}")
    };
    assert!(
        (5000..=6000).contains(&pttl),
        "the quorum-th largest: {pttl}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(direct[0].cmd(&["EXISTS", "r1"]).await, Reply::Integer(0));
    for d in direct.iter_mut().skip(1) {
        assert_eq!(
            d.raw(&["HGETALL", "r1"]).await,
            "*2\r\n$8\r\nuuid-2:9\r\n$1\r\n1\r\n"
        );
    }
    // The caller holds it on master 0 alone (count 1); another on masters 1 and 2: the
    // re-entry is refused and master 0 counted back to 1.
    direct[0].cmd(&["HSET", "r2", me, "1"]).await;
    direct[0].cmd(&["PEXPIRE", "r2", "9000"]).await;
    for d in direct.iter_mut().skip(1) {
        d.cmd(&["HSET", "r2", "uuid-2:9", "1"]).await;
        d.cmd(&["PEXPIRE", "r2", "7000"]).await;
    }
    let got = c.cmd(&["EVAL", &lock, "1", "r2", "30000", me]).await;
    assert!(matches!(got, Reply::Integer(t) if t > 6000), "{got:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        direct[0].cmd(&["HGET", "r2", me]).await,
        Reply::Bulk("1".into())
    );
    // Granted where a majority is free: nil, and the hash on every master.
    let got = c.cmd(&["EVAL", &lock, "1", "r3", "30000", me]).await;
    assert_eq!(got, Reply::Nil);
    for d in direct.iter_mut() {
        assert_eq!(d.cmd(&["HGET", "r3", me]).await, Reply::Bulk("1".into()));
    }
}

/// A fenced lock's reply with its token masked (the proxy's tokens are not one Redis's
/// counter) and PTTLs bucketed; the token, if any, returned beside it.
fn fenced_reply(r: Reply) -> (Reply, Option<i64>) {
    match r {
        Reply::Array(items) => match items.as_slice() {
            [Reply::Integer(-1), Reply::Integer(t)] if *t > 0 => (
                Reply::Array(vec![Reply::Integer(-1), Reply::Simple("token".into())]),
                Some(*t),
            ),
            [pttl, Reply::Integer(-1)] => (
                Reply::Array(vec![bucketed(pttl.clone()), Reply::Integer(-1)]),
                None,
            ),
            _ => panic!("a fenced lock answered {items:?}"),
        },
        r => (bucketed(r), None),
    }
}

/// Redisson's `RFencedLock` (lock, and lockAndGetToken) from each starting state answers and
/// leaves the lock as one Redis does, and every grant's token is larger than the one before
/// (also across re-entry), with `GET` of the counter answering the latest token, as
/// `getToken()` reads it.
#[tokio::test]
async fn redisson_fenced_lock_answers_what_one_redis_answers_with_growing_tokens() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut r = reference.client().await;
    let mut c = Client::connect(&p).await;
    let mut direct = Vec::new();
    for m in &ms {
        direct.push(m.client().await);
    }
    let lock = lua("redisson_lock");
    let me = "uuid-1:7";
    let mut last = 0;
    let mut case = 0;
    for name in ["redisson_fenced_lock", "redisson_fenced_lockAndGetToken"] {
        let script = lua(name);
        for start in ["missing", "mine", "mine twice", "other", "expired"] {
            case += 1;
            let key = format!("flock:{case}");
            let counter = format!("redisson_lock_token:{{flock:{case}}}");
            let (holder, times, ttl) = match start {
                "missing" => ("", 0, "10000"),
                "mine" => (me, 1, "10000"),
                "mine twice" => (me, 2, "10000"),
                "other" => ("uuid-2:9", 1, "10000"),
                _ => (me, 1, "60"),
            };
            for _ in 0..times {
                let take = ["EVAL", lock.as_str(), "1", key.as_str(), ttl, holder];
                assert_eq!(r.cmd(&take).await, Reply::Nil);
                assert_eq!(c.cmd(&take).await, Reply::Nil);
            }
            if start == "expired" {
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            let call = ["EVAL", &script, "2", &key, &counter, "30000", me];
            let (want, _) = fenced_reply(r.cmd(&call).await);
            let (got, token) = fenced_reply(c.cmd(&call).await);
            let what = format!("{name} from {start}");
            assert_eq!(got, want, "reply of {what}");
            let granted = matches!(&got, Reply::Nil | Reply::Array(_))
                && !matches!(&got, Reply::Array(a) if a.get(1) == Some(&Reply::Integer(-1)));
            if granted {
                let now = match c.cmd(&["GET", &counter]).await {
                    Reply::Bulk(b) => String::from_utf8_lossy(&b).parse::<i64>().unwrap(),
                    other => panic!("{what}: GET of the counter answered {other:?}"),
                };
                if let Some(t) = token {
                    assert_eq!(t, now, "{what}: the token answered is the one kept");
                }
                assert!(now > last, "{what}: token {now} after {last}");
                // Taken again by the caller (re-entry): a larger token still.
                let (_, again) = fenced_reply(c.cmd(&call).await);
                let now2 = match c.cmd(&["GET", &counter]).await {
                    Reply::Bulk(b) => String::from_utf8_lossy(&b).parse::<i64>().unwrap(),
                    other => panic!("{what}: {other:?}"),
                };
                assert!(now2 > now, "{what}: re-entry token {now2} after {now}");
                if let Some(t) = again {
                    assert_eq!(t, now2);
                }
                last = now2;
                r.cmd(&call).await;
            }
            let want = hash_state(&mut r, &key).await;
            let mut per_master = Vec::new();
            for d in direct.iter_mut() {
                per_master.push(hash_state(d, &key).await);
            }
            let agreed = per_master.iter().filter(|s| **s == want).count();
            assert!(
                agreed >= 2,
                "{what}: one Redis {want:?}, masters {per_master:?}"
            );
        }
    }
}

/// Redisson's lock, renewal and unlock with one master stopped (SIGSTOP): granted and answered
/// by the other two; a waiter subscribed to the lock's channel gets the release once; a retried
/// unlock (same latch) answers what the first did; once the master resumes, its late copy of
/// the unlock leaves it agreeing with the others.
#[tokio::test]
async fn redisson_with_a_stopped_master() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut c = Client::connect(&p).await;
    let (lock, renew, unlock) = (
        lua("redisson_lock"),
        lua("redisson_renew"),
        lua("redisson_unlock"),
    );
    let me = "uuid-1:7";
    let channel = "redisson_lock__channel:{rs}";
    let mut sub = Client::connect(&p).await;
    sub.send(&["SUBSCRIBE", channel]).await;
    sub.read_raw().await;
    ms[2].pause();
    let take = ["EVAL", lock.as_str(), "1", "rs", "10000", me];
    assert_eq!(c.cmd(&take).await, Reply::Nil, "granted by two of three");
    let again = ["EVAL", renew.as_str(), "1", "rs", "10000", me];
    assert_eq!(c.cmd(&again).await, Reply::Integer(1), "renewed by two");
    let latch = "redisson_unlock_latch:{rs}:r1";
    let release = [
        "EVAL", &unlock, "3", "rs", channel, latch, "0", "10000", me, "publish", "5000",
    ];
    assert_eq!(c.cmd(&release).await, Reply::Integer(1));
    let message = sub.read_raw().await;
    assert_eq!(
        String::from_utf8_lossy(&message),
        "*3\r\n$7\r\nmessage\r\n$27\r\nredisson_lock__channel:{rs}\r\n$1\r\n0\r\n"
    );
    assert_eq!(
        c.cmd(&release).await,
        Reply::Integer(1),
        "a retry: the latch"
    );
    ms[2].resume();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for m in &ms {
        assert_eq!(
            m.client().await.cmd(&["EXISTS", "rs"]).await,
            Reply::Integer(0)
        );
    }
    // No second copy of the message reaches the subscriber.
    sub.send(&["PING"]).await;
    assert_eq!(
        String::from_utf8_lossy(&sub.read_raw().await),
        "*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    );
}

// ---------------------------------------------------------------------------------------------
// More libraries: bsm/redislock (Go), pottery and aioredlock (Python), short hand-written forms.

/// A starting state for [`both_from`]: as [`Held`], plus a key of the caller's that expired.
#[derive(Clone, Copy, Debug)]
enum Start {
    Held(Held),
    Expired,
}

/// [`both`], with expired keys too: the key is set with a 30 ms TTL on one Redis and through
/// the proxy, then left to expire before the script runs.
async fn both_from(
    reference: &Master,
    ms: &[Master],
    proxy: &str,
    script: &str,
    keys: &[String],
    from: &[Start],
    argv: &[&str],
) -> (Outcome, Outcome) {
    let mut expired = false;
    for (key, f) in keys.iter().zip(from) {
        if let Start::Expired = f {
            let set = ["SET", key, "tok", "NX", "PX", "30"];
            assert_eq!(reference.client().await.cmd(&set).await, Reply::ok());
            // A 30 ms grant may be refused through the proxy on a loaded machine (less than
            // the minimum validity left by the time a quorum answered): tried again.
            let mut granted = Reply::Nil;
            for _ in 0..20 {
                granted = Client::connect(proxy).await.cmd(&set).await;
                if granted == Reply::ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(granted, Reply::ok());
            expired = true;
        }
    }
    if expired {
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    let held: Vec<Held> = from
        .iter()
        .map(|f| match f {
            Start::Held(h) => *h,
            Start::Expired => Held::Missing,
        })
        .collect();
    both(reference, ms, proxy, script, keys, &held, argv).await
}

/// Runs scripts from starting states on one plain redis-server and through the proxy, on fresh
/// keys (`{prefix}:{case}:{i}`, a new case per script and state), and requires the same reply
/// and the same keys (see [`both_from`]).
struct FromEachStart<'a> {
    reference: &'a Master,
    ms: &'a [Master],
    proxy: &'a str,
    prefix: &'a str,
    case: usize,
}

impl<'a> FromEachStart<'a> {
    fn new(reference: &'a Master, ms: &'a [Master], proxy: &'a str, prefix: &'a str) -> Self {
        FromEachStart {
            reference,
            ms,
            proxy,
            prefix,
            case: 0,
        }
    }

    /// `script` with `argv` from each of `states` (one `Start` per key).
    async fn same(&mut self, script: &str, argv: &[&str], states: &[&[Start]]) {
        for from in states {
            self.case += 1;
            let keys: Vec<String> = (0..from.len())
                .map(|i| format!("{}:{}:{i}", self.prefix, self.case))
                .collect();
            let (want, got) = both_from(
                self.reference,
                self.ms,
                self.proxy,
                script,
                &keys,
                from,
                argv,
            )
            .await;
            assert_eq!(got, want, "{script} {argv:?} from {from:?}");
        }
    }
}

/// Every script of these libraries, from every starting state (missing, held by the caller,
/// held by another, expired; for multi-key scripts the mixes), answers through the proxy (3
/// masters, unknown scripts refused) what one plain redis-server answers, and leaves the same
/// value and TTL on a majority of masters.
#[tokio::test]
async fn more_library_scripts_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let multi: &[&[Start]] = &[
        &[H(Mine), H(Mine)],
        &[H(Mine), H(Missing)],
        &[H(Missing), H(Mine)],
        &[H(Mine), H(Other)],
        &[H(Other), H(Missing)],
        &[H(Missing), H(Missing)],
        &[Expired, H(Mine)],
        &[Expired, Expired],
    ];
    let setnx = "local key = KEYS[1]\nlocal value = ARGV[1]\nlocal ttl = ARGV[2]\n\
        if redis.call('SETNX', key, value) == 1 then\n  redis.call('EXPIRE', key, ttl)\n  return 1\n\
        else\n  return 0\nend";
    let ok_fail = "local val = redis.call(\"get\", KEYS[1])\n\
        if not val or val == ARGV[1] then\n  redis.call(\"set\", KEYS[1], ARGV[1], \"PX\", ARGV[2])\n\
        return \"OK\"\nelse\n  return \"FAIL\"\nend";
    /// Script text, ARGV, starting states to try.
    type Case<'a> = (String, &'a [&'a str], &'a [&'a [Start]]);
    let cases: Vec<Case> = vec![
        (lua("bsm_obtain"), &["tok", "3", "20000"], single),
        (lua("bsm_obtain"), &["tok", "3", "20000"], multi),
        (lua("bsm_refresh"), &["tok", "20000"], single),
        (lua("bsm_refresh"), &["tok", "20000"], multi),
        (lua("bsm_release"), &["tok"], single),
        (lua("bsm_release"), &["tok"], multi),
        (lua("bsm_v0_obtain"), &["tok", "3", "20000"], single),
        (lua("bsm_v0_refresh"), &["tok", "20000"], single),
        (lua("bsm_v0_release"), &["tok"], single),
        (lua("pottery_extend"), &["tok", "20000"], single),
        (lua("pottery_release"), &["tok"], single),
        (lua("aioredlock_SET_LOCK_SCRIPT"), &["tok", "20000"], single),
        (lua("aioredlock_UNSET_LOCK_SCRIPT"), &["tok"], single),
        (lua("spring_OBTAIN_LOCK_SCRIPT"), &["tok", "20000"], single),
        (lua("spring_RENEW_SCRIPT"), &["tok", "20000"], single),
        (lua("spring_spin_UNLINK_UNLOCK_SCRIPT"), &["tok"], single),
        (lua("shedlock_updLuaScript"), &["tok", "20000"], single),
        (lua("shedlock_delLuaScript"), &["tok"], single),
        (lua("laravel_releaseLock"), &["tok"], single),
        (setnx.to_string(), &["tok", "20"], single),
        (ok_fail.to_string(), &["tok", "20000"], single),
    ];
    let mut case = 0;
    for (script, argv, states) in &cases {
        for from in *states {
            case += 1;
            let keys: Vec<String> = (0..from.len())
                .map(|i| format!("more:{case}:{i}"))
                .collect();
            let (want, got) = both_from(&reference, &ms, &p, script, &keys, from, argv).await;
            assert_eq!(
                got,
                want,
                "{} {argv:?} from {from:?}",
                script.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
            );
        }
    }
}

/// bsm/redislock's obtain with a prefix shorter than the value (a token followed by metadata)
/// is a plain acquisition through the proxy: it never takes a held key back, where one Redis
/// would (the documented difference: a refusal, never an extra grant).
#[tokio::test]
async fn bsm_obtain_with_metadata_never_takes_a_held_key_back() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let obtain = lua("bsm_obtain");
    let mut r = reference.client().await;
    let mut c = Client::connect(&p).await;
    // Free: both grant.
    let args = ["EVAL", obtain.as_str(), "1", "meta:k", "tokA", "3", "20000"];
    assert_eq!(r.raw(&args).await, "+OK\r\n");
    assert_eq!(c.raw(&args).await, "+OK\r\n");
    // The same token with other metadata: one Redis takes it back, the proxy refuses.
    let again = ["EVAL", obtain.as_str(), "1", "meta:k", "tokB", "3", "20000"];
    assert_eq!(r.raw(&again).await, "+OK\r\n");
    assert_eq!(c.raw(&again).await, "$-1\r\n");
    assert_eq!(
        values_on(&ms, "meta:k").await,
        vec![Some("tokA".to_string()); 3]
    );
    // Another token: both refuse.
    let other = ["EVAL", obtain.as_str(), "1", "meta:k", "xyzA", "3", "20000"];
    assert_eq!(r.raw(&other).await, "$-1\r\n");
    assert_eq!(c.raw(&other).await, "$-1\r\n");
    // A caller whose whole token is a prefix of the holder's value: one Redis overwrites the
    // holder (two clients then think they hold it); the proxy counts the value as another's.
    let prefix = ["EVAL", obtain.as_str(), "1", "meta:k", "tok", "3", "20000"];
    assert_eq!(r.raw(&prefix).await, "+OK\r\n");
    assert_eq!(c.raw(&prefix).await, "$-1\r\n");
    assert_eq!(
        values_on(&ms, "meta:k").await,
        vec![Some("tokA".to_string()); 3]
    );
}

/// One library's lock as the contention test drives it: acquire script and ARGV (the token
/// first, filled in per attempt), its grant reply, and the release script.
struct Drive {
    name: &'static str,
    acquire: String,
    acquire_args: &'static [&'static str],
    granted: &'static str,
    release: String,
}

/// Workers each take the lock `rounds` times (retrying with a short random pause), read a
/// counter kept in a Redis the proxy does not use, sleep, write it back plus one, and
/// release. Answers the counter's final value. With `bypass`, workers skip the lock.
async fn count_under_lock(
    proxy: &str,
    counter: &Master,
    drive: &Drive,
    workers: usize,
    rounds: usize,
    bypass: bool,
) -> i64 {
    let key = format!("count:{}:{bypass}", drive.name);
    counter.client().await.cmd(&["SET", &key, "0"]).await;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let proxy = proxy.to_string();
        let counter = counter.addr();
        let acquire = drive.acquire.clone();
        let release = drive.release.clone();
        let args: Vec<String> = drive.acquire_args.iter().map(|a| a.to_string()).collect();
        let granted = drive.granted;
        let key = key.clone();
        let lock = format!("contended:{}", drive.name);
        tasks.push(tokio::spawn(async move {
            let mut p = Client::connect(&proxy).await;
            let mut k = Client::connect(&counter).await;
            for round in 0..rounds {
                let token = format!("w{w}r{round:03}");
                if !bypass {
                    let mut call = vec!["EVAL", acquire.as_str(), "1", lock.as_str(), &token];
                    call.extend(args.iter().map(|a| a.as_str()));
                    let mut tries = 0;
                    while p.raw(&call).await != granted {
                        tries += 1;
                        assert!(tries < 5_000, "never granted");
                        let pause = 1 + rand::random::<u64>() % 4;
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                    }
                }
                let n: i64 = k.text(&["GET", &key]).await.parse().expect("a number");
                tokio::time::sleep(Duration::from_millis(2)).await;
                k.cmd(&["SET", &key, &(n + 1).to_string()]).await;
                if !bypass {
                    let done = p
                        .raw(&["EVAL", release.as_str(), "1", lock.as_str(), &token])
                        .await;
                    assert!(!done.starts_with('-'), "release: {done}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    counter
        .client()
        .await
        .text(&["GET", &key])
        .await
        .parse()
        .expect("a number")
}

/// Contention through the proxy with each library's own scripts: no update is lost. The
/// same run with the lock bypassed loses updates (the test can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_libraries_lose_no_update_under_contention() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let counter = Master::start();
    let ok_fail = "local val = redis.call('get', KEYS[1]) if not val or val == ARGV[1] then \
        redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 'OK' else return 'FAIL' end";
    let setnx = "local key = KEYS[1] if redis.call('SETNX', key, ARGV[1]) == 1 then \
        redis.call('EXPIRE', key, ARGV[2]) return 1 else return 0 end";
    let refresh_or_set = "if redis.call('get', KEYS[1]) == ARGV[1] then \
        return redis.call('pexpire', KEYS[1], ARGV[2]) end \
        return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])";
    let tostring_release = "local mine = redis.call('get', KEYS[1]) == ARGV[1] \
        if mine then redis.call('del', KEYS[1]) end return tostring(mine)";
    let guarded = "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then \
        if tonumber(ARGV[2]) > 0 then redis.call('pexpire', KEYS[1], ARGV[2]) end \
        return 1 end return 0";
    let table_release = "if redis.call('get', KEYS[1]) == ARGV[1] then \
        redis.call('del', KEYS[1]) return {1} end return {0}";
    let drives = [
        Drive {
            name: "bsm",
            acquire: lua("bsm_obtain"),
            acquire_args: &["5", "5000"],
            granted: "+OK\r\n",
            release: lua("bsm_release"),
        },
        Drive {
            name: "aioredlock",
            acquire: lua("aioredlock_SET_LOCK_SCRIPT"),
            acquire_args: &["5000"],
            granted: "+OK\r\n",
            release: lua("aioredlock_UNSET_LOCK_SCRIPT"),
        },
        Drive {
            name: "ok_fail",
            acquire: ok_fail.to_string(),
            acquire_args: &["5000"],
            granted: "$2\r\nOK\r\n",
            release: lua("pottery_release"),
        },
        Drive {
            name: "setnx",
            acquire: setnx.to_string(),
            acquire_args: &["5"],
            granted: ":1\r\n",
            release: lua("bsm_v0_release"),
        },
        // Shapes recognised since: a refresh answered apart from a fresh grant, a release
        // answering `tostring` of its comparison; a guarded expiry, a one-element table.
        Drive {
            name: "refresh_or_set",
            acquire: refresh_or_set.to_string(),
            acquire_args: &["5000"],
            granted: "+OK\r\n",
            release: tostring_release.to_string(),
        },
        Drive {
            name: "guarded",
            acquire: guarded.to_string(),
            acquire_args: &["5000"],
            granted: ":1\r\n",
            release: table_release.to_string(),
        },
    ];
    let (workers, rounds) = (4, 8);
    for drive in &drives {
        let locked = count_under_lock(&p, &counter, drive, workers, rounds, false).await;
        assert_eq!(
            locked,
            (workers * rounds) as i64,
            "{}: lost updates",
            drive.name
        );
    }
    // Negative control: the same workload without the lock loses updates.
    let bypassed = count_under_lock(&p, &counter, &drives[0], workers, rounds, true).await;
    assert!(
        bypassed < (workers * rounds) as i64,
        "the bypassed run lost nothing ({bypassed}): the test cannot tell"
    );
}

/// The TTL reads (pottery's `_acquired_script`, bsm/redislock v0's pttl, aioredlock's
/// `GET_LOCK_TTL_SCRIPT`) from each starting state answer what one Redis answers: the same
/// constant when the lock is not the caller's, and a TTL within a few milliseconds (the same
/// whole seconds) when it is. A majority decides: a lock held on one master of three is not
/// held.
#[tokio::test]
async fn ttl_reads_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let mut case = 0;
    for name in [
        "pottery_acquired",
        "bsm_v0_pttl",
        "aioredlock_GET_LOCK_TTL_SCRIPT",
    ] {
        let script = lua(name);
        for from in single {
            case += 1;
            let keys = vec![format!("ttl:{case}")];
            let ((want, want_state), (got, got_state)) =
                both_from(&reference, &ms, &p, &script, &keys, from, &["tok"]).await;
            assert_eq!(got_state, want_state, "{name} from {from:?}");
            let number = |r: &str| {
                r.strip_prefix(':')
                    .and_then(|n| n.trim_end().parse::<i64>().ok())
            };
            match (number(&want), number(&got)) {
                (Some(w), Some(g)) if w > 100 => {
                    assert!(
                        (w - g).abs() < 200,
                        "{name} from {from:?}: {want:?} vs {got:?}"
                    );
                }
                _ => assert_eq!(got, want, "{name} from {from:?}"),
            }
            if matches!(from, [H(Mine)]) {
                assert!(number(&want).is_some_and(|t| t > 0), "{name}: {want:?}");
            }
        }
    }
    // bsm/redislock's pttl.lua over one and two keys: the smallest TTL when every key is
    // the caller's, else nil.
    let bsm = lua("bsm_pttl");
    let multi: &[&[Start]] = &[
        &[H(Mine)],
        &[H(Other)],
        &[Expired],
        &[H(Mine), H(Mine)],
        &[H(Mine), H(Missing)],
        &[H(Mine), H(Other)],
        &[Expired, H(Mine)],
    ];
    for from in multi {
        case += 1;
        let keys: Vec<String> = (0..from.len()).map(|i| format!("ttl:{case}:{i}")).collect();
        let ((want, want_state), (got, got_state)) =
            both_from(&reference, &ms, &p, &bsm, &keys, from, &["tok"]).await;
        assert_eq!(got_state, want_state, "bsm pttl from {from:?}");
        if from.iter().all(|f| matches!(f, H(Mine))) {
            let ms_of = |r: &str| r.trim_start_matches(':').trim_end().parse::<i64>().unwrap();
            assert!(
                (ms_of(&want) - ms_of(&got)).abs() < 200,
                "{want:?} vs {got:?}"
            );
        } else {
            assert_eq!(got, "$-1\r\n", "bsm pttl from {from:?}");
            assert_eq!(got, want, "bsm pttl from {from:?}");
        }
    }
    // Two keys with different TTLs: the smaller one.
    let mut r = reference.client().await;
    let mut c = Client::connect(&p).await;
    for (key, ttl) in [("ttl:a", "10000"), ("ttl:b", "4000")] {
        r.cmd(&["SET", key, "tok", "PX", ttl]).await;
        c.cmd(&["SET", key, "tok", "NX", "PX", ttl]).await;
    }
    for client in [&mut r, &mut c] {
        match client
            .cmd(&["EVAL", &bsm, "2", "ttl:a", "ttl:b", "tok"])
            .await
        {
            Reply::Integer(t) => assert!(t > 3000 && t <= 4000, "{t}"),
            other => panic!("{other:?}"),
        }
    }
    // Held on one master only: not held, for the proxy.
    ms[0]
        .client()
        .await
        .cmd(&["SET", "ttl:one", "tok", "PX", "10000"])
        .await;
    let mut c = Client::connect(&p).await;
    let read = lua("bsm_v0_pttl");
    assert_eq!(
        c.raw(&["EVAL", &read, "1", "ttl:one", "tok"]).await,
        ":-3\r\n"
    );
    ms[1]
        .client()
        .await
        .cmd(&["SET", "ttl:one", "tok", "PX", "4000"])
        .await;
    match c.cmd(&["EVAL", &read, "1", "ttl:one", "tok"]).await {
        Reply::Integer(t) => assert!(t > 3000 && t <= 4000, "{t}"),
        other => panic!("{other:?}"),
    }
}

/// Lock scripts in the shapes people write beyond the libraries' own, from every starting
/// state, answer through the proxy (3 masters, unknown scripts refused) what one plain
/// redis-server answers, and leave the same value and TTL on a majority of masters: the token
/// and the TTL in other arguments, constant replies of every kind (a status or a string `OK`,
/// `tostring` of a comparison, a one-element table), a different constant for a refresh than
/// for a fresh grant, and an expiry guarded by a test of its argument.
#[tokio::test]
async fn generalised_lock_scripts_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    // Token in ARGV[2], TTL in seconds in ARGV[1]; true or nil.
    let swapped = "local v = redis.call('get', KEYS[1])\n\
        if not v then redis.call('setex', KEYS[1], ARGV[1], ARGV[2]) return true\n\
        elseif v == ARGV[2] then redis.call('expire', KEYS[1], ARGV[1]) return true end";
    // A refresh answers PEXPIRE's 1, a fresh grant SET's status OK, a refusal nil.
    let refresh_or_set = "if redis.call('get', KEYS[1]) == ARGV[1] then\n\
        return redis.call('pexpire', KEYS[1], ARGV[2]) end\n\
        return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])";
    // A status OK when fresh, the string "OK" when refreshed, "" when refused.
    let ok_kinds = "local v = redis.call('get', KEYS[1])\n\
        if v == false then return redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) end\n\
        if v == ARGV[1] then redis.call('expire', KEYS[1], ARGV[2]) return 'OK' end\n\
        return ''";
    // `tostring` of a comparison, the token in ARGV[2].
    let tostring = "local mine = redis.call('get', KEYS[1]) == ARGV[2]\n\
        if mine then redis.call('del', KEYS[1]) end\nreturn tostring(mine)";
    // A one-element table, the token in ARGV[2], the TTL in ARGV[3] behind a numeric test.
    let table = "if redis.call('get', KEYS[1]) ~= ARGV[2] then return {0} end\n\
        if tonumber(ARGV[3]) > 0 then redis.call('pexpire', KEYS[1], ARGV[3]) end\nreturn {1}";
    // An expiry guarded by a string test of its argument.
    let guarded = "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then\n\
        if ARGV[2] ~= '' then redis.call('pexpire', KEYS[1], ARGV[2]) end\nreturn 1 end\nreturn 0";
    // A numeric flag picks replacing or adding to the TTL.
    let flag = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n\
        local left = redis.call('pttl', KEYS[1])\nif left < 0 then return 0 end\n\
        if tonumber(ARGV[3]) == 1 then return redis.call('pexpire', KEYS[1], ARGV[2]) end\n\
        return redis.call('pexpire', KEYS[1], left + ARGV[2])";
    // Take-or-already-mine: the caller's key answers the grant and keeps its TTL.
    let keep = "if redis.call('get', KEYS[1]) == ARGV[1] then return 1 end\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\nreturn 0";
    // The same in seconds, a fresh grant (0) told apart from "already mine" (1), -1 refused.
    let keep_told = "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end\n\
        if redis.call('get', KEYS[1]) == ARGV[1] then return 1 end\nreturn -1";
    // A constant value, no owner: set where missing, else "BUSY".
    let constant = "if redis.call('exists', KEYS[1]) == 0 then\n\
        return redis.call('psetex', KEYS[1], ARGV[1], 'locked') end\nreturn 'BUSY'";
    type Case<'a> = (&'a str, &'a [&'a str]);
    let cases: &[Case] = &[
        (constant, &["20000"]),
        (keep, &["tok", "20000"]),
        (keep_told, &["tok", "20"]),
        (flag, &["tok", "20000", "1"]),
        (flag, &["tok", "20000", "0"]),
        (swapped, &["20", "tok"]),
        (refresh_or_set, &["tok", "20000"]),
        (ok_kinds, &["tok", "20"]),
        (tostring, &["x", "tok"]),
        (table, &["x", "tok", "20000"]),
        (guarded, &["tok", "20000"]),
    ];
    let mut case = 0;
    for (script, argv) in cases {
        for from in single {
            case += 1;
            let keys = vec![format!("gen:{case}")];
            let (want, got) = both_from(&reference, &ms, &p, script, &keys, from, argv).await;
            assert_eq!(got, want, "{script} {argv:?} from {from:?}");
        }
    }
    // The token passed in KEYS[2], its TTL in ARGV[1]: set if free, refreshed if mine.
    let token_key = "local v = redis.call('get', KEYS[1])\n\
        if not v then redis.call('set', KEYS[1], KEYS[2], 'PX', ARGV[1]) return 1 end\n\
        if v == KEYS[2] then redis.call('pexpire', KEYS[1], ARGV[1]) return 1 end\nreturn 0";
    for from in single {
        case += 1;
        let keys = vec![format!("gen:{case}"), "tok".to_string()];
        let from = [from[0], H(Missing)];
        let (want, got) = both_from(&reference, &ms, &p, token_key, &keys, &from, &["20000"]).await;
        assert_eq!(got, want, "{token_key} from {from:?}");
    }
    // The TTL test failed: one Redis would answer without setting the expiry; the proxy refuses
    // the call with an error (never a grant), and the key is untouched.
    let mut c = Client::connect(&p).await;
    lock(&mut c, "gen:zero").await;
    let mut r = reference.client().await;
    r.cmd(&["SET", "gen:zero", "tok", "PX", "10000"]).await;
    assert_eq!(
        r.raw(&["EVAL", table, "1", "gen:zero", "x", "tok", "0"])
            .await,
        "*1\r\n:1\r\n",
        "one Redis answers a success and keeps the old TTL"
    );
    let r = c
        .raw(&["EVAL", table, "1", "gen:zero", "x", "tok", "0"])
        .await;
    assert!(r.starts_with("-ERR invalid expire time"), "{r}");
    let r = c
        .raw(&["EVAL", flag, "1", "gen:zero", "tok", "100", "1.0"])
        .await;
    assert_eq!(r, "-ERR value is not an integer or out of range\r\n");
    let r = c.raw(&["EVAL", guarded, "1", "gen:none", "tok", ""]).await;
    assert!(r.starts_with("-ERR"), "{r}");
    assert_eq!(values_on(&ms, "gen:none").await, vec![None, None, None]);
}

/// Another client's lock on `key` (value `other`, 10 s) on each of `ms`.
async fn held_by_other(ms: &[Master], key: &str) {
    for m in ms {
        m.client()
            .await
            .cmd(&["SET", key, "other", "PX", "10000"])
            .await;
    }
}

/// The PTTL of `key` on one master.
async fn pttl(m: &Master, key: &str) -> i64 {
    let r = m.client().await.raw(&["PTTL", key]).await;
    r.trim_start_matches(':').trim().parse().unwrap()
}

/// Take-or-already-mine (`Op::AcquireOrKeep`) leaves the caller's key with its old TTL, so a
/// master that says "already mine" brings only what it has left: the grant's validity is that
/// of the quorum-th largest TTL among the masters holding the key for the caller. Negative
/// control: one Redis answers the grant with less left than the proxy's minimum validity.
#[tokio::test]
async fn take_or_keep_counts_the_ttl_left_where_the_key_was_already_mine() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| {
        c.unknown_scripts = UnknownScripts::Reject;
        c.min_validity_ms = 2_000;
    })
    .await;
    let keep = "if redis.call('get', KEYS[1]) == ARGV[1] then return 1 end\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\nreturn 0";
    let mut c = Client::connect(&p).await;
    // Two masters hold the caller's key with 1.5 s left, the third has none: a quorum holds it
    // for the caller, but with less than the minimum validity. Refused, nothing refreshed, and
    // the key the third master created is taken back.
    for m in &ms[..2] {
        m.client()
            .await
            .cmd(&["SET", "keep:short", "tok", "PX", "1500"])
            .await;
    }
    let r = c
        .raw(&["EVAL", keep, "1", "keep:short", "tok", "20000"])
        .await;
    assert_eq!(r, ":0\r\n");
    for m in &ms[..2] {
        let left = pttl(m, "keep:short").await;
        assert!((1..=1500).contains(&left), "not refreshed: {left}");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while values_on(&ms[2..], "keep:short").await != vec![None] {
        assert!(tokio::time::Instant::now() < deadline, "not rolled back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Negative control: one Redis answers the same call with a grant, the key having less left
    // than the minimum validity (what judging by the requested TTL would have granted).
    let direct = ms[0]
        .client()
        .await
        .raw(&["EVAL", keep, "1", "keep:short", "tok", "20000"])
        .await;
    assert_eq!(direct, ":1\r\n");
    assert!(pttl(&ms[0], "keep:short").await < 2_000);
    // With 10 s left on the two masters: granted, their TTL kept (not the 20 s asked), the third
    // master's key created with the TTL asked.
    for m in &ms[..2] {
        m.client()
            .await
            .cmd(&["SET", "keep:long", "tok", "PX", "10000"])
            .await;
    }
    let r = c
        .raw(&["EVAL", keep, "1", "keep:long", "tok", "20000"])
        .await;
    assert_eq!(r, ":1\r\n");
    for m in &ms[..2] {
        let left = pttl(m, "keep:long").await;
        assert!((1..=10_000).contains(&left), "kept: {left}");
    }
    assert!(pttl(&ms[2], "keep:long").await > 10_000);
    // Another holder on two masters: refused, their keys untouched.
    held_by_other(&ms[..2], "keep:other").await;
    let r = c
        .raw(&["EVAL", keep, "1", "keep:other", "tok", "20000"])
        .await;
    assert_eq!(r, ":0\r\n");
    assert_eq!(
        values_on(&ms[..2], "keep:other").await,
        vec![Some("other".to_string()), Some("other".to_string())]
    );
}

/// A release that publishes to a channel named by an argument (or by `KEYS[2]`) answers what
/// one Redis answers, and the proxy's subscribers get the message once where one Redis would
/// have published it (after a release; not after a refusal).
#[tokio::test]
async fn a_release_that_publishes_answers_and_publishes_once() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let by_arg = "if redis.call('get', KEYS[1]) == ARGV[1] then\n\
        redis.call('del', KEYS[1])\nredis.call('publish', ARGV[2], 'released')\nreturn 1 end\nreturn 0";
    let by_key = "if redis.call('exists', KEYS[1]) == 1 then\n\
        if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\nredis.call('del', KEYS[1]) end\n\
        redis.call('publish', KEYS[2], ARGV[2])\nreturn 1";
    let mut sub = Client::connect(&p).await;
    sub.send(&["SUBSCRIBE", "gone"]).await;
    assert!(
        String::from_utf8_lossy(&sub.try_read(Duration::from_secs(2)).await.unwrap())
            .contains("subscribe")
    );
    let message = |m: &str| {
        format!(
            "*3\r\n$7\r\nmessage\r\n$4\r\ngone\r\n${}\r\n{m}\r\n",
            m.len()
        )
    };
    // Script, keys, ARGV, what is published where one Redis publishes.
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<&'a str>, &'a str);
    let cases: Vec<Case> = vec![
        (by_arg, vec!["pub:a"], vec!["tok", "gone"], "released"),
        (by_key, vec!["pub:b", "gone"], vec!["tok", "bye"], "bye"),
    ];
    for (script, keys, argv, published) in cases {
        for held in [Held::Mine, Held::Other, Held::Missing] {
            let mut r = reference.client().await;
            let mut c = Client::connect(&p).await;
            let key = format!("{}:{held:?}", keys[0]);
            let value = match held {
                Held::Mine => Some("tok"),
                Held::Other => Some("other"),
                Held::Missing => None,
            };
            if let Some(v) = value {
                r.cmd(&["SET", &key, v, "PX", "10000"]).await;
                lock_as(&mut c, &key, v).await;
            }
            let n = keys.len().to_string();
            let mut args = vec!["EVAL", script, n.as_str(), key.as_str()];
            args.extend(&keys[1..]);
            args.extend(&argv);
            // One Redis, with a subscriber of its own: whether it publishes.
            let mut rsub = reference.client().await;
            rsub.send(&["SUBSCRIBE", "gone"]).await;
            rsub.try_read(Duration::from_secs(2)).await.unwrap();
            let want = r.raw(&args).await;
            let one_redis = next(&mut rsub, 300).await;
            let got = c.raw(&args).await;
            assert_eq!(got, want, "{script} from {held:?}");
            let through = next(&mut sub, 1000).await;
            assert_eq!(
                through.is_some(),
                one_redis.is_some(),
                "{script} from {held:?}: published {through:?}, one Redis {one_redis:?}"
            );
            if through.is_some() {
                assert_eq!(through, Some(message(published)));
                assert_eq!(next(&mut sub, 300).await, None, "delivered once");
            }
            assert_eq!(values_on(&ms, &key).await, {
                let after = state(&mut r, &key).await.0;
                vec![after; 3]
            });
        }
    }
}

/// Redis::DistLock's extend (`SET ... XX PX`, else `SET ... NX PX`) is the plain write `SET key
/// value PX ttl`: from every starting state the majority of masters hold what one Redis holds,
/// and the answer is `OK`.
#[tokio::test]
async fn a_script_that_is_one_plain_set_runs_as_that_set() {
    use Held::*;
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let script = lua("distlock_EXTEND_SCRIPT");
    for (i, held) in [Mine, Other, Missing].into_iter().enumerate() {
        let keys = vec![format!("plain:{i}")];
        let ((want, want_state), (got, got_state)) = both(
            &reference,
            &ms,
            &p,
            &script,
            &keys,
            &[held],
            &["tok", "20000"],
        )
        .await;
        assert_eq!(got_state, want_state, "from {held:?}");
        assert!(want == "+OK\r\n" || want == "$2\r\nOK\r\n", "{want}");
        assert_eq!(got, "+OK\r\n", "from {held:?}");
    }
    // SET's own rules: its TTL error, and the proxy's cap.
    let mut c = Client::connect(&p).await;
    let r = c.raw(&["EVAL", &script, "1", "plain:x", "tok", "0"]).await;
    assert_eq!(r, "-ERR invalid expire time in 'set' command\r\n");
    let r = c
        .raw(&["EVAL", &script, "1", "plain:x", "tok", "999999999999"])
        .await;
    assert!(r.contains("max_ttl_ms"), "{r}");
}

/// A refused script says why, and one that keeps a counter in a key it built from `KEYS[1]`
/// is refused as touching a key it was not given.
#[tokio::test]
async fn a_refused_script_says_why() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut c = Client::connect(&p).await;
    let counter = "local n = KEYS[1] .. ':count'\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n\
        redis.call('incr', n) return 1 end\nreturn 0";
    let r = c.raw(&["EVAL", counter, "1", "why", "tok", "1000"]).await;
    assert!(
        r.starts_with("-ERR redlock-proxy does not know what script"),
        "{r}"
    );
    assert!(r.contains("touches a key not given in KEYS"), "{r}");
    assert!(r.ends_with("and unknown_scripts = \"reject\"\r\n"), "{r}");
    assert_eq!(values_on(&ms, "why").await, vec![None, None, None]);
    // A global assignment: Redis refuses it on every call, and the proxy says so.
    let global = "current = redis.call('get', KEYS[1])\n\
        if not current then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end\n\
        return false";
    let r = c.raw(&["EVAL", global, "1", "why", "tok", "1000"]).await;
    assert!(r.contains("assigns to the global current"), "{r}");
    // Acquired in seconds, refreshed in milliseconds from the same argument (the other way
    // round is recognised: see `a_key_taken_in_ms_and_refreshed_in_seconds_...`).
    let mixed = "local v = redis.call('get', KEYS[1])\n\
        if not v then return redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) end\n\
        if v == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end\nreturn 0";
    let r = c.raw(&["EVAL", mixed, "1", "why", "tok", "1000"]).await;
    assert!(r.contains("in milliseconds on one path and in"), "{r}");
    assert_eq!(values_on(&ms, "why").await, vec![None, None, None]);
}

/// The next message a subscriber gets within `ms`, if any.
async fn next(sub: &mut Client, ms: u64) -> Option<String> {
    sub.try_read(Duration::from_millis(ms))
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// `SET key value NX PX 10000` through the proxy, as `value`.
async fn lock_as(c: &mut Client, key: &str, value: &str) {
    assert_eq!(
        c.cmd(&["SET", key, value, "NX", "PX", "10000"]).await,
        Reply::ok()
    );
}

/// A measuring aid, not part of the suite: every `*.lua` file under `$RECOG_CORPUS` that the
/// proxy recognises runs from each starting state (missing, the caller's, another's, expired)
/// on one plain redis-server and through the proxy (3 masters), with the token and TTL where
/// the recognition put them; the replies and the majority's keys must match (a plain `SET`'s
/// `OK` may be a status where the script's was a string). `RECOG_CORPUS=dir cargo test --test
/// scripts corpus_differential -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn corpus_differential() {
    use Held::*;
    use Start::{Expired, Held as H};
    use redlock_proxy::lockop::{ARGV_AFTER_KEYS, Choice, HashOp, TtlUnit};
    use redlock_proxy::scripts::{Meaning, recognise};
    let Ok(dir) = std::env::var("RECOG_CORPUS") else {
        return;
    };
    let reference = Master::start();
    let ms = masters(3);
    // A TTL argument read in seconds on one path (a refresh in seconds of a key taken in ms)
    // asks for a thousand times the TTL there: room for it.
    let p = proxy_with(&ms, |c| {
        c.unknown_scripts = UnknownScripts::Reject;
        c.max_ttl_ms = 100_000_000;
    })
    .await;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "lua"))
        .collect();
    files.sort();
    let (mut checked, mut case) = (0, 0);
    for f in files {
        let script = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let (token, ttl, unit, keys, ops, count) = match recognise(script.as_bytes()) {
            // Parameters in KEYS after the lock's key (the token, the TTL), the rest (if
            // any) in ARGV numbered after them (see ARGV_AFTER_KEYS).
            Meaning::Lock(l) if l.params_in_keys => {
                let Choice::Always(op) = l.choice else {
                    continue;
                };
                if l_is_read(&[op]) || l.token_literal.is_some() {
                    continue;
                }
                let timed = !matches!(op, Op::Release | Op::ReleaseAll | Op::Delete);
                let (mut params, mut argv): (Vec<String>, Vec<String>) = (vec![], vec![]);
                let mut put = |pos: usize, value: &str| {
                    let (list, i) = if pos > ARGV_AFTER_KEYS {
                        (&mut argv, pos - ARGV_AFTER_KEYS)
                    } else {
                        (&mut params, pos)
                    };
                    if list.len() < i {
                        list.resize(i, "1".to_string());
                    }
                    list[i - 1] = value.to_string();
                };
                put(l.token_arg, "tok");
                if timed {
                    put(
                        l.ttl_arg,
                        match l.unit {
                            TtlUnit::Millis => "20000",
                            TtlUnit::Seconds => "20",
                        },
                    );
                }
                let argv: Vec<&str> = argv.iter().map(|a| a.as_str()).collect();
                for from in [H(Mine), H(Other), H(Missing), Expired] {
                    case += 1;
                    let mut keys = vec![format!("corpus:{case}:0")];
                    keys.extend(params.iter().cloned());
                    let mut from = vec![from];
                    from.resize(keys.len(), H(Missing));
                    let ((want, ws), (got, gs)) =
                        both_from(&reference, &ms, &p, &script, &keys, &from, &argv).await;
                    assert_eq!(got, want, "{name} {keys:?} {argv:?} from {from:?}");
                    assert_eq!(gs, ws, "{name} {keys:?} {argv:?} from {from:?}");
                    checked += 1;
                }
                eprintln!("{name}: same as one Redis");
                continue;
            }
            Meaning::Lock(l) => {
                let ops = match l.choice {
                    Choice::Always(op) => vec![op],
                    _ => vec![],
                };
                let keys = if l.announce.is_some() || l.signal.is_some() {
                    2
                } else {
                    1
                };
                // A constant written as the value: no token argument (`usize::MAX` below).
                let token = if l.token_literal.is_some() {
                    usize::MAX
                } else {
                    l.token_arg
                };
                let keys = l.keys_count.and_then(|k| k.min()).unwrap_or(keys);
                (
                    token,
                    l.ttl_arg,
                    l.unit,
                    keys,
                    ops,
                    l.argv_count.and_then(|m| m.min()),
                )
            }
            Meaning::Plain(s) => (s.value_arg, s.ttl_arg, s.unit, 1, vec![], None),
            // A constant written unless the key holds it: from missing, holding the constant,
            // holding another value, and expired.
            Meaning::Unless(w) => {
                let c = String::from_utf8(w.value.to_vec()).unwrap();
                let mut argv: Vec<String> = vec!["1".to_string(); w.ttl_arg];
                argv[w.ttl_arg - 1] = match w.unit {
                    TtlUnit::Millis => "20000".into(),
                    TtlUnit::Seconds => "20".into(),
                };
                let argv: Vec<&str> = argv.iter().map(|a| a.as_str()).collect();
                for from in [None, Some(c.as_str()), Some("other"), Some("expired")] {
                    case += 1;
                    let keys = vec![format!("corpus:{case}:0")];
                    let values = if from == Some("expired") {
                        let set = ["SET", &keys[0], "x", "PX", "30"];
                        reference.client().await.cmd(&set).await;
                        Client::connect(&p).await.cmd(&set).await;
                        tokio::time::sleep(Duration::from_millis(80)).await;
                        [None]
                    } else {
                        [from]
                    };
                    let ((want, ws), (got, gs)) =
                        both_values(&reference, &ms, &p, &script, &keys, &values, &argv).await;
                    assert_eq!(got, want, "{name} {argv:?} from {from:?}");
                    assert_eq!(gs, ws, "{name} {argv:?} from {from:?}");
                    checked += 1;
                }
                eprintln!("{name}: same as one Redis");
                continue;
            }
            // A hash lock taken or unlocked on KEYS[1] alone: from missing, held once or
            // twice by the caller, held by another and a string, the reply and the hash a
            // majority of masters hold are one Redis's.
            Meaning::Hash(h)
                if matches!(h.op, HashOp::Acquire | HashOp::Unlock)
                    && h.publish.is_none()
                    && h.latch.is_none() =>
            {
                let n = h.field_arg.max(h.ttl_arg);
                let mut argv: Vec<String> = vec!["1".to_string(); n];
                argv[h.field_arg - 1] = "uuid-1:7".into();
                // No TTL argument: an unlock that leaves the TTL as it was.
                if h.ttl_arg > 0 {
                    argv[h.ttl_arg - 1] = match h.unit {
                        TtlUnit::Millis => "20000".into(),
                        TtlUnit::Seconds => "20".into(),
                    };
                }
                let mut direct = Vec::new();
                for m in &ms {
                    direct.push(m.client().await);
                }
                let mut r = reference.client().await;
                let mut c = Client::connect(&p).await;
                for start in ["missing", "mine", "mine twice", "other", "a string"] {
                    case += 1;
                    let key = format!("corpus:{case}:h");
                    let setup: Vec<Vec<&str>> = match start {
                        "mine" => vec![vec!["HSET", &key, "uuid-1:7", "1"]],
                        "mine twice" => vec![vec!["HSET", &key, "uuid-1:7", "2"]],
                        "other" => vec![vec!["HSET", &key, "uuid-2:9", "1"]],
                        "a string" => vec![vec!["SET", &key, "v"]],
                        _ => vec![],
                    };
                    for cmd in setup.iter().chain(
                        (start != "missing")
                            .then(|| vec!["PEXPIRE", &key, "10000"])
                            .iter(),
                    ) {
                        r.cmd(cmd).await;
                        for d in direct.iter_mut() {
                            d.cmd(cmd).await;
                        }
                    }
                    let mut call = vec!["EVAL", script.as_str(), "1", key.as_str()];
                    call.extend(argv.iter().map(|a| a.as_str()));
                    let want = bucketed(r.cmd(&call).await);
                    let got = bucketed(c.cmd(&call).await);
                    assert_eq!(got, want, "{name} from {start}");
                    let want = hash_state(&mut r, &key).await;
                    let mut agreed = 0;
                    for d in direct.iter_mut() {
                        agreed += usize::from(hash_state(d, &key).await == want);
                    }
                    assert!(agreed >= 2, "{name} from {start}: hash {want:?}");
                    checked += 1;
                }
                eprintln!("{name}: same as one Redis");
                continue;
            }
            _ => continue,
        };
        if l_is_read(&ops) || token == 0 {
            continue;
        }
        let literal = token == usize::MAX;
        // A script that spreads ARGV into a command: called with exactly that many.
        let n = if let Some(m) = count {
            m
        } else if literal {
            ttl.max(1)
        } else {
            token.max(ttl).max(3)
        };
        let mut argv: Vec<String> = (1..=n).map(|_| "1".to_string()).collect();
        if !literal {
            argv[token - 1] = "tok".into();
        }
        if ttl >= 1 && ttl != token {
            argv[ttl - 1] = match unit {
                TtlUnit::Millis => "20000".into(),
                TtlUnit::Seconds => "20".into(),
            };
        }
        let argv: Vec<&str> = argv.iter().map(|a| a.as_str()).collect();
        for from in [&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]] {
            case += 1;
            let keys: Vec<String> = (0..keys).map(|i| format!("corpus:{case}:{i}")).collect();
            let mut from = from.to_vec();
            from.resize(keys.len(), H(Missing));
            let ((want, ws), (got, gs)) =
                both_from(&reference, &ms, &p, &script, &keys, &from, &argv).await;
            let ok = |r: &str| r == "+OK\r\n" || r == "$2\r\nOK\r\n";
            assert!(
                got == want || (ok(&got) && ok(&want)),
                "{name} {argv:?} from {from:?}: {got:?} vs {want:?}"
            );
            assert_eq!(gs, ws, "{name} {argv:?} from {from:?}");
            checked += 1;
        }
        eprintln!("{name}: same as one Redis");
    }
    eprintln!("{checked} runs compared");
}

/// TTL reads answer a time that moves between two runs: left out of the differential.
fn l_is_read(ops: &[Op]) -> bool {
    ops.iter()
        .any(|op| matches!(op, Op::Remaining | Op::Inspect))
}

/// Shapes recognised in the second round, in our own spellings, from every starting state,
/// answer through the proxy (3 masters, unknown scripts refused) what one redis-server answers
/// and leave the same value and TTL on a majority: `ARGV` spread into the command
/// (`unpack(ARGV)`), an integer reply tested for truth (always true in Lua), the TTL and the
/// token passed in `KEYS`, and a multi-key release answering a long constant error.
#[tokio::test]
async fn second_round_shapes_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let multi: &[&[Start]] = &[
        &[H(Mine), H(Mine)],
        &[H(Mine), H(Missing)],
        &[H(Mine), H(Other)],
        &[H(Missing), H(Missing)],
        &[Expired, H(Mine)],
    ];
    // ARGV = TTL ms, token, spread into PSETEX; nil where the key exists.
    let spread = "local k = KEYS[1]\nif redis.call('EXISTS', k) ~= 1 then\n\
        return redis.call('PSETEX', k, unpack(ARGV))\nend\nreturn false";
    // The token in KEYS[2]; DEL's integer is always true in Lua, so 'gone' never answers.
    let truthy = "local cur = redis.call('get', KEYS[1])\nif cur ~= KEYS[2] then return 'no' end\n\
        local n = redis.call('del', KEYS[1])\nif n then return 'yes' else return 'gone' end";
    // KEYS = key, TTL in seconds, token: taken with SETNX then EXPIRE, or refreshed if mine.
    let ttl_in_keys = "local got = redis.call('setnx', KEYS[1], KEYS[3])\n\
        if got == 1 or redis.call('get', KEYS[1]) == KEYS[3] then\n\
        redis.call('expire', KEYS[1], KEYS[2]) return 'taken' end\nreturn 'busy'";
    // Every key must hold the token, else a long error reply and nothing deleted.
    let long_error = "local vals = redis.call('mget', unpack(KEYS))\nfor i = 1, #KEYS do\n\
        if vals[i] ~= ARGV[1] then\n\
        return redis.error_reply('LOCKLOST this lock is no longer held by the caller, nothing was released')\n\
        end\nend\nredis.call('del', unpack(KEYS))\nreturn redis.status_reply('OK')";
    let mut case = 0;
    let mut run = async |script: &str, keys_after: &[&str], argv: &[&str], states: &[&[Start]]| {
        for from in states {
            case += 1;
            let mut keys: Vec<String> = (0..from.len()).map(|i| format!("r2:{case}:{i}")).collect();
            keys.extend(keys_after.iter().map(|k| k.to_string()));
            let mut from = from.to_vec();
            from.resize(keys.len(), H(Missing));
            let (want, got) = both_from(&reference, &ms, &p, script, &keys, &from, argv).await;
            assert_eq!(got, want, "{script} {keys:?} {argv:?} from {from:?}");
        }
    };
    run(spread, &[], &["20000", "tok"], single).await;
    run(truthy, &["tok"], &[], single).await;
    run(ttl_in_keys, &["20", "tok"], &[], single).await;
    run(long_error, &[], &["tok"], single).await;
    run(long_error, &[], &["tok"], multi).await;
    // Spread with another number of arguments: PSETEX of another arity, which Redis refuses;
    // the proxy does not take it for the acquisition (an error, nothing written).
    let mut c = Client::connect(&p).await;
    let three = ["EVAL", spread, "1", "r2:arity", "20000", "tok", "x"];
    assert!(c.raw(&three).await.starts_with('-'));
    assert!(reference.client().await.raw(&three).await.starts_with('-'));
    assert_eq!(values_on(&ms, "r2:arity").await, vec![None, None, None]);
}

/// The spread acquisition is a Redlock acquisition: held by another client on two of three
/// masters, it is refused, and the master where it created the key is cleaned up; held on one
/// master only, a quorum grants it. (Negative control: the same key written on the free master
/// directly by the script, as one Redis runs it, stays there.)
#[tokio::test]
async fn a_refused_spread_acquisition_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let spread = "if redis.call('exists', KEYS[1]) == 0 then\n\
        return redis.call('psetex', KEYS[1], unpack(ARGV)) end";
    held_by_other(&ms[1..], "r2:q").await;
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", spread, "1", "r2:q", "10000", "tok"];
    assert_eq!(c.raw(&args).await, "$-1\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = Some("other".to_string());
    assert_eq!(
        values_on(&ms, "r2:q").await,
        vec![None, other.clone(), other.clone()]
    );
    // Negative control: the client's own script, run on the free master as written, leaves
    // its value there (a partial grant nobody undoes).
    assert_eq!(ms[0].client().await.raw(&args).await, "+OK\r\n");
    assert_eq!(
        values_on(&ms, "r2:q").await,
        vec![Some("tok".to_string()), other.clone(), other]
    );
    // Held on one master only: granted by a quorum.
    for m in &ms {
        m.client().await.cmd(&["DEL", "r2:q"]).await;
    }
    held_by_other(&ms[2..], "r2:q").await;
    assert_eq!(c.raw(&args).await, "+OK\r\n");
    assert_eq!(
        values_on(&ms, "r2:q").await[..2],
        [Some("tok".to_string()), Some("tok".to_string())]
    );
}

/// A constant written unless the key already holds it (a mutex without ownership that
/// overwrites any other value) runs as `SET key c IFNE c PX ttl`: from every starting state it
/// answers what one Redis answers, with the script's own constants. Across masters it is a
/// quorum write: held with the constant on two of three masters, it is refused and the master
/// where it wrote gets its old value back. (Negative control: the client's script run on that
/// master as written leaves its write there.)
#[tokio::test]
async fn a_constant_written_unless_held_is_a_quorum_ifne() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let script = "local v = redis.call('get', KEYS[1])\nif v ~= 'busy' then\n\
        redis.call('set', KEYS[1], 'busy', 'EX', ARGV[1])\nreturn 1\nend\nreturn 0";
    for (case, from) in [None, Some("busy"), Some("someone")]
        .into_iter()
        .enumerate()
    {
        let keys = vec![format!("ifne:{case}")];
        let (want, got) = both_values(&reference, &ms, &p, script, &keys, &[from], &["20"]).await;
        assert_eq!(got, want, "from {from:?}");
    }
    // The constant on two masters, another value on the third: refused there and given back.
    for (i, v) in ["someone", "busy", "busy"].iter().enumerate() {
        ms[i]
            .client()
            .await
            .cmd(&["SET", "ifne:q", v, "PX", "10000"])
            .await;
    }
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", script, "1", "ifne:q", "20"];
    assert_eq!(c.raw(&args).await, ":0\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let held = |v: &str| Some(v.to_string());
    assert_eq!(
        values_on(&ms, "ifne:q").await,
        vec![held("someone"), held("busy"), held("busy")]
    );
    assert!(pttl(&ms[0], "ifne:q").await <= 10_000);
    // Negative control: the script as written on master 0 overwrites the value there.
    assert_eq!(ms[0].client().await.raw(&args).await, ":1\r\n");
    assert_eq!(values_on(&ms, "ifne:q").await[0], held("busy"));
    // Another value on two masters: written by a quorum.
    for m in &ms[..2] {
        m.client()
            .await
            .cmd(&["SET", "ifne:q", "someone", "PX", "10000"])
            .await;
    }
    assert_eq!(c.raw(&args).await, ":1\r\n");
    assert_eq!(
        values_on(&ms, "ifne:q").await,
        vec![held("busy"), held("busy"), held("busy")]
    );
    // A TTL beyond max_ttl_ms is an error, never a write.
    let long = ["EVAL", script, "1", "ifne:long", "999999999"];
    assert!(c.raw(&long).await.starts_with("-ERR"));
    assert_eq!(values_on(&ms, "ifne:long").await, vec![None, None, None]);
}

/// Shapes recognised in the third round, in our own spellings, from every starting state,
/// answer through the proxy (3 masters, unknown scripts refused) what one redis-server answers
/// and leave the same value and TTL on a majority: `redis.replicate_commands()` before the
/// work (a no-op since Redis 5), `redis.log`, a TTL written in the script, a many-key
/// acquisition that gives back what it took when a key is busy, `tostring` of a command's
/// table reply, and a reply of the TTL the call gave (`tonumber(ARGV[t])`, an
/// integer, or `ARGV[t]`, a string, in the script's own unit), bound to each call.
#[tokio::test]
async fn third_round_shapes_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    // Effects replication switched on first; then take it or refresh it if it is ours.
    let replicated = "redis.replicate_commands()\nlocal held = redis.call('GET', KEYS[1])\n\
        if not held or held == ARGV[1] then\n\
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 'taken' end\nreturn 'busy'";
    // A refresh answering the new TTL in ms (a number), -1 when not ours.
    let ttl_number = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return -1 end\n\
        redis.call('pexpire', KEYS[1], ARGV[2])\nreturn tonumber(ARGV[2])";
    // A refresh in seconds answering the TTL as it was given (a string), nil when not ours;
    // it writes to the server's log on the way.
    let ttl_text = "local mine = redis.call('get', KEYS[1]) == ARGV[1]\n\
        redis.log(redis.LOG_NOTICE, 'refresh of ' .. KEYS[1], tostring(mine))\n\
        if mine then redis.call('expire', KEYS[1], ARGV[2]) return ARGV[2] end\nreturn nil";
    // An acquisition answering the lease it took (ms), 0 when busy; pcall and replicate too.
    let ttl_acquire = "redis.replicate_commands();\n\
        if redis.pcall('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then\n\
        return tonumber(ARGV[2]) end\nreturn 0";
    let mut run = FromEachStart::new(&reference, &ms, &p, "r3");
    run.same(replicated, &["tok", "20000"], single).await;
    run.same(ttl_number, &["tok", "20000"], single).await;
    run.same(ttl_number, &["tok", "15000"], single).await;
    run.same(ttl_text, &["tok", "20"], single).await;
    run.same(ttl_acquire, &["tok", "20000"], single).await;
    run.same(ttl_acquire, &["tok", "12345"], single).await;
    // TTLs written in the script: taken for 20 s, refreshed for 20 s, in both units.
    let fixed_take = "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then\n\
        redis.call('expire', KEYS[1], 20) return 'OK' end\nreturn 'LOCKED'";
    let fixed_refresh = "local v = redis.call('get', KEYS[1])\n\
        if v == ARGV[1] then return redis.call('pexpire', KEYS[1], 20000) end\nreturn 0";
    run.same(fixed_take, &["tok"], single).await;
    // tostring of SET's reply: 'false' when refused, a table's address when written.
    let tostring_set = "local ret = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2]))\n\
        if tostring(ret) == 'false' then return false end\nreturn true";
    run.same(tostring_set, &["tok", "20000"], single).await;
    run.same(fixed_refresh, &["tok"], single).await;
    // Many keys taken one by one, the ones taken given back when one is busy: all or nothing.
    let rollback = "for i, key in ipairs(KEYS) do\n\
        if not redis.call('set', key, ARGV[1], 'NX', 'PX', ARGV[2]) then\n\
        for j = 1, i - 1 do redis.call('del', KEYS[j]) end\nreturn 0 end\nend\nreturn 1";
    let many: &[&[Start]] = &[
        &[H(Missing), H(Missing), H(Missing)],
        &[H(Missing), H(Missing), H(Other)],
        &[H(Missing), H(Other), H(Missing)],
        &[H(Other), H(Missing)],
        &[H(Mine), H(Missing)],
        &[Expired, H(Missing)],
    ];
    run.same(rollback, &["tok", "20000"], many).await;
    // A TTL the proxy refuses (not a positive integer) is an error, never a grant.
    let mut c = Client::connect(&p).await;
    for bad in ["0", "-5", "12.5", "abc"] {
        let r = c
            .raw(&["EVAL", ttl_acquire, "1", "r3:bad", "tok", bad])
            .await;
        assert!(r.starts_with("-ERR"), "{bad}: {r}");
    }
    // A TTL written in the script beyond max_ttl_ms: an error on every call, nothing written.
    let too_long = "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then\n\
        redis.call('expire', KEYS[1], 999999999) return 1 end\nreturn 0";
    let r = c.raw(&["EVAL", too_long, "1", "r3:bad", "tok"]).await;
    assert!(r.starts_with("-ERR"), "{r}");
    assert_eq!(values_on(&ms, "r3:bad").await, vec![None, None, None]);
}

/// An acquisition that answers its TTL, and one whose TTL is written in the script, are
/// Redlock acquisitions: held by another client on two of three masters, each answers the
/// script's refusal (0) and the key it created on the free master is taken back; held on one
/// master only, a quorum grants it, with the script's grant reply and TTL. (Negative control:
/// the same script run on the free master as written grants there and leaves its key, a grant
/// no quorum made.)
#[tokio::test]
async fn a_refused_acquisition_answering_its_ttl_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let answers_ttl = "redis.replicate_commands()\n\
        if redis.call('exists', KEYS[1]) == 1 then return 0 end\n\
        redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])\nreturn tonumber(ARGV[2])";
    let fixed_ttl = "if redis.call('setnx', KEYS[1], ARGV[1]) == 0 then return 0 end\n\
        redis.call('pexpire', KEYS[1], 10000)\nreturn 1";
    for (script, argv, granted) in [
        (answers_ttl, &["tok", "10000"][..], ":10000\r\n"),
        (fixed_ttl, &["tok"][..], ":1\r\n"),
    ] {
        for m in &ms {
            m.client().await.cmd(&["DEL", "r3:q"]).await;
        }
        held_by_other(&ms[1..], "r3:q").await;
        let mut c = Client::connect(&p).await;
        let mut args = vec!["EVAL", script, "1", "r3:q"];
        args.extend(argv);
        assert_eq!(c.raw(&args).await, ":0\r\n", "{script}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let other = Some("other".to_string());
        assert_eq!(
            values_on(&ms, "r3:q").await,
            vec![None, other.clone(), other.clone()],
            "{script}"
        );
        // Negative control: on the free master alone, the script grants and keeps its key.
        assert_eq!(ms[0].client().await.raw(&args).await, granted);
        assert_eq!(
            values_on(&ms, "r3:q").await,
            vec![Some("tok".to_string()), other.clone(), other]
        );
        // Held on one master only: granted by a quorum, with the script's reply and TTL.
        for m in &ms {
            m.client().await.cmd(&["DEL", "r3:q"]).await;
        }
        held_by_other(&ms[2..], "r3:q").await;
        assert_eq!(c.raw(&args).await, granted, "{script}");
        assert_eq!(
            values_on(&ms, "r3:q").await[..2],
            [Some("tok".to_string()), Some("tok".to_string())]
        );
        let left = pttl(&ms[0], "r3:q").await;
        assert!(left > 5_000 && left <= 10_000, "{script}: {left}");
    }
}

/// Lock scripts whose answer no quorum can give as one Redis would stay refused, and the
/// error names why: a refusal answering the key's remaining time (each master's own), one
/// answering another holder's value, and a script that takes the lock for the TTL the call
/// gives but refreshes it for one written in the script. Nothing is written.
#[tokio::test]
async fn scripts_answering_per_master_facts_are_refused_with_their_reason() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut c = Client::connect(&p).await;
    let pttl_reply = "if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then\n\
        return -1 end\nreturn redis.call('pttl', KEYS[1])";
    let r = c
        .raw(&["EVAL", pttl_reply, "1", "r3:why", "tok", "1000"])
        .await;
    assert!(r.contains("answers the time the key has left"), "{r}");
    let holder = "local v = redis.call('get', KEYS[1])\n\
        if v and v ~= ARGV[1] then return v end\n\
        return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])";
    let r = c.raw(&["EVAL", holder, "1", "r3:why", "tok", "1000"]).await;
    assert!(r.contains("answers the value another client holds"), "{r}");
    // Taken for ARGV[2] ms, refreshed for a fixed 30 s: a TTL per path the proxy does not carry.
    let fixed = "local v = redis.call('get', KEYS[1])\n\
        if not v then return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) end\n\
        if v == ARGV[1] then return redis.call('pexpire', KEYS[1], 30000) end\nreturn false";
    let r = c.raw(&["EVAL", fixed, "1", "r3:why", "tok", "1000"]).await;
    assert!(r.contains("a TTL written in the script"), "{r}");
    // A re-entrant hash lock answering its hold count: each master counts its own.
    let count =
        "if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[1], '1');
        redis.call('expire', KEYS[1], ARGV[2]); return 1; end;
        if (redis.call('hexists', KEYS[1], ARGV[1]) == 1) then
        local n = redis.call('hincrby', KEYS[1], ARGV[1], '1');
        redis.call('expire', KEYS[1], ARGV[2]); return n; end;
return 0;";
    let r = c.raw(&["EVAL", count, "1", "r3:why", "tok", "10"]).await;
    assert!(r.contains("answers the hold count"), "{r}");
    assert_eq!(values_on(&ms, "r3:why").await, vec![None, None, None]);
}

/// The many-key acquisition that gives back what it took is a Redlock acquisition over all its
/// keys: with the second key held by another client on two of three masters, it answers 0 and
/// the keys it created on the free master are taken back. (Negative control: run as written
/// on the free master alone, it answers 1 and keeps both keys there.)
#[tokio::test]
async fn a_refused_many_key_acquisition_with_rollback_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let script = "for i, key in ipairs(KEYS) do\n\
        if not redis.call('set', key, ARGV[1], 'NX', 'PX', ARGV[2]) then\n\
        for j = 1, i - 1 do redis.call('del', KEYS[j]) end\nreturn 0 end\nend\nreturn 1";
    held_by_other(&ms[1..], "r3:m:b").await;
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", script, "2", "r3:m:a", "r3:m:b", "tok", "10000"];
    assert_eq!(c.raw(&args).await, ":0\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = Some("other".to_string());
    assert_eq!(values_on(&ms, "r3:m:a").await, vec![None, None, None]);
    assert_eq!(
        values_on(&ms, "r3:m:b").await,
        vec![None, other.clone(), other.clone()]
    );
    // Negative control: the script as written on the free master takes both keys there.
    assert_eq!(ms[0].client().await.raw(&args).await, ":1\r\n");
    let tok = Some("tok".to_string());
    assert_eq!(values_on(&ms, "r3:m:a").await[0], tok);
    assert_eq!(
        values_on(&ms, "r3:m:b").await,
        vec![tok, other.clone(), other]
    );
}

/// Scripts that test how many arguments they were given (`#ARGV`) before acting, or take a TTL
/// argument with a default (`ARGV[2] or 30000`), answer what one Redis answers from every
/// starting state when called with the arguments they ask for.
#[tokio::test]
async fn argument_count_tests_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let take = "if #ARGV < 2 then return redis.error_reply('ERR usage: token ttl') end\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n\
        return 0";
    let extend = "if #ARGV ~= 2 then return redis.error_reply('wrong number of arguments') end\n\
        if redis.call('get', KEYS[1]) == ARGV[1] then\n\
        return redis.call('pexpire', KEYS[1], ARGV[2]) end\nreturn 0";
    let release = "if #ARGV == 0 then return redis.error_reply('no token') end\n\
        if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end\n\
        return 0";
    let defaulted = "local ttl = ARGV[2] or 30000\n\
        if redis.call('get', KEYS[1]) == ARGV[1] then\n\
        redis.call('pexpire', KEYS[1], ttl) return 1 end\nreturn 0";
    let mut run = FromEachStart::new(&reference, &ms, &p, "r4");
    run.same(take, &["tok", "20000"], single).await;
    run.same(extend, &["tok", "20000"], single).await;
    run.same(release, &["tok"], single).await;
    run.same(defaulted, &["tok", "20000"], single).await;
    // A TTL written in the script unless the call passes one: read for calls that pass it.
    let optional = "local ttl = 30000\nif #ARGV > 1 then ttl = tonumber(ARGV[2]) end\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ttl) then return 1 end\nreturn 0";
    run.same(optional, &["tok", "20000"], single).await;
}

/// An acquisition guarded by `#ARGV` is a Redlock acquisition: held by another client on two
/// of three masters, it answers the script's refusal and the key it created on the free master
/// is taken back (negative control: the script as written on that master keeps its key). With
/// too few arguments it is not a lock operation: refused, nothing written.
#[tokio::test]
async fn a_refused_acquisition_guarded_by_argv_count_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let take = "if #ARGV < 2 then return redis.error_reply('ERR usage: token ttl') end\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n\
        return 0";
    held_by_other(&ms[1..], "r4:q").await;
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", take, "1", "r4:q", "tok", "10000"];
    assert_eq!(c.raw(&args).await, ":0\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = Some("other".to_string());
    assert_eq!(
        values_on(&ms, "r4:q").await,
        vec![None, other.clone(), other.clone()]
    );
    assert_eq!(ms[0].client().await.raw(&args).await, ":1\r\n");
    assert_eq!(
        values_on(&ms, "r4:q").await,
        vec![Some("tok".to_string()), other.clone(), other]
    );
    let r = c.raw(&["EVAL", take, "1", "r4:few", "tok"]).await;
    assert!(r.starts_with("-"), "{r}");
    assert_eq!(values_on(&ms, "r4:few").await, vec![None, None, None]);
}

/// `SET key token NX PX ttl GET` inside a script (Redis 7.0: the old value, nil when there was
/// none, whether or not it wrote) read as the acquisition it is: from every starting state the
/// answer and effect match one Redis's. A script answering the old value itself (another
/// holder's, different on each master) is refused with its reason.
#[tokio::test]
async fn set_with_get_in_scripts_answers_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let take_or_keep = "local old = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')\n\
        if not old then return 1 end\n\
        if old == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end\n\
        return 0";
    let take = "if not redis.call('SET', KEYS[1], ARGV[1], 'GET', 'PX', ARGV[2], 'NX') then\n\
        return 'OK' end\nreturn 'BUSY'";
    let mut run = FromEachStart::new(&reference, &ms, &p, "r4g");
    run.same(take_or_keep, &["tok", "20000"], single).await;
    run.same(take, &["tok", "20000"], single).await;
    let mut c = Client::connect(&p).await;
    let holder = "return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')";
    let r = c
        .raw(&["EVAL", holder, "1", "r4g:why", "tok", "1000"])
        .await;
    assert!(r.starts_with("-ERR redlock-proxy does not know"), "{r}");
    assert!(
        r.contains("it answers the value another client holds"),
        "{r}"
    );
    assert_eq!(values_on(&ms, "r4g:why").await, vec![None, None, None]);
}

/// A `SET ... NX GET` acquisition is a Redlock acquisition: held by another client on two of
/// three masters, it answers the script's refusal and the key it created on the free master is
/// taken back (negative control: the script as written on that master keeps its key).
#[tokio::test]
async fn a_refused_set_get_acquisition_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let take = "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET') then\n\
        return 1 end\nreturn 0";
    held_by_other(&ms[1..], "r4g:q").await;
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", take, "1", "r4g:q", "tok", "10000"];
    assert_eq!(c.raw(&args).await, ":0\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = Some("other".to_string());
    assert_eq!(
        values_on(&ms, "r4g:q").await,
        vec![None, other.clone(), other.clone()]
    );
    assert_eq!(ms[0].client().await.raw(&args).await, ":1\r\n");
    assert_eq!(
        values_on(&ms, "r4g:q").await,
        vec![Some("tok".to_string()), other.clone(), other]
    );
    // Held on one master only: granted by a quorum.
    for m in &ms {
        m.client().await.cmd(&["DEL", "r4g:q"]).await;
    }
    held_by_other(&ms[2..], "r4g:q").await;
    assert_eq!(c.raw(&args).await, ":1\r\n");
    assert_eq!(
        values_on(&ms, "r4g:q").await[..2],
        [Some("tok".to_string()), Some("tok".to_string())]
    );
}

/// `PEXPIRE key ttl GT|LT|XX|NX` in an extend (Redis 7.0 options). `GT`/`LT` take effect only
/// where the new TTL is more/less than the time the key has left, which each master counts on
/// its own clock: such an extend is refused and the error says why, nothing written. `XX`
/// and `NX` depend only on whether the key has a TTL, which the analyser follows.
#[tokio::test]
async fn expiry_options_in_an_extend_answer_what_one_redis_answers_or_say_why_not() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut c = Client::connect(&p).await;
    lock_as(&mut c, "r4x:held", "tok").await;
    for flag in ["GT", "lt"] {
        let extend = format!(
            "if redis.call('get', KEYS[1]) == ARGV[1] then\n\
             return redis.call('pexpire', KEYS[1], ARGV[2], '{flag}') end\nreturn 0"
        );
        let r = c
            .raw(&["EVAL", &extend, "1", "r4x:held", "tok", "60000"])
            .await;
        assert!(r.starts_with("-ERR redlock-proxy does not know"), "{r}");
        assert!(r.contains("it sets the expiry with"), "{r}");
        for m in &ms {
            assert!(pttl(m, "r4x:held").await <= 10_000, "{flag}");
        }
    }
    // NX never acts on a key with a TTL, as every lock has: no extend, and the error says so.
    let nx = "if redis.call('get', KEYS[1]) == ARGV[1] then\n\
        return redis.call('pexpire', KEYS[1], ARGV[2], 'NX') end\nreturn 0";
    let r = c.raw(&["EVAL", nx, "1", "r4x:held", "tok", "60000"]).await;
    assert!(r.contains("it sets the expiry with NX"), "{r}");
    // XX sets the TTL wherever the key has one: a plain extend, from every start as one Redis.
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let xx = "if redis.call('get', KEYS[1]) == ARGV[1] then\n\
        return redis.call('pexpire', KEYS[1], ARGV[2], 'XX') end\nreturn 0";
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    for (case, from) in single.iter().enumerate() {
        let keys = vec![format!("r4x:{case}")];
        let argv = ["tok", "20000"];
        let (want, got) = both_from(&reference, &ms, &p, xx, &keys, from, &argv).await;
        assert_eq!(got, want, "XX from {from:?}");
    }
}

/// Fifth-round shapes, from every starting state, answer through the proxy what one Redis
/// answers and leave the same keys: a release that answers one constant whatever it found
/// (one key and many), an acquisition and a release guarded by `#ARGV` called with more
/// arguments than they need, and scripts that test `#KEYS` before acting.
#[tokio::test]
async fn fifth_round_shapes_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let multi: &[&[Start]] = &[
        &[H(Mine), H(Mine)],
        &[H(Mine), H(Other)],
        &[H(Missing), H(Mine)],
        &[H(Other), H(Other)],
        &[Expired, H(Mine)],
    ];
    let mut run = FromEachStart::new(&reference, &ms, &p, "r5");
    // Deletes every key that holds the token, answers 'OK' whatever it found.
    let release_ok = "for _, k in ipairs(KEYS) do\n\
        if redis.call('GET', k) == ARGV[1] then redis.call('DEL', k) end\nend\nreturn 'OK'";
    run.same(release_ok, &["tok"], single).await;
    run.same(release_ok, &["tok"], multi).await;
    // Guarded by #ARGV: the same operation for two, three or four arguments.
    let take = "if #ARGV < 2 then return redis.error_reply('ERR usage: token ttl') end\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n\
        return 0";
    run.same(take, &["tok", "20000", "extra"], single).await;
    run.same(take, &["tok", "20000", "a", "b"], single).await;
    let release = "if #ARGV == 0 then return redis.error_reply('no token') end\n\
        if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end\n\
        return 0";
    run.same(release, &["tok", "unused"], single).await;
    // Guarded by #KEYS: one key, as the script asks.
    let keys_release = "if #KEYS ~= 1 then return redis.error_reply('ERR expected one key') end\n\
        if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end\n\
        return 0";
    run.same(keys_release, &["tok"], single).await;
    let keys_take = "if #KEYS == 0 then return redis.error_reply('ERR no key') end\n\
        return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])";
    run.same(keys_take, &["tok", "20000"], single).await;
    let keys_extend = "if #KEYS > 1 then return redis.error_reply('ERR one key only') end\n\
        if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n\
        return redis.call('pexpire', KEYS[1], ARGV[2])";
    run.same(keys_extend, &["tok", "20000"], single).await;
    // string.format for a log line, type() and .err of a pcall's reply.
    let logged = "local key = KEYS[1] local token = ARGV[1]\n\
        redis.log(redis.LOG_NOTICE, string.format('unlock %s by %s', key, token))\n\
        if redis.call('get', key) == token then return redis.call('del', key) end return 0";
    run.same(logged, &["tok"], single).await;
    let checked = "local r = redis.pcall('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n\
        if type(r) == 'table' and r.err then return redis.error_reply(r.err) end\n\
        if r then return 1 end return 0";
    run.same(checked, &["tok", "20000"], single).await;
    let typed = "local r = redis.pcall('get', KEYS[1])\n\
        if type(r) == 'string' and r == ARGV[1] then return redis.call('del', KEYS[1]) end\n\
        return 0";
    run.same(typed, &["tok"], single).await;
    // math.floor of the TTL argument, the status reply's ok field, a TTL guard with an error.
    let floored = "if redis.call('get', KEYS[1]) == ARGV[1] then\n\
        return redis.call('expire', KEYS[1], math.floor(tonumber(ARGV[2]))) end return 0";
    run.same(floored, &["tok", "20"], single).await;
    let ok_field = "local r = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n\
        if r and r['ok'] == 'OK' then return 1 end\nreturn 0";
    run.same(ok_field, &["tok", "20000"], single).await;
    let guarded = "local ttl = tonumber(ARGV[2])\n\
        if ttl == nil or ttl <= 0 then return redis.error_reply('ERR bad ttl') end\n\
        if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ttl) then return 1 end\nreturn 0";
    run.same(guarded, &["tok", "20000"], single).await;
    // An extension (SETEX) answering 0 done, 1 another's, 2 gone: told apart by the masters.
    let tristate = "local ret = redis.call(\"EXISTS\", KEYS[1])\nif ret == 0 then return 2 end\n\
        ret = redis.call(\"GET\", KEYS[1])\nif ret == ARGV[1] then\n\
        redis.call(\"SETEX\", KEYS[1], ARGV[2], ARGV[1])\nreturn 0\nend\nreturn 1";
    run.same(tristate, &["tok", "20"], single).await;
}

/// Sixth-round shapes, from every starting state, answer through the proxy what one Redis
/// answers and leave the same keys: a release and a renewal answering one-string tables
/// (`{'OK'}` / `{'NO'}`), and an extension that checks the key's `TYPE` first (its `ok` field,
/// as a field and as an index).
#[tokio::test]
async fn sixth_round_shapes_answer_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let mut run = FromEachStart::new(&reference, &ms, &p, "r6");
    let release = "local val = redis.call('GET', KEYS[1])\nif not val then return {'OK'} end\n\
        if val ~= ARGV[1] then return {'NO'} end\nredis.call('DEL', KEYS[1])\nreturn {'OK'}";
    run.same(release, &["tok"], single).await;
    let renew = "local val = redis.call('GET', KEYS[1])\nif not val then return {'NO'} end\n\
        if val ~= ARGV[1] then return {'NO'} end\nredis.call('PEXPIRE', KEYS[1], ARGV[2])\n\
        return {'OK'}";
    run.same(renew, &["tok", "20000"], single).await;
    let typed = "local key_type = redis.call(\"TYPE\", KEYS[1]).ok\n\
        if key_type ~= \"string\" then return 0 end\n\
        if redis.call(\"GET\", KEYS[1]) ~= ARGV[1] then return 0 end\n\
        return redis.call(\"PEXPIRE\", KEYS[1], ARGV[2])";
    run.same(typed, &["tok", "20000"], single).await;
    let indexed = "if redis.call('type', KEYS[1])['ok'] == 'none' then return -2 end\n\
        if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end\n\
        return 0";
    run.same(indexed, &["tok"], single).await;
    // GitLab's lease renewal: answers the token it renewed, else nil.
    let renew_echo = "local key, uuid, ttl = KEYS[1], ARGV[1], ARGV[2]\n\
        if redis.call(\"get\", key) == uuid then\n  redis.call(\"expire\", key, ttl)\n  \
        return uuid\nend";
    run.same(renew_echo, &["tok", "20"], single).await;
}

/// A release answering `{'OK'}` / `{'NO'}` is a Redlock release: the caller's token on one
/// master of three (another's on the other two) is answered `{'NO'}`, the
/// lock not being the caller's (negative control: the script as written on that one master
/// answers `{'OK'}`). A `TYPE`-checked extension of the same minority lock answers 0 and
/// leaves the other holder's TTL alone; a renewal answering the caller's token answers nil.
#[tokio::test]
async fn a_table_reply_release_of_a_minority_lock_answers_no() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let release = "local val = redis.call('GET', KEYS[1])\nif not val then return {'OK'} end\n\
        if val ~= ARGV[1] then return {'NO'} end\nredis.call('DEL', KEYS[1])\nreturn {'OK'}";
    let typed = "if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return 0 end\n\
        if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n\
        return redis.call('PEXPIRE', KEYS[1], ARGV[2])";
    held_by_other(&ms[1..], "r6:q").await;
    let set = ["SET", "r6:q", "tok", "PX", "10000"];
    ms[0].client().await.cmd(&set).await;
    let mut c = Client::connect(&p).await;
    let extend = ["EVAL", typed, "1", "r6:q", "tok", "90000"];
    assert_eq!(c.raw(&extend).await, ":0\r\n");
    assert!(pttl(&ms[1], "r6:q").await <= 10_000);
    let args = ["EVAL", release, "1", "r6:q", "tok"];
    assert_eq!(c.raw(&args).await, "*1\r\n$2\r\nNO\r\n");
    ms[0].client().await.cmd(&set).await;
    assert_eq!(ms[0].client().await.raw(&args).await, "*1\r\n$2\r\nOK\r\n");
    // Held by the caller on two of three: released, `{'OK'}`.
    for m in &ms[..2] {
        m.client().await.cmd(&set).await;
    }
    assert_eq!(c.raw(&args).await, "*1\r\n$2\r\nOK\r\n");
    let other = Some("other".to_string());
    assert_eq!(values_on(&ms, "r6:q").await, vec![None, None, other]);
    // A renewal answering the caller's token (GitLab's): the token held on one master of three
    // is not renewed, nil (the script on that master alone answers the token); held on two,
    // each call gets its own token back.
    let renew = "local key, uuid, ttl = KEYS[1], ARGV[1], ARGV[2]\n\
        if redis.call(\"get\", key) == uuid then\n  redis.call(\"expire\", key, ttl)\n  \
        return uuid\nend";
    ms[0].client().await.cmd(&set).await;
    let args = ["EVAL", renew, "1", "r6:q", "tok", "20"];
    assert_eq!(c.raw(&args).await, "$-1\r\n");
    assert_eq!(ms[0].client().await.raw(&args).await, "$3\r\ntok\r\n");
    for m in &ms[..2] {
        m.client()
            .await
            .cmd(&["SET", "r6:e", "t-1", "PX", "10000"])
            .await;
    }
    let args = ["EVAL", renew, "1", "r6:e", "t-1", "20"];
    assert_eq!(c.raw(&args).await, "$3\r\nt-1\r\n");
    assert!(pttl(&ms[0], "r6:e").await > 10_000);
    let args = ["EVAL", renew, "1", "r6:e", "t-2", "20"];
    assert_eq!(c.raw(&args).await, "$-1\r\n");
}

/// An acquisition guarded by `#KEYS` is a Redlock acquisition: held by another client on two of
/// three masters, it answers the script's refusal (nil) and the key it created on the free
/// master is taken back (negative control: the script as written on that master keeps its
/// key there). Called with a key count it was not recognised for, it is not a lock operation:
/// refused under the reject policy, nothing written.
#[tokio::test]
async fn a_refused_acquisition_guarded_by_keys_count_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let take = "if #KEYS ~= 1 then return redis.error_reply('ERR expected one key') end\n\
        return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])";
    held_by_other(&ms[1..], "r5:q").await;
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", take, "1", "r5:q", "tok", "10000"];
    assert_eq!(c.raw(&args).await, "$-1\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = Some("other".to_string());
    assert_eq!(
        values_on(&ms, "r5:q").await,
        vec![None, other.clone(), other.clone()]
    );
    assert_eq!(ms[0].client().await.raw(&args).await, "+OK\r\n");
    assert_eq!(
        values_on(&ms, "r5:q").await,
        vec![Some("tok".to_string()), other.clone(), other]
    );
    let r = c
        .raw(&["EVAL", take, "2", "r5:a", "r5:b", "tok", "10000"])
        .await;
    assert!(r.starts_with("-"), "{r}");
    assert_eq!(values_on(&ms, "r5:a").await, vec![None, None, None]);
}

/// A script that takes the key for `ARGV[2]` milliseconds (`SET ... PX`) and refreshes it for
/// the same argument in seconds (`EXPIRE`) where it already holds the token answers, from every
/// starting state, what one Redis answers, and leaves the same value and TTL (20 s taken, 20,000 s
/// refreshed). The refresh's TTL is held to `max_ttl_ms` too: beyond it, an error, nothing
/// written. The reverse (taken in seconds, refreshed in milliseconds: a refresh shorter than
/// the acquisition) stays unknown, with its reason.
#[tokio::test]
async fn a_key_taken_in_ms_and_refreshed_in_seconds_answers_what_one_redis_answers() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| {
        c.unknown_scripts = UnknownScripts::Reject;
        c.max_ttl_ms = 100_000_000;
    })
    .await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let answered = "local v = redis.call('get', KEYS[1])\n\
        if not v then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])\n\
        elseif v == ARGV[1] then redis.call('expire', KEYS[1], ARGV[2]) return 'OK'\n\
        else return '' end";
    let expire_reply = "local v = redis.call('get', KEYS[1])\n\
        if v == false then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end\n\
        if v == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end\n\
        return 0";
    let mut case = 0;
    for script in [answered, expire_reply] {
        for from in single {
            case += 1;
            let keys = vec![format!("r5m:{case}")];
            let argv = ["tok", "20000"];
            let (want, got) = both_from(&reference, &ms, &p, script, &keys, from, &argv).await;
            assert_eq!(got, want, "{script} from {from:?}");
        }
    }
    // The refresh asks for 2,000,000 s: beyond max_ttl_ms, an error and nothing written.
    let mut c = Client::connect(&p).await;
    let r = c
        .raw(&["EVAL", answered, "1", "r5m:long", "tok", "2000000"])
        .await;
    assert!(r.starts_with("-ERR"), "{r}");
    assert_eq!(values_on(&ms, "r5m:long").await, vec![None, None, None]);
    let reverse = "local v = redis.call('get', KEYS[1])\n\
        if not v then return redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2])\n\
        elseif v == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2])\n\
        else return '' end";
    let r = c.raw(&["EVAL", reverse, "1", "r5m:rev", "tok", "20"]).await;
    assert!(
        r.contains("in milliseconds on one path and in seconds on another"),
        "{r}"
    );
    assert_eq!(values_on(&ms, "r5m:rev").await, vec![None, None, None]);
}

/// The acquisition taken in ms and refreshed in seconds is a Redlock acquisition: held by
/// another client on two of three masters, it answers the script's refusal and the key it
/// created on the free master is taken back (negative control: the script as written on that
/// master keeps its key). Already the caller's on a quorum, it is refreshed there for the TTL
/// in seconds, as on one Redis, while a master where it was missing gets it for the TTL in ms.
#[tokio::test]
async fn a_refused_acquisition_refreshed_in_seconds_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| {
        c.unknown_scripts = UnknownScripts::Reject;
        c.max_ttl_ms = 100_000_000;
    })
    .await;
    let script = "local v = redis.call('get', KEYS[1])\n\
        if not v then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])\n\
        elseif v == ARGV[1] then redis.call('expire', KEYS[1], ARGV[2]) return 'OK'\n\
        else return '' end";
    held_by_other(&ms[1..], "r5m:q").await;
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", script, "1", "r5m:q", "tok", "10000"];
    assert_eq!(c.raw(&args).await, "$0\r\n\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = Some("other".to_string());
    assert_eq!(
        values_on(&ms, "r5m:q").await,
        vec![None, other.clone(), other.clone()]
    );
    assert_eq!(ms[0].client().await.raw(&args).await, "+OK\r\n");
    assert_eq!(
        values_on(&ms, "r5m:q").await,
        vec![Some("tok".to_string()), other.clone(), other]
    );
    // Mine on two masters (10 s left), missing on the third: a quorum refreshes it for
    // 10,000 s where it was the caller's; the third gets it for 10 s.
    for m in &ms[..2] {
        let set = ["SET", "r5m:r", "tok", "PX", "10000"];
        assert_eq!(m.client().await.raw(&set).await, "+OK\r\n");
    }
    let args = ["EVAL", script, "1", "r5m:r", "tok", "10000"];
    assert_eq!(c.raw(&args).await, "$2\r\nOK\r\n");
    assert!(pttl(&ms[0], "r5m:r").await > 9_000_000);
    assert!(pttl(&ms[1], "r5m:r").await > 9_000_000);
    let third = pttl(&ms[2], "r5m:r").await;
    assert!((1..=10_000).contains(&third), "{third}");
}

/// The re-entrant hash lock of many tutorials (`EXISTS` then `HSET field '1'`, or `HEXISTS`
/// then `HINCRBY field '1'`, `EXPIRE` in seconds, answering 1 or 0) and its unlock (`HINCRBY
/// field -1`, `EXPIRE` where a hold is left, else `DEL`; nil in every case, no publish), and
/// an unlock that only counts down (the TTL left as it was; nil, 0 or 1), from
/// each starting state of the lock (missing, held by the caller once, re-entered, held by
/// another, expired, a string): the reply and the hash a majority of masters hold are what one
/// plain Redis answers and holds, with unknown scripts refused (so both run as hash-lock quorum
/// operations).
#[tokio::test]
async fn a_tutorial_reentrant_hash_lock_answers_what_one_redis_answers() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let mut r = reference.client().await;
    let mut c = Client::connect(&p).await;
    let mut direct = Vec::new();
    for m in &ms {
        direct.push(m.client().await);
    }
    let script = "if (redis.call('exists', KEYS[1]) == 0) then\n\
        redis.call('hset', KEYS[1], ARGV[1], '1');\nredis.call('expire', KEYS[1], ARGV[2]);\n\
        return 1;\nend;\nif (redis.call('hexists', KEYS[1], ARGV[1]) == 1) then\n\
        redis.call('hincrby', KEYS[1], ARGV[1], '1');\nredis.call('expire', KEYS[1], ARGV[2]);\n\
        return 1;\nend;\nreturn 0;";
    // Its unlock: nil in every case, one hold less (TTL in seconds) or the hash deleted.
    let unlock = "if(redis.call('hexists', KEYS[1], ARGV[1]) == 0) then\nreturn nil;\nend;\n\
        local count = redis.call('hincrby', KEYS[1], ARGV[1], -1);\nif(count > 0) then\n\
        redis.call('expire', KEYS[1], ARGV[2]);\nreturn nil;\nelse\n\
        redis.call('del', KEYS[1]);\nreturn nil;\nend;";
    // An unlock that only counts the hold down, leaving the TTL as it was: nil when not held,
    // 0 while a hold is left, 1 when the hash is deleted.
    let count_down = "if (redis.call('hexists', KEYS[1], ARGV[1]) == 0) then\n    return nil;\n\
        end ;\nlocal counter = redis.call('hincrby', KEYS[1], ARGV[1], -1);\n\
        if (counter > 0) then\n    return 0;\nelse\n    redis.call('del', KEYS[1]);\n\
        return 1;\nend ;\nreturn nil;";
    let redisson = lua("redisson_lock");
    let me = "uuid-1:7";
    for (case, start) in [
        "missing",
        "mine",
        "mine twice",
        "other",
        "expired",
        "a string",
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("r5h:{case}");
        let (holder, times) = match start {
            "mine" | "expired" => (me, 1),
            "mine twice" => (me, 2),
            "other" => ("uuid-2:9", 1),
            _ => ("", 0),
        };
        for _ in 0..times {
            let take = if start == "expired" {
                vec!["EVAL", redisson.as_str(), "1", key.as_str(), "60", holder]
            } else {
                vec!["EVAL", script, "1", key.as_str(), holder, "10"]
            };
            let want = if start == "expired" {
                Reply::Nil
            } else {
                Reply::Integer(1)
            };
            assert_eq!(r.cmd(&take).await, want);
            assert_eq!(c.cmd(&take).await, want, "set up {start}");
        }
        if start == "a string" {
            let set = ["SET", key.as_str(), "v", "PX", "10000"];
            assert_eq!(r.cmd(&set).await, Reply::ok());
            assert_eq!(c.cmd(&set).await, Reply::ok());
        }
        if start == "expired" {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let unlocked = format!("{key}:u");
        let counted = format!("{key}:c");
        if (times > 0 && start != "expired") || start == "a string" {
            // The same start for each unlock, on its own key.
            for to in [&unlocked, &counted] {
                let copy = ["COPY", key.as_str(), to.as_str()];
                assert_eq!(r.cmd(&copy).await, Reply::Integer(1));
                for d in direct.iter_mut() {
                    d.cmd(&copy).await;
                }
            }
        }
        let call = ["EVAL", script, "1", key.as_str(), me, "30"];
        let free = ["EVAL", unlock, "1", unlocked.as_str(), me, "30"];
        let down = ["EVAL", count_down, "1", counted.as_str(), me];
        for (call, k) in [
            (&call[..], &key),
            (&free[..], &unlocked),
            (&down[..], &counted),
        ] {
            let want = bucketed(r.cmd(call).await);
            let got = bucketed(c.cmd(call).await);
            assert_eq!(got, want, "reply of {} from {start}", call[1]);
            let want = hash_state(&mut r, k).await;
            let mut per_master = Vec::new();
            for d in direct.iter_mut() {
                per_master.push(hash_state(d, k).await);
            }
            let agreed = per_master.iter().filter(|s| **s == want).count();
            assert!(
                agreed >= 2,
                "{} from {start}: one Redis {want:?}, masters {per_master:?}",
                call[1]
            );
        }
    }
}

/// The tutorial re-entrant hash lock is a Redlock acquisition: held by another on two of three
/// masters, it answers the script's refusal (0) and the hash it created on the free master is
/// deleted. (Negative control: the script as written on the free master answers 1 and keeps
/// its hash there, a grant no quorum made.)
#[tokio::test]
async fn a_refused_tutorial_hash_lock_undoes_what_it_created() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let script = "if (redis.call('exists', KEYS[1]) == 0) then\n\
        redis.call('hset', KEYS[1], ARGV[1], '1');\nredis.call('expire', KEYS[1], ARGV[2]);\n\
        return 1;\nend;\nif (redis.call('hexists', KEYS[1], ARGV[1]) == 1) then\n\
        redis.call('hincrby', KEYS[1], ARGV[1], '1');\nredis.call('expire', KEYS[1], ARGV[2]);\n\
        return 1;\nend;\nreturn 0;";
    for m in &ms[1..] {
        let mut d = m.client().await;
        d.cmd(&["HSET", "r5h:q", "uuid-2:9", "1"]).await;
        d.cmd(&["EXPIRE", "r5h:q", "10"]).await;
    }
    let mut c = Client::connect(&p).await;
    let args = ["EVAL", script, "1", "r5h:q", "uuid-1:7", "10"];
    assert_eq!(c.cmd(&args).await, Reply::Integer(0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut free = ms[0].client().await;
    assert_eq!(free.cmd(&["EXISTS", "r5h:q"]).await, Reply::Integer(0));
    // Negative control: as written on the free master, it takes the lock there.
    assert_eq!(free.cmd(&args).await, Reply::Integer(1));
    assert_eq!(
        free.cmd(&["HGET", "r5h:q", "uuid-1:7"]).await,
        Reply::bulk("1")
    );
}

/// A status query (`ACQUIRED` when the key holds the caller's token, `LOCKED` when another's,
/// `AVAILABLE` when missing), and a plain "is it mine" answering 1 or 0, answer from every
/// starting state what one Redis answers, and change nothing. Across the masters the answer is
/// a quorum's: the caller's token on one master of three only is not `ACQUIRED` (negative
/// control: the script as written on that master says it is), and masters that disagree
/// answer `LOCKED`, never `ACQUIRED`.
#[tokio::test]
async fn a_lock_status_query_answers_what_a_quorum_holds() {
    use Held::*;
    use Start::{Expired, Held as H};
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.unknown_scripts = UnknownScripts::Reject).await;
    let single: &[&[Start]] = &[&[H(Mine)], &[H(Other)], &[H(Missing)], &[Expired]];
    let status = "if redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n    return \"ACQUIRED\"\n\
        elseif redis.call(\"EXISTS\", KEYS[1]) == 1 then\n    return \"LOCKED\"\nelse\n\
        return \"AVAILABLE\"\nend";
    let mine = "if redis.call('get', KEYS[1]) == ARGV[1] then return 1 end\nreturn 0";
    let mut case = 0;
    for script in [status, mine] {
        for from in single {
            case += 1;
            let keys = vec![format!("r5s:{case}")];
            let (want, got) = both_from(&reference, &ms, &p, script, &keys, from, &["tok"]).await;
            assert_eq!(got, want, "{script} from {from:?}");
        }
    }
    let mut c = Client::connect(&p).await;
    let ask = async |c: &mut Client, key: &str| c.raw(&["EVAL", status, "1", key, "tok"]).await;
    // The token on one master only: AVAILABLE (a quorum have no key).
    let set = |v: &'static str| ["SET", "r5s:one", v, "PX", "10000"];
    ms[0].client().await.cmd(&set("tok")).await;
    assert_eq!(ask(&mut c, "r5s:one").await, "$9\r\nAVAILABLE\r\n");
    let direct = ms[0]
        .client()
        .await
        .raw(&["EVAL", status, "1", "r5s:one", "tok"])
        .await;
    assert_eq!(direct, "$8\r\nACQUIRED\r\n");
    // On two of three: ACQUIRED.
    ms[1].client().await.cmd(&set("tok")).await;
    assert_eq!(ask(&mut c, "r5s:one").await, "$8\r\nACQUIRED\r\n");
    // Mine, another's, missing: no quorum for any: LOCKED.
    let split = |v: &'static str| ["SET", "r5s:split", v, "PX", "10000"];
    ms[0].client().await.cmd(&split("tok")).await;
    ms[1].client().await.cmd(&split("other")).await;
    assert_eq!(ask(&mut c, "r5s:split").await, "$6\r\nLOCKED\r\n");
    assert_eq!(
        values_on(&ms, "r5s:split").await,
        vec![Some("tok".to_string()), Some("other".to_string()), None]
    );
}
