//! The Redlock decision: quorum arithmetic, validity time, and one fan-out with one majority rule
//! that every command shares.
//!
//! [`ask`] sends a request to all N masters at once and counts identical replies (after an
//! optional projection, see [`Ballots::tally_by`]). It returns as soon as the outcome is known:
//! when some reply has a quorum, or when the masters still pending can no longer give any reply
//! a quorum, or at the per-node deadline. Masters that are down, slow or that failed simply cast
//! no vote. The quorum is always `⌊N/2⌋ + 1` of the *configured* N.
//!
//! Only trusted masters vote. A master that is quarantined (it restarted and may have lost
//! locks) or clock-suspect (its clock jumped) still receives every request, so writes and
//! clean-ups reach all N, but its reply is recorded as [`BackendError::Excluded`] instead of a
//! vote. Trust is judged twice: when the request is sent and when the reply arrives, so a reply
//! counts only if its master was trusted throughout. The quorum does not shrink with the
//! excluded masters: with too many of them, nothing is granted.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, sleep_until};

use crate::backend::{Backend, BackendError};
use crate::inbox::{Delivery, ReplyRx, inbox};
use crate::reply::Reply;

/// `⌊n/2⌋ + 1`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Clock drift allowance for a TTL: `ttl × drift_factor + 2 ms` (Redis expires keys with 1 ms
/// precision, plus 1 ms).
pub fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    ttl.mul_f64(drift_factor) + Duration::from_millis(2)
}

/// Remaining validity of a lock: `ttl − elapsed − drift`, or `None` when nothing is left.
pub fn validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl, drift_factor))
}

/// The quorum-th largest of `values` by `rank`: the most that at least `quorum` of them reach
/// (the TTL a quorum of masters still hold, say). `None` with fewer than `quorum` values.
pub fn quorum_th<T: Copy, K: Ord>(
    quorum: usize,
    mut values: Vec<T>,
    rank: impl Fn(&T) -> K,
) -> Option<T> {
    values.sort_unstable_by_key(|v| std::cmp::Reverse(rank(v)));
    values.get(quorum.checked_sub(1)?).copied()
}

/// The replies gathered from the masters, indexed by master. `None` means no vote: no reply yet,
/// down, timed out, or connection lost.
#[derive(Debug, Clone)]
pub struct Ballots {
    /// One entry per configured master.
    pub replies: Vec<Option<Reply>>,
    /// Why a master gave no reply, when it said so (down, connection lost); `None` together with
    /// no reply means it has not answered (yet).
    pub failed: Vec<Option<BackendError>>,
    /// The quorum for this set of masters.
    pub quorum: usize,
}

impl Ballots {
    /// The reply that at least a quorum of masters gave, if any.
    pub fn majority(&self) -> Option<&Reply> {
        self.tally_by(|r| r).map(|(r, _)| r)
    }

    /// Groups replies by `key` and returns the key that a quorum share, with how many share it.
    pub fn tally_by<'a, K: PartialEq + 'a>(
        &'a self,
        key: impl Fn(&'a Reply) -> K,
    ) -> Option<(K, usize)> {
        // N is small: comparing every pair beats collecting the keys (no allocation).
        let present = || self.replies.iter().flatten();
        for (i, r) in present().enumerate() {
            let k = key(r);
            if present().take(i).any(|o| key(o) == k) {
                continue;
            }
            let count = present().skip(i).filter(|o| key(o) == k).count();
            if count >= self.quorum {
                return Some((k, count));
            }
        }
        None
    }

    /// True when the outcome can no longer change: some reply has a quorum, or the largest
    /// group plus the masters yet to answer is below the quorum.
    fn decided(&self, pending: usize) -> bool {
        let mut best = 0;
        for (i, r) in self.replies.iter().enumerate() {
            let Some(r) = r else { continue };
            let same = self.replies[i..]
                .iter()
                .flatten()
                .filter(|o| *o == r)
                .count();
            best = best.max(same);
        }
        best >= self.quorum || best + pending < self.quorum
    }

    /// [`Ballots::decided`] for replies grouped by `key` (e.g. "did this master say yes?").
    fn decided_by<K: PartialEq>(&self, pending: usize, key: &impl Fn(&Reply) -> K) -> bool {
        let mut best = 0;
        for (i, r) in self.replies.iter().enumerate() {
            let Some(r) = r else { continue };
            let k = key(r);
            let same = self.replies[i..]
                .iter()
                .flatten()
                .filter(|o| key(o) == k)
                .count();
            best = best.max(same);
        }
        best >= self.quorum || best + pending < self.quorum
    }

    /// The integer replies, one per master that gave one.
    pub fn integers(&self) -> impl Iterator<Item = i64> + '_ {
        self.replies.iter().flatten().filter_map(|r| match r {
            Reply::Integer(n) => Some(*n),
            _ => None,
        })
    }

    /// How many masters gave a reply for which `pred` holds.
    pub fn count(&self, pred: impl Fn(&Reply) -> bool) -> usize {
        self.replies.iter().flatten().filter(|r| pred(r)).count()
    }

    /// True when master `i` may have executed the request: it replied (counted or not), or it
    /// was sent the request and has not answered (a timed-out or cut-off request may still have
    /// run).
    pub fn may_have_run(&self, i: usize) -> bool {
        !matches!(
            self.failed[i],
            Some(BackendError::Down | BackendError::Overloaded)
        )
    }

    /// Which masters answered with `reply`.
    pub fn who_said(&self, reply: &Reply) -> impl Iterator<Item = usize> + '_ {
        let reply = reply.clone();
        self.replies
            .iter()
            .enumerate()
            .filter(move |(_, r)| r.as_ref() == Some(&reply))
            .map(|(i, _)| i)
    }
}

/// How a request reaches each master.
pub enum Request {
    /// The same bytes to every master.
    Same(Bytes),
    /// Different bytes per master (index = master).
    Each(Vec<Bytes>),
    /// Only to some masters; the others are not asked and count as not sent (`Down`).
    Some(Vec<Option<Bytes>>),
}

impl Request {
    /// The bytes for master `i`; the last master (`last`) gets them moved, not shared, so a
    /// request to one master costs no reference counting.
    fn for_master(&mut self, i: usize, last: bool) -> Option<Bytes> {
        match self {
            Request::Same(b) if last => Some(std::mem::take(b)),
            Request::Same(b) => Some(b.clone()),
            Request::Each(v) => Some(std::mem::take(&mut v[i])),
            Request::Some(v) => v[i].take(),
        }
    }
}

/// Whether each master was trusted when a request was sent: a bit per master, and a list only
/// past the 64th (so a vote allocates nothing for this).
struct TrustedAtSend {
    bits: u64,
    rest: Vec<bool>,
}

impl TrustedAtSend {
    fn new(masters: &[Backend]) -> TrustedAtSend {
        let mut bits = 0;
        for (i, m) in masters.iter().take(64).enumerate() {
            bits |= u64::from(m.is_trusted()) << i;
        }
        let rest = masters.iter().skip(64).map(Backend::is_trusted).collect();
        TrustedAtSend { bits, rest }
    }

    fn get(&self, i: usize) -> bool {
        match i.checked_sub(64) {
            None => self.bits & (1 << i) != 0,
            Some(j) => self.rest[j],
        }
    }
}

/// A vote in progress: requests are queued on every master; replies are gathered on demand.
pub struct Vote {
    rx: ReplyRx,
    /// Replies taken from the inbox, not yet counted.
    arrived: Vec<Delivery>,
    ballots: Ballots,
    pending: usize,
    deadline: Instant,
    /// The masters, to ask whether each is still trusted when its reply comes.
    masters: Arc<[Backend]>,
    /// Whether each master was trusted when the request was sent.
    trusted: TrustedAtSend,
}

/// Sends `request` (holding `replies` commands per master) to every master at once. The
/// request is queued on every master before this returns, so requests from one caller reach
/// each master in the order the caller made them.
pub fn ask(masters: &Arc<[Backend]>, request: Request, replies: usize, deadline: Instant) -> Vote {
    fan_out(masters, request, replies, deadline, false)
}

/// Like [`ask`], and each master also reads its clock in the same round trip
/// ([`Backend::send_timed`]): a master whose clock just leapt casts no vote. Acquisitions use
/// this, so a clock jump is caught no later than the first acquisition it could affect.
pub fn ask_timed(
    masters: &Arc<[Backend]>,
    request: Request,
    replies: usize,
    deadline: Instant,
) -> Vote {
    fan_out(masters, request, replies, deadline, true)
}

fn fan_out(
    masters: &Arc<[Backend]>,
    mut request: Request,
    replies: usize,
    deadline: Instant,
    timed: bool,
) -> Vote {
    let (tx, rx) = inbox(masters.len());
    let trusted = TrustedAtSend::new(masters);
    let n = masters.len();
    let mut failed = vec![None; n];
    let mut pending = n;
    for (i, m) in masters.iter().enumerate() {
        let Some(bytes) = request.for_master(i, i + 1 == n) else {
            failed[i] = Some(BackendError::Down);
            pending -= 1;
            continue;
        };
        let reply_to = Some((tx.clone(), i));
        if timed {
            m.send_timed(bytes, replies, reply_to);
        } else {
            m.send(bytes, replies, reply_to);
        }
    }
    Vote {
        rx,
        // Swapped with the inbox's list on each drain: no allocation of its own.
        arrived: Vec::new(),
        ballots: Ballots {
            replies: vec![None; n],
            failed,
            quorum: quorum(n),
        },
        pending,
        deadline,
        masters: masters.clone(),
        trusted,
    }
}

impl Vote {
    /// Gathers replies until the outcome is decided (see the module docs) or the deadline.
    pub async fn decide(&mut self) -> &Ballots {
        self.gather(|b, pending| b.decided(pending)).await;
        &self.ballots
    }

    /// Like [`Vote::decide`], but replies that `key` maps to the same value count as the same
    /// vote (e.g. every "yes" of an acquisition, whatever detail each master added).
    pub async fn decide_by<K: PartialEq>(&mut self, key: impl Fn(&Reply) -> K) -> &Ballots {
        self.gather(|b, pending| b.decided_by(pending, &key)).await;
        &self.ballots
    }

    /// Gathers every reply still due, until the deadline.
    pub async fn finish(mut self) -> Ballots {
        self.gather(|_, _| false).await;
        self.ballots
    }

    /// Decides and returns the ballots, dropping replies that arrive later.
    pub async fn outcome(mut self) -> Ballots {
        self.gather(|b, pending| b.decided(pending)).await;
        self.ballots
    }

    /// Gathers replies until `done(ballots, pending)` holds, nothing is pending, or the deadline.
    async fn gather(&mut self, done: impl Fn(&Ballots, usize) -> bool) {
        let sleep = sleep_until(self.deadline);
        tokio::pin!(sleep);
        while self.pending > 0 && !done(&self.ballots, self.pending) {
            if let Some((i, result)) = self.arrived.pop() {
                // A master that failed is a definite "no" and no longer pending.
                self.pending -= 1;
                match result {
                    Ok(r) if self.trusted.get(i) && self.masters[i].is_trusted() => {
                        self.ballots.replies[i] = Some(r)
                    }
                    Ok(_) => self.ballots.failed[i] = Some(BackendError::Excluded),
                    Err(e) => self.ballots.failed[i] = Some(e),
                }
                continue;
            }
            let (rx, arrived) = (&mut self.rx, &mut self.arrived);
            tokio::select! {
                _ = std::future::poll_fn(|cx| rx.poll_drain(cx, arrived)) => {}
                _ = &mut sleep => break,
            }
        }
    }
}

/// Sends `request` to every master without waiting for replies (releases and rollbacks).
pub fn tell_all(masters: &[Backend], mut request: Request, replies: usize) {
    let n = masters.len();
    for (i, m) in masters.iter().enumerate() {
        if let Some(bytes) = request.for_master(i, i + 1 == n) {
            m.send(bytes, replies, None);
        }
    }
}

/// Scripted masters' answers for the decision tests here and in `command`.
#[cfg(test)]
pub(crate) mod scripted {
    use super::{Ballots, quorum};
    use crate::reply::Reply;

    /// Ballots with one reply (or none yet) per master, every master reachable.
    pub(crate) fn ballots(replies: Vec<Option<Reply>>) -> Ballots {
        let n = replies.len();
        Ballots {
            replies,
            failed: vec![None; n],
            quorum: quorum(n),
        }
    }

    /// A master's per-key codes, as the proxy's multi-key scripts answer.
    pub(crate) fn codes(c: &[i64]) -> Option<Reply> {
        Some(Reply::Array(c.iter().map(|&n| Reply::Integer(n)).collect()))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quorum_th_is_what_a_quorum_reach() {
        assert_eq!(super::quorum_th(2, vec![5, 9, 7], |v| *v), Some(7));
        assert_eq!(super::quorum_th(3, vec![5, 9], |v| *v), None);
        // Ranked otherwise: no expiry (-1) counts as the longest.
        let rank = |v: &i64| if *v == -1 { i64::MAX } else { *v };
        assert_eq!(super::quorum_th(2, vec![-1, 4, -1], rank), Some(-1));
    }

    use super::*;

    #[test]
    fn quorum_of_configured_n() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let ttl = Duration::from_millis(10_000);
        assert_eq!(drift(ttl, 0.01), Duration::from_millis(102));
        assert_eq!(
            validity(ttl, Duration::from_millis(100), 0.01),
            Some(Duration::from_millis(9_798))
        );
        assert_eq!(validity(ttl, Duration::from_millis(9_950), 0.01), None);
        assert_eq!(
            validity(Duration::from_millis(1), Duration::ZERO, 0.0),
            None
        );
    }

    use super::scripted::ballots;

    #[test]
    fn majority_needs_quorum_of_all_masters() {
        let ok = Some(Reply::ok());
        let b = ballots(vec![ok.clone(), ok.clone(), None, None, None]);
        assert_eq!(
            b.majority(),
            None,
            "2 of 5 is not a majority even if 3 are down"
        );
        let b = ballots(vec![
            ok.clone(),
            ok.clone(),
            ok.clone(),
            Some(Reply::Nil),
            None,
        ]);
        assert_eq!(b.majority(), Some(&Reply::ok()));
        assert_eq!(b.who_said(&Reply::ok()).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn decides_early() {
        let ok = Some(Reply::ok());
        let nil = Some(Reply::Nil);
        assert!(ballots(vec![ok.clone(), ok.clone(), None]).decided(1));
        assert!(!ballots(vec![ok.clone(), nil.clone(), None]).decided(1));
        assert!(ballots(vec![ok.clone(), nil.clone(), Some(Reply::Integer(1))]).decided(0));
        assert!(!ballots(vec![ok.clone(), nil.clone(), nil.clone(), None, None]).decided(2));
        // Two masters failed, two split: nobody can reach 3 of 5 any more.
        assert!(ballots(vec![ok, nil, None, None, None]).decided(1));
    }

    #[test]
    fn tally_finds_the_group_with_a_quorum_wherever_it_starts() {
        let b = ballots(vec![
            Some(Reply::Nil),
            Some(Reply::Integer(1)),
            None,
            Some(Reply::Integer(2)),
            Some(Reply::Integer(3)),
        ]);
        let int = |r: &Reply| matches!(r, Reply::Integer(_));
        assert_eq!(b.tally_by(int), Some((true, 3)));
        assert_eq!(b.tally_by(|r| r), None);
        assert!(b.decided_by(1, &int));
        assert!(!ballots(vec![Some(Reply::Nil), None, None]).decided_by(2, &int));
    }

    #[test]
    fn decides_early_by_projection() {
        let yes = |r: &Reply| matches!(r, Reply::Integer(n) if *n > 0);
        let b = ballots(vec![
            Some(Reply::Integer(900)),
            Some(Reply::Integer(901)),
            None,
        ]);
        assert!(!b.decided(1), "different replies");
        assert!(b.decided_by(1, &yes), "but both are yes");
        assert_eq!(b.count(yes), 2);
    }
}
