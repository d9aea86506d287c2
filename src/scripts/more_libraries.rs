//! Lock libraries recognised since the first set: bsm/redislock (Go), pottery and aioredlock
//! (Python), and short hand-written forms seen in the wild, each with near misses that must
//! stay unknown.

use bytes::Bytes;

use super::fixtures::{argv, assert_always, choice_and_answer, lock};
use super::*;
use crate::lockop::*;
use crate::lua;

fn bulk(s: &str) -> Lit {
    Lit::Bulk(Short::new(s.as_bytes()).unwrap())
}

fn error(s: &str) -> Lit {
    Lit::Error(Short::new(s.as_bytes()).unwrap())
}

/// The fixtures are the libraries' exact bytes (taken from their sources: Go raw strings
/// and `go:embed` files, Python triple-quoted strings with their indentation), so a client
/// sends these SHA1s.
#[test]
fn fixtures_are_the_libraries_exact_bytes() {
    for (body, sha) in [
        (
            lua!("bsm_obtain"),
            "eb0c00d98f6f33b4262419a509002884540f30be",
        ),
        (
            lua!("bsm_refresh"),
            "5a22d7e8431313862816d4416b5e46dd70fc340d",
        ),
        (
            lua!("bsm_release"),
            "9470c810040e272ee6c579d8d4331aaf6332a7b1",
        ),
        (
            lua!("bsm_v0_obtain"),
            "80a1b5f2cfccec3b7119ba7721d2127682b691a7",
        ),
        (
            lua!("aioredlock_SET_LOCK_SCRIPT"),
            "aecadef15d24ccd9360d8641cdec8e0337a0d343",
        ),
    ] {
        assert_eq!(sha1_hex(body), sha);
    }
}

/// bsm/redislock's current scripts work on all of `KEYS`, all or nothing.
#[test]
fn bsm_redislock_scripts_are_recognised() {
    let obtain = lock(lua!("bsm_obtain"));
    assert_eq!(
        obtain.choice,
        Choice::IfTokenLen {
            arg: 2,
            then: Op::AcquireOrRefreshAll,
            otherwise: Op::Acquire
        }
    );
    assert_eq!(
        (
            obtain.token_arg,
            obtain.ttl_arg,
            obtain.all_keys,
            obtain.answer
        ),
        (1, 3, true, Answer::OkNil)
    );
    // The prefix is the whole token: a key holding exactly the token is the caller's.
    assert_eq!(
        obtain.op(&argv(&["tok", "3", "5000"])),
        Op::AcquireOrRefreshAll
    );
    // Metadata after the token, a zero, an empty token or a non-number: never take a held
    // key back.
    for a in [
        &["tokmeta", "3", "5000"][..],
        &["tok", "0", "5000"],
        &["tok", "4", "5000"],
        &["", "0", "5000"],
        &["tok", " 3", "5000"],
        &["tok", "3.0", "5000"],
        &["tok"],
    ] {
        assert_eq!(obtain.op(&argv(a)), Op::Acquire, "{a:?}");
    }
    let refresh = lock(lua!("bsm_refresh"));
    assert_eq!(
        (
            refresh.choice,
            refresh.ttl_arg,
            refresh.all_keys,
            refresh.answer
        ),
        (Choice::Always(Op::Extend), 2, true, Answer::OkNil)
    );
    let release = lock(lua!("bsm_release"));
    assert_eq!(
        (release.choice, release.all_keys, release.answer),
        (Choice::Always(Op::ReleaseAll), true, Answer::OkNil)
    );
}

/// bsm/redislock before multi-key locks (v0.4 to v0.9): single-key scripts.
#[test]
fn bsm_redislock_single_key_scripts_are_recognised() {
    let obtain = lock(lua!("bsm_v0_obtain"));
    assert_eq!(
        (
            obtain.choice,
            obtain.ttl_arg,
            obtain.all_keys,
            obtain.answer
        ),
        (
            Choice::IfTokenLen {
                arg: 2,
                then: Op::AcquireOrRefresh,
                otherwise: Op::Acquire
            },
            3,
            false,
            Answer::OkNil
        )
    );
    assert_always(lua!("bsm_v0_refresh"), Op::Extend, Answer::OneZero);
    assert_always(lua!("bsm_v0_release"), Op::Release, Answer::OneZero);
}

#[test]
fn pottery_and_aioredlock_scripts_are_recognised() {
    assert_always(lua!("pottery_extend"), Op::Extend, Answer::OneZero);
    assert_always(lua!("pottery_release"), Op::Release, Answer::OneZero);
    let set = lock(lua!("aioredlock_SET_LOCK_SCRIPT"));
    let refused = error("ERR ERROR");
    assert_eq!(
        (set.choice, set.ttl_arg, set.answer),
        (
            Choice::Always(Op::AcquireOrRefresh),
            2,
            Answer::Const(Replies::new(Lit::Ok, refused, refused))
        )
    );
    assert_eq!(
        choice_and_answer(lua!("aioredlock_UNSET_LOCK_SCRIPT")),
        (
            Choice::Always(Op::Release),
            Answer::Const(Replies::new(Lit::Int(1), refused, Lit::Ok))
        )
    );
}

#[test]
fn short_forms_from_the_wild_are_recognised() {
    let setnx = lock(
            b"local key = KEYS[1] local value = ARGV[1] local ttl = ARGV[2] \
              if redis.call('SETNX', key, value) == 1 then redis.call('EXPIRE', key, ttl) return 1 else return 0 end",
        );
    assert_eq!(
        (setnx.choice, setnx.ttl_arg, setnx.unit, setnx.answer),
        (
            Choice::Always(Op::Acquire),
            2,
            TtlUnit::Seconds,
            Answer::OneZero
        )
    );
    let ok_fail = lock(
            b"local val = redis.call(\"get\", KEYS[1]) if not val or val == ARGV[1] then \
              redis.call(\"set\", KEYS[1], ARGV[1], \"PX\", ARGV[2]) return \"OK\" else return \"FAIL\" end",
        );
    assert_eq!(
        (ok_fail.choice, ok_fail.answer),
        (
            Choice::Always(Op::AcquireOrRefresh),
            Answer::Const(Replies::new(bulk("OK"), bulk("FAIL"), bulk("FAIL")))
        )
    );
    // An error reply with its own code keeps it.
    let coded = lock(
        b"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end \
              return redis.error_reply('NOTOWNER not yours')",
    );
    assert_eq!(
        coded.answer,
        Answer::Const(Replies::new(
            Lit::Int(1),
            error("NOTOWNER not yours"),
            error("NOTOWNER not yours")
        ))
    );
}

/// TTL reads: how long the caller still holds the lock, else a constant.
#[test]
fn ttl_reads_are_recognised() {
    let read = |body: &[u8]| {
        let l = lock(body);
        (l.choice, l.unit, l.answer)
    };
    let consts = |ok, no| Answer::Const(Replies::new(ok, no, no));
    assert_eq!(
        read(lua!("pottery_acquired")),
        (
            Choice::Always(Op::Remaining),
            TtlUnit::Millis,
            consts(Lit::Int(0), Lit::Int(0))
        )
    );
    assert_eq!(
        read(lua!("bsm_v0_pttl")),
        (
            Choice::Always(Op::Remaining),
            TtlUnit::Millis,
            consts(Lit::Int(-1), Lit::Int(-3))
        )
    );
    assert_eq!(
        read(lua!("aioredlock_GET_LOCK_TTL_SCRIPT")),
        (
            Choice::Always(Op::Remaining),
            TtlUnit::Seconds,
            consts(Lit::Int(-1), error("ERR ERROR"))
        )
    );
    // bsm/redislock's current pttl.lua: the smallest TTL of all the keys when every one
    // holds the token (0 when none has a TTL), else nil.
    let bsm = lock(lua!("bsm_pttl"));
    assert_eq!(
        (bsm.choice, bsm.all_keys, bsm.unit, bsm.answer),
        (
            Choice::Always(Op::Remaining),
            true,
            TtlUnit::Millis,
            consts(Lit::Int(0), Lit::Nil)
        )
    );
    for text in [
        // The largest of two TTLs, not the smallest.
        "local v = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do \
             if v[i] ~= ARGV[1] then return false end end local m = 0 \
             for _, k in ipairs(KEYS) do local t = redis.call('pttl', k) \
             if t > 0 and (m == 0 or t > m) then m = t end end return m",
        // The first key's TTL only.
        "local v = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do \
             if v[i] ~= ARGV[1] then return false end end return redis.call('pttl', KEYS[1])",
        // The TTL of someone else's lock.
        "return redis.call('pttl', KEYS[1])",
        // Answers the TTL whoever holds it.
        "if redis.call('get', KEYS[1]) then return redis.call('pttl', KEYS[1]) end return -3",
        // Reads, then extends: not a read.
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], 100) \
             return redis.call('pttl', KEYS[1]) end return -3",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

/// Hostile uses of what the analyser now follows stay unknown and fast: a large function
/// defined again and again in nested loops, a table grown without bound, calls nested
/// deeply.
#[test]
fn functions_and_tables_stay_cheap_to_analyse() {
    let body = "redis.call('get', KEYS[1]) ".repeat(400);
    let mut inputs = vec![
        format!(
            "for i = 1, 16 do for j = 1, 16 do local function f() {body} end f() end end return redis.call('del', KEYS[1])"
        ),
        "local t = {} for i = 1, 16 do for j = 1, 16 do table.insert(t, ARGV[1]) end end \
             return redis.call('del', unpack(t))"
            .to_string(),
    ];
    let mut nested = String::from("local function f0() return redis.call('get', KEYS[1]) end ");
    for i in 1..200 {
        nested.push_str(&format!("local function f{i}() return f{}() end ", i - 1));
    }
    nested.push_str("return f199()");
    inputs.push(nested);
    // Function bodies nested as deep as the parser allows, each calling the next at its
    // deepest point.
    let deep = |inner: &str| format!("{}{inner}{}", "do ".repeat(56), " end".repeat(56));
    let mut chain = format!(
        "local function g0() {} end ",
        deep("return redis.call('get', KEYS[1])")
    );
    for i in 1..4 {
        chain.push_str(&format!(
            "local function g{i}() {} end ",
            deep(&format!("return g{}()", i - 1))
        ));
    }
    chain.push_str(&deep("return g3()"));
    inputs.push(chain);
    for input in inputs {
        let start = std::time::Instant::now();
        assert!(lua::parse_script(input.as_bytes()).is_ok(), "{input}");
        // On a thread with the 2 MiB stack the proxy's worker threads have.
        let text = input.clone();
        let meaning = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || recognise(text.as_bytes()))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(meaning, Meaning::Unknown);
        let took = start.elapsed();
        assert!(
            took < std::time::Duration::from_millis(500),
            "{took:?} for {}...",
            &input[..40]
        );
    }
}

/// Near misses: each would be unsafe (or different) to run as the lock operation it
/// resembles.
#[test]
fn near_misses_stay_unknown() {
    for text in [
        // bsm obtain without the prefix check: MSET overwrites another holder's keys.
        "local a = {} for _, k in ipairs(KEYS) do table.insert(a, k) table.insert(a, ARGV[1]) end \
             if redis.call('msetnx', unpack(a)) ~= 1 then redis.call('mset', unpack(a)) end \
             for _, k in ipairs(KEYS) do redis.call('pexpire', k, ARGV[3]) end return redis.status_reply('OK')",
        // The prefix taken from another argument than the token.
        "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return redis.status_reply('OK') end \
             local n = tonumber(ARGV[2]) \
             if redis.call('getrange', KEYS[1], 0, n - 1) == string.sub(ARGV[4], 1, n) then \
               return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[3]) end",
        // The prefix test inverted: takes over keys that are NOT the caller's.
        "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return redis.status_reply('OK') end \
             local n = tonumber(ARGV[2]) \
             if redis.call('getrange', KEYS[1], 0, n - 1) ~= string.sub(ARGV[1], 1, n) then \
               return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[3]) end",
        // bsm release without the value compare, still answering OK.
        "redis.call('del', unpack(KEYS)) return redis.status_reply('OK')",
        // bsm release that deletes when a value does not match.
        "local v = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do \
             if v[i] == ARGV[1] then return false end end redis.call('del', unpack(KEYS)) return redis.status_reply('OK')",
        // A write to a key not in KEYS.
        "if redis.call('SETNX', KEYS[1], ARGV[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) \
             redis.call('set', 'last-owner', ARGV[1]) return 1 else return 0 end",
        // SETNX without a TTL: a lock that never expires.
        "if redis.call('SETNX', KEYS[1], ARGV[1]) == 1 then return 1 else return 0 end",
        // OK/FAIL where the refusal overwrites the holder anyway.
        "local val = redis.call('get', KEYS[1]) if not val or val == ARGV[1] then \
             redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 'OK' else \
             redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 'FAIL' end",
        // The same reply whether granted or not: the client could not tell.
        "local val = redis.call('get', KEYS[1]) if not val or val == ARGV[1] then \
             redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end return 'OK'",
        // A table alias: the insert goes through `b`, the delete reads `a`.
        "local a = {} local b = a table.insert(b, KEYS[1]) \
             if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', unpack(a)) end return 0",
        // A recursive function.
        "local function f() return f() end return f()",
        // unpack anywhere but the end of a redis.call.
        "local k = unpack(KEYS) if redis.call('get', k) == ARGV[1] then return redis.call('del', k) end return 0",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
    // A constant reply longer than the proxy keeps (Short::MAX bytes).
    let long = format!(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end \
             return '{}'",
        "x".repeat(Short::MAX + 1)
    );
    assert_eq!(recognise(long.as_bytes()), Meaning::Unknown);
}

/// Take-or-already-mine: a key that holds the caller's token answers the grant and keeps
/// its TTL (no refresh), whatever the spelling.
#[test]
fn take_or_keep_is_recognised() {
    let keep = |text: &str| {
        let l = lock(text.as_bytes());
        (
            l.choice,
            l.token_arg,
            l.ttl_arg,
            l.unit,
            l.all_keys,
            l.answer,
        )
    };
    let plain = (
        Choice::Always(Op::AcquireOrKeep),
        1,
        2,
        TtlUnit::Millis,
        false,
        Answer::OneZero,
    );
    for text in [
        "if redis.call('get', KEYS[1]) == ARGV[1] then return 1 \
             elseif redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 else return 0 end",
        "local k = KEYS[1] local me = ARGV[1] \
             if redis.call('GET', k) == me or redis.call('SET', k, me, 'NX', 'PX', ARGV[2]) then return 1 end return 0",
    ] {
        assert_eq!(keep(text), plain, "{text}");
    }
    // Seconds, and a fresh grant told apart from "already mine".
    assert_eq!(
        keep(
            "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end \
                 if redis.call('get', KEYS[1]) == ARGV[1] then return 1 end return -1"
        ),
        (
            Choice::Always(Op::AcquireOrKeep),
            1,
            2,
            TtlUnit::Seconds,
            false,
            Answer::Const(Replies {
                ok: Lit::Int(0),
                no: Lit::Int(-1),
                gone: Lit::Int(-1),
                again: Lit::Int(1),
            })
        )
    );
    // Near misses: each must stay unknown.
    for text in [
        // "Already mine" where the value is NOT the token: any holder is answered yes.
        "if redis.call('get', KEYS[1]) then return 1 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
        // Already mine answered like a refusal and a fresh grant alike: nothing to tell.
        "if redis.call('get', KEYS[1]) == ARGV[1] then return 0 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end return 0",
        // Already mine: the TTL is cut to a constant (neither kept nor the one asked).
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], 100) return 1 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
        // Already mine: the key is rewritten without a TTL.
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[1], ARGV[1]) return 1 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
        // Every key of KEYS: take-or-keep is one key only.
        "for _, k in ipairs(KEYS) do if redis.call('get', k) ~= ARGV[1] and \
             not redis.call('set', k, ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end end return 1",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

/// The token passed in `KEYS[2]`, its TTL in `ARGV[1]` (numbered after the keys' parameters,
/// see `ARGV_AFTER_KEYS`).
#[test]
fn a_token_in_keys_with_its_ttl_in_argv_is_recognised() {
    let l = lock(
        b"local v = redis.call('get', KEYS[1]) \
              if not v then redis.call('set', KEYS[1], KEYS[2], 'PX', ARGV[1]) return 1 end \
              if v == KEYS[2] then redis.call('pexpire', KEYS[1], ARGV[1]) return 1 end return 0",
    );
    assert_eq!(
        (l.choice, l.params_in_keys, l.token_arg, l.ttl_arg, l.answer),
        (
            Choice::Always(Op::AcquireOrRefresh),
            true,
            1,
            crate::lockop::ARGV_AFTER_KEYS + 1,
            Answer::OneZero
        )
    );
    for text in [
        // Writes KEYS[2] but compares ARGV[1]: another holder's key is overwritten.
        "local v = redis.call('get', KEYS[1]) \
             if not v or v == ARGV[1] then redis.call('set', KEYS[1], KEYS[2], 'PX', ARGV[2]) return 1 end return 0",
        // Uses KEYS[2] as a key as well as the token.
        "if redis.call('set', KEYS[1], KEYS[2], 'NX', 'PX', ARGV[1]) then \
             redis.call('set', KEYS[2], '1') return 1 end return 0",
        // The TTL is the token itself.
        "if redis.call('set', KEYS[1], KEYS[2], 'NX', 'PX', KEYS[2]) then return 1 end return 0",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

/// A constant written as the lock's value (a mutex without ownership): an acquisition whose
/// token is the literal; nothing else with a literal is taken for a lock operation.
#[test]
fn a_constant_value_acquisition_is_recognised() {
    let l = lock(
        b"if redis.call('exists', KEYS[1]) == 0 then \
              return redis.call('psetex', KEYS[1], ARGV[1], 'locked') end return 'BUSY'",
    );
    assert_eq!(
        (l.choice, l.token_literal.as_deref(), l.ttl_arg, l.answer),
        (
            Choice::Always(Op::Acquire),
            Some(&b"locked"[..]),
            1,
            Answer::Const(Replies::new(Lit::Ok, bulk("BUSY"), bulk("BUSY")))
        )
    );
    let l = lock(b"return redis.call('set', KEYS[1], 1, 'NX', 'EX', ARGV[2])");
    assert_eq!(
        (l.choice, l.token_literal.as_deref(), l.ttl_arg, l.unit),
        (
            Choice::Always(Op::Acquire),
            Some(&b"1"[..]),
            2,
            TtlUnit::Seconds
        )
    );
    // Overwrites any value but its own: not an acquisition, but `SET key locked IFNE locked
    // PX ttl` (see a_constant_written_unless_the_key_holds_it_is_set_ifne).
    assert!(matches!(
        recognise(
            b"if redis.call('get', KEYS[1]) == 'locked' then return 'BUSY' end \
                  return redis.call('psetex', KEYS[1], ARGV[1], 'locked')"
        ),
        Meaning::Unless(_)
    ));
    for text in [
        // Two different constants.
        "if redis.call('exists', KEYS[1]) == 1 then return 0 end \
             if ARGV[2] == 'a' then redis.call('psetex', KEYS[1], ARGV[1], 'x') \
             else redis.call('psetex', KEYS[1], ARGV[1], 'y') end return 1",
        // A release of the constant: anyone's release.
        "if redis.call('get', KEYS[1]) == 'locked' then return redis.call('del', KEYS[1]) end return 0",
        // An extension of the constant.
        "if redis.call('get', KEYS[1]) == 'locked' then return redis.call('pexpire', KEYS[1], ARGV[1]) end return 0",
        // No TTL: never expires.
        "if redis.call('setnx', KEYS[1], 'locked') == 1 then return 1 end return 0",
        // An empty constant.
        "return redis.call('set', KEYS[1], '', 'NX', 'PX', ARGV[1])",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

// The shapes of issue 25, in the tests below: the token and TTL in any argument, any constant
// per outcome, a refresh answered apart from a fresh grant, a guarded expiry, a release that
// publishes.

/// The token and TTL in any argument; any constant per outcome, a refresh answered apart from
/// a fresh grant.
#[test]
fn any_argument_and_any_constant_per_outcome() {
    // Token in ARGV[2], TTL (seconds) in ARGV[1].
    let l = lock(
        b"local v = redis.call('get', KEYS[1]) \
              if not v then redis.call('setex', KEYS[1], ARGV[1], ARGV[2]) return true \
              elseif v == ARGV[2] then redis.call('expire', KEYS[1], ARGV[1]) return true end",
    );
    assert_eq!(
        (l.choice, l.token_arg, l.ttl_arg, l.unit),
        (Choice::Always(Op::AcquireOrRefresh), 2, 1, TtlUnit::Seconds)
    );
    // A refresh answers 1, a fresh grant +OK, a refusal nil.
    let l = lock(
        b"if redis.call('get', KEYS[1]) == ARGV[1] then \
              return redis.call('pexpire', KEYS[1], ARGV[2]) end \
              return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])",
    );
    assert_eq!(
        l.answer,
        Answer::Const(Replies {
            ok: Lit::Ok,
            no: Lit::Nil,
            gone: Lit::Nil,
            again: Lit::Int(1),
        })
    );
    // `tostring` of a comparison; a one-element table.
    let l = lock(
        b"local ok = redis.call('get', KEYS[1]) == ARGV[1] \
              if ok then redis.call('del', KEYS[1]) end return tostring(ok)",
    );
    assert_eq!(
        l.answer,
        Answer::Const(Replies::new(bulk("true"), bulk("false"), bulk("false")))
    );
    let l = lock(
        b"if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) \
              return {1} end return {0}",
    );
    assert_eq!(
        l.answer,
        Answer::Const(Replies::new(Lit::Single(1), Lit::Single(0), Lit::Single(0)))
    );
}

/// An expiry behind a test of its argument, when the test holds for every positive TTL.
#[test]
fn an_expiry_guarded_by_a_test_of_its_argument() {
    // An expiry behind a numeric test of its argument (the other branch persists the key:
    // a call with such a TTL is refused when bound).
    let l = lock(
        b"if redis.call('get', KEYS[1]) == ARGV[1] then \
              if tonumber(ARGV[2]) > 0 then return redis.call('expire', KEYS[1], ARGV[2]) end \
              redis.call('persist', KEYS[1]) return 1 else return 0 end",
    );
    assert_eq!(
        (l.choice, l.ttl_arg, l.unit),
        (Choice::Always(Op::Extend), 2, TtlUnit::Seconds)
    );
    // An acquisition whose expiry is behind `guard`.
    let guarded = |guard: &str| {
        format!(
            "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then \
                 if {guard} then redis.call('pexpire', KEYS[1], ARGV[2]) end return 1 end return 0"
        )
    };
    for guard in [
        "tonumber(ARGV[2]) >= 1",
        "0 < tonumber(ARGV[2])",
        "ARGV[2] ~= ''",
    ] {
        let text = guarded(guard);
        assert_eq!(
            lock(text.as_bytes()).choice,
            Choice::Always(Op::Acquire),
            "{guard}"
        );
    }
    // A test that some positive TTLs fail is no guard.
    for guard in [
        "tonumber(ARGV[2]) > 5",
        "ARGV[2] ~= '100'",
        "tonumber(ARGV[2]) < 9",
    ] {
        let text = guarded(guard);
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{guard}");
    }
}

/// Arguments named through `unpack(ARGV)`, an operation picked by a numeric flag, and keys
/// walked with `pairs(KEYS)`.
#[test]
fn unpacked_names_numeric_flags_and_key_walks() {
    use crate::lockop::NumTest;
    // Names taken from `unpack(ARGV)`.
    let l = lock(
        b"local token, ttl = unpack(ARGV) if redis.call('get', KEYS[1]) == token then \
              return redis.call('pexpire', KEYS[1], ttl) end return 0",
    );
    assert_eq!(
        (l.choice, l.token_arg, l.ttl_arg),
        (Choice::Always(Op::Extend), 1, 2)
    );
    // A numeric flag picks the operation; `pairs(KEYS)` walks the keys in order.
    let l = lock(
        b"if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
              local left = redis.call('pttl', KEYS[1]) if left < 0 then return 0 end \
              if tonumber(ARGV[3]) == 1 then return redis.call('pexpire', KEYS[1], ARGV[2]) end \
              return redis.call('pexpire', KEYS[1], left + ARGV[2])",
    );
    assert_eq!(
        l.choice,
        Choice::IfNum {
            arg: 3,
            test: NumTest::Equal(1),
            then: Op::Extend,
            otherwise: Op::ExtendAdd
        }
    );
    assert_eq!(l.op(&argv(&["t", "5", "1"])), Op::Extend);
    assert_eq!(l.op(&argv(&["t", "5", "0"])), Op::ExtendAdd);
    let l = lock(
        b"for _, k in pairs(KEYS) do if redis.call('get', k) ~= ARGV[1] then return 0 end end \
              for _, k in pairs(KEYS) do redis.call('del', k) end return 1",
    );
    assert_eq!(
        (l.choice, l.all_keys),
        (Choice::Always(Op::ReleaseAll), true)
    );
}

/// A release that announces itself with a publish, where it released.
#[test]
fn a_release_that_publishes() {
    use crate::lockop::{Announce, AnnounceWhen, Param};
    // A release that publishes the key's name to a channel named by ARGV[2], where it
    // deleted.
    let l = lock(
        b"if redis.call('get', KEYS[1]) == ARGV[1] and redis.call('unlink', KEYS[1]) == 1 \
              then redis.call('publish', ARGV[2], KEYS[1]) return true end return false",
    );
    assert_eq!(l.choice, Choice::Always(Op::Release));
    assert_eq!(
        l.announce,
        Some(Announce {
            command: Bytes::from_static(b"PUBLISH"),
            channel: Param::Arg(2),
            message: Param::Key(1),
            when: AnnounceWhen::Released,
        })
    );
    // ... to KEYS[2], where it deleted or found the key gone.
    let l = lock(
        b"if redis.call('exists', KEYS[1]) == 1 then \
              if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
              redis.call('del', KEYS[1]) end redis.call('publish', KEYS[2], ARGV[2]) return 1",
    );
    assert_eq!(
        l.announce.map(|a| (a.channel, a.message, a.when)),
        Some((Param::Key(2), Param::Arg(2), AnnounceWhen::ReleasedOrGone))
    );
    // Publishing where it did not release, or twice: not a release's announcement.
    for text in [
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) return 1 end \
             redis.call('publish', ARGV[2], 'x') return 0",
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) \
             redis.call('publish', ARGV[2], 'x') redis.call('publish', ARGV[2], 'x') return 1 end return 0",
        "redis.call('publish', ARGV[2], 'x') return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3])",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

/// A re-entry counter in a key built from KEYS[1]: refused, and the reason says so.
#[test]
fn a_reentry_counter_in_a_key_of_its_own_is_refused() {
    let counter = b"local n = KEYS[1] .. ':count:' .. ARGV[1] \
            if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
            redis.call('incr', n) return 1 end return 0";
    assert_eq!(recognise(counter), Meaning::Unknown);
    assert!(
        lua::refusal(counter).starts_with("touches a key not given in KEYS"),
        "{}",
        lua::refusal(counter)
    );
}
