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
//! - **Extend** succeeds only when a quorum extended and the new TTL they agree on, minus the
//!   elapsed time and drift, is still valid. Nothing is undone on failure: a longer TTL on a
//!   minority delays other clients but never lets two hold the lock.
//! - **Release** runs compare-and-delete on all N masters; a key counts as released when a
//!   quorum deleted it, and as already gone (expired) when a quorum no longer had it.
//!
//! - **Inspect** (a read) answers the value a quorum agree on and how long a quorum still hold
//!   it: the quorum-th largest TTL among the masters holding that value.
//!
//! Every TTL is capped by `max_ttl_ms`: larger requests get an error, never a silent cut.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::{Action, not_an_integer, parse_int, syntax_error};
use crate::client::Conn;
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Request, ask, ask_timed, quorum_th, validity};
use crate::reply::{Reply, command};
use crate::scripts::{ACQUIRE, Answer, DELETE, EXTEND, INSPECT, Op, RELEASE};
use crate::stats::Stats;

/// The options of a `SET` command.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// `NX`: only if absent.
    pub nx: bool,
    /// `XX`: only if present.
    pub xx: bool,
    /// `GET`: return the old value.
    pub get: bool,
    /// `KEEPTTL`.
    pub keep_ttl: bool,
    /// The TTL in milliseconds from now, from `EX`, `PX`, `EXAT` or `PXAT`.
    pub ttl_ms: Option<i64>,
}

/// Parses `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` in any order and case.
pub fn parse_set(args: &[Bytes]) -> Result<SetOptions, Reply> {
    let mut o = SetOptions::default();
    let mut expiry_seen = false;
    let mut i = 3;
    let mut upper = [0u8; 8];
    while i < args.len() {
        let opt = super::upper(&args[i], &mut upper);
        match opt {
            b"NX" if !o.xx => o.nx = true,
            b"XX" if !o.nx => o.xx = true,
            b"GET" => o.get = true,
            b"KEEPTTL" if !expiry_seen => {
                o.keep_ttl = true;
                expiry_seen = true;
            }
            b"EX" | b"PX" | b"EXAT" | b"PXAT" if !expiry_seen && i + 1 < args.len() => {
                let n = parse_int(&args[i + 1]).ok_or_else(not_an_integer)?;
                if n <= 0 {
                    return Err(Reply::static_error(
                        "ERR invalid expire time in 'set' command",
                    ));
                }
                let ms = match opt {
                    b"EX" => n.checked_mul(1000),
                    b"PX" => Some(n),
                    b"EXAT" => n.checked_mul(1000).map(|at| at - super::unix_ms()),
                    _ => Some(n - super::unix_ms()),
                }
                .ok_or_else(|| Reply::static_error("ERR invalid expire time in 'set' command"))?;
                o.ttl_ms = Some(ms);
                expiry_seen = true;
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    Ok(o)
}

/// `SET`: the lock form (`NX` with an expiry) becomes a Redlock acquisition.
pub fn set(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    let opts = match parse_set(&args) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    if !opts.nx {
        // Not a lock acquisition: a plain, `XX` or `GET` write under the majority rule.
        return super::keys::set(proxy, args, opts);
    }
    if opts.get || opts.keep_ttl {
        return Reply::static_error(
            "ERR redlock-proxy supports SET NX only as a lock: SET key token NX PX milliseconds (or EX seconds)",
        )
        .into();
    }
    let ttl = match opts.ttl_ms {
        Some(ttl) => ttl,
        None if proxy.config.default_ttl_ms > 0 => proxy.config.default_ttl_ms as i64,
        None => {
            return Reply::static_error(
                "ERR redlock-proxy refuses SET NX without an expiry: the lock could never expire (add PX or EX, or set default_ttl_ms)",
            )
            .into();
        }
    };
    acquire(proxy, args[1].clone(), args[2].clone(), ttl)
}

/// A lock operation, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOp {
    /// What to do.
    pub op: Op,
    /// The keys, all or nothing (at least one).
    pub keys: Vec<Bytes>,
    /// The lock token, compared byte for byte.
    pub token: Bytes,
    /// TTL in ms (acquire, extend), or the time to add (`ExtendAdd`); unused by release.
    pub ttl_ms: i64,
    /// The reply shape the caller expects.
    pub answer: Answer,
    /// The wake-up signal a release or delete leaves for waiters (see [`crate::scripts::Signal`]).
    pub wake: Option<Wake>,
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
    let op = if proxy.config.set_nx_reentrant {
        Op::AcquireOrRefresh
    } else {
        Op::Acquire
    };
    run(
        proxy,
        LockOp {
            op,
            keys: vec![key],
            token,
            ttl_ms,
            answer: Answer::OkNil,
            wake: None,
        },
    )
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
        },
    )
}

/// Runs any lock operation as a quorum operation.
pub fn run(proxy: &Arc<Proxy>, op: LockOp) -> Action {
    if op.keys.is_empty() {
        return Reply::static_error("ERR redlock-proxy: a lock operation needs at least one key")
            .into();
    }
    let max = proxy.config.max_ttl_ms;
    if !matches!(op.op, Op::Release | Op::Delete | Op::Inspect) && op.ttl_ms > max as i64 {
        return Reply::error(format!(
            "ERR lock TTL {} ms exceeds the proxy's max_ttl_ms ({max} ms)",
            op.ttl_ms
        ))
        .into();
    }
    if let Some(w) = &op.wake
        && (w.ttl_ms <= 0 || w.ttl_ms > max as i64)
    {
        return Reply::error(format!(
            "ERR signal TTL {} ms must be positive and within the proxy's max_ttl_ms ({max} ms)",
            w.ttl_ms
        ))
        .into();
    }
    // The signal list takes its turn too, so a waiter's pop never overtakes the release.
    let keys = match &op.wake {
        Some(w) => [op.keys.as_slice(), std::slice::from_ref(&w.list)].concat(),
        None => op.keys.clone(),
    };
    super::in_turn_held(proxy, &keys, move |proxy, held| async move {
        match op.op {
            Op::Acquire | Op::AcquireOrRefresh => run_acquire(proxy, op, held).await,
            Op::Extend | Op::ExtendAdd => run_extend(&proxy, &op).await,
            Op::Release | Op::Delete => run_release(&proxy, &op).await,
            Op::Inspect => run_inspect(&proxy, &op).await,
        }
    })
}

/// `EVAL script numkeys keys... args...`
pub(crate) fn eval<K: AsRef<[u8]>>(script: &str, keys: &[K], args: &[&[u8]]) -> Bytes {
    let n = itoa::Buffer::new().format(keys.len()).to_owned();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
    parts.extend([b"EVAL".as_slice(), script.as_bytes(), n.as_bytes()]);
    parts.extend(keys.iter().map(|k| k.as_ref()));
    parts.extend(args);
    command(&parts)
}

/// A master's "yes" to an acquisition: the per-key codes of [`ACQUIRE`] (after [`codes`]).
fn wrote(r: &Reply) -> bool {
    matches!(r, Reply::Array(_))
}

/// Turns a master's answer to `SET key token NX PX ttl GET` into the reply [`ACQUIRE`] would
/// have given: nil (it created the key) becomes `[1]`; another holder's value becomes 0. The
/// caller's own token is kept as it is: the key is already theirs but was not refreshed, which
/// a reentrant acquisition settles in a second round.
fn codes(r: Reply, token: &[u8]) -> Reply {
    match r {
        Reply::Nil => Reply::Array(vec![Reply::Integer(1)]),
        Reply::Bulk(v) if v.as_ref() == token => Reply::Bulk(v),
        Reply::Bulk(_) => Reply::Integer(0),
        other => other,
    }
}

/// A master's "yes" to an extension: the new TTL.
fn extended(r: &Reply) -> bool {
    matches!(r, Reply::Integer(n) if *n > 0)
}

/// The reply for a granted (`ok`) or refused operation over `keys` keys.
fn answer(shape: Answer, ok: bool, keys: usize) -> Reply {
    match (shape, ok) {
        (Answer::OkNil | Answer::OkZero, true) => Reply::ok(),
        (Answer::OkNil, false) => Reply::Nil,
        (Answer::Count, true) => Reply::Integer(keys as i64),
        (Answer::OneMinusOne, false) => Reply::Integer(-1),
        (Answer::ZeroOne, ok) => Reply::Integer(i64::from(!ok)),
        (_, ok) => Reply::Integer(i64::from(ok)),
    }
}

async fn run_acquire(proxy: Arc<Proxy>, op: LockOp, held: crate::keylock::Held) -> Reply {
    let k = op.keys.len();
    if op.ttl_ms <= 0 {
        // An absolute expiry in the past: the lock would be born expired.
        Stats::bump(&proxy.stats.denials);
        return answer(op.answer, false, k);
    }
    let reentrant = op.op == Op::AcquireOrRefresh;
    let ttl_arg = itoa::Buffer::new().format(op.ttl_ms).to_owned();
    let flag: &[u8] = if reentrant { b"1" } else { b"0" };
    let script = || eval(ACQUIRE, &op.keys, &[&op.token, ttl_arg.as_bytes(), flag]);
    // One key: `SET NX PX GET` creates the key or names its holder in one plain command,
    // much cheaper for a master than a script (Redis 7.0 and later; older masters get the
    // script).
    let req = if k == 1 {
        let set = command(&[
            b"SET",
            &op.keys[0],
            &op.token,
            b"NX",
            b"PX",
            ttl_arg.as_bytes(),
            b"GET",
        ]);
        if proxy.masters.iter().all(|m| m.info().set_nx_get()) {
            Request::Same(set)
        } else {
            Request::Each(
                proxy
                    .masters
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
    };
    let ttl = Duration::from_millis(op.ttl_ms as u64);
    let start = Instant::now();
    let deadline = start + proxy.config.node_timeout();
    let mut vote = ask_timed(&proxy.masters, req, 1, deadline);
    let token = op.token.clone();
    let created = |r: &Reply| matches!(r, Reply::Nil | Reply::Array(_));
    let mut ballots = vote.decide_by(created).await.clone();
    normalise(&mut ballots, &token);
    let mine = |b: &Ballots| b.count(|r| *r == Reply::Bulk(token.clone()));
    // The first round's vote, while answers may still be due (see the refusal below).
    let unfinished = if reentrant && mine(&ballots) > 0 && ballots.count(wrote) < ballots.quorum {
        // A retry by the same token found the key already its own on some masters: refresh it
        // there (the script answers `[2]`), so the retry is granted with a full TTL rather
        // than refused until the first attempt's keys expire.
        ballots = vote.finish().await;
        normalise(&mut ballots, &token);
        let again: Vec<Option<Bytes>> = ballots
            .replies
            .iter()
            .map(|r| (*r == Some(Reply::Bulk(token.clone()))).then(script))
            .collect();
        let refreshed = ask_timed(&proxy.masters, Request::Some(again), 1, deadline)
            .outcome()
            .await;
        for (i, r) in refreshed.replies.into_iter().enumerate() {
            if let Some(r) = r {
                ballots.replies[i] = Some(r);
            }
        }
        None
    } else {
        Some(vote)
    };
    let yes = ballots.count(wrote);
    let quorum = ballots.quorum;
    let left = validity(ttl, start.elapsed(), proxy.config.drift_factor);
    let min = Duration::from_millis(proxy.config.min_validity_ms);
    if yes >= quorum && left.is_some_and(|v| v > min) {
        trace!(
            validity_ms = left.map(|v| v.as_millis()),
            keys = k,
            "lock granted"
        );
        Stats::bump(&proxy.stats.grants);
        return answer(op.answer, true, k);
    }
    debug!(yes, quorum, keys = k, "lock refused");
    Stats::bump(&proxy.stats.denials);
    let refused = answer(op.answer, false, k);
    if let Some(vote) = unfinished.filter(|_| {
        ballots.replies.iter().any(Option::is_none)
            && (reentrant || earlier_grant_possible(&ballots, &op))
    }) {
        // Decided early, with masters yet to answer, and the key may already hold this very
        // value there: the attempt is reentrant, or some master reported the key holding it (an
        // earlier grant of this client's, or another holder whose value is the same, such as a
        // timestamp). An answer still due tells whether the key there was created by this
        // attempt (delete it) or was already there (keep it), so the clean-up waits for those
        // answers (until the node deadline). The client has its answer now; the keys stay held until the clean-up is
        // queued.
        tokio::spawn(async move {
            let mut ballots = vote.finish().await;
            normalise(&mut ballots, &op.token);
            roll_back(&proxy, &ballots, &op);
            drop(held);
        });
        return refused;
    }
    // Roll back before the keys are free (`held`), so no later operation on them can overtake
    // the clean-up. Every answer is in, or the attempt is not reentrant: then a master that has
    // not answered gets its clean-up queued behind the attempt on the same connection, so
    // nothing waits for a slow master (see `roll_back`).
    roll_back(&proxy, &ballots, &op);
    drop(held);
    refused
}

/// Rewrites `SET NX GET` answers as [`ACQUIRE`] answers (see [`codes`]). A key that already
/// held the caller's token stays `Bulk(token)`: not a "yes" (only a reentrant attempt turns it
/// into one, in a second round), but a sign that a grant of this value may exist.
fn normalise(ballots: &mut Ballots, token: &[u8]) {
    for r in ballots.replies.iter_mut() {
        if let Some(reply) = r.take() {
            *r = Some(codes(reply, token));
        }
    }
}

/// Deletes (where they still hold the token) the keys a refused acquisition may have created:
/// on a master that said yes, the keys it reports as created (a reentrant attempt leaves keys
/// that already held the token alone); on a master whose outcome is unknown (no answer yet, or
/// an answer that did not count: excluded, clock jump, connection lost), every key, unless an
/// earlier grant of this token may live there (see [`earlier_grant_possible`]); then what the
/// attempt may have created there is left to expire with its TTL.
fn roll_back(proxy: &Proxy, ballots: &Ballots, op: &LockOp) {
    let keep_unknown = earlier_grant_possible(ballots, op);
    let mut sent = false;
    for (i, m) in proxy.masters.iter().enumerate() {
        let keys: Vec<&Bytes> = match &ballots.replies[i] {
            Some(r) if r.is_ok() => op.keys.iter().collect(),
            Some(Reply::Array(codes)) => op
                .keys
                .iter()
                .zip(codes)
                .filter(|(_, c)| **c == Reply::Integer(1))
                .map(|(key, _)| key)
                .collect(),
            Some(_) => continue,
            None if ballots.may_have_run(i) && !keep_unknown => op.keys.iter().collect(),
            None => continue,
        };
        if !keys.is_empty() {
            m.send(eval(RELEASE, &keys, &[&op.token]), 1, None);
            sent = true;
        }
    }
    if sent {
        Stats::bump(&proxy.stats.rollbacks);
    }
}

/// Whether a still valid grant of this very token may hold the key on a master whose outcome
/// is unknown, so that deleting the token there could take that grant's key away. The grant
/// may be an earlier one of this client's, or another holder's whose value happens to be the
/// same (libraries that use timestamps or host names as values).
///
/// A valid grant holds its key on a quorum of masters. For one key, every trusted master that
/// answered reported such a key as already holding the token (`SET NX GET` names the value;
/// [`ACQUIRE`] answers 2 or -1). So when no answer says so and the masters that gave no counted
/// answer are fewer than a quorum, no valid grant of this token exists, and the unknown masters
/// can be cleaned up like any others. With several keys a master stops at the first key taken
/// by someone else without reporting the rest, so nothing can be concluded.
fn earlier_grant_possible(ballots: &Ballots, op: &LockOp) -> bool {
    let same_value = ballots.replies.iter().flatten().any(|r| match r {
        Reply::Array(codes) => codes.contains(&Reply::Integer(2)),
        Reply::Bulk(v) => *v == op.token,
        Reply::Integer(n) => *n == -1,
        _ => false,
    });
    let unknown = ballots.replies.iter().filter(|r| r.is_none()).count();
    op.keys.len() > 1 || same_value || unknown >= ballots.quorum
}

async fn run_extend(proxy: &Proxy, op: &LockOp) -> Reply {
    let k = op.keys.len();
    if op.ttl_ms < 0 || (op.ttl_ms == 0 && op.op == Op::Extend) {
        return Reply::static_error("ERR invalid expire time in lock extension");
    }
    let ttl_arg = itoa::Buffer::new().format(op.ttl_ms).to_owned();
    let max = itoa::Buffer::new()
        .format(proxy.config.max_ttl_ms)
        .to_owned();
    let add: &[u8] = if op.op == Op::ExtendAdd { b"1" } else { b"0" };
    let req = eval(
        EXTEND,
        &op.keys,
        &[&op.token, ttl_arg.as_bytes(), add, max.as_bytes()],
    );
    let start = Instant::now();
    let deadline = start + proxy.config.node_timeout();
    let mut vote = ask(&proxy.masters, Request::Same(req), 1, deadline);
    let ballots = vote.decide_by(extended).await;
    // The TTL a quorum of masters now hold at least.
    let ttls: Vec<i64> = ballots
        .replies
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Reply::Integer(n) if *n > 0 => Some(*n),
            _ => None,
        })
        .collect();
    let extended = ttls.len();
    let min = Duration::from_millis(proxy.config.min_validity_ms);
    let valid = quorum_th(ballots.quorum, ttls, |t| *t).is_some_and(|t| {
        validity(
            Duration::from_millis(t as u64),
            start.elapsed(),
            proxy.config.drift_factor,
        )
        .is_some_and(|v| v > min)
    });
    if valid {
        return answer(op.answer, true, k);
    }
    if ballots.count(|r| *r == Reply::Integer(-2)) > 0 {
        return Reply::error(format!(
            "ERR lock TTL would exceed the proxy's max_ttl_ms ({} ms)",
            proxy.config.max_ttl_ms
        ));
    }
    debug!(extended, keys = k, "extension refused");
    answer(op.answer, false, k)
}

/// Release (compare-and-delete) or delete (whatever the keys hold) on all N masters, with the
/// wake-up signal where there is one; a key counts as done when a quorum deleted it.
async fn run_release(proxy: &Proxy, op: &LockOp) -> Reply {
    let k = op.keys.len();
    let req = match (&op.wake, op.op) {
        (None, Op::Release) => eval(RELEASE, &op.keys, &[&op.token]),
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
    let deadline = Instant::now() + proxy.config.node_timeout();
    let ballots = ask(&proxy.masters, Request::Same(req), 1, deadline)
        .outcome()
        .await;
    let codes: Vec<&[Reply]> = ballots
        .replies
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Reply::Array(c) if c.len() == k => Some(c.as_slice()),
            _ => None,
        })
        .collect();
    if codes.len() < ballots.quorum {
        return Reply::static_error(
            "CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered the release",
        );
    }
    let (mut released, mut gone) = (0, 0);
    for i in 0..k {
        let said = |code: i64| {
            codes
                .iter()
                .filter(|c| c[i] == Reply::Integer(code))
                .count()
        };
        let (deleted, missing) = (said(1), said(-1));
        if deleted >= ballots.quorum {
            released += 1;
        } else if deleted + missing >= ballots.quorum {
            gone += 1;
        }
    }
    if released == k {
        Stats::bump(&proxy.stats.releases);
    }
    match op.answer {
        Answer::Count => Reply::Integer(released as i64),
        Answer::Tristate if released == k => Reply::Integer(1),
        Answer::Tristate if released + gone == k => Reply::Integer(-1),
        Answer::Tristate => Reply::Integer(0),
        shape => answer(shape, released == k, k),
    }
}

async fn run_inspect(proxy: &Proxy, op: &LockOp) -> Reply {
    let req = eval(INSPECT, &op.keys[..1], &[]);
    let deadline = Instant::now() + proxy.config.node_timeout();
    let ballots = ask(&proxy.masters, Request::Same(req), 1, deadline)
        .decide_by(|r| match r {
            Reply::Array(pair) => pair.first().cloned(),
            _ => None,
        })
        .await
        .clone();
    let pairs: Vec<(&Reply, i64)> = ballots
        .replies
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Reply::Array(pair) => match pair.as_slice() {
                [value, Reply::Integer(ttl)] => Some((value, *ttl)),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let value = pairs
        .iter()
        .map(|(v, _)| *v)
        .find(|v| pairs.iter().filter(|(o, _)| o == v).count() >= ballots.quorum);
    match value {
        Some(Reply::Bulk(v)) => {
            let ttls: Vec<i64> = pairs
                .iter()
                .filter(|(o, _)| matches!(o, Reply::Bulk(b) if b == v))
                .map(|(_, t)| *t)
                .collect();
            let ttl = quorum_th(ballots.quorum, ttls, |t| *t).unwrap_or(-2);
            Reply::Array(vec![Reply::Bulk(v.clone()), Reply::Integer(ttl)])
        }
        _ => Reply::Array(vec![Reply::Nil, Reply::Integer(-2)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    #[test]
    fn set_options_in_any_order_and_case() {
        let o = parse_set(&args("SET k v px 100 nx")).unwrap();
        assert!(o.nx);
        assert_eq!(o.ttl_ms, Some(100));
        let o = parse_set(&args("set k v Nx eX 8")).unwrap();
        assert_eq!(o.ttl_ms, Some(8000));
    }

    #[test]
    fn set_option_errors_match_redis() {
        assert_eq!(parse_set(&args("SET k v NX XX")), Err(syntax_error()));
        assert_eq!(parse_set(&args("SET k v PX 1 EX 1")), Err(syntax_error()));
        assert_eq!(parse_set(&args("SET k v PX")), Err(syntax_error()));
        assert_eq!(parse_set(&args("SET k v PX abc")), Err(not_an_integer()));
        assert_eq!(
            parse_set(&args("SET k v PX 0")),
            Err(Reply::static_error(
                "ERR invalid expire time in 'set' command"
            ))
        );
    }

    #[test]
    fn absolute_expiry_becomes_relative() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let o = parse_set(&args(&format!("SET k v NX PXAT {}", now + 5000))).unwrap();
        let ttl = o.ttl_ms.unwrap();
        assert!((4000..=5000).contains(&ttl), "{ttl}");
    }
}
