//! A lock operation bound to one call ([`LockOp`]), and the answers it gives in its caller's
//! reply shape ([`crate::lockop::Answer`]): the words every phase of [`super`] answers in.

use std::sync::Arc;

use bytes::Bytes;

use crate::keylock::{KeyLocks, Ticket};
use crate::lockop::{AnnounceWhen, Answer, Holder, Lit, Lock, Op, Verb};
use crate::quorum::Ballots;
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
    pub publish: Option<Box<Announcement>>,
}

/// A release's announcement bound to one call: `command channel message` on each master where
/// `when` held there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
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
    pub(super) fn args(&self) -> [Bytes; 3] {
        [
            Bytes::from(self.ttl_ms.to_string()),
            self.value.clone(),
            Bytes::from_static(if self.always { b"1" } else { b"0" }),
        ]
    }
}

/// The error a quorum of masters answered alike to one of the proxy's scripts (such as
/// `WRONGTYPE` for a key of another type), as one Redis would answer the client's own script.
pub(crate) fn agreed_error(ballots: &Ballots) -> Option<Reply> {
    ballots.majority_error().map(Reply::from_our_script)
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
pub(super) fn answer(shape: Answer, ok: bool, keys: usize, token: &Bytes) -> Reply {
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
pub(super) fn constant_for(l: Lit, token: &Bytes) -> Reply {
    match l {
        Lit::TokenText => Reply::Bulk(token.clone()),
        l => constant(l),
    }
}

/// One of a script's constant replies (see [`crate::lockop::Replies`]), for replies that do
/// not name the call's token (hash locks' never do).
pub(crate) fn constant(l: Lit) -> Reply {
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

impl LockOp {
    /// The lock it acts on, in the one model (see [`crate::lockop::Lock`]).
    pub fn model(&self) -> Lock<'_> {
        let holder = match self.op {
            Op::Delete | Op::Inspect => Holder::Anyone,
            _ => Holder::Token(&self.token),
        };
        Lock {
            holder,
            ..Lock::mutex(&self.keys, &self.token, self.ttl_ms)
        }
    }

    /// What it does to the lock.
    pub fn verb(&self) -> Verb {
        self.op.verb()
    }
}

/// Phase 1 of every plain lock operation: its keys, and the signal list too, so a waiter's pop
/// never overtakes the release.
#[inline]
pub(super) fn turn(op: &LockOp, keylocks: &Arc<KeyLocks>) -> Ticket {
    match &op.wake {
        Some(w) => keylocks.enqueue(&[op.keys.as_slice(), std::slice::from_ref(&w.list)].concat()),
        None => keylocks.enqueue(&op.keys),
    }
}

/// The phases every plain lock operation (a newtype over [`LockOp`]) shares: its lock in the
/// one model, its verb, and its turn (see [`turn`]).
macro_rules! plain_phases {
    () => {
        fn lock(&self) -> crate::lockop::Lock<'_> {
            self.0.model()
        }

        fn verb(&self) -> crate::lockop::Verb {
            self.0.verb()
        }

        #[inline]
        fn turn(
            &self,
            keylocks: &std::sync::Arc<crate::keylock::KeyLocks>,
        ) -> crate::keylock::Ticket {
            super::op::turn(&self.0, keylocks)
        }
    };
}
pub(super) use plain_phases;
