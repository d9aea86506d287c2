//! The one counter store: what `INFO` reports and `/metrics` exports, read by both, so the two
//! always agree. Every counter is a relaxed atomic, so the hot path pays one add per event.
//!
//! Per-master figures (reconnects, restarts, reply latency) live with each master's health;
//! the reply latency histogram is a [`Latency`], defined here.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::Kind;

/// Every proxy-wide counter.
pub struct Counters {
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
    /// Locks written back to trusted members that lacked them, after a granted extension or
    /// lease renewal (quorum repair): one per extension that wrote at least one copy.
    pub locks_repaired: AtomicU64,
    /// Leases running now.
    pub leases_active: AtomicU64,
    /// Lease renewals a quorum granted.
    pub lease_renewals: AtomicU64,
    /// Leases lost: a renewal without a quorum within validity.
    pub leases_lost: AtomicU64,
    /// Leases ended because the lock was released, through any proxy (or taken over).
    pub leases_released: AtomicU64,
    /// Leases ended because the connection that acquired the lock closed.
    pub leases_disconnected: AtomicU64,
    /// Leases ended at `lease_max_ms`.
    pub leases_max: AtomicU64,
    /// One counter per command of the command table, by the command's index.
    by_command: Box<[AtomicU64]>,
    /// One counter per error [`Kind`], in the order of [`Kind::ALL`].
    errors: [AtomicU64; Kind::ALL.len()],
    /// From a `SET ... NX` request being read to its answer.
    acquire: Latency,
}

impl Counters {
    /// Counters for a command table of `commands` rows.
    pub fn new(commands: usize) -> Counters {
        Counters {
            commands: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            denials: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            locks_repaired: AtomicU64::new(0),
            leases_active: AtomicU64::new(0),
            lease_renewals: AtomicU64::new(0),
            leases_lost: AtomicU64::new(0),
            leases_released: AtomicU64::new(0),
            leases_disconnected: AtomicU64::new(0),
            leases_max: AtomicU64::new(0),
            rollbacks: AtomicU64::new(0),
            by_command: (0..commands).map(|_| AtomicU64::new(0)).collect(),
            errors: Default::default(),
            acquire: Latency::default(),
        }
    }

    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Counts one command, by its index in the command table.
    pub fn count_command(&self, index: usize) {
        if let Some(c) = self.by_command.get(index) {
            Counters::bump(c);
        }
    }

    /// Commands counted so far, by index in the command table.
    pub fn by_command(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_command.iter().map(Counters::get)
    }

    /// Counts an error reply by its kind (its first word, as Redis's `errorstat_*`).
    pub fn count_error(&self, kind: Kind) {
        Counters::bump(&self.errors[kind as usize]);
    }

    /// Error replies counted so far: each kind's label ([`Kind::word`]) with its count, in the
    /// order of [`Kind::ALL`] (`other` last).
    pub fn errors(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Kind::ALL
            .iter()
            .map(|k| k.word())
            .zip(self.errors.iter().map(Counters::get))
    }

    /// Records how long an acquisition took, from the request to the answer.
    pub fn observe_acquire(&self, took: Duration) {
        self.acquire.observe(took);
    }

    /// The acquisition latency histogram.
    pub fn acquire(&self) -> &Latency {
        &self.acquire
    }
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counters")
            .field("commands", &Counters::get(&self.commands))
            .field("grants", &Counters::get(&self.grants))
            .finish_non_exhaustive()
    }
}

/// Upper bounds of the latency buckets, in nanoseconds: 100 µs to 1 s, since masters answer in
/// well under a millisecond on a LAN and anything near `node_timeout_ms` is already a "no".
const LATENCY_BOUNDS_NS: [u64; 13] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// A latency histogram with fixed buckets ([`LATENCY_BOUNDS_NS`] and `+Inf`), observed without a
/// lock: one relaxed add to the bucket and one to the sum. It is observed once per master reply,
/// so it costs a few instructions where a locked, floating-point histogram cost hundreds; a scrape
/// reads the buckets one by one (a reply observed meanwhile may show in the count but not yet in
/// the sum, which Prometheus tolerates).
#[derive(Default)]
pub struct Latency {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    counts: [AtomicU64; LATENCY_BOUNDS_NS.len() + 1],
    /// Sum of every observation, in nanoseconds.
    sum_ns: AtomicU64,
}

impl Latency {
    /// Records one duration.
    pub fn observe(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // The first bucket whose upper bound is at least `ns` (Prometheus's `le`).
        let at = LATENCY_BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.counts[at].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Each bucket's upper bound in seconds (the last is infinite) with its observations (not
    /// cumulative).
    pub fn buckets(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        LATENCY_BOUNDS_NS
            .iter()
            .map(|&ns| ns as f64 / 1e9)
            .chain([f64::INFINITY])
            .zip(self.counts.iter().map(|c| c.load(Ordering::Relaxed)))
    }

    /// The sum of every observation, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

impl fmt::Debug for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latency")
            .field("count", &self.count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_under_their_kinds_label() {
        let c = Counters::new(0);
        c.count_error(Kind::of(b"CLUSTERDOWN redlock-proxy: no quorum"));
        c.count_error(Kind::of(b"NOTBUSY No scripts in execution right now."));
        c.count_error(Kind::of(b"ERR x"));
        let counted: Vec<(&str, u64)> = c.errors().filter(|(_, n)| *n > 0).collect();
        assert_eq!(counted, [("ERR", 1), ("CLUSTERDOWN", 1), ("other", 1)]);
        assert_eq!(c.errors().count(), Kind::ALL.len());
    }
}
