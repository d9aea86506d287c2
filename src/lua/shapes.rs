//! Scripts that are one plain command whatever the key held: a `SET ... PX` from every state
//! ([`PlainSet`]), or a constant written unless the key holds it ([`WriteUnless`]). Tried
//! after the lock operations (see [`super::classify`]), before the hash and Redisson locks.

use bytes::Bytes;

use super::analyse::{self, Held, KeyNow, Layout, Run, TtlNow, Val, reply_lit};
use super::matching::MAX_TOKEN_ARG;
use super::parse::{Block, KeyUse, key_use_block};
use crate::lockop::{PlainSet, TtlUnit, WriteUnless};

/// A script on `KEYS[1]` alone that, from every starting state of the key, leaves it holding
/// `ARGV[v]` with a TTL of `ARGV[t]` and answers `OK` (a status, or the string `"OK"`), touching
/// nothing else: one plain `SET KEYS[1] ARGV[v] PX|EX ARGV[t]` (see [`PlainSet`]).
pub(super) fn plain_set(block: &Block) -> Option<PlainSet> {
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
pub(super) fn write_unless(block: &Block) -> Option<WriteUnless> {
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
