//! Recognition tests: the client libraries' scripts (under `tests/clients/lua/`), their
//! rewordings and near misses, each held to the meaning it must (or must not) get.

use bytes::Bytes;

use super::fixtures::op_of;
use super::*;
use crate::lockop::*;
use crate::lua;

/// Classifies every `*.lua` file under `$RECOG_CORPUS` and prints what each is recognised
/// as, or why it is refused (a measuring aid: `RECOG_CORPUS=dir cargo test --lib
/// scripts::tests::corpus -- --ignored --nocapture`).
#[test]
#[ignore]
fn corpus() {
    let Ok(dir) = std::env::var("RECOG_CORPUS") else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "lua"))
        .collect();
    files.sort();
    let (mut yes, mut no) = (0, 0);
    for f in files {
        let body = std::fs::read(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        match recognise(&body) {
            Meaning::Lock(l) => {
                yes += 1;
                println!(
                    "OK   {name}: {:?} token={} ttl={} {:?} {:?}",
                    l.choice, l.token_arg, l.ttl_arg, l.unit, l.answer
                );
            }
            Meaning::Hash(h) => {
                yes += 1;
                println!("OK   {name}: {:?}", h.op);
            }
            Meaning::Plain(p) => {
                yes += 1;
                println!("OK   {name}: {p:?}");
            }
            Meaning::Redisson(r) => {
                yes += 1;
                println!("OK   {name}: {r:?}");
            }
            Meaning::Unless(w) => {
                yes += 1;
                println!("OK   {name}: {w:?}");
            }
            Meaning::Unknown => {
                no += 1;
                println!("NO   {name}: {}", lua::refusal(&body));
                if std::env::var("RECOG_VERBOSE").is_ok() {
                    for t in 1..=3 {
                        println!("  token {t}: {:#?}", lua::behaviour_with(&body, t));
                    }
                }
            }
        }
    }
    println!("recognised {yes}, refused {no}");
}

#[test]
fn sha_matches_redis() {
    // SHA1 of the empty string, as `SCRIPT LOAD ""` answers.
    assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

#[test]
fn library_scripts_are_exact_copies() {
    // The fixtures must be the libraries' exact bytes, or the SHA1s clients send differ.
    for (body, sha) in [
        (
            lua!("redispy_release"),
            "c3f8721cbb97f72bc19e972846bd7aaf91901658",
        ),
        (
            lua!("redispy_extend"),
            "a4e8783852e6b949f9ef3a97212805108459a890",
        ),
        (
            lua!("redlock5_ACQUIRE_SCRIPT"),
            "96da70f7716f27d278a5218544df37fd8b0a5e4c",
        ),
        (
            lua!("redsync_deleteScript"),
            "e950836ed1e694540c503ef9972b8de518044d3b",
        ),
        (
            lua!("redlocknet_Extend_lua"),
            "9f614a785a5f9ae8c6396c6b4bf94d2087342603",
        ),
    ] {
        assert_eq!(sha1_hex(body), sha);
    }
}

#[test]
fn every_library_script_is_recognised() {
    use Answer::*;
    use Op::*;
    // Each script, the arguments it is called with, and its operation, whether it takes every
    // key, and its answer.
    type Case = (&'static [u8], &'static str, Op, bool, Answer);
    #[rustfmt::skip]
    let cases: &[Case] = &[
        (lua!("redispy_release"),              "t",       Release,          false, OneZero),
        (lua!("redispy_extend"),               "t 5 0",   ExtendAdd,        false, OneZero),
        (lua!("redispy_extend"),               "t 5 1",   Extend,           false, OneZero),
        (lua!("redispy_reacquire"),            "t 5",     Extend,           false, OneZero),
        (lua!("redlock5_ACQUIRE_SCRIPT"),      "t 5",     Acquire,          true,  Count),
        (lua!("redlock5_EXTEND_SCRIPT"),       "t 5",     Extend,           true,  Count),
        (lua!("redlock5_RELEASE_SCRIPT"),      "t",       Release,          true,  Count),
        (lua!("redlock4_lockScript"),          "t 5",     Acquire,          true,  Count),
        (lua!("redlock4_extendScript"),        "t 5",     Extend,           true,  Count),
        (lua!("redlock4_unlockScript"),        "t",       Release,          true,  Count),
        (lua!("redsync_deleteScript"),         "t",       Release,          false, Tristate),
        (lua!("redsync_old_deleteScript"),     "t",       Release,          false, OneZero),
        (lua!("redsync_touchScript"),          "t 5",     Extend,           false, OneZero),
        (lua!("redsync_touchWithSetNXScript"), "t 5",     AcquireOrRefresh, false, OneZero),
        (lua!("redlocknet_Unlock_lua"),        "t",       Release,          false, OneZero),
        (lua!("redlocknet_Extend_lua"),        "t 5",     AcquireOrRefresh, false, OneMinusOne),
        (lua!("redlockrb_UNLOCK_SCRIPT"),      "t",       Release,          false, OneZero),
        (lua!("redlockrb_v1_UNLOCK_SCRIPT"),   "t",       Release,          false, OneZero),
        (lua!("redlockrb_LOCK_SCRIPT"),        "t 5 yes", AcquireOrRefresh, false, OkNil),
        (lua!("redlockrb_LOCK_SCRIPT"),        "t 5 no",  Extend,           false, OkNil),
        (lua!("redlockrb_v1_LOCK_SCRIPT"),     "t 5 yes", AcquireOrRefresh, false, OkNil),
        (lua!("php_ronnylt_unlock"),           "t",       Release,          false, OneZero),
        (lua!("php_signe_unlock"),             "t",       Release,          false, OneZero),
        (lua!("rslock_UNLOCK_SCRIPT"),         "t",       Release,          false, OneZero),
        (lua!("rslock_EXTEND_SCRIPT"),         "t 5",     Extend,           false, OneZero),
        (lua!("redlockcrate2_UNLOCK_SCRIPT"),  "t",       Release,          false, OneZero),
        // Locals aliasing KEYS[1] / ARGV[1], `if ... end return 0`.
        (lua!("warlock_parityDel"),            "t",       Release,          false, OneZero),
        // Called with KEYS = key, TTL, token (see `params_in_keys_bind_from_keys`).
        (lua!("warlock_parityRelock"),         "",        Extend,           false, OkZero),
        (lua!("distlock_RELEASE_SCRIPT"),      "t",       Release,          false, OneZero),
    ];
    for &(body, argv, op, all_keys, answer) in cases {
        let argv: Vec<&str> = argv.split_whitespace().collect();
        let want = Some((op, all_keys, answer));
        assert_eq!(
            op_of(body, &argv),
            want,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

fn hash(body: &[u8]) -> HashScript {
    match recognise(body) {
        Meaning::Hash(h) => h,
        other => panic!(
            "{}: {other:?}\n{:#?}",
            String::from_utf8_lossy(body),
            lua::behaviour(body)
        ),
    }
}

/// Redisson's `RLock` scripts are hash-lock operations, recognised by what they do.
#[test]
fn redisson_scripts_are_hash_lock_operations() {
    let by_arg = |j| PublishArgs {
        channel_key: 2,
        message_arg: 1,
        command: PublishCommand::Arg(j),
    };
    let literal = PublishArgs {
        channel_key: 2,
        message_arg: 1,
        command: PublishCommand::Literal(Bytes::from_static(b"PUBLISH")),
    };
    let script = |op, field_arg, ttl_arg, publish, latch| HashScript {
        op,
        field_arg,
        ttl_arg,
        publish,
        latch,
        unit: TtlUnit::Millis,
        replies: None,
        unlock_replies: None,
    };
    let latch = Some(Latch { key: 3, ttl_arg: 5 });
    #[rustfmt::skip]
    let cases = [
        (lua!("redisson_lock"),                   script(HashOp::Acquire, 2, 1, None, None)),
        (lua!("redisson_lock_old"),               script(HashOp::Acquire, 2, 1, None, None)),
        (lua!("redisson_renew"),                  script(HashOp::Renew, 2, 1, None, None)),
        (lua!("redisson_unlock"),                 script(HashOp::Unlock, 3, 2, Some(by_arg(4)), latch)),
        (lua!("redisson_unlock_old"),             script(HashOp::Unlock, 3, 2, Some(literal), None)),
        (lua!("redisson_forceUnlock"),            script(HashOp::ForceUnlock, 0, 0, Some(by_arg(2)), None)),
        (lua!("redisson_LockTask_chunk"),         script(HashOp::RenewAll, 2, 1, None, None)),
        (lua!("redisson_fenced_lock"),            script(HashOp::FencedAcquire, 2, 1, None, None)),
        (lua!("redisson_fenced_lockAndGetToken"), script(HashOp::FencedAcquireToken, 2, 1, None, None)),
    ];
    for (body, want) in cases {
        assert_eq!(hash(body), want, "{}", String::from_utf8_lossy(body));
    }
}

/// Near misses of Redisson's scripts do something else, and stay unknown.
#[test]
fn hash_lock_near_misses_stay_unknown() {
    for text in [
        // Takes the lock even when another holds it.
        "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil;",
        // Sets the hold count to 1 instead of counting re-entry.
        "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);",
        // No TTL on a new lock.
        "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); return nil; end; return redis.call('pttl', KEYS[1]);",
        // Renews whoever holds it.
        "if (redis.call('exists', KEYS[1]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;",
        // Unlock that deletes on the first of two holds.
        "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 1) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end;",
        // Unlock that publishes twice.
        "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end;",
        // Unlock that publishes on every decrement too.
        "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; redis.call(ARGV[4], KEYS[2], ARGV[1]); local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); return 1; end;",
        // Unlock that ignores its latch.
        "local val = redis.call('get', KEYS[3]); if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0; else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end;",
        // A command named by an argument that is not only a publish.
        "if (redis.call('del', KEYS[1]) == 1) then redis.call(ARGV[2], KEYS[1], ARGV[1]); return 1 else return 0 end",
        // forceUnlock that publishes even when nothing was deleted.
        "redis.call('del', KEYS[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1",
        // Multi-lock renewal with every key's field the same argument.
        "local result = {} for i = 1, #KEYS, 1 do if (redis.call('hexists', KEYS[i], ARGV[2]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); else table.insert(result, 0); end; end; return result;",
        // ... renewing whoever holds each key.
        "local result = {} for i = 1, #KEYS, 1 do if (redis.call('exists', KEYS[i]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); else table.insert(result, 0); end; end; return result;",
        // ... answering through an alias of the table it fills.
        "local result = {} local r2 = result for i = 1, #KEYS, 1 do if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(r2, 1); else table.insert(r2, 0); end; end; return result;",
        // ... stopping at the first key not held.
        "local result = {} for i = 1, #KEYS, 1 do if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); else return result; end; end; return result;",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
    // The TTL in seconds, or constants of its own in place of nil and the PTTL: the same
    // acquisition with that unit, or those replies (re-entrant hash locks of tutorials).
    let seconds = hash(b"if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('expire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);");
    assert_eq!(
        (seconds.op, seconds.unit, seconds.replies),
        (HashOp::Acquire, TtlUnit::Seconds, None)
    );
    let zero = hash(b"if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return 0;");
    assert_eq!(zero.replies, Some((Lit::Nil, Lit::Int(0))));
    let one_zero = hash(b"if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return 1; end; if (redis.call('hexists', KEYS[1], ARGV[1]) == 1) then redis.call('hincrby', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return 1; end; return 0;");
    assert_eq!(
        (
            one_zero.op,
            one_zero.field_arg,
            one_zero.ttl_arg,
            one_zero.unit,
            one_zero.replies
        ),
        (
            HashOp::Acquire,
            1,
            2,
            TtlUnit::Seconds,
            Some((Lit::Int(1), Lit::Int(0)))
        )
    );
    // An unlock given no channel publishes nothing (tutorials' unlocks, answering nil in
    // every case, or Redisson's nil/0/1): an unlock without a publish, with those replies.
    let quiet = hash(b"if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); return 1; end;");
    assert_eq!(
        (
            quiet.op,
            quiet.field_arg,
            quiet.ttl_arg,
            quiet.publish,
            quiet.unlock_replies
        ),
        (
            HashOp::Unlock,
            3,
            2,
            None,
            Some([Lit::Nil, Lit::Int(0), Lit::Int(1)])
        )
    );
    let nil = hash(b"if(redis.call('hexists', KEYS[1], ARGV[1]) == 0) then return nil; end; local count = redis.call('hincrby', KEYS[1], ARGV[1], -1); if(count > 0) then redis.call('expire', KEYS[1], ARGV[2]); return nil; else redis.call('del', KEYS[1]); return nil; end;");
    assert_eq!(
        (nil.op, nil.unit, nil.unlock_replies),
        (HashOp::Unlock, TtlUnit::Seconds, Some([Lit::Nil; 3]))
    );
    // ... but one that deletes on the first of two holds stays unknown.
    assert_eq!(
            recognise(b"if (redis.call('hexists', KEYS[1], ARGV[1]) == 0) then return nil; end; local count = redis.call('hincrby', KEYS[1], ARGV[1], -1); if (count > 1) then redis.call('expire', KEYS[1], ARGV[2]); return nil; else redis.call('del', KEYS[1]); return nil; end;"),
            Meaning::Unknown
        );
    // Answering the hold count on re-entry (each master counts its own) stays unknown.
    assert_eq!(
            recognise(b"if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return 1; end; if (redis.call('hexists', KEYS[1], ARGV[1]) == 1) then local n = redis.call('hincrby', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return n; end; return 0;"),
            Meaning::Unknown
        );
    // An older Redisson unlock answered 1 and published for a lock already gone: not the
    // unlock the proxy runs (nil there), so it stays unknown (and runs under the
    // unknown-script rule; its replies do not differ between masters).
    assert_eq!(recognise(lua!("redisson_unlock_oldest")), Meaning::Unknown);
    // RFencedLock near misses: the token counted on refusals too, or before the check
    // (also when refused), or twice; the token answered on refusals.
    for text in [
        "redis.call('incr', KEYS[2]); if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);",
        "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('incr', KEYS[2]); redis.call('incr', KEYS[2]); redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);",
        "if (redis.call('exists', KEYS[1]) == 0 or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then local token = redis.call('incr', KEYS[2]);redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return {-1, token}; end; return {redis.call('pttl', KEYS[1]), redis.call('get', KEYS[2])};",
        "if (redis.call('exists', KEYS[1]) == 0) then local token = redis.call('incr', KEYS[2]);redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return {-1, token}; end; return {redis.call('pttl', KEYS[1]), -1};",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

#[test]
fn params_in_keys_bind_from_keys() {
    // warlock: `parityRelock(3, key, ttl, id)`.
    let Meaning::Lock(l) = recognise(lua!("warlock_parityRelock")) else {
        panic!("parityRelock not recognised");
    };
    assert!(l.params_in_keys);
    assert_eq!((l.token_arg, l.ttl_arg, l.unit), (2, 1, TtlUnit::Millis));
}

/// python-redis-lock 4.0: unlock and reset are a release / a delete that also leave a
/// wake-up signal on `KEYS[2]`; extend is an `EXPIRE` in seconds answering 0 / 1.
#[test]
fn python_redis_lock_scripts_are_recognised_with_their_signal() {
    let signal = |always| {
        Some(Signal {
            key: 2,
            ttl_arg: 2,
            value: Bytes::from_static(b"1"),
            always,
        })
    };
    let Meaning::Lock(unlock) = recognise(lua!("redislock4_UNLOCK_SCRIPT")) else {
        panic!("unlock not recognised");
    };
    assert_eq!(unlock.choice, Choice::Always(Op::Release));
    assert_eq!((unlock.answer, unlock.all_keys), (Answer::ZeroOne, false));
    assert_eq!(unlock.signal, signal(false));
    let Meaning::Lock(reset) = recognise(lua!("redislock4_RESET_SCRIPT")) else {
        panic!("reset not recognised");
    };
    assert_eq!(reset.choice, Choice::Always(Op::Delete));
    assert_eq!(
        reset.signal,
        signal(true),
        "reset signals whatever it deleted"
    );
    let Meaning::Lock(extend) = recognise(lua!("redislock4_EXTEND_SCRIPT")) else {
        panic!("extend not recognised");
    };
    assert_eq!(extend.choice, Choice::Always(Op::Extend));
    assert_eq!(
        (extend.answer, extend.unit, extend.ttl_arg, extend.signal),
        (Answer::ZeroOne, TtlUnit::Seconds, 2, None)
    );
    // Variants that must not pass as the same thing: a signal pushed onto a list that
    // is not emptied first, a signal that depends on another key, a signal without a TTL.
    for body in [
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end \
             redis.call('lpush', KEYS[2], 1) redis.call('pexpire', KEYS[2], ARGV[2]) \
             redis.call('del', KEYS[1]) return 0",
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end \
             redis.call('del', KEYS[2]) redis.call('lpush', KEYS[2], 1) \
             redis.call('del', KEYS[1]) return 0",
        "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end \
             redis.call('del', KEYS[2]) redis.call('lpush', KEYS[2], 1) \
             redis.call('pexpire', KEYS[2], ARGV[2]) return 0",
    ] {
        assert_eq!(recognise(body.as_bytes()), Meaning::Unknown, "{body}");
    }
}

#[test]
fn a_script_that_always_ends_in_one_plain_set_is_that_set() {
    // Redis::DistLock 0.07 extend: `SET XX` overwrites another holder's lock, and a missing
    // key is set too: from every state it ends as `SET key value PX ttl` would, answering
    // `OK` (a string where the key existed, a status where it did not).
    let set = Meaning::Plain(PlainSet {
        value_arg: 1,
        ttl_arg: 2,
        unit: TtlUnit::Millis,
    });
    assert_eq!(recognise(lua!("distlock_EXTEND_SCRIPT")), set);
    assert_eq!(
        recognise(b"redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[1]) return 'OK'"),
        Meaning::Plain(PlainSet {
            value_arg: 2,
            ttl_arg: 1,
            unit: TtlUnit::Seconds,
        })
    );
    for other in [
        // Only where the key exists: `SET XX`, another command.
        "return redis.call('set', KEYS[1], ARGV[1], 'XX', 'PX', ARGV[2])",
        // A value from a literal, or no expiry.
        "return redis.call('set', KEYS[1], 'v', 'PX', ARGV[2])",
        "return redis.call('set', KEYS[1], ARGV[1])",
        // Another key too.
        "redis.call('del', KEYS[2]) return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])",
        // A choice on an argument.
        "if ARGV[3] == '1' then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end \
             return redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2])",
    ] {
        assert_eq!(recognise(other.as_bytes()), Meaning::Unknown, "{other}");
    }
    let table = lua::behaviour(lua!("distlock_EXTEND_SCRIPT")).unwrap();
    assert!(
            table.contains(
                &"[other1 (ttl kept)]: set KEYS[1] ARGV[1] 'XX' 'PX' ARGV[2]; -> 'OK' [ARGV[1] (ttl ARGV[2] ms)]"
                    .to_string()
            ),
            "{table:#?}"
        );
}

#[test]
fn a_constant_written_unless_the_key_holds_it_is_set_ifne() {
    use crate::lockop::{Lit, Short, WriteUnless};
    let unless = |value: &str, ttl_arg, unit, ok, no| {
        Meaning::Unless(WriteUnless {
            value: Bytes::copy_from_slice(value.as_bytes()),
            ttl_arg,
            unit,
            ok,
            no,
        })
    };
    let bulk = |s: &str| Lit::Bulk(Short::new(s.as_bytes()).unwrap());
    assert_eq!(
        recognise(
            b"if redis.call('GET', KEYS[1]) == 'busy' then return 'NO' \
                  else return redis.call('SET', KEYS[1], 'busy', 'PX', ARGV[1]) end"
        ),
        unless("busy", 1, TtlUnit::Millis, Lit::Ok, bulk("NO"))
    );
    // Another spelling: the value stored as a number, seconds, 1/0, the TTL in ARGV[2].
    assert_eq!(
        recognise(
            b"local v = redis.call('get', KEYS[1]) if v ~= '7' then \
                  redis.call('setex', KEYS[1], ARGV[2], 7) return 1 end return 0"
        ),
        unless("7", 2, TtlUnit::Seconds, Lit::Int(1), Lit::Int(0))
    );
    for other in [
        // Compares one constant, writes another.
        "if redis.call('get', KEYS[1]) == '1' then return 0 end \
             redis.call('set', KEYS[1], '2', 'PX', ARGV[1]) return 1",
        // Writes only where missing after the test (not what IFNE does to another value).
        "if redis.call('get', KEYS[1]) == '1' then return 0 end \
             return redis.call('set', KEYS[1], '1', 'NX', 'PX', ARGV[1])",
        // No expiry.
        "if redis.call('get', KEYS[1]) == '1' then return 0 end \
             redis.call('set', KEYS[1], '1') return 1",
        // The same reply either way.
        "if redis.call('get', KEYS[1]) == '1' then return 1 end \
             redis.call('set', KEYS[1], '1', 'PX', ARGV[1]) return 1",
        // Refreshes the TTL where it holds the constant.
        "if redis.call('get', KEYS[1]) == '1' then redis.call('pexpire', KEYS[1], ARGV[1]) return 0 end \
             redis.call('set', KEYS[1], '1', 'PX', ARGV[1]) return 1",
        // Two constants compared.
        "local v = redis.call('get', KEYS[1]) if v == '1' or v == '2' then return 0 end \
             redis.call('set', KEYS[1], '1', 'PX', ARGV[1]) return 1",
    ] {
        assert_eq!(recognise(other.as_bytes()), Meaning::Unknown, "{other}");
    }
}
