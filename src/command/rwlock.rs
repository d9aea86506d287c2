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
//!
//! Each is an [`Operation`] of the one quorum runner ([`super::runner`]): the client's script
//! is what each master is sent, the rules above decide, and a refusal's roll-back (or a fair
//! grant's leaving the other queues) is a request per master, planned without the network.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tracing::debug;

use super::action::{Action, Later};
use super::hashlock::{forced, undo_once_answered};
use super::runner::{Clock, Operation, Voted, send_each, valid};
use crate::config::Config;
use crate::counters::Counters;
use crate::error::Error;
use crate::keylock::Held;
use crate::lockop::{Holder, Holds, Lock, Mode, Verb};
use crate::lua::redisson::{RedissonOp, RedissonScript};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote};
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

/// What the masters' replies decided for a [`RwLockOp`].
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// An acquisition: a quorum took the lock within the validity of its TTL, or not.
    Acquired(bool),
    /// An unlock's answer, and whether it released the lock (counted).
    Unlocked(Reply, bool),
    /// The answer of any other operation.
    Answered(Reply),
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

/// Runs a read–write or fair lock operation as a quorum operation (see [`super::runner`]),
/// once its TTL is within the cap.
pub fn start(proxy: &Arc<Proxy>, op: RwLockOp) -> Action {
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
    super::runner::run(proxy, op)
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

impl Operation for RwLockOp {
    type Decision = Decision;

    /// The lock's own key first; a read lock (and its watchdog, and `isLocked()`) is shared.
    fn lock(&self) -> Lock<'_> {
        use RedissonOp::*;
        let holder = match self.op {
            RwForceUnlock | FairForceUnlock | RwIsLocked => Holder::Anyone,
            _ => Holder::Field(&self.field),
        };
        let (mode, admits) = match self.op {
            ReadAcquire | RwRenew | RwRenewOne | RwIsLocked => (Mode::Shared, u32::MAX),
            _ => (Mode::Exclusive, 1),
        };
        Lock {
            keys: &self.keys,
            holder,
            mode,
            holds: Holds::Counted,
            admits,
            ttl_ms: self.ttl_ms,
        }
    }

    fn verb(&self) -> Verb {
        self.op.verb()
    }

    fn request(&self, _: &Masters, _: &Config) -> Request {
        Request::Same(self.request.clone())
    }

    fn timed(&self) -> bool {
        self.verb() == Verb::Acquire
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        match self.verb() {
            Verb::Acquire => vote.poll_decide_yes(cx, granted),
            _ => vote.poll_outcome(cx),
        }
    }

    fn decide(&self, ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Decision {
        use RedissonOp::*;
        let in_time = || valid(self.ttl_ms, elapsed, cfg);
        if self.verb() == Verb::Acquire {
            return Decision::Acquired(ballots.agree(granted) && in_time());
        }
        if let Some(e) = ballots.majority_error() {
            return Decision::Answered(e.clone());
        }
        let ones = || ballots.agree(|r| *r == Reply::Integer(1));
        Decision::Answered(match self.op {
            RwUnlock | FairUnlock => {
                let reply = unlocked(ballots);
                let released = reply == Reply::Integer(1);
                return Decision::Unlocked(reply, released);
            }
            RwForceUnlock | FairForceUnlock => forced(ballots),
            RwRenew => renewed(ballots, self.keys.len() / 2, in_time()),
            RwRenewOne => Reply::Integer(i64::from(in_time() && ones())),
            RwIsLocked => Reply::Integer(i64::from(ones())),
            _ if !ballots.agree(|_| true) => Reply::from(Error::NoQuorumUnlock),
            _ => Reply::Nil,
        })
    }

    /// Rolls a refused acquisition back where a master granted it, and where its answer never
    /// came but the script may have run, unless some master said the caller held the lock
    /// before (then the attempt may have been a re-entry there too, and one hold less could
    /// take a hold the caller relies on; a stale hold expires with its TTL).
    fn undo(&self, ballots: &Ballots, _: Option<&Ballots>) -> Vec<Option<Bytes>> {
        let reentry = ballots.count(reentered) > 0;
        let mut keys = vec![&self.keys[0]];
        if self.op == RedissonOp::ReadAcquire {
            keys.push(&self.keys[1]);
        }
        let req = eval(UNDO, &keys, &[&self.field]);
        let due = |i: usize| match &ballots.replies[i] {
            Some(r) => granted(r),
            None => ballots.may_have_run(i) && !reentry,
        };
        (0..ballots.replies.len())
            .map(|i| due(i).then(|| req.clone()))
            .collect()
    }

    fn answer(
        &self,
        proxy: &Proxy,
        decision: Decision,
        _: &mut Vote,
        _: &Clock,
    ) -> Result<Reply, Decision> {
        match decision {
            // A fair grant also leaves the other queues once every answer is in (see `rest`).
            Decision::Acquired(true) if self.op != RedissonOp::FairAcquire => {
                Counters::bump(&proxy.counters().grants);
                Ok(Reply::Nil)
            }
            Decision::Acquired(_) => Err(decision),
            Decision::Unlocked(reply, released) => {
                if released {
                    Counters::bump(&proxy.counters().releases);
                }
                Ok(reply)
            }
            Decision::Answered(reply) => Ok(reply),
        }
    }

    /// A fair grant's leaving the queues where it was refused, a refusal's roll-back.
    fn rest(self, proxy: Arc<Proxy>, decision: Decision, voted: Voted) -> Later {
        let Voted { vote, held, .. } = voted;
        let reply = match decision {
            Decision::Acquired(true) => {
                Counters::bump(&proxy.counters().grants);
                // The caller was queued where a master refused it: it leaves those queues once
                // they have answered, still in the lock's turn.
                tokio::spawn(async move {
                    let masters = vote.masters().clone();
                    let ballots = vote.finish().await;
                    send_each(&masters, self.unqueue(&ballots));
                    drop(held);
                });
                Reply::Nil
            }
            Decision::Acquired(false) => self.refuse(proxy, vote, held),
            // Answered by the first round (see `answer`).
            Decision::Unlocked(reply, _) | Decision::Answered(reply) => reply,
        };
        Box::pin(std::future::ready(reply))
    }
}

impl RwLockOp {
    /// A refused acquisition, counted and answered: a refusing quorum's error, or what one
    /// Redis would answer (see [`wait_hint`], [`fair_wait_hint`]; `1` for the fair lock's
    /// `tryLock()` without a wait). The client has its answer; the roll-back waits for every
    /// answer due (until the node deadline), so it knows where the grant landed, and the lock
    /// stays in turn until it is queued.
    fn refuse(self, proxy: Arc<Proxy>, vote: Vote, held: Held) -> Reply {
        let ballots = vote.ballots();
        debug!(
            yes = ballots.count(granted),
            quorum = ballots.quorum.size(),
            "read-write or fair lock refused"
        );
        Counters::bump(&proxy.counters().denials);
        let refused = match agreed_error(ballots) {
            Some(e) => as_clients(e, self.wrapped.as_ref()),
            None if self.op == RedissonOp::FairTryAcquire => Reply::Integer(1),
            None if self.op == RedissonOp::FairAcquire => Reply::Integer(fair_wait_hint(ballots)),
            None => Reply::Integer(wait_hint(ballots)),
        };
        undo_once_answered(proxy, self, vote, held);
        refused
    }

    /// After a fair grant, the caller leaves the queue of every master that did not grant it:
    /// a request per master (not counted as a roll-back: nothing of the grant is undone).
    fn unqueue(&self, ballots: &Ballots) -> Vec<Option<Bytes>> {
        let req = eval(UNQUEUE, &[&self.keys[1], &self.keys[2]], &[&self.field]);
        ballots
            .replies
            .iter()
            .map(|r| (!r.as_ref().is_some_and(granted)).then(|| req.clone()))
            .collect()
    }
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

    fn rw(op: RedissonOp, keys: &[&'static str]) -> RwLockOp {
        RwLockOp {
            op,
            request: Bytes::new(),
            keys: keys
                .iter()
                .map(|k| Bytes::from_static(k.as_bytes()))
                .collect(),
            field: Bytes::from_static(b"uuid:1"),
            ttl_ms: 10_000,
            wrapped: None,
        }
    }

    /// A master's grant (`{0}`, or `{1}` for a re-entry) and a refusal with a wait.
    fn said(h: i64) -> Option<Reply> {
        Some(Reply::Array(vec![Reply::Integer(h)]))
    }

    fn waited(t: i64) -> Option<Reply> {
        Some(Reply::Array(vec![Reply::Integer(2), Reply::Integer(t)]))
    }

    #[test]
    fn a_refused_acquisition_is_rolled_back_where_it_may_have_been_granted() {
        use crate::backend::BackendError;
        let write = rw(RedissonOp::WriteAcquire, &["l"]);
        let undo = Some(eval(UNDO, &write.keys[..1], &[&write.field]));
        // Granted on the first, refused on the second; the third has not answered and may
        // have granted.
        let b = ballots(vec![said(0), waited(900), None]);
        assert_eq!(write.undo(&b, None), vec![undo.clone(), None, undo.clone()]);
        // A master that was down never got the attempt.
        let mut b = ballots(vec![said(0), waited(900), None]);
        b.failed[2] = Some(BackendError::Down);
        assert_eq!(write.undo(&b, None), vec![undo.clone(), None, None]);
        // A re-entry somewhere: a master without an answer keeps what it may hold.
        let b = ballots(vec![said(1), waited(900), None]);
        assert_eq!(write.undo(&b, None), vec![undo, None, None]);
        // A read hold's timeout key goes with it.
        let read = rw(RedissonOp::ReadAcquire, &["l", "{l}:timeout"]);
        let undo = Some(eval(UNDO, &read.keys, &[&read.field]));
        let b = ballots(vec![said(0), Some(Reply::Nil), waited(900)]);
        assert_eq!(read.undo(&b, None), vec![undo, None, None]);
    }

    #[test]
    fn a_fair_grant_leaves_the_queues_where_it_was_not_granted() {
        let fair = rw(RedissonOp::FairAcquire, &["l", "queue", "timeouts", "ch"]);
        let unqueue = Some(eval(UNQUEUE, &fair.keys[1..3], &[&fair.field]));
        let b = ballots(vec![said(0), said(1), waited(900), None]);
        assert_eq!(fair.unqueue(&b), vec![None, None, unqueue.clone(), unqueue]);
    }

    #[test]
    fn decisions_follow_the_quorum_within_validity() {
        let cfg = Config::default();
        let (fast, late) = (Duration::from_millis(10), Duration::from_millis(9_950));
        let write = rw(RedissonOp::WriteAcquire, &["l"]);
        let b = ballots(vec![said(0), said(1), waited(900)]);
        assert_eq!(write.decide(&b, fast, &cfg), Decision::Acquired(true));
        assert_eq!(write.decide(&b, late, &cfg), Decision::Acquired(false));
        let one = rw(RedissonOp::RwRenewOne, &["l", "{l}:timeout"]);
        let i = |n| Some(Reply::Integer(n));
        let b = ballots(vec![i(1), i(1), i(0)]);
        assert_eq!(
            one.decide(&b, fast, &cfg),
            Decision::Answered(Reply::Integer(1))
        );
        assert_eq!(
            one.decide(&b, late, &cfg),
            Decision::Answered(Reply::Integer(0))
        );
        let unlock = rw(RedissonOp::RwUnlock, &["l", "ch", "latch"]);
        assert_eq!(
            unlock.decide(&ballots(vec![i(1), i(1), None]), fast, &cfg),
            Decision::Unlocked(Reply::Integer(1), true)
        );
        let leave = rw(RedissonOp::FairDequeue, &["queue", "timeouts"]);
        assert_eq!(
            leave.decide(&ballots(vec![i(1), i(1), None]), fast, &cfg),
            Decision::Answered(Reply::Nil)
        );
        let wrong = Some(Reply::static_error("WRONGTYPE x"));
        assert_eq!(
            leave.decide(
                &ballots(vec![wrong.clone(), wrong.clone(), None]),
                fast,
                &cfg
            ),
            Decision::Answered(Reply::static_error("WRONGTYPE x"))
        );
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
