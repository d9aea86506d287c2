//! Where the masters' replies to one fan-out are collected.
//!
//! A fan-out sends one request to each of N masters and waits for up to N replies, or until its
//! deadline. A general channel is more than that needs and costs allocations on every lock
//! operation; an inbox is one allocation: a short list of replies kept inline (no second
//! allocation for the usual N), the receiver's waker and two marks, behind one mutex (never
//! held for long: a push, or the receiver counting what arrived).
//!
//! The deadline reaches the inbox as one more message: [`ReplyTx::expire`], sent by the shared
//! timer of [`crate::quorum::deadline`] (or [`ReplyRx::expire`], when the task polling the fan-out saw
//! the deadline pass), so a fan-out needs no timer of its own. Replies that arrive after the
//! deadline, or after the receiver has gone (an early decision), are dropped.

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use smallvec::SmallVec;

use crate::error::BackendError;
use crate::wire::reply::Reply;

/// One master's outcome, with the master's slot.
pub type Delivery = (usize, Result<Reply, BackendError>);

/// Replies kept inside the inbox's own allocation: Redlock's usual five masters. With more, a
/// burst of replies not yet counted spills to the heap.
const INLINE: usize = 5;

#[derive(Default)]
struct State {
    items: SmallVec<[Delivery; INLINE]>,
    /// The receiver, to wake when a reply or the deadline comes.
    waker: Option<Waker>,
    /// The receiver has gone: later replies are dropped.
    closed: bool,
    /// The deadline has passed.
    expired: bool,
}

type Shared = Mutex<State>;

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panic while the lock was held left nothing half-done worth refusing: every update is
    // one push or one flag.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sending side, one clone per master (and one for the deadline).
#[derive(Clone)]
pub struct ReplyTx(Arc<Shared>);

/// The receiving side, held by the fan-out.
pub struct ReplyRx(Arc<Shared>);

/// A new inbox expecting about `n` replies.
pub fn inbox(n: usize) -> (ReplyTx, ReplyRx) {
    // Made empty, its inline list left unwritten, so the compiler writes the few words of the
    // new state straight into the allocation instead of building it (some hundred bytes) first
    // and copying it in.
    let shared = Arc::new(Mutex::new(State {
        items: SmallVec::new(),
        waker: None,
        closed: false,
        expired: false,
    }));
    if n > INLINE {
        lock(&shared).items.reserve_exact(n);
    }
    (ReplyTx(shared.clone()), ReplyRx(shared))
}

impl ReplyTx {
    /// Delivers one outcome; ignored when the receiver has gone or its deadline has passed.
    pub fn send(&self, slot: usize, result: Result<Reply, BackendError>) {
        let waker = {
            let mut state = lock(&self.0);
            if state.closed || state.expired {
                return;
            }
            state.items.push((slot, result));
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Tells the receiver that its deadline has passed: what arrived before still counts, what
    /// arrives later is dropped.
    pub fn expire(&self) {
        let waker = {
            let mut state = lock(&self.0);
            state.expired = true;
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl ReplyRx {
    /// Another sender into this inbox (for the shared timer, which expires it through one).
    pub fn sender(&self) -> ReplyTx {
        ReplyTx(self.0.clone())
    }

    /// Marks the deadline passed, as [`ReplyTx::expire`] does, for a receiver that saw it
    /// pass itself: later replies are dropped. Wakes nobody.
    pub fn expire(&self) {
        lock(&self.0).expired = true;
    }

    /// Hands the outcomes that have arrived to `take`, newest first, until it returns `true`
    /// (enough: the rest stay for a later call). Ready when `take` said enough, or when every
    /// arrival was taken and the deadline has passed; otherwise pending until the next arrival
    /// or the deadline.
    ///
    /// `take` runs with the inbox locked, so the masters' replies wait for it: it should only
    /// count.
    pub fn poll_each(
        &mut self,
        cx: &mut Context<'_>,
        mut take: impl FnMut(Delivery) -> bool,
    ) -> Poll<()> {
        let mut state = lock(&self.0);
        while let Some(d) = state.items.pop() {
            if take(d) {
                return Poll::Ready(());
            }
        }
        if state.expired {
            return Poll::Ready(());
        }
        // Registered under the lock: an arrival after this sees the new waker.
        match &state.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Waits for the next outcome, oldest first.
    #[cfg(test)]
    pub async fn recv(&mut self) -> Delivery {
        std::future::poll_fn(|cx| {
            let mut state = lock(&self.0);
            if !state.items.is_empty() {
                return Poll::Ready(state.items.remove(0));
            }
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

impl Drop for ReplyRx {
    fn drop(&mut self) {
        if Arc::get_mut(&mut self.0).is_some() {
            // Every sender has gone: nobody can look at the marks, and the inbox goes now.
            return;
        }
        let mut state = lock(&self.0);
        state.closed = true;
        state.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts what `poll_each` hands over until `enough` of them.
    async fn take(rx: &mut ReplyRx, enough: usize) -> Vec<Delivery> {
        let mut got = Vec::new();
        std::future::poll_fn(|cx| {
            rx.poll_each(cx, |d| {
                got.push(d);
                got.len() >= enough
            })
        })
        .await;
        got
    }

    #[tokio::test]
    async fn delivers_and_wakes() {
        let (tx, mut rx) = inbox(2);
        let t2 = tx.clone();
        tokio::spawn(async move { t2.send(1, Ok(Reply::Integer(7))) });
        assert_eq!(take(&mut rx, 1).await, vec![(1, Ok(Reply::Integer(7)))]);
        drop(rx);
        // A late reply after the receiver has gone is dropped, not kept.
        tx.send(0, Ok(Reply::Nil));
        assert!(lock(&tx.0).items.is_empty());
    }

    #[tokio::test]
    async fn what_is_not_taken_stays_for_the_next_call() {
        let (tx, mut rx) = inbox(3);
        for slot in 0..3 {
            tx.send(slot, Ok(Reply::Integer(slot as i64)));
        }
        assert_eq!(take(&mut rx, 1).await.len(), 1);
        assert_eq!(take(&mut rx, 2).await.len(), 2);
    }

    #[tokio::test]
    async fn the_deadline_wakes_the_receiver_after_what_arrived() {
        let (tx, mut rx) = inbox(2);
        tx.send(0, Ok(Reply::Nil));
        let t2 = tx.clone();
        tokio::spawn(async move { t2.expire() });
        // The reply that came first is still counted, then the deadline ends the wait.
        assert_eq!(take(&mut rx, 2).await, vec![(0, Ok(Reply::Nil))]);
        // A reply after the deadline is dropped, and every later wait ends at once.
        tx.send(1, Ok(Reply::Nil));
        assert_eq!(take(&mut rx, 1).await, vec![]);
    }
}
