//! The acquisition's phases: what each master is sent, how its answers make a grant, and what
//! a refused attempt takes back (see [`super`] for the rules, [`super::super::runner`] for the
//! phases).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::op::{LockOp, agreed_error, answer, constant_for, plain_phases};
use crate::command::action::Later;
use crate::command::runner::{Clock, Operation, Voted, take_back, valid};
use crate::config::Config;
use crate::counters::Counters;
use crate::lockop::{Answer, Op};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote, ask, ask_timed};
use crate::scripts::{ACQUIRE, RELEASE, REMAINING};
use crate::wire::master::{command, eval};
use crate::wire::reply::Reply;

/// An acquisition (every [`Op`] that takes the keys), as the runner's operation: the hot path
/// of `SET key token NX PX ttl`.
#[derive(Debug)]
pub struct Acquisition(pub LockOp);

impl Operation for Acquisition {
    /// Granted: a quorum created the keys in time.
    type Decision = bool;

    plain_phases!();

    /// An absolute expiry in the past: the lock would be born expired.
    #[inline]
    fn settled(&self, proxy: &Proxy) -> Option<Reply> {
        let op = &self.0;
        (op.ttl_ms <= 0).then(|| {
            Counters::bump(&proxy.counters().denials);
            answer(op.answer, false, op.keys.len(), &op.token)
        })
    }

    #[inline]
    fn request(&self, masters: &Masters, _: &Config) -> Request {
        request(masters, &self.0)
    }

    fn timed(&self) -> bool {
        true
    }

    #[inline]
    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        vote.poll_decide_yes(cx, created_by(&self.0))
    }

    #[inline]
    fn decide(&self, ballots: &Ballots, elapsed: Duration, cfg: &Config) -> bool {
        granted(ballots, created_by(&self.0), self.0.ttl_ms, elapsed, cfg)
    }

    fn undo(&self, ballots: &Ballots, named: Option<&Ballots>) -> Vec<Option<Bytes>> {
        compare_and_delete(&roll_back_plan(ballots, named, &self.0), &self.0.token)
    }

    #[inline]
    fn answer(
        &self,
        proxy: &Proxy,
        granted: bool,
        vote: &mut Vote,
        clock: &Clock,
    ) -> Result<Reply, bool> {
        if granted {
            Ok(grant(proxy, &self.0, vote.ballots(), clock))
        } else {
            Err(false)
        }
    }

    fn rest(self, proxy: Arc<Proxy>, _: bool, voted: Voted) -> Later {
        Box::pin(not_granted_at_once(proxy, self, voted))
    }
}

/// Whether an acquisition asks each master plain `SET key token NX PX ttl`: one key, and not
/// reentrant (a key already holding the token is as taken as any other, so the holder's value
/// is not needed to decide). The master answers `OK` when it created the key and nil when the
/// key was there, whoever holds it.
fn asks_plain(op: &LockOp) -> bool {
    op.op == Op::Acquire && op.keys.len() == 1
}

/// How a master's answer to the acquisition `op` reads as a "yes" (see [`request`]):
/// [`set_ok`] for plain `SET NX`, [`wrote`] for the other forms.
pub(super) fn created_by(op: &LockOp) -> impl Fn(&Reply) -> bool + Copy + use<> {
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

/// The reply of a granted acquisition: `again` of a script's constant replies when a quorum of
/// the masters found every key already the caller's and refreshed it (the canonical script's
/// codes are all 2 there), else the fresh grant's.
pub(super) fn granted_answer(op: &LockOp, ballots: &Ballots) -> Reply {
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

/// What an acquisition sends each master. One key: `SET key token NX PX ttl` (see
/// [`asks_plain`]), the very command a client would send one Redis, and the cheapest a master
/// can run. A reentrant one adds `GET`, which names the holder in the same command (Redis 7.0
/// and later; older masters get the [`ACQUIRE`] script, as several keys do). Built outside the
/// acquisition's future, so none of this is stored across its waits.
#[inline(always)]
pub(super) fn request(masters: &Masters, op: &LockOp) -> Request {
    if asks_plain(op) {
        return Request::Same(crate::wire::master::set_nx(
            &op.keys[0],
            &op.token,
            op.ttl_ms,
            false,
        ));
    }
    other_request(masters, op)
}

/// [`request`] for every acquisition but plain `SET NX` on one key.
#[cold]
fn other_request(masters: &Masters, op: &LockOp) -> Request {
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
    if k == 1 {
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
    clock: &Clock,
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
    let elapsed = now.saturating_duration_since(clock.start);
    if !valid(ttl, elapsed, proxy.config()) {
        return None;
    }
    trace!(ttl_ms = ttl, "lock granted (kept)");
    Counters::bump(&proxy.counters().grants);
    proxy
        .counters()
        .observe_acquire(now.saturating_duration_since(clock.since));
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

/// A granted acquisition, counted and answered (`clock.now`: when it was decided).
#[inline]
pub(super) fn grant(proxy: &Proxy, op: &LockOp, ballots: &Ballots, clock: &Clock) -> Reply {
    trace!(keys = op.keys.len(), "lock granted");
    Counters::bump(&proxy.counters().grants);
    proxy.counters().observe_acquire(clock.since_dispatch());
    granted_answer(op, ballots)
}

/// An acquisition that the first round did not grant: a reentrant one whose keys some masters
/// already hold for it gets a second round ([`again`]) and is decided again; otherwise it is
/// refused and rolled back ([`refuse`]).
async fn not_granted_at_once(proxy: Arc<Proxy>, acq: Acquisition, voted: Voted) -> Reply {
    let Voted { vote, held, clock } = voted;
    let op = &acq.0;
    // The snapshot the first round went to: every later step addresses the same masters.
    let masters = vote.masters().clone();
    // Every acquisition but plain `Acquire` accepts keys that already hold its token.
    let reentrant = op.op != Op::Acquire;
    let mine = |r: &Reply| already_mine(op, r);
    if reentrant && vote.ballots().count(mine) > 0 {
        let ballots = vote.finish().await;
        match again(&proxy, op, &masters, ballots, &clock).await {
            Ok(granted) => granted,
            Err(ballots) => refuse(proxy, acq, masters, ballots, None, held, clock.since),
        }
    } else {
        let ballots = vote.ballots().clone();
        refuse(proxy, acq, masters, ballots, Some(vote), held, clock.since)
    }
}

/// The second round of a reentrant acquisition that found its keys already its own on some
/// masters (every first-round answer in: `ballots`). Take-or-keep leaves them as they are and
/// reads how long they still hold there (in the same compare, so a key lost meanwhile does not
/// count): what each such master brings to the grant's validity. The other forms refresh them
/// there (the script answers `[2]`), so a retry is granted with a full TTL rather than refused
/// until the first attempt's keys expire. `Err` with the ballots to refuse by.
async fn again(
    proxy: &Proxy,
    op: &LockOp,
    masters: &Masters,
    mut ballots: Ballots,
    clock: &Clock,
) -> Result<Reply, Ballots> {
    let deadline = clock.start + proxy.config().node_timeout();
    let mine = |r: &Reply| already_mine(op, r);
    let ask_mine = |req: Bytes| -> Vec<Option<Bytes>> {
        let ask = |r: &Option<Reply>| r.as_ref().is_some_and(mine).then(|| req.clone());
        ballots.replies.iter().map(ask).collect()
    };
    if op.op == Op::AcquireOrKeep {
        let asks = ask_mine(eval(REMAINING, &op.keys, &[&op.token]));
        let left = ask_timed(masters, Request::Some(asks), 1, deadline)
            .outcome()
            .await;
        return grant_kept(proxy, op, &ballots, &left, clock).ok_or(ballots);
    }
    let ttl_arg = itoa::Buffer::new().format(op.ttl_ms).to_owned();
    // Where the key already holds the token, the TTL a refresh sets (see `Op::refresh_ms`).
    let again_arg = itoa::Buffer::new()
        .format(op.op.refresh_ms(op.ttl_ms).unwrap_or(op.ttl_ms))
        .to_owned();
    let script = eval(
        ACQUIRE,
        &op.keys,
        &[
            &op.token,
            ttl_arg.as_bytes(),
            acquire_flag(op.op),
            again_arg.as_bytes(),
        ],
    );
    let asks = ask_mine(script);
    let refreshed = ask_timed(masters, Request::Some(asks), 1, deadline)
        .outcome()
        .await;
    for (i, r) in refreshed.replies.into_iter().enumerate() {
        if let Some(r) = r {
            ballots.replies[i] = Some(r);
        }
    }
    let now = Instant::now();
    let elapsed = now.saturating_duration_since(clock.start);
    if granted(&ballots, created_by(op), op.ttl_ms, elapsed, proxy.config()) {
        let clock = Clock::at(clock.since, clock.start, now);
        Ok(grant(proxy, op, &ballots, &clock))
    } else {
        Err(ballots)
    }
}

/// A refused acquisition: counted, answered, and rolled back (phase 4, [`Operation::undo`])
/// before the keys are free (`held`), so no later operation on them can overtake the clean-up.
/// `unfinished`: the first round's vote when it was decided with masters yet to answer.
fn refuse(
    proxy: Arc<Proxy>,
    acq: Acquisition,
    masters: Masters,
    ballots: Ballots,
    unfinished: Option<Vote>,
    held: crate::keylock::Held,
    since: Instant,
) -> Reply {
    let op = &acq.0;
    let reentrant = op.op != Op::Acquire;
    debug!(
        yes = ballots.count(created_by(op)),
        quorum = ?ballots.quorum,
        keys = op.keys.len(),
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
        _ => answer(op.answer, false, op.keys.len(), &op.token),
    };
    if let Some(vote) = unfinished.filter(|_| {
        ballots.replies.iter().any(Option::is_none)
            && (reentrant || earlier_grant_possible(&ballots, None, op))
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
            let op = &acq.0;
            let mut vote = vote;
            // Answers that came in since the decision (a master a little behind the others, as
            // usual) count first: with every answer in, nothing needs naming or waiting for.
            vote.absorb();
            // Who holds the key where a plain "taken" did not say (those masters have answered,
            // so this is quick). The late answers are waited for only while they can still
            // change the plan, so a slow master does not hold the key's turn.
            let holders = name_holders(&proxy, &masters, vote.ballots(), op).await;
            let ballots =
                if reentrant || earlier_grant_possible(vote.ballots(), holders.as_ref(), op) {
                    vote.finish().await
                } else {
                    vote.ballots().clone()
                };
            take_back(&proxy, &masters, acq.undo(&ballots, holders.as_ref()));
            drop(held);
        });
        return refused;
    }
    // Every answer is in, or the attempt is not reentrant: then a master that has not answered
    // gets its clean-up queued behind the attempt on the same connection, so nothing waits for
    // a slow master. (A plain "taken" with masters unanswered was sent down the spawned path
    // above, so nothing here needs the holders named.)
    take_back(&proxy, &masters, acq.undo(&ballots, None));
    drop(held);
    refused
}

/// The acquisition's decision: granted, with the validity left, when a quorum of masters
/// created the keys (`yes`, see [`created_by`]) and the validity (`ttl − elapsed − drift`) is
/// above `min_validity_ms`.
pub(super) fn granted(
    ballots: &Ballots,
    yes: impl Fn(&Reply) -> bool,
    ttl_ms: i64,
    elapsed: Duration,
    cfg: &Config,
) -> bool {
    valid(ttl_ms, elapsed, cfg) && ballots.agree(yes)
}

/// For each master, the keys a refused acquisition may have created there: on a master that
/// said yes, the keys it reports as created (a reentrant attempt leaves keys that already held
/// the token alone); on a master whose outcome is unknown (no answer yet, or an answer that did
/// not count: excluded, clock jump, connection lost), every key, unless an earlier grant of
/// this token may live there (see [`earlier_grant_possible`], which `holders` informs); then
/// what the attempt may have created there is left to expire with its TTL. A master that said
/// "taken" wrote nothing.
pub(super) fn roll_back_plan<'a>(
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

/// What takes a write back where it may have landed: on each master, compare-and-delete of
/// `value` from the keys `plan` names for it (the one clean-up that refused acquisitions and
/// legacy writes share; [`take_back`] sends it, queued behind the write on the same
/// connection, so it reaches a slow master after the write it undoes).
pub(crate) fn compare_and_delete(plan: &[Vec<&Bytes>], value: &Bytes) -> Vec<Option<Bytes>> {
    plan.iter()
        .map(|keys| (!keys.is_empty()).then(|| eval(RELEASE, keys, &[value])))
        .collect()
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
