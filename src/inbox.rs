//! Where the masters' replies to one fan-out are collected.
//!
//! A fan-out sends one request to each of N masters and waits for up to N replies. A general
//! channel is more than that needs and costs allocations on every lock operation; an inbox is
//! one shared vector behind a mutex (never contended for long: a push or a drain) and a waker.
//! Replies that arrive after the receiver has gone (an early decision) are dropped.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;

use crate::backend::BackendError;
use crate::reply::Reply;

/// One master's outcome, with the master's slot.
pub type Delivery = (usize, Result<Reply, BackendError>);

struct Shared {
    arrived: Mutex<State>,
    waker: AtomicWaker,
}

#[derive(Default)]
struct State {
    items: Vec<Delivery>,
    closed: bool,
}

/// The sending side, one clone per master.
#[derive(Clone)]
pub struct ReplyTx(Arc<Shared>);

/// The receiving side, held by the fan-out.
pub struct ReplyRx(Arc<Shared>);

/// A new inbox expecting about `n` replies.
pub fn inbox(n: usize) -> (ReplyTx, ReplyRx) {
    let shared = Arc::new(Shared {
        arrived: Mutex::new(State {
            items: Vec::with_capacity(n),
            closed: false,
        }),
        waker: AtomicWaker::new(),
    });
    (ReplyTx(shared.clone()), ReplyRx(shared))
}

impl ReplyTx {
    /// Delivers one outcome; ignored when the receiver has gone.
    pub fn send(&self, slot: usize, result: Result<Reply, BackendError>) {
        {
            let mut state = self.0.arrived.lock().unwrap_or_else(|p| p.into_inner());
            if state.closed {
                return;
            }
            state.items.push((slot, result));
        }
        self.0.waker.wake();
    }
}

impl ReplyRx {
    /// Moves every outcome that has arrived into `out`; pending when none has.
    pub fn poll_drain(&mut self, cx: &mut Context<'_>, out: &mut Vec<Delivery>) -> Poll<()> {
        if self.take(out) {
            return Poll::Ready(());
        }
        self.0.waker.register(cx.waker());
        // A delivery between the first look and the registration must not be missed.
        if self.take(out) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Waits for the next outcome, oldest first.
    #[cfg(test)]
    pub async fn recv(&mut self) -> Delivery {
        std::future::poll_fn(|cx| {
            let first = |rx: &ReplyRx| {
                let mut state = rx.0.arrived.lock().unwrap_or_else(|p| p.into_inner());
                (!state.items.is_empty()).then(|| state.items.remove(0))
            };
            if let Some(d) = first(self) {
                return Poll::Ready(d);
            }
            self.0.waker.register(cx.waker());
            first(self).map_or(Poll::Pending, Poll::Ready)
        })
        .await
    }

    fn take(&mut self, out: &mut Vec<Delivery>) -> bool {
        let mut state = self.0.arrived.lock().unwrap_or_else(|p| p.into_inner());
        if state.items.is_empty() {
            return false;
        }
        if out.is_empty() {
            // Hand the list over and take the (empty) one back: no copy, no allocation.
            std::mem::swap(out, &mut state.items);
        } else {
            out.append(&mut state.items);
        }
        true
    }
}

impl Drop for ReplyRx {
    fn drop(&mut self) {
        if let Ok(mut state) = self.0.arrived.lock() {
            state.closed = true;
            state.items.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delivers_and_wakes() {
        let (tx, mut rx) = inbox(2);
        let t2 = tx.clone();
        tokio::spawn(async move { t2.send(1, Ok(Reply::Integer(7))) });
        let mut got = Vec::new();
        std::future::poll_fn(|cx| rx.poll_drain(cx, &mut got)).await;
        assert_eq!(got, vec![(1, Ok(Reply::Integer(7)))]);
        drop(rx);
        // A late reply after the receiver has gone is dropped, not kept.
        tx.send(0, Ok(Reply::Nil));
        assert!(tx.0.arrived.lock().unwrap().items.is_empty());
    }
}
