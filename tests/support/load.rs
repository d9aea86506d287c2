//! Load and checkers: many lock clients on a few contended resources, and two independent
//! witnesses of mutual exclusion.
//!
//! Every client loops: `SET resource token NX PX ttl` through a proxy; when granted, it does a
//! read–sleep–write increment of the resource's shared counter (a plain atomic that is only
//! safe under the lock), then releases with the usual compare-and-delete script (or `DELIFEQ`,
//! `DELEX … IFEQ`: see [`Release`]). Tokens are unique per attempt.
//!
//! - The **interval checker** records each grant on the test's monotonic clock, from the moment
//!   the client read `OK` to the earlier of the moment it sent the release and the end of its
//!   validity (`sent + ttl − drift`, counted from before the request left, as a Redlock client
//!   must). Two intervals of one resource that overlap are a double grant.
//! - The **counter checker** compares the increments made with the counter's final value: an
//!   increment lost to an interleaved read–sleep–write is a double grant that did harm. A holder
//!   whose validity ran out before its write skips the write, as a careful client would.
//!
//! [`report`] prints a scenario's figures and keeps them for the README's table.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use super::{Client, UNLOCK};

/// One grant as its holder saw it.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    /// Which resource.
    pub resource: usize,
    /// When the holder read `OK`.
    pub start: Instant,
    /// When it stopped relying on the lock: release sent, or validity over.
    pub end: Instant,
}

/// Records grants and counter updates from every client of a scenario (over any number of
/// proxies).
pub struct Checker {
    grants: Mutex<Vec<Grant>>,
    latencies: Mutex<Vec<Duration>>,
    counters: Vec<AtomicU64>,
    writes: Vec<AtomicU64>,
    /// Prefix of the resource keys.
    pub prefix: String,
}

/// What the checkers found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Grants recorded.
    pub grants: usize,
    /// Grants that began while another grant of the same resource was still held.
    pub overlaps: usize,
    /// Counter increments lost.
    pub lost_updates: u64,
}

impl Verdict {
    /// Overlaps plus lost updates.
    pub fn violations(&self) -> u64 {
        self.overlaps as u64 + self.lost_updates
    }
}

impl Checker {
    /// A checker for `resources` resources named `<prefix>:<i>`.
    pub fn new(prefix: &str, resources: usize) -> Arc<Checker> {
        Arc::new(Checker {
            grants: Mutex::new(Vec::new()),
            latencies: Mutex::new(Vec::new()),
            counters: (0..resources).map(|_| AtomicU64::new(0)).collect(),
            writes: (0..resources).map(|_| AtomicU64::new(0)).collect(),
            prefix: prefix.to_string(),
        })
    }

    /// Key of resource `i`.
    pub fn key(&self, i: usize) -> String {
        format!("{}:{i}", self.prefix)
    }

    /// Number of resources.
    pub fn resources(&self) -> usize {
        self.counters.len()
    }

    fn record(&self, g: Grant, latency: Duration) {
        self.grants.lock().unwrap().push(g);
        self.latencies.lock().unwrap().push(latency);
    }

    /// Every grant so far.
    pub fn grants(&self) -> Vec<Grant> {
        self.grants.lock().unwrap().clone()
    }

    /// Grants that began in `[from, to)`.
    pub fn grants_between(&self, from: Instant, to: Instant) -> usize {
        self.grants()
            .iter()
            .filter(|g| g.start >= from && g.start < to)
            .count()
    }

    /// The first grant of `resource` that began at or after `from`.
    pub fn first_grant_after(&self, resource: usize, from: Instant) -> Option<Instant> {
        self.grants()
            .iter()
            .filter(|g| g.resource == resource && g.start >= from)
            .map(|g| g.start)
            .min()
    }

    /// Median time from sending `SET` to reading `OK`, over all grants.
    pub fn median_grant_latency(&self) -> Duration {
        let mut l = self.latencies.lock().unwrap().clone();
        l.sort();
        l.get(l.len() / 2).copied().unwrap_or_default()
    }

    /// Every grant, per resource, relative to the first (for debugging a scenario).
    pub fn timeline(&self) -> String {
        let mut grants = self.grants();
        grants.sort_by_key(|g| (g.resource, g.start));
        let Some(t0) = grants.iter().map(|g| g.start).min() else {
            return String::new();
        };
        grants
            .iter()
            .map(|g| {
                format!(
                    "r{} {:>6} .. {:>6} ms\n",
                    g.resource,
                    (g.start - t0).as_millis(),
                    (g.end - t0).as_millis()
                )
            })
            .collect()
    }

    /// Runs both checkers over everything recorded.
    pub fn verdict(&self) -> Verdict {
        let mut grants = self.grants();
        grants.sort_by_key(|g| (g.resource, g.start));
        let mut overlaps = 0;
        let mut held_until: Option<(usize, Instant)> = None;
        for g in &grants {
            match held_until {
                Some((r, until)) if r == g.resource => {
                    if g.start < until {
                        overlaps += 1;
                    }
                    held_until = Some((r, until.max(g.end)));
                }
                _ => held_until = Some((g.resource, g.end)),
            }
        }
        let lost_updates = self
            .writes
            .iter()
            .zip(&self.counters)
            .map(|(w, c)| {
                w.load(Ordering::Acquire)
                    .saturating_sub(c.load(Ordering::Acquire))
            })
            .sum();
        Verdict {
            grants: grants.len(),
            overlaps,
            lost_updates,
        }
    }
}

/// Shape of the load.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Concurrent lock clients.
    pub clients: usize,
    /// Lock TTL asked for (ms).
    pub ttl_ms: u64,
    /// How long a holder keeps the lock (ms, uniform in the range).
    pub hold_ms: (u64, u64),
    /// Pause after a refusal (ms, uniform in the range).
    pub retry_ms: (u64, u64),
}

/// How a load's holders release their locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The usual compare-and-delete script, with `EVAL`.
    Script,
    /// `DELIFEQ key token` (Valkey 9.0).
    Delifeq,
    /// `DELEX key IFEQ token` (Redis 8.4).
    DelexIfeq,
    /// Plain `DEL key`, whoever holds it: the unsafe release, for negative controls.
    Del,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            clients: 16,
            ttl_ms: 1000,
            hold_ms: (200, 500),
            retry_ms: (5, 20),
        }
    }
}

/// Proxy addresses the clients use; a slot can be repointed (a restarted proxy).
#[derive(Clone)]
pub struct Targets(Arc<Vec<Mutex<String>>>);

impl Targets {
    /// One slot per address; client `i` uses slot `i % len`.
    pub fn new(addrs: &[String]) -> Targets {
        Targets(Arc::new(
            addrs.iter().map(|a| Mutex::new(a.clone())).collect(),
        ))
    }

    /// Points slot `i` at `addr`.
    pub fn repoint(&self, i: usize, addr: &str) {
        *self.0[i].lock().unwrap() = addr.to_string();
    }

    fn get(&self, client: usize) -> String {
        self.0[client % self.0.len()].lock().unwrap().clone()
    }
}

/// Running lock clients.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `spec.clients` clients recording into `checker`. `name` keeps tokens unique
    /// across several loads on one checker.
    pub fn start(name: &str, checker: Arc<Checker>, targets: Targets, spec: Spec) -> Load {
        Load::start_releasing(name, checker, targets, spec, Release::Script)
    }

    /// [`Load::start`] with holders that release with `release`.
    pub fn start_releasing(
        name: &str,
        checker: Arc<Checker>,
        targets: Targets,
        spec: Spec,
        release: Release,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..spec.clients)
            .map(|i| {
                tokio::spawn(client(
                    format!("{name}-{i}"),
                    i,
                    checker.clone(),
                    targets.clone(),
                    spec.clone(),
                    release,
                    stop.clone(),
                ))
            })
            .collect();
        Load { stop, tasks }
    }

    /// Stops the clients and waits until every holder has released.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// How long a client waits for a reply before it gives up on the connection (proxies die in
/// these tests).
const CALL: Duration = Duration::from_secs(3);

/// The Redlock client's drift allowance, as the proxy computes it.
fn drift(ttl: Duration) -> Duration {
    ttl.mul_f64(0.01) + Duration::from_millis(2)
}

fn between((lo, hi): (u64, u64)) -> Duration {
    Duration::from_millis(rand::random_range(lo..=hi))
}

async fn client(
    name: String,
    slot: usize,
    checker: Arc<Checker>,
    targets: Targets,
    spec: Spec,
    release: Release,
    stop: Arc<AtomicBool>,
) {
    let ttl = Duration::from_millis(spec.ttl_ms);
    let ttl_arg = spec.ttl_ms.to_string();
    let mut conn: Option<Client> = None;
    let mut seq = 0u64;
    while !stop.load(Ordering::Acquire) {
        let Some(c) = conn.as_mut() else {
            conn = timeout(
                Duration::from_secs(1),
                Client::try_connect(&targets.get(slot)),
            )
            .await
            .ok()
            .flatten();
            if conn.is_none() {
                sleep(Duration::from_millis(20)).await;
            }
            continue;
        };
        seq += 1;
        let r = rand::random_range(0..checker.resources());
        let key = checker.key(r);
        let token = format!("{name}-{seq}");
        let sent = Instant::now();
        let reply = c
            .try_cmd(&["SET", &key, &token, "NX", "PX", &ttl_arg], CALL)
            .await;
        match reply {
            Some(rep) if rep.is_ok() => {
                let start = Instant::now();
                let valid_until = sent + ttl - drift(ttl);
                let before = checker.counters[r].load(Ordering::Acquire);
                sleep(between(spec.hold_ms)).await;
                if Instant::now() < valid_until {
                    checker.counters[r].store(before + 1, Ordering::Release);
                    checker.writes[r].fetch_add(1, Ordering::AcqRel);
                }
                let released = Instant::now();
                checker.record(
                    Grant {
                        resource: r,
                        start,
                        end: released.min(valid_until),
                    },
                    start - sent,
                );
                let release: &[&str] = match release {
                    Release::Script => &["EVAL", UNLOCK, "1", &key, &token],
                    Release::Delifeq => &["DELIFEQ", &key, &token],
                    Release::DelexIfeq => &["DELEX", &key, "IFEQ", &token],
                    Release::Del => &["DEL", &key],
                };
                if c.try_cmd(release, CALL).await.is_none() {
                    conn = None;
                }
            }
            Some(_) => sleep(between(spec.retry_ms)).await,
            None => {
                // Connection failed or the reply never came: start over on a new one.
                conn = None;
                sleep(between(spec.retry_ms)).await;
            }
        }
    }
}

/// Prints one scenario's figures and appends them to `fault-report.tsv` in Cargo's test
/// scratch folder (the README's table is made from it).
/// With `RLP_DEBUG` set, also prints the grant timeline.
pub fn report(scenario: &str, protection: &str, faults: usize, checker: &Checker) -> Verdict {
    let v = checker.verdict();
    if std::env::var_os("RLP_DEBUG").is_some() {
        eprintln!("{scenario} ({protection}):\n{}", checker.timeline());
    }
    let line = format!(
        "{scenario}\t{protection}\t{}\t{faults}\t{}\t{}",
        v.grants, v.overlaps, v.lost_updates
    );
    println!(
        "FAULTS scenario={scenario} protection={protection} grants={} faults={faults} overlaps={} lost_updates={}",
        v.grants, v.overlaps, v.lost_updates
    );
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-report.tsv");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
    v
}
