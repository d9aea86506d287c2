//! Recognition tests of how a script is written: TTL replies, literals and units, roll-backs,
//! rewordings and spelling (none changes a meaning, and different meanings stay apart),
//! hostile scripts, and the operator's declared meanings.

use bytes::Bytes;

use super::fixtures::op_of;
use super::*;
use crate::config::ScriptDecl;
use crate::lockop::*;
use crate::lua;

/// `redis.replicate_commands()` changes nothing a script does (it answers `true`), and a
/// reply of the TTL the call gave is kept as that TTL; near misses stay unknown.
#[test]
fn replicate_commands_and_ttl_replies() {
    let text = "redis.replicate_commands() if redis.call('get', KEYS[1]) == ARGV[1] then \
            return redis.call('del', KEYS[1]) end return 0";
    let Meaning::Lock(l) = recognise(text.as_bytes()) else {
        panic!("{text}");
    };
    assert_eq!(
        (l.choice, l.answer),
        (Choice::Always(Op::Release), Answer::OneZero)
    );
    for (text, unit, ok, no) in [
        (
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
                 return tonumber(ARGV[2]) end return 0",
            TtlUnit::Millis,
            Lit::TtlNum,
            Lit::Int(0),
        ),
        (
            "if redis.call('get', KEYS[1]) ~= ARGV[1] then return false end \
                 redis.call('expire', KEYS[1], ARGV[2]) return ARGV[2]",
            TtlUnit::Seconds,
            Lit::TtlText,
            Lit::Nil,
        ),
    ] {
        let Meaning::Lock(l) = recognise(text.as_bytes()) else {
            panic!("{text}");
        };
        assert_eq!(
            (l.choice, l.unit, l.ttl_arg, l.answer),
            (
                Choice::Always(Op::Extend),
                unit,
                2,
                Answer::Const(Replies::new(ok, no, no))
            ),
            "{text}"
        );
    }
    // redis.log writes to the server's log only, whatever its message holds.
    let logged = "local v = redis.call('get', KEYS[1]) \
            if v ~= ARGV[1] then redis.log(redis.LOG_WARNING, 'lost ' .. KEYS[1], v) return 0 end \
            redis.log(redis.LOG_DEBUG, 'extending by ' .. ARGV[2]) \
            return redis.call('pexpire', KEYS[1], ARGV[2])";
    let Meaning::Lock(l) = recognise(logged.as_bytes()) else {
        panic!("{logged}");
    };
    assert_eq!(
        (l.choice, l.answer),
        (Choice::Always(Op::Extend), Answer::OneZero)
    );
    assert_eq!(
        Replies::new(Lit::TtlNum, Lit::Int(0), Lit::Int(0)).bind_ttl(30),
        Replies::new(Lit::Int(30), Lit::Int(0), Lit::Int(0))
    );
    assert_eq!(
        Replies::new(Lit::TtlText, Lit::Nil, Lit::Nil).bind_ttl(30),
        Replies::new(Lit::Decimal(30), Lit::Nil, Lit::Nil)
    );
    for text in [
        // The refusal could be a TTL (a positive number or its digits): not told apart.
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
             return tonumber(ARGV[2]) end return 5",
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
             return ARGV[2] end return '100'",
        // Another argument than the TTL it set, and the TTL of a release.
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
             return tonumber(ARGV[3]) end return 0",
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) \
             return tonumber(ARGV[2]) end return 0",
        // The TTL answered on refusal as well as on success.
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) end \
             return tonumber(ARGV[2])",
        // replicate_commands with an argument, or another redis function.
        "redis.replicate_commands(1) if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
        "redis.set_repl(redis.REPL_ALL) if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
        // redis.log without a message, or at a level Redis refuses: an error there.
        "redis.log(redis.LOG_DEBUG) if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
        "redis.log(7, 'x') if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

/// A TTL written in the script is that operation's TTL on every call; near misses (no
/// positive integer, or a literal on one path and an argument on another) stay unknown.
#[test]
fn ttl_literals() {
    for (text, op, unit, k) in [
        (
            "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then redis.call('expire', KEYS[1], 30) \
                 return 1 end return 0",
            Op::Acquire,
            TtlUnit::Seconds,
            30,
        ),
        (
            "if redis.call('get', KEYS[1]) == ARGV[1] then \
                 return redis.call('pexpire', KEYS[1], 15000) end return 0",
            Op::Extend,
            TtlUnit::Millis,
            15000,
        ),
        (
            "local v = redis.call('get', KEYS[1]) if not v or v == ARGV[1] then \
                 redis.call('set', KEYS[1], ARGV[1], 'EX', 60) return 1 end return 0",
            Op::AcquireOrRefresh,
            TtlUnit::Seconds,
            60,
        ),
    ] {
        let Meaning::Lock(l) = recognise(text.as_bytes()) else {
            panic!("{text}");
        };
        assert_eq!(
            (l.choice, l.unit, l.ttl_arg, l.ttl_literal, l.token_arg),
            (Choice::Always(op), unit, 0, Some(k), 1),
            "{text}"
        );
    }
    for text in [
        // EXPIRE 0 deletes; a negative TTL too.
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], 0) end return 0",
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], -1) end return 0",
        // Taken for ARGV[2], refreshed for a literal.
        "local v = redis.call('get', KEYS[1]) if not v then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end \
             if v == ARGV[1] then return redis.call('pexpire', KEYS[1], 30000) end return 0",
        // Two different literals on two paths.
        "local v = redis.call('get', KEYS[1]) if not v then return redis.call('set', KEYS[1], ARGV[1], 'PX', 10000) end \
             if v == ARGV[1] then return redis.call('pexpire', KEYS[1], 30000) end return 0",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

/// A many-key acquisition that takes the keys one by one and gives back the ones it took
/// when one is busy (`for j = 1, i - 1 do del(KEYS[j])`) is all or nothing; one that gives
/// back too many (the busy key too) or none stays unknown.
#[test]
fn a_many_key_acquisition_that_rolls_back() {
    let body = |upto: &str| {
        format!(
            "for i, key in ipairs(KEYS) do \
                 if not redis.call('set', key, ARGV[1], 'NX', 'PX', ARGV[2]) then \
                 {upto} return 0 end end return 1"
        )
    };
    let Meaning::Lock(l) =
        recognise(body("for j = 1, i - 1 do redis.call('del', KEYS[j]) end").as_bytes())
    else {
        panic!("rollback");
    };
    assert_eq!(
        (l.choice, l.all_keys, l.answer),
        (Choice::Always(Op::Acquire), true, Answer::OneZero)
    );
    for upto in ["for j = 1, i do redis.call('del', KEYS[j]) end", ""] {
        let text = body(upto);
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

/// `tostring` of a command's table reply is Lua's `table: 0x…`: it equals no literal
/// without that prefix (so `tostring(set(...)) == 'false'` is a test of the refusal), and
/// anything it cannot be told apart from stays unknown.
#[test]
fn tostring_of_a_table_reply() {
    let text = "local r = tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])) \
            if r == 'false' then return 0 end return 1";
    let Meaning::Lock(l) = recognise(text.as_bytes()) else {
        panic!("{text}");
    };
    assert_eq!(
        (l.choice, l.answer),
        (Choice::Always(Op::Acquire), Answer::OneZero)
    );
    for text in [
        // A literal that could be the address, an argument, and the address answered.
        "local r = tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])) \
             if r == 'table: 0x1' then return 0 end return 1",
        "local r = tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])) \
             if r == ARGV[3] then return 0 end return 1",
        "return tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]))",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
}

#[test]
fn seconds_are_a_unit() {
    for text in [
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0",
        "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) return 1 else return 0 end",
    ] {
        let Meaning::Lock(l) = recognise(text.as_bytes()) else {
            panic!("{text}");
        };
        assert_eq!(
            (l.choice, l.unit),
            (Choice::Always(Op::Extend), TtlUnit::Seconds)
        );
    }
}

/// Hand-written rewordings of every family: aliases, tonumber/tostring, `else` vs early
/// return, `~=` with swapped branches, `== false` vs `not`, `#KEYS`, numeric `for`,
/// pcall, unlink, option case, EX vs PX.
#[test]
fn rewordings_keep_their_meaning() {
    use Answer::*;
    use Op::*;
    type Case = (&'static str, &'static [&'static str], (Op, bool, Answer));
    let cases: &[Case] = &[
        (
            "local k, t = KEYS[1], ARGV[1] if redis.call('get', k) ~= t then return 0 end redis.call('unlink', k) return 1",
            &["t"],
            (Release, false, OneZero),
        ),
        (
            "local v = redis.pcall('GET', KEYS[1]) if v == false then return -1 elseif v ~= tostring(ARGV[1]) then return 0 else return redis.call('del', KEYS[1]) end",
            &["t"],
            (Release, false, Tristate),
        ),
        (
            "if not (redis.call('get', KEYS[1]) == ARGV[1]) then return 0 end return redis.call('del', KEYS[1])",
            &["t"],
            (Release, false, OneZero),
        ),
        (
            "local n = 0 for i = 1, #KEYS do if redis.call('get', KEYS[i]) == ARGV[1] then n = n + redis.call('del', KEYS[i]) end end return n",
            &["t"],
            (Release, true, Count),
        ),
        (
            "for _, k in ipairs(KEYS) do if redis.call('exists', k) ~= 0 then return 0 end end for _, k in ipairs(KEYS) do redis.call('set', k, ARGV[1], 'px', tonumber(ARGV[2])) end return #KEYS",
            &["t", "5"],
            (Acquire, true, Count),
        ),
        (
            "local ttl = tonumber(ARGV[2]) if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ttl) return 1 end return 0",
            &["t", "5"],
            (Extend, false, OneZero),
        ),
        (
            "return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX')",
            &["t", "5"],
            (Acquire, false, OkNil),
        ),
        (
            "local v = redis.call('get', KEYS[1]) if not v or v == ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end return 0",
            &["t", "5"],
            (AcquireOrRefresh, false, OneZero),
        ),
        (
            "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}",
            &[],
            (Inspect, false, OneZero),
        ),
        (
            "local t = redis.call('get', KEYS[1]) if t ~= ARGV[1] then return 0 end local left = redis.call('pttl', KEYS[1]) if left <= 0 then return 0 end if ARGV[3] ~= '0' then redis.call('pexpire', KEYS[1], ARGV[2]) else redis.call('pexpire', KEYS[1], left + ARGV[2]) end return 1",
            &["t", "5", "0"],
            (ExtendAdd, false, OneZero),
        ),
    ];
    for (text, argv, want) in cases {
        assert_eq!(op_of(text.as_bytes(), argv), Some(*want), "{text}");
    }
}

/// Lay-out never changes a classification: whitespace, comments, quotes, local names,
/// `;` and redundant parentheses.
#[test]
fn spelling_never_changes_the_meaning() {
    let fixtures: &[&[u8]] = &[
        lua!("redispy_extend"),
        lua!("redsync_deleteScript"),
        lua!("redlock5_ACQUIRE_SCRIPT"),
        lua!("redlockrb_LOCK_SCRIPT"),
        lua!("redlocknet_Extend_lua"),
        lua!("warlock_parityDel"),
        lua!("warlock_parityRelock"),
    ];
    for body in fixtures {
        let text = String::from_utf8_lossy(body).into_owned();
        let toks = lua::lex::lex(body).unwrap();
        // Re-spell token by token: other spacing, a comment between tokens, the other
        // quote style, renamed locals, `;` after each statement-ending token, and
        // parentheses around every `==` comparison's right side.
        let mut out = String::new();
        for (k, t) in toks.iter().enumerate() {
            let piece = match t {
                lua::lex::Tok::Name(n)
                    if [
                        "token",
                        "val",
                        "key",
                        "content",
                        "value",
                        "currentVal",
                        "expiration",
                        "newttl",
                        "ttl",
                        "id",
                    ]
                    .contains(&n.as_str()) =>
                {
                    format!("renamed_{n}")
                }
                lua::lex::Tok::Name(n) => n.clone(),
                lua::lex::Tok::Str(s) => format!("[==[{}]==]", String::from_utf8_lossy(s)),
                lua::lex::Tok::Num(n) => format!("{n}"),
                lua::lex::Tok::Sym(s) => s.to_string(),
            };
            out.push_str(&piece);
            out.push_str(if k % 3 == 0 { " --[[c]] " } else { "\r\n\t " });
        }
        assert_eq!(
            recognise(out.as_bytes()),
            recognise(body),
            "{text}\n=>\n{out}"
        );
        assert_eq!(
            lua::canonical(out.as_bytes()),
            lua::canonical(body),
            "{out}"
        );
        assert_ne!(recognise(body), Meaning::Unknown, "{text}");
    }
    let base = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    for variant in [
        "if ((redis.call(\"get\", (KEYS[1]))) == (ARGV[1])) then return (redis.call('del', KEYS[1])); else return (0); end;",
        "-- x\nif redis.call('get',KEYS[1])==ARGV[1]then return redis.call('del',KEYS[1])else return 0 end",
    ] {
        assert_eq!(
            recognise(variant.as_bytes()),
            recognise(base.as_bytes()),
            "{variant}"
        );
    }
}

/// Issue 10 row 6: hostile scripts are classified (unknown) in linear time and never overflow the
/// stack.
#[test]
fn pathological_scripts_are_unknown_without_quadratic_work() {
    let mut inputs: Vec<Vec<u8>> = vec![
        b"if(".repeat(150_000),
        b"if(".repeat(20_000),
        b"(".repeat(60_000),
        b"{".repeat(60_000),
        b"-".repeat(60_000),
        b"not ".repeat(15_000),
        b"a.".repeat(30_000),
        b"x=1 ".repeat(15_000),
        b"do ".repeat(20_000),
        b"[[".repeat(30_000),
        b"return 1"
            .iter()
            .copied()
            .chain(b"+1".repeat(30_000))
            .collect(),
        b"return "
            .iter()
            .copied()
            .chain(b"f(".repeat(20_000))
            .collect(),
        b"local a = 1 ".repeat(5_000),
        b"for i = 1, #KEYS do ".repeat(2_000),
        // Long runs of hash commands, over fixed keys and over all of KEYS.
        b"local x = redis.call('hexists', KEYS[1], ARGV[2]) ".repeat(400),
        b"local x = redis.call('hincrby', KEYS[3], ARGV[2], 1) ".repeat(400),
        b"for i = 1, #KEYS do local x = redis.call('hexists', KEYS[i], ARGV[i + 1]) "
            .iter()
            .copied()
            .chain(b"x = redis.call('hexists', KEYS[i], ARGV[i + 1]) ".repeat(150))
            .chain(b"end".iter().copied())
            .collect(),
    ];
    let mut deep = b"return ".to_vec();
    deep.extend(b"{".repeat(10_000));
    deep.extend(b"}".repeat(10_000));
    inputs.push(deep);
    // Small scripts that are costly to run symbolically: runs forked on arguments, each
    // adding to one value in a loop (each addition copied and sorted the whole sum: one
    // 620-byte script took 5.6 s), or each as long as a run may be (0.16 s a script).
    let forks: String = (2..9)
        .map(|i| format!("if ARGV[{i}] == 'v{i}' then x = x + 1 end "))
        .collect();
    let sum = format!(
        "local x = tonumber(ARGV[1]) {forks}{}return redis.call('get', KEYS[1])",
        "for i = 1, 16 do for j = 1, 16 do x = x + tonumber(ARGV[1]) end end ".repeat(4)
    );
    inputs.push(sum.into_bytes());
    let long = format!(
        "local x = 0 {forks}{}return redis.call('get', KEYS[1])",
        "for i = 1, 16 do for j = 1, 16 do for k = 1, 16 do x = 1 end end end ".repeat(4)
    );
    inputs.push(long.into_bytes());
    // The same with eight arguments, each tried as the token's place.
    let eight = format!(
        "local x = 0 {forks}{}if redis.call('get', KEYS[1]) == ARGV[8] then return 1 end return 0",
        "for i = 1, 16 do for j = 1, 16 do for k = 1, 16 do x = 1 end end end ".repeat(4)
    );
    inputs.push(eight.into_bytes());
    for input in &inputs {
        let start = std::time::Instant::now();
        assert_eq!(recognise(input), Meaning::Unknown);
        let took = start.elapsed();
        if std::env::var("RECOG_VERBOSE").is_ok() {
            eprintln!("{took:?}");
        }
        // Not a speed test (`cargo bench --bench hot -- recognise` measures that): a bound
        // far above any linear cost, which only a return of the quadratic analysis (12-23 s
        // per script before) could exceed, however loaded the machine.
        assert!(
            took < std::time::Duration::from_secs(3),
            "{took:?} for {:?}...",
            String::from_utf8_lossy(&input[..20.min(input.len())])
        );
    }
}

#[test]
fn release_is_recognised_whatever_the_spelling() {
    for text in [
        "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return redis.call(\"del\",KEYS[1]) else return 0 end",
        "if redis.call('get', KEYS[1]) == ARGV[1] then\r\n  return redis.call('del', KEYS[1])\r\nelse\r\n  return 0\r\nend",
        "if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) else return 0 end;",
        "if (redis.call('get', KEYS[1]) == ARGV[1]) then return redis.pcall('unlink', KEYS[1]) else return 0; end",
        "-- unlock\nif ARGV[1] == redis.call('get', KEYS[1]) then return redis.call('del', KEYS[1]) else return 0 end --[[ done ]]",
        "local value = redis.call('get', KEYS[1])\nif value == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
    ] {
        assert_eq!(
            op_of(text.as_bytes(), &["t"]),
            Some((Op::Release, false, Answer::OneZero)),
            "{text}"
        );
    }
}

#[test]
fn different_meanings_stay_apart() {
    for text in [
        // Deletes when the token does NOT match.
        "if redis.call('get',KEYS[1]) ~= ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
        // Lua names are case-sensitive: `argv` is not `ARGV`.
        "if redis.call('get',KEYS[1]) == argv[1] then return redis.call('del',KEYS[1]) else return 0 end",
        "local n = 0 for i, k in ipairs(KEYS) do if i == 3 then redis.call('del', k) elseif redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end end return n",
        // Overwrites another holder's lock, and answers what no SET answers.
        "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1",
        // (A TTL from a literal, not from an argument, is that TTL on every call: see
        // `ttl_literals`.)
        // A key named by string.format is not a key it was given.
        "local k = string.format('%s:lock', KEYS[1]) if redis.call('get', k) == ARGV[1] then return redis.call('del', k) end return 0",
        // The type of a reply compared to what it never is: the branch never runs.
        "local r = redis.call('get', KEYS[1]) if type(r) == 'number' then return redis.call('del', KEYS[1]) end return 0",
        // A string compared outside redis.call keeps its case.
        "if redis.call('get',KEYS[1]) == 'ARGV' then return redis.call('del',KEYS[1]) else return 0 end",
    ] {
        assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
    }
    // Different with three keys than with one or two: the analyser unrolls over one and
    // two keys, so the key count is never compared there; read for exactly one key, it is
    // a release bound to calls with one key (others run as written).
    let three = "if #KEYS == 3 then return redis.call('del', KEYS[1]) end local n = 0 for i, k in ipairs(KEYS) do if redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end end return n";
    match recognise(three.as_bytes()) {
        Meaning::Lock(l) => {
            assert_eq!(l.keys_count, Some(crate::lockop::Counts::one(1)));
            assert_eq!(l.choice, Choice::Always(Op::Release));
        }
        other => panic!("{other:?}"),
    }
    // A plain write with an expiry is that write (Redis::DistLock 0.07's extend is one).
    assert_eq!(
        recognise(b"return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])"),
        Meaning::Plain(PlainSet {
            value_arg: 1,
            ttl_arg: 2,
            unit: TtlUnit::Millis
        })
    );
    // The token may be any argument.
    let Meaning::Lock(l) = recognise(
            b"if redis.call('get',KEYS[1]) == ARGV[2] then return redis.call('del',KEYS[1]) else return 0 end",
        ) else {
            panic!("a release with the token in ARGV[2]");
        };
    assert_eq!((l.choice, l.token_arg), (Choice::Always(Op::Release), 2));
    // Deleting whatever the key holds is `DEL`, a delete: never a release.
    assert_eq!(
        op_of(b"return redis.call('del', KEYS[1])", &["t"]),
        Some((Op::Delete, false, Answer::OneZero))
    );
    // Spaces inside a string matter.
    assert_ne!(
        lua::canonical(b"return 'a b'"),
        lua::canonical(b"return 'ab'")
    );
    // Two different locals are not merged.
    assert_ne!(
        lua::canonical(b"local a = 1 local b = 2 return a"),
        lua::canonical(b"local a = 1 local b = 2 return b")
    );
}

#[test]
fn canonical_form_ignores_spelling() {
    assert_eq!(
        lua::canonical(b"local tok = redis.call('GET', KEYS[1]); return (tok) -- c"),
        lua::canonical(b"local value=redis.call(\"get\",KEYS[1])\r\nreturn value")
    );
}

#[test]
fn declared_meanings_win() {
    let decl = ScriptDecl {
        sha: None,
        text: Some("return redis.call('del', KEYS[1])".into()),
        meaning: Op::Release,
        reply: Answer::OneZero,
        token_arg: 1,
        ttl_arg: 2,
        all_keys: false,
    };
    let cache = ScriptCache::new(&[decl], 1 << 20);
    let s = cache.script(Bytes::from_static(
        b"return   redis.call(\"DEL\", KEYS[1])\r\n",
    ));
    assert!(matches!(s.meaning, Meaning::Lock(ref l) if l.choice == Choice::Always(Op::Release)));
    let by_sha = ScriptDecl {
        sha: Some(sha1_hex(b"return 7").to_uppercase()),
        text: None,
        meaning: Op::Extend,
        reply: Answer::Count,
        token_arg: 2,
        ttl_arg: 1,
        all_keys: true,
    };
    let cache = ScriptCache::new(&[by_sha], 1 << 20);
    let s = cache.script(Bytes::from_static(b"return 7"));
    assert!(matches!(s.meaning, Meaning::Lock(ref l) if l.token_arg == 2 && l.all_keys));
    assert_eq!(
        cache.script(Bytes::from_static(b"return 8")).meaning,
        Meaning::Unknown
    );
}

#[test]
fn lexer_survives_garbage() {
    let unbalanced: [&[u8]; 2] = [b"redis.call(", b")))"];
    for junk in lua::lex::UNTERMINATED.into_iter().chain(unbalanced) {
        assert_eq!(recognise(junk), Meaning::Unknown);
    }
}
