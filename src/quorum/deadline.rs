//! One timer for the deadlines of every vote on a set of masters.
//!
//! A vote stops waiting for the masters at its deadline. A tokio `Sleep` per vote would cost a
//! timer-wheel registration and removal on every lock request. Instead every deadline goes into
//! one queue per set of masters ([`crate::quorum::Masters`]), and one task sleeps until the
//! earliest of them, then sends the votes that are due [`ReplyTx::expire`] through their inbox.
//!
//! Votes made with the same timeout (the node timeout: nearly all of them) end in the order they
//! began, so their deadlines are appended to a sorted list and taken from its front: O(1) a vote.
//! A few such lists ("lanes") keep votes with another timeout (a release waits longer) and the
//! slight disorder of votes begun on different worker threads apart; a deadline that fits no
//! lane goes to a heap.
//!
//! A vote that ends first cancels its deadline ([`Deadlines::cancel`]): its inbox is released
//! at once, and the queue keeps only a small entry until its time, which then finds its slot
//! reused or empty and does nothing.
//!
//! The timer task is started by the first deadline, on the caller's runtime, and again by the
//! next deadline whenever the last one has gone (its runtime shut down), so masters made
//! outside the server (tests) need nothing more. The queue is behind a mutex, held for a push,
//! a cancellation or taking what is due; waking the votes happens after it is released.
//!
//! ## Watched deadlines
//!
//! Most votes are polled by a client's task, which polls every command it has in flight each
//! time it wakes. Such a task watches the deadlines itself ([`Watcher`]): while it polls, each
//! vote still waiting reports its deadline ([`due`]), and the task keeps one timer of its own
//! at the earliest. When that timer fires the task polls again, telling the votes the time, and
//! those whose deadline has passed stop. A vote polled this way puts nothing in the shared
//! queue, so the lock path pays neither its mutex nor its slot; a vote polled by any other
//! task falls back to the queue above, exactly as before.
//!
//! This relies on the task's futures polling their votes whenever they are polled themselves,
//! as `async` code and `join!`/`select!` do. A combinator that polls only the children whose
//! own wakers fired (a `FuturesUnordered`) would not pass the timer's wake-up on: a vote under
//! one inside a command would wait past its deadline.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use tokio::time::{Instant, Sleep};

use crate::backend::inbox::ReplyTx;

/// Sorted lists before the heap. Two timeouts in use (node timeout, release patience), each
/// with a little disorder between worker threads, fit.
const LANES: usize = 4;

/// The deadlines of the votes in progress on one set of masters, and their timer.
#[derive(Default)]
pub(crate) struct Deadlines {
    queue: Arc<Mutex<Queue>>,
}

/// A deadline set, to cancel it with. A slot is reused only with a new generation, so an old
/// entry never expires the slot's next vote (a `u32` wraps only after 4 billion votes on one
/// slot, far longer than any timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Alarm {
    slot: u32,
    generation: u32,
}

/// A deadline in the queue. Ordered by time first.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: Instant,
    alarm: Alarm,
}

#[derive(Default)]
struct Queue {
    lanes: Vec<VecDeque<Entry>>,
    /// Deadlines that fit no lane, earliest on top.
    heap: BinaryHeap<Reverse<Entry>>,
    slots: Slots,
    timer: Timer,
}

/// The inbox of each vote whose deadline is set and not yet passed or cancelled.
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

#[derive(Default)]
struct Slot {
    generation: u32,
    inbox: Option<ReplyTx>,
}

#[derive(Default)]
struct Timer {
    /// A timer task exists (or is being started).
    running: bool,
    /// The timer task looks at the queue again no later than this (`None`: only when woken).
    armed: Option<Instant>,
    /// Wakes the timer task.
    waker: Option<Waker>,
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // Every update is finished before anything that could panic: a poisoned queue is whole.
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

impl Deadlines {
    /// Sends `inbox` [`ReplyTx::expire`] at `at`, unless cancelled first. Starts the timer task
    /// when there is none (which needs a tokio runtime: without one, the deadline waits for the
    /// first one set within a runtime).
    pub(crate) fn set(&self, at: Instant, inbox: ReplyTx) -> Alarm {
        let (alarm, waker, start) = {
            let mut q = lock(&self.queue);
            let alarm = q.slots.insert(inbox);
            q.push(Entry { at, alarm });
            let timer = &mut q.timer;
            // Wake the timer only if it would otherwise look too late; once woken, it looks
            // at the whole queue, so later deadlines need not wake it again.
            let waker = if timer.armed.is_none_or(|armed| at < armed) {
                timer.armed = Some(at);
                timer.waker.take()
            } else {
                None
            };
            let start = !std::mem::replace(&mut timer.running, true);
            (alarm, waker, start)
        };
        if let Some(w) = waker {
            w.wake();
        }
        if start {
            match tokio::runtime::Handle::try_current() {
                // The guard is made here, not in the task: a task dropped before its first poll
                // (a runtime shutting down) must still mark the timer gone.
                Ok(rt) => drop(rt.spawn(keep_time(Running(Arc::downgrade(&self.queue))))),
                Err(_) => lock(&self.queue).timer.running = false,
            }
        }
        alarm
    }

    /// Forgets a deadline that has not passed yet; nothing when it has.
    pub(crate) fn cancel(&self, alarm: Alarm) {
        let inbox = lock(&self.queue).slots.remove(alarm);
        // Released outside the lock.
        drop(inbox);
    }
}

impl Slots {
    fn insert(&mut self, inbox: ReplyTx) -> Alarm {
        if let Some(slot) = self.free.pop() {
            let s = &mut self.slots[slot as usize];
            s.inbox = Some(inbox);
            return Alarm {
                slot,
                generation: s.generation,
            };
        }
        // More votes in progress at once than a u32 counts cannot happen (each holds memory).
        let slot = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots.push(Slot {
            generation: 0,
            inbox: Some(inbox),
        });
        Alarm {
            slot,
            generation: 0,
        }
    }

    /// Empties the alarm's slot, if it is still the alarm's, and returns its inbox.
    fn remove(&mut self, alarm: Alarm) -> Option<ReplyTx> {
        let s = self.slots.get_mut(alarm.slot as usize)?;
        if s.generation != alarm.generation || s.inbox.is_none() {
            return None;
        }
        s.generation = s.generation.wrapping_add(1);
        self.free.push(alarm.slot);
        s.inbox.take()
    }
}

impl Queue {
    /// Appends to the lane whose last deadline is the latest not after `e`'s (so every lane
    /// stays sorted, and deadlines of one timeout keep to one lane); else to an empty lane, a
    /// new lane, or the heap.
    fn push(&mut self, e: Entry) {
        let mut best: Option<(usize, Instant)> = None;
        let mut empty = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            match lane.back() {
                None => {
                    empty.get_or_insert(i);
                }
                Some(last) if last.at <= e.at && best.is_none_or(|(_, b)| last.at > b) => {
                    best = Some((i, last.at));
                }
                Some(_) => {}
            }
        }
        match best.map(|(i, _)| i).or(empty) {
            Some(i) => self.lanes[i].push_back(e),
            None if self.lanes.len() < LANES => self.lanes.push(VecDeque::from([e])),
            None => self.heap.push(Reverse(e)),
        }
    }

    /// The earliest deadline queued.
    fn earliest(&self) -> Option<Instant> {
        let lanes = self.lanes.iter().filter_map(|l| l.front().map(|e| e.at));
        let heap = self.heap.peek().map(|Reverse(e)| e.at);
        lanes.chain(heap).min()
    }

    /// Takes every deadline at or before `limit`, and the inboxes of those not cancelled.
    fn take_due(&mut self, limit: Instant, due: &mut Vec<ReplyTx>) {
        for lane in &mut self.lanes {
            while lane.front().is_some_and(|e| e.at <= limit) {
                if let Some(e) = lane.pop_front() {
                    due.extend(self.slots.remove(e.alarm));
                }
            }
        }
        while self.heap.peek().is_some_and(|Reverse(e)| e.at <= limit) {
            if let Some(Reverse(e)) = self.heap.pop() {
                due.extend(self.slots.remove(e.alarm));
            }
        }
    }
}

/// Marks the timer gone when its task ends, or is dropped with its runtime, so that the next
/// deadline starts another.
struct Running(Weak<Mutex<Queue>>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(q) = self.0.upgrade() {
            let old = std::mem::take(&mut lock(&q).timer);
            // Its waker is dropped outside the lock.
            drop(old);
        }
    }
}

impl Drop for Deadlines {
    fn drop(&mut self) {
        // The timer task ends when it finds the queue gone; it may be asleep until a deadline
        // far off, or until the next one set, which will not come.
        let waker = lock(&self.queue).timer.waker.take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

thread_local! {
    /// The watch of the task being polled on this thread, if it keeps one (see [`Watcher`]).
    static WATCH: Cell<Option<Watch>> = const { Cell::new(None) };
}

/// What the polling task and the votes it polls tell each other during one poll.
#[derive(Clone, Copy)]
struct Watch {
    /// The time, when the task's timer has fired: deadlines at or before it have passed.
    now: Option<Instant>,
    /// The earliest deadline still ahead that a vote reported.
    earliest: Option<Instant>,
}

/// How a vote polled without a decision stands against its deadline `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// It has passed: the vote stops.
    Passed,
    /// The polling task watches it: it will be polled again at `at`, or earlier.
    Watched,
    /// Nobody watches: the vote must set it in the shared queue ([`Deadlines::set`]).
    Unwatched,
}

/// Reports a waiting vote's deadline to the task polling it (see [`Watcher`]).
pub(crate) fn due(at: Instant) -> Due {
    WATCH.with(|cell| match cell.get() {
        None => Due::Unwatched,
        Some(w) if w.now.is_some_and(|now| now >= at) => Due::Passed,
        Some(mut w) => {
            w.earliest = Some(w.earliest.map_or(at, |e| e.min(at)));
            cell.set(Some(w));
            Due::Watched
        }
    })
}

/// Puts the previous watch back when a poll under [`watch`] ends, even by a panic: a watch
/// left behind would swallow the deadlines of every task polled on this thread later.
struct Restore(Option<Watch>);

impl Drop for Restore {
    fn drop(&mut self) {
        WATCH.set(self.0);
    }
}

/// Runs `f` (a poll) under a new watch; returns the earliest deadline reported in it.
fn watch(now: Option<Instant>, f: impl FnOnce()) -> Option<Instant> {
    let restore = Restore(WATCH.replace(Some(Watch {
        now,
        earliest: None,
    })));
    f();
    let mine = WATCH.get();
    drop(restore);
    mine.and_then(|w| w.earliest)
}

/// The deadline timer of a task that polls votes itself (a client's pipeline): one timer for
/// all of them, at the earliest deadline reported, moved only when an earlier one appears or
/// after it fires. Votes started later end later (they share the node timeout), so in steady
/// use it is set once per node timeout, not once per vote.
///
/// The timer wakes the task that last polled it: a set of votes handed to another task needs a
/// new watcher there.
#[derive(Default)]
pub(crate) struct Watcher {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The deadline the timer is set for, until it fires.
    armed: Option<Instant>,
}

impl Watcher {
    /// Runs `poll` (which polls the votes with `cx`'s waker) under a watch, then sets the timer
    /// for the earliest deadline it reported. When the timer has fired, `poll` runs with the
    /// time, so the votes whose deadline has passed stop.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, mut poll: impl FnMut(&mut Context<'_>)) {
        // A deadline already passed when the timer is set makes it ready at once; the votes
        // are then polled again. Twice more is plenty (the timer never fires before the clock
        // reaches its deadline); a last resort wakes the task instead of spinning here.
        for _ in 0..3 {
            let fired = self.armed.is_some() && self.sleep.as_ref().is_some_and(|s| s.is_elapsed());
            let now = if fired {
                self.armed = None;
                Some(Instant::now())
            } else {
                None
            };
            let Some(at) = watch(now, || poll(cx)) else {
                return;
            };
            if self.armed.is_some_and(|armed| armed <= at) {
                return;
            }
            self.armed = Some(at);
            let sleep = match &mut self.sleep {
                Some(sleep) => {
                    sleep.as_mut().reset(at);
                    sleep
                }
                None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return;
            }
        }
        cx.waker().wake_by_ref();
    }
}

/// The timer task: sleeps until the earliest deadline, expires what is due, and again. Ends
/// when the masters are dropped.
async fn keep_time(running: Running) {
    let queue = running.0.clone();
    let mut due = Vec::new();
    // Reset to each earliest deadline; first polled only then.
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(sleep);
    let mut fired = false;
    std::future::poll_fn(|cx| {
        loop {
            let Some(queue) = queue.upgrade() else {
                return Poll::Ready(());
            };
            let next = {
                let mut q = lock(&queue);
                // Whatever the sleep was set for is due once it fires (the timer wheel rounds
                // up, so the clock is there too; this makes sure).
                let now = Instant::now();
                let limit = if fired {
                    now.max(sleep.deadline())
                } else {
                    now
                };
                q.take_due(limit, &mut due);
                let next = q.earliest();
                q.timer.armed = next;
                match &q.timer.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => q.timer.waker = Some(cx.waker().clone()),
                }
                next
            };
            drop(queue);
            fired = false;
            for inbox in due.drain(..) {
                inbox.expire();
            }
            let Some(at) = next else {
                return Poll::Pending;
            };
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            fired = true;
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::inbox::{ReplyRx, inbox};

    /// True when `rx`'s deadline has been delivered (nothing else is sent in these tests).
    fn expired(rx: &mut ReplyRx) -> bool {
        let waker = futures_util::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        rx.poll_each(&mut cx, |_| true).is_ready()
    }

    fn entry(at: Instant, slot: u32) -> Entry {
        Entry {
            at,
            alarm: Alarm {
                slot,
                generation: 0,
            },
        }
    }

    #[test]
    fn a_watch_collects_the_earliest_deadline_and_says_which_have_passed() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(due(t), Due::Unwatched);
        let earliest = watch(None, || {
            assert_eq!(due(t + ms(30)), Due::Watched);
            assert_eq!(due(t + ms(10)), Due::Watched);
            assert_eq!(due(t + ms(20)), Due::Watched);
        });
        assert_eq!(earliest, Some(t + ms(10)));
        // Told the time (the task's timer fired): what is due has passed, the rest is watched.
        let earliest = watch(Some(t + ms(10)), || {
            assert_eq!(due(t + ms(10)), Due::Passed);
            assert_eq!(due(t + ms(20)), Due::Watched);
        });
        assert_eq!(earliest, Some(t + ms(20)));
        // Outside any poll, and after a poll that panicked, nobody watches.
        assert_eq!(due(t), Due::Unwatched);
        let panicked = std::panic::catch_unwind(|| watch(None, || panic!("a command panicked")));
        assert!(panicked.is_err());
        assert_eq!(due(t), Due::Unwatched);
    }

    #[test]
    fn interleaved_timeouts_share_two_lanes_and_disorder_spills_to_the_heap() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut q = Queue::default();
        for i in 0..4 {
            q.push(entry(t + ms(50 + i), i as u32));
            // A release begun at the same time waits a second.
            q.push(entry(t + ms(1000 + i), 10 + i as u32));
        }
        assert_eq!(q.lanes.len(), 2);
        assert!(q.heap.is_empty());
        assert_eq!(q.earliest(), Some(t + ms(50)));
        // Disorder beyond what the lanes absorb goes to the heap, and still comes out first.
        for i in 0..4 {
            q.push(entry(t + ms(10 - i), 20 + i as u32));
        }
        assert_eq!(q.lanes.len(), LANES);
        assert_eq!(q.heap.len(), 2);
        assert_eq!(q.earliest(), Some(t + ms(7)));
        for lane in &q.lanes {
            assert!(
                lane.iter()
                    .zip(lane.iter().skip(1))
                    .all(|(a, b)| a.at <= b.at)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn expires_in_order_and_cancelled_ones_not_at_all() {
        let d = Deadlines::default();
        let t = Instant::now();
        let ms = Duration::from_millis;
        let (tx1, mut rx1) = inbox(1);
        let (tx2, mut rx2) = inbox(1);
        let (tx3, mut rx3) = inbox(1);
        d.set(t + ms(10), tx1);
        let a2 = d.set(t + ms(20), tx2);
        // Out of order, earlier than the timer is armed for: it must wake the timer.
        d.set(t + ms(5), tx3);
        d.cancel(a2);
        // The cancelled slot is reused at once, under a new generation.
        let (tx4, mut rx4) = inbox(1);
        let a4 = d.set(t + ms(40), tx4);
        assert_eq!(a4.slot, a2.slot);
        assert_ne!(a4.generation, a2.generation);
        tokio::time::sleep_until(t + ms(5)).await;
        tokio::task::yield_now().await;
        assert!(expired(&mut rx3));
        assert!(!expired(&mut rx1));
        tokio::time::sleep_until(t + ms(10)).await;
        tokio::task::yield_now().await;
        assert!(expired(&mut rx1));
        tokio::time::sleep_until(t + ms(30)).await;
        assert!(!expired(&mut rx2), "cancelled");
        assert!(
            !expired(&mut rx4),
            "the cancelled entry's time is not the new vote's"
        );
        tokio::time::sleep_until(t + ms(40)).await;
        tokio::task::yield_now().await;
        assert!(expired(&mut rx4));
    }

    #[tokio::test]
    async fn the_timer_task_ends_with_its_masters() {
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let d = Deadlines::default();
        let (tx, _rx) = inbox(1);
        // Far off: the timer sleeps, and nothing else would wake it.
        d.set(Instant::now() + Duration::from_secs(3600), tx);
        tokio::task::yield_now().await;
        assert_eq!(alive(), 1);
        drop(d);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(alive(), 0);
    }

    #[test]
    fn a_new_runtime_gets_a_new_timer() {
        let d = Deadlines::default();
        for _ in 0..2 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async {
                let (tx, mut rx) = inbox(1);
                d.set(Instant::now() + Duration::from_millis(5), tx);
                let ended = std::future::poll_fn(|cx| rx.poll_each(cx, |_| true));
                tokio::time::timeout(Duration::from_secs(5), ended)
                    .await
                    .expect("the deadline was delivered");
            });
            // The runtime's end ends its timer task too.
            drop(rt);
            assert!(!lock(&d.queue).timer.running);
        }
    }
}
