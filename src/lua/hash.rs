//! Recognition of hash locks (Redisson's `RLock`, `RFencedLock`) by what their scripts do.
//!
//! A hash lock is a hash in `KEYS[1]` whose one field, the holder's name (`ARGV[field]`,
//! `<uuid>:<threadId>` in Redisson), counts its holds. The script is run symbolically (see
//! [`analyse`]) from each state the lock can be in: missing, held once by the caller, re-entered
//! by the caller (a count `c ≥ 2`), held by another, all with a TTL; for an unlock with a latch,
//! also with the latch of an earlier unlock present. Its behaviour table must then match one of
//! [`HashOp`]'s exactly, reply by reply and write by write, with the release published once
//! where (and only where) the lock was deleted. Anything else is not a hash lock.
//!
//! Two more shapes: `RFencedLock`'s lock, which also increments a token counter in `KEYS[2]`
//! exactly where it grants (from a missing counter or an existing one), and the multi-lock
//! renewal of Redisson 3.44 and later, run over one and two keys in every combination of states,
//! each key with its own field `ARGV[i + 1]`. The caller's field is found by running the script
//! to its first hash command; every other hash command must name the same field.

use bytes::Bytes;

use super::analyse::{self, KeyNow, Layout, Run, TtlNow, Val};
use super::parse::{self, KeyUse, key_use_block};
use crate::lockop::{HashOp, HashScript, Latch, Lit, PublishArgs, PublishCommand, TtlUnit};

/// The states of the lock key, in this order: missing, held once by the caller, re-entered by
/// the caller, held by another (index 3).
fn lock_states() -> [KeyNow; 4] {
    let hash = |mine: Option<Val>, others| KeyNow {
        value: Some(Val::Hash {
            mine: mine.map(Box::new),
            others,
        }),
        ttl: TtlNow::Orig,
    };
    [
        KeyNow {
            value: None,
            ttl: TtlNow::None,
        },
        hash(Some(Val::Num(1)), false),
        hash(Some(Val::Many(0)), false),
        hash(None, true),
    ]
}

const MISSING: usize = 0;
const ONCE: usize = 1;
const MANY: usize = 2;

/// One run, named by its starting state.
struct Case<'a> {
    lock: usize,
    latch: bool,
    run: &'a Run,
}

/// The hash-lock operation a script (`body`, already parsed into `block`) performs, if its
/// behaviour matches one exactly.
pub(super) fn recognise_block(body: &[u8], block: &parse::Block) -> Option<HashScript> {
    // Command names are literals (anything else stops the analysis), so a script that never
    // spells a hash command is tried only as a forced unlock, with no field.
    let lower = body.to_ascii_lowercase();
    let hashes = [&b"hexists"[..], b"hincrby", b"hset"]
        .iter()
        .any(|c| lower.windows(c.len()).any(|w| w == *c));
    let mut u = KeyUse::default();
    key_use_block(block, &mut u);
    if u.dynamic {
        return (hashes && u.max_literal <= 1).then(|| renew_all(block))?;
    }
    if !(1..=3).contains(&u.max_literal) {
        return None;
    }
    let n = u.max_literal;
    let missing = KeyNow {
        value: None,
        ttl: TtlNow::None,
    };
    let latch_held = KeyNow {
        value: Some(Val::Other(3)),
        ttl: TtlNow::Orig,
    };
    let mut starts = Vec::new();
    for lock in lock_states() {
        let mut keys = vec![lock; 1];
        keys.resize(n, missing.clone());
        starts.push(keys.clone());
        if n == 3 {
            keys[2] = latch_held.clone();
            starts.push(keys);
        }
    }
    // Field 0 (none) is only a forced unlock's, on the lock and its channel.
    let mut fields = if n == 2 { vec![0] } else { Vec::new() };
    if hashes {
        fields.extend(analyse::find_field(block, &starts, false));
    }
    fields
        .into_iter()
        .find_map(|field| {
            let layout = Layout::hash(field, false);
            let runs = analyse::explore_states(block, layout, &starts).ok()?;
            let cases: Vec<Case> = runs
                .iter()
                .map(|(k, run)| Case {
                    lock: if n == 3 { k / 2 } else { *k },
                    latch: n == 3 && k % 2 == 1,
                    run,
                })
                .collect();
            if cases
                .iter()
                .any(|c| !c.run.assumed.is_empty() || c.run.foreign)
            {
                return None;
            }
            classify(&cases, n, field)
        })
        .or_else(|| (n == 2 && hashes).then(|| fenced(block, &starts))?)
}

/// Why a script that uses hash commands on `KEYS[1]` alone is no hash-lock operation, where the
/// hash analysis says more than the string one: a reply of the hold count (each master counts
/// its own), or where that analysis stopped.
pub(super) fn why(body: &[u8], block: &parse::Block) -> Option<String> {
    let lower = body.to_ascii_lowercase();
    if ![&b"hexists"[..], b"hincrby", b"hset", b"hget"]
        .iter()
        .any(|c| lower.windows(c.len()).any(|w| w == *c))
    {
        return None;
    }
    let mut u = KeyUse::default();
    key_use_block(block, &mut u);
    if u.dynamic || u.max_literal != 1 {
        return None;
    }
    let starts: Vec<Vec<KeyNow>> = lock_states().into_iter().map(|s| vec![s]).collect();
    let Some(field) = analyse::find_field(block, &starts, false) else {
        return Some("it keeps a hash whose field does not name the caller".into());
    };
    match analyse::explore_states(block, Layout::hash(field, false), &starts) {
        Err(e) => Some(format!("as a hash lock: {e}")),
        Ok(runs) => {
            let counts = runs.iter().any(|(k, r)| {
                (*k == ONCE && r.reply == Val::Num(2))
                    || (*k == MANY && matches!(r.reply, Val::Many(_)))
            });
            counts.then(|| {
                "it answers the hold count of a re-entrant hash lock, which each master \
                 counts on its own"
                    .into()
            })
        }
    }
}

/// A fenced acquisition (`KEYS` = lock, token counter): the lock taken as [`HashOp::Acquire`]
/// takes it, and the counter incremented by one exactly where the lock was granted; answering
/// as `Acquire`, or `{-1, token}` / `{pttl, -1}`.
fn fenced(block: &parse::Block, lock_starts: &[Vec<KeyNow>]) -> Option<HashScript> {
    let counter = [
        KeyNow {
            value: None,
            ttl: TtlNow::None,
        },
        KeyNow {
            value: Some(Val::Many(0)),
            ttl: TtlNow::None,
        },
    ];
    let states = lock_states();
    let mut starts = Vec::new();
    for lock in &states {
        for c in &counter {
            starts.push(vec![lock.clone(), c.clone()]);
        }
    }
    analyse::find_field(block, lock_starts, false).and_then(|field| {
        let layout = Layout::hash(field, false);
        let runs = analyse::explore_states(block, layout, &starts).ok()?;
        let once = runs.iter().find(|(k, _)| *k / 2 == ONCE)?;
        let t = match &once.1.end[0].ttl {
            TtlNow::Set {
                seconds: false,
                v: Val::Arg(t),
            } if *t != field => *t,
            _ => return None,
        };
        let mut pair = None;
        for (k, r) in &runs {
            let (lock, start) = (k / 2, &starts[*k]);
            if !r.assumed.is_empty() || r.foreign || r.calls.iter().any(|(c, _)| c == b"publish") {
                return None;
            }
            let acquire = Case {
                lock,
                latch: false,
                run: r,
            };
            // The lock alone must behave as `Acquire`: judge it with the counter set aside.
            let mut alone = r.clone();
            alone.end.truncate(1);
            let reply_ok;
            let counted = match &start[1].value {
                None => Val::Num(1),
                Some(v) => analyse_add_one(v)?,
            };
            if lock == 3 {
                if r.end[1] != start[1] {
                    return None;
                }
                reply_ok = match &r.reply {
                    Val::Pttl(1) => !*pair.get_or_insert(false),
                    Val::Table(items) => {
                        items.as_slice() == [Val::Pttl(1), Val::Num(-1)]
                            && *pair.get_or_insert(true)
                    }
                    _ => false,
                };
                alone.reply = Val::Pttl(1);
            } else {
                if r.end[1].value.as_ref() != Some(&counted) || r.end[1].ttl != start[1].ttl {
                    return None;
                }
                reply_ok = match &r.reply {
                    Val::Nil => !*pair.get_or_insert(false),
                    Val::Table(items) => {
                        items.as_slice() == [Val::Num(-1), counted.clone()]
                            && *pair.get_or_insert(true)
                    }
                    _ => false,
                };
                alone.reply = Val::Nil;
            }
            let judged = Case {
                run: &alone,
                ..acquire
            };
            if !reply_ok || !fits(&judged, Shape::ms(HashOp::Acquire), t, None, &None) {
                return None;
            }
        }
        let op = if pair? {
            HashOp::FencedAcquireToken
        } else {
            HashOp::FencedAcquire
        };
        Some(hash_script(op, field, t, false))
    })
}

/// A counter after `INCR`.
fn analyse_add_one(v: &Val) -> Option<Val> {
    match v {
        Val::Num(n) => Some(Val::Num(n.checked_add(1)?)),
        Val::Many(k) => Some(Val::Many(k.checked_add(1)?)),
        _ => None,
    }
}

/// A renewal of every key in `KEYS`, each with its own field `ARGV[field + i - 1]`, answering a
/// table of 1 (renewed: the key's field was there) or 0 per key; unrolled over one and two keys,
/// each key in every state.
fn renew_all(block: &parse::Block) -> Option<HashScript> {
    let states = lock_states();
    let mut starts: Vec<Vec<KeyNow>> = states.iter().map(|s| vec![s.clone()]).collect();
    for a in &states {
        for b in &states {
            starts.push(vec![a.clone(), b.clone()]);
        }
    }
    analyse::find_field(block, &starts, true).and_then(|field| {
        let layout = Layout::hash(field, true);
        let mut ttl_arg = None;
        // State by state, so that a script that is no renewal stops at the first.
        for (k, keys) in starts.iter().enumerate() {
            let runs = analyse::explore_states(block, layout, std::slice::from_ref(keys)).ok()?;
            let [(_, r)] = runs.as_slice() else {
                return None;
            };
            if !r.assumed.is_empty() || r.foreign || !r.calls.iter().all(|(c, _)| c != b"publish") {
                return None;
            }
            let start = &starts[k];
            let mut reply = Vec::with_capacity(start.len());
            for (i, (before, after)) in start.iter().zip(&r.end).enumerate() {
                let mine = matches!(&before.value, Some(Val::Hash { mine: Some(_), .. }));
                if mine {
                    let t = match &after.ttl {
                        TtlNow::Set {
                            seconds: false,
                            v: Val::Arg(t),
                        } if ![field, field + i].contains(t) => *t,
                        _ => return None,
                    };
                    if *ttl_arg.get_or_insert(t) != t || after.value != before.value {
                        return None;
                    }
                } else if after != before {
                    return None;
                }
                reply.push(Val::Num(i64::from(mine)));
            }
            if r.reply != Val::Table(reply) {
                return None;
            }
        }
        // The TTL must not be one of the fields (`ARGV[field ..]`).
        let t = ttl_arg?;
        (t < field).then_some(hash_script(HashOp::RenewAll, field, t, false))
    })
}

/// The hash-lock operation whose every case the runs fit, from the number of keys `n` and the
/// caller's field (`ARGV[field]`, 0 for none).
fn classify(cases: &[Case], n: usize, field: usize) -> Option<HashScript> {
    let publish = published(cases)?;
    let script = match (n, field) {
        (1, 1..) => one_key(cases, field, &publish)?,
        (2, 0) => force_unlock(cases, publish?)?,
        (2 | 3, 1..) => unlock(cases, n, field, publish)?,
        _ => return None,
    };
    args_distinct(&script, field).then_some(script)
}

/// A hash-lock operation on the lock alone: its field, TTL and unit, and nothing more.
fn hash_script(op: HashOp, field_arg: usize, ttl_arg: usize, seconds: bool) -> HashScript {
    HashScript {
        op,
        field_arg,
        ttl_arg,
        publish: None,
        latch: None,
        unit: if seconds {
            TtlUnit::Seconds
        } else {
            TtlUnit::Millis
        },
        replies: None,
        unlock_replies: None,
    }
}

/// One key with a field: an acquisition or renewal (either unit), or an unlock that
/// publishes nothing.
fn one_key(cases: &[Case], field: usize, publish: &Option<PublishArgs>) -> Option<HashScript> {
    // Acquire and renew both set the TTL where the caller is alone in the hash, in either
    // unit.
    let acquire_or_renew = ttl_in(cases, ONCE, field).and_then(|(t, seconds)| {
        let plain = |op| Shape {
            op,
            seconds,
            replies: None,
            unlock_replies: None,
        };
        // An acquisition answering constants of its own (`return 1` / `return 0`).
        let constants = acquire_constants(cases).map(|replies| Shape {
            replies: Some(replies),
            ..plain(HashOp::Acquire)
        });
        [plain(HashOp::Acquire), plain(HashOp::Renew)]
            .into_iter()
            .chain(constants)
            .find(|shape| cases.iter().all(|c| fits(c, *shape, t, None, publish)))
            .map(|shape| (shape, t))
    });
    if let Some((shape, t)) = acquire_or_renew {
        return Some(HashScript {
            replies: shape.replies,
            ..hash_script(shape.op, field, t, shape.seconds)
        });
    }
    // An unlock that publishes nothing (no channel given): its TTL is the one it sets where a
    // hold is left, or none when it leaves the TTL as it was.
    let (t, seconds) = ttl_in(cases, MANY, field).unwrap_or((0, false));
    let replies = unlock_constants(cases)?;
    let shape = Shape {
        op: HashOp::Unlock,
        seconds,
        replies: None,
        unlock_replies: Some(replies),
    };
    if publish.is_some() || !cases.iter().all(|c| fits(c, shape, t, None, &None)) {
        return None;
    }
    Some(HashScript {
        unlock_replies: Some(replies),
        ..hash_script(HashOp::Unlock, field, t, seconds)
    })
}

/// Two keys, no field: a forced unlock that publishes.
fn force_unlock(cases: &[Case], publish: PublishArgs) -> Option<HashScript> {
    cases
        .iter()
        .all(|c| {
            let shape = Shape::ms(HashOp::ForceUnlock);
            fits(c, shape, 0, None, &Some(publish.clone()))
        })
        .then_some(HashScript {
            publish: Some(publish),
            ..hash_script(HashOp::ForceUnlock, 0, 0, false)
        })
}

/// Two or three keys with a field: an unlock that publishes, with its latch in `KEYS[3]`.
fn unlock(
    cases: &[Case],
    n: usize,
    field: usize,
    publish: Option<PublishArgs>,
) -> Option<HashScript> {
    let c = cases.iter().find(|c| c.lock == MANY && !c.latch)?;
    let t = match &c.run.end.first()?.ttl {
        TtlNow::Set {
            seconds: false,
            v: Val::Arg(t),
        } if *t != field => *t,
        _ => return None,
    };
    let latch = if n == 3 {
        let c = cases.iter().find(|c| c.lock == ONCE && !c.latch)?;
        match &c.run.end.get(2)?.ttl {
            TtlNow::Set {
                seconds: false,
                v: Val::Arg(l),
            } if *l != field => Some(Latch {
                key: 3,
                ttl_arg: *l,
            }),
            _ => return None,
        }
    } else {
        None
    };
    publish.as_ref()?;
    cases
        .iter()
        .all(|c| fits(c, Shape::ms(HashOp::Unlock), t, latch.as_ref(), &publish))
        .then_some(HashScript {
            publish: publish.clone(),
            latch,
            ..hash_script(HashOp::Unlock, field, t, false)
        })
}

/// Whether the field, the TTL and the publish's command and message are distinct arguments.
fn args_distinct(script: &HashScript, field: usize) -> bool {
    script.publish.as_ref().is_none_or(|p| {
        let cmd = match p.command {
            PublishCommand::Arg(j) => j,
            PublishCommand::Literal(_) => 0,
        };
        ![field, script.ttl_arg, cmd].contains(&p.message_arg)
            && ![field, script.ttl_arg].contains(&cmd)
    })
}

/// The one publish the script makes (the same call in every run that publishes), if any.
/// `None` (as a failure) when runs publish differently or one publishes twice.
fn published(cases: &[Case]) -> Option<Option<PublishArgs>> {
    let mut found: Option<PublishArgs> = None;
    for c in cases {
        let calls: Vec<&[Val]> = c
            .run
            .calls
            .iter()
            .filter(|(cmd, _)| cmd == b"publish")
            .map(|(_, args)| args.as_slice())
            .collect();
        let p = match calls.as_slice() {
            [] => continue,
            [[command, Val::Key(ch), Val::Arg(m)]] => PublishArgs {
                channel_key: *ch,
                message_arg: *m,
                command: match command {
                    Val::Arg(j) => PublishCommand::Arg(*j),
                    Val::Str(s) => PublishCommand::Literal(Bytes::from(s.to_ascii_uppercase())),
                    _ => return None,
                },
            },
            _ => return None,
        };
        if p.channel_key == 1 || found.get_or_insert_with(|| p.clone()) != &p {
            return None;
        }
    }
    Some(found)
}

/// What a hash-lock script is matched against: the operation, the unit its TTL argument is
/// read in, and (an `Acquire` only) the constants it answers when granted and when refused.
#[derive(Clone, Copy)]
struct Shape {
    op: HashOp,
    seconds: bool,
    replies: Option<(Lit, Lit)>,
    /// An unlock that publishes nothing, with these replies (see
    /// [`HashScript::unlock_replies`]).
    unlock_replies: Option<[Lit; 3]>,
}

impl Shape {
    /// Redisson's shape of `op`: the TTL in milliseconds, Redisson's replies.
    fn ms(op: HashOp) -> Shape {
        Shape {
            op,
            seconds: false,
            replies: None,
            unlock_replies: None,
        }
    }
}

/// The constants an unlock answers where the caller did not hold the lock (another holds it),
/// where it keeps a hold, and where it gave up its last, if the proxy can give them.
fn unlock_constants(cases: &[Case]) -> Option<[Lit; 3]> {
    let reply = |state: usize| {
        let c = cases.iter().find(|c| c.lock == state && !c.latch)?;
        analyse::reply_lit(&c.run.reply, None, None)
    };
    Some([reply(3)?, reply(MANY)?, reply(ONCE)?])
}

/// The TTL argument (and whether in seconds) a run from `state` set on the lock, if it is not
/// the caller's field.
fn ttl_in(cases: &[Case], state: usize, field: usize) -> Option<(usize, bool)> {
    let c = cases.iter().find(|c| c.lock == state && !c.latch)?;
    match &c.run.end.first()?.ttl {
        TtlNow::Set {
            seconds,
            v: Val::Arg(t),
        } if *t != field => Some((*t, *seconds)),
        _ => None,
    }
}

/// The constants an acquisition answers when it takes the lock from missing and when another
/// holds it, if they are constants the proxy can give and tell apart (and are not Redisson's
/// nil and PTTL, matched as such).
fn acquire_constants(cases: &[Case]) -> Option<(Lit, Lit)> {
    let reply = |state: usize| {
        let c = cases.iter().find(|c| c.lock == state && !c.latch)?;
        analyse::reply_lit(&c.run.reply, None, None)
    };
    let (ok, no) = (reply(MISSING)?, reply(3)?);
    (ok != no).then_some((ok, no))
}

/// Whether one run does exactly what `shape` does from its starting state.
fn fits(
    c: &Case,
    shape: Shape,
    t: usize,
    latch: Option<&Latch>,
    publish: &Option<PublishArgs>,
) -> bool {
    let op = shape.op;
    let r = c.run;
    let start = &lock_states()[c.lock];
    // No TTL argument: an unlock that leaves the TTL as it was.
    let set_ttl = if t == 0 {
        TtlNow::Orig
    } else {
        TtlNow::Set {
            seconds: shape.seconds,
            v: Val::Arg(t),
        }
    };
    let hash = |mine: Val| {
        Some(KeyNow {
            value: Some(Val::Hash {
                mine: Some(Box::new(mine)),
                others: false,
            }),
            ttl: set_ttl.clone(),
        })
    };
    let gone = KeyNow {
        value: None,
        ttl: TtlNow::None,
    };
    // (lock's end state or None for unchanged, reply, published, latch value written)
    let (end, reply, publishes, wrote): (Option<KeyNow>, Val, bool, Option<i64>) = match op {
        HashOp::Acquire => {
            let (ok, no) = match shape.replies {
                Some((ok, no)) => (analyse::lit_val(ok, t, 0), analyse::lit_val(no, t, 0)),
                None => (Val::Nil, Val::Pttl(1)),
            };
            match c.lock {
                MISSING => (hash(Val::Num(1)), ok, false, None),
                ONCE => (hash(Val::Num(2)), ok, false, None),
                MANY => (hash(Val::Many(1)), ok, false, None),
                _ => (None, no, false, None),
            }
        }
        HashOp::Renew => match c.lock {
            ONCE | MANY => {
                let mut k = start.clone();
                k.ttl = set_ttl.clone();
                (Some(k), Val::Num(1), false, None)
            }
            _ => (None, Val::Num(0), false, None),
        },
        HashOp::ForceUnlock => match c.lock {
            MISSING => (None, Val::Num(0), false, None),
            _ => (Some(gone.clone()), Val::Num(1), true, None),
        },
        HashOp::RenewAll | HashOp::FencedAcquire | HashOp::FencedAcquireToken => return false,
        HashOp::Unlock if c.latch => (None, Val::Other(3), false, None),
        HashOp::Unlock => {
            let [not_held, kept, released] = match shape.unlock_replies {
                Some(r) => r.map(|l| analyse::lit_val(l, t, 0)),
                None => [Val::Nil, Val::Num(0), Val::Num(1)],
            };
            // An unlock with its own replies publishes nothing.
            let quiet = shape.unlock_replies.is_some();
            match c.lock {
                ONCE => (Some(gone.clone()), released, !quiet, Some(1)),
                MANY => (hash(Val::Many(-1)), kept, false, Some(0)),
                _ => (None, not_held, false, None),
            }
        }
    };
    let lock_ok = r.end[0] == end.unwrap_or_else(|| start.clone());
    // The channel key is never touched as a key.
    let channel_ok = r.end.len() < 2
        || r.end[1]
            == KeyNow {
                value: None,
                ttl: TtlNow::None,
            };
    let latch_ok = match (latch, r.end.get(2)) {
        (_, None) => true,
        (Some(l), Some(now)) => match wrote {
            Some(v) => {
                let value_ok = matches!(&now.value, Some(Val::Num(n)) if *n == v)
                    || matches!(&now.value, Some(Val::Str(s)) if *s == v.to_string().into_bytes());
                value_ok
                    && now.ttl
                        == TtlNow::Set {
                            seconds: false,
                            v: Val::Arg(l.ttl_arg),
                        }
            }
            None if c.latch => {
                *now == KeyNow {
                    value: Some(Val::Other(3)),
                    ttl: TtlNow::Orig,
                }
            }
            None => now.value.is_none(),
        },
        (None, Some(_)) => false,
    };
    let published = r.calls.iter().any(|(cmd, _)| cmd == b"publish");
    let publish_ok = published == publishes && (!publishes || publish.is_some());
    lock_ok && channel_ok && latch_ok && publish_ok && r.reply == reply
}
