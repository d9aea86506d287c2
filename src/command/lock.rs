//! Lock operations as Redlock quorum operations: acquire, extend and release, over one key or
//! many, whether they arrive as `SET key token NX PX ttl` or as a library's Lua script.
//!
//! Every operation is a [`LockOp`]: what to do ([`Op`]), the keys, the token, the TTL, and the
//! reply shape the caller expects ([`Answer`]). The masters run the proxy's canonical scripts
//! (see [`crate::scripts`]), which work on all the keys at once, all or nothing, so a master's
//! vote counts only when it did the whole operation.
//!
//! - **Acquire** follows the algorithm exactly: read the monotonic clock, send to all N masters
//!   at once, stop as soon as the outcome is known or the per-node timeout passes, and grant
//!   only with a quorum of "yes" and validity (`ttl − elapsed − drift`) above the minimum. A
//!   refused attempt is rolled back where it may have written: on every master that said yes
//!   (only the keys it created there) and on every master that never answered. A master that
//!   said "taken" wrote nothing, and its key (even with the same token) belongs to someone
//!   else's grant, or an earlier one of this client's, so it is left alone.
//! - **Take-or-keep** ([`Op::AcquireOrKeep`]) is an acquisition where a master that already
//!   holds the key for the caller says yes without a write: it then brings the TTL it still has
//!   (read by compare-and-`PTTL`), and the quorum-th largest TTL among the masters saying yes is
//!   what the validity rule judges (see `grant_kept`).
//! - **Extend** succeeds only when a quorum extended and the new TTL they agree on, minus the
//!   elapsed time and drift, is still valid. Nothing is undone on failure: a longer TTL on a
//!   minority delays other clients but never lets two hold the lock. A granted extension of one
//!   key (a lease's renewal too) writes the lock back on the trusted masters that lack it
//!   ([`super::repair`]).
//! - **Release** runs compare-and-delete on all N masters; a key counts as released when a
//!   quorum deleted it, and as already gone (expired) when a quorum no longer had it.
//!
//! - **Inspect** (a read) answers the value a quorum agree on and how long a quorum still hold
//!   it: the quorum-th largest TTL among the masters holding that value.
//!
//! Every TTL is capped by `max_ttl_ms`: larger requests get an error, never a silent cut.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::action::Action;
use crate::backend::Backend;
use crate::config::Config;
use crate::counters::Counters;
use crate::error::Error;
use crate::keylock::{Held, Ready, Ticket};
use crate::lockop::{AnnounceWhen, Answer, Lit, Op};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote, ask, ask_timed, ask_timed_on, validity};
use crate::scripts::{
    ACQUIRE, DELETE, EXTEND, INSPECT, RELEASE, RELEASE_ALL, RELEASE_PUBLISH, REMAINING,
};
use crate::wire::master::{command, eval};
use crate::wire::reply::Reply;

/// A lock operation, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOp {
    /// What to do.
    pub op: Op,
    /// The keys, all or nothing (at least one).
    pub keys: Vec<Bytes>,
    /// The lock token, compared byte for byte.
    pub token: Bytes,
    /// TTL in ms (acquire, extend), or the time to add (`ExtendAdd`); unused by release. For
    /// `Remaining`, the unit its answer is given in, in ms (1 or 1000).
    pub ttl_ms: i64,
    /// The reply shape the caller expects.
    pub answer: Answer,
    /// The wake-up signal a release or delete leaves for waiters (see [`crate::lockop::Signal`]).
    pub wake: Option<Box<Wake>>,
    /// What a release publishes, bound to one call (see [`crate::lockop::Announce`]).
    pub publish: Option<Box<Publish>>,
}

/// A release's announcement bound to one call: `command channel message` on each master where
/// `when` held there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// `PUBLISH` or `SPUBLISH`.
    pub command: Bytes,
    /// The channel.
    pub channel: Bytes,
    /// The message.
    pub message: Bytes,
    /// Where.
    pub when: AnnounceWhen,
}

/// A wake-up signal bound to one call: on each master, `list` becomes the one element `value`
/// with a TTL of `ttl_ms`, where the operation did its work there (or everywhere, `always`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    /// The list waiters `BLPOP`.
    pub list: Bytes,
    /// Its TTL, in milliseconds (capped by `max_ttl_ms` like a lock's).
    pub ttl_ms: i64,
    /// The element pushed.
    pub value: Bytes,
    /// Signal on every master, whatever the operation did there.
    pub always: bool,
}

impl Wake {
    /// The canonical scripts' trailing arguments for the signal: TTL, element, mode.
    fn args(&self) -> [Bytes; 3] {
        [
            Bytes::from(self.ttl_ms.to_string()),
            self.value.clone(),
            Bytes::from_static(if self.always { b"1" } else { b"0" }),
        ]
    }
}

/// Runs a Redlock acquisition of `key` for `token` with `ttl_ms`; answers `OK` or nil, exactly
/// as `SET key token NX PX ttl` on one Redis: nil whenever the key exists on a quorum, whatever
/// its value. Only with the unsafe opt-in `set_nx_reentrant` does a key that already holds the
/// token count as free (and get the new TTL).
pub fn acquire(proxy: &Arc<Proxy>, key: Bytes, token: Bytes, ttl_ms: i64) -> Action {
    let op = if proxy.config().set_nx_reentrant {
        Op::AcquireOrRefresh
    } else {
        Op::Acquire
    };
    let op = LockOp {
        op,
        keys: vec![key],
        token,
        ttl_ms,
        answer: Answer::OkNil,
        wake: None,
        publish: None,
    };
    match check(proxy, &op) {
        Ok(()) => acquisition(proxy, op),
        Err(refused) => refused.into(),
    }
}

impl LockOp {
    /// What is left of an operation whose parts were moved on (it is not run again).
    fn taken() -> LockOp {
        LockOp {
            op: Op::Acquire,
            keys: Vec::new(),
            token: Bytes::new(),
            ttl_ms: 0,
            answer: Answer::OkNil,
            wake: None,
            publish: None,
        }
    }
}

/// Runs compare-and-delete of `key`/`token` on all N masters; answers 1 when a quorum deleted
/// the key, else 0.
pub fn release(proxy: &Arc<Proxy>, key: Bytes, token: Bytes) -> Action {
    run(
        proxy,
        LockOp {
            op: Op::Release,
            keys: vec![key],
            token,
            ttl_ms: 0,
            answer: Answer::OneZero,
            wake: None,
            publish: None,
        },
    )
}

/// Runs compare-and-delete of every key in `keys` that holds `token`, on all N masters (a
/// lease's release when its holder's connection closed).
pub fn release_all(proxy: &Arc<Proxy>, keys: Vec<Bytes>, token: Bytes) -> Action {
    run(
        proxy,
        LockOp {
            op: Op::Release,
            keys,
            token,
            ttl_ms: 0,
            answer: Answer::OneZero,
            wake: None,
            publish: None,
        },
    )
}

/// What a lease's renewal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// A quorum extended the lock, and it is still valid.
    Renewed,
    /// A quorum answered that the lock is not the holder's any more: released, through any
    /// proxy, or taken over.
    Gone,
    /// No quorum extended it within validity: masters down, slow or excluded. With why, and
    /// the masters that did answer (the ones a loss can be published through at once).
    Failed(&'static str, Answered),
}

/// The masters that answered a vote, as handles: a later step reaches the very masters that
/// answered, even if the member set has changed since.
#[derive(Clone, Default)]
pub struct Answered(pub Vec<Backend>);

impl Answered {
    /// The masters of `vote` that answered it.
    pub fn of(vote: &Vote) -> Answered {
        let masters = vote.masters();
        Answered(
            vote.ballots()
                .answered()
                .map(|i| masters[i].clone())
                .collect(),
        )
    }
}

impl std::fmt::Debug for Answered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|b| &b.info().addr))
            .finish()
    }
}

impl PartialEq for Answered {
    fn eq(&self, other: &Answered) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|(a, b)| std::ptr::eq(a.info(), b.info()))
    }
}

impl Eq for Answered {}

/// A lease's renewal of `keys` for `token`: a quorum compare-and-extend back to `ttl_ms`, in
/// the keys' turn, decided by Redlock's validity rule as an extension is.
pub async fn renew(proxy: &Arc<Proxy>, keys: &[Bytes], token: &Bytes, ttl_ms: i64) -> Renewal {
    let op = LockOp {
        op: Op::Extend,
        keys: keys.to_vec(),
        token: token.clone(),
        ttl_ms,
        answer: Answer::OneZero,
        wake: None,
        publish: None,
    };
    let held = turn(proxy, &op).ready().await;
    let (decided, vote, start) = extend_on_masters(proxy, &op).await;
    let ballots = vote.ballots();
    match decided {
        Extension::Granted => {
            repair_after(proxy, &op, vote, start, held);
            Renewal::Renewed
        }
        _ if ballots.agree(|r| matches!(r, Reply::Integer(0 | -3))) => Renewal::Gone,
        _ => Renewal::Failed(
            "fewer than a quorum of masters extended the lock in time",
            Answered::of(&vote),
        ),
    }
}

/// After a granted extension of `op` (sent at `start`): the lock written back to the trusted
/// members that lacked it (one key; see [`super::repair`]), in the key's turn (`held`).
fn repair_after(proxy: &Arc<Proxy>, op: &LockOp, vote: Vote, start: Instant, held: Held) {
    if let [key] = op.keys.as_slice() {
        let e = super::repair::Extended {
            key: key.clone(),
            copy: super::repair::LockCopy::Token(op.token.clone()),
            ttl_ms: op.ttl_ms,
            vote,
            start,
            reading: super::repair::EXTEND_READING,
        };
        super::repair::after(proxy, e, held);
    }
}

/// The checks every lock operation passes: it names keys, its TTL is within the cap, and so is
/// its signal's.
fn check(proxy: &Proxy, op: &LockOp) -> Result<(), Reply> {
    if op.keys.is_empty() {
        return Err(Reply::from(Error::NoLockKeys));
    }
    let max = proxy.config().max_ttl_ms;
    if !matches!(
        op.op,
        Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Remaining
    ) && op.ttl_ms > max as i64
    {
        return Err(Reply::from(Error::TtlTooLong {
            ttl: op.ttl_ms,
            max,
        }));
    }
    if let Some(w) = &op.wake
        && (w.ttl_ms <= 0 || w.ttl_ms > max as i64)
    {
        return Err(Reply::from(Error::SignalTtl { ttl: w.ttl_ms, max }));
    }
    Ok(())
}

/// An operation's turn on its keys, taken now, at dispatch; the signal list takes its turn
/// too, so a waiter's pop never overtakes the release.
fn turn(proxy: &Proxy, op: &LockOp) -> Ticket {
    match &op.wake {
        Some(w) => proxy
            .keylocks()
            .enqueue(&[op.keys.as_slice(), std::slice::from_ref(&w.list)].concat()),
        None => proxy.keylocks().enqueue(&op.keys),
    }
}

/// An acquisition, once checked: the hottest path awaits its own turn, one future moved once
/// (into its box).
fn acquisition(proxy: &Arc<Proxy>, op: LockOp) -> Action {
    Action::Later(Box::pin(Acquisition::new(proxy, op)))
}

/// Runs any lock operation as a quorum operation.
pub fn run(proxy: &Arc<Proxy>, op: LockOp) -> Action {
    if let Err(refused) = check(proxy, &op) {
        return refused.into();
    }
    // A refresh in seconds of the same argument: its TTL is held to the same bound (checked
    // here, not in `check`, which plain `SET NX PX` runs too).
    let max = proxy.config().max_ttl_ms;
    if op.op == Op::AcquireOrRefreshSeconds
        && let refresh = op.op.refresh_ms(op.ttl_ms).unwrap_or(i64::MAX)
        && refresh > max as i64
    {
        return Reply::from(Error::TtlTooLong { ttl: refresh, max }).into();
    }
    // One future type per operation, so each is only as large as its own state; each takes its
    // turn on its keys now, at dispatch.
    match op.op {
        Op::Acquire
        | Op::AcquireOrRefresh
        | Op::AcquireOrRefreshAll
        | Op::AcquireOrKeep
        | Op::AcquireOrRefreshSeconds => {
            if op.op == Op::AcquireOrKeep && op.keys.len() != 1 {
                return Reply::from(Error::NoLockKeys).into();
            }
            acquisition(proxy, op)
        }
        Op::Extend | Op::ExtendAdd => {
            let ticket = turn(proxy, &op);
            // The turn goes to the extension, which keeps it past its reply when a quorum
            // repair has to wait for a member's answer (see `repair`).
            super::action::in_turn_of(proxy, ticket, move |proxy, held| async move {
                run_extend(&proxy, &op, held).await
            })
        }
        Op::Release | Op::ReleaseAll | Op::Delete => {
            let ticket = turn(proxy, &op);
            super::action::in_turn_of(proxy, ticket, move |proxy, held| async move {
                let reply = run_release(&proxy, &op).await;
                drop(held);
                reply
            })
        }
        Op::Inspect | Op::Remaining | Op::Held => {
            let ticket = turn(proxy, &op);
            super::action::in_turn_of(proxy, ticket, move |proxy, held| async move {
                let reply = match op.op {
                    Op::Inspect => run_inspect(&proxy, &op).await,
                    Op::Held => run_held(&proxy, &op).await,
                    _ => run_remaining(&proxy, &op).await,
                };
                drop(held);
                reply
            })
        }
    }
}

/// The error a quorum of masters answered alike to one of the proxy's scripts (such as
/// `WRONGTYPE` for a key of another type), as one Redis would answer the client's own script.
pub(super) fn agreed_error(ballots: &Ballots) -> Option<Reply> {
    ballots.majority_error().map(Reply::from_our_script)
}

/// Whether an acquisition asks each master plain `SET key token NX PX ttl`: one key, and not
/// reentrant (a key already holding the token is as taken as any other, so the holder's value
/// is not needed to decide). The master answers `OK` when it created the key and nil when the
/// key was there, whoever holds it.
fn asks_plain(op: &LockOp) -> bool {
    op.op == Op::Acquire && op.keys.len() == 1
}

/// How a master's answer to the acquisition `op` reads as a "yes" (see [`acquire_request`]):
/// [`set_ok`] for plain `SET NX`, [`wrote`] for the other forms.
fn created_by(op: &LockOp) -> impl Fn(&Reply) -> bool + Copy + use<> {
    // One closure for both forms rather than a function pointer, so the check can be inlined.
    let plain = asks_plain(op);
    move |r| if plain { set_ok(r) } else { wrote(r) }
}

/// A master's "yes" to plain `SET key token NX PX ttl`: `OK`, it created the key. Nil (the key
/// was there, even with the caller's own value: Redis answers nil to a second `SET NX`) or an
/// error is a "no".
fn set_ok(r: &Reply) -> bool {
    matches!(r, Reply::Simple(s) if s.as_ref() == b"OK")
}

/// A master's "yes" to a reentrant or many-key acquisition: nil from `SET key token NX PX ttl
/// GET` (it created the key), or the per-key codes of [`ACQUIRE`]. Anything else is a "no":
/// another holder's value, the caller's own value, 0 or -1 from the script, an error.
fn wrote(r: &Reply) -> bool {
    matches!(r, Reply::Nil | Reply::Array(_))
}

/// A master's "yes" to an extension: the new TTL.
fn extended(r: &Reply) -> bool {
    matches!(r, Reply::Integer(n) if *n > 0)
}

/// Whether `reply` is one that `op` answers when it is granted (a fresh grant or, for replies
/// that tell them apart, a refresh).
pub fn is_granted_reply(op: &LockOp) -> impl Fn(&Reply) -> bool + Send + 'static + use<> {
    let fresh = answer(op.answer, true, op.keys.len(), &op.token);
    let again = match op.answer {
        Answer::Const(c) => constant_for(c.again, &op.token),
        _ => fresh.clone(),
    };
    move |r| *r == fresh || *r == again
}

/// The reply of a granted acquisition: `again` of a script's constant replies when a quorum of
/// the masters found every key already the caller's and refreshed it (the canonical script's
/// codes are all 2 there), else the fresh grant's.
fn granted_answer(op: &LockOp, ballots: &Ballots) -> Reply {
    match op.answer {
        Answer::Const(c) if c.again != c.ok => {
            let keep = op.op == Op::AcquireOrKeep;
            let refreshed = |r: &Reply| {
                matches!(r, Reply::Array(codes)
                    if !codes.is_empty() && codes.iter().all(|c| *c == Reply::Integer(2)))
                    || (keep && already_mine(op, r))
            };
            constant_for(
                if ballots.agree(refreshed) {
                    c.again
                } else {
                    c.ok
                },
                &op.token,
            )
        }
        shape => answer(shape, true, op.keys.len(), &op.token),
    }
}

/// True for an operation that acquires (and may be leased).
pub fn acquires(op: &LockOp) -> bool {
    matches!(
        op.op,
        Op::Acquire
            | Op::AcquireOrRefresh
            | Op::AcquireOrRefreshAll
            | Op::AcquireOrKeep
            | Op::AcquireOrRefreshSeconds
    )
}

/// The reply for a granted (`ok`) or refused operation over `keys` keys.
fn answer(shape: Answer, ok: bool, keys: usize, token: &Bytes) -> Reply {
    match (shape, ok) {
        (Answer::Const(c), true) => constant_for(c.ok, token),
        (Answer::Const(c), false) => constant_for(c.no, token),
        (Answer::OkNil | Answer::OkZero, true) => Reply::ok(),
        (Answer::OkNil, false) => Reply::Nil,
        (Answer::Count, true) => Reply::Integer(keys as i64),
        (Answer::OneMinusOne, false) => Reply::Integer(-1),
        (Answer::ZeroOne, ok) => Reply::Integer(i64::from(!ok)),
        (_, ok) => Reply::Integer(i64::from(ok)),
    }
}

/// One of a script's constant replies for a call with `token`: a [`Lit::TokenText`] is that
/// token.
fn constant_for(l: Lit, token: &Bytes) -> Reply {
    match l {
        Lit::TokenText => Reply::Bulk(token.clone()),
        l => constant(l),
    }
}

/// One of a script's constant replies (see [`crate::lockop::Replies`]), for replies that do
/// not name the call's token (hash locks' never do).
pub(super) fn constant(l: Lit) -> Reply {
    match l {
        Lit::Int(n) => Reply::Integer(n),
        Lit::Nil => Reply::Nil,
        Lit::Ok => Reply::ok(),
        Lit::Bulk(s) => Reply::Bulk(Bytes::copy_from_slice(s.as_bytes())),
        Lit::Error(e) => Reply::Error(Bytes::copy_from_slice(e.as_bytes())),
        Lit::Single(n) => Reply::Array(vec![Reply::Integer(n)]),
        Lit::SingleBulk(s) => Reply::Array(vec![Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))]),
        Lit::Decimal(n) => Reply::Bulk(Bytes::from(n.to_string())),
        // Bound to the call's TTL when the script's call is read (`command::script`); never
        // left unbound there, and never answered as a grant if it were.
        Lit::TtlNum | Lit::TtlText | Lit::TokenText => Reply::Error(Bytes::from_static(
            b"ERR redlock-proxy: a script's TTL or token reply was not bound to its call",
        )),
    }
}

/// An acquisition dispatched at `since` (for the `redlock_acquire_seconds` histogram, which
/// every acquisition feeds: `SET NX` and library scripts alike), run once its keys' turn (taken
/// at dispatch as `action::in_turn` does) has come.
///
/// Written out as a future of its own rather than an `async fn`, because it is the one future
/// every lock request makes: each step's state is written in place and nothing moves on the
/// way to a grant, where the `async fn` it replaces kept room for every step's locals (768
/// bytes, all copied into its box). Keeping it unboxed in the client's pipeline was measured
/// and lost: every pipeline entry grows to its size and is moved on push and pop.
pub struct Acquisition {
    proxy: Arc<Proxy>,
    since: Instant,
    op: LockOp,
    stage: Stage,
}

/// Where an [`Acquisition`] is. Each step's state is written in place; nothing of it moves on
/// the way to a grant.
enum Stage {
    /// Waiting for the keys' turn.
    Turn(Ready),
    /// The masters were asked at `start`; waiting for their decision.
    Vote {
        held: Held,
        vote: Vote,
        start: Instant,
    },
    /// Not granted by the first answers (a refresh round, the refusal and its roll-back): the
    /// rarer path, boxed, so its state does not enlarge every acquisition.
    Rest(super::action::Later),
    /// Answered.
    Done,
}

impl Acquisition {
    /// Takes the operation's turn on its keys, last: from then on it waits for the earlier
    /// operations on them.
    fn new(proxy: &Arc<Proxy>, op: LockOp) -> Self {
        let since = Instant::now();
        let ready = turn(proxy, &op).ready();
        Acquisition {
            proxy: proxy.clone(),
            since,
            op,
            stage: Stage::Turn(ready),
        }
    }
}

impl Future for Acquisition {
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
                    let op = &this.op;
                    if op.ttl_ms <= 0 {
                        // An absolute expiry in the past: the lock would be born expired.
                        this.stage = Stage::Done;
                        Counters::bump(&proxy.counters().denials);
                        return Poll::Ready(answer(op.answer, false, op.keys.len(), &op.token));
                    }
                    // The member set this operation uses to its end, roll-back included.
                    let masters = proxy.masters();
                    let req = acquire_request(&masters, op);
                    // The validity clock starts no later than the requests leave: the dispatch
                    // time when the turn was ours at once (earlier, so the validity is if
                    // anything underestimated), else now.
                    let start = if held.waited() {
                        Instant::now()
                    } else {
                        this.since
                    };
                    let deadline = start + proxy.config().node_timeout();
                    let vote = ask_timed_on(masters, req, 1, deadline);
                    this.stage = Stage::Vote { held, vote, start };
                }
                Stage::Vote { vote, start, .. } => {
                    if vote.poll_decide_yes(cx, created_by(&this.op)).is_pending() {
                        return Poll::Pending;
                    }
                    let op = &this.op;
                    if let Some(ok) = grant(proxy, op, vote.ballots(), *start, this.since) {
                        // The vote ends and the keys' turn passes on here.
                        this.stage = Stage::Done;
                        return Poll::Ready(ok);
                    }
                    let Stage::Vote { held, vote, start } =
                        std::mem::replace(&mut this.stage, Stage::Done)
                    else {
                        unreachable!("in the vote stage");
                    };
                    let op = std::mem::replace(&mut this.op, LockOp::taken());
                    let rest =
                        not_granted_at_once(proxy.clone(), op, held, this.since, vote, start);
                    this.stage = Stage::Rest(Box::pin(rest));
                }
                Stage::Rest(rest) => return rest.as_mut().poll(cx),
                // Not polled again once answered (a pipeline keeps the reply instead).
                Stage::Done => return Poll::Pending,
            }
        }
    }
}

/// What an acquisition sends each master. One key: `SET key token NX PX ttl` (see
/// [`asks_plain`]), the very command a client would send one Redis, and the cheapest a master
/// can run. A reentrant one adds `GET`, which names the holder in the same command (Redis 7.0
/// and later; older masters get the [`ACQUIRE`] script, as several keys do). Built outside the
/// acquisition's future, so none of this is stored across its waits.
fn acquire_request(masters: &Masters, op: &LockOp) -> Request {
    let k = op.keys.len();
    let flag = acquire_flag(op.op);
    let script = || {
        let mut ttl = itoa::Buffer::new();
        let ttl = ttl.format(op.ttl_ms).as_bytes();
        match op.op {
            Op::AcquireOrRefreshSeconds => {
                let mut buf = itoa::Buffer::new();
                let again = op.op.refresh_ms(op.ttl_ms).unwrap_or(op.ttl_ms);
                eval(
                    ACQUIRE,
                    &op.keys,
                    &[&op.token, ttl, flag, buf.format(again).as_bytes()],
                )
            }
            _ => eval(ACQUIRE, &op.keys, &[&op.token, ttl, flag]),
        }
    };
    if asks_plain(op) {
        Request::Same(crate::wire::master::set_nx(
            &op.keys[0],
            &op.token,
            op.ttl_ms,
            false,
        ))
    } else if k == 1 {
        let set = crate::wire::master::set_nx(&op.keys[0], &op.token, op.ttl_ms, true);
        if masters.iter().all(|m| m.info().set_nx_get()) {
            Request::Same(set)
        } else {
            Request::Each(
                masters
                    .iter()
                    .map(|m| {
                        if m.info().set_nx_get() {
                            set.clone()
                        } else {
                            script()
                        }
                    })
                    .collect(),
            )
        }
    } else {
        Request::Same(script())
    }
}

/// The grant of an acquisition whose masters answered `ballots`, if they make one (see
/// [`granted`]), counted and answered.
fn grant(
    proxy: &Proxy,
    op: &LockOp,
    ballots: &Ballots,
    start: Instant,
    since: Instant,
) -> Option<Reply> {
    let ttl = Duration::from_millis(op.ttl_ms as u64);
    // One clock read for the validity and the histogram.
    let now = Instant::now();
    let elapsed = now.saturating_duration_since(start);
    let left = granted(ballots, created_by(op), ttl, elapsed, proxy.config())?;
    trace!(
        validity_ms = left.as_millis(),
        keys = op.keys.len(),
        "lock granted"
    );
    Counters::bump(&proxy.counters().grants);
    // The validity clock started at dispatch unless the turn had to be waited for, so the
    // one subtraction usually serves the histogram too.
    let took = if start == since {
        elapsed
    } else {
        now.saturating_duration_since(since)
    };
    proxy.counters().observe_acquire(took);
    Some(granted_answer(op, ballots))
}

/// Whether a master's first-round answer to a reentrant acquisition says the key already holds
/// the caller's token: `SET ... NX GET` names it, or (older masters, take-or-keep) [`ACQUIRE`]
/// answers -1.
fn already_mine(op: &LockOp, r: &Reply) -> bool {
    match r {
        Reply::Bulk(v) => *v == op.token,
        Reply::Integer(-1) => op.op == Op::AcquireOrKeep,
        _ => false,
    }
}

/// The grant of a take-or-keep acquisition (see [`Op::AcquireOrKeep`]), if a quorum of masters
/// hold the key for the caller with enough validity left: a master that created the key
/// brings the requested TTL; one where it was already the caller's brings what it still has
/// (its PTTL, read after the first round, `left`; a key without a TTL, the requested TTL), and
/// the quorum-th largest of those TTLs is judged by the validity rule from the dispatch.
fn grant_kept(
    proxy: &Proxy,
    op: &LockOp,
    ballots: &Ballots,
    left: &Ballots,
    start: Instant,
    since: Instant,
) -> Option<Reply> {
    let created = created_by(op);
    let ttl = ballots.quorum_th(
        |i, r| {
            if created(r) {
                return Some(op.ttl_ms);
            }
            match left.replies.get(i)? {
                Some(Reply::Integer(-1)) => Some(op.ttl_ms),
                Some(Reply::Integer(n)) if *n > 0 => Some((*n).min(op.ttl_ms)),
                _ => None,
            }
        },
        |t| *t,
    )?;
    let now = Instant::now();
    let elapsed = now.saturating_duration_since(start);
    let cfg = proxy.config();
    let min = Duration::from_millis(cfg.min_validity_ms);
    let valid = validity(Duration::from_millis(ttl as u64), elapsed, cfg.drift_factor)
        .filter(|v| *v > min)?;
    trace!(validity_ms = valid.as_millis(), "lock granted (kept)");
    Counters::bump(&proxy.counters().grants);
    proxy
        .counters()
        .observe_acquire(now.saturating_duration_since(since));
    Some(granted_answer(op, ballots))
}

/// The [`ACQUIRE`] script's flag for `op`: `1` accepts keys that already hold the token, `2`
/// only when every key does, `0` neither.
fn acquire_flag(op: Op) -> &'static [u8] {
    match op {
        Op::AcquireOrRefreshAll => b"2",
        Op::AcquireOrRefresh | Op::AcquireOrRefreshSeconds => b"1",
        _ => b"0",
    }
}

/// An acquisition that the first round did not grant: a reentrant one refreshes the keys that
/// already hold its token and is decided again; otherwise it is refused and rolled back.
async fn not_granted_at_once(
    proxy: Arc<Proxy>,
    op: LockOp,
    held: crate::keylock::Held,
    since: Instant,
    mut vote: crate::quorum::Vote,
    start: Instant,
) -> Reply {
    let k = op.keys.len();
    // The snapshot the first round went to: every later step addresses the same masters.
    let masters = vote.masters().clone();
    let reentrant = matches!(
        op.op,
        Op::AcquireOrRefresh
            | Op::AcquireOrRefreshAll
            | Op::AcquireOrKeep
            | Op::AcquireOrRefreshSeconds
    );
    let keep = op.op == Op::AcquireOrKeep;
    let deadline = start + proxy.config().node_timeout();
    let ttl_arg = itoa::Buffer::new().format(op.ttl_ms).to_owned();
    // Where the key already holds the token, the TTL a refresh sets (see `Op::refresh_ms`).
    let again_arg = itoa::Buffer::new()
        .format(op.op.refresh_ms(op.ttl_ms).unwrap_or(op.ttl_ms))
        .to_owned();
    let flag = acquire_flag(op.op);
    let script = || {
        eval(
            ACQUIRE,
            &op.keys,
            &[&op.token, ttl_arg.as_bytes(), flag, again_arg.as_bytes()],
        )
    };
    let yes = created_by(&op);
    let first = vote.decide_by(yes).await;
    let mine = |r: &Reply| already_mine(&op, r);
    // The first round's vote, while answers may still be due (see the refusal below).
    let (ballots, unfinished) = if keep && first.count(mine) > 0 {
        // Take-or-keep: where the key is already the caller's, it is left as it is; how long it
        // still holds there (read in the same compare, so a key lost meanwhile does not count)
        // is what that master brings to the grant's validity.
        let ballots = vote.finish().await;
        let remaining = eval(REMAINING, &op.keys, &[&op.token]);
        let asks: Vec<Option<Bytes>> = ballots
            .replies
            .iter()
            .map(|r| r.as_ref().is_some_and(mine).then(|| remaining.clone()))
            .collect();
        let left = ask_timed(&masters, Request::Some(asks), 1, deadline)
            .outcome()
            .await;
        if let Some(ok) = grant_kept(&proxy, &op, &ballots, &left, start, since) {
            return ok;
        }
        (ballots, None)
    } else if reentrant && first.count(mine) > 0 {
        // A retry by the same token found the key already its own on some masters: refresh it
        // there (the script answers `[2]`), so the retry is granted with a full TTL rather
        // than refused until the first attempt's keys expire.
        let mut ballots = vote.finish().await;
        let again: Vec<Option<Bytes>> = ballots
            .replies
            .iter()
            .map(|r| r.as_ref().is_some_and(mine).then(script))
            .collect();
        let refreshed = ask_timed(&masters, Request::Some(again), 1, deadline)
            .outcome()
            .await;
        for (i, r) in refreshed.replies.into_iter().enumerate() {
            if let Some(r) = r {
                ballots.replies[i] = Some(r);
            }
        }
        if let Some(ok) = grant(&proxy, &op, &ballots, start, since) {
            return ok;
        }
        (ballots, None)
    } else {
        (first.clone(), Some(vote))
    };
    debug!(
        yes = ballots.count(yes),
        quorum = ?ballots.quorum,
        keys = k,
        "lock refused"
    );
    Counters::bump(&proxy.counters().denials);
    proxy.counters().observe_acquire(since.elapsed());
    let refused = match agreed_error(&ballots) {
        // A script that takes or refreshes a key reads its value first, and on one Redis that
        // raises `WRONGTYPE` for a key of another type: a quorum's error is the answer, as
        // Redis gives it for the client's own script. `SET ... NX` (the `OK`-or-nil shape)
        // never reads the value, so Redis answers nil there, as the proxy does.
        Some(e) if reentrant && op.answer != Answer::OkNil => e,
        _ => answer(op.answer, false, k, &op.token),
    };
    if let Some(vote) = unfinished.filter(|_| {
        ballots.replies.iter().any(Option::is_none)
            && (reentrant || earlier_grant_possible(&ballots, None, &op))
    }) {
        // Decided early, with masters yet to answer, and the key may already hold this very
        // value there: the attempt is reentrant, or some master reported the key holding it, or
        // a plain "taken" that does not say by whom (an earlier grant of this client's, or
        // another holder whose value is the same, such as a timestamp). An answer still due
        // tells whether the key there was created by this attempt (delete it) or was already
        // there (keep it), so the clean-up waits for those answers (until the node deadline)
        // unless the holders, once named, rule such a grant out. The client has its answer
        // now; the keys stay held until the clean-up is queued.
        tokio::spawn(async move {
            let mut vote = vote;
            // Answers that came in since the decision (a master a little behind the others, as
            // usual) count first: with every answer in, nothing needs naming or waiting for.
            vote.absorb();
            // Who holds the key where a plain "taken" did not say (those masters have answered,
            // so this is quick). The late answers are waited for only while they can still
            // change the plan, so a slow master does not hold the key's turn.
            let holders = name_holders(&proxy, &masters, vote.ballots(), &op).await;
            let ballots =
                if reentrant || earlier_grant_possible(vote.ballots(), holders.as_ref(), &op) {
                    vote.finish().await
                } else {
                    vote.ballots().clone()
                };
            roll_back(&proxy, &masters, &ballots, holders.as_ref(), &op);
            drop(held);
        });
        return refused;
    }
    // Roll back before the keys are free (`held`), so no later operation on them can overtake
    // the clean-up. Every answer is in, or the attempt is not reentrant: then a master that has
    // not answered gets its clean-up queued behind the attempt on the same connection, so
    // nothing waits for a slow master (see `roll_back`).
    // (A plain "taken" with masters unanswered was sent down the spawned path above, so nothing
    // here needs the holders named.)
    roll_back(&proxy, &masters, &ballots, None, &op);
    drop(held);
    refused
}

/// The acquisition's decision: granted, with the validity left, when a quorum of masters
/// created the keys (`yes`, see [`created_by`]) and the validity (`ttl − elapsed − drift`) is
/// above `min_validity_ms`.
fn granted(
    ballots: &Ballots,
    yes: impl Fn(&Reply) -> bool,
    ttl: Duration,
    elapsed: Duration,
    cfg: &Config,
) -> Option<Duration> {
    let min = Duration::from_millis(cfg.min_validity_ms);
    validity(ttl, elapsed, cfg.drift_factor).filter(|left| ballots.agree(yes) && *left > min)
}

/// Deletes (where they still hold the token) the keys a refused acquisition may have created
/// (see [`roll_back_plan`]).
fn roll_back(
    proxy: &Proxy,
    masters: &Masters,
    ballots: &Ballots,
    holders: Option<&Ballots>,
    op: &LockOp,
) {
    if take_back(masters, &roll_back_plan(ballots, holders, op), &op.token) {
        Counters::bump(&proxy.counters().rollbacks);
    }
}

/// For each master, the keys a refused acquisition may have created there: on a master that
/// said yes, the keys it reports as created (a reentrant attempt leaves keys that already held
/// the token alone); on a master whose outcome is unknown (no answer yet, or an answer that did
/// not count: excluded, clock jump, connection lost), every key, unless an earlier grant of
/// this token may live there (see [`earlier_grant_possible`], which `holders` informs); then
/// what the attempt may have created there is left to expire with its TTL. A master that said
/// "taken" wrote nothing.
fn roll_back_plan<'a>(
    ballots: &Ballots,
    holders: Option<&Ballots>,
    op: &'a LockOp,
) -> Vec<Vec<&'a Bytes>> {
    let keep_unknown = earlier_grant_possible(ballots, holders, op);
    let created = created_by(op);
    (0..ballots.replies.len())
        .map(|i| match &ballots.replies[i] {
            Some(Reply::Array(codes)) => op
                .keys
                .iter()
                .zip(codes)
                .filter(|(_, c)| **c == Reply::Integer(1))
                .map(|(key, _)| key)
                .collect(),
            Some(r) if created(r) => op.keys.iter().collect(),
            Some(_) => Vec::new(),
            None if ballots.may_have_run(i) && !keep_unknown => op.keys.iter().collect(),
            None => Vec::new(),
        })
        .collect()
}

/// Takes a write back where it may have landed: on each master, compare-and-delete of `value`
/// from the keys `plan` names for it (the one clean-up that refused acquisitions and legacy
/// writes share). Answers whether anything was sent. The clean-up is queued behind the write
/// on the same connection, so it reaches a slow master after the write it undoes. `masters`
/// is the snapshot the write went to (the plan's positions are its positions).
pub(crate) fn take_back(masters: &[Backend], plan: &[Vec<&Bytes>], value: &Bytes) -> bool {
    let mut sent = false;
    for (m, keys) in masters.iter().zip(plan) {
        if !keys.is_empty() {
            m.send(eval(RELEASE, keys, &[value]), 1, None);
            sent = true;
        }
    }
    sent
}

/// Whether a still valid grant of this very token may hold the key on a master whose outcome
/// is unknown, so that deleting the token there could take that grant's key away. The grant
/// may be an earlier one of this client's, or another holder's whose value happens to be the
/// same (libraries that use timestamps or host names as values).
///
/// A valid grant holds its key on a quorum of masters. For one key, every trusted master that
/// answered reported such a key as already holding the token (`SET NX GET` names the value;
/// [`ACQUIRE`] answers 2 or -1). Plain `SET NX` names no value: its "taken" counts as this
/// token unless `holders` (a `GET` of the key asked afterwards, see [`name_holders`]) found
/// another value or none there. So when no answer says so and the masters that gave no counted
/// answer are fewer than a quorum, no valid grant of this token exists, and the unknown masters
/// can be cleaned up like any others. With several keys a master stops at the first key taken
/// by someone else without reporting the rest, so nothing can be concluded.
fn earlier_grant_possible(ballots: &Ballots, holders: Option<&Ballots>, op: &LockOp) -> bool {
    let plain = asks_plain(op);
    let is_token = |r: &Reply| matches!(r, Reply::Bulk(v) if *v == op.token);
    let same_value = ballots.replies.iter().enumerate().any(|(i, r)| match r {
        Some(Reply::Array(codes)) => codes.contains(&Reply::Integer(2)),
        Some(Reply::Nil) if plain => holders
            .and_then(|h| h.replies[i].as_ref())
            .is_none_or(is_token),
        Some(r @ Reply::Bulk(_)) => is_token(r),
        Some(Reply::Integer(n)) => *n == -1,
        _ => false,
    });
    // During a change of members a grant may rest on either side alone (made by a proxy not
    // yet, or no longer, deciding with both), so either side's quorum counts here.
    let unknown = ballots.could_hold(|i| ballots.replies[i].is_none());
    op.keys.len() > 1 || same_value || unknown
}

/// Who holds the key now on each master that answered a plain acquisition's `SET NX` with
/// "taken" (nil names nobody), asked with `GET` once the attempt is refused: what
/// [`earlier_grant_possible`] needs to clean up the masters whose outcome is unknown. `None`
/// when it cannot change the plan: not a plain acquisition, no unknown master that may have
/// run it, no "taken", or too many unknown masters to conclude anything.
async fn name_holders(
    proxy: &Proxy,
    masters: &Masters,
    ballots: &Ballots,
    op: &LockOp,
) -> Option<Ballots> {
    let n = ballots.replies.len();
    let unknown = ballots.could_hold(|i| ballots.replies[i].is_none());
    let cleanable = (0..n).any(|i| ballots.replies[i].is_none() && ballots.may_have_run(i));
    if !asks_plain(op) || !cleanable || unknown {
        return None;
    }
    let get = command(&[b"GET", &op.keys[0]]);
    let asks: Vec<Option<Bytes>> = ballots
        .replies
        .iter()
        .map(|r| matches!(r, Some(Reply::Nil)).then(|| get.clone()))
        .collect();
    if asks.iter().all(Option::is_none) {
        return None;
    }
    let deadline = Instant::now() + proxy.config().node_timeout();
    Some(
        ask(masters, Request::Some(asks), 1, deadline)
            .finish()
            .await,
    )
}

/// An extension in its keys' turn (`held`: passed on to a quorum repair, else freed with the
/// answer).
async fn run_extend(proxy: &Arc<Proxy>, op: &LockOp, held: Held) -> Reply {
    let k = op.keys.len();
    if op.ttl_ms < 0 || (op.ttl_ms == 0 && op.op == Op::Extend) {
        return Reply::from(Error::InvalidExtension);
    }
    let (decided, vote, start) = extend_on_masters(proxy, op).await;
    let ballots = vote.ballots();
    match decided {
        Extension::Granted => {
            repair_after(proxy, op, vote, start, held);
            answer(op.answer, true, k, &op.token)
        }
        Extension::BeyondMax => Reply::from(Error::ExtensionTooLong {
            max: proxy.config().max_ttl_ms,
        }),
        // A quorum's error (`WRONGTYPE` for a key of another type) is the client's answer, as
        // Redis gives it for the client's own script.
        Extension::Refused if let Some(e) = agreed_error(ballots) => e,
        Extension::Refused => {
            debug!(
                extended = ballots.count(extended),
                keys = k,
                "extension refused"
            );
            match op.answer {
                // A script that answers otherwise where its one key is gone: where a quorum
                // found it missing ([`EXTEND`] answers -3).
                Answer::Const(c)
                    if k == 1 && c.gone != c.no && ballots.agree(|r| *r == Reply::Integer(-3)) =>
                {
                    constant_for(c.gone, &op.token)
                }
                shape => answer(shape, false, k, &op.token),
            }
        }
    }
}

/// Runs an extension of `op` on every master and decides it as soon as it can (see
/// [`extension`]); the vote, for its ballots, and when it was sent.
async fn extend_on_masters(proxy: &Proxy, op: &LockOp) -> (Extension, Vote, Instant) {
    let ttl_arg = itoa::Buffer::new().format(op.ttl_ms).to_owned();
    let max = itoa::Buffer::new()
        .format(proxy.config().max_ttl_ms)
        .to_owned();
    let add: &[u8] = if op.op == Op::ExtendAdd { b"1" } else { b"0" };
    let req = eval(
        EXTEND,
        &op.keys,
        &[&op.token, ttl_arg.as_bytes(), add, max.as_bytes()],
    );
    let start = Instant::now();
    let deadline = start + proxy.config().node_timeout();
    let mut vote = ask(&proxy.masters(), Request::Same(req), 1, deadline);
    let decided = extension(
        vote.decide_by(extended).await,
        start.elapsed(),
        proxy.config(),
    );
    (decided, vote, start)
}

/// An extension's outcome.
#[derive(Debug, PartialEq, Eq)]
enum Extension {
    /// A quorum extended, and the TTL they agree on is still valid.
    Granted,
    /// Refused because the new TTL would exceed `max_ttl_ms` (the script answers -2).
    BeyondMax,
    /// Refused: fewer than a quorum hold the token, or too little time is left.
    Refused,
}

/// Decides an extension from the masters' new TTLs: granted when the TTL a quorum now hold at
/// least, minus the elapsed time and drift, is above `min_validity_ms`.
fn extension(ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Extension {
    let min = Duration::from_millis(cfg.min_validity_ms);
    let valid = ballots.quorum_th(positive, |t| *t).is_some_and(|t| {
        validity(Duration::from_millis(t as u64), elapsed, cfg.drift_factor)
            .is_some_and(|v| v > min)
    });
    if valid {
        Extension::Granted
    } else if ballots.count(|r| *r == Reply::Integer(-2)) > 0 {
        Extension::BeyondMax
    } else {
        Extension::Refused
    }
}

/// Release (compare-and-delete) or delete (whatever the keys hold) on all N masters, with the
/// wake-up signal where there is one; a key counts as done when a quorum deleted it.
async fn run_release(proxy: &Proxy, op: &LockOp) -> Reply {
    let k = op.keys.len();
    let req = match (&op.wake, op.op) {
        (None, Op::Release) if op.publish.is_some() => {
            let p = op.publish.as_deref().expect("checked");
            let mode: &[u8] = match p.when {
                AnnounceWhen::Always => b"1",
                AnnounceWhen::Released => b"0",
                AnnounceWhen::ReleasedOrGone => b"2",
            };
            eval(
                RELEASE_PUBLISH,
                &op.keys,
                &[&op.token, &p.command, &p.channel, &p.message, mode],
            )
        }
        (None, Op::Release) => eval(RELEASE, &op.keys, &[&op.token]),
        (None, Op::ReleaseAll) => eval(RELEASE_ALL, &op.keys, &[&op.token]),
        (wake, _) => {
            let n = Bytes::from(k.to_string());
            let mut keys: Vec<&Bytes> = op.keys.iter().collect();
            let mut args: Vec<Bytes> = vec![op.token.clone(), n];
            if let Some(w) = wake {
                keys.push(&w.list);
                args.extend(w.args());
            }
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
            let script = if op.op == Op::Release {
                RELEASE
            } else {
                DELETE
            };
            eval(script, &keys, &args)
        }
    };
    // A release has no validity clock running: rather than answer "not released" because a
    // busy master was slower than `node_timeout_ms`, it waits for each master until it answers
    // or is marked down (`stall_timeout_ms` without an answer). A quorum that agree still
    // decide at once.
    let patience = proxy
        .config()
        .node_timeout()
        .max(Duration::from_millis(proxy.config().stall_timeout_ms));
    let ballots = ask(
        &proxy.masters(),
        Request::Same(req),
        1,
        Instant::now() + patience,
    )
    .outcome()
    .await;
    let (reply, all) = released(&ballots, k, op.answer, &op.token);
    if all {
        Counters::bump(&proxy.counters().releases);
    }
    reply
}

/// Decides a release or delete over `k` keys from each master's per-key codes (1 deleted,
/// -1 missing, 0 held by another): a key counts as released when a quorum deleted it, and as
/// already gone when a quorum deleted it or no longer had it. Answered in `shape`. When fewer
/// than a quorum gave a full set of codes: the error a quorum answered alike (`WRONGTYPE` for a
/// key of another type, as Redis answers the client's own script), else the `CLUSTERDOWN` error.
/// Also says whether every key was released.
fn released(ballots: &Ballots, k: usize, shape: Answer, token: &Bytes) -> (Reply, bool) {
    let codes = |i: usize| match &ballots.replies[i] {
        Some(Reply::Array(c)) if c.len() == k => Some(c.as_slice()),
        _ => None,
    };
    if !ballots.is_quorum(|i| codes(i).is_some()) {
        let refused = agreed_error(ballots).unwrap_or_else(|| Reply::from(Error::NoQuorumRelease));
        return (refused, false);
    }
    let (mut released, mut gone) = (0, 0);
    for i in 0..k {
        let said = |m: usize, code: i64| codes(m).is_some_and(|c| c[i] == Reply::Integer(code));
        if ballots.is_quorum(|m| said(m, 1)) {
            released += 1;
        } else if ballots.is_quorum(|m| said(m, 1) || said(m, -1)) {
            gone += 1;
        }
    }
    let reply = match shape {
        Answer::Count => Reply::Integer(released as i64),
        Answer::Tristate if released == k => Reply::Integer(1),
        Answer::Tristate if released + gone == k => Reply::Integer(-1),
        Answer::Tristate => Reply::Integer(0),
        Answer::Const(c) if released < k && released + gone == k => constant_for(c.gone, token),
        shape => answer(shape, released == k, k, token),
    };
    (reply, released == k)
}

async fn run_inspect(proxy: &Proxy, op: &LockOp) -> Reply {
    let req = eval(INSPECT, &op.keys[..1], &[]);
    let deadline = Instant::now() + proxy.config().node_timeout();
    let ballots = ask(&proxy.masters(), Request::Same(req), 1, deadline)
        .decide_by(|r| match r {
            Reply::Array(pair) => pair.first().cloned(),
            _ => None,
        })
        .await
        .clone();
    inspected(&ballots)
}

/// Decides a read of a lock: `[value, pttl]` with the value a quorum of masters agree on and
/// the quorum-th largest TTL among the masters holding it; `[nil, -2]` without such a value.
fn inspected(ballots: &Ballots) -> Reply {
    let pair = |r: &Reply| match r {
        Reply::Array(pair) => match pair.as_slice() {
            [value, Reply::Integer(ttl)] => Some((value.clone(), *ttl)),
            _ => None,
        },
        _ => None,
    };
    let pairs: Vec<Option<(Reply, i64)>> = ballots
        .replies
        .iter()
        .map(|r| r.as_ref().and_then(pair))
        .collect();
    let holds = |i: usize, v: &Reply| pairs[i].as_ref().is_some_and(|(o, _)| o == v);
    let value = pairs
        .iter()
        .flatten()
        .map(|(v, _)| v)
        .find(|v| ballots.is_quorum(|i| holds(i, v)));
    match value {
        Some(Reply::Bulk(v)) => {
            let bulk = Reply::Bulk(v.clone());
            let ttl = ballots
                .quorum_th(
                    |i, _| {
                        pairs[i]
                            .as_ref()
                            .filter(|(o, _)| *o == bulk)
                            .map(|(_, t)| *t)
                    },
                    |t| *t,
                )
                .unwrap_or(-2);
            Reply::Array(vec![Reply::Bulk(v.clone()), Reply::Integer(ttl)])
        }
        _ => Reply::Array(vec![Reply::Nil, Reply::Integer(-2)]),
    }
}

/// Whether the caller holds its key (see [`Op::Held`]): each master's value of `KEYS[1]` (the
/// [`INSPECT`] read; a `Held` operation has no TTL, so `check` lets it through).
async fn run_held(proxy: &Proxy, op: &LockOp) -> Reply {
    let req = eval(INSPECT, &op.keys[..1], &[]);
    let deadline = Instant::now() + proxy.config().node_timeout();
    let ballots = ask(&proxy.masters(), Request::Same(req), 1, deadline)
        .outcome()
        .await;
    held_answer(&ballots, &op.token, op.answer)
}

/// The answer of [`Op::Held`] from each master's `[value, pttl]`: `ok` where a quorum hold the
/// token, `gone` where a quorum have no key, else `no`; an error a quorum agree on (a key of
/// another type) as one Redis gives it.
fn held_answer(ballots: &Ballots, token: &Bytes, shape: Answer) -> Reply {
    let Answer::Const(c) = shape else {
        return Reply::from(Error::NoQuorumUnlock);
    };
    if let Some(e) = agreed_error(ballots) {
        return e;
    }
    let value = |i: usize| match &ballots.replies[i] {
        Some(Reply::Array(pair)) => pair.first().cloned(),
        _ => None,
    };
    if ballots.is_quorum(|i| matches!(value(i), Some(Reply::Bulk(v)) if v == token)) {
        constant_for(c.ok, token)
    } else if ballots.is_quorum(|i| matches!(value(i), Some(Reply::Nil))) {
        constant_for(c.gone, token)
    } else {
        constant_for(c.no, token)
    }
}

async fn run_remaining(proxy: &Proxy, op: &LockOp) -> Reply {
    let req = eval(REMAINING, &op.keys, &[&op.token]);
    let deadline = Instant::now() + proxy.config().node_timeout();
    let ballots = ask(&proxy.masters(), Request::Same(req), 1, deadline)
        .outcome()
        .await;
    remaining(&ballots, op.answer, op.ttl_ms)
}

/// Decides how long the caller still holds its keys (see [`Op::Remaining`]) from each master's
/// answer ([`REMAINING`]: the smallest PTTL, -1 without a TTL, -3 not held): the quorum-th
/// largest TTL, in `unit_ms` (1000: seconds, rounded as Redis's `TTL`); else the script's
/// constant for "held without a TTL" when a quorum hold the token, or for "not held".
fn remaining(ballots: &Ballots, shape: Answer, unit_ms: i64) -> Reply {
    let Answer::Const(c) = shape else {
        return Reply::from(Error::TtlReadShape);
    };
    match ballots.quorum_th(positive, |t| *t) {
        Some(t) if unit_ms == 1000 => Reply::Integer((t + 500) / 1000),
        Some(t) => Reply::Integer(t),
        None if ballots.agree(|r| matches!(r, Reply::Integer(t) if *t > 0 || *t == -1)) => {
            constant(c.ok)
        }
        None => constant(c.no),
    }
}

/// A master's positive integer reply (a TTL), for [`Ballots::quorum_th`].
fn positive(_: usize, r: &Reply) -> Option<i64> {
    match r {
        Reply::Integer(n) if *n > 0 => Some(*n),
        _ => None,
    }
}

/// The decisions above, each against a scripted set of masters' answers.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;
    use Reply::Integer as I;

    use crate::quorum::scripted::ballots;

    use crate::quorum::scripted::codes as codes_of;

    fn op(keys: &[&'static str]) -> LockOp {
        LockOp {
            op: Op::Acquire,
            keys: keys
                .iter()
                .map(|k| Bytes::from_static(k.as_bytes()))
                .collect(),
            token: Bytes::from_static(b"tok"),
            ttl_ms: 10_000,
            answer: Answer::OkNil,
            wake: None,
            publish: None,
        }
    }

    /// The reentrant form of [`op`], whose one-key masters are asked `SET NX ... GET`.
    fn reentrant(keys: &[&'static str]) -> LockOp {
        LockOp {
            op: Op::AcquireOrRefresh,
            ..op(keys)
        }
    }

    fn bulk(v: &'static str) -> Option<Reply> {
        Some(Reply::Bulk(Bytes::from_static(v.as_bytes())))
    }

    const TTL: Duration = Duration::from_secs(10);
    const FAST: Duration = Duration::from_millis(10);

    #[test]
    fn acquisition_is_granted_only_with_a_quorum_of_creations_in_time() {
        let cfg = Config::default();
        let yes = created_by(&op(&["k"]));
        // Plain `SET NX`: OK is a creation, nil is taken (whoever holds it).
        let (created, taken) = (Some(Reply::ok()), Some(Reply::Nil));
        let yes2 = ballots(vec![created.clone(), created.clone(), taken.clone()]);
        assert!(granted(&yes2, yes, TTL, FAST, &cfg).is_some());
        let yes1 = ballots(vec![created.clone(), taken.clone(), None]);
        assert!(granted(&yes1, yes, TTL, FAST, &cfg).is_none());
        // A quorum, but the validity left (ttl − elapsed − drift) is gone.
        let late = Duration::from_millis(9_950);
        assert!(granted(&yes2, yes, TTL, late, &cfg).is_none());
        // `SET NX ... GET` (reentrant): nil is a creation; a value, even the caller's own, is a
        // key that was already there.
        let yes = created_by(&reentrant(&["k"]));
        let (created, mine) = (Some(Reply::Nil), bulk("tok"));
        let same = ballots(vec![mine.clone(), mine, created.clone()]);
        assert!(granted(&same, yes, TTL, FAST, &cfg).is_none());
        let two = ballots(vec![created.clone(), created, bulk("other")]);
        assert!(granted(&two, yes, TTL, FAST, &cfg).is_some());
        // One reading per form: the other form's "yes" never counts.
        assert!(granted(&two, created_by(&op(&["k"])), TTL, FAST, &cfg).is_none());
        assert!(granted(&yes2, yes, TTL, FAST, &cfg).is_none());
    }

    #[test]
    fn during_a_change_of_members_every_decision_needs_both_sides() {
        use crate::quorum::scripted::joint;
        let cfg = Config::default();
        // {A,B,C} → {A,B,D}, union A0 B1 C2 D3.
        let (old, new) = ([0, 1, 2], [0, 1, 3]);
        let yes = created_by(&op(&["k"]));
        let (created, taken) = (Some(Reply::ok()), Some(Reply::Nil));
        // B and D created the key, A and C hold another grant's (a proxy still on the old
        // set): a quorum of the new set, refused.
        let b = joint(
            vec![
                taken.clone(),
                created.clone(),
                taken.clone(),
                created.clone(),
            ],
            &old,
            &new,
        );
        assert!(granted(&b, yes, TTL, FAST, &cfg).is_none());
        // Rolled back where it wrote (B, D), by position in the union.
        let o = op(&["k"]);
        let k = &o.keys[0];
        assert_eq!(
            roll_back_plan(&b, None, &o),
            vec![vec![], vec![k], vec![], vec![k]]
        );
        // A and B: a quorum of each side.
        let b = joint(vec![created.clone(), created, taken, None], &old, &new);
        assert!(granted(&b, yes, TTL, FAST, &cfg).is_some());
        // A release counts by side too: deleted on A and C is no release of the new set.
        let b = joint(
            vec![
                codes_of(&[1]),
                codes_of(&[-1]),
                codes_of(&[1]),
                codes_of(&[-1]),
            ],
            &old,
            &new,
        );
        assert!(!released(&b, 1, Answer::ZeroOne, &Bytes::new()).1);
        let b = joint(
            vec![codes_of(&[1]), codes_of(&[1]), None, codes_of(&[-1])],
            &old,
            &new,
        );
        assert!(released(&b, 1, Answer::ZeroOne, &Bytes::new()).1);
    }

    #[test]
    fn a_refused_acquisition_is_rolled_back_only_where_it_may_have_written() {
        let o = op(&["k"]);
        let k = &o.keys[0];
        let (created, taken) = (Some(Reply::ok()), Some(Reply::Nil));
        // Created on master 0, taken on master 1, master 2 has not answered. Plain `SET NX`
        // does not say who holds master 1's key: it may be an earlier grant of this very
        // token, which may live on master 2 too, so master 2 is left to expire...
        let b = ballots(vec![created.clone(), taken.clone(), None]);
        assert_eq!(roll_back_plan(&b, None, &o), vec![vec![k], vec![], vec![]]);
        // ...unless master 1's holder, asked afterwards, is someone else (or nobody by now):
        // then no grant of this token can hold a quorum, and master 2 is cleaned too.
        for named in [bulk("other"), Some(Reply::Nil)] {
            let holders = ballots(vec![None, named, None]);
            let plan = roll_back_plan(&b, Some(&holders), &o);
            assert_eq!(plan, vec![vec![k], vec![], vec![k]]);
        }
        // The holder is this token, or did not answer: left alone.
        for named in [bulk("tok"), None] {
            let holders = ballots(vec![None, named, None]);
            let plan = roll_back_plan(&b, Some(&holders), &o);
            assert_eq!(plan, vec![vec![k], vec![], vec![]]);
        }
        // A master that was down never got the attempt.
        let mut b = ballots(vec![created.clone(), created.clone(), None]);
        b.failed[2] = Some(BackendError::Down);
        assert_eq!(roll_back_plan(&b, None, &o), vec![vec![k], vec![k], vec![]]);
        // `SET NX ... GET` names the holder at once: another's lets master 2 be cleaned,
        // this token's keeps it.
        let r = reentrant(&["k"]);
        let b = ballots(vec![Some(Reply::Nil), bulk("other"), None]);
        assert_eq!(roll_back_plan(&b, None, &r), vec![vec![k], vec![], vec![k]]);
        let b = ballots(vec![Some(Reply::Nil), bulk("tok"), None]);
        assert_eq!(roll_back_plan(&b, None, &r), vec![vec![k], vec![], vec![]]);
        // Several keys: only those a master reports as created (1), never ones it found
        // already holding the token (2).
        let two = op(&["a", "b"]);
        let b = ballots(vec![codes_of(&[1, 2]), Some(I(0)), Some(I(0))]);
        assert_eq!(
            roll_back_plan(&b, None, &two),
            vec![vec![&two.keys[0]], vec![], vec![]]
        );
    }

    #[test]
    fn extension_needs_a_quorum_still_valid() {
        let cfg = Config::default();
        let b = ballots(vec![Some(I(9_000)), Some(I(9_000)), Some(I(0))]);
        assert_eq!(extension(&b, FAST, &cfg), Extension::Granted);
        let b = ballots(vec![Some(I(9_000)), Some(I(0)), None]);
        assert_eq!(extension(&b, FAST, &cfg), Extension::Refused);
        // A quorum extended, but the TTL they share has run out while waiting.
        let b = ballots(vec![Some(I(50)), Some(I(50)), Some(I(9_000))]);
        assert_eq!(
            extension(&b, Duration::from_millis(60), &cfg),
            Extension::Refused
        );
        let b = ballots(vec![Some(I(-2)), Some(I(-2)), Some(I(0))]);
        assert_eq!(extension(&b, FAST, &cfg), Extension::BeyondMax);
    }

    #[test]
    fn release_counts_a_key_when_a_quorum_deleted_it() {
        let b = ballots(vec![codes_of(&[1]), codes_of(&[1]), codes_of(&[0])]);
        assert_eq!(
            released(&b, 1, Answer::OneZero, &Bytes::new()),
            (I(1), true)
        );
        assert_eq!(
            released(&b, 1, Answer::ZeroOne, &Bytes::new()),
            (I(0), true)
        );
        // Deleted on one, expired on another: gone, not released by this call.
        let b = ballots(vec![codes_of(&[1]), codes_of(&[-1]), codes_of(&[0])]);
        assert_eq!(
            released(&b, 1, Answer::Tristate, &Bytes::new()),
            (I(-1), false)
        );
        assert_eq!(
            released(&b, 1, Answer::OneZero, &Bytes::new()),
            (I(0), false)
        );
        let b = ballots(vec![codes_of(&[1]), codes_of(&[0]), codes_of(&[0])]);
        assert_eq!(
            released(&b, 1, Answer::Tristate, &Bytes::new()),
            (I(0), false)
        );
        // Fewer than a quorum answered with codes: no answer can be given.
        let b = ballots(vec![
            codes_of(&[1]),
            None,
            Some(Reply::static_error("ERR x")),
        ]);
        assert!(released(&b, 1, Answer::OneZero, &Bytes::new()).0.is_error());
        // A quorum's error (a key of another type) is passed on as Redis words it for the
        // client's own script, without the proxy script's SHA; not as masters missing.
        let wrong = Some(Reply::static_error(
            "WRONGTYPE Operation against a key holding the wrong kind of value script: \
             0123456789abcdef0123456789abcdef01234567, on @user_script:1.",
        ));
        let b = ballots(vec![wrong.clone(), wrong, codes_of(&[1])]);
        assert_eq!(
            released(&b, 1, Answer::OneZero, &Bytes::new()),
            (
                Reply::static_error(
                    "WRONGTYPE Operation against a key holding the wrong kind of value"
                ),
                false
            )
        );
        // Two keys, one released by a quorum.
        let b = ballots(vec![
            codes_of(&[1, 1]),
            codes_of(&[1, 0]),
            codes_of(&[0, 0]),
        ]);
        assert_eq!(released(&b, 2, Answer::Count, &Bytes::new()), (I(1), false));
    }

    #[test]
    fn inspect_answers_the_majority_value_and_the_time_a_quorum_hold_it() {
        let pair = |v: &'static str, t: i64| {
            Some(Reply::Array(vec![
                Reply::Bulk(Bytes::from_static(v.as_bytes())),
                I(t),
            ]))
        };
        let b = ballots(vec![pair("a", 900), pair("a", 1_000), pair("b", 5_000)]);
        assert_eq!(
            inspected(&b),
            Reply::Array(vec![Reply::Bulk(Bytes::from_static(b"a")), I(900)])
        );
        let b = ballots(vec![pair("a", 900), pair("b", 1_000), None]);
        assert_eq!(inspected(&b), Reply::Array(vec![Reply::Nil, I(-2)]));
    }
}

/// Decisions for the constant replies and TTL reads of the libraries recognised later
/// (bsm/redislock, pottery, aioredlock).
#[cfg(test)]
mod more_decisions {
    use super::*;
    use crate::lockop::{Replies, Short};
    use Reply::Integer as I;

    use crate::quorum::scripted::ballots;

    use crate::quorum::scripted::codes;

    /// aioredlock's unlock: 1 released, `+OK` already gone, `-ERR ERROR` someone else's.
    fn aioredlock() -> Answer {
        Answer::Const(Replies::new(
            Lit::Int(1),
            Lit::Error(Short::new(b"ERR ERROR").unwrap()),
            Lit::Ok,
        ))
    }

    #[test]
    fn constant_replies_are_answered_as_the_script_would() {
        let error = Reply::Error(Bytes::from_static(b"ERR ERROR"));
        let b = ballots(vec![codes(&[1]), codes(&[1]), codes(&[0])]);
        assert_eq!(released(&b, 1, aioredlock(), &Bytes::new()), (I(1), true));
        let b = ballots(vec![codes(&[-1]), codes(&[-1]), codes(&[1])]);
        assert_eq!(
            released(&b, 1, aioredlock(), &Bytes::new()),
            (Reply::ok(), false)
        );
        let b = ballots(vec![codes(&[0]), codes(&[0]), codes(&[1])]);
        assert_eq!(
            released(&b, 1, aioredlock(), &Bytes::new()),
            (error.clone(), false)
        );
        let ok_fail = Answer::Const(Replies::new(
            Lit::Bulk(Short::new(b"OK").unwrap()),
            Lit::Bulk(Short::new(b"FAIL").unwrap()),
            Lit::Bulk(Short::new(b"FAIL").unwrap()),
        ));
        assert_eq!(answer(ok_fail, true, 1, &Bytes::new()), Reply::bulk("OK"));
        assert_eq!(
            answer(ok_fail, false, 1, &Bytes::new()),
            Reply::bulk("FAIL")
        );
        assert_eq!(answer(aioredlock(), false, 1, &Bytes::new()), error);
    }

    #[test]
    fn a_ttl_read_answers_what_a_quorum_still_hold() {
        // bsm v0: the PTTL, -1 without a TTL, -3 not held.
        let bsm = Answer::Const(Replies::new(Lit::Int(-1), Lit::Int(-3), Lit::Int(-3)));
        let b = ballots(vec![Some(I(4000)), Some(I(9000)), Some(I(-3))]);
        assert_eq!(remaining(&b, bsm, 1), I(4000));
        // In seconds, rounded as Redis's TTL.
        assert_eq!(remaining(&b, bsm, 1000), I(4));
        let b = ballots(vec![Some(I(1499)), Some(I(1500)), None]);
        assert_eq!(remaining(&b, bsm, 1000), I(1));
        // Held on one master only: not held.
        let b = ballots(vec![Some(I(9000)), Some(I(-3)), None]);
        assert_eq!(remaining(&b, bsm, 1), I(-3));
        // Held without a TTL on a quorum.
        let b = ballots(vec![Some(I(-1)), Some(I(-1)), Some(I(-3))]);
        assert_eq!(remaining(&b, bsm, 1), I(-1));
        // Errors and silence are not votes.
        let b = ballots(vec![Some(Reply::static_error("ERR x")), None, Some(I(500))]);
        assert_eq!(remaining(&b, bsm, 1), I(-3));
        // A shape without constants cannot be a TTL read.
        assert!(remaining(&b, Answer::OneZero, 1).is_error());
    }
}
