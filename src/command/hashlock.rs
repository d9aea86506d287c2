//! Re-entrant hash locks (Redisson's `RLock`, `RFencedLock`) as Redlock quorum operations.
//!
//! The lock is a hash in one key; its one field, the holder's name (`<uuid>:<threadId>`),
//! counts how often the holder took it (see [`HashOp`]). Each master runs the proxy's own
//! scripts below and reports what it did; the proxy decides by the majority rule:
//!
//! - **Acquire** is granted when a quorum created or re-entered the lock within its validity
//!   (`ttl − elapsed − drift`), and answers nil as Redisson expects. A refused attempt is undone
//!   where it wrote: a hash it created is deleted (only while it is still the caller's alone
//!   with one hold), a re-entry is counted back down. The refusal answers the time a majority
//!   still hold the lock: the quorum-th largest PTTL among the masters that found it taken.
//! - **FencedAcquire** (`RFencedLock`) also counts a token in `KEYS[2]` where it grants; the
//!   grant's token is the largest count among the granting masters and at least the proxy's
//!   clock in µs, written back to a quorum of them before the grant counts (see `mint`), so
//!   every later grant gets a larger token and a majority `GET` of the counter reads it. The
//!   counter keeps a TTL (the fencing retention, as [`fence`]'s counters do) instead of none.
//! - **Unlock** gives up one hold on every master. It answers 0 only while a quorum still hold
//!   the lock (their count was above one), 1 when the lock is gone from a majority (deleted here,
//!   with the release published once by each master that deleted it: the pub/sub hub hands it
//!   to subscribers once), and nil when the caller held it nowhere. With Redisson's unlock latch
//!   each master also keeps its answer under the latch key, and a retried unlock answers what a
//!   quorum kept.
//! - **Renew** (the watchdog) succeeds when a quorum still held the lock and set its TTL, within
//!   the validity of that TTL; the lock is then written back where it is missing, with the hold
//!   count a quorum agree on (quorum repair, see [`super::repair`]).
//! - **RenewAll** (the watchdog of Redisson 3.44 and later, many locks in one script) renews
//!   each key as `Renew` does, and answers one 1 or 0 per key.
//! - **ForceUnlock** deletes the lock everywhere, publishing where it existed: 1 when a quorum
//!   deleted it.
//!
//! TTLs are capped by `max_ttl_ms` like every lock's.
//!
//! Each is an [`Operation`] of the one quorum runner ([`super::runner`]): what each master is
//! sent, how the replies decide, what a refused acquisition undoes, and what the caller is
//! answered. A lease's renewal and its release on disconnect are two small operations of
//! their own (`LeaseRenewal`, `ReleaseHeld`).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;

use super::action::{Action, Later};
use super::fence;
use super::lock::{Answered, Renewal, agreed_error};
use super::runner::{Clock, Operation, Voted, take_back, valid};
use crate::config::Config;
use crate::counters::Counters;
use crate::error::Error;
use crate::keylock::{Held, KeyLocks, Ticket};
use crate::lockop::{HashOp, Holder, Holds, Lock, Mode, Verb};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote, ask};
use crate::wire::master::eval;
use crate::wire::reply::Reply;

/// Acquire on one master: `KEYS[1]` the lock (and `KEYS[2]` a fenced lock's token counter);
/// `ARGV[1]` TTL ms, `ARGV[2]` the caller's field, `ARGV[3]` the counter's retention ms.
/// Answers `{1}` created, `{2}` re-entered (with the counter's new value second when fenced),
/// or the lock's PTTL when another holds it.
const LOCK: &str = "local code \
    if redis.call('exists', KEYS[1]) == 0 then code = 1 \
    elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then code = 2 \
    else return redis.call('pttl', KEYS[1]) end \
    redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) \
    if #KEYS > 1 then \
      local t = redis.call('incr', KEYS[2]) redis.call('pexpire', KEYS[2], ARGV[3]) \
      return {code, t} \
    end \
    return {code}";

/// Raises a fenced lock's token counter `KEYS[1]` to the granted token `ARGV[1]` (kept as a
/// string: tokens are microseconds, beyond what Lua prints exactly), with retention `ARGV[2]`.
const RAISE: &str = "local c = tonumber(redis.call('get', KEYS[1]) or '0') or 0 \
    if c < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) \
    else redis.call('pexpire', KEYS[1], ARGV[2]) end \
    return 1";

/// Undoes a creation: deletes the lock while it is the caller's alone with one hold.
/// `ARGV[1]` the field.
const UNDO_CREATE: &str = "if redis.call('hget', KEYS[1], ARGV[1]) == '1' \
      and redis.call('hlen', KEYS[1]) == 1 then return redis.call('del', KEYS[1]) end \
    return 0";

/// Undoes a re-entry: one hold less, never below one. `ARGV[1]` the field.
const UNDO_REENTER: &str = "local n = tonumber(redis.call('hget', KEYS[1], ARGV[1])) \
    if n and n > 1 then return redis.call('hincrby', KEYS[1], ARGV[1], -1) end \
    return 0";

/// Unlock on one master: `KEYS` = lock, channel[, latch]; `ARGV` = field, TTL ms, publish
/// command, message, latch TTL ms. Answers `{3, latch}` when the latch of an earlier unlock is
/// there, `{0}` not held, `{1}` one hold less (TTL renewed), `{2}` deleted and published.
const UNLOCK: &str = "if #KEYS > 2 then \
      local v = redis.call('get', KEYS[3]) \
      if v then return {3, v} end \
    end \
    if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return {0} end \
    if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then \
      if ARGV[2] ~= '' then redis.call('pexpire', KEYS[1], ARGV[2]) end \
      if #KEYS > 2 then redis.call('set', KEYS[3], '0', 'px', ARGV[5]) end \
      return {1} \
    end \
    redis.call('del', KEYS[1]) \
    if ARGV[3] ~= '' then redis.call(ARGV[3], KEYS[2], ARGV[4]) end \
    if #KEYS > 2 then redis.call('set', KEYS[3], '1', 'px', ARGV[5]) end \
    return {2}";

/// Renew on one master: `KEYS` the locks; `ARGV[1]` TTL ms, `ARGV[i + 1]` the field of
/// `KEYS[i]`. Answers one code per key: the field's hold count (at least 1) where it was held
/// and renewed, 0 where the hash holds other fields only, -3 where the key is missing (a quorum
/// repair writes the lock back there, see [`super::repair`]).
const RENEW: &str = "local out = {} \
    for i, key in ipairs(KEYS) do \
      local n = redis.call('hget', key, ARGV[i + 1]) \
      if n then \
        redis.call('pexpire', key, ARGV[1]) \
        local c = tonumber(n) \
        if c == nil or c < 1 then c = 1 end \
        out[i] = c \
      elseif redis.call('exists', key) == 0 then out[i] = -3 \
      else out[i] = 0 end \
    end \
    return out";

/// Whether a master's code for one lock in [`RENEW`]'s answer says it renewed it (a hold
/// count, at least 1).
fn renewed_code(c: &Reply) -> bool {
    matches!(c, Reply::Integer(n) if *n >= 1)
}

/// Whether a master's one-lock [`RENEW`] answer says it renewed the lock.
fn renewed_one(r: &Reply) -> bool {
    matches!(r, Reply::Array(c) if c.len() == 1 && renewed_code(&c[0]))
}

/// How a one-lock [`RENEW`] answer reads for a quorum repair: `{n}` renewed to the TTL asked
/// for, `{-3}` missing.
const RENEW_READING: super::repair::Reading = super::repair::Reading {
    holds: |r, ttl| renewed_one(r).then_some(ttl),
    missing: |r| matches!(r, Reply::Array(c) if c.as_slice() == [Reply::Integer(-3)]),
};

/// After a granted renewal of the one hash lock of `op` (sent at `clock.start`), whose members
/// agree it counts `holds`: the lock written back to the trusted members that lack it, in the
/// key's turn (`held`).
fn repair_after(
    proxy: &Arc<Proxy>,
    op: &HashLockOp,
    holds: i64,
    vote: Vote,
    clock: Clock,
    held: Held,
) {
    let e = super::repair::Extended {
        key: op.key.clone(),
        copy: super::repair::LockCopy::Hash {
            field: op.field.clone(),
            holds,
        },
        ttl_ms: op.ttl_ms,
        vote,
        start: clock.start,
        reading: RENEW_READING,
    };
    super::repair::after(proxy, e, held);
}

/// The hold count a quorum of one-lock renewals agree on: what a quorum repair writes back
/// (none agreed: nothing is written).
fn agreed_holds(ballots: &Ballots) -> Option<i64> {
    let count = |r: &Reply| match r {
        Reply::Array(c) if renewed_one(r) => Some(c[0].clone()),
        _ => None,
    };
    match ballots.tally_by(count) {
        Some((Some(Reply::Integer(holds)), _)) => Some(holds),
        _ => None,
    }
}

/// A lease's release on one master: deletes the lock where the hash holds the holder's field
/// `ARGV[1]`, however many holds it counts. Answers 1 deleted, 0 not held.
const RELEASE_HELD: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then \
      return redis.call('del', KEYS[1]) \
    end \
    return 0";

/// ForceUnlock on one master: `KEYS` = lock, channel; `ARGV` = publish command, message.
/// Answers 1 deleted (and published), 0 missing.
const FORCE: &str = "if redis.call('del', KEYS[1]) == 1 then \
      redis.call(ARGV[1], KEYS[2], ARGV[2]) return 1 \
    end \
    return 0";

/// Where a release is published: the command (`PUBLISH` or `SPUBLISH`), channel and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// `PUBLISH` or `SPUBLISH`.
    pub command: Bytes,
    /// The channel.
    pub channel: Bytes,
    /// The message.
    pub message: Bytes,
}

/// A hash-lock operation bound to one call, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashLockOp {
    /// What to do.
    pub op: HashOp,
    /// The lock's key.
    pub key: Bytes,
    /// The caller's field (empty for `ForceUnlock`).
    pub field: Bytes,
    /// The TTL in ms (`Acquire`, `Unlock`, `Renew`).
    pub ttl_ms: i64,
    /// `Unlock` that leaves the lock's TTL as it is where a hold is left (a script that only
    /// counts the hold down): no `ttl_ms`.
    pub keeps_ttl: bool,
    /// Where the release is published (`Unlock`, `ForceUnlock`).
    pub publish: Option<Publication>,
    /// The unlock latch's key and TTL in ms.
    pub latch: Option<(Bytes, i64)>,
    /// Further locks and their fields, after `key` and `field` (`RenewAll`).
    pub also: Vec<(Bytes, Bytes)>,
    /// A fenced lock's token counter (`FencedAcquire`, `FencedAcquireToken`).
    pub counter: Option<Bytes>,
    /// `Acquire`: the script's own constants for a grant and a refusal, in place of nil and
    /// the lock's PTTL (see [`crate::lockop::HashScript::replies`]).
    pub replies: Option<(crate::lockop::Lit, crate::lockop::Lit)>,
    /// `Unlock` without a channel: the script's own constants for "not held", "still held"
    /// and "released" (see [`crate::lockop::HashScript::unlock_replies`]).
    pub unlock_replies: Option<[crate::lockop::Lit; 3]>,
}

/// Runs a hash-lock operation as a quorum operation (see [`super::runner`]), once its TTLs
/// are within the cap.
pub fn start(proxy: &Arc<Proxy>, op: HashLockOp) -> Action {
    let max = proxy.config().max_ttl_ms as i64;
    if matches!(
        op.op,
        HashOp::Acquire
            | HashOp::FencedAcquire
            | HashOp::FencedAcquireToken
            | HashOp::Unlock
            | HashOp::Renew
            | HashOp::RenewAll
    ) {
        if op.ttl_ms <= 0 && !op.keeps_ttl {
            return Reply::from(Error::InvalidLockScriptTtl).into();
        }
        if op.ttl_ms > max {
            return Reply::from(Error::TtlTooLong {
                ttl: op.ttl_ms,
                max: proxy.config().max_ttl_ms,
            })
            .into();
        }
    }
    if let Some((_, ttl)) = &op.latch
        && (*ttl <= 0 || *ttl > max)
    {
        return Reply::from(Error::LatchTtl {
            ttl: *ttl,
            max: proxy.config().max_ttl_ms,
        })
        .into();
    }
    super::runner::run(proxy, op)
}

fn ms(n: i64) -> Bytes {
    Bytes::from(itoa::Buffer::new().format(n).to_owned())
}

/// A fenced lock's token counters' retention, in ms, as an argument: [`fence::retention`].
fn retention(cfg: &Config) -> Bytes {
    ms(fence::retention(cfg) as i64)
}

/// A hash lock over `key`, in the lock model's words: one field per holder, counted holds.
fn hash_lock<'a>(key: &'a Bytes, holder: Holder<'a>, ttl_ms: i64) -> Lock<'a> {
    Lock {
        keys: std::slice::from_ref(key),
        holder,
        mode: Mode::Exclusive,
        holds: Holds::Counted,
        admits: 1,
        ttl_ms,
    }
}

/// What the masters' replies decided for a [`HashLockOp`].
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// An acquisition: a quorum created or re-entered the lock within its validity, or not. A
    /// fenced grant counts only once its token is on a quorum (see `mint`).
    Acquired(bool),
    /// An unlock's answer, and whether it released the lock (counted).
    Unlocked(Reply, bool),
    /// A renewal's answer, with the hold count a quorum agree on where it renewed one lock (a
    /// quorum repair writes it back where the lock is missing).
    Renewed(Reply, Option<i64>),
    /// A forced unlock's answer.
    Forced(Reply),
}

impl Operation for HashLockOp {
    type Decision = Decision;

    fn lock(&self) -> Lock<'_> {
        let holder = match self.op {
            HashOp::ForceUnlock => Holder::Anyone,
            _ => Holder::Field(&self.field),
        };
        hash_lock(&self.key, holder, self.ttl_ms)
    }

    fn verb(&self) -> Verb {
        self.op.verb()
    }

    /// The lock, the further locks (`RenewAll`), the token counter and the unlock latch.
    fn turn(&self, keylocks: &Arc<KeyLocks>) -> Ticket {
        let mut keys = vec![self.key.clone()];
        keys.extend(self.also.iter().map(|(k, _)| k.clone()));
        keys.extend(self.counter.iter().cloned());
        keys.extend(self.latch.iter().map(|(latch, _)| latch.clone()));
        keylocks.enqueue(&keys)
    }

    /// An unlock that names no channel to publish on (only one without a latch may publish
    /// nothing), and a forced unlock without one.
    fn settled(&self, _: &Proxy) -> Option<Reply> {
        match self.op {
            HashOp::Unlock
                if self.publish.is_none()
                    && (self.unlock_replies.is_none() || self.latch.is_some()) =>
            {
                Some(Reply::from(Error::UnlockWithoutChannel))
            }
            HashOp::ForceUnlock if self.publish.is_none() => {
                Some(Reply::from(Error::ForceWithoutChannel))
            }
            _ => None,
        }
    }

    fn request(&self, masters: &Masters, cfg: &Config) -> Request {
        let ttl = ms(self.ttl_ms);
        Request::Same(match self.op {
            HashOp::Unlock => self.unlock_request(),
            HashOp::Renew | HashOp::RenewAll => {
                let keys: Vec<&Bytes> = std::iter::once(&self.key)
                    .chain(self.also.iter().map(|(k, _)| k))
                    .collect();
                let mut args: Vec<&[u8]> = vec![&ttl, &self.field];
                args.extend(self.also.iter().map(|(_, f)| f.as_ref()));
                eval(RENEW, &keys, &args)
            }
            HashOp::ForceUnlock => match &self.publish {
                Some(p) => eval(FORCE, &[&self.key, &p.channel], &[&p.command, &p.message]),
                // Refused in its turn (see `settled`): no member is asked.
                None => return Request::Some(vec![None; masters.len()]),
            },
            HashOp::Acquire | HashOp::FencedAcquire | HashOp::FencedAcquireToken => {
                match &self.counter {
                    None => eval(LOCK, &[&self.key], &[&ttl, &self.field]),
                    Some(counter) => eval(
                        LOCK,
                        &[&self.key, counter],
                        &[&ttl, &self.field, &retention(cfg)],
                    ),
                }
            }
        })
    }

    fn timed(&self) -> bool {
        self.verb() == Verb::Acquire
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        match self.verb() {
            Verb::Acquire => vote.poll_decide_yes(cx, granted),
            Verb::Extend => vote.poll_decide_by(cx, renewals),
            // Decided as soon as a quorum answered alike; a master still due has published or
            // not by itself, and the answer a quorum gave stands either way.
            _ => vote.poll_outcome(cx),
        }
    }

    fn decide(&self, ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Decision {
        match self.op {
            HashOp::Unlock => self.unlock_decision(ballots),
            HashOp::Renew | HashOp::RenewAll => {
                self.renewal_decision(ballots, valid(self.ttl_ms, elapsed, cfg))
            }
            HashOp::ForceUnlock => Decision::Forced(forced(ballots)),
            _ => Decision::Acquired(ballots.agree(granted) && valid(self.ttl_ms, elapsed, cfg)),
        }
    }

    /// Undoes a refused acquisition where it wrote: a creation is deleted, a re-entry counted
    /// down. A master whose outcome is unknown is treated as a creation, unless some master
    /// reported a re-entry (the caller held the lock already, and deleting its hold there
    /// could take away a grant it still relies on; what the attempt may have added there
    /// expires with its TTL).
    fn undo(&self, ballots: &Ballots, _: Option<&Ballots>) -> Vec<Option<Bytes>> {
        let reentry = ballots.count(|r| took(r) == Took::Reentered) > 0;
        let undo = |i: usize| {
            let script = match ballots.replies[i].as_ref().map(took) {
                Some(Took::Created) => UNDO_CREATE,
                Some(Took::Reentered) => UNDO_REENTER,
                Some(_) => return None,
                None if ballots.may_have_run(i) && !reentry => UNDO_CREATE,
                None => return None,
            };
            Some(eval(script, &[&self.key], &[&self.field]))
        };
        (0..ballots.replies.len()).map(undo).collect()
    }

    fn answer(
        &self,
        proxy: &Proxy,
        decision: Decision,
        vote: &mut Vote,
        _: &Clock,
    ) -> Result<Reply, Decision> {
        match decision {
            Decision::Acquired(true) if self.counter.is_none() => Ok(self.grant(proxy, 0)),
            Decision::Acquired(_) => Err(decision),
            Decision::Unlocked(reply, released) => {
                if released {
                    Counters::bump(&proxy.counters().releases);
                }
                Ok(reply)
            }
            Decision::Renewed(_, Some(_)) if super::repair::pending(proxy, vote, RENEW_READING) => {
                Err(decision)
            }
            Decision::Renewed(reply, _) | Decision::Forced(reply) => Ok(reply),
        }
    }

    /// A fenced grant's token round, a refusal's undo, a renewal's quorum repair.
    fn rest(self, proxy: Arc<Proxy>, decision: Decision, voted: Voted) -> Later {
        let reply = match decision {
            Decision::Acquired(true) => return Box::pin(self.fenced_grant(proxy, voted)),
            Decision::Acquired(false) => self.refuse(proxy, voted),
            Decision::Renewed(reply, Some(holds)) => {
                repair_after(&proxy, &self, holds, voted.vote, voted.clock, voted.held);
                reply
            }
            // Answered by the first round (see `answer`).
            Decision::Unlocked(reply, _)
            | Decision::Renewed(reply, _)
            | Decision::Forced(reply) => reply,
        };
        Box::pin(std::future::ready(reply))
    }
}

impl HashLockOp {
    /// A renewal of the one lock `key` held by `field`, to `ttl_ms` (the other operations are
    /// bound from a script's call, see [`crate::lockop::HashScript`]).
    pub fn renewal(key: Bytes, field: Bytes, ttl_ms: i64) -> HashLockOp {
        HashLockOp {
            op: HashOp::Renew,
            key,
            field,
            ttl_ms,
            keeps_ttl: false,
            publish: None,
            latch: None,
            also: Vec::new(),
            counter: None,
            replies: None,
            unlock_replies: None,
        }
    }

    /// A granted acquisition, counted and answered (with `token`, a fenced one's).
    fn grant(&self, proxy: &Proxy, token: i64) -> Reply {
        Counters::bump(&proxy.counters().grants);
        match (self.op, self.replies) {
            (HashOp::FencedAcquireToken, _) => {
                Reply::Array(vec![Reply::Integer(-1), Reply::Integer(token)])
            }
            (_, Some((ok, _))) => super::lock::constant(ok),
            _ => Reply::Nil,
        }
    }

    /// A fenced grant (the only grant the first round does not answer): its token written back
    /// to a quorum (see [`mint`]) before it counts, still within validity; else refused.
    async fn fenced_grant(self, proxy: Arc<Proxy>, voted: Voted) -> Reply {
        let (ballots, masters) = (voted.vote.ballots(), voted.vote.masters());
        let token = match &self.counter {
            Some(counter) => mint(&proxy, masters, ballots, counter).await,
            None => Some(0),
        };
        let in_time = || valid(self.ttl_ms, voted.clock.start.elapsed(), proxy.config());
        match token.filter(|_| in_time()) {
            Some(token) => self.grant(&proxy, token),
            None => self.refuse(proxy, voted),
        }
    }

    /// A refused acquisition, counted and answered. The client has its answer; the undo waits
    /// for every answer still due (until the node deadline), so it knows which masters created
    /// and which re-entered, and the key stays in turn until it is queued. Counter increments
    /// stay: tokens only need to grow.
    fn refuse(self, proxy: Arc<Proxy>, voted: Voted) -> Reply {
        let Voted { vote, held, .. } = voted;
        let ballots = vote.ballots();
        debug!(yes = ballots.count(granted), quorum = ?ballots.quorum, "hash lock refused");
        Counters::bump(&proxy.counters().denials);
        let refused = self.refusal(ballots);
        undo_once_answered(proxy, self, vote, held);
        refused
    }

    /// What a refused acquisition answers: the error a quorum gave (`WRONGTYPE`: the key is no
    /// hash lock, as one Redis answers it), else the lock's PTTL (see [`wait_hint`]) in the
    /// caller's form.
    fn refusal(&self, ballots: &Ballots) -> Reply {
        let hint = wait_hint(ballots);
        match (agreed_error(ballots), self.op) {
            (Some(e), _) => e,
            (None, HashOp::FencedAcquireToken) => {
                Reply::Array(vec![Reply::Integer(hint), Reply::Integer(-1)])
            }
            (None, _) => match self.replies {
                Some((_, no)) => super::lock::constant(no),
                None => Reply::Integer(hint),
            },
        }
    }

    /// What each master is sent to unlock: [`UNLOCK`], with the channel (and latch) where the
    /// release is published, or neither (see [`Operation::settled`] for the calls refused).
    fn unlock_request(&self) -> Bytes {
        let empty = Bytes::new();
        // The TTL set where a hold is left; none for an unlock that leaves it as it was.
        let ttl = if self.keeps_ttl {
            empty.clone()
        } else {
            ms(self.ttl_ms)
        };
        match &self.publish {
            Some(p) => {
                let mut keys = vec![&self.key, &p.channel];
                let latch_ttl = self.latch.as_ref().map_or(ms(0), |(latch, ttl)| {
                    keys.push(latch);
                    ms(*ttl)
                });
                eval(
                    UNLOCK,
                    &keys,
                    &[&self.field, &ttl, &p.command, &p.message, &latch_ttl],
                )
            }
            // An unlock that publishes nothing: no channel, no publish command.
            None => eval(
                UNLOCK,
                &[&self.key],
                &[&self.field, &ttl, &empty, &empty, &ms(0)],
            ),
        }
    }

    /// An unlock's decision: the error a quorum gave, else [`unlocked`] in the script's own
    /// constants where it has them.
    fn unlock_decision(&self, ballots: &Ballots) -> Decision {
        if let Some(e) = agreed_error(ballots) {
            return Decision::Unlocked(e, false);
        }
        let reply = unlocked(ballots);
        let released = reply == Reply::Integer(1);
        // The script's own constants for nil (not held), 0 (still held) and 1 (released).
        let reply = match (self.unlock_replies, &reply) {
            (Some([not_held, _, _]), Reply::Nil) => super::lock::constant(not_held),
            (Some([_, kept, _]), Reply::Integer(0)) => super::lock::constant(kept),
            (Some([_, _, released]), Reply::Integer(1)) => super::lock::constant(released),
            _ => reply,
        };
        Decision::Unlocked(reply, released)
    }

    /// A renewal's decision: per lock, 1 when a quorum renewed it and the new TTL is `valid`,
    /// else 0 (one answer for `Renew`, an array for `RenewAll`); the error a quorum gave.
    fn renewal_decision(&self, ballots: &Ballots, valid: bool) -> Decision {
        if let Some(e) = agreed_error(ballots) {
            return Decision::Renewed(e, None);
        }
        let n = 1 + self.also.len();
        let renewed: Vec<Reply> = (0..n)
            .map(|i| {
                let renewed = |r: &Reply| match r {
                    Reply::Array(codes) if codes.len() == n => renewed_code(&codes[i]),
                    _ => false,
                };
                let ok = valid && ballots.agree(renewed);
                if !ok {
                    debug!(
                        renewed = ballots.count(renewed),
                        "hash lock renewal refused"
                    );
                }
                Reply::Integer(i64::from(ok))
            })
            .collect();
        let one = self.op == HashOp::Renew && self.also.is_empty();
        let holds = match renewed.first() {
            Some(Reply::Integer(1)) if one => agreed_holds(ballots),
            _ => None,
        };
        match self.op {
            HashOp::RenewAll => Decision::Renewed(Reply::Array(renewed), holds),
            _ => {
                let reply = renewed.into_iter().next().unwrap_or(Reply::Integer(0));
                Decision::Renewed(reply, holds)
            }
        }
    }
}

/// What a master did with an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Took {
    Created,
    Reentered,
    /// Another holds it, with this PTTL.
    Taken(i64),
    /// An error or a reply of another shape: a "no" that wrote nothing.
    No,
}

fn took(r: &Reply) -> Took {
    match r {
        Reply::Array(c) if c.first() == Some(&Reply::Integer(1)) => Took::Created,
        Reply::Array(c) if c.first() == Some(&Reply::Integer(2)) => Took::Reentered,
        Reply::Integer(t) => Took::Taken(*t),
        _ => Took::No,
    }
}

fn granted(r: &Reply) -> bool {
    matches!(took(r), Took::Created | Took::Reentered)
}

/// How renewals' answers count as alike: by the locks they renewed, whatever hold counts they
/// name.
fn renewals(r: &Reply) -> Result<Vec<bool>, Reply> {
    match r {
        Reply::Array(codes) => Ok(codes.iter().map(renewed_code).collect()),
        other => Err(other.clone()),
    }
}

/// A fenced grant's token: the largest counter value among the masters that granted, and at
/// least this proxy's wall clock in microseconds (so tokens keep growing past a master that
/// restarted empty and lost its counter, as [`fence`] does), written to the counter on every
/// master that granted. `None` unless a quorum of them wrote it.
///
/// A later grant of the same lock needs a quorum, which meets this one's quorum of raised
/// counters on a master that held this grant; its increment there comes after this grant's
/// raise (the lock was this grant's until then), so its token is larger.
async fn mint(
    proxy: &Arc<Proxy>,
    masters: &Masters,
    ballots: &Ballots,
    counter: &Bytes,
) -> Option<i64> {
    let counted = ballots.replies.iter().flatten().filter_map(|r| match r {
        Reply::Array(c) if granted(r) => match c.get(1) {
            Some(Reply::Integer(n)) => Some(*n),
            _ => None,
        },
        _ => None,
    });
    let token = counted.max()?.max(fence::now_us() as i64);
    let value = ms(token);
    let raise = eval(RAISE, &[counter], &[&value, &retention(proxy.config())]);
    let each: Vec<Option<Bytes>> = ballots
        .replies
        .iter()
        .map(|r| r.as_ref().filter(|r| granted(r)).map(|_| raise.clone()))
        .collect();
    let deadline = Instant::now() + proxy.config().node_timeout();
    let raised = ask(masters, Request::Some(each), 1, deadline)
        .finish()
        .await;
    raised.agree(|r| *r == Reply::Integer(1)).then_some(token)
}

/// The refusal's PTTL: how long a majority still hold the lock (the quorum-th largest PTTL
/// among masters that found it taken). When no majority found it taken (a split, masters down,
/// or a grant too late to be valid), a short random wait, so that competing callers spread out.
fn wait_hint(ballots: &Ballots) -> i64 {
    let taken = |_, r: &Reply| match took(r) {
        Took::Taken(t) => Some(t),
        _ => None,
    };
    match ballots.quorum_th(taken, |t| *t) {
        Some(t) if t > 0 => t,
        _ => rand::random_range(5..=50),
    }
}

/// The unlock's answer from the masters' codes (see [`UNLOCK`]): what a quorum kept under the
/// latch (a retried unlock); else 0 while a quorum still hold the lock, 1 when it is gone from a
/// majority after this unlock held it somewhere, nil when the caller held it nowhere.
fn unlocked(ballots: &Ballots) -> Reply {
    let codes = |i: usize| match &ballots.replies[i] {
        Some(Reply::Array(c)) if !c.is_empty() => Some(c.as_slice()),
        _ => None,
    };
    if !ballots.is_quorum(|i| codes(i).is_some()) {
        return Reply::from(Error::NoQuorumUnlock);
    }
    let n = ballots.replies.len();
    let latched = |i: usize| codes(i).filter(|c| c.first() == Some(&Reply::Integer(3)));
    if let Some(kept) = (0..n).filter_map(latched).find_map(|c| {
        let same = |m: usize| latched(m).is_some_and(|o| o.get(1) == c.get(1));
        ballots.is_quorum(same).then(|| c.get(1))?
    }) {
        return match kept {
            Reply::Bulk(v) => std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse().ok())
                .map_or(Reply::Nil, Reply::Integer),
            _ => Reply::Nil,
        };
    }
    let said = |code: i64| move |i: usize| codes(i).is_some_and(|c| c[0] == Reply::Integer(code));
    if ballots.is_quorum(said(1)) {
        // Still held by a majority, one hold less.
        Reply::Integer(0)
    } else if (0..n).any(|i| said(1)(i) || said(2)(i)) {
        // Gone from a majority: the caller no longer holds it.
        Reply::Integer(1)
    } else {
        Reply::Nil
    }
}

/// Takes back what a refused acquisition `op` plans to undo ([`Operation::undo`]) once every
/// answer of its `vote` still due is in (until the node deadline), so the plan knows where the
/// attempt landed; the keys stay in turn (`held`) until the undo is queued. The caller has its
/// answer already.
pub(super) fn undo_once_answered<O: Operation>(proxy: Arc<Proxy>, op: O, vote: Vote, held: Held) {
    tokio::spawn(async move {
        let masters = vote.masters().clone();
        let ballots = vote.finish().await;
        take_back(&proxy, &masters, op.undo(&ballots, None));
        drop(held);
    });
}

/// A forced unlock's answer (a read–write or fair lock's too): 1 when a quorum deleted the
/// lock, else 0 when a quorum answered 1 or 0; fewer answers than that are no answer.
pub(super) fn forced(ballots: &Ballots) -> Reply {
    if !ballots.agree(|r| matches!(r, Reply::Integer(0 | 1))) {
        return Reply::from(Error::NoQuorumUnlock);
    }
    Reply::Integer(i64::from(ballots.agree(|r| *r == Reply::Integer(1))))
}

/// A lease's renewal of one hash lock: [`HashOp::Renew`]'s phases, but its vote is decided as
/// soon as a quorum renewed or no longer can (every other answer is one "no").
struct LeaseRenewal(HashLockOp);

impl Operation for LeaseRenewal {
    type Decision = Decision;

    fn lock(&self) -> Lock<'_> {
        self.0.lock()
    }

    fn verb(&self) -> Verb {
        self.0.verb()
    }

    fn request(&self, masters: &Masters, cfg: &Config) -> Request {
        self.0.request(masters, cfg)
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        vote.poll_decide_yes(cx, renewed_one)
    }

    fn decide(&self, ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Decision {
        self.0.decide(ballots, elapsed, cfg)
    }

    fn answer(&self, p: &Proxy, d: Decision, v: &mut Vote, c: &Clock) -> Result<Reply, Decision> {
        self.0.answer(p, d, v, c)
    }

    fn rest(self, proxy: Arc<Proxy>, decision: Decision, voted: Voted) -> Later {
        self.0.rest(proxy, decision, voted)
    }
}

/// A lease's renewal of the hash lock `key` held by `field`: a quorum `PEXPIRE` to `ttl_ms`
/// where the hash holds the field (Redisson's watchdog renewal), in the key's turn, under
/// Redlock's validity rule.
pub async fn renew_lease(proxy: &Arc<Proxy>, key: &Bytes, field: &Bytes, ttl_ms: i64) -> Renewal {
    let op = LeaseRenewal(HashLockOp::renewal(key.clone(), field.clone(), ttl_ms));
    let held = op.turn(proxy.keylocks()).ready().await;
    let (decided, vote, clock) = super::runner::decide(proxy, &op).await;
    let gone = |r: &Reply| matches!(r, Reply::Array(c) if matches!(c.as_slice(), [Reply::Integer(0 | -3)]));
    match decided {
        Decision::Renewed(Reply::Integer(1), holds) => {
            if let Some(holds) = holds {
                repair_after(proxy, &op.0, holds, vote, clock, held);
            }
            Renewal::Renewed
        }
        _ if vote.ballots().agree(gone) => Renewal::Gone,
        _ => Renewal::Failed(
            "fewer than a quorum of masters renewed the hash lock in time",
            Answered::of(&vote),
        ),
    }
}

/// A lease's release of a hash lock when its holder's connection closed: deleted on every
/// master where the hash holds the holder's field, however many holds it counts.
struct ReleaseHeld {
    key: Bytes,
    field: Bytes,
}

impl Operation for ReleaseHeld {
    /// How many masters deleted it.
    type Decision = Reply;

    fn lock(&self) -> Lock<'_> {
        hash_lock(&self.key, Holder::Field(&self.field), 0)
    }

    fn verb(&self) -> Verb {
        Verb::Release
    }

    fn request(&self, _: &Masters, _: &Config) -> Request {
        Request::Same(eval(RELEASE_HELD, &[&self.key], &[&self.field]))
    }

    fn decide(&self, ballots: &Ballots, _: Duration, _: &Config) -> Reply {
        Reply::Integer(ballots.count(|r| *r == Reply::Integer(1)) as i64)
    }

    fn answer(&self, _: &Proxy, deleted: Reply, _: &mut Vote, _: &Clock) -> Result<Reply, Reply> {
        Ok(deleted)
    }

    fn rest(self, _: Arc<Proxy>, deleted: Reply, _: Voted) -> Later {
        Box::pin(std::future::ready(deleted))
    }
}

/// Releases the hash lock `key` where it holds `field` (a lease's release when its holder's
/// connection closed), on every master, in the key's turn; answers how many masters deleted it.
pub fn release_held(proxy: &Arc<Proxy>, key: Bytes, field: Bytes) -> Action {
    super::runner::run(proxy, ReleaseHeld { key, field })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lockop::Lit;
    use crate::quorum::scripted::{ballots, codes};

    #[test]
    fn a_renewal_is_repaired_only_where_the_hash_is_missing() {
        use crate::command::repair::plan;
        // Five members: three renewed (hold counts 2), the fourth has no key, the fifth's hash
        // holds other fields only.
        let b = ballots(vec![
            codes(&[2]),
            codes(&[2]),
            codes(&[2]),
            codes(&[-3]),
            codes(&[0]),
        ]);
        let p = plan(&b, RENEW_READING, 1000, |_| true, Duration::ZERO, 0.01).expect("repair");
        assert_eq!((p.members, p.px_ms), (vec![3], 1000 - 12));
        // One renewal alone is no quorum.
        let b = ballots(vec![codes(&[1]), codes(&[-3]), codes(&[-3])]);
        assert_eq!(
            plan(&b, RENEW_READING, 1000, |_| true, Duration::ZERO, 0.01),
            None
        );
        // Many locks in one answer are not read as one.
        let b = ballots(vec![codes(&[1, 1]), codes(&[1, 1]), codes(&[-3, -3])]);
        assert_eq!(
            plan(&b, RENEW_READING, 1000, |_| true, Duration::ZERO, 0.01),
            None
        );
    }

    #[test]
    fn what_a_master_did_with_an_acquisition() {
        assert_eq!(took(&codes(&[1]).unwrap()), Took::Created);
        assert_eq!(took(&codes(&[2, 17]).unwrap()), Took::Reentered);
        assert_eq!(took(&Reply::Integer(900)), Took::Taken(900));
        assert_eq!(took(&Reply::static_error("WRONGTYPE x")), Took::No);
        assert_eq!(took(&codes(&[]).unwrap()), Took::No);
    }

    #[test]
    fn a_refusal_answers_how_long_a_majority_still_hold_it() {
        let b = ballots(vec![
            Some(Reply::Integer(9000)),
            Some(Reply::Integer(7000)),
            codes(&[1]),
        ]);
        assert_eq!(wait_hint(&b), 7000);
        // Fewer than a quorum found it taken: a short random wait.
        let b = ballots(vec![Some(Reply::Integer(9000)), codes(&[1]), None]);
        assert!((5..=50).contains(&wait_hint(&b)));
    }

    fn op(op: HashOp) -> HashLockOp {
        let (key, field) = (Bytes::from_static(b"lock"), Bytes::from_static(b"uuid:1"));
        HashLockOp {
            op,
            ..HashLockOp::renewal(key, field, 10_000)
        }
    }

    const FAST: Duration = Duration::from_millis(10);

    #[test]
    fn a_refused_acquisition_is_undone_where_it_wrote() {
        use crate::backend::BackendError;
        let o = op(HashOp::Acquire);
        let script = |s| Some(eval(s, &[&o.key], &[&o.field]));
        let (create, reenter) = (script(UNDO_CREATE), script(UNDO_REENTER));
        // Created on the first, taken on the second (it wrote nothing), an error on the fourth;
        // the third has not answered and may have created the lock; the fifth was down and
        // never got the attempt.
        let mut b = ballots(vec![
            codes(&[1]),
            Some(Reply::Integer(900)),
            None,
            Some(Reply::static_error("ERR x")),
            None,
        ]);
        b.failed[4] = Some(BackendError::Down);
        assert_eq!(
            o.undo(&b, None),
            vec![create.clone(), None, create.clone(), None, None]
        );
        // A re-entry: counted down there; the caller held the lock already, so a master
        // without an answer is left to expire rather than have a hold it relies on deleted.
        let b = ballots(vec![codes(&[2, 7]), codes(&[1]), None]);
        assert_eq!(o.undo(&b, None), vec![reenter, create, None]);
        // Nothing written anywhere: nothing to send, and no roll-back to count.
        let b = ballots(vec![Some(Reply::Integer(900)), Some(Reply::Integer(800))]);
        assert_eq!(o.undo(&b, None), vec![None, None]);
    }

    #[test]
    fn decisions_follow_the_quorum_within_validity() {
        let cfg = Config::default();
        let late = Duration::from_millis(9_950);
        // A creation and a re-entry make a quorum of three, while the TTL is still valid.
        let acquire = op(HashOp::Acquire);
        let b = ballots(vec![codes(&[1]), codes(&[2]), Some(Reply::Integer(900))]);
        assert_eq!(acquire.decide(&b, FAST, &cfg), Decision::Acquired(true));
        assert_eq!(acquire.decide(&b, late, &cfg), Decision::Acquired(false));
        let b = ballots(vec![codes(&[1]), Some(Reply::Integer(900)), None]);
        assert_eq!(acquire.decide(&b, FAST, &cfg), Decision::Acquired(false));
        // A renewal of one lock names the hold count a quorum agree on, for its repair.
        let renew = op(HashOp::Renew);
        let b = ballots(vec![codes(&[2]), codes(&[2]), codes(&[-3])]);
        assert_eq!(
            renew.decide(&b, FAST, &cfg),
            Decision::Renewed(Reply::Integer(1), Some(2))
        );
        let b = ballots(vec![codes(&[2]), codes(&[3]), codes(&[-3])]);
        assert_eq!(
            renew.decide(&b, FAST, &cfg),
            Decision::Renewed(Reply::Integer(1), None)
        );
        assert_eq!(
            renew.decide(&b, late, &cfg),
            Decision::Renewed(Reply::Integer(0), None)
        );
        // Many locks: one answer each, and no repair.
        let all = HashLockOp {
            also: vec![(Bytes::from_static(b"other"), Bytes::from_static(b"uuid:2"))],
            ..op(HashOp::RenewAll)
        };
        let b = ballots(vec![codes(&[1, 0]), codes(&[1, -3]), codes(&[1, 1])]);
        assert_eq!(
            all.decide(&b, FAST, &cfg),
            Decision::Renewed(
                Reply::Array(vec![Reply::Integer(1), Reply::Integer(0)]),
                None
            )
        );
        // An unlock counts a release by the majority's answer, whatever constant the script
        // gives it.
        let unlock = HashLockOp {
            unlock_replies: Some([Lit::Int(-1), Lit::Int(5), Lit::Int(6)]),
            ..op(HashOp::Unlock)
        };
        let b = ballots(vec![codes(&[2]), codes(&[2]), None]);
        assert_eq!(
            unlock.decide(&b, FAST, &cfg),
            Decision::Unlocked(Reply::Integer(6), true)
        );
        let b = ballots(vec![codes(&[1]), codes(&[1]), codes(&[2])]);
        assert_eq!(
            unlock.decide(&b, FAST, &cfg),
            Decision::Unlocked(Reply::Integer(5), false)
        );
        // A forced unlock: 1 when a quorum deleted it.
        let force = op(HashOp::ForceUnlock);
        let b = ballots(vec![Some(Reply::Integer(1)), Some(Reply::Integer(1)), None]);
        assert_eq!(
            force.decide(&b, FAST, &cfg),
            Decision::Forced(Reply::Integer(1))
        );
    }

    #[test]
    fn unlock_follows_the_majority() {
        let bulk = |s: &'static str| Reply::Bulk(Bytes::from_static(s.as_bytes()));
        // One hold less on a quorum: still held.
        assert_eq!(
            unlocked(&ballots(vec![codes(&[1]), codes(&[1]), codes(&[2])])),
            Reply::Integer(0)
        );
        // Gone from a majority.
        assert_eq!(
            unlocked(&ballots(vec![codes(&[2]), codes(&[2]), None])),
            Reply::Integer(1)
        );
        assert_eq!(
            unlocked(&ballots(vec![codes(&[1]), codes(&[2]), codes(&[0])])),
            Reply::Integer(1)
        );
        // Not held anywhere.
        assert_eq!(
            unlocked(&ballots(vec![codes(&[0]), codes(&[0]), None])),
            Reply::Nil
        );
        // A retry: what a quorum's latch kept.
        let latch = |v| Some(Reply::Array(vec![Reply::Integer(3), bulk(v)]));
        assert_eq!(
            unlocked(&ballots(vec![latch("1"), latch("1"), codes(&[0])])),
            Reply::Integer(1)
        );
        assert_eq!(
            unlocked(&ballots(vec![latch("0"), latch("0"), None])),
            Reply::Integer(0)
        );
        // Too few answers.
        assert!(matches!(
            unlocked(&ballots(vec![codes(&[2]), None, None])),
            Reply::Error(_)
        ));
    }
}
