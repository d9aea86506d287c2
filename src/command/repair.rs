//! Quorum repair: a lock that rests on fewer than every trusted member is written back, after
//! an extension that a quorum granted, to the trusted members that answered "key missing".
//!
//! A lock granted while a member was down (or cut off) lives on a bare majority. When the
//! member comes back, it is empty, and an extension (`PEXPIRE` where the key holds the token)
//! cannot create the key there: without repair the lock stays on the bare majority for as long
//! as it is held, and the next single loss frees it. So once an extension is granted (the
//! caller is the holder by quorum), each trusted member whose answer was "key missing" gets the
//! lock written back where the key still does not exist: `SET key token NX PX <validity left>`
//! for a plain lock, [`HASH_REPAIR`] (the holder's field with the hold count a quorum agree on,
//! only while the key does not exist, then `PEXPIRE`) for a hash lock. The validity left is the
//! one the proxy grants the lock after the extension (the TTL a quorum now hold, less the time
//! since the extension was sent and the drift), and never longer. A member that holds anything
//! under the key by then (another holder's grant) keeps it; members that answered with another
//! token are not even asked. Quarantined, clock-suspect and duplicate members are not trusted:
//! their answers are not counted, and they are never written. Why this never makes a second
//! holder nor outlives the quorum's grant: docs/design.md, "Quorum repair".
//!
//! The decision ([`plan`]) is pure. The write goes out in the key's turn, so no later
//! operation on the key (a release) can overtake it on a member's connection; when a member
//! has not answered the extension yet, its answer is awaited (until the extension's deadline)
//! in a task that holds the turn, while the client has its answer already.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;

use crate::counters::Counters;
use crate::keylock::Held;
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Request, Vote, ask, validity};
use crate::wire::master::{eval, set_nx};
use crate::wire::reply::Reply;

/// A hash lock's repair on one member: `KEYS[1]` the lock; `ARGV` = the holder's field, its hold
/// count, the TTL in ms. Only where the key does not exist, as `SET NX` does for a plain lock:
/// the hash gets the one field, and the TTL. Answers 1 written, 0 not (the key exists).
pub const HASH_REPAIR: &str = "if redis.call('exists', KEYS[1]) == 0 then \
      redis.call('hset', KEYS[1], ARGV[1], ARGV[2]) redis.call('pexpire', KEYS[1], ARGV[3]) \
      return 1 \
    end \
    return 0";

/// Which members get the lock written back, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Positions in the vote's members (the snapshot the extension went to).
    pub members: Vec<usize>,
    /// The write's `PX`: the lock's validity left, in whole milliseconds (rounded down).
    pub px_ms: u64,
}

/// How an extension's answers read, for [`plan`].
#[derive(Clone, Copy)]
pub struct Reading {
    /// The TTL (ms) the member now holds the lock for, where it extended it, given the TTL the
    /// extension set (for answers that do not name it).
    pub holds: fn(&Reply, i64) -> Option<i64>,
    /// The member had no key at all (not another holder's key: that is never a candidate).
    pub missing: fn(&Reply) -> bool,
}

/// The decision: after an extension to `ttl_ms` whose answers are `ballots`, sent `elapsed`
/// ago, the members to write the lock back on, and its `PX`. `None` unless a quorum hold the
/// lock (the quorum-th largest of their new TTLs) with validity left after `elapsed` and the
/// drift allowance, and some member that answered "missing" is `trusted` now. A member that did
/// not answer, answered with another token, or whose answer was not counted (untrusted) is
/// never among them.
pub fn plan(
    ballots: &Ballots,
    reading: Reading,
    ttl_ms: i64,
    trusted: impl Fn(usize) -> bool,
    elapsed: Duration,
    drift_factor: f64,
) -> Option<Plan> {
    let held = |_: usize, r: &Reply| (reading.holds)(r, ttl_ms).filter(|t| *t > 0);
    let ttl = ballots.quorum_th(held, |t| *t)?;
    let left = validity(Duration::from_millis(ttl as u64), elapsed, drift_factor)?;
    let px_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    let members: Vec<usize> = (0..ballots.replies.len())
        .filter(|&i| ballots.replies[i].as_ref().is_some_and(reading.missing) && trusted(i))
        .collect();
    (px_ms > 0 && !members.is_empty()).then_some(Plan { members, px_ms })
}

/// The proxy's extension script answers ([`crate::scripts::EXTEND`]): the new TTL where it
/// extended, -3 where the one key is missing (0 is another token, or a key of many missing).
pub const EXTEND_READING: Reading = Reading {
    holds: |r, _| match r {
        Reply::Integer(t) if *t > 0 => Some(*t),
        _ => None,
    },
    missing: |r| *r == Reply::Integer(-3),
};

/// What a member that lacks the lock is given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCopy {
    /// A plain lock: the key holds the holder's token.
    Token(Bytes),
    /// A hash lock: the hash holds the holder's field, counting `holds`.
    Hash {
        /// The holder's field.
        field: Bytes,
        /// Its hold count, as a quorum of members agree on it.
        holds: i64,
    },
}

impl LockCopy {
    /// The write for one member: `key` gets the copy for `px_ms`, only where it does not exist.
    fn write(&self, key: &Bytes, px_ms: u64) -> Bytes {
        let px = i64::try_from(px_ms).unwrap_or(i64::MAX);
        match self {
            LockCopy::Token(token) => set_nx(key, token, px, false),
            LockCopy::Hash { field, holds } => {
                let (mut n, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
                eval(
                    HASH_REPAIR,
                    std::slice::from_ref(key),
                    &[field, n.format(*holds).as_bytes(), t.format(px).as_bytes()],
                )
            }
        }
    }
}

/// Whether a member's answer to a repair write says it wrote: `OK` to `SET NX`, 1 to
/// [`HASH_REPAIR`].
fn written(r: &Reply) -> bool {
    r.is_ok() || *r == Reply::Integer(1)
}

/// A granted extension of one key, whose answers may still be coming in.
pub struct Extended {
    /// The lock's key.
    pub key: Bytes,
    /// What the lock is on a member.
    pub copy: LockCopy,
    /// The TTL the extension set, in ms.
    pub ttl_ms: i64,
    /// The extension's vote.
    pub vote: Vote,
    /// When the extension was sent: the validity clock's start.
    pub start: Instant,
    /// How its answers read.
    pub reading: Reading,
}

/// Whether a granted extension's `vote` may leave a repair to do (unless `quorum_repair` is
/// off): answers that came in since the decision count; with every member answered and none
/// missing the key, there is nothing to wait for and nothing to write (the usual case).
pub fn pending(proxy: &Proxy, vote: &mut Vote, reading: Reading) -> bool {
    if !proxy.config().quorum_repair {
        return false;
    }
    vote.absorb();
    let b = vote.ballots();
    let settled = (0..b.replies.len()).all(|i| b.replies[i].is_some() || b.failed[i].is_some());
    !settled || b.replies.iter().flatten().any(reading.missing)
}

/// After a granted extension: writes the lock back where [`plan`] says (unless `quorum_repair`
/// is off), in the key's turn (`held`, released once the writes are queued).
pub fn after(proxy: &Arc<Proxy>, mut e: Extended, held: Held) {
    if !pending(proxy, &mut e.vote, e.reading) {
        return;
    }
    let proxy = proxy.clone();
    tokio::spawn(async move {
        let masters = e.vote.masters().clone();
        let ballots = e.vote.finish().await;
        let cfg = proxy.config();
        let Some(p) = plan(
            &ballots,
            e.reading,
            e.ttl_ms,
            |i| masters[i].is_trusted(),
            e.start.elapsed(),
            cfg.drift_factor,
        ) else {
            return;
        };
        let write = e.copy.write(&e.key, p.px_ms);
        let asks: Vec<Option<Bytes>> = (0..masters.len())
            .map(|i| p.members.contains(&i).then(|| write.clone()))
            .collect();
        let sent = ask(
            &masters,
            Request::Some(asks),
            1,
            Instant::now() + cfg.node_timeout(),
        );
        // Queued on every member's connection: a later operation on the key comes after it.
        drop(held);
        let done = sent.finish().await.count(written);
        debug!(
            key = %e.key.escape_ascii(),
            asked = p.members.len(),
            written = done,
            px_ms = p.px_ms,
            "quorum repair"
        );
        if done > 0 {
            Counters::bump(&proxy.counters().locks_repaired);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::scripted::{ballots, joint};
    use Reply::Integer as I;

    const FAST: Duration = Duration::from_millis(10);
    const DRIFT: f64 = 0.01;

    fn all(_: usize) -> bool {
        true
    }

    #[test]
    fn members_that_answered_missing_get_the_validity_left() {
        // A and B extended to 1000 ms, C had no key: C gets 1000 − 10 − (10 + 2) ms.
        let b = ballots(vec![Some(I(1000)), Some(I(1000)), Some(I(-3))]);
        let p = plan(&b, EXTEND_READING, 0, all, FAST, DRIFT);
        assert_eq!(
            p,
            Some(Plan {
                members: vec![2],
                px_ms: 978
            })
        );
        // The quorum-th largest TTL decides (an `ExtendAdd` leaves the members apart): of
        // 5000, 800 and 3000 on five members, a quorum (three) hold at least 800.
        let b = ballots(vec![
            Some(I(5000)),
            Some(I(800)),
            Some(I(-3)),
            Some(I(3000)),
            Some(I(-3)),
        ]);
        let p = plan(&b, EXTEND_READING, 0, all, Duration::ZERO, DRIFT).expect("a repair");
        assert_eq!(p.members, vec![2, 4]);
        assert_eq!(p.px_ms, 800 - 10);
        // Never longer than what is left: time spent since the extension was sent counts.
        let b = ballots(vec![Some(I(1000)), Some(I(1000)), Some(I(-3))]);
        let later = plan(
            &b,
            EXTEND_READING,
            0,
            all,
            Duration::from_millis(500),
            DRIFT,
        );
        assert_eq!(later.map(|p| p.px_ms), Some(1000 - 500 - 12));
    }

    #[test]
    fn another_token_a_silent_member_and_an_untrusted_one_are_never_written() {
        // 0: another token, or many keys not all held: never touched.
        let b = ballots(vec![Some(I(1000)), Some(I(1000)), Some(I(0))]);
        assert_eq!(plan(&b, EXTEND_READING, 0, all, FAST, DRIFT), None);
        // No answer (down, slow, excluded as quarantined): not a candidate.
        let b = ballots(vec![Some(I(1000)), Some(I(1000)), None]);
        assert_eq!(plan(&b, EXTEND_READING, 0, all, FAST, DRIFT), None);
        // An error (a key of another type): not a candidate.
        let b = ballots(vec![
            Some(I(1000)),
            Some(I(1000)),
            Some(Reply::static_error("WRONGTYPE x")),
        ]);
        assert_eq!(plan(&b, EXTEND_READING, 0, all, FAST, DRIFT), None);
        // Missing, but not trusted now (quarantined since, or a duplicate): not written.
        let b = ballots(vec![Some(I(1000)), Some(I(1000)), Some(I(-3))]);
        assert_eq!(plan(&b, EXTEND_READING, 0, |i| i != 2, FAST, DRIFT), None);
        // With five: one missing trusted, one missing untrusted, one another token.
        let b = ballots(vec![
            Some(I(1000)),
            Some(I(1000)),
            Some(I(1000)),
            Some(I(-3)),
            Some(I(-3)),
        ]);
        let p = plan(&b, EXTEND_READING, 0, |i| i != 4, FAST, DRIFT);
        assert_eq!(p.map(|p| p.members), Some(vec![3]));
    }

    #[test]
    fn without_a_quorum_holding_the_lock_with_validity_left_nothing_is_written() {
        // One member extended: the caller is not the holder by quorum.
        let b = ballots(vec![Some(I(1000)), Some(I(-3)), Some(I(-3))]);
        assert_eq!(plan(&b, EXTEND_READING, 0, all, FAST, DRIFT), None);
        // A quorum extended, but the validity is used up.
        let b = ballots(vec![Some(I(100)), Some(I(100)), Some(I(-3))]);
        assert_eq!(
            plan(&b, EXTEND_READING, 0, all, Duration::from_millis(99), DRIFT),
            None
        );
        // Nothing missing: nothing to do.
        let b = ballots(vec![Some(I(1000)), Some(I(1000)), Some(I(1000))]);
        assert_eq!(plan(&b, EXTEND_READING, 0, all, FAST, DRIFT), None);
    }

    #[test]
    fn during_a_change_of_members_the_holder_needs_both_sides() {
        // {A,B,C} → {A,B,D}: A and C extended (a quorum of the old side only).
        let b = joint(
            vec![Some(I(1000)), Some(I(-3)), Some(I(1000)), Some(I(-3))],
            &[0, 1, 2],
            &[0, 1, 3],
        );
        assert_eq!(plan(&b, EXTEND_READING, 0, all, FAST, DRIFT), None);
        // A and B extended (both sides): C and D, missing, get it back.
        let b = joint(
            vec![Some(I(1000)), Some(I(1000)), Some(I(-3)), Some(I(-3))],
            &[0, 1, 2],
            &[0, 1, 3],
        );
        let p = plan(&b, EXTEND_READING, 0, all, FAST, DRIFT);
        assert_eq!(p.map(|p| p.members), Some(vec![2, 3]));
    }
}
