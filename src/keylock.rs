//! Per-key ordering inside one proxy.
//!
//! Operations on the same key run one after another, in the order they were dispatched, and an
//! operation's clean-up (the rollback of a failed acquisition) is queued to the masters before
//! the next operation on that key starts. Without this, a rollback decided late could delete
//! the keys of a later acquisition by the same token. Different keys never wait for each other.
//!
//! Each busy key has a ticket counter, like a bakery: [`KeyLocks::enqueue`] takes the next
//! number synchronously at dispatch, so pipelined commands from one client keep their order even
//! though they run as separate futures; a ticket is served when the key's "now serving" counter
//! reaches it. Taking all keys of a multi-key command in one step under one mutex means every
//! waiter waits only on earlier tickets, so there can be no deadlock. The uncontended path (the
//! common one) allocates nothing beyond the table entry and hashes each key once: a ticket keeps
//! its key's hash and the entry's serial number, so finishing finds the entry again without
//! hashing or comparing the key; a waker list and a list of abandoned tickets exist only while
//! a key is contended.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use smallvec::SmallVec;
use tokio::sync::Notify;

/// The table of keys with operations in progress.
#[derive(Default)]
pub struct KeyLocks {
    // Keys come from clients, so the hasher is keyed at random (no chosen collisions), and
    // cheaper than SipHash on this per-request path.
    hasher: ahash::RandomState,
    table: Mutex<Table>,
}

/// The busy keys, and the serial number of the last entry made.
#[derive(Default)]
struct Table {
    turns: HashTable<Turn>,
    serial: u64,
}

impl Table {
    /// The next ticket for `key` (whose hash is `hash`), its entry made if the key was not
    /// busy; and whether an earlier ticket for it is still outstanding.
    #[inline(always)]
    fn take(&mut self, locks: &KeyLocks, hash: u64, key: &Bytes) -> (Place, bool) {
        let Table { turns, serial } = self;
        let turn = match turns.entry(hash, |t| t.key == *key, |t| locks.hash(&t.key)) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                *serial += 1;
                entry
                    .insert(Turn {
                        key: key.clone(),
                        serial: *serial,
                        next: 0,
                        serving: 0,
                        contended: None,
                    })
                    .into_mut()
            }
        };
        let place = Place {
            hash,
            serial: turn.serial,
            ticket: turn.next,
        };
        let waits = turn.serving != turn.next;
        turn.next += 1;
        (place, waits)
    }
}

/// One busy key's counters.
struct Turn {
    key: Bytes,
    /// Tells this entry apart from every other one made while it exists, so a ticket finds it
    /// by hash and serial alone.
    serial: u64,
    /// The next ticket to hand out.
    next: u64,
    /// The ticket allowed to run.
    serving: u64,
    /// What only a contended key needs; made on first contention.
    contended: Option<Box<Contention>>,
}

/// The part of a [`Turn`] that only contention needs (kept out of line, so the table's entries
/// stay small).
#[derive(Default)]
struct Contention {
    /// Wakes waiters when `serving` moves.
    notify: Arc<Notify>,
    /// Tickets given up before their turn; skipped when the turn reaches them.
    abandoned: Vec<u64>,
}

/// A place in line for some keys. [`Ticket::ready`] waits for earlier holders; dropping the
/// [`Held`] it returns (or the ticket itself) lets the next one in.
pub struct Ticket {
    held: Option<Held>,
}

/// One key's place in line: where its entry is, and the ticket number.
struct Place {
    hash: u64,
    serial: u64,
    ticket: u64,
}

/// Exclusive use of some keys until dropped.
pub struct Held {
    locks: Arc<KeyLocks>,
    /// Each key's place (inline for one or two keys, the usual case, so taking a turn
    /// allocates nothing of its own).
    keys: SmallVec<[Place; 2]>,
    /// Some key had an earlier ticket outstanding when this one was taken. Without one, the
    /// turn is already ours (a turn, once reached, stays until this ticket finishes), so
    /// [`Ticket::ready`] does not look at the table again.
    waits: bool,
}

impl KeyLocks {
    /// Takes a place in line for `keys` now; waiting happens in [`Ticket::ready`].
    pub fn enqueue(self: &Arc<Self>, keys: &[Bytes]) -> Ticket {
        if let [key] = keys {
            // One key, nearly every request: hashed before the mutex is taken, and no check
            // for repeats.
            let hash = self.hash(key);
            let (place, waits) = self.table().take(self, hash, key);
            let mut mine = SmallVec::new();
            mine.push(place);
            return self.ticket(mine, waits);
        }
        let mut mine: SmallVec<[Place; 2]> = SmallVec::with_capacity(keys.len());
        let mut waits = false;
        // A command may name a key twice; it takes one ticket for it. Many keys (a `DEL` of
        // 65,535) are told apart by a set, so this stays linear under the table's mutex.
        let mut seen: Option<std::collections::HashSet<&[u8], ahash::RandomState>> =
            (keys.len() > 8).then(|| {
                std::collections::HashSet::with_capacity_and_hasher(keys.len(), Default::default())
            });
        let mut table = self.table();
        for (i, key) in keys.iter().enumerate() {
            let repeated = match seen.as_mut() {
                Some(set) => !set.insert(key.as_ref()),
                None => keys[..i].contains(key),
            };
            if repeated {
                continue;
            }
            let (place, waited) = table.take(self, self.hash(key), key);
            waits |= waited;
            mine.push(place);
        }
        drop(table);
        self.ticket(mine, waits)
    }

    /// The table, locked; a lock poisoned by a panic elsewhere is taken over, not refused.
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ticket holding `keys`' places (`waits`: some earlier ticket is still outstanding).
    fn ticket(self: &Arc<Self>, keys: SmallVec<[Place; 2]>, waits: bool) -> Ticket {
        Ticket {
            held: Some(Held {
                locks: self.clone(),
                keys,
                waits,
            }),
        }
    }

    /// Number of keys with operations in progress (for `INFO`).
    pub fn busy(&self) -> usize {
        self.table.lock().map(|t| t.turns.len()).unwrap_or(0)
    }

    /// The one hash of a key, for the table and for its tickets.
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The notifier to wait on for `place`, or `None` when its ticket may run now.
    fn wait_for(&self, place: &Place) -> Option<Arc<Notify>> {
        let mut table = self.table();
        let turn = table
            .turns
            .find_mut(place.hash, |t| t.serial == place.serial)?;
        if turn.serving >= place.ticket {
            return None;
        }
        Some(turn.contended.get_or_insert_default().notify.clone())
    }
}

/// The wait for a [`Ticket`]'s turn ([`Ticket::ready`]): ready at once when no earlier
/// operation was in line (the common case), else the boxed wait. Kept small because it sits
/// inside every keyed operation's future: the wait, with its `Notified`, is several hundred bytes
/// and only a contended key pays for it.
pub type Ready = futures_util::future::Either<
    std::future::Ready<Held>,
    std::pin::Pin<Box<dyn std::future::Future<Output = Held> + Send>>,
>;

impl Ticket {
    /// Waits until every earlier operation on these keys has finished.
    pub fn ready(mut self) -> Ready {
        let Some(held) = self.held.take() else {
            unreachable!("a ticket is readied once");
        };
        if held.waits {
            futures_util::future::Either::Right(Box::pin(Ticket { held: Some(held) }.wait()))
        } else {
            futures_util::future::Either::Left(std::future::ready(held))
        }
    }

    /// The contended path of [`Ticket::ready`].
    async fn wait(mut self) -> Held {
        // Should this future be dropped while waiting, the keys are given up, not finished
        // (`self`'s Drop).
        if let Some(Held { locks, keys, .. }) = self.held.as_ref() {
            for place in keys {
                while let Some(notify) = locks.wait_for(place) {
                    let woken = notify.notified();
                    tokio::pin!(woken);
                    // Register before looking again, so a turn that passes in between is not
                    // missed.
                    woken.as_mut().enable();
                    if locks.wait_for(place).is_none() {
                        break;
                    }
                    woken.await;
                }
            }
        }
        match self.held.take() {
            Some(h) => h,
            None => unreachable!("the guard still holds the keys"),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(mut held) = self.held.take() {
            held.finish(true);
        }
    }
}

impl Held {
    /// Whether this operation had to wait for an earlier one on some key (false: its turn was
    /// there when it was dispatched).
    pub fn waited(&self) -> bool {
        self.waits
    }

    /// Moves each key's turn on. An abandoned ticket whose turn has not come yet is only
    /// marked, so it cannot let a later ticket overtake an earlier one still running.
    fn finish(&mut self, abandoned: bool) {
        if self.keys.is_empty() {
            return;
        }
        let mut table = self.locks.table();
        for place in self.keys.drain(..) {
            // The entry is there: it goes only when every ticket taken on it has finished.
            let Ok(mut entry) = table
                .turns
                .find_entry(place.hash, |t| t.serial == place.serial)
            else {
                continue;
            };
            let turn = entry.get_mut();
            if abandoned && turn.serving != place.ticket {
                let contended = turn.contended.get_or_insert_default();
                contended.abandoned.push(place.ticket);
                continue;
            }
            turn.serving += 1;
            if let Some(contended) = turn.contended.as_mut() {
                let abandoned = &mut contended.abandoned;
                while let Some(i) = abandoned.iter().position(|t| *t == turn.serving) {
                    abandoned.swap_remove(i);
                    turn.serving += 1;
                }
            }
            if turn.serving == turn.next {
                entry.remove();
            } else if let Some(contended) = &turn.contended {
                contended.notify.notify_waiters();
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.finish(false);
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
        let third = locks.enqueue(std::slice::from_ref(&k));
        let order = Arc::new(Mutex::new(Vec::new()));
        let (o2, o3) = (order.clone(), order.clone());
        let t3 = tokio::spawn(async move {
            let _h = third.ready().await;
            o3.lock().unwrap().push(3);
        });
        let t2 = tokio::spawn(async move {
            let _h = second.ready().await;
            o2.lock().unwrap().push(2);
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            order.lock().unwrap().is_empty(),
            "later tickets wait for the first"
        );
        let h = first.ready().await;
        order.lock().unwrap().push(1);
        drop(h);
        t2.await.unwrap();
        t3.await.unwrap();
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 3]);
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

    #[tokio::test]
    async fn an_abandoned_ticket_cannot_let_a_later_one_overtake() {
        let locks = Arc::new(KeyLocks::default());
        let k = [Bytes::from_static(b"k")];
        let first = locks.enqueue(&k).ready().await;
        let second = locks.enqueue(&k);
        let third = locks.enqueue(&k);
        drop(third);
        let waiting = tokio::spawn(second.ready());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the second waits for the first");
        drop(first);
        drop(waiting.await.unwrap());
        assert_eq!(locks.busy(), 0);
        let fourth = locks.enqueue(&k);
        let _h = tokio::time::timeout(Duration::from_secs(1), fourth.ready())
            .await
            .expect("nothing left blocking the key");
    }

    #[tokio::test]
    async fn tickets_find_their_keys_across_table_growth() {
        let locks = Arc::new(KeyLocks::default());
        let k = [Bytes::from_static(b"k")];
        let first = locks.enqueue(&k).ready().await;
        let second = locks.enqueue(&k);
        // Many other keys, some named twice in one command and some in commands of more than
        // eight keys, grow (and rehash) the table while the first key is held.
        let many: Vec<Bytes> = (0..1000).map(|i| Bytes::from(format!("key{i}"))).collect();
        let (mut held, mut queued) = (Vec::new(), Vec::new());
        for chunk in many.chunks(20) {
            held.push(locks.enqueue(chunk).ready().await);
            queued.push(locks.enqueue(&[chunk[0].clone(), chunk[0].clone()]));
        }
        assert_eq!(locks.busy(), 1001);
        let waiting = tokio::spawn(second.ready());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the second waits for the first");
        drop(first);
        drop(waiting.await.unwrap());
        // Queued tickets given up before their turn, then the turns they waited for.
        drop(queued);
        assert_eq!(locks.busy(), 1000);
        drop(held);
        assert_eq!(locks.busy(), 0, "every entry went with its last ticket");
    }

    #[tokio::test]
    async fn a_dropped_ticket_lets_the_next_one_in() {
        let locks = Arc::new(KeyLocks::default());
        let k = [Bytes::from_static(b"k")];
        let first = locks.enqueue(&k);
        let second = locks.enqueue(&k);
        drop(first);
        let _h = tokio::time::timeout(Duration::from_secs(1), second.ready())
            .await
            .expect("not blocked by a dropped ticket");
    }
}
