//! Lua scripts read by the proxy: a linear-time lexer ([`lex`]), a depth-capped parser
//! ([`parse`]) and a behavioural analyser ([`analyse`]) that together recognise a lock script by
//! what it does; [`hash`] recognises re-entrant hash locks (Redisson) on the same analyser.
//!
//! [`recognise`] runs the script symbolically from every starting state of its keys (see
//! [`analyse`]) and accepts it only when the behaviour table matches one lock operation exactly:
//! the same writes from every state, the reply its library expects in each, and nothing else
//! (no other key, no other command). A wrong match is worse than none, so anything uncertain is
//! `None`. Scripts larger than [`MAX_SCRIPT`] are not analysed.

pub mod analyse;
pub mod hash;
pub mod lex;
pub mod parse;
pub mod redisson;

use bytes::Bytes;

use crate::lockop::{
    Announce, AnnounceWhen, Answer, Choice, Counts, HashScript, LockScript, NumTest, Op, Param,
    PlainSet, Replies, Signal, TtlUnit, WriteUnless,
};
use analyse::{Held, KeyNow, Layout, Run, TtlNow, Val, lit_val, reply_lit};
use parse::{Block, KeyUse, key_use_block};

/// Largest script analysed, in bytes.
pub const MAX_SCRIPT: usize = 64 * 1024;

/// Parses a script, within the size, depth and node caps.
pub fn parse_script(body: &[u8]) -> Result<Block, String> {
    if body.len() > MAX_SCRIPT {
        return Err("script too large to analyse".into());
    }
    parse::parse(lex::lex(body)?)
}

/// A canonical spelling of a script's syntax tree: spacing, comments, quote style, `;`,
/// redundant parentheses, local names and the case of command names do not change it.
pub fn canonical(body: &[u8]) -> Option<String> {
    parse_script(body).ok().map(|b| format!("{b:?}"))
}

/// What a script was recognised as.
// Built once per script and kept behind an `Arc` in the cache: the size is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recognised {
    /// A lock operation.
    Lock(LockScript),
    /// A hash-lock operation (see [`hash`]).
    Hash(HashScript),
    /// One plain command, whatever the key held (see [`PlainSet`]).
    Plain(PlainSet),
    /// A read–write or fair lock operation (see [`redisson`]).
    Redisson(redisson::RedissonScript),
    /// A constant written unless the key holds it (see [`WriteUnless`]).
    Unless(WriteUnless),
}

/// The lock or hash-lock operation a script performs, if its behaviour matches one exactly;
/// the script is parsed once for both.
pub fn recognise_any(body: &[u8]) -> Option<Recognised> {
    let block = parse_script(body).ok()?;
    if let Some(lock) = classify(&block) {
        return Some(Recognised::Lock(lock));
    }
    if let Some(plain) = plain_set(&block) {
        return Some(Recognised::Plain(plain));
    }
    if let Some(unless) = write_unless(&block) {
        return Some(Recognised::Unless(unless));
    }
    if let Some(hash) = hash::recognise_block(body, &block) {
        return Some(Recognised::Hash(hash));
    }
    redisson::recognise(&block).map(Recognised::Redisson)
}

/// Longest refusal reason given, in bytes.
const MAX_REASON: usize = 160;

/// Why a script is not recognised, in a few words (for the refusal error and the logs): where
/// the analyser could not follow it, or that what it does is no lock operation. One line of
/// printable text, at most [`MAX_REASON`] bytes (it may quote the script).
pub fn refusal(body: &[u8]) -> String {
    let mut why: String = reason(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if why.len() > MAX_REASON {
        let mut end = MAX_REASON;
        while !why.is_char_boundary(end) {
            end -= 1;
        }
        why.truncate(end);
        why.push_str("...");
    }
    why
}

fn reason(body: &[u8]) -> String {
    let block = match parse_script(body) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if let Some(why) = hash::why(body, &block) {
        return why;
    }
    let mut u = KeyUse::default();
    key_use_block(&block, &mut u);
    let n = u.max_literal.max(1);
    let mut why = None;
    for token in 1..=u.max_argv.clamp(1, MAX_TOKEN_ARG) {
        let layout = Layout::argv(token);
        match analyse::explore(&block, n, layout) {
            Err(e) => {
                why.get_or_insert(e);
            }
            Ok(runs) if runs.iter().any(|r| r.foreign) => {
                return "it runs a command that is no lock operation".into();
            }
            Ok(runs) if mixed_units(&runs) => {
                return "it sets the same TTL argument in milliseconds on one path and in \
                        seconds on another; the proxy carries only a key taken in ms and \
                        refreshed in s"
                    .into();
            }
            Ok(runs) => return not_a_lock_because(&runs).into(),
        }
    }
    let why = why.unwrap_or_default();
    // A branch on how long the key has left (`if redis.call('ttl', k) > 0`): each master's
    // own clock decides it, so the masters need not take the same branch.
    if why.starts_with("cannot decide") && (why.contains("ttl(") || why.contains("pttl(")) {
        return format!(
            "it decides on the time the key has left (TTL/PTTL), which each master counts on \
             its own clock ({why})"
        );
    }
    why
}

/// Why runs the analyser followed are no lock operation, where a common shape says more than
/// "not one lock operation": a reply of the time the key has left (each master counts its own,
/// so no one answer across the masters is the one Redis would give), a reply of another
/// holder's value, a TTL written in the script rather than taken from the call.
fn not_a_lock_because(runs: &[Run]) -> &'static str {
    let answers = |f: &dyn Fn(&Val) -> bool| runs.iter().any(|r| shows(&r.reply, f));
    if answers(&|v| matches!(v, Val::Pttl(_) | Val::Ttl(_))) {
        "it answers the time the key has left (PTTL/TTL), which each master counts on its own \
         clock: no answer across the masters is the one Redis would give"
    } else if answers(&|v| matches!(v, Val::Other(_))) {
        "it answers the value another client holds, which the masters need not agree on"
    } else if runs.iter().any(|r| {
        r.end
            .iter()
            .any(|k| matches!(&k.ttl, TtlNow::Set { v: Val::Num(_), .. }))
    }) {
        "it sets a TTL written in the script, not one taken from its arguments"
    } else if runs.iter().any(|r| {
        r.calls.iter().any(|(c, a)| {
            (c == b"pexpire" || c == b"expire")
                && matches!(a.get(2), Some(Val::Str(f)) if f.eq_ignore_ascii_case(b"nx"))
        })
    }) {
        "it sets the expiry with NX, which never acts on a key that has one, as every lock has"
    } else {
        "what it does is not one lock operation"
    }
}

/// Whether `v`, or a value in it (a table, a sum), passes `f`.
fn shows(v: &Val, f: &dyn Fn(&Val) -> bool) -> bool {
    f(v) || match v {
        Val::Table(items) | Val::Sum(items) => items.iter().any(|i| shows(i, f)),
        _ => false,
    }
}

/// Whether the runs set a TTL from the same argument in milliseconds on one path and in
/// seconds on another (an acquisition by `SET ... PX ARGV[2]` and a refresh by `EXPIRE
/// ARGV[2]`): the refresh then holds the key a thousand times longer than the acquisition.
fn mixed_units(runs: &[Run]) -> bool {
    let set = |r: &Run| {
        r.end
            .iter()
            .filter_map(|k| match &k.ttl {
                TtlNow::Set {
                    seconds,
                    v: Val::Arg(j),
                } => Some((*j, *seconds)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let all: Vec<(usize, bool)> = runs.iter().flat_map(set).collect();
    all.iter()
        .any(|(j, s)| all.iter().any(|(k, t)| j == k && s != t))
}

/// The behaviour table of a script: one line per run (starting state and argument case),
/// with the calls made, the reply and the keys' final states. `Err` says why the analyser
/// could not follow it. (A reading aid for tests.)
#[cfg(test)]
pub fn behaviour(body: &[u8]) -> Result<Vec<String>, String> {
    behaviour_with(body, 1)
}

/// [`behaviour`] with the token in `ARGV[token]`.
#[cfg(test)]
pub fn behaviour_with(body: &[u8], token: usize) -> Result<Vec<String>, String> {
    let block = parse_script(body)?;
    let mut u = KeyUse::default();
    key_use_block(&block, &mut u);
    let ns: Vec<usize> = if u.dynamic {
        vec![1.max(u.max_literal), 2.max(u.max_literal)]
    } else {
        vec![u.max_literal.max(1)]
    };
    let mut out = Vec::new();
    for n in ns {
        let layout = Layout::argv(token);
        out.extend(
            analyse::explore(&block, n, layout)?
                .iter()
                .map(Run::to_string),
        );
    }
    Ok(out)
}

/// A script on `KEYS[1]` alone that, from every starting state of the key, leaves it holding
/// `ARGV[v]` with a TTL of `ARGV[t]` and answers `OK` (a status, or the string `"OK"`), touching
/// nothing else: one plain `SET KEYS[1] ARGV[v] PX|EX ARGV[t]` (see [`PlainSet`]).
fn plain_set(block: &Block) -> Option<PlainSet> {
    let mut u = KeyUse::default();
    key_use_block(block, &mut u);
    if u.dynamic || u.max_literal > 1 {
        return None;
    }
    let layout = Layout::argv(1);
    let runs = analyse::explore(block, 1, layout).ok()?;
    let mut found: Option<PlainSet> = None;
    for r in &runs {
        let ok = matches!(&r.reply, Val::Status) || matches!(&r.reply, Val::Str(s) if s == b"OK");
        if !ok
            || r.foreign
            || r.prefix.is_some()
            || !r.assumed.is_empty()
            || r.calls.iter().any(|(c, _)| c == b"publish")
        {
            return None;
        }
        let this = match &r.end[..] {
            [
                KeyNow {
                    value: Some(Val::Arg(v)),
                    ttl:
                        TtlNow::Set {
                            seconds,
                            v: Val::Arg(t),
                        },
                },
            ] if v != t => PlainSet {
                value_arg: *v,
                ttl_arg: *t,
                unit: if *seconds {
                    TtlUnit::Seconds
                } else {
                    TtlUnit::Millis
                },
            },
            _ => return None,
        };
        if *found.get_or_insert(this) != this {
            return None;
        }
    }
    found
}

/// A script on `KEYS[1]` alone that writes one constant `c` with a TTL of `ARGV[t]` wherever
/// the key does not hold `c` (missing, or any other value, which it overwrites), and leaves it
/// untouched where it holds `c`, answering one constant for each (see [`WriteUnless`]). Runs
/// from a held key fork on whether its value is `c` (see [`analyse::HOLDS`]); the caller's
/// token sits in an argument the script never reads, so a key holding "the token" is one more
/// value it cannot tell from another's.
fn write_unless(block: &Block) -> Option<WriteUnless> {
    let mut u = KeyUse::default();
    key_use_block(block, &mut u);
    if u.dynamic || u.max_literal > 1 || u.argv_whole {
        return None;
    }
    let layout = Layout {
        literal_forks: true,
        ..Layout::argv(MAX_TOKEN_ARG + 1)
    };
    let runs = analyse::explore(block, 1, layout).ok()?;
    // The constant compared with: every assumption is "the held value is c".
    let mut c: Option<&[u8]> = None;
    for r in &runs {
        if r.foreign
            || r.prefix.is_some()
            || !r.calls.iter().all(|(cmd, _)| {
                matches!(
                    cmd.as_slice(),
                    b"get"
                        | b"set"
                        | b"setex"
                        | b"psetex"
                        | b"pexpire"
                        | b"expire"
                        | b"exists"
                        | b"pttl"
                        | b"ttl"
                )
            })
        {
            return None;
        }
        for (j, s, _) in &r.assumed {
            if *j != analyse::HOLDS && *j != layout.token {
                return None;
            }
            if *c.get_or_insert(s) != s.as_slice() {
                return None;
            }
        }
    }
    let c = c.filter(|c| !c.is_empty())?;
    let holds_c = |r: &Run| r.assumed.iter().any(|(_, _, yes)| *yes);
    let (mut found, mut ok, mut no): (Option<(usize, TtlUnit)>, Option<Val>, Option<Val>) =
        (None, None, None);
    for r in &runs {
        let start = KeyNow::start(1, r.start[0], layout.token);
        // A held key not yet compared with `c` could hold it: the run must have asked.
        if r.start[0].held != Held::Missing && r.assumed.is_empty() {
            return None;
        }
        if holds_c(r) {
            if r.end[0] != start || *no.get_or_insert_with(|| r.reply.clone()) != r.reply {
                return None;
            }
            continue;
        }
        let this = match &r.end[..] {
            [
                KeyNow {
                    value: Some(v),
                    ttl:
                        TtlNow::Set {
                            seconds,
                            v: Val::Arg(t),
                        },
                },
            ] if *t <= MAX_TOKEN_ARG
                && match v {
                    Val::Str(s) => s == c,
                    Val::Num(n) => n.to_string().as_bytes() == c,
                    _ => false,
                } =>
            {
                let unit = if *seconds {
                    TtlUnit::Seconds
                } else {
                    TtlUnit::Millis
                };
                (*t, unit)
            }
            _ => return None,
        };
        if *found.get_or_insert(this) != this
            || *ok.get_or_insert_with(|| r.reply.clone()) != r.reply
        {
            return None;
        }
    }
    let (ttl_arg, unit) = found?;
    let (ok, no) = (reply_lit(&ok?, None, None)?, reply_lit(&no?, None, None)?);
    (ok != no).then(|| WriteUnless {
        value: Bytes::copy_from_slice(c),
        ttl_arg,
        unit,
        ok,
        no,
    })
}

/// The highest `ARGV` index tried as the token's place.
const MAX_TOKEN_ARG: usize = 8;

fn classify(block: &Block) -> Option<LockScript> {
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
fn classify_keys(block: &Block, u: &KeyUse, keys_exact: bool) -> Option<LockScript> {
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

/// The base of the pseudo-argument index that stands for a TTL written in the script: index
/// `TTL_LITERAL + k` is the literal `k` (see [`ttl_val`]); no real argument index comes near.
const TTL_LITERAL: usize = usize::MAX / 2;

/// Largest TTL literal taken for one (the proxy's `max_ttl_ms` applies on top, per call).
const MAX_TTL_LITERAL: i64 = i32::MAX as i64;

/// The TTL value `ttl_arg` stands for in a run: `ARGV[ttl_arg]`, or a literal.
fn ttl_val(ttl_arg: usize) -> Val {
    match ttl_arg.checked_sub(TTL_LITERAL) {
        Some(k) => Val::Num(k as i64),
        None => Val::Arg(ttl_arg),
    }
}

/// A lock whose TTL the script writes as a literal (`EXPIRE KEYS[1] 30`): the literal moves to
/// [`LockScript::ttl_literal`]. Only for the plain layouts (ARGV parameters, no signal, no
/// spread `ARGV`); others stay unknown.
fn literal_ttl(mut lock: LockScript) -> Option<LockScript> {
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
fn classify_counted(
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
fn literal_acquire(block: &Block) -> Option<LockScript> {
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
fn classify_signal(block: &Block) -> Option<LockScript> {
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
        choice: Choice::Always(op),
        token_arg: layout.token,
        ttl_arg: lock_ttl_arg,
        unit,
        all_keys: false,
        params_in_keys: false,
        token_literal: None,
        ttl_literal: None,
        answer,
        signal: Some(Signal {
            key: 2,
            ttl_arg,
            value,
            always,
        }),
        announce: None,
        argv_count: None,
        keys_count: None,
    })
}

fn classify_with(block: &Block, ns: &[usize], layout: Layout) -> Option<LockScript> {
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
fn publishes(r: &Run) -> bool {
    r.calls.iter().any(|(c, _)| c == b"publish")
}

/// A release of `KEYS[1]` that also publishes to a channel (see [`Announce`]): named by an
/// argument, or by `KEYS[2]` when the runs have two keys (the second only ever a channel: it
/// must end as it started, and is then left out). Every run publishes at most once, the same
/// command, channel and message, and either always, or exactly where the key was deleted, or
/// exactly where it was deleted or already gone. The release itself is judged on `KEYS[1]`
/// alone, like any other script.
fn classify_published(runs: &[Run], layout: Layout) -> Option<LockScript> {
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
fn switches_of(runs: &[Run]) -> Vec<(usize, Vec<u8>)> {
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
fn classify_guarded(runs: &[Run], all_keys: bool, layout: Layout) -> Option<LockScript> {
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

fn classify_runs(runs: &[Run], all_keys: bool, layout: Layout) -> Option<LockScript> {
    let switches = switches_of(runs);
    if runs.iter().any(|r| r.prefix.is_some()) {
        return classify_prefix(runs, &switches, all_keys, layout);
    }
    let lock = |choice, ttl_arg, unit, answer| LockScript {
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
fn classify_prefix(
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
    Some(LockScript {
        choice: Choice::IfTokenLen {
            arg: j,
            then: op,
            otherwise: Op::Acquire,
        },
        token_arg: layout.token,
        ttl_arg,
        unit,
        all_keys,
        params_in_keys: false,
        token_literal: None,
        ttl_literal: None,
        answer,
        signal: None,
        announce: None,
        argv_count: None,
        keys_count: None,
    })
}

fn has(r: &Run, j: usize, s: &[u8], yes: bool) -> bool {
    r.assumed
        .iter()
        .any(|(a, b, y)| *a == j && b == s && *y == yes)
}

const OPS: [Op; 13] = [
    Op::Release,
    Op::Delete,
    Op::Inspect,
    Op::Acquire,
    Op::AcquireOrRefresh,
    // Taken in ms, refreshed in seconds: only where one unit does not fit (see `ttl_of`).
    Op::AcquireOrRefreshSeconds,
    Op::AcquireOrKeep,
    Op::Extend,
    Op::ExtendAdd,
    // Only where the ones above do not fit (with one key they are the same).
    Op::AcquireOrRefreshAll,
    Op::ReleaseAll,
    Op::Remaining,
    Op::Held,
];

const ANSWERS: [Answer; 7] = [
    Answer::OneZero,
    Answer::Count,
    Answer::OkNil,
    Answer::OneMinusOne,
    Answer::Tristate,
    Answer::OkZero,
    Answer::ZeroOne,
];

/// The one operation, TTL argument, unit and reply shape that every run matches.
fn side(runs: &[&Run]) -> Option<(Op, usize, TtlUnit, Answer)> {
    if runs.is_empty()
        || runs
            .iter()
            .any(|r| r.foreign || r.calls.iter().any(|(c, _)| c == b"publish"))
    {
        return None;
    }
    for op in OPS {
        let ttls: Vec<(usize, TtlUnit)> = if matches!(
            op,
            Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Held
        ) {
            vec![(2, TtlUnit::Millis)]
        } else if op == Op::Remaining {
            // The unit of the reply; there is no TTL argument.
            vec![(0, TtlUnit::Millis), (0, TtlUnit::Seconds)]
        } else {
            match ttl_of(runs, op) {
                Some(t) => vec![t],
                None => continue,
            }
        };
        for (ttl_arg, unit) in ttls {
            let timed = !matches!(
                op,
                Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Remaining | Op::Held
            );
            if timed && ttl_arg == runs[0].layout.token {
                continue;
            }
            for answer in
                ANSWERS
                    .into_iter()
                    .chain(constant_replies(runs, op, timed.then_some(ttl_arg)))
            {
                if runs.iter().all(|r| matches(r, op, ttl_arg, unit, answer)) {
                    return Some((op, ttl_arg, unit, answer));
                }
            }
        }
    }
    None
}

/// The constant replies `op` would need to explain these runs (see [`Answer::Const`]): the
/// reply of a run where it succeeds, of one where it is refused and, for a release, of one
/// where every key was missing. `None` when a reply is not a constant or success and refusal
/// look the same.
///
/// With `ttl` (an operation that sets the TTL `ARGV[ttl]`), a reply may also be that argument
/// (`return tonumber(ARGV[2])` or `return ARGV[2]` after setting it): a constant per call, bound
/// to each call's TTL (see [`Lit::TtlNum`]). A TTL reply must then differ from every other reply
/// for every TTL the proxy accepts (a positive integer), or the script stays unknown.
fn constant_replies(runs: &[&Run], op: Op, ttl: Option<usize>) -> Option<Answer> {
    let reply_where = |f: &dyn Fn(&Run) -> bool| runs.iter().find(|r| f(r)).map(|r| &r.reply);
    let every = |r: &Run, h: Held| r.start.iter().all(|s| s.held == h);
    let strict_refresh =
        |r: &Run| r.start.iter().all(|s| s.held == Held::Token && s.ttl) && strict_success(r, op);
    let (ok, no, gone, again) = match op {
        Op::Release | Op::ReleaseAll => {
            let ok = reply_where(&|r| every(r, Held::Token))?;
            (
                ok,
                reply_where(&|r| every(r, Held::Other))?,
                reply_where(&|r| every(r, Held::Missing))?,
                ok,
            )
        }
        Op::Delete | Op::Inspect => return None,
        // `ok`: held by the caller; `no`: by another; `gone`: missing.
        Op::Held => {
            let ok = reply_where(&|r| every(r, Held::Token))?;
            let no = reply_where(&|r| every(r, Held::Other))?;
            let gone = reply_where(&|r| every(r, Held::Missing))?;
            if ok == no || ok == gone {
                return None;
            }
            (ok, no, gone, ok)
        }
        // `ok`: held without a TTL; `no` (and `gone`): not held.
        Op::Remaining => {
            let ok = reply_where(&|r| every(r, Held::Token) && r.start.iter().any(|s| !s.ttl))?;
            let no = reply_where(&|r| every(r, Held::Other))?;
            (ok, no, no, ok)
        }
        _ => {
            let no = reply_where(&|r| every(r, Held::Other))?;
            // A fresh grant: a run that succeeds from missing keys (else any success).
            let ok = reply_where(&|r| strict_success(r, op) && !strict_refresh(r))
                .or_else(|| reply_where(&|r| strict_success(r, op)))?;
            let again = reply_where(&strict_refresh).unwrap_or(ok);
            // An extension of one key may answer otherwise where the key is gone (the proxy
            // tells it from the masters' answers; over several keys it cannot).
            let gone = match op {
                Op::Extend | Op::ExtendAdd if runs.iter().all(|r| r.start.len() == 1) => {
                    reply_where(&|r| every(r, Held::Missing)).unwrap_or(no)
                }
                _ => no,
            };
            (ok, no, gone, again)
        }
    };
    let token = runs.first().map(|r| r.layout.token);
    let lit = |v: &Val| reply_lit(v, ttl, token);
    let replies = Replies {
        ok: lit(ok)?,
        no: lit(no)?,
        gone: lit(gone)?,
        again: lit(again)?,
    };
    let all = [replies.ok, replies.no, replies.gone, replies.again];
    if all.iter().any(|l| l.is_ttl()) && all.iter().any(|l| !l.is_ttl() && l.may_look_like_a_ttl())
    {
        return None;
    }
    let told_apart = replies.ok != replies.no && replies.again != replies.no;
    // A release that answers one constant whatever it found (`return 'OK'` after deleting
    // where the key held the token): its reply tells nothing, so it cannot be read as a grant.
    let one_answer = matches!(op, Op::Release | Op::ReleaseAll)
        && replies.no == replies.ok
        && replies.gone == replies.ok
        && replies.again == replies.ok;
    (told_apart || one_answer || op == Op::Remaining).then_some(Answer::Const(replies))
}

/// The TTL argument a successful run of `op` wrote (for a refresh in seconds, the one a run
/// that took the key wrote, in milliseconds: see [`Op::AcquireOrRefreshSeconds`]).
fn ttl_of(runs: &[&Run], op: Op) -> Option<(usize, TtlUnit)> {
    let taken = |r: &&&Run| {
        op != Op::AcquireOrRefreshSeconds || r.start.iter().all(|s| s.held == Held::Missing)
    };
    let found = runs
        .iter()
        .filter(|r| strict_success(r, op))
        .filter(taken)
        .find_map(|r| match &r.end.first()?.ttl {
            TtlNow::Set { seconds, v } => {
                let arg = match (op, v) {
                    (Op::ExtendAdd, Val::Sum(t)) => match t.as_slice() {
                        [Val::Arg(d), Val::Pttl(1)] => *d,
                        _ => return None,
                    },
                    (Op::ExtendAdd, _) => return None,
                    (_, Val::Arg(d)) => *d,
                    (_, Val::Num(k)) if (1..=MAX_TTL_LITERAL).contains(k) => {
                        TTL_LITERAL + *k as usize
                    }
                    _ => return None,
                };
                let unit = if *seconds {
                    TtlUnit::Seconds
                } else {
                    TtlUnit::Millis
                };
                Some((arg, unit))
            }
            _ => None,
        });
    // Taken in milliseconds from an argument (the refresh then reads it in seconds).
    found.filter(|(arg, unit)| {
        op != Op::AcquireOrRefreshSeconds || (*unit == TtlUnit::Millis && *arg <= MAX_TOKEN_ARG)
    })
}

fn strict_success(r: &Run, op: Op) -> bool {
    let all = |f: &dyn Fn(Held, bool) -> bool| r.start.iter().all(|s| f(s.held, s.ttl));
    match op {
        Op::Acquire => all(&|h, _| h == Held::Missing),
        Op::AcquireOrRefresh | Op::AcquireOrRefreshSeconds => {
            all(&|h, t| h == Held::Missing || (h == Held::Token && t))
        }
        // A key holding the token without a TTL is kept too (held for ever, as valid as any).
        Op::AcquireOrKeep => all(&|h, _| h != Held::Other),
        Op::Extend => all(&|h, t| h == Held::Token && t),
        Op::ExtendAdd => all(&|h, t| h == Held::Token && t),
        Op::AcquireOrRefreshAll => {
            all(&|h, _| h == Held::Missing) || all(&|h, t| h == Held::Token && t)
        }
        Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Remaining | Op::Held => false,
    }
}

/// The reply the proxy gives for a granted (`ok`) or refused operation (as `command::lock`).
fn expected(answer: Answer, ok: bool, n: usize, ttl_arg: usize, token_arg: usize) -> Val {
    match (answer, ok) {
        (Answer::Const(c), true) => lit_val(c.ok, ttl_arg, token_arg),
        (Answer::Const(c), false) => lit_val(c.no, ttl_arg, token_arg),
        (Answer::OkNil | Answer::OkZero, true) => Val::Status,
        (Answer::OkNil, false) => Val::Nil,
        (Answer::Count, true) => Val::Num(n as i64),
        (Answer::OneMinusOne, false) => Val::Num(-1),
        (Answer::ZeroOne, ok) => Val::Num(i64::from(!ok)),
        (_, ok) => Val::Num(i64::from(ok)),
    }
}

fn matches(r: &Run, op: Op, ttl_arg: usize, unit: TtlUnit, answer: Answer) -> bool {
    let n = r.start.len();
    let token_arg = r.layout.token;
    let unchanged: Vec<KeyNow> = r
        .start
        .iter()
        .enumerate()
        .map(|(i, s)| KeyNow::start(i + 1, *s, r.layout.token))
        .collect();
    match op {
        Op::Release => {
            let end: Vec<KeyNow> = unchanged
                .iter()
                .map(|k| match k.value {
                    Some(Val::Arg(t)) if t == r.layout.token => KeyNow {
                        value: None,
                        ttl: TtlNow::None,
                    },
                    _ => k.clone(),
                })
                .collect();
            let deleted = r.start.iter().filter(|s| s.held == Held::Token).count();
            let missing = r.start.iter().filter(|s| s.held == Held::Missing).count();
            let reply = match answer {
                Answer::Count => Val::Num(deleted as i64),
                Answer::Tristate if deleted == n => Val::Num(1),
                Answer::Tristate if deleted + missing == n => Val::Num(-1),
                Answer::Tristate => Val::Num(0),
                Answer::Const(c) if deleted + missing == n && deleted < n => {
                    lit_val(c.gone, ttl_arg, token_arg)
                }
                shape => expected(shape, deleted == n, n, ttl_arg, token_arg),
            };
            r.end == end && r.reply == reply
        }
        Op::ReleaseAll => {
            let mine = r.start.iter().all(|s| s.held == Held::Token);
            let end: Vec<KeyNow> = if mine {
                vec![
                    KeyNow {
                        value: None,
                        ttl: TtlNow::None,
                    };
                    n
                ]
            } else {
                unchanged
            };
            let reply = match answer {
                Answer::Count => Val::Num(if mine { n as i64 } else { 0 }),
                Answer::Tristate => return false,
                Answer::Const(c) if r.start.iter().all(|s| s.held == Held::Missing) => {
                    lit_val(c.gone, ttl_arg, token_arg)
                }
                shape => expected(shape, mine, n, ttl_arg, token_arg),
            };
            r.end == end && r.reply == reply
        }
        Op::Remaining => {
            let Answer::Const(c) = answer else {
                return false;
            };
            let in_unit = |k: usize| match unit {
                TtlUnit::Millis => Val::Pttl(k),
                TtlUnit::Seconds => Val::Ttl(k),
            };
            if r.end != unchanged {
                return false;
            }
            if !r.start.iter().all(|s| s.held == Held::Token) {
                return r.reply == lit_val(c.no, ttl_arg, token_arg);
            }
            if !r.start.iter().all(|s| s.ttl) {
                // Held, a key without a TTL (never one the proxy granted): the proxy answers
                // `ok`; the script may also answer the TTL of a key that has one.
                return r.reply == lit_val(c.ok, ttl_arg, token_arg)
                    || (1..=n).any(|k| r.start[k - 1].ttl && r.reply == in_unit(k));
            }
            match n {
                1 => r.reply == in_unit(1),
                // The smallest of two TTLs, by the order the run assumed.
                2 => {
                    let first = |a: usize, b: usize| {
                        r.assumed.iter().find_map(|(j, s, yes)| {
                            (*j == analyse::ORDER && *s == analyse::order(a, b)).then_some(*yes)
                        })
                    };
                    let least = match (first(1, 2), first(2, 1)) {
                        (Some(true), _) | (_, Some(false)) => 1,
                        (_, Some(true)) | (Some(false), _) => 2,
                        (None, None) => return false,
                    };
                    r.reply == in_unit(least)
                }
                _ => false,
            }
        }
        Op::Delete => {
            let gone = KeyNow {
                value: None,
                ttl: TtlNow::None,
            };
            let existed = r.start.iter().filter(|s| s.held != Held::Missing).count();
            let reply = match answer {
                Answer::Count => Val::Num(existed as i64),
                shape => expected(shape, existed == n, n, ttl_arg, token_arg),
            };
            r.end.iter().all(|k| *k == gone) && r.reply == reply
        }
        Op::Held => {
            let Answer::Const(c) = answer else {
                return false;
            };
            let want = match r.start[0].held {
                Held::Token => c.ok,
                Held::Other => c.no,
                Held::Missing => c.gone,
            };
            n == 1 && r.end == unchanged && r.reply == lit_val(want, ttl_arg, token_arg)
        }
        Op::Inspect => {
            if n != 1 || answer != Answer::OneZero {
                return false;
            }
            let k = &unchanged[0];
            let value = k.value.clone().unwrap_or(Val::Nil);
            let ttl = match (&k.value, &k.ttl) {
                (None, _) => Val::Num(-2),
                (_, TtlNow::None) => Val::Num(-1),
                _ => Val::Pttl(1),
            };
            let reply = if value == Val::Nil {
                Val::Table(Vec::new())
            } else {
                Val::Table(vec![value, ttl])
            };
            // Redis cuts a table at its first nil, and `false` (a missing key) becomes nil:
            // `{false, -2}` is answered as `[nil, -2]`.
            let reply_missing = Val::Table(vec![Val::Nil, Val::Num(-2)]);
            let got = match &r.reply {
                Val::Table(t) if t.first() == Some(&Val::Nil) => reply_missing.clone(),
                other => other.clone(),
            };
            r.end == unchanged && (got == reply || (k.value.is_none() && got == reply_missing))
        }
        Op::AcquireOrKeep => {
            // One key: missing, it is taken with the TTL; already the token's, it is kept as it
            // is (TTL untouched) and the grant answered; another's, nothing changes.
            if n != 1 {
                return false;
            }
            let reply_ok = expected(answer, true, n, ttl_arg, token_arg);
            match r.start[0].held {
                Held::Missing => {
                    let taken = KeyNow {
                        value: Some(Val::Arg(r.layout.token)),
                        ttl: TtlNow::Set {
                            seconds: unit == TtlUnit::Seconds,
                            v: ttl_val(ttl_arg),
                        },
                    };
                    r.end == [taken] && r.reply == reply_ok
                }
                Held::Token => {
                    let again = match answer {
                        Answer::Const(c) => lit_val(c.again, ttl_arg, token_arg),
                        shape => expected(shape, true, n, ttl_arg, token_arg),
                    };
                    r.end == unchanged && r.reply == again
                }
                Held::Other => {
                    r.end == unchanged && r.reply == expected(answer, false, n, ttl_arg, token_arg)
                }
            }
        }
        _ => {
            if op == Op::AcquireOrRefreshSeconds && n != 1 {
                return false;
            }
            let ttl = |i: usize| {
                let v = if op == Op::ExtendAdd {
                    Val::Sum(vec![Val::Arg(ttl_arg), Val::Pttl(i + 1)])
                } else {
                    ttl_val(ttl_arg)
                };
                // A refresh in seconds: the same argument read in seconds where the key was
                // already the caller's.
                let refreshed = op == Op::AcquireOrRefreshSeconds && r.start[i].held == Held::Token;
                TtlNow::Set {
                    seconds: unit == TtlUnit::Seconds || refreshed,
                    v,
                }
            };
            let success: Vec<KeyNow> = (0..n)
                .map(|i| KeyNow {
                    value: Some(Val::Arg(r.layout.token)),
                    ttl: ttl(i),
                })
                .collect();
            // A key holding the token without a TTL cannot come from the proxy's own grants;
            // refusing it is as safe as extending it (python-redis-lock answers 2 there).
            let lenient = op != Op::Acquire
                && r.start.iter().any(|s| s.held == Held::Token && !s.ttl)
                && r.start.iter().all(|s| s.held != Held::Other);
            let again = match answer {
                Answer::Const(c) if r.start.iter().all(|s| s.held == Held::Token) => {
                    lit_val(c.again, ttl_arg, token_arg)
                }
                shape => expected(shape, true, n, ttl_arg, token_arg),
            };
            let won = r.end == success && r.reply == again;
            let refused = match answer {
                Answer::Const(c)
                    if matches!(op, Op::Extend | Op::ExtendAdd)
                        && n == 1
                        && r.start[0].held == Held::Missing =>
                {
                    lit_val(c.gone, ttl_arg, token_arg)
                }
                shape => expected(shape, false, n, ttl_arg, token_arg),
            };
            let lost = r.end == unchanged
                && (r.reply == refused
                    || (lenient && answer == Answer::ZeroOne && r.reply == Val::Num(2)));
            if strict_success(r, op) || (lenient && won) {
                won || (lenient && lost)
            } else {
                lost
            }
        }
    }
}
