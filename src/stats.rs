//! Counters reported by `INFO`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic counters, updated with relaxed atomics.
#[derive(Default, Debug)]
pub struct Stats {
    /// Commands processed.
    pub commands: AtomicU64,
    /// Locks granted.
    pub grants: AtomicU64,
    /// Lock requests refused (held elsewhere, no quorum, or validity used up).
    pub denials: AtomicU64,
    /// Refusals that had to be rolled back on the masters.
    pub rollbacks: AtomicU64,
    /// Releases that deleted the lock on a majority.
    pub releases: AtomicU64,
}

impl Stats {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
