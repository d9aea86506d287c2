//! The queue from a master's handles to its driver: bounded, many senders, one receiver.
//!
//! Every request to every master passes through one of these, so it is a mutex around a
//! `VecDeque` (held only for a push or a pop) and a waker rather than a general channel: no
//! semaphore and no block list per message, and the receiver is woken only when the queue
//! stops being empty. It ends, like a channel, when every sender is gone (the receiver then gets
//! `None` after what was queued) or when the receiver is gone (what was queued is dropped, and
//! later sends are refused).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use futures_util::task::AtomicWaker;

struct Shared<T> {
    state: Mutex<State<T>>,
    /// The receiver, waiting for the queue to stop being empty (or for the last sender to go).
    waker: AtomicWaker,
    senders: AtomicUsize,
    limit: usize,
}

struct State<T> {
    items: VecDeque<T>,
    /// The receiver has gone.
    closed: bool,
}

impl<T> Shared<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sending half; cloned for every handle.
pub struct Sender<T>(Arc<Shared<T>>);

/// The receiving half, owned by the driver.
pub struct Receiver<T>(Arc<Shared<T>>);

/// Why an item was not queued; the item is given back.
#[derive(Debug)]
pub enum TrySendError<T> {
    /// `limit` items are already waiting.
    Full(T),
    /// The receiver has gone.
    Closed(T),
}

/// A queue holding at most `limit` items.
pub fn channel<T>(limit: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            closed: false,
        }),
        waker: AtomicWaker::new(),
        senders: AtomicUsize::new(1),
        limit,
    });
    (Sender(shared.clone()), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queues `item` without waiting; answers how many items are waiting with it.
    pub fn try_send(&self, item: T) -> Result<usize, TrySendError<T>> {
        let mut state = self.0.state();
        if state.closed {
            return Err(TrySendError::Closed(item));
        }
        if state.items.len() >= self.0.limit {
            return Err(TrySendError::Full(item));
        }
        let was_empty = state.items.is_empty();
        state.items.push_back(item);
        let waiting = state.items.len();
        drop(state);
        // A receiver that saw items does not wait before it has taken them all.
        if was_empty {
            self.0.waker.wake();
        }
        Ok(waiting)
    }

    /// Moves every item waiting to the end of `into`, as [`Receiver::take_all`] does: for a
    /// sender that writes a batch itself on the receiver's behalf (under a lock the receiver
    /// takes too, so the order in which items are taken is kept).
    pub fn take_all(&self, into: &mut VecDeque<T>) {
        take_all(&self.0, into);
    }
}

fn take_all<T>(shared: &Shared<T>, into: &mut VecDeque<T>) {
    let mut state = shared.state();
    if into.is_empty() {
        std::mem::swap(&mut state.items, into);
    } else {
        into.extend(state.items.drain(..));
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Sender(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.waker.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// Moves every item waiting to the end of `into`, under one lock: a batch taken at once
    /// rather than item by item. An empty `into` is swapped in, so neither side allocates.
    /// Senders may queue up to the limit again while the batch is worked through.
    pub fn take_all(&mut self, into: &mut VecDeque<T>) {
        take_all(&self.0, into);
    }

    /// Ready with how many items are waiting once something is (nothing is taken), or with 0
    /// once every sender has gone and nothing is left; otherwise registers to be woken.
    pub fn poll_waiting(&mut self, cx: &mut std::task::Context<'_>) -> Poll<usize> {
        let waiting = |s: &Self| s.0.state().items.len();
        match waiting(self) {
            0 => {}
            n => return Poll::Ready(n),
        }
        self.0.waker.register(cx.waker());
        // Looked at again after registering, so a send or a last drop in between is seen.
        match waiting(self) {
            0 if self.0.senders.load(Ordering::Acquire) == 0 => Poll::Ready(waiting(self)),
            0 => Poll::Pending,
            n => Poll::Ready(n),
        }
    }

    /// The oldest item, if any, without waiting.
    pub fn try_recv(&mut self) -> Option<T> {
        self.0.state().items.pop_front()
    }

    /// The oldest item; `None` once every sender has gone and nothing is left.
    pub fn recv(&mut self) -> impl Future<Output = Option<T>> + '_ {
        std::future::poll_fn(move |cx| match self.poll_waiting(cx) {
            Poll::Ready(0) => Poll::Ready(None),
            Poll::Ready(_) => Poll::Ready(self.try_recv()),
            Poll::Pending => Poll::Pending,
        })
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let left = {
            let mut state = self.0.state();
            state.closed = true;
            std::mem::take(&mut state.items)
        };
        // Dropped outside the lock: a request's drop tells its caller.
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_ordered_and_ends_with_its_senders() {
        let (tx, mut rx) = channel(2);
        let tx2 = tx.clone();
        tx.try_send(1).unwrap();
        tx2.try_send(2).unwrap();
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        assert_eq!(rx.recv().await, Some(1));
        let waiter = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(v) = rx.recv().await {
                got.push(v);
            }
            got
        });
        tokio::task::yield_now().await;
        tx.try_send(4).unwrap();
        drop(tx);
        tokio::task::yield_now().await;
        tx2.try_send(5).unwrap();
        drop(tx2);
        assert_eq!(waiter.await.unwrap(), vec![2, 4, 5]);
    }

    #[test]
    fn a_gone_receiver_refuses_and_drops_what_waited() {
        let (tx, rx) = channel(4);
        let item = Arc::new(());
        tx.try_send(item.clone()).unwrap();
        drop(rx);
        assert_eq!(Arc::strong_count(&item), 1, "queued item dropped");
        assert!(matches!(tx.try_send(item), Err(TrySendError::Closed(_))));
    }
}
