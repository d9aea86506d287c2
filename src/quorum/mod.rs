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
//!
//! A vote stops waiting at its deadline, told by the client task that polls it or else by the
//! masters' shared timer ([`crate::quorum::deadline`]); [`Vote::finish`] after a decision keeps
//! gathering until that same deadline, so a roll-back learns of every write that answered in
//! time.

pub(crate) mod deadline;
pub(crate) mod members;
pub mod rule;

use std::ops::Deref;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::backend::inbox::{ReplyRx, inbox};
use crate::backend::{Backend, BackendError};
use crate::wire::reply::Reply;
use deadline::{Alarm, Deadlines, Due};

pub use crate::lockop::{drift, quorum, quorum_th, validity};
pub use rule::Quorum;

/// The replies gathered from the masters, indexed by master. `None` means no vote: no reply yet,
/// down, timed out, or connection lost.
#[derive(Debug, Clone)]
pub struct Ballots {
    /// One entry per configured master.
    pub replies: Vec<Option<Reply>>,
    /// Why a master gave no reply, when it said so (down, connection lost); `None` together with
    /// no reply means it has not answered (yet). Kept inline for up to 16 masters: a vote
    /// allocates nothing for it.
    pub failed: SmallVec<[Option<BackendError>; 16]>,
    /// What makes a quorum of these masters: `⌊N/2⌋ + 1`, or during a change of the member
    /// set a quorum of the old members and one of the new ([`Quorum`]).
    pub quorum: Quorum,
    /// The masters the vote went to, once it is over ([`Vote::finish`], [`Vote::outcome`]):
    /// a clean-up decided from these ballots goes to the same masters.
    pub masters: Option<Masters>,
}

impl Ballots {
    /// The reply that at least a quorum of masters gave, if any.
    pub fn majority(&self) -> Option<&Reply> {
        self.tally_by(|r| r).map(|(r, _)| r)
    }

    /// The error that at least a quorum of masters answered alike (such as `WRONGTYPE` for a
    /// key of another type), if any: every command passes it on as one Redis would answer it.
    pub fn majority_error(&self) -> Option<&Reply> {
        self.majority().filter(|r| r.is_error())
    }

    /// Groups replies by `key` and returns the key that a quorum share, with how many share it.
    pub fn tally_by<'a, K: PartialEq + 'a>(
        &'a self,
        key: impl Fn(&'a Reply) -> K,
    ) -> Option<(K, usize)> {
        if self.quorum.is_joint() {
            return self.tally_joint(key);
        }
        let need = self.quorum.size();
        // N is small: comparing every pair beats collecting the keys (no allocation).
        let present = || self.replies.iter().flatten();
        for (i, r) in present().enumerate() {
            let k = key(r);
            if present().take(i).any(|o| key(o) == k) {
                continue;
            }
            let count = present().skip(i).filter(|o| key(o) == k).count();
            if count >= need {
                return Some((k, count));
            }
        }
        None
    }

    /// [`Ballots::tally_by`] during a transition: a group must meet both sides.
    fn tally_joint<'a, K: PartialEq + 'a>(
        &'a self,
        key: impl Fn(&'a Reply) -> K,
    ) -> Option<(K, usize)> {
        let n = self.replies.len();
        let of = |i: usize| self.replies[i].as_ref().map(&key);
        for i in 0..n {
            let Some(k) = of(i) else { continue };
            if (0..i).any(|j| of(j).as_ref() == Some(&k)) {
                continue;
            }
            let alike = |j: usize| of(j).as_ref() == Some(&k);
            if self.quorum.met(n, alike) {
                let count = (0..n).filter(|&j| alike(j)).count();
                return Some((k, count));
            }
        }
        None
    }

    /// True when the masters for which `who(i)` holds form a quorum.
    pub fn is_quorum(&self, who: impl Fn(usize) -> bool) -> bool {
        self.quorum.met(self.replies.len(), who)
    }

    /// True when the masters whose reply satisfies `pred` form a quorum.
    pub fn agree(&self, pred: impl Fn(&Reply) -> bool) -> bool {
        self.is_quorum(|i| self.replies[i].as_ref().is_some_and(&pred))
    }

    /// True when the masters for which `who(i)` holds could carry a grant, made here or by
    /// another proxy still on one side of a transition (see [`Quorum::could_hold`]).
    pub fn could_hold(&self, who: impl Fn(usize) -> bool) -> bool {
        self.quorum.could_hold(self.replies.len(), who)
    }

    /// The largest value (by `rank`) that a quorum of masters reach, from each master's
    /// `value(i, reply)` (see [`Quorum::th`]).
    pub fn quorum_th<T: Copy, K: Ord>(
        &self,
        value: impl Fn(usize, &Reply) -> Option<T>,
        rank: impl Fn(&T) -> K,
    ) -> Option<T> {
        let values = self
            .replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| value(i, r.as_ref()?).map(|v| (i, v)));
        self.quorum.th(values, rank)
    }

    /// Whether master `i` may still answer, while `pending` replies are due.
    fn waiting(&self, pending: usize, i: usize) -> bool {
        pending > 0 && self.replies[i].is_none() && self.failed[i].is_none()
    }

    /// [`Ballots::decided_by`] during a transition.
    fn decided_joint<K: PartialEq>(&self, pending: usize, key: &impl Fn(&Reply) -> K) -> bool {
        let n = self.replies.len();
        let keys: SmallVec<[Option<K>; 16]> =
            self.replies.iter().map(|r| r.as_ref().map(key)).collect();
        let group = |i: usize| {
            let k = keys[i].as_ref()?;
            (0..=i).find(|&j| keys[j].as_ref() == Some(k))
        };
        self.quorum.decided(n, group, |i| self.waiting(pending, i))
    }

    /// True when the outcome can no longer change: some reply has a quorum, or the largest
    /// group plus the masters yet to answer is below the quorum.
    fn decided(&self, pending: usize) -> bool {
        if self.quorum.is_joint() {
            return self.decided_joint(pending, &|r: &Reply| r.clone());
        }
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
        let need = self.quorum.size();
        best >= need || best + pending < need
    }

    /// [`Ballots::decided_by`] for a yes-or-no `key`, in one pass: the two groups are counted
    /// rather than each reply compared with every other (a vote is looked at on every answer).
    fn decided_yes(&self, pending: usize, yes: &impl Fn(&Reply) -> bool) -> bool {
        if self.quorum.is_joint() {
            return self.decided_joint(pending, yes);
        }
        let (mut ayes, mut noes) = (0, 0);
        for r in self.replies.iter().flatten() {
            if yes(r) {
                ayes += 1;
            } else {
                noes += 1;
            }
        }
        let best = ayes.max(noes);
        let need = self.quorum.size();
        best >= need || best + pending < need
    }

    /// [`Ballots::decided`] for replies grouped by `key` (e.g. "did this master say yes?").
    fn decided_by<K: PartialEq>(&self, pending: usize, key: &impl Fn(&Reply) -> K) -> bool {
        if self.quorum.is_joint() {
            return self.decided_joint(pending, key);
        }
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
        let need = self.quorum.size();
        best >= need || best + pending < need
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

    /// Which masters answered at all.
    pub fn answered(&self) -> impl Iterator<Item = usize> + '_ {
        self.replies
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some())
            .map(|(i, _)| i)
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

/// The configured masters, as every vote reaches them: one handle per master, and the
/// deadlines of the votes in progress on them, with their one timer ([`crate::quorum::deadline`]).
/// Dereferences to the handles; cloning shares them.
#[derive(Clone)]
pub struct Masters(Arc<MasterSet>);

struct MasterSet {
    backends: Box<[Backend]>,
    deadlines: Deadlines,
    /// What makes a quorum of them: during a change of members, the union's joint rule.
    rule: Quorum,
}

impl Masters {
    /// The masters `backends` (during a change of members, the union of the old set and the
    /// new), decided by `rule`.
    pub fn with_rule(backends: Vec<Backend>, rule: Quorum) -> Masters {
        Masters(Arc::new(MasterSet {
            backends: backends.into_boxed_slice(),
            deadlines: Deadlines::default(),
            rule,
        }))
    }

    /// What makes a quorum of these masters.
    pub fn rule(&self) -> Quorum {
        self.0.rule
    }

    /// True when the masters trusted now form a quorum: a lock can be granted.
    pub fn quorum_trusted(&self) -> bool {
        self.0
            .rule
            .met(self.len(), |i| self.0.backends[i].is_trusted())
    }
}

impl std::fmt::Debug for Masters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masters")
            .field(
                "addrs",
                &self.iter().map(|b| &b.info().addr).collect::<Vec<_>>(),
            )
            .field("rule", &self.0.rule)
            .finish()
    }
}

impl Deref for Masters {
    type Target = [Backend];

    fn deref(&self) -> &[Backend] {
        &self.0.backends
    }
}

impl FromIterator<Backend> for Masters {
    fn from_iter<I: IntoIterator<Item = Backend>>(iter: I) -> Masters {
        let backends: Box<[Backend]> = iter.into_iter().collect();
        let rule = Quorum::of(backends.len());
        Masters(Arc::new(MasterSet {
            backends,
            deadlines: Deadlines::default(),
            rule,
        }))
    }
}

/// A vote in progress: requests are queued on every master; replies are gathered on demand.
pub struct Vote {
    rx: ReplyRx,
    ballots: Ballots,
    pending: usize,
    /// The masters, to ask whether each is still trusted when its reply comes, and for their
    /// shared timer when no task watches this vote's deadline.
    masters: Masters,
    /// Whether each master was trusted when the request was sent.
    trusted: TrustedAtSend,
    /// When the vote stops waiting.
    deadline: Instant,
    /// The deadline as set with the masters' shared timer: only once the vote is polled by a
    /// task that does not watch it (see [`crate::quorum::deadline::due`]); cancelled on drop.
    alarm: Option<Alarm>,
}

/// Sends `request` (holding `replies` commands per master) to every master at once. The
/// request is queued on every master before this returns, so requests from one caller reach
/// each master in the order the caller made them.
pub fn ask(masters: &Masters, request: Request, replies: usize, deadline: Instant) -> Vote {
    fan_out(masters.clone(), request, replies, deadline, false)
}

/// Like [`ask`], and each master also reads its clock in the same round trip
/// ([`Backend::send_timed`]): a master whose clock just leapt casts no vote. Acquisitions use
/// this, so a clock jump is caught no later than the first acquisition it could affect.
pub fn ask_timed(masters: &Masters, request: Request, replies: usize, deadline: Instant) -> Vote {
    fan_out(masters.clone(), request, replies, deadline, true)
}

/// [`ask`] or (`timed`) [`ask_timed`] on a snapshot the vote keeps, for one reply per member:
/// the runner's ([`crate::command::runner`]) one way to ask.
pub fn ask_on(masters: Masters, request: Request, deadline: Instant, timed: bool) -> Vote {
    fan_out(masters, request, 1, deadline, timed)
}

fn fan_out(
    masters: Masters,
    mut request: Request,
    replies: usize,
    deadline: Instant,
    timed: bool,
) -> Vote {
    let (tx, rx) = inbox(masters.len());
    // The last master takes the fan-out's own sender; the others a clone.
    let mut tx = Some(tx);
    let trusted = TrustedAtSend::new(&masters);
    let n = masters.len();
    let mut failed = smallvec::smallvec![None; n];
    let mut pending = n;
    for (i, m) in masters.iter().enumerate() {
        let Some(bytes) = request.for_master(i, i + 1 == n) else {
            failed[i] = Some(BackendError::Down);
            pending -= 1;
            continue;
        };
        let sender = if i + 1 == n { tx.take() } else { tx.clone() };
        let reply_to = sender.map(|tx| (tx, i));
        if timed {
            m.send_timed(bytes, replies, reply_to);
        } else {
            m.send(bytes, replies, reply_to);
        }
    }
    Vote {
        rx,
        ballots: Ballots {
            replies: vec![None; n],
            failed,
            quorum: masters.0.rule,
            masters: None,
        },
        pending,
        masters,
        trusted,
        deadline,
        alarm: None,
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

    /// [`Vote::decide_by`] as a poll, for a hand-written future; once ready, the ballots are
    /// [`Vote::ballots`].
    pub fn poll_decide_by<K: PartialEq>(
        &mut self,
        cx: &mut Context<'_>,
        key: impl Fn(&Reply) -> K,
    ) -> Poll<()> {
        self.poll_gather(cx, |b, pending| b.decided_by(pending, &key))
    }

    /// [`Vote::outcome`] as a poll, for a hand-written future: until some reply has a quorum or
    /// none can get one any more.
    pub fn poll_outcome(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_gather(cx, |b, pending| b.decided(pending))
    }

    /// [`Vote::finish`] as a poll, for a hand-written future: until every reply still due is
    /// in, or the deadline.
    pub fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_gather(cx, |_, _| false)
    }

    /// Counts the replies that have already arrived, without waiting for more.
    pub fn absorb(&mut self) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Polled without a waker: a later wait on this vote registers its own.
        let _ = self.poll_gather(&mut cx, |_, _| false);
    }

    /// [`Vote::poll_decide_by`] for a yes-or-no `yes` (an acquisition's "created"), counted in
    /// one pass.
    pub fn poll_decide_yes(
        &mut self,
        cx: &mut Context<'_>,
        yes: impl Fn(&Reply) -> bool,
    ) -> Poll<()> {
        self.poll_gather(cx, |b, pending| b.decided_yes(pending, &yes))
    }

    /// The masters this vote was sent to: the snapshot every later step of the same operation
    /// (roll-back, clean-up) must use, so positions in the ballots name the same masters.
    pub fn masters(&self) -> &Masters {
        &self.masters
    }

    /// The replies gathered so far.
    pub fn ballots(&self) -> &Ballots {
        &self.ballots
    }

    /// Gathers every reply still due, until the deadline.
    pub async fn finish(mut self) -> Ballots {
        self.gather(|_, _| false).await;
        self.take_ballots()
    }

    /// Decides and returns the ballots, dropping replies that arrive later.
    pub async fn outcome(mut self) -> Ballots {
        self.gather(|b, pending| b.decided(pending)).await;
        self.take_ballots()
    }

    fn take_ballots(&mut self) -> Ballots {
        let none = Ballots {
            replies: Vec::new(),
            failed: SmallVec::new(),
            quorum: self.ballots.quorum,
            masters: None,
        };
        let mut ballots = std::mem::replace(&mut self.ballots, none);
        ballots.masters = Some(self.masters.clone());
        ballots
    }

    /// Gathers replies until `done(ballots, pending)` holds, nothing is pending, or the deadline.
    /// Replies that reached the inbox before the deadline still count, even if the vote looks
    /// only after it; none that come later do, in this gather or a later one.
    async fn gather(&mut self, done: impl Fn(&Ballots, usize) -> bool) {
        std::future::poll_fn(|cx| self.poll_gather(cx, &done)).await
    }

    /// One poll of [`Vote::gather`].
    fn poll_gather(
        &mut self,
        cx: &mut Context<'_>,
        done: impl Fn(&Ballots, usize) -> bool,
    ) -> Poll<()> {
        if self.pending == 0 || done(&self.ballots, self.pending) {
            return Poll::Ready(());
        }
        let Vote {
            rx,
            ballots,
            pending,
            masters,
            trusted,
            deadline,
            alarm,
        } = self;
        // Counted as they are taken from the inbox, with no list in between.
        let counted = rx.poll_each(cx, |(i, result)| {
            // A master that failed is a definite "no" and no longer pending.
            *pending -= 1;
            match result {
                Ok(r) if trusted.get(i) && masters[i].is_trusted() => ballots.replies[i] = Some(r),
                Ok(_) => ballots.failed[i] = Some(BackendError::Excluded),
                Err(e) => ballots.failed[i] = Some(e),
            }
            *pending == 0 || done(ballots, *pending)
        });
        if counted.is_ready() {
            return Poll::Ready(());
        }
        match deadline::due(*deadline) {
            Due::Watched => Poll::Pending,
            Due::Passed => {
                // What arrived was counted above; what comes later is dropped.
                rx.expire();
                Poll::Ready(())
            }
            Due::Unwatched => {
                if alarm.is_none() {
                    *alarm = Some(masters.0.deadlines.set(*deadline, rx.sender()));
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Vote {
    // Inlined: on the hot path a vote usually has no alarm, and the call alone cost more than
    // the test (callgrind; it stayed out of line once other code changed around it).
    #[inline]
    fn drop(&mut self) {
        // A vote that ends before its deadline frees the timer's hold on its inbox now.
        if let Some(alarm) = self.alarm {
            self.masters.0.deadlines.cancel(alarm);
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
    use super::{Ballots, Quorum};
    use crate::wire::reply::Reply;

    /// Ballots with one reply (or none yet) per master, every master reachable.
    pub(crate) fn ballots(replies: Vec<Option<Reply>>) -> Ballots {
        let n = replies.len();
        Ballots {
            replies,
            failed: smallvec::smallvec![None; n],
            quorum: Quorum::of(n),
            masters: None,
        }
    }

    /// Ballots of a vote during a change of members: positions `old` and `new` of the union.
    pub(crate) fn joint(replies: Vec<Option<Reply>>, old: &[usize], new: &[usize]) -> Ballots {
        Ballots {
            quorum: Quorum::joint(old, new),
            ..ballots(replies)
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
    fn the_one_pass_yes_or_no_decision_is_the_grouped_one() {
        // Every mix of yes, no and unanswered for one to five masters, with every count of
        // masters still pending among the unanswered.
        let yes = |r: &Reply| *r == Reply::ok();
        for n in 1..=5u32 {
            for mix in 0..3u32.pow(n) {
                let replies: Vec<Option<Reply>> = (0..n)
                    .map(|i| match mix / 3u32.pow(i) % 3 {
                        0 => None,
                        1 => Some(Reply::ok()),
                        _ => Some(Reply::Nil),
                    })
                    .collect();
                let unanswered = replies.iter().filter(|r| r.is_none()).count();
                let b = scripted::ballots(replies);
                for pending in 0..=unanswered {
                    assert_eq!(
                        b.decided_yes(pending, &yes),
                        b.decided_by(pending, &yes),
                        "{:?}, {pending} pending",
                        b.replies
                    );
                }
            }
        }
    }

    #[test]
    fn quorum_th_is_what_a_quorum_reach() {
        assert_eq!(super::quorum_th(2, vec![5, 9, 7], |v| *v), Some(7));
        assert_eq!(super::quorum_th(3, vec![5, 9], |v| *v), None);
        // Ranked otherwise: no expiry (-1) counts as the longest.
        let rank = |v: &i64| if *v == -1 { i64::MAX } else { *v };
        assert_eq!(super::quorum_th(2, vec![-1, 4, -1], rank), Some(-1));
    }

    use super::*;
    use std::time::Duration;

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
    fn during_a_change_a_decision_needs_both_sides() {
        // {A,B,C} → {A,B,D}, union A0 B1 C2 D3.
        let (old, new) = ([0, 1, 2], [0, 1, 3]);
        let ok = || Some(Reply::ok());
        let nil = || Some(Reply::Nil);
        let yes = |r: &Reply| *r == Reply::ok();
        // A and C: a quorum of the old set only.
        let b = scripted::joint(vec![ok(), nil(), ok(), nil()], &old, &new);
        assert_eq!(b.majority(), None);
        assert!(!b.agree(yes));
        assert!(b.decided_yes(0, &yes), "nothing is pending: refused");
        assert!(b.decided(0));
        // A and D answered yes, B and C pending: still open (B would make both sides).
        let b = scripted::joint(vec![ok(), None, None, ok()], &old, &new);
        assert!(!b.decided_yes(2, &yes));
        assert!(!b.decided(2));
        // A and B: both sides.
        let b = scripted::joint(vec![ok(), ok(), None, None], &old, &new);
        assert!(b.agree(yes));
        assert!(b.decided_yes(2, &yes));
        assert_eq!(b.majority(), Some(&Reply::ok()));
        assert_eq!(b.tally_by(|r| r), Some((&Reply::ok(), 2)));
        // A clean-up must assume a grant of either side alone could live on C and D.
        let unknown = scripted::joint(vec![ok(), nil(), None, None], &old, &new);
        assert!(!unknown.is_quorum(|i| unknown.replies[i].is_none()));
        assert!(!unknown.could_hold(|i| unknown.replies[i].is_none()));
        let unknown = scripted::joint(vec![ok(), None, None, None], &old, &new);
        assert!(unknown.could_hold(|i| unknown.replies[i].is_none()));
        // The TTL a quorum of both sides still hold.
        let ttls = scripted::joint(
            [100, 50, 90, 10].map(|t| Some(Reply::Integer(t))).to_vec(),
            &old,
            &new,
        );
        let int = |_, r: &Reply| match r {
            Reply::Integer(n) => Some(*n),
            _ => None,
        };
        assert_eq!(ttls.quorum_th(int, |t| *t), Some(50));
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

/// How a vote waits: its deadline, the decision, and what `finish` gathers after it.
#[cfg(test)]
mod waiting {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::{Instant, timeout};

    use super::*;
    use crate::backend::Settings;
    use crate::backend::inbox::ReplyTx;

    const TIMEOUT: Duration = Duration::from_millis(50);

    /// No handles: a vote's deadline is all these tests need of its masters.
    fn no_masters() -> Masters {
        std::iter::empty().collect()
    }

    /// A vote on `n` masters that were sent nothing: only what the test delivers through the
    /// returned sender (failures: there are no handles to ask about trust) and the deadline
    /// end its waits.
    fn silent_vote(masters: &Masters, n: usize, deadline: Instant) -> (Vote, ReplyTx) {
        let masters = masters.clone();
        let (tx, rx) = inbox(n);
        let vote = Vote {
            rx,
            ballots: scripted::ballots(vec![None; n]),
            pending: n,
            masters,
            trusted: TrustedAtSend {
                bits: u64::MAX,
                rest: Vec::new(),
            },
            deadline,
            alarm: None,
        };
        (vote, tx)
    }

    /// Awaits `f`, failing the test if that takes more than an hour: without the deadline's
    /// delivery a vote on a mute master would wait for ever (and paused time gets to the hour
    /// at once).
    async fn within<T>(f: impl Future<Output = T>) -> T {
        timeout(Duration::from_secs(3600), f)
            .await
            .expect("the vote ended by its deadline")
    }

    /// Sends `slot` a failure at `at`, from another task.
    fn answer_at(tx: &ReplyTx, slot: usize, at: Instant) {
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            tx.send(slot, Err(BackendError::Closed));
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_vote_stops_at_its_deadline_when_a_master_never_answers() {
        let start = Instant::now();
        let deadline = start + TIMEOUT;
        let (mut vote, tx) = silent_vote(&no_masters(), 3, deadline);
        tx.send(0, Err(BackendError::Closed));
        let ballots = within(vote.decide()).await;
        assert_eq!(ballots.failed[0], Some(BackendError::Closed));
        assert_eq!(ballots.failed[1..], [None, None]);
        let ended = Instant::now();
        assert!(
            ended >= deadline && ended < deadline + Duration::from_millis(1),
            "ended {:?} after the start",
            ended - start
        );
        // A master answering after the deadline is not counted, and the deadline ends every
        // later wait at once.
        tx.send(1, Err(BackendError::Closed));
        assert_eq!(within(vote.finish()).await.failed[1..], [None, None]);
        assert_eq!(Instant::now(), ended);
    }

    #[tokio::test(start_paused = true)]
    async fn finish_after_a_decision_gathers_until_the_same_deadline() {
        let start = Instant::now();
        let (mut vote, tx) = silent_vote(&no_masters(), 3, start + TIMEOUT);
        tx.send(0, Err(BackendError::Closed));
        tx.send(1, Err(BackendError::Closed));
        // Two failed: nothing can reach 2 of 3 any more, decided at once.
        within(vote.decide()).await;
        assert_eq!(Instant::now(), start);
        // The last master answers after the decision but before the deadline: counted.
        answer_at(&tx, 2, start + TIMEOUT / 2);
        let ballots = within(vote.finish()).await;
        assert_eq!(ballots.failed[2], Some(BackendError::Closed));
        assert_eq!(Instant::now(), start + TIMEOUT / 2);

        // Again, the last master answering after the deadline: `finish` stops at the deadline
        // without it.
        let start = Instant::now();
        let (mut vote, tx) = silent_vote(&no_masters(), 3, start + TIMEOUT);
        tx.send(0, Err(BackendError::Closed));
        tx.send(1, Err(BackendError::Closed));
        within(vote.decide()).await;
        answer_at(&tx, 2, start + TIMEOUT * 2);
        let ballots = within(vote.finish()).await;
        assert_eq!(ballots.failed[2], None);
        assert_eq!(Instant::now(), start + TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn absorb_counts_what_has_arrived_and_waits_for_nothing() {
        let start = Instant::now();
        let (mut vote, tx) = silent_vote(&no_masters(), 3, start + TIMEOUT);
        tx.send(0, Err(BackendError::Closed));
        tx.send(1, Err(BackendError::Closed));
        within(vote.decide()).await;
        // Arrived after the decision: not in the ballots until they are looked at.
        tx.send(2, Err(BackendError::Closed));
        assert_eq!(vote.ballots().failed[2], None);
        vote.absorb();
        assert_eq!(vote.ballots().failed[2], Some(BackendError::Closed));
        assert_eq!(Instant::now(), start);
        // Nothing more to come: the vote is over without waiting for its deadline.
        within(vote.finish()).await;
        assert_eq!(Instant::now(), start);
    }

    #[tokio::test(start_paused = true)]
    async fn votes_with_other_timeouts_keep_their_own_deadlines() {
        let start = Instant::now();
        let masters = no_masters();
        let long = silent_vote(&masters, 1, start + TIMEOUT * 20);
        let short = silent_vote(&masters, 1, start + TIMEOUT);
        // A deadline earlier than all queued must still wake the timer in time.
        let (mut first, _tx) = short;
        within(first.decide()).await;
        assert_eq!(Instant::now(), start + TIMEOUT);
        let (mut last, _tx) = long;
        within(last.decide()).await;
        assert_eq!(Instant::now(), start + TIMEOUT * 20);
    }

    /// A master that completes the proxy's greeting and then never answers anything.
    async fn mute_master() -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    // The greeting is `INFO server`, `ROLE`, `INFO persistence`, in that order.
                    let info = "run_id:mute\r\nuptime_in_seconds:3600\r\n";
                    let hello = format!(
                        "${}\r\n{info}\r\n*1\r\n$6\r\nmaster\r\n${}\r\n{info}\r\n",
                        info.len(),
                        info.len()
                    );
                    if s.write_all(hello.as_bytes()).await.is_err() {
                        return;
                    }
                    let mut buf = [0u8; 4096];
                    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        addr
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_ask_to_a_mute_master_ends_at_the_deadline_on_worker_threads() {
        let masters: Masters = [crate::backend::kind::standalone::member(
            mute_master().await,
            Settings::for_tests(),
        )]
        .into_iter()
        .collect();
        for _ in 0..200 {
            if masters[0].is_trusted() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(masters[0].is_trusted(), "{}", masters[0].info().describe());
        // Several at once, from tasks on either worker: every one ends at its own deadline.
        let mut tasks = Vec::new();
        for i in 0..8u64 {
            let masters = masters.clone();
            tasks.push(tokio::spawn(async move {
                let start = Instant::now();
                let deadline = start + TIMEOUT + Duration::from_millis(i);
                let set = crate::wire::master::command(&[b"SET", b"k", b"v"]);
                let vote = ask(&masters, Request::Same(set), 1, deadline);
                let ballots = timeout(Duration::from_secs(5), vote.outcome())
                    .await
                    .expect("the vote ended at its deadline");
                let ended = Instant::now();
                assert!(ended >= deadline, "ended {:?} early", deadline - ended);
                assert!(ended < deadline + Duration::from_secs(2), "{ended:?}");
                assert_eq!(ballots.replies[0], None);
                assert_eq!(ballots.failed[0], None, "no answer is no failure");
                assert!(ballots.may_have_run(0));
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }
}
