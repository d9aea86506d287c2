//! The phases of extensions, releases and reads: what each master is sent, and how its
//! answers become one (see [`super`] for the rules).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tracing::debug;

use super::op::{LockOp, agreed_error, answer, constant, constant_for, plain_phases};
use crate::command::action::Later;
use crate::command::repair::{self, EXTEND_READING};
use crate::command::runner::{Clock, Operation, Voted, valid};
use crate::config::Config;
use crate::counters::Counters;
use crate::error::Error;
use crate::keylock::Held;
use crate::lockop::{AnnounceWhen, Answer, Op};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote};
use crate::scripts::{DELETE, EXTEND, INSPECT, RELEASE, RELEASE_ALL, RELEASE_PUBLISH, REMAINING};
use crate::wire::master::eval;
use crate::wire::reply::Reply;

/// An extension ([`Op::Extend`], [`Op::ExtendAdd`]), as the runner's operation.
#[derive(Debug)]
pub struct Extension(pub LockOp);

impl Operation for Extension {
    type Decision = Extended;

    plain_phases!();

    fn settled(&self, _: &Proxy) -> Option<Reply> {
        let op = &self.0;
        (op.ttl_ms < 0 || (op.ttl_ms == 0 && op.op == Op::Extend))
            .then(|| Reply::from(Error::InvalidExtension))
    }

    fn request(&self, _: &Masters, cfg: &Config) -> Request {
        extend_request(&self.0, cfg.max_ttl_ms)
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        vote.poll_decide_yes(cx, extended)
    }

    fn decide(&self, ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Extended {
        extension(ballots, elapsed, cfg)
    }

    /// A granted extension of one key waits for a quorum repair when a member may lack it.
    fn answer(
        &self,
        proxy: &Proxy,
        e: Extended,
        vote: &mut Vote,
        _: &Clock,
    ) -> Result<Reply, Extended> {
        if e == Extended::Granted
            && self.0.keys.len() == 1
            && repair::pending(proxy, vote, EXTEND_READING)
        {
            return Err(e);
        }
        Ok(extension_answer(&self.0, e, vote.ballots(), proxy))
    }

    fn rest(self, proxy: Arc<Proxy>, e: Extended, voted: Voted) -> Later {
        let reply = extension_answer(&self.0, e, voted.vote.ballots(), &proxy);
        repair_after(&proxy, &self.0, voted.vote, voted.clock, voted.held);
        Box::pin(std::future::ready(reply))
    }
}

/// A release or delete ([`Op::Release`], [`Op::ReleaseAll`], [`Op::Delete`]), as the runner's
/// operation.
#[derive(Debug)]
pub struct Release(pub LockOp);

impl Operation for Release {
    /// The answer, and whether every key was released.
    type Decision = (Reply, bool);

    plain_phases!();

    fn request(&self, _: &Masters, _: &Config) -> Request {
        release_request(&self.0)
    }

    /// A release has no validity clock running: rather than answer "not released" because a
    /// busy master was slower than `node_timeout_ms`, it waits for each master until it answers
    /// or is marked down (`stall_timeout_ms` without an answer). A quorum that agree still
    /// decide at once.
    fn patience(&self, cfg: &Config) -> Duration {
        cfg.node_timeout()
            .max(Duration::from_millis(cfg.stall_timeout_ms))
    }

    fn decide(&self, ballots: &Ballots, _: Duration, _: &Config) -> (Reply, bool) {
        let op = &self.0;
        released(ballots, op.keys.len(), op.answer, &op.token)
    }

    fn answer(
        &self,
        proxy: &Proxy,
        (reply, all): (Reply, bool),
        _: &mut Vote,
        _: &Clock,
    ) -> Result<Reply, (Reply, bool)> {
        if all {
            Counters::bump(&proxy.counters().releases);
        }
        Ok(reply)
    }

    fn rest(self, _: Arc<Proxy>, (reply, _): (Reply, bool), _: Voted) -> Later {
        Box::pin(std::future::ready(reply))
    }
}

/// A read ([`Op::Inspect`], [`Op::Held`], [`Op::Remaining`]), as the runner's operation.
#[derive(Debug)]
pub struct Read(pub LockOp);

impl Operation for Read {
    /// The answer.
    type Decision = Reply;

    plain_phases!();

    fn request(&self, _: &Masters, _: &Config) -> Request {
        read_request(&self.0)
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        match self.0.op {
            Op::Inspect => vote.poll_decide_by(cx, read_value),
            _ => vote.poll_outcome(cx),
        }
    }

    fn decide(&self, ballots: &Ballots, _: Duration, _: &Config) -> Reply {
        let op = &self.0;
        match op.op {
            Op::Inspect => inspected(ballots),
            Op::Held => held_answer(ballots, &op.token, op.answer),
            _ => remaining(ballots, op.answer, op.ttl_ms),
        }
    }

    fn answer(&self, _: &Proxy, reply: Reply, _: &mut Vote, _: &Clock) -> Result<Reply, Reply> {
        Ok(reply)
    }

    fn rest(self, _: Arc<Proxy>, reply: Reply, _: Voted) -> Later {
        Box::pin(std::future::ready(reply))
    }
}

/// A master's "yes" to an extension: the new TTL.
pub(super) fn extended(r: &Reply) -> bool {
    matches!(r, Reply::Integer(n) if *n > 0)
}

/// The answer to an extension decided `e` (a granted one's quorum repair is the runner's
/// business, see [`super::super::repair`]).
pub(super) fn extension_answer(
    op: &LockOp,
    e: Extended,
    ballots: &Ballots,
    proxy: &Proxy,
) -> Reply {
    let k = op.keys.len();
    match e {
        Extended::Granted => answer(op.answer, true, k, &op.token),
        Extended::BeyondMax => Reply::from(Error::ExtensionTooLong {
            max: proxy.config().max_ttl_ms,
        }),
        // A quorum's error (`WRONGTYPE` for a key of another type) is the client's answer, as
        // Redis gives it for the client's own script.
        Extended::Refused if let Some(e) = agreed_error(ballots) => e,
        Extended::Refused => {
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

/// What an extension sends each master: [`EXTEND`], with the cap `max_ttl_ms`.
pub(super) fn extend_request(op: &LockOp, max_ttl_ms: u64) -> Request {
    let ttl_arg = itoa::Buffer::new().format(op.ttl_ms).to_owned();
    let max = itoa::Buffer::new().format(max_ttl_ms).to_owned();
    let add: &[u8] = if op.op == Op::ExtendAdd { b"1" } else { b"0" };
    Request::Same(eval(
        EXTEND,
        &op.keys,
        &[&op.token, ttl_arg.as_bytes(), add, max.as_bytes()],
    ))
}

/// An extension's outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Extended {
    /// A quorum extended, and the TTL they agree on is still valid.
    Granted,
    /// Refused because the new TTL would exceed `max_ttl_ms` (the script answers -2).
    BeyondMax,
    /// Refused: fewer than a quorum hold the token, or too little time is left.
    Refused,
}

/// Decides an extension from the masters' new TTLs: granted when the TTL a quorum now hold at
/// least, minus the elapsed time and drift, is above `min_validity_ms`.
pub(super) fn extension(ballots: &Ballots, elapsed: Duration, cfg: &Config) -> Extended {
    if ballots
        .quorum_th(positive, |t| *t)
        .is_some_and(|t| valid(t, elapsed, cfg))
    {
        Extended::Granted
    } else if ballots.count(|r| *r == Reply::Integer(-2)) > 0 {
        Extended::BeyondMax
    } else {
        Extended::Refused
    }
}

/// Release (compare-and-delete) or delete (whatever the keys hold) on all N masters, with the
/// wake-up signal where there is one: what each master is sent.
pub(super) fn release_request(op: &LockOp) -> Request {
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
    Request::Same(req)
}

/// Decides a release or delete over `k` keys from each master's per-key codes (1 deleted,
/// -1 missing, 0 held by another): a key counts as released when a quorum deleted it, and as
/// already gone when a quorum deleted it or no longer had it. Answered in `shape`. When fewer
/// than a quorum gave a full set of codes: the error a quorum answered alike (`WRONGTYPE` for a
/// key of another type, as Redis answers the client's own script), else the `CLUSTERDOWN` error.
/// Also says whether every key was released.
pub(super) fn released(ballots: &Ballots, k: usize, shape: Answer, token: &Bytes) -> (Reply, bool) {
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

/// What a read sends each master: [`INSPECT`] of the first key (`[value, pttl]`), or
/// [`REMAINING`] of the keys for the token.
pub(super) fn read_request(op: &LockOp) -> Request {
    Request::Same(match op.op {
        Op::Remaining => eval(REMAINING, &op.keys, &[&op.token]),
        _ => eval(INSPECT, &op.keys[..1], &[]),
    })
}

/// How an inspection's answers count as alike: by the value read.
pub(super) fn read_value(r: &Reply) -> Option<Reply> {
    match r {
        Reply::Array(pair) => pair.first().cloned(),
        _ => None,
    }
}

/// Decides a read of a lock: `[value, pttl]` with the value a quorum of masters agree on and
/// the quorum-th largest TTL among the masters holding it; `[nil, -2]` without such a value.
pub(super) fn inspected(ballots: &Ballots) -> Reply {
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

/// The answer of [`Op::Held`] from each master's `[value, pttl]`: `ok` where a quorum hold the
/// token, `gone` where a quorum have no key, else `no`; an error a quorum agree on (a key of
/// another type) as one Redis gives it.
pub(super) fn held_answer(ballots: &Ballots, token: &Bytes, shape: Answer) -> Reply {
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

/// Decides how long the caller still holds its keys (see [`Op::Remaining`]) from each master's
/// answer ([`REMAINING`]: the smallest PTTL, -1 without a TTL, -3 not held): the quorum-th
/// largest TTL, in `unit_ms` (1000: seconds, rounded as Redis's `TTL`); else the script's
/// constant for "held without a TTL" when a quorum hold the token, or for "not held".
pub(super) fn remaining(ballots: &Ballots, shape: Answer, unit_ms: i64) -> Reply {
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

/// After a granted extension of `op` (sent at `clock.start`): the lock written back to the
/// trusted members that lacked it (one key; see [`crate::command::repair`]), in the key's turn
/// (`held`).
pub(super) fn repair_after(proxy: &Arc<Proxy>, op: &LockOp, vote: Vote, clock: Clock, held: Held) {
    if let [key] = op.keys.as_slice() {
        let e = repair::Extended {
            key: key.clone(),
            copy: repair::LockCopy::Token(op.token.clone()),
            ttl_ms: op.ttl_ms,
            vote,
            start: clock.start,
            reading: EXTEND_READING,
        };
        repair::after(proxy, e, held);
    }
}
