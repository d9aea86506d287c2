//! Redisson's read–write lock (`RReadWriteLock`) and fair lock (`RFairLock`) as Redlock quorum
//! operations.
//!
//! Unlike the plain hash lock ([`super::hashlock`]), whose scripts the proxy replaces with its
//! own, these run **as the client sent them** on every master (an acquisition's inside a
//! wrapper that also reports whether the caller held the lock before, see `wrap`, so that a
//! roll-back knows a creation from a re-entry): each is atomic there, and the
//! keys they build (a read hold's timeout key `KEYS[2] .. ':' .. n`, a fair waiter's channel
//! `KEYS[4] .. ':' .. id`) are named after the lock, so they live where the lock lives. Every
//! master therefore keeps exactly the state one Redis would keep; with all masters up and the
//! operations on one lock taken in turn (see `keylock`), every master sees the same scripts in
//! the same order and answers alike. The proxy's part is the Redlock decision on the replies:
//!
//! - **Acquisitions** (read, write, fair) are granted when a quorum took the lock (the script's
//!   nil) within the validity of the TTL (`ttl − elapsed − drift`), and answer nil. Otherwise
//!   they answer what a refusing quorum says one Redis would: the quorum-th largest PTTL among
//!   the masters that refused (for the fair lock's queue wait, the shortest, see
//!   `fair_wait_hint`), `1` for the fair lock's `tryLock()` without a wait; and the partial
//!   grant is rolled back on the masters that said yes: one hold of the caller's field less, its
//!   read-hold timeout key deleted, the lock deleted when no holder is left. A master whose answer never came (it may have granted late) is rolled
//!   back too, unless some master said the caller held the lock before (a re-entry: taking a
//!   hold it relies on is worse than a stale one, which expires with its TTL). After a fair grant
//!   the caller also leaves the queue of every master that refused it, so it does not stand
//!   first there for its whole wait.
//! - **Unlocks** answer 0 while a quorum still hold the lock (one hold less), 1 when it is gone
//!   from a majority, nil when the caller held it nowhere; each master's unlock latch answers a
//!   retried unlock there, as on one Redis.
//! - **Forced unlocks** answer 1 when a quorum deleted the lock.
//! - **The read-lock watchdog** (the many-lock `ReadLockTask` of Redisson 3.44 and later, and
//!   the single-lock renewal before it) answers, per lock, 1 when a quorum renewed it within the
//!   validity of the new TTL, else 0.
//! - **Leaving the fair queue** (`acquireFailed`) answers nil once a quorum did it.
//! - **`isLocked()`** of the read lock (a script that only reads) answers 1 when a quorum say 1.
//!
//! Why one holder: see docs/design.md ("Read–write and fair locks"). TTLs are capped by
//! `max_ttl_ms` like every lock's.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;

use super::action::Action;
use crate::counters::Counters;
use crate::error::Error;
use crate::keylock::Held;
use crate::lua::redisson::{RedissonOp, RedissonScript};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, ask, ask_timed, validity};
use crate::wire::master::{command, eval};
use crate::wire::reply::Reply;
use crate::wire::resp::parse_int;

/// Undoes one hold of the caller's field `ARGV[1]` in the lock `KEYS[1]` (a refused
/// acquisition's partial grant): one count less; at zero the field goes, with the read hold's
/// timeout key (`KEYS[2] .. ':' .. n`, when given) and the lock itself once no holder is left
/// (only the `mode` field, or nothing). Answers 0 not held, 1 one less, 2 the field gone.
const UNDO: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end \
    local n = redis.call('hincrby', KEYS[1], ARGV[1], -1) \
    if #KEYS > 1 then redis.call('del', KEYS[2] .. ':' .. (n + 1)) end \
    if n > 0 then return 1 end \
    redis.call('hdel', KEYS[1], ARGV[1]) \
    local left = redis.call('hlen', KEYS[1]) \
    if left == 0 or (left == 1 and redis.call('hexists', KEYS[1], 'mode') == 1) then \
      redis.call('del', KEYS[1]) \
    end \
    return 2";

/// Takes the caller `ARGV[1]` out of a fair lock's queue `KEYS[1]` and timeout set `KEYS[2]`
/// (where a master refused a grant that a quorum gave). Answers 1.
const UNQUEUE: &str = "redis.call('lrem', KEYS[1], 0, ARGV[1]) \
    redis.call('zrem', KEYS[2], ARGV[1]) return 1";

/// A read–write or fair lock operation bound to one call, ready to run.
#[derive(Debug, Clone)]
pub struct RwLockOp {
    /// What it does.
    pub op: RedissonOp,
    /// The client's script as it runs on each master: `EVAL body numkeys keys... args...`.
    pub request: Bytes,
    /// The call's keys (taken in turn).
    pub keys: Vec<Bytes>,
    /// The caller's field (acquisitions, for the roll-back).
    pub field: Bytes,
    /// The TTL in ms (acquisitions and renewals), 0 otherwise.
    pub ttl_ms: i64,
    /// The client's script, where the masters run it wrapped (acquisitions): an error it
    /// raises then names the wrapper's SHA (see [`as_clients`]).
    pub wrapped: Option<Bytes>,
}

/// Binds a recognised script to one call. `None` when the call does not fit its layout (it then
/// runs as written under the unknown-script policy). A publish command named by an argument
/// must be `publish` or `spublish`: the client's script runs on the masters as it is, and the
/// proxy runs no command it did not see.
pub fn bind(
    script: &RedissonScript,
    body: &Bytes,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Option<Result<RwLockOp, Reply>> {
    if keys.len() < script.keys
        || (script.op == RedissonOp::RwRenew && !keys.len().is_multiple_of(2))
    {
        return None;
    }
    let arg = |j: usize| argv.get(j.checked_sub(1)?);
    if script.publish_arg > 0 {
        let c = arg(script.publish_arg)?;
        if !c.eq_ignore_ascii_case(b"publish") && !c.eq_ignore_ascii_case(b"spublish") {
            return Some(Err(Reply::from(Error::PublishArg(script.publish_arg))));
        }
    }
    let field = match script.field_arg {
        0 => Bytes::new(),
        j => arg(j)?.clone(),
    };
    let ttl_ms = match script.ttl_arg {
        0 => 0,
        j => match parse_int(arg(j)?) {
            Some(ms) => ms,
            None => return Some(Err(Reply::from(Error::NotAnInteger))),
        },
    };
    let acquires = matches!(
        script.op,
        RedissonOp::ReadAcquire
            | RedissonOp::WriteAcquire
            | RedissonOp::FairAcquire
            | RedissonOp::FairTryAcquire
    );
    let client = acquires.then(|| body.clone());
    let wrapped;
    let body: &[u8] = if acquires {
        wrapped = wrap(body, script.field_arg)?;
        &wrapped
    } else {
        body
    };
    let n = itoa::Buffer::new().format(keys.len()).to_owned();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + argv.len());
    parts.extend([b"EVAL".as_slice(), body, n.as_bytes()]);
    parts.extend(keys.iter().map(|k| k.as_ref()));
    parts.extend(argv.iter().map(|a| a.as_ref()));
    Some(Ok(RwLockOp {
        op: script.op,
        request: command(&parts),
        keys: keys.to_vec(),
        field,
        ttl_ms,
        wrapped: client,
    }))
}

/// An acquisition's script as the masters run it: the client's script unchanged inside a
/// function, and before it whether the caller's field `ARGV[field]` was in the lock. A grant
/// (the script's nil) answers `{1}` when the caller held the lock before (a re-entry), `{0}`
/// when not; any other answer comes back as `{2, answer}`, so that no answer of the script's
/// own can pass for a grant. (An error raised by a command still ends the script with that
/// error, as on one Redis.) `None` for a script that must start the text (a `#!` line), which
/// cannot be wrapped.
fn wrap(body: &[u8], field_arg: usize) -> Option<Vec<u8>> {
    if body.starts_with(b"#!") || field_arg == 0 {
        return None;
    }
    let f = itoa::Buffer::new().format(field_arg).to_owned();
    let mut w = Vec::with_capacity(body.len() + 200);
    w.extend_from_slice(b"local held_before = redis.call('hexists', KEYS[1], ARGV[");
    w.extend_from_slice(f.as_bytes());
    w.extend_from_slice(b"]) local reply = (function()\n");
    w.extend_from_slice(body);
    w.extend_from_slice(
        b"\nend)() if reply == nil then return {held_before} end return {2, reply}",
    );
    Some(w)
}

/// Runs a read–write or fair lock operation as a quorum operation.
pub fn run(proxy: &Arc<Proxy>, op: RwLockOp) -> Action {
    use RedissonOp::*;
    let max = proxy.config().max_ttl_ms;
    if matches!(
        op.op,
        ReadAcquire | WriteAcquire | FairAcquire | FairTryAcquire | RwRenew | RwRenewOne
    ) {
        if op.ttl_ms <= 0 {
            return Reply::from(Error::InvalidLockScriptTtl).into();
        }
        if op.ttl_ms as u64 > max {
            return Reply::from(Error::TtlTooLong {
                ttl: op.ttl_ms,
                max,
            })
            .into();
        }
    }
    let keys = op.keys.clone();
    super::action::in_turn_held(proxy, &keys, move |proxy, held| async move {
        match op.op {
            ReadAcquire | WriteAcquire | FairAcquire | FairTryAcquire => {
                acquire(proxy, op, held).await
            }
            _ => {
                let reply = settle(&proxy, &op).await;
                drop(held);
                reply
            }
        }
    })
}

/// A master granted the acquisition (the wrapped script's `{held_before}`).
fn granted(r: &Reply) -> bool {
    matches!(r, Reply::Array(v) if matches!(v.as_slice(), [Reply::Integer(0 | 1)]))
}

/// A master granted it as a re-entry: the caller held the lock there before.
fn reentered(r: &Reply) -> bool {
    *r == Reply::Array(vec![Reply::Integer(1)])
}

/// What a master that refused answered (the wrapped script's `{2, answer}`).
fn refusal(r: &Reply) -> Option<&Reply> {
    match r {
        Reply::Array(v) => match v.as_slice() {
            [Reply::Integer(2), answer] => Some(answer),
            _ => None,
        },
        _ => None,
    }
}

/// The waits the refusing masters answered.
fn waits(ballots: &Ballots) -> impl Iterator<Item = i64> + '_ {
    ballots
        .replies
        .iter()
        .flatten()
        .filter_map(|r| match refusal(r) {
            Some(Reply::Integer(t)) => Some(*t),
            _ => None,
        })
}

/// The error a quorum of masters answered alike: raised by the script (a key of another type:
/// `WRONGTYPE`), or returned by it (`redis.error_reply`).
/// An error a wrapped script raised names the wrapper's SHA after ` script: `, which the client
/// never sent: it is answered without that origin, as the proxy answers the errors of every
/// script it runs in its own form (any other error is passed on as it is).
fn as_clients(e: Reply, wrapped: Option<&Bytes>) -> Reply {
    match wrapped {
        Some(_) => e.from_our_script(),
        None => e,
    }
}

fn agreed_error(ballots: &Ballots) -> Option<Reply> {
    if let Some(e) = ballots.majority_error() {
        return Some(e.clone());
    }
    let (e, _) = ballots.tally_by(|r| refusal(r).filter(|a| a.is_error()))?;
    e.cloned()
}

async fn acquire(proxy: Arc<Proxy>, op: RwLockOp, held: Held) -> Reply {
    let start = Instant::now();
    let deadline = start + proxy.config().node_timeout();
    // One member set for the whole acquisition: its vote and its roll-back or unqueueing.
    let masters = proxy.masters();
    let mut vote = ask_timed(&masters, Request::Same(op.request.clone()), 1, deadline);
    let ballots = vote.decide_by(granted).await.clone();
    let yes = ballots.count(granted);
    let min = Duration::from_millis(proxy.config().min_validity_ms);
    let valid = validity(
        Duration::from_millis(op.ttl_ms as u64),
        start.elapsed(),
        proxy.config().drift_factor,
    )
    .is_some_and(|v| v > min);
    if ballots.agree(granted) && valid {
        Counters::bump(&proxy.counters().grants);
        if op.op == RedissonOp::FairAcquire {
            // The caller was queued where a master refused it: it leaves those queues once
            // they have answered, still in the lock's turn.
            tokio::spawn(async move {
                let ballots = vote.finish().await;
                unqueue(&masters, &ballots, &op);
                drop(held);
            });
        } else {
            drop(held);
        }
        return Reply::Nil;
    }
    debug!(
        yes,
        quorum = ballots.quorum.size(),
        "read-write or fair lock refused"
    );
    Counters::bump(&proxy.counters().denials);
    let refused = match agreed_error(&ballots) {
        Some(e) => as_clients(e, op.wrapped.as_ref()),
        None if op.op == RedissonOp::FairTryAcquire => Reply::Integer(1),
        None if op.op == RedissonOp::FairAcquire => Reply::Integer(fair_wait_hint(&ballots)),
        None => Reply::Integer(wait_hint(&ballots)),
    };
    // The client has its answer; the roll-back waits for every answer due (until the node
    // deadline), so it knows where the grant landed, and the lock stays in turn until it is
    // queued.
    tokio::spawn(async move {
        let ballots = vote.finish().await;
        undo(&proxy, &masters, &ballots, &op);
        drop(held);
    });
    refused
}

/// The refusal's wait: the quorum-th largest among the masters that refused with a wait; when
/// fewer than a quorum did (a split, masters down, a grant too late to be valid), a short
/// random wait so that competing callers spread out.
fn wait_hint(ballots: &Ballots) -> i64 {
    let wait = |r: &Reply| match refusal(r) {
        Some(Reply::Integer(t)) => Some(*t),
        _ => None,
    };
    match ballots.quorum_th(|_, r| wait(r), |t| *t) {
        Some(t) if t > 0 => t,
        _ => rand::random_range(5..=50),
    }
}

/// A refused fair acquisition's wait: the shortest any refusing master answered, so that a
/// waiter that is first somewhere (answered 0 there) retries at once. With every master keeping
/// the same queue they all answer alike; after a master lost its queue, the masters may each
/// have another waiter first, and prompt retries are what lets the partial grants (each one
/// takes its waiter out of that master's queue) bring a quorum back to one first waiter.
fn fair_wait_hint(ballots: &Ballots) -> i64 {
    match waits(ballots).filter(|t| *t > 0).min() {
        Some(t) if waits(ballots).all(|o| o > 0) => t,
        _ => rand::random_range(5..=50),
    }
}

/// Rolls a refused acquisition back where a master granted it, and where its answer never came
/// but the script may have run, unless some master said the caller held the lock before (then
/// the attempt may have been a re-entry there too, and one hold less could take a hold the
/// caller relies on; a stale hold expires with its TTL).
fn undo(proxy: &Proxy, masters: &Masters, ballots: &Ballots, op: &RwLockOp) {
    let reentry = ballots.count(reentered) > 0;
    let mut keys = vec![&op.keys[0]];
    if op.op == RedissonOp::ReadAcquire {
        keys.push(&op.keys[1]);
    }
    let req = eval(UNDO, &keys, &[&op.field]);
    let mut sent = false;
    for (i, m) in masters.iter().enumerate() {
        let due = match &ballots.replies[i] {
            Some(r) => granted(r),
            None => ballots.may_have_run(i) && !reentry,
        };
        if due {
            m.send(req.clone(), 1, None);
            sent = true;
        }
    }
    if sent {
        Counters::bump(&proxy.counters().rollbacks);
    }
}

/// After a fair grant, the caller leaves the queue of every master that did not grant it.
fn unqueue(masters: &Masters, ballots: &Ballots, op: &RwLockOp) {
    let req = eval(UNQUEUE, &[&op.keys[1], &op.keys[2]], &[&op.field]);
    for (i, m) in masters.iter().enumerate() {
        if !ballots.replies[i].as_ref().is_some_and(granted) {
            m.send(req.clone(), 1, None);
        }
    }
}

/// Unlocks, forced unlocks, renewals and leaving the queue: the script on every master, the
/// answer by the quorum.
async fn settle(proxy: &Proxy, op: &RwLockOp) -> Reply {
    let start = Instant::now();
    let deadline = start + proxy.config().node_timeout();
    let ballots = ask(
        &proxy.masters(),
        Request::Same(op.request.clone()),
        1,
        deadline,
    )
    .outcome()
    .await;
    if let Some(e) = ballots.majority_error() {
        return e.clone();
    }
    match op.op {
        RedissonOp::RwUnlock | RedissonOp::FairUnlock => {
            let reply = unlocked(&ballots);
            if reply == Reply::Integer(1) {
                Counters::bump(&proxy.counters().releases);
            }
            reply
        }
        RedissonOp::RwForceUnlock | RedissonOp::FairForceUnlock => {
            if !ballots.agree(|r| matches!(r, Reply::Integer(0 | 1))) {
                return Reply::from(Error::NoQuorumUnlock);
            }
            Reply::Integer(i64::from(ballots.agree(|r| *r == Reply::Integer(1))))
        }
        RedissonOp::RwRenew => {
            let valid = validity(
                Duration::from_millis(op.ttl_ms as u64),
                start.elapsed(),
                proxy.config().drift_factor,
            )
            .is_some_and(|v| v > Duration::from_millis(proxy.config().min_validity_ms));
            renewed(&ballots, op.keys.len() / 2, valid)
        }
        RedissonOp::RwRenewOne => {
            let valid = validity(
                Duration::from_millis(op.ttl_ms as u64),
                start.elapsed(),
                proxy.config().drift_factor,
            )
            .is_some_and(|v| v > Duration::from_millis(proxy.config().min_validity_ms));
            Reply::Integer(i64::from(
                valid && ballots.agree(|r| *r == Reply::Integer(1)),
            ))
        }
        RedissonOp::RwIsLocked => {
            Reply::Integer(i64::from(ballots.agree(|r| *r == Reply::Integer(1))))
        }
        _ => {
            if !ballots.agree(|_| true) {
                Reply::from(Error::NoQuorumUnlock)
            } else {
                Reply::Nil
            }
        }
    }
}

/// The unlock's answer from the masters' replies (each what that master's unlock answered:
/// its latch's value for a retry): 0 while a quorum still hold the lock, 1 when it is gone from
/// a majority after this unlock held it somewhere, nil when the caller held it nowhere.
fn unlocked(ballots: &Ballots) -> Reply {
    let said = |r: Reply| ballots.count(|o| *o == r);
    let (kept, gone) = (said(Reply::Integer(0)), said(Reply::Integer(1)));
    if !ballots.agree(|o| matches!(o, Reply::Integer(0 | 1) | Reply::Nil)) {
        Reply::from(Error::NoQuorumUnlock)
    } else if ballots.agree(|o| *o == Reply::Integer(0)) {
        Reply::Integer(0)
    } else if kept + gone > 0 {
        Reply::Integer(1)
    } else {
        Reply::Nil
    }
}

/// The read-lock watchdog's answer: per lock, 1 when a quorum renewed it within validity.
fn renewed(ballots: &Ballots, locks: usize, valid: bool) -> Reply {
    Reply::Array(
        (0..locks)
            .map(|i| {
                let yes = ballots.agree(|r| match r {
                    Reply::Array(codes) if codes.len() == locks => codes[i] == Reply::Integer(1),
                    _ => false,
                });
                Reply::Integer(i64::from(valid && yes))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::scripted::{ballots, codes};

    #[test]
    fn a_grant_says_whether_the_caller_held_the_lock_before() {
        let said = |h| Reply::Array(vec![Reply::Integer(h)]);
        assert!(granted(&said(0)) && granted(&said(1)));
        assert!(reentered(&said(1)) && !reentered(&said(0)));
        // The script's own answers come back as {2, answer}: even a `{1}` of its own is none.
        let own = Reply::Array(vec![Reply::Integer(2), said(1)]);
        for other in [
            Reply::Nil,
            Reply::Integer(900),
            Reply::Array(vec![]),
            own.clone(),
        ] {
            assert!(!granted(&other), "{other:?}");
        }
        assert_eq!(refusal(&own), Some(&said(1)));
        let w = wrap(b"return nil", 2).unwrap();
        assert_eq!(
            w,
            b"local held_before = redis.call('hexists', KEYS[1], ARGV[2]) local reply = \
              (function()\nreturn nil\nend)() if reply == nil then return {held_before} end \
              return {2, reply}"
                .to_vec()
        );
        assert!(wrap(b"#!lua flags=no-writes\nreturn 1", 2).is_none());
    }

    #[test]
    fn unlock_follows_the_majority() {
        let i = |n| Some(Reply::Integer(n));
        assert_eq!(
            unlocked(&ballots(vec![i(0), i(0), i(1)])),
            Reply::Integer(0)
        );
        assert_eq!(
            unlocked(&ballots(vec![i(1), i(1), None])),
            Reply::Integer(1)
        );
        assert_eq!(
            unlocked(&ballots(vec![i(0), i(1), Some(Reply::Nil)])),
            Reply::Integer(1)
        );
        assert_eq!(
            unlocked(&ballots(vec![Some(Reply::Nil), Some(Reply::Nil), i(1)])),
            Reply::Integer(1)
        );
        assert_eq!(
            unlocked(&ballots(vec![Some(Reply::Nil), Some(Reply::Nil), None])),
            Reply::Nil
        );
        assert!(matches!(
            unlocked(&ballots(vec![i(1), None, None])),
            Reply::Error(_)
        ));
    }

    #[test]
    fn a_refusal_answers_how_long_a_majority_still_hold_it() {
        let i = |n| Some(Reply::Array(vec![Reply::Integer(2), Reply::Integer(n)]));
        assert_eq!(
            wait_hint(&ballots(vec![i(9000), i(7000), Some(Reply::Nil)])),
            7000
        );
        let w = wait_hint(&ballots(vec![i(9000), Some(Reply::Nil), None]));
        assert!((5..=50).contains(&w));
    }

    #[test]
    fn an_error_a_quorum_agree_on_is_the_answer() {
        let own = |r: Reply| Some(Reply::Array(vec![Reply::Integer(2), r]));
        let e = Reply::static_error("ERR custom");
        let b = ballots(vec![own(e.clone()), own(e.clone()), own(Reply::Integer(5))]);
        assert_eq!(agreed_error(&b), Some(e.clone()));
        let b = ballots(vec![own(e.clone()), own(Reply::Integer(5)), None]);
        assert_eq!(agreed_error(&b), None);
        let raised = Reply::static_error("WRONGTYPE x");
        let b = ballots(vec![Some(raised.clone()), Some(raised.clone()), None]);
        assert_eq!(agreed_error(&b), Some(raised));
    }

    #[test]
    fn a_fair_refusal_answers_the_shortest_wait() {
        let i = |n| Some(Reply::Array(vec![Reply::Integer(2), Reply::Integer(n)]));
        assert_eq!(
            fair_wait_hint(&ballots(vec![i(9000), i(7000), i(12000)])),
            7000
        );
        // First somewhere (0 there): retry soon.
        let w = fair_wait_hint(&ballots(vec![i(9000), i(0), Some(Reply::Nil)]));
        assert!((5..=50).contains(&w));
    }

    #[test]
    fn renewal_counts_each_lock_by_quorum_and_validity() {
        let b = ballots(vec![codes(&[1, 0]), codes(&[1, 1]), codes(&[0, 1])]);
        assert_eq!(
            renewed(&b, 2, true),
            Reply::Array(vec![Reply::Integer(1), Reply::Integer(1)])
        );
        assert_eq!(
            renewed(&b, 2, false),
            Reply::Array(vec![Reply::Integer(0), Reply::Integer(0)])
        );
        let b = ballots(vec![codes(&[1]), codes(&[0]), None]);
        assert_eq!(renewed(&b, 1, true), Reply::Array(vec![Reply::Integer(0)]));
    }

    #[test]
    fn binding_checks_the_publish_command_and_the_ttl() {
        let b = |v: &[&str]| -> Vec<Bytes> {
            v.iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        };
        let body = Bytes::from_static(b"return 1");
        let unlock = RedissonScript {
            op: RedissonOp::RwUnlock,
            field_arg: 3,
            ttl_arg: 0,
            publish_arg: 4,
            keys: 3,
        };
        let keys = b(&["l", "ch", "latch"]);
        let op = bind(
            &unlock,
            &body,
            &keys,
            &b(&["0", "30000", "f", "PUBLISH", "5"]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(op.field.as_ref(), b"f");
        assert!(matches!(
            bind(&unlock, &body, &keys, &b(&["0", "30000", "f", "del", "5"])),
            Some(Err(_))
        ));
        assert!(
            bind(
                &unlock,
                &body,
                &keys[..2],
                &b(&["0", "1", "f", "publish", "5"])
            )
            .is_none()
        );
        let write = RedissonScript {
            op: RedissonOp::WriteAcquire,
            field_arg: 2,
            ttl_arg: 1,
            publish_arg: 0,
            keys: 1,
        };
        assert_eq!(
            bind(&write, &body, &b(&["l"]), &b(&["soon", "f"])).map(|r| r.err()),
            Some(Some(Reply::from(Error::NotAnInteger)))
        );
    }
}
