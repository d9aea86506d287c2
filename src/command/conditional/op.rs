//! The conditional commands' operations, as the runner's phases (see [`crate::command::runner`]):
//! a conditional `SET` ([`CondSet`]) and delete ([`CondDel`]), each sent as [`super::rules::COND_SET`]
//! or [`super::rules::COND_DEL`] per member ([`Plan`]), and for a digest condition the read of each
//! member's value that plans it first ([`ReadFirst`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;

use super::rules::{COND_DEL, COND_SET, RESTORE, Write, deleted, holds, new_ttl_of};
use super::rules::{not_set_reply, repairs, set_reply, wrote};
use crate::command::action::Later;
use crate::command::keys::{Cond, guard_px};
use crate::command::lock::agreed_error;
use crate::command::runner::{self, Clock, Operation, Voted, take_back};
use crate::config::Config;
use crate::counters::Counters;
use crate::keylock::Held;
use crate::lockop::{Holder, Lock, Verb};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote};
use crate::wire::master::{command, eval};
use crate::wire::reply::Reply;

/// What each member is sent, as the mode and argument of its script, and what the members
/// not asked count as.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// Every member the same (`IFEQ`, `IFNE`).
    Every(&'static [u8], Bytes),
    /// A digest condition, planned from each member's value (see [`ReadFirst`]): the mode and
    /// argument per member (`None`: not asked), and the answer each member not asked counts
    /// as (the condition failed on the value read there).
    Each(Vec<Option<(&'static [u8], Bytes)>>, Vec<Option<Reply>>),
}

impl Plan {
    /// The plan of a value condition (`IFEQ`, `IFNE`); `None` for a digest condition, which
    /// needs each member's value first ([`Plan::read`]).
    pub(super) fn every(cond: &Cond) -> Option<Plan> {
        match cond {
            Cond::Eq(m) => Some(Plan::Every(b"1", m.clone())),
            Cond::Ne(m) => Some(Plan::Every(b"2", m.clone())),
            Cond::DigestEq(_) | Cond::DigestNe(_) => None,
        }
    }

    /// The plan of `cond` from the values `read` on each member: where it holds on the value,
    /// the member is asked to act only while the key still holds exactly that value (mode
    /// `1`), so a value that changed in between is left alone; where it holds on a missing key
    /// and `missing` says so, only while the key is still missing (mode `3`); elsewhere the
    /// member is not asked, and counts as `refused(value read)`. A member whose read gave no
    /// value (an error, no answer) is neither asked nor counted.
    fn read(cond: &Cond, read: &Ballots, missing: bool, refused: fn(Reply) -> Reply) -> Plan {
        let n = read.replies.len();
        let (mut asks, mut known) = (vec![None; n], vec![None; n]);
        for (i, r) in read.replies.iter().enumerate() {
            match r {
                Some(Reply::Bulk(v)) if holds(cond, &Reply::Bulk(v.clone())) => {
                    asks[i] = Some((&b"1"[..], v.clone()));
                }
                Some(Reply::Nil) if missing && holds(cond, &Reply::Nil) => {
                    asks[i] = Some((&b"3"[..], Bytes::new()));
                }
                Some(old @ (Reply::Bulk(_) | Reply::Nil)) => known[i] = Some(refused(old.clone())),
                _ => {}
            }
        }
        Plan::Each(asks, known)
    }

    /// The request: `script(mode, argument)` to each member asked.
    fn request(&self, script: impl Fn(&[u8], &[u8]) -> Bytes) -> Request {
        match self {
            Plan::Every(mode, arg) => Request::Same(script(mode, arg)),
            Plan::Each(asks, _) => Request::Some(
                asks.iter()
                    .map(|a| a.as_ref().map(|(mode, arg)| script(mode, arg)))
                    .collect(),
            ),
        }
    }

    /// `ballots`, with the answers the members not asked count as.
    fn counted<'a>(&self, ballots: &'a Ballots) -> Cow<'a, Ballots> {
        let Plan::Each(_, known) = self else {
            return Cow::Borrowed(ballots);
        };
        let mut b = ballots.clone();
        for (i, k) in known.iter().enumerate() {
            if let Some(k) = k {
                b.replies[i] = Some(k.clone());
            }
        }
        Cow::Owned(b)
    }
}

/// A conditional command on one key, planned from each member's value when its condition is a
/// digest (Lua on the masters cannot compute XXH3).
pub(super) trait Planned: Operation + Sync {
    /// The command before its plan.
    type Parts: Send + Sync + Unpin + 'static;

    /// Its key.
    fn key(parts: &Self::Parts) -> &Bytes;

    /// Its plan from the values `read` on each member.
    fn plan(parts: &Self::Parts, read: &Ballots) -> Plan;

    /// The command with its plan.
    fn planned(parts: Self::Parts, plan: Plan) -> Self;
}

/// A digest condition's first round: `GET` on every member, every answer awaited; then the
/// command `O`, planned from the values read ([`Planned::plan`]), on the same members in the
/// same turn ([`runner::then`]). A quorum's error (`WRONGTYPE`) is the answer at once.
pub(super) struct ReadFirst<O: Planned>(pub(super) O::Parts);

impl<O: Planned> Operation for ReadFirst<O> {
    type Decision = Result<Plan, Reply>;

    fn lock(&self) -> Lock<'_> {
        Lock {
            holder: Holder::Anyone,
            ..Lock::mutex(std::slice::from_ref(O::key(&self.0)), &[], 0)
        }
    }

    fn verb(&self) -> Verb {
        Verb::Query
    }

    fn request(&self, _: &Masters, _: &Config) -> Request {
        Request::Same(command(&[b"GET", O::key(&self.0)]))
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        vote.poll_finish(cx)
    }

    fn decide(&self, read: &Ballots, _: Duration, _: &Config) -> Result<Plan, Reply> {
        match read.majority_error() {
            Some(e) => Err(e.clone()),
            None => Ok(O::plan(&self.0, read)),
        }
    }

    fn answer(
        &self,
        _: &Proxy,
        read: Result<Plan, Reply>,
        _: &mut Vote,
        _: &Clock,
    ) -> Result<Reply, Result<Plan, Reply>> {
        match read {
            Err(e) => Ok(e),
            planned => Err(planned),
        }
    }

    fn rest(self, proxy: Arc<Proxy>, read: Result<Plan, Reply>, voted: Voted) -> Later {
        match read {
            Ok(plan) => {
                // One member set for the whole command: its read, its vote and any give-back.
                let masters = voted.vote.masters().clone();
                let op = O::planned(self.0, plan);
                Box::pin(runner::then(proxy, masters, op, voted.held))
            }
            Err(e) => Box::pin(std::future::ready(e)),
        }
    }
}

/// A conditional `SET`, as a quorum operation.
pub(super) struct CondSet {
    pub(super) w: Write,
    pub(super) plan: Plan,
}

/// What a conditional `SET`'s replies decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A quorum wrote, still valid: the answer.
    Written(Reply),
    /// Not written.
    Refused,
}

impl Planned for CondSet {
    type Parts = Write;

    fn key(w: &Write) -> &Bytes {
        &w.key
    }

    fn plan(w: &Write, read: &Ballots) -> Plan {
        let not_written = |old| Reply::Array(vec![Reply::Integer(0), old, Reply::Integer(-2)]);
        Plan::read(&w.cond, read, true, not_written)
    }

    fn planned(w: Write, plan: Plan) -> CondSet {
        CondSet { w, plan }
    }
}

impl Operation for CondSet {
    type Decision = Outcome;

    fn lock(&self) -> Lock<'_> {
        let w = &self.w;
        let holder = match &w.cond {
            Cond::Eq(m) => Holder::Token(m),
            _ => Holder::Anyone,
        };
        Lock {
            holder,
            ..Lock::mutex(std::slice::from_ref(&w.key), &[], w.ttl_ms.unwrap_or(0))
        }
    }

    fn verb(&self) -> Verb {
        Verb::Write
    }

    fn request(&self, _: &Masters, cfg: &Config) -> Request {
        let w = &self.w;
        let mut ttl = itoa::Buffer::new();
        let ttl: &[u8] = match w.ttl_ms {
            Some(t) if t <= 0 => b"-1",
            Some(t) => ttl.format(t).as_bytes(),
            None => b"0",
        };
        let guard = guard_px(cfg);
        let guard: &[u8] = guard.as_deref().map_or(b"0", str::as_bytes);
        let keep: &[u8] = if w.keep_ttl { b"1" } else { b"0" };
        let key = std::slice::from_ref(&w.key);
        let script =
            |mode: &[u8], arg: &[u8]| eval(COND_SET, key, &[&w.value, mode, arg, ttl, keep, guard]);
        self.plan.request(script)
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        vote.poll_decide_by(cx, wrote)
    }

    /// Written when a quorum wrote and the TTL a quorum now hold, less the elapsed time and
    /// drift, is still valid; a write with an expiry already past deleted the key where it
    /// landed, so a quorum of those decides, with no lock left to be valid.
    fn decide(&self, ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Outcome {
        let (w, b) = (&self.w, self.plan.counted(ballots));
        let deleting = w.ttl_ms.is_some_and(|t| t <= 0);
        let valid = deleting
            || b.quorum_th(|_, r| new_ttl_of(r), |t| *t)
                .is_some_and(|t| t == i64::MAX || runner::valid(t, elapsed, cfg));
        if valid && b.agree(wrote) {
            Outcome::Written(set_reply(w, &b))
        } else {
            Outcome::Refused
        }
    }

    /// On each master that wrote, what the refused write replaced (see [`RESTORE`]). A master
    /// that did not answer in time may have written too; its old value is unknown, and the
    /// value written stays there until its own TTL ends.
    fn undo(&self, ballots: &Ballots, _: Option<&Ballots>) -> Vec<Option<Bytes>> {
        let key = std::slice::from_ref(&self.w.key);
        let give_back = |r: &Option<Reply>| {
            let Some(Reply::Array(a)) = r.as_ref().filter(|r| wrote(r)) else {
                return None;
            };
            let (had, old): (&[u8], &[u8]) = match a.get(1) {
                Some(Reply::Bulk(v)) => (b"1", v),
                _ => (b"0", b""),
            };
            let ttl = match a.get(2) {
                Some(Reply::Integer(t)) => *t,
                _ => -1,
            };
            let mut buf = itoa::Buffer::new();
            let ttl = buf.format(ttl).as_bytes();
            Some(eval(RESTORE, key, &[&self.w.value, had, old, ttl]))
        };
        ballots.replies.iter().map(give_back).collect()
    }

    fn answer(
        &self,
        proxy: &Proxy,
        outcome: Outcome,
        vote: &mut Vote,
        _: &Clock,
    ) -> Result<Reply, Outcome> {
        let counters = proxy.counters();
        match outcome {
            Outcome::Written(reply) => {
                Counters::bump(&counters.grants);
                match repairs(&self.w) {
                    Some(reading) if crate::command::repair::pending(proxy, vote, reading) => {
                        Err(Outcome::Written(reply))
                    }
                    _ => Ok(reply),
                }
            }
            Outcome::Refused => {
                Counters::bump(&counters.denials);
                Err(Outcome::Refused)
            }
        }
    }

    fn rest(self, proxy: Arc<Proxy>, outcome: Outcome, voted: Voted) -> Later {
        let Voted { vote, held, clock } = voted;
        match (outcome, repairs(&self.w)) {
            // `SET tok IFEQ tok PX ttl` is an extension: the lock goes back to the trusted
            // members that lack it (see `repair`).
            (Outcome::Written(reply), Some(reading)) => {
                let e = crate::command::repair::Extended {
                    key: self.w.key.clone(),
                    copy: crate::command::repair::LockCopy::Token(self.w.value.clone()),
                    ttl_ms: self.w.ttl_ms.unwrap_or(0),
                    vote,
                    start: clock.start,
                    reading,
                };
                crate::command::repair::after(&proxy, e, held);
                Box::pin(std::future::ready(reply))
            }
            (Outcome::Written(reply), None) => Box::pin(std::future::ready(reply)),
            (Outcome::Refused, _) => Box::pin(self.refused(proxy, vote, held)),
        }
    }
}

impl CondSet {
    /// A refused write: every master's answer until the deadline, so each write that landed in
    /// time is given back its old value before the key is free again (`held` until then).
    async fn refused(self, proxy: Arc<Proxy>, vote: Vote, held: Held) -> Reply {
        let masters = vote.masters().clone();
        let all = vote.finish().await;
        let all = self.plan.counted(&all);
        take_back(&proxy, &masters, self.undo(&all, None));
        let reply = agreed_error(&all).unwrap_or_else(|| not_set_reply(&self.w, Some(&all)));
        drop(held);
        reply
    }
}

/// A conditional delete (`DELEX key IFNE|IFDEQ|IFDNE arg`), as a quorum operation.
pub(super) struct CondDel {
    pub(super) key: Bytes,
    pub(super) plan: Plan,
}

impl Planned for CondDel {
    type Parts = (Bytes, Cond);

    fn key((key, _): &(Bytes, Cond)) -> &Bytes {
        key
    }

    fn plan((_, cond): &(Bytes, Cond), read: &Ballots) -> Plan {
        Plan::read(cond, read, false, |_| Reply::Integer(0))
    }

    fn planned((key, _): (Bytes, Cond), plan: Plan) -> CondDel {
        CondDel { key, plan }
    }
}

impl Operation for CondDel {
    type Decision = Reply;

    fn lock(&self) -> Lock<'_> {
        Lock {
            holder: Holder::Anyone,
            ..Lock::mutex(std::slice::from_ref(&self.key), &[], 0)
        }
    }

    fn verb(&self) -> Verb {
        Verb::Delete
    }

    fn request(&self, _: &Masters, _: &Config) -> Request {
        let key = std::slice::from_ref(&self.key);
        self.plan
            .request(|mode, arg| eval(COND_DEL, key, &[mode, arg]))
    }

    /// As a release: no validity clock runs, so each master is waited for until it answers
    /// or is marked down; a quorum that agree decide at once.
    fn patience(&self, cfg: &Config) -> Duration {
        cfg.node_timeout()
            .max(Duration::from_millis(cfg.stall_timeout_ms))
    }

    fn decide(&self, ballots: &Ballots, _: Duration, _: &Config) -> Reply {
        deleted(&self.plan.counted(ballots))
    }

    fn answer(&self, _: &Proxy, reply: Reply, _: &mut Vote, _: &Clock) -> Result<Reply, Reply> {
        Ok(reply)
    }

    fn rest(self, _: Arc<Proxy>, reply: Reply, _: Voted) -> Later {
        Box::pin(std::future::ready(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::super::digest_of;
    use super::super::tests::{answer, bulk, write};
    use super::*;
    use crate::quorum::scripted::ballots;
    use Reply::Integer as I;

    fn not_written(old: Reply) -> Option<Reply> {
        Some(Reply::Array(vec![I(0), old, I(-2)]))
    }

    #[test]
    fn a_digest_condition_is_planned_from_the_values_read() {
        let held = Bytes::from_static(b"held");
        let read = ballots(vec![
            Some(bulk("held")),
            Some(bulk("other")),
            Some(Reply::Nil),
            None,
            Some(Reply::static_error("ERR x")),
        ]);
        let one = |v: &'static str| Some((&b"1"[..], Bytes::from_static(v.as_bytes())));
        // `SET … IFDEQ d`: written only where the value read has digest d, and only while the
        // key still holds it; elsewhere "not written", with the value read.
        let w = write(Cond::DigestEq(digest_of(&held)), false);
        assert_eq!(
            CondSet::plan(&w, &read),
            Plan::Each(
                vec![one("held"), None, None, None, None],
                vec![
                    None,
                    not_written(bulk("other")),
                    not_written(Reply::Nil),
                    None,
                    None
                ]
            )
        );
        // `SET … IFDNE d`: a missing key is written while it is still missing (mode 3).
        let w = write(Cond::DigestNe(digest_of(&held)), false);
        let missing = Some((&b"3"[..], Bytes::new()));
        assert_eq!(
            CondSet::plan(&w, &read),
            Plan::Each(
                vec![None, one("other"), missing, None, None],
                vec![not_written(bulk("held")), None, None, None, None]
            )
        );
        // `DELEX … IFDNE d`: a missing key is not deleted (0).
        let parts = (w.key.clone(), Cond::DigestNe(digest_of(&held)));
        assert_eq!(
            CondDel::plan(&parts, &read),
            Plan::Each(
                vec![None, one("other"), None, None, None],
                vec![Some(I(0)), None, Some(I(0)), None, None]
            )
        );
    }

    #[test]
    fn a_digest_read_that_a_quorum_refused_is_the_answer() {
        let wrong = Reply::static_error("WRONGTYPE x");
        let read = ballots(vec![
            Some(wrong.clone()),
            Some(wrong.clone()),
            Some(bulk("v")),
        ]);
        let first = ReadFirst::<CondSet>(write(Cond::DigestEq(1), false));
        let cfg = Config::default();
        assert_eq!(first.decide(&read, FAST, &cfg), Err(wrong));
        let read = ballots(vec![Some(bulk("v")), Some(Reply::Nil), None]);
        assert!(first.decide(&read, FAST, &cfg).is_ok());
    }

    const FAST: Duration = Duration::from_millis(10);

    #[test]
    fn a_conditional_set_is_written_by_a_quorum_still_valid() {
        let cfg = Config::default();
        let eq = Cond::Eq(Bytes::from_static(b"old"));
        let set = |cond: Cond, ttl_ms: Option<i64>| CondSet {
            plan: Plan::every(&cond).unwrap_or(Plan::Each(vec![], vec![None; 3])),
            w: Write {
                ttl_ms,
                ..write(cond, false)
            },
        };
        let op = set(eq.clone(), Some(10_000));
        let b = ballots(vec![answer(1, bulk("old")), answer(1, bulk("old")), None]);
        assert_eq!(op.decide(&b, FAST, &cfg), Outcome::Written(Reply::ok()));
        // A quorum wrote, but the TTL they now hold has run out while waiting.
        let late = Duration::from_millis(9_950);
        assert_eq!(op.decide(&b, late, &cfg), Outcome::Refused);
        let b = ballots(vec![answer(1, bulk("old")), answer(0, bulk("x")), None]);
        assert_eq!(op.decide(&b, FAST, &cfg), Outcome::Refused);
        // An expiry already past: the key deleted where the write landed, no TTL to judge.
        let deleted = Some(Reply::Array(vec![I(1), bulk("old"), I(500), I(-2)]));
        let b = ballots(vec![deleted.clone(), deleted, None]);
        assert_eq!(
            set(eq, Some(-1)).decide(&b, late, &cfg),
            Outcome::Written(Reply::ok())
        );
        // A digest plan's members not asked count as not written: one write of three refused,
        // where the vote alone would see one of one.
        let mut op = set(Cond::DigestEq(1), Some(10_000));
        op.plan = Plan::Each(
            vec![],
            vec![None, not_written(bulk("x")), not_written(Reply::Nil)],
        );
        let b = ballots(vec![answer(1, bulk("old")), None, None]);
        assert_eq!(op.decide(&b, FAST, &cfg), Outcome::Refused);
    }

    #[test]
    fn a_refused_set_gives_back_what_it_replaced_where_it_wrote() {
        let op = CondSet {
            w: write(Cond::Ne(Bytes::from_static(b"m")), false),
            plan: Plan::Every(b"2", Bytes::from_static(b"m")),
        };
        let b = ballots(vec![
            Some(Reply::Array(vec![I(1), bulk("old"), I(5000), I(10_000)])),
            Some(Reply::Array(vec![I(1), Reply::Nil, I(-2), I(10_000)])),
            answer(0, bulk("m")),
            None,
        ]);
        let k = [Bytes::from_static(b"k")];
        assert_eq!(
            op.undo(&b, None),
            vec![
                Some(eval(RESTORE, &k, &[b"new", b"1", b"old", b"5000"])),
                Some(eval(RESTORE, &k, &[b"new", b"0", b"", b"-2"])),
                None,
                None
            ]
        );
    }

    #[test]
    fn a_digest_delete_counts_the_members_not_asked_as_not_deleted() {
        let cfg = Config::default();
        let op = CondDel {
            key: Bytes::from_static(b"k"),
            plan: Plan::Each(vec![], vec![None, Some(I(0)), Some(I(0))]),
        };
        // Deleted on the one member asked; the two whose value failed the digest did not: a
        // quorum answered, fewer deleted.
        let b = ballots(vec![Some(I(1)), None, None]);
        assert_eq!(op.decide(&b, FAST, &cfg), I(0));
        let op = CondDel {
            plan: Plan::Every(b"2", Bytes::from_static(b"m")),
            ..op
        };
        assert!(op.decide(&b, FAST, &cfg).is_error());
    }
}
