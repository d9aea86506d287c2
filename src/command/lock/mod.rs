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
//!
//! The operation's phases (see [`super::runner`]) are split by what they do: [`acquire`] holds
//! the acquisition's request, decision and roll-back, [`settle`] those of extensions, releases
//! and reads; this file holds the operation, its dispatch and its answers.

mod acquire;
mod op;
mod settle;

use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::runner::Operation;
use crate::backend::Backend;
use crate::error::Error;
use crate::lockop::{Answer, Op, Verb};
use crate::proxy::Proxy;
use crate::quorum::Vote;
use crate::wire::reply::Reply;

pub use acquire::Acquisition;
pub(crate) use acquire::compare_and_delete;
pub use op::{Announcement, LockOp, Wake, acquires, is_granted_reply};
pub(crate) use op::{agreed_error, constant};
pub use settle::{Extended, Extension, Read, Release};

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
        Ok(()) => super::runner::run(proxy, Acquisition(op)),
        Err(refused) => refused.into(),
    }
}

/// Runs compare-and-delete of `key`/`token` on all N masters; answers 1 when a quorum deleted
/// the key, else 0.
pub fn release(proxy: &Arc<Proxy>, key: Bytes, token: Bytes) -> Action {
    start(
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
    start(
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
/// the keys' turn, decided by Redlock's validity rule as an extension is (the extension's own
/// phases, answered in a lease's terms).
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
    let op = Extension(op);
    let held = op.turn(proxy.keylocks()).ready().await;
    let (decided, vote, clock) = super::runner::decide(proxy, &op).await;
    match decided {
        Extended::Granted => {
            settle::repair_after(proxy, &op.0, vote, clock, held);
            Renewal::Renewed
        }
        _ if vote
            .ballots()
            .agree(|r| matches!(r, Reply::Integer(0 | -3))) =>
        {
            Renewal::Gone
        }
        _ => Renewal::Failed(
            "fewer than a quorum of masters extended the lock in time",
            Answered::of(&vote),
        ),
    }
}

/// The checks every lock operation passes: it names keys, its TTL is within the cap, and so is
/// its signal's.
#[inline]
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

/// Runs any lock operation as a quorum operation (see [`super::runner`]).
pub fn start(proxy: &Arc<Proxy>, op: LockOp) -> Action {
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
    if op.op == Op::AcquireOrKeep && op.keys.len() != 1 {
        return Reply::from(Error::NoLockKeys).into();
    }
    match op.verb() {
        Verb::Acquire => super::runner::run(proxy, Acquisition(op)),
        Verb::Extend => super::runner::run(proxy, Extension(op)),
        Verb::Release | Verb::Delete => super::runner::run(proxy, Release(op)),
        _ => super::runner::run(proxy, Read(op)),
    }
}

#[cfg(test)]
mod tests {
    use super::acquire::{created_by, granted, roll_back_plan};
    use super::settle::*;
    use super::*;
    use crate::backend::BackendError;
    use crate::config::Config;
    use Reply::Integer as I;
    use std::time::Duration;

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

    const TTL_MS: i64 = 10_000;
    const FAST: Duration = Duration::from_millis(10);

    #[test]
    fn acquisition_is_granted_only_with_a_quorum_of_creations_in_time() {
        let cfg = Config::default();
        let yes = created_by(&op(&["k"]));
        // Plain `SET NX`: OK is a creation, nil is taken (whoever holds it).
        let (created, taken) = (Some(Reply::ok()), Some(Reply::Nil));
        let yes2 = ballots(vec![created.clone(), created.clone(), taken.clone()]);
        assert!(granted(&yes2, yes, TTL_MS, FAST, &cfg));
        let yes1 = ballots(vec![created.clone(), taken.clone(), None]);
        assert!(!granted(&yes1, yes, TTL_MS, FAST, &cfg));
        // A quorum, but the validity left (ttl − elapsed − drift) is gone.
        let late = Duration::from_millis(9_950);
        assert!(!granted(&yes2, yes, TTL_MS, late, &cfg));
        // `SET NX ... GET` (reentrant): nil is a creation; a value, even the caller's own, is a
        // key that was already there.
        let yes = created_by(&reentrant(&["k"]));
        let (created, mine) = (Some(Reply::Nil), bulk("tok"));
        let same = ballots(vec![mine.clone(), mine, created.clone()]);
        assert!(!granted(&same, yes, TTL_MS, FAST, &cfg));
        let two = ballots(vec![created.clone(), created, bulk("other")]);
        assert!(granted(&two, yes, TTL_MS, FAST, &cfg));
        // One reading per form: the other form's "yes" never counts.
        assert!(!granted(&two, created_by(&op(&["k"])), TTL_MS, FAST, &cfg));
        assert!(!granted(&yes2, yes, TTL_MS, FAST, &cfg));
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
        assert!(!granted(&b, yes, TTL_MS, FAST, &cfg));
        // Rolled back where it wrote (B, D), by position in the union.
        let o = op(&["k"]);
        let k = &o.keys[0];
        assert_eq!(
            roll_back_plan(&b, None, &o),
            vec![vec![], vec![k], vec![], vec![k]]
        );
        // A and B: a quorum of each side.
        let b = joint(vec![created.clone(), created, taken, None], &old, &new);
        assert!(granted(&b, yes, TTL_MS, FAST, &cfg));
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

    /// The runner's phases 3 and 4 of an acquisition, called as the runner calls them, with no
    /// network: the decision from the ballots and the time, then the undo plan as the requests
    /// each member is sent.
    #[test]
    fn an_acquisitions_decision_and_undo_are_pure_phases() {
        use crate::command::runner::Operation;
        let cfg = Config::default();
        let acq = Acquisition(op(&["k"]));
        let (created, taken) = (Some(Reply::ok()), Some(Reply::Nil));
        let yes = ballots(vec![created.clone(), created.clone(), taken.clone()]);
        assert!(acq.decide(&yes, FAST, &cfg));
        assert!(!acq.decide(&yes, Duration::from_millis(TTL_MS as u64), &cfg));
        let no = ballots(vec![created.clone(), taken.clone(), None]);
        assert!(!acq.decide(&no, FAST, &cfg));
        // The undo: compare-and-delete of the token on master 0 only (master 2's outcome is
        // unknown, and a plain "taken" on master 1 may be an earlier grant of this token).
        let plan = acq.undo(&no, None);
        let release =
            crate::wire::master::eval(crate::scripts::RELEASE, &acq.0.keys, &[&acq.0.token]);
        assert_eq!(plan, vec![Some(release), None, None]);
        // A refused plain acquisition that wrote nowhere has nothing to undo.
        let none = ballots(vec![taken.clone(), taken, None]);
        assert_eq!(acq.undo(&none, None), vec![None, None, None]);
    }

    #[test]
    fn extension_needs_a_quorum_still_valid() {
        let cfg = Config::default();
        let b = ballots(vec![Some(I(9_000)), Some(I(9_000)), Some(I(0))]);
        assert_eq!(extension(&b, FAST, &cfg), Extended::Granted);
        let b = ballots(vec![Some(I(9_000)), Some(I(0)), None]);
        assert_eq!(extension(&b, FAST, &cfg), Extended::Refused);
        // A quorum extended, but the TTL they share has run out while waiting.
        let b = ballots(vec![Some(I(50)), Some(I(50)), Some(I(9_000))]);
        assert_eq!(
            extension(&b, Duration::from_millis(60), &cfg),
            Extended::Refused
        );
        let b = ballots(vec![Some(I(-2)), Some(I(-2)), Some(I(0))]);
        assert_eq!(extension(&b, FAST, &cfg), Extended::BeyondMax);
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
    use super::op::answer;
    use super::settle::{released, remaining};
    use super::*;
    use crate::lockop::{Lit, Replies, Short};
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
