//! Lock-script classification: which layouts to try (where the token, TTL and keys sit, a
//! signal list, a published release, a guard on an argument, a token prefix) and the runs
//! each yields. Which operation the runs are is decided by [`super::matching`].

use bytes::Bytes;

use super::analyse::{self, Held, KeyNow, Layout, Run, TtlNow, Val};
use super::matching::{MAX_TOKEN_ARG, TTL_LITERAL, has, side};
use super::parse::{Block, KeyUse, key_use_block};
use crate::lockop::{
    Announce, AnnounceWhen, Answer, Choice, Counts, LockScript, NumTest, Op, Param, Signal, TtlUnit,
};

pub(super) fn classify(block: &Block) -> Option<LockScript> {
    let mut u = KeyUse::default();
    key_use_block(block, &mut u);
    classify_keys(block, &u, false).or_else(|| {
        // `#KEYS` tested (`if #KEYS ~= 1 then return redis.error_reply(...) end`): read for a
        // call with exactly the keys the script names, and bound to that count.
        if !u.keys_len {
            return None;
        }
        let n = u.max_literal.max(1);
        let exact = KeyUse {
            dynamic: false,
            max_literal: n,
            ..u
        };
        let mut lock = classify_keys(block, &exact, true)?;
        if lock.signal.is_some() || lock.announce.is_some() {
            return None;
        }
        lock.keys_count = Some(Counts::one(n));
        Some(lock)
    })
}

/// [`classify`] with `#KEYS` read as the number of keys of the run (`keys_exact`), or not.
pub(super) fn classify_keys(block: &Block, u: &KeyUse, keys_exact: bool) -> Option<LockScript> {
    classify_counted(block, u, 0, keys_exact)
        .and_then(literal_ttl)
        .or_else(|| {
            // `unpack(ARGV)` spread into a command, or `#ARGV` tested: read as a call with
            // exactly `m` arguments, for every count up to [`MAX_TOKEN_ARG`] that makes the
            // same lock operation of it as the first count that makes one (a TTL written in
            // the script for fewer arguments is none: see [`literal_ttl`]). Other counts run
            // as written, under the unknown-script policy.
            if !u.argv_whole {
                return None;
            }
            let mut found: Option<LockScript> = None;
            for m in 1..=MAX_TOKEN_ARG {
                let Some(mut lock) = classify_counted(block, u, m, keys_exact).and_then(|mut l| {
                    l.argv_count = Some(Counts::one(m));
                    literal_ttl(l)
                }) else {
                    continue;
                };
                match &mut found {
                    None => found = Some(lock),
                    Some(f) => {
                        let counts = f.argv_count.map(|c| c.with(m));
                        lock.argv_count = f.argv_count;
                        if lock == *f {
                            f.argv_count = counts;
                        }
                    }
                }
            }
            found
        })
}

/// A lock whose TTL the script writes as a literal (`EXPIRE KEYS[1] 30`): the literal moves to
/// [`LockScript::ttl_literal`]. Only for the plain layouts (ARGV parameters, no signal, no
/// spread `ARGV`); others stay unknown.
pub(super) fn literal_ttl(mut lock: LockScript) -> Option<LockScript> {
    if let Some(k) = lock.ttl_arg.checked_sub(TTL_LITERAL) {
        if lock.params_in_keys || lock.signal.is_some() || lock.argv_count.is_some() {
            return None;
        }
        lock.ttl_literal = Some(i64::try_from(k).ok()?);
        lock.ttl_arg = 0;
    }
    Some(lock)
}

/// [`classify`] for calls with `argv_count` arguments (0: as many as the script reads; see
/// [`Layout::argv_count`]), `#KEYS` read exactly or not (see [`Layout::keys_exact`]).
pub(super) fn classify_counted(
    block: &Block,
    u: &KeyUse,
    argv_count: usize,
    keys_exact: bool,
) -> Option<LockScript> {
    // The token may sit in any of the first arguments the script names (most put it first).
    let tokens = || 1..=u.max_argv.max(argv_count).clamp(1, MAX_TOKEN_ARG);
    let argv = |token| Layout {
        argv_count,
        keys_exact,
        ..Layout::argv(token)
    };
    if u.dynamic {
        // Works on all of KEYS: unrolled over one and two keys.
        return (u.max_literal <= 1)
            .then(|| tokens().find_map(|t| classify_with(block, &[1, 2], argv(t))))?;
    }
    if u.max_literal <= 1 {
        return tokens()
            .find_map(|t| classify_with(block, &[1], argv(t)))
            .or_else(|| (argv_count == 0).then(|| literal_acquire(block))?);
    }
    if argv_count > 0 {
        return None;
    }
    // A release that publishes to a channel named by KEYS[2].
    if u.max_literal == 2
        && let Some(lock) = tokens().find_map(|t| {
            let runs = analyse::explore(block, 2, argv(t)).ok()?;
            runs.iter()
                .any(publishes)
                .then(|| classify_published(&runs, argv(t)))?
        })
    {
        return Some(lock);
    }
    // KEYS[2], KEYS[3], ... named: parameters passed as keys, the token among them.
    (1..u.max_literal)
        .find_map(|token| {
            let layout = Layout {
                keys_as_args: true,
                keys_exact,
                ..Layout::argv(token)
            };
            classify_with(block, &[1], layout)
        })
        .or_else(|| (u.max_literal == 2).then(|| classify_signal(block))?)
}

/// An acquisition of `KEYS[1]` that writes a constant instead of a token argument (a mutex
/// without ownership: `PSETEX KEYS[1] ARGV[1] 'locked'` where the key is missing, refused
/// wherever it exists): `SET KEYS[1] literal NX PX ttl`, the literal as the token (see
/// [`LockScript::token_literal`]). The script is run with the caller's token in an argument it
/// never reads, so a key holding "the token" is one more value it cannot tell from another's;
/// every run that writes must write the same literal, and only a plain `Acquire` of one key
/// with no signal or announcement is accepted (a release of such a lock would be anyone's).
pub(super) fn literal_acquire(block: &Block) -> Option<LockScript> {
    let layout = Layout::argv(MAX_TOKEN_ARG + 1);
    let mut runs = analyse::explore(block, 1, layout).ok()?;
    if runs
        .iter()
        .any(|r| r.prefix.is_some() || r.foreign || publishes(r))
    {
        return None;
    }
    let mut literal: Option<Vec<u8>> = None;
    for r in &mut runs {
        let written = match &r.end[0].value {
            Some(Val::Str(s)) => s.clone(),
            // Redis stores a number as its decimal text.
            Some(Val::Num(n)) => n.to_string().into_bytes(),
            _ => continue,
        };
        if *literal.get_or_insert_with(|| written.clone()) != written {
            return None;
        }
        r.end[0].value = Some(Val::Arg(layout.token));
    }
    let literal = literal.filter(|l| !l.is_empty())?;
    let mut lock = classify_runs(&runs, false, layout)?;
    if lock.choice != Choice::Always(Op::Acquire)
        || lock.signal.is_some()
        || lock.announce.is_some()
        || lock.ttl_arg > MAX_TOKEN_ARG
    {
        return None;
    }
    lock.token_arg = 0;
    lock.token_literal = Some(Bytes::from(literal));
    Some(lock)
}

/// A lock operation on `KEYS[1]` that also leaves a wake-up signal in the list `KEYS[2]`
/// (see [`Signal`]): on every run, the list either ends untouched or as exactly one literal
/// element with a TTL of some `ARGV[j]` milliseconds, and it is signalled either always or
/// exactly where the operation did its work on `KEYS[1]`. The lock operation itself is judged
/// on `KEYS[1]` alone, from every starting state of both keys, like any other script.
pub(super) fn classify_signal(block: &Block) -> Option<LockScript> {
    let layout = Layout::argv(1);
    let runs = analyse::explore(block, 2, layout).ok()?;
    let mut signal: Option<(Val, usize)> = None;
    let mut fired = Vec::with_capacity(runs.len());
    let mut lock_runs = Vec::with_capacity(runs.len());
    for mut r in runs {
        if !r.assumed.is_empty() || r.prefix.is_some() {
            return None;
        }
        let untouched = KeyNow::start(2, r.start[1], layout.token);
        let this = match &r.end[1] {
            end if *end == untouched => None,
            KeyNow {
                value: Some(Val::Table(items)),
                ttl:
                    TtlNow::Set {
                        seconds: false,
                        v: Val::Arg(j),
                    },
            } if *j != layout.token && matches!(items.as_slice(), [Val::Str(_) | Val::Num(_)]) => {
                Some((items[0].clone(), *j))
            }
            _ => return None,
        };
        if let Some(this) = this {
            if *signal.get_or_insert_with(|| this.clone()) != this {
                return None;
            }
            fired.push(true);
        } else {
            fired.push(false);
        }
        r.start.truncate(1);
        r.end.truncate(1);
        lock_runs.push(r);
    }
    let (element, ttl_arg) = signal?;
    let all: Vec<&Run> = lock_runs.iter().collect();
    let (op, lock_ttl_arg, unit, answer) = side(&all)?;
    let worked = |r: &Run| match op {
        Op::Release => r.start[0].held == Held::Token,
        Op::Delete => r.start[0].held != Held::Missing,
        _ => false,
    };
    let always = fired.iter().all(|f| *f);
    if !matches!(op, Op::Release | Op::Delete)
        || !(always || lock_runs.iter().zip(&fired).all(|(r, f)| worked(r) == *f))
    {
        return None;
    }
    let value = match element {
        Val::Str(s) => Bytes::from(s),
        Val::Num(n) => Bytes::from(n.to_string()),
        _ => return None,
    };
    Some(LockScript {
        params_in_keys: false,
        signal: Some(Signal {
            key: 2,
            ttl_arg,
            value,
            always,
        }),
        ..lock_script(
            layout,
            Choice::Always(op),
            lock_ttl_arg,
            unit,
            false,
            answer,
        )
    })
}

pub(super) fn classify_with(block: &Block, ns: &[usize], layout: Layout) -> Option<LockScript> {
    let mut runs = Vec::new();
    for &n in ns {
        runs.extend(analyse::explore(block, n, layout).ok()?);
    }
    let all_keys = ns.len() > 1;
    if ns == [1] && runs.iter().any(publishes) {
        return classify_published(&runs, layout);
    }
    if let Some(lock) = classify_runs(&runs, all_keys, layout) {
        return Some(lock);
    }
    classify_guarded(&runs, all_keys, layout)
}

/// Whether a run published.
pub(super) fn publishes(r: &Run) -> bool {
    r.calls.iter().any(|(c, _)| c == b"publish")
}

/// A release of `KEYS[1]` that also publishes to a channel (see [`Announce`]): named by an
/// argument, or by `KEYS[2]` when the runs have two keys (the second only ever a channel: it
/// must end as it started, and is then left out). Every run publishes at most once, the same
/// command, channel and message, and either always, or exactly where the key was deleted, or
/// exactly where it was deleted or already gone. The release itself is judged on `KEYS[1]`
/// alone, like any other script.
pub(super) fn classify_published(runs: &[Run], layout: Layout) -> Option<LockScript> {
    let mut found: Option<(Vec<u8>, Val, Val)> = None;
    let mut fired = Vec::with_capacity(runs.len());
    let mut lock_runs = Vec::with_capacity(runs.len());
    for r in runs {
        let n = r.start.len();
        if n > 1 {
            let untouched = KeyNow::start(2, r.start[1], layout.token);
            if n != 2 || r.end[1] != untouched {
                return None;
            }
        }
        let mut calls = Vec::with_capacity(r.calls.len());
        let mut this = None;
        for (cmd, args) in &r.calls {
            if cmd != b"publish" {
                calls.push((cmd.clone(), args.clone()));
                continue;
            }
            let p = match args.as_slice() {
                [Val::Str(c), ch, m] => (c.clone(), ch.clone(), m.clone()),
                _ => return None,
            };
            let channel_ok = match &p.1 {
                Val::Key(2) => n == 2,
                Val::Arg(j) => *j != layout.token,
                _ => false,
            };
            if !channel_ok || this.replace(p.clone()).is_some() {
                return None;
            }
            if *found.get_or_insert_with(|| p.clone()) != p {
                return None;
            }
        }
        fired.push(this.is_some());
        let mut r = r.clone();
        r.calls = calls;
        r.start.truncate(1);
        r.end.truncate(1);
        lock_runs.push(r);
    }
    let (command, channel, message) = found?;
    let mut lock = classify_runs(&lock_runs, false, layout)?;
    if lock.choice != Choice::Always(Op::Release) || lock.params_in_keys {
        return None;
    }
    let held = |r: &Run| r.start[0].held;
    let when = if fired.iter().all(|f| *f) {
        AnnounceWhen::Always
    } else if lock_runs
        .iter()
        .zip(&fired)
        .all(|(r, f)| (held(r) == Held::Token) == *f)
    {
        AnnounceWhen::Released
    } else if lock_runs
        .iter()
        .zip(&fired)
        .all(|(r, f)| (held(r) != Held::Other) == *f)
    {
        AnnounceWhen::ReleasedOrGone
    } else {
        return None;
    };
    let param = |v: &Val| match v {
        Val::Key(i) => Some(Param::Key(*i)),
        Val::Arg(j) => Some(Param::Arg(*j)),
        Val::Str(s) => Some(Param::Literal(Bytes::copy_from_slice(s))),
        Val::Num(n) => Some(Param::Literal(Bytes::from(n.to_string()))),
        _ => None,
    };
    lock.announce = Some(Announce {
        command: Bytes::from(command.to_ascii_uppercase()),
        channel: param(&channel)?,
        message: param(&message)?,
        when,
    });
    Some(lock)
}

/// The argument comparisons the runs made (switches), apart from the order of two TTLs.
pub(super) fn switches_of(runs: &[Run]) -> Vec<(usize, Vec<u8>)> {
    let mut switches: Vec<(usize, Vec<u8>)> = Vec::new();
    for r in runs {
        for (j, s, _) in &r.assumed {
            // The order of two TTLs is the keys' state, not a switch on an argument.
            if *j != analyse::ORDER && !switches.iter().any(|(a, b)| a == j && b == s) {
                switches.push((*j, s.clone()));
            }
        }
    }
    switches
}

/// A script whose TTL write is guarded by a test of the TTL argument itself (`if
/// tonumber(ARGV[2]) > 0 then redis.call('pexpire', ...)`, `if ARGV[2] ~= '' then`): every TTL
/// the proxy accepts (a positive integer) passes the test, so the script is judged on the runs
/// where it passed, and a call whose TTL fails it is refused with an error when bound, as any
/// non-positive TTL is (the script would have left the key without its expiry, or answered
/// something else; the proxy never answers a grant for it).
pub(super) fn classify_guarded(runs: &[Run], all_keys: bool, layout: Layout) -> Option<LockScript> {
    let switches = switches_of(runs);
    let mut args: Vec<usize> = switches.iter().map(|(j, _)| *j).collect();
    args.sort_unstable();
    args.dedup();
    args.into_iter().find_map(|j| {
        if j == layout.token
            || switches
                .iter()
                .any(|(a, s)| *a == j && analyse::positive_side(s).is_none())
        {
            return None;
        }
        let kept: Vec<Run> = runs
            .iter()
            .filter(|r| {
                r.assumed
                    .iter()
                    .all(|(a, s, yes)| *a != j || analyse::positive_side(s) == Some(*yes))
            })
            .map(|r| {
                let mut r = r.clone();
                r.assumed.retain(|(a, ..)| *a != j);
                r
            })
            .collect();
        let lock = classify_runs(&kept, all_keys, layout)?;
        let timed = |op: Op| {
            !matches!(
                op,
                Op::Release
                    | Op::ReleaseAll
                    | Op::Delete
                    | Op::Inspect
                    | Op::Held
                    | Op::Remaining
                    | Op::ExtendAdd
            )
        };
        let ok = match &lock.choice {
            Choice::Always(op) => timed(*op),
            Choice::IfArg {
                then, otherwise, ..
            }
            | Choice::IfNum {
                then, otherwise, ..
            } => timed(*then) && timed(*otherwise),
            Choice::IfTokenLen { .. } => false,
        };
        (ok && lock.ttl_arg == j && lock.signal.is_none()).then_some(lock)
    })
}

pub(super) fn classify_runs(runs: &[Run], all_keys: bool, layout: Layout) -> Option<LockScript> {
    let switches = switches_of(runs);
    if runs.iter().any(|r| r.prefix.is_some()) {
        return classify_prefix(runs, &switches, all_keys, layout);
    }
    let lock = |choice, ttl_arg, unit, answer| {
        lock_script(layout, choice, ttl_arg, unit, all_keys, answer)
    };
    match switches.as_slice() {
        [] => {
            let all: Vec<&Run> = runs.iter().collect();
            let (op, ttl_arg, unit, answer) = side(&all)?;
            Some(lock(Choice::Always(op), ttl_arg, unit, answer))
        }
        [(j, s)] if *j != layout.token => {
            let then: Vec<&Run> = runs.iter().filter(|r| !has(r, *j, s, false)).collect();
            let otherwise: Vec<&Run> = runs.iter().filter(|r| !has(r, *j, s, true)).collect();
            let a = side(&then)?;
            let b = side(&otherwise)?;
            if (a.1, a.2, a.3) != (b.1, b.2, b.3) || a.1 == *j {
                return None;
            }
            let choice = if a.0 == b.0 {
                Choice::Always(a.0)
            } else if let Some((kind, k)) = analyse::predicate(s) {
                Choice::IfNum {
                    arg: *j,
                    test: match kind {
                        b'>' => NumTest::Greater(k),
                        _ => NumTest::Equal(k),
                    },
                    then: a.0,
                    otherwise: b.0,
                }
            } else {
                Choice::IfArg {
                    arg: *j,
                    value: Bytes::copy_from_slice(s),
                    then: a.0,
                    otherwise: b.0,
                }
            };
            Some(lock(choice, a.1, a.2, a.3))
        }
        _ => None,
    }
}

/// A script whose runs compared token prefixes of length `ARGV[j]` (see
/// [`analyse::Val::Head`]): recognised only as a re-entrant acquisition, for the case where
/// `ARGV[j]` is the token's length, and as a plain acquisition otherwise
/// ([`Choice::IfTokenLen`]). The runs from missing keys must not have looked at the prefix, so
/// that the plain acquisition succeeds exactly where the script does whatever `ARGV[j]` is.
pub(super) fn classify_prefix(
    runs: &[Run],
    switches: &[(usize, Vec<u8>)],
    all_keys: bool,
    layout: Layout,
) -> Option<LockScript> {
    let j = runs.iter().find_map(|r| r.prefix)?;
    if !switches.is_empty()
        || layout.keys_as_args
        || runs.iter().any(|r| {
            r.prefix.is_some_and(|p| p != j)
                || (r.prefix.is_some() && r.start.iter().all(|s| s.held == Held::Missing))
        })
    {
        return None;
    }
    let all: Vec<&Run> = runs.iter().collect();
    let (op, ttl_arg, unit, answer) = side(&all)?;
    if !matches!(op, Op::AcquireOrRefresh | Op::AcquireOrRefreshAll) || ttl_arg == j {
        return None;
    }
    // `layout.keys_as_args` is false here (refused above).
    Some(lock_script(
        layout,
        Choice::IfTokenLen {
            arg: j,
            then: op,
            otherwise: Op::Acquire,
        },
        ttl_arg,
        unit,
        all_keys,
        answer,
    ))
}

/// A lock operation with its parameters where `layout` puts them, and no literal, signal,
/// announcement or argument count.
fn lock_script(
    layout: Layout,
    choice: Choice,
    ttl_arg: usize,
    unit: TtlUnit,
    all_keys: bool,
    answer: Answer,
) -> LockScript {
    LockScript {
        choice,
        token_arg: layout.token,
        ttl_arg,
        unit,
        all_keys,
        params_in_keys: layout.keys_as_args,
        token_literal: None,
        ttl_literal: None,
        answer,
        signal: None,
        announce: None,
        argv_count: None,
        keys_count: None,
    }
}
