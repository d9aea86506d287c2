//! Lua scripts read by the proxy: a linear-time lexer ([`lex`]), a depth-capped parser
//! ([`parse`]) and a behavioural analyser ([`analyse`]) that together recognise a lock script by
//! what it does; [`hash`] recognises re-entrant hash locks (Redisson) on the same analyser.
//!
//! [`recognise`] runs the script symbolically from every starting state of its keys (see
//! [`analyse`]) and accepts it only when the behaviour table matches one lock operation exactly:
//! the same writes from every state, the reply its library expects in each, and nothing else
//! (no other key, no other command). A wrong match is worse than none, so anything uncertain is
//! `None`. Scripts larger than [`MAX_SCRIPT`] are not analysed.
//!
//! # Layout
//! - `classify`: the lock-script layouts tried (where the token, TTL and keys sit; a signal
//!   list, a published release, a guard on an argument, a token prefix).
//! - `matching`: a script's runs held against each lock operation and reply shape.
//! - `shapes`: scripts that are one plain command whatever the key held.
//! - [`hash`] and [`redisson`]: hash locks and read-write or fair locks, on the same reading.

pub mod analyse;
pub mod hash;
pub mod lex;
pub mod parse;
pub mod redisson;

mod classify;
mod matching;
mod shapes;

use crate::lockop::{HashScript, LockScript, PlainSet, WriteUnless};
use analyse::{Layout, Run, TtlNow, Val};
use classify::classify;
use matching::MAX_TOKEN_ARG;
use parse::{Block, KeyUse, key_use_block};
use shapes::{plain_set, write_unless};

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
