//! Per-key ordering inside one proxy.
//!
//! Operations on the same key run one after another, in the order they were dispatched, and an
//! operation's clean-up (the rollback of a failed acquisition) is queued to the masters before
//! the next operation on that key starts. Without this, a rollback decided late could delete
//! the keys of a later acquisition by the same token. Different keys never wait for each other.
//!
//! A place in line is taken synchronously at dispatch ([`KeyLocks::enqueue`]), so pipelined
//! commands from one client keep their order even though they run as separate futures. Taking
//! all keys of a multi-key command in one step under one mutex means every waiter waits only on
//! earlier tickets, so there can be no deadlock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

/// The table of keys with operations in progress.
#[derive(Default)]
pub struct KeyLocks {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    /// For each busy key: the id of the latest ticket and the signal that it finished.
    tail: HashMap<Bytes, (u64, oneshot::Receiver<()>)>,
}

/// A place in line for some keys. [`Ticket::ready`] waits for earlier holders; dropping the
/// [`Held`] it returns lets the next one in.
pub struct Ticket {
    locks: Arc<KeyLocks>,
    id: u64,
    keys: Vec<Bytes>,
    wait: Vec<oneshot::Receiver<()>>,
    /// Dropping these tells the next ticket on each key that this one finished.
    done: Vec<oneshot::Sender<()>>,
}

/// Exclusive use of some keys until dropped.
pub struct Held {
    locks: Arc<KeyLocks>,
    id: u64,
    keys: Vec<Bytes>,
    _done: Vec<oneshot::Sender<()>>,
}

impl KeyLocks {
    /// Takes a place in line for `keys` now; waiting happens in [`Ticket::ready`].
    pub fn enqueue(self: &Arc<Self>, keys: &[Bytes]) -> Ticket {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.next_id += 1;
        let id = table.next_id;
        let mut wait = Vec::with_capacity(keys.len());
        let mut done = Vec::with_capacity(keys.len());
        let mut unique: Vec<Bytes> = Vec::with_capacity(keys.len());
        for key in keys {
            if unique.contains(key) {
                continue;
            }
            unique.push(key.clone());
            let (tx, rx) = oneshot::channel();
            done.push(tx);
            if let Some((_, prev)) = table.tail.insert(key.clone(), (id, rx)) {
                wait.push(prev);
            }
        }
        drop(table);
        Ticket {
            locks: self.clone(),
            id,
            keys: unique,
            wait,
            done,
        }
    }

    /// Number of keys with operations in progress (for `INFO`).
    pub fn busy(&self) -> usize {
        self.table.lock().map(|t| t.tail.len()).unwrap_or(0)
    }
}

impl Ticket {
    /// Waits until every earlier operation on these keys has finished.
    pub async fn ready(mut self) -> Held {
        for rx in self.wait.drain(..) {
            // An error means the earlier holder was dropped, which also means it finished.
            let _ = rx.await;
        }
        Held {
            locks: self.locks.clone(),
            id: self.id,
            keys: std::mem::take(&mut self.keys),
            _done: std::mem::take(&mut self.done),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        forget(&self.locks, self.id, &self.keys);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        forget(&self.locks, self.id, &self.keys);
    }
}

/// Removes table entries that still point at ticket `id`; later tickets keep theirs.
fn forget(locks: &KeyLocks, id: u64, keys: &[Bytes]) {
    if keys.is_empty() {
        return;
    }
    let mut table = locks.table.lock().unwrap_or_else(|p| p.into_inner());
    for key in keys {
        if matches!(table.tail.get(key), Some((owner, _)) if *owner == id) {
            table.tail.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn same_key_runs_in_dispatch_order() {
        let locks = Arc::new(KeyLocks::default());
        let k = Bytes::from_static(b"k");
        let first = locks.enqueue(std::slice::from_ref(&k));
        let second = locks.enqueue(std::slice::from_ref(&k));
        let order = Arc::new(Mutex::new(Vec::new()));
        let o2 = order.clone();
        let t2 = tokio::spawn(async move {
            let _h = second.ready().await;
            o2.lock().unwrap().push(2);
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            order.lock().unwrap().is_empty(),
            "second must wait for first"
        );
        let h = first.ready().await;
        order.lock().unwrap().push(1);
        drop(h);
        t2.await.unwrap();
        assert_eq!(*order.lock().unwrap(), vec![1, 2]);
        assert_eq!(locks.busy(), 0, "table is empty when nothing is in flight");
    }

    #[tokio::test]
    async fn different_keys_do_not_wait() {
        let locks = Arc::new(KeyLocks::default());
        let a = locks.enqueue(&[Bytes::from_static(b"a")]);
        let b = locks.enqueue(&[Bytes::from_static(b"b"), Bytes::from_static(b"b")]);
        let _hb = b.ready().await;
        let _ha = a.ready().await;
        assert_eq!(locks.busy(), 2);
    }
}
