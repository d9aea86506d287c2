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

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;

use super::action::Action;
use super::fence;
use super::lock::{Renewal, agreed_error};
use crate::counters::Counters;
use crate::error::Error;
use crate::lockop::HashOp;
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, ask, ask_timed, validity};
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

/// How a one-lock [`RENEW`] answer reads for a quorum repair: `{n}` renewed to the TTL asked
/// for, `{-3}` missing.
const RENEW_READING: super::repair::Reading = super::repair::Reading {
    holds: |r, ttl| match r {
        Reply::Array(c) if c.len() == 1 && renewed_code(&c[0]) => Some(ttl),
        _ => None,
    },
    missing: |r| matches!(r, Reply::Array(c) if c.as_slice() == [Reply::Integer(-3)]),
};

/// After a granted renewal of the one hash lock `key` held by `field` to `ttl_ms` (sent at
/// `start`): the lock written back to the trusted members that lack it, with the hold count a
/// quorum agree on (none agreed: nothing is written), in the key's turn (`held`).
fn repair_after(
    proxy: &Arc<Proxy>,
    key: &Bytes,
    field: &Bytes,
    ttl_ms: i64,
    vote: crate::quorum::Vote,
    start: Instant,
    held: crate::keylock::Held,
) {
    let count = |r: &Reply| match r {
        Reply::Array(c) if c.len() == 1 && renewed_code(&c[0]) => Some(c[0].clone()),
        _ => None,
    };
    let Some((Some(Reply::Integer(holds)), _)) = vote.ballots().tally_by(count) else {
        return;
    };
    let e = super::repair::Extended {
        key: key.clone(),
        copy: super::repair::LockCopy::Hash {
            field: field.clone(),
            holds,
        },
        ttl_ms,
        vote,
        start,
        reading: RENEW_READING,
    };
    super::repair::after(proxy, e, held);
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

/// Runs a hash-lock operation as a quorum operation.
pub fn run(proxy: &Arc<Proxy>, op: HashLockOp) -> Action {
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
    let mut keys = vec![op.key.clone()];
    keys.extend(op.also.iter().map(|(k, _)| k.clone()));
    keys.extend(op.counter.iter().cloned());
    if let Some((latch, _)) = &op.latch {
        keys.push(latch.clone());
    }
    super::action::in_turn_held(proxy, &keys, move |proxy, held| async move {
        match op.op {
            HashOp::Acquire | HashOp::FencedAcquire | HashOp::FencedAcquireToken => {
                acquire(proxy, op, held).await
            }
            HashOp::Unlock => {
                let reply = unlock(&proxy, &op).await;
                drop(held);
                reply
            }
            HashOp::Renew | HashOp::RenewAll => renew(&proxy, &op, held).await,
            HashOp::ForceUnlock => {
                let reply = force(&proxy, &op).await;
                drop(held);
                reply
            }
        }
    })
}

fn ms(n: i64) -> Bytes {
    Bytes::from(itoa::Buffer::new().format(n).to_owned())
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

async fn acquire(proxy: Arc<Proxy>, op: HashLockOp, held: crate::keylock::Held) -> Reply {
    let ttl = ms(op.ttl_ms);
    let retention = ms(fence::retention(&proxy) as i64);
    let req = match &op.counter {
        None => eval(LOCK, &[&op.key], &[&ttl, &op.field]),
        Some(counter) => eval(LOCK, &[&op.key, counter], &[&ttl, &op.field, &retention]),
    };
    let start = Instant::now();
    let deadline = start + proxy.config().node_timeout();
    let mut vote = ask_timed(&proxy.masters(), Request::Same(req), 1, deadline);
    // The member set of this operation, for its token and its undo too.
    let masters = vote.masters().clone();
    let ballots = vote.decide_by(granted).await.clone();
    let yes = ballots.count(granted);
    let ttl_left = Duration::from_millis(op.ttl_ms as u64);
    let min = Duration::from_millis(proxy.config().min_validity_ms);
    let valid = || {
        validity(ttl_left, start.elapsed(), proxy.config().drift_factor).is_some_and(|v| v > min)
    };
    if ballots.agree(granted) && valid() {
        let token = match &op.counter {
            None => Some(0),
            Some(counter) => mint(&proxy, &masters, &ballots, counter, &retention).await,
        };
        // A fenced grant counts only once its token is on a quorum, still within validity.
        if let Some(token) = token.filter(|_| valid()) {
            Counters::bump(&proxy.counters().grants);
            drop(held);
            return match (op.op, op.replies) {
                (HashOp::FencedAcquireToken, _) => {
                    Reply::Array(vec![Reply::Integer(-1), Reply::Integer(token)])
                }
                (_, Some((ok, _))) => super::lock::constant(ok),
                _ => Reply::Nil,
            };
        }
    }
    debug!(yes, quorum = ?ballots.quorum, "hash lock refused");
    Counters::bump(&proxy.counters().denials);
    let hint = wait_hint(&ballots);
    let refused = match (agreed_error(&ballots), op.op) {
        // The key is no hash lock (`WRONGTYPE`): the error, as one Redis answers it.
        (Some(e), _) => e,
        (None, HashOp::FencedAcquireToken) => {
            Reply::Array(vec![Reply::Integer(hint), Reply::Integer(-1)])
        }
        (None, _) => match op.replies {
            Some((_, no)) => super::lock::constant(no),
            None => Reply::Integer(hint),
        },
    };
    // The client has its answer; the undo waits for every answer still due (until the node
    // deadline), so it knows which masters created and which re-entered, and the key stays in
    // turn until it is queued. Counter increments stay: tokens only need to grow.
    tokio::spawn(async move {
        let ballots = vote.finish().await;
        undo(&proxy, &masters, &ballots, &op);
        drop(held);
    });
    refused
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
    retention: &Bytes,
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
    let raise = eval(RAISE, &[counter], &[&value, retention]);
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

/// Undoes a refused acquisition where it wrote: a creation is deleted, a re-entry counted down.
/// A master whose outcome is unknown is treated as a creation, unless some master reported a
/// re-entry (the caller held the lock already, and deleting its hold there could take away a
/// grant it still relies on; what the attempt may have added there expires with its TTL).
fn undo(proxy: &Proxy, masters: &Masters, ballots: &Ballots, op: &HashLockOp) {
    let reentry = ballots.count(|r| took(r) == Took::Reentered) > 0;
    let mut sent = false;
    for (i, m) in masters.iter().enumerate() {
        let script = match ballots.replies[i].as_ref().map(took) {
            Some(Took::Created) => UNDO_CREATE,
            Some(Took::Reentered) => UNDO_REENTER,
            Some(_) => continue,
            None if ballots.may_have_run(i) && !reentry => UNDO_CREATE,
            None => continue,
        };
        m.send(eval(script, &[&op.key], &[&op.field]), 1, None);
        sent = true;
    }
    if sent {
        Counters::bump(&proxy.counters().rollbacks);
    }
}

async fn unlock(proxy: &Proxy, op: &HashLockOp) -> Reply {
    let empty = Bytes::new();
    // The TTL set where a hold is left; none for an unlock that leaves it as it was.
    let ttl = if op.keeps_ttl {
        empty.clone()
    } else {
        ms(op.ttl_ms)
    };
    let req = match (&op.publish, op.unlock_replies) {
        (Some(p), _) => {
            let mut keys = vec![&op.key, &p.channel];
            let latch_ttl = op.latch.as_ref().map_or(ms(0), |(latch, ttl)| {
                keys.push(latch);
                ms(*ttl)
            });
            eval(
                UNLOCK,
                &keys,
                &[&op.field, &ttl, &p.command, &p.message, &latch_ttl],
            )
        }
        // An unlock that publishes nothing: no channel, no publish command.
        (None, Some(_)) if op.latch.is_none() => eval(
            UNLOCK,
            &[&op.key],
            &[&op.field, &ttl, &empty, &empty, &ms(0)],
        ),
        _ => return Reply::from(Error::UnlockWithoutChannel),
    };
    let deadline = Instant::now() + proxy.config().node_timeout();
    // Decided as soon as a quorum answered alike; a master still due has published or not by
    // itself, and the answer a quorum gave stands either way.
    let ballots = ask(&proxy.masters(), Request::Same(req), 1, deadline)
        .outcome()
        .await;
    if let Some(e) = agreed_error(&ballots) {
        return e;
    }
    let reply = unlocked(&ballots);
    if reply == Reply::Integer(1) {
        Counters::bump(&proxy.counters().releases);
    }
    // The script's own constants for nil (not held), 0 (still held) and 1 (released).
    match (op.unlock_replies, &reply) {
        (Some([not_held, _, _]), Reply::Nil) => super::lock::constant(not_held),
        (Some([_, kept, _]), Reply::Integer(0)) => super::lock::constant(kept),
        (Some([_, _, released]), Reply::Integer(1)) => super::lock::constant(released),
        _ => reply,
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

/// Renews the locks of `op` in their turn (`held`: passed on to a quorum repair after a granted
/// renewal of one lock, else freed with the answer).
async fn renew(proxy: &Arc<Proxy>, op: &HashLockOp, held: crate::keylock::Held) -> Reply {
    let locks: Vec<(&Bytes, &Bytes)> = std::iter::once((&op.key, &op.field))
        .chain(op.also.iter().map(|(k, f)| (k, f)))
        .collect();
    let keys: Vec<&Bytes> = locks.iter().map(|(k, _)| *k).collect();
    let ttl = ms(op.ttl_ms);
    let mut args: Vec<&[u8]> = vec![&ttl];
    args.extend(locks.iter().map(|(_, f)| f.as_ref()));
    let req = eval(RENEW, &keys, &args);
    let start = Instant::now();
    let deadline = start + proxy.config().node_timeout();
    let mut vote = ask(&proxy.masters(), Request::Same(req), 1, deadline);
    // Alike when they renewed the same locks, whatever hold counts they name.
    let ballots = vote
        .decide_by(|r| match r {
            Reply::Array(codes) => Ok(codes.iter().map(renewed_code).collect::<Vec<bool>>()),
            other => Err(other.clone()),
        })
        .await;
    if let Some(e) = agreed_error(ballots) {
        return e;
    }
    let left = validity(
        Duration::from_millis(op.ttl_ms as u64),
        start.elapsed(),
        proxy.config().drift_factor,
    );
    let min = Duration::from_millis(proxy.config().min_validity_ms);
    let valid = left.is_some_and(|v| v > min);
    let renewed: Vec<Reply> = (0..locks.len())
        .map(|i| {
            let renewed = |r: &Reply| match r {
                Reply::Array(codes) if codes.len() == locks.len() => renewed_code(&codes[i]),
                _ => false,
            };
            let yes = ballots.count(renewed);
            let ok = valid && ballots.agree(renewed);
            if !ok {
                debug!(renewed = yes, "hash lock renewal refused");
            }
            Reply::Integer(i64::from(ok))
        })
        .collect();
    if op.op == HashOp::Renew && op.also.is_empty() && renewed.first() == Some(&Reply::Integer(1)) {
        repair_after(proxy, &op.key, &op.field, op.ttl_ms, vote, start, held);
    }
    match op.op {
        HashOp::RenewAll => Reply::Array(renewed),
        _ => renewed.into_iter().next().unwrap_or(Reply::Integer(0)),
    }
}

async fn force(proxy: &Proxy, op: &HashLockOp) -> Reply {
    let Some(p) = &op.publish else {
        return Reply::from(Error::ForceWithoutChannel);
    };
    let req = eval(FORCE, &[&op.key, &p.channel], &[&p.command, &p.message]);
    let deadline = Instant::now() + proxy.config().node_timeout();
    let ballots = ask(&proxy.masters(), Request::Same(req), 1, deadline)
        .outcome()
        .await;
    if !ballots.agree(|r| matches!(r, Reply::Integer(0 | 1))) {
        return Reply::from(Error::NoQuorumUnlock);
    }
    Reply::Integer(i64::from(ballots.agree(|r| *r == Reply::Integer(1))))
}

/// A lease's renewal of the hash lock `key` held by `field`: a quorum `PEXPIRE` to `ttl_ms`
/// where the hash holds the field (Redisson's watchdog renewal), in the key's turn, under
/// Redlock's validity rule.
pub async fn renew_lease(proxy: &Arc<Proxy>, key: &Bytes, field: &Bytes, ttl_ms: i64) -> Renewal {
    let held = proxy
        .keylocks()
        .enqueue(std::slice::from_ref(key))
        .ready()
        .await;
    let ttl = ms(ttl_ms);
    let req = eval(RENEW, &[key], &[&ttl, field]);
    let start = Instant::now();
    let deadline = start + proxy.config().node_timeout();
    let renewed = |r: &Reply| matches!(r, Reply::Array(c) if c.len() == 1 && renewed_code(&c[0]));
    let gone = |r: &Reply| matches!(r, Reply::Array(c) if matches!(c.as_slice(), [Reply::Integer(0 | -3)]));
    let mut vote = ask(&proxy.masters(), Request::Same(req), 1, deadline);
    let ballots = vote.decide_by(renewed).await;
    let min = Duration::from_millis(proxy.config().min_validity_ms);
    let valid = validity(
        Duration::from_millis(ttl_ms as u64),
        start.elapsed(),
        proxy.config().drift_factor,
    )
    .is_some_and(|v| v > min);
    if valid && ballots.agree(renewed) {
        repair_after(proxy, key, field, ttl_ms, vote, start, held);
        Renewal::Renewed
    } else if ballots.agree(gone) {
        Renewal::Gone
    } else {
        Renewal::Failed(
            "fewer than a quorum of masters renewed the hash lock in time",
            super::lock::Answered::of(&vote),
        )
    }
}

/// Releases the hash lock `key` where it holds `field` (a lease's release when its holder's
/// connection closed), on every master, in the key's turn; answers how many masters deleted it.
pub fn release_held(proxy: &Arc<Proxy>, key: Bytes, field: Bytes) -> Action {
    let keys = [key.clone()];
    super::action::in_turn(proxy, &keys, move |proxy| async move {
        let req = eval(RELEASE_HELD, &[&key], &[&field]);
        let deadline = Instant::now() + proxy.config().node_timeout();
        let ballots = ask(&proxy.masters(), Request::Same(req), 1, deadline)
            .outcome()
            .await;
        Reply::Integer(ballots.count(|r| *r == Reply::Integer(1)) as i64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::quorum::scripted::ballots;

    use crate::quorum::scripted::codes;

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
