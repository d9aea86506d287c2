//! The one quorum runner: every lock operation, whatever command or script it came from, runs
//! through the same five phases, each named by a method of [`Operation`]:
//!
//! 1. **Which keys, and whose turn** ([`Operation::turn`]): the operation takes its place in
//!    line on its keys at dispatch (see [`crate::keylock`]), so pipelined commands keep their
//!    order and a clean-up reaches every member before the next operation on the key.
//! 2. **The request each member is sent** ([`Operation::request`]), to every member of one
//!    snapshot at once; the same snapshot serves every later step, undo included.
//! 3. **How the replies become one decision** ([`Operation::decide`]): pure, from the ballots,
//!    the time since the request left and the configuration. Validity, the joint quorum of a
//!    membership change, quarantine and "one server, one vote" all live in
//!    [`crate::quorum::Ballots`] and [`crate::quorum::validity`]: a decision only asks them.
//! 4. **What is undone, and on which members** ([`Operation::undo`]): pure too, a request per
//!    member (or none), sent by [`take_back`], the one place a roll-back is counted.
//! 5. **The answer, in Redis's words** ([`Operation::answer`], or [`Operation::rest`] when the
//!    answer needs more than the first round: a refresh, a roll-back that waits for late
//!    replies, a fencing token written back, a quorum repair).
//!
//! [`Run`] drives the phases. It is written out as a future of its own rather than an `async
//! fn`: it is the one future every lock request makes, each stage's state is written in place,
//! and nothing moves on the way to a grant (an `async fn` kept room for every step's locals and
//! copied them into its box). Only the rarer path that [`Operation::rest`] takes is boxed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::action::{Action, Later};
use crate::config::Config;
use crate::counters::Counters;
use crate::keylock::{Held, KeyLocks, Ready, Ticket};
use crate::lockop::{Lock, Verb};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote, ask_on, validity};
use crate::wire::reply::Reply;

/// The clock of one run: when it was dispatched, when its request left (the validity clock's
/// start), and when its vote was decided.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Dispatch.
    pub since: Instant,
    /// The request left; the validity clock starts here.
    pub start: Instant,
    /// The vote was decided.
    pub now: Instant,
    /// `now − start`, worked out once.
    elapsed: Duration,
}

impl Clock {
    /// The clock of a vote decided now (one clock read serves the validity and the histogram).
    #[inline]
    pub fn read(since: Instant, start: Instant) -> Clock {
        Clock::at(since, start, Instant::now())
    }

    /// The clock of a vote decided at `now`.
    #[inline]
    pub fn at(since: Instant, start: Instant, now: Instant) -> Clock {
        Clock {
            since,
            start,
            now,
            elapsed: now.saturating_duration_since(start),
        }
    }

    /// The time since the request left.
    #[inline]
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// The time since dispatch (the acquisition histogram's measure): one subtraction serves
    /// both when the turn was ours at once.
    #[inline]
    pub fn since_dispatch(&self) -> Duration {
        if self.start == self.since {
            self.elapsed()
        } else {
            self.now.saturating_duration_since(self.since)
        }
    }
}

/// A decided vote, handed to [`Operation::rest`]: the vote (its late replies can still be
/// gathered), the keys' turn (the keys stay in line until it is dropped), and the clock.
pub struct Voted {
    /// The vote.
    pub vote: Vote,
    /// The keys' turn.
    pub held: Held,
    /// When.
    pub clock: Clock,
}

/// One quorum operation, told as the runner's phases (see the module docs).
pub trait Operation: Send + Unpin + Sized + 'static {
    /// What the members' replies decided.
    type Decision: Send;

    /// The lock the operation acts on, in the one model every command shares.
    fn lock(&self) -> Lock<'_>;

    /// What the operation does to it.
    fn verb(&self) -> Verb;

    /// Phase 1: the operation's place in line, taken at dispatch. By default the lock's keys.
    fn turn(&self, keylocks: &Arc<KeyLocks>) -> Ticket {
        keylocks.enqueue(self.lock().keys)
    }

    /// In the keys' turn, before any member is asked: an answer that makes asking needless
    /// (a lock that would be born expired).
    fn settled(&self, _proxy: &Proxy) -> Option<Reply> {
        None
    }

    /// Phase 2: what each member is sent.
    fn request(&self, masters: &Masters, cfg: &Config) -> Request;

    /// Whether each member also reads its clock in the same round trip (acquisitions: a
    /// member whose clock just leapt casts no vote).
    fn timed(&self) -> bool {
        false
    }

    /// How long the vote waits for the members (a grant's validity clock: the node timeout).
    fn patience(&self, cfg: &Config) -> Duration {
        cfg.node_timeout()
    }

    /// Gathers replies until the vote can be decided: by default, as soon as some reply has a
    /// quorum or none can get one any more.
    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        vote.poll_outcome(cx)
    }

    /// Phase 3: the decision, from the ballots and the time since the request left. Pure.
    fn decide(&self, ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Self::Decision;

    /// Phase 4: what a refusal leaves to undo, as a request per member (`None`: nothing
    /// there), from the ballots and what a later read `named` on each member (the holders of
    /// the key, where the operation asked). Pure. By default nothing.
    fn undo(&self, _ballots: &Ballots, _named: Option<&Ballots>) -> Vec<Option<Bytes>> {
        Vec::new()
    }

    /// Phase 5: the answer, when the first round makes it (the vote's late replies may still
    /// be absorbed, to see whether anything is left to do). `Err` hands the decision on to
    /// [`Operation::rest`].
    fn answer(
        &self,
        proxy: &Proxy,
        decision: Self::Decision,
        vote: &mut Vote,
        clock: &Clock,
    ) -> Result<Reply, Self::Decision>;

    /// The answer when [`Operation::answer`] gave none: later rounds, a roll-back that waits
    /// for late replies, a quorum repair. It owns the vote and the keys' turn.
    fn rest(self, proxy: Arc<Proxy>, decision: Self::Decision, voted: Voted) -> Later;
}

/// Runs `op` through its phases once it has its turn (taken now, at dispatch).
#[inline]
pub fn run<O: Operation>(proxy: &Arc<Proxy>, op: O) -> Action {
    Action::Later(Box::pin(Run::new(proxy, op)))
}

/// The validity rule, in one place for every decision: a lock its members were asked to hold
/// for `ttl_ms`, `elapsed` ago, is still valid when `ttl − elapsed − drift` (see
/// [`crate::quorum::validity`]) exceeds `min_validity_ms`.
#[inline]
pub fn valid(ttl_ms: i64, elapsed: Duration, cfg: &Config) -> bool {
    let ttl = Duration::from_millis(ttl_ms.max(0) as u64);
    let min = Duration::from_millis(cfg.min_validity_ms);
    validity(ttl, elapsed, cfg.drift_factor).is_some_and(|left| left > min)
}

/// Phases 2 and 3 of `op`, in a turn its caller holds, for a caller that answers in its own
/// terms (a lease's renewal): the decision, the vote (for a quorum repair, or to name the
/// members that answered) and the clock.
pub async fn decide<O: Operation>(proxy: &Proxy, op: &O) -> (O::Decision, Vote, Clock) {
    decide_on(proxy, proxy.masters(), op).await
}

/// [`decide`] on `masters`, the member set an earlier round of the same command went to (a
/// fencing token's accept after its prepare), so positions name the same members in both.
pub async fn decide_on<O: Operation>(
    proxy: &Proxy,
    masters: Masters,
    op: &O,
) -> (O::Decision, Vote, Clock) {
    let req = op.request(&masters, proxy.config());
    let start = Instant::now();
    let mut vote = ask_on(
        masters,
        req,
        start + op.patience(proxy.config()),
        op.timed(),
    );
    std::future::poll_fn(|cx| op.poll_vote(&mut vote, cx)).await;
    let clock = Clock::read(start, start);
    let decision = op.decide(vote.ballots(), clock.elapsed(), proxy.config());
    (decision, vote, clock)
}

/// Phases 2 to 5 of `op` on `masters` (see [`decide_on`]), in a turn its caller holds
/// (`held`, passed on to [`Operation::rest`] or freed with the answer): a command's later
/// round, such as a write planned from a read.
pub async fn then<O: Operation>(proxy: Arc<Proxy>, masters: Masters, op: O, held: Held) -> Reply {
    if let Some(reply) = op.settled(&proxy) {
        return reply;
    }
    let (decision, mut vote, clock) = decide_on(&proxy, masters, &op).await;
    match op.answer(&proxy, decision, &mut vote, &clock) {
        Ok(reply) => reply,
        Err(decision) => {
            let voted = Voted { vote, held, clock };
            op.rest(proxy, decision, voted).await
        }
    }
}

/// Sends `plan` (a request per member of `masters`, the snapshot the operation's vote went to)
/// without waiting for answers, and counts a roll-back when anything was sent (see
/// [`send_each`]).
pub fn take_back(proxy: &Proxy, masters: &Masters, plan: Vec<Option<Bytes>>) -> bool {
    let sent = send_each(masters, plan);
    if sent {
        Counters::bump(&proxy.counters().rollbacks);
    }
    sent
}

/// Sends each member of `masters` its request in `plan`, if any, without waiting for answers;
/// answers whether anything was sent. Each request is queued behind the operation's own on that
/// member's connection, so it reaches a slow member after the write it undoes.
pub fn send_each(masters: &Masters, plan: Vec<Option<Bytes>>) -> bool {
    let mut sent = false;
    for (m, req) in masters.iter().zip(plan) {
        if let Some(req) = req {
            m.send(req, 1, None);
            sent = true;
        }
    }
    sent
}
/// An operation dispatched at `since`, run once its keys' turn has come.
pub struct Run<O: Operation> {
    proxy: Arc<Proxy>,
    since: Instant,
    op: Option<O>,
    stage: Stage,
}

/// Where a [`Run`] is.
enum Stage {
    /// Waiting for the keys' turn.
    Turn(Ready),
    /// The members were asked at `start`; waiting for their decision.
    Vote {
        held: Held,
        vote: Vote,
        start: Instant,
    },
    /// The rest of the operation ([`Operation::rest`]), boxed: the rarer path.
    Rest(Later),
    /// Answered.
    Done,
}

impl<O: Operation> Run<O> {
    /// Takes the operation's turn on its keys, last: from then on it waits for the earlier
    /// operations on them.
    fn new(proxy: &Arc<Proxy>, op: O) -> Self {
        let since = Instant::now();
        let ready = op.turn(proxy.keylocks()).ready();
        Run {
            proxy: proxy.clone(),
            since,
            op: Some(op),
            stage: Stage::Turn(ready),
        }
    }
}

impl<O: Operation> Future for Run<O> {
    type Output = Reply;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        let this = self.get_mut();
        let proxy = &this.proxy;
        loop {
            match &mut this.stage {
                Stage::Turn(ready) => {
                    let Poll::Ready(held) = Pin::new(ready).poll(cx) else {
                        return Poll::Pending;
                    };
                    let op = this.op.as_ref().expect("an operation until answered");
                    if let Some(reply) = op.settled(proxy) {
                        this.stage = Stage::Done;
                        return Poll::Ready(reply);
                    }
                    // The member set this operation uses to its end, undo included.
                    let masters = proxy.masters();
                    let req = op.request(&masters, proxy.config());
                    // The validity clock starts no later than the requests leave: the dispatch
                    // time when the turn was ours at once (earlier, so the validity is if
                    // anything underestimated), else now.
                    let start = if held.waited() {
                        Instant::now()
                    } else {
                        this.since
                    };
                    let deadline = start + op.patience(proxy.config());
                    let vote = ask_on(masters, req, deadline, op.timed());
                    this.stage = Stage::Vote { held, vote, start };
                }
                Stage::Vote { vote, start, .. } => {
                    let op = this.op.as_ref().expect("an operation until answered");
                    if op.poll_vote(vote, cx).is_pending() {
                        return Poll::Pending;
                    }
                    let clock = Clock::read(this.since, *start);
                    let cfg = proxy.config();
                    let decision = op.decide(vote.ballots(), clock.elapsed(), cfg);
                    let decision = match op.answer(proxy, decision, vote, &clock) {
                        Ok(reply) => {
                            // The vote ends and the keys' turn passes on here.
                            this.stage = Stage::Done;
                            return Poll::Ready(reply);
                        }
                        Err(decision) => decision,
                    };
                    let Stage::Vote { held, vote, .. } =
                        std::mem::replace(&mut this.stage, Stage::Done)
                    else {
                        unreachable!("in the vote stage");
                    };
                    let op = this.op.take().expect("an operation until answered");
                    let voted = Voted { vote, held, clock };
                    this.stage = Stage::Rest(op.rest(proxy.clone(), decision, voted));
                }
                Stage::Rest(rest) => return rest.as_mut().poll(cx),
                // Not polled again once answered (a pipeline keeps the reply instead).
                Stage::Done => return Poll::Pending,
            }
        }
    }
}
