//! Prometheus metrics at `http://metrics_listen/metrics`, in the OpenMetrics text format
//! written by the `prometheus-client` crate.
//!
//! The one counter store ([`Counters`], read by `INFO` too) and each master's [`MasterInfo`]
//! are the source of truth: a collector reads them on every scrape, so the hot path pays
//! nothing extra and `INFO` and `/metrics` always agree. The per-master reply latency and the
//! acquisition latency are histograms ([`Latency`]) observed as replies arrive.
//!
//! Families (all prefixed `redlock_`; counters end in `_total`, durations in `_seconds`):
//! - `redlock_locks_total{outcome}`: `granted`, `denied`, `rolled_back`, `released`;
//!   `redlock_locks_repaired_total` (locks written back to trusted members that lacked them
//!   after a granted extension or renewal: quorum repair);
//! - `redlock_commands_total`, and `redlock_commands_by_name_total{command}`;
//!   `redlock_errors_total{kind}` (error replies by their kind, the first word, as
//!   Redis's `errorstat_*`); `redlock_acquire_seconds` (from a `SET ... NX` request being read to its
//!   answer); `redlock_client_connections` (open) and
//!   `redlock_client_connections_accepted_total`;
//! - per master (`master="host:port"`): `redlock_master_up`, `_trusted`, `_quarantined`,
//!   `_clock_suspect` (0 or 1), `redlock_master_restarts_total`, `_clock_jumps_total`,
//!   `_reconnects_total`, `_request_timeouts_total`, and `redlock_master_reply_seconds`;
//! - Sentinel members under the majority rule: `redlock_sentinel_confirmations`,
//!   `redlock_sentinels`, `redlock_sentinel_confirmed` (see `INFO`'s `sentinels_confirming`);
//! - leases: `redlock_leases` (running), `redlock_lease_renewals_total`,
//!   `redlock_lease_renewal_failures_total`, `redlock_leases_lost_total`,
//!   `redlock_leases_ended_total{reason}` (`released`,
//!   `disconnected`, `max`).
//!
//! The HTTP side is hyper's HTTP/1.1 server, one request per connection: `GET` (or `HEAD`)
//! `/metrics`, and the health probes `/healthz` (the process serves: always 200) and
//! `/readyz` (200 when a quorum of masters can vote, so a lock can be granted; 503 with the
//! reason otherwise, and while shutting down). `route` has one arm per path.

use std::convert::Infallible;
use std::fmt;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONNECTION, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Timeout;
use tracing::{debug, warn};

use crate::backend::{MasterInfo, Status};
use crate::command::TABLE;
use crate::counters::{Counters, Latency};
use crate::proxy::Proxy;
use crate::quorum::Masters;

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let buckets: Vec<(f64, u64)> = self.buckets().collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        encoder.encode_histogram::<NoLabelSet>(self.sum_seconds(), count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Reads the proxy's counters on each scrape.
struct ProxyCollector(Arc<Proxy>);

impl fmt::Debug for ProxyCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyCollector")
    }
}

fn counter(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    ConstCounter::new(value).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// A counter family with one label: a sample per value of `label`, with its count.
fn counter_by<'a>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &str,
    samples: impl IntoIterator<Item = (&'a str, u64)>,
) -> Result<(), fmt::Error> {
    let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in samples {
        ConstCounter::new(n).encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

/// One family with a sample per master.
fn per_master<M: EncodeMetric>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    masters: &[&MasterInfo],
    metric: impl Fn(&MasterInfo) -> M,
) -> Result<(), fmt::Error> {
    let mut family = e.encode_descriptor(name, help, unit, kind)?;
    for m in masters {
        let labels = [("master", m.addr.as_str())];
        metric(m).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for ProxyCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), fmt::Error> {
        let p = &self.0;
        proxy_families(&mut e, p)?;
        let snapshot = p.masters();
        let masters: Vec<&MasterInfo> = snapshot.iter().map(|b| b.info()).collect();
        master_families(&mut e, &snapshot, &masters)?;
        sentinel_and_history_families(&mut e, &masters)
    }
}

/// The proxy's own families: lock outcomes, repairs, leases, commands, errors, clients.
fn proxy_families(e: &mut DescriptorEncoder, p: &Proxy) -> Result<(), fmt::Error> {
    let s = p.counters();
    counter_by(
        e,
        "redlock_locks",
        "Lock operations by outcome: granted, denied, rolled_back (a refusal undone on \
         the masters), released.",
        "outcome",
        [
            ("granted", &s.grants),
            ("denied", &s.denials),
            ("rolled_back", &s.rollbacks),
            ("released", &s.releases),
        ]
        .map(|(outcome, c)| (outcome, Counters::get(c))),
    )?;
    counter(
        e,
        "redlock_locks_repaired",
        "Locks written back (SET NX with the validity left) to trusted members that lacked \
         them, after an extension or lease renewal a quorum granted.",
        Counters::get(&s.locks_repaired),
    )?;
    counter(
        e,
        "redlock_commands",
        "Client commands processed.",
        Counters::get(&s.commands),
    )?;
    counter_by(
        e,
        "redlock_commands_by_name",
        "Client commands processed, by command (unknown commands not counted).",
        "command",
        TABLE.iter().map(|spec| spec.name).zip(s.by_command()),
    )?;
    counter_by(
        e,
        "redlock_errors",
        "Error replies sent to clients, by kind (the error's first word).",
        "kind",
        s.errors(),
    )?;
    s.acquire().encode(e.encode_descriptor(
        "redlock_acquire",
        "Time from reading a SET ... NX request to its answer.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?)?;
    ConstGauge::new(Counters::get(&s.leases_active) as i64).encode(e.encode_descriptor(
        "redlock_leases",
        "Leases running: locks the proxy renews while their holder's connection stays open.",
        None,
        MetricType::Gauge,
    )?)?;
    counter(
        e,
        "redlock_lease_renewals",
        "Lease renewals a quorum of masters granted.",
        Counters::get(&s.lease_renewals),
    )?;
    counter(
        e,
        "redlock_lease_renewal_failures",
        "Runs of failed lease renewals, told while the lock was still valid.",
        Counters::get(&s.lease_renewal_failures),
    )?;
    counter(
        e,
        "redlock_leases_lost",
        "Leases lost: no renewal reached a quorum within validity.",
        Counters::get(&s.leases_lost),
    )?;
    counter_by(
        e,
        "redlock_leases_ended",
        "Leases ended other than by a loss, by reason: released, disconnected, max.",
        "reason",
        [
            ("released", &s.leases_released),
            ("disconnected", &s.leases_disconnected),
            ("max", &s.leases_max),
        ]
        .map(|(reason, c)| (reason, Counters::get(c))),
    )?;
    ConstGauge::new(p.clients() as i64).encode(e.encode_descriptor(
        "redlock_client_connections",
        "Client connections open.",
        None,
        MetricType::Gauge,
    )?)?;
    counter(
        e,
        "redlock_client_connections_accepted",
        "Client connections accepted.",
        p.clients_total(),
    )?;
    Ok(())
}

/// Each master's state now: up, trusted, quarantined and why, its info, a cluster member's shards.
fn master_families(
    e: &mut DescriptorEncoder,
    snapshot: &Masters,
    masters: &[&MasterInfo],
) -> Result<(), fmt::Error> {
    let gauge = MetricType::Gauge;
    let flag = |b: bool| ConstGauge::new(i64::from(b));
    per_master(
        e,
        "redlock_master_up",
        "1 when the master is connected (and, for a Sentinel member under the majority rule, \
         its primary confirmed by a majority of its Sentinels).",
        None,
        gauge,
        masters,
        |m| flag(m.is_connected() && m.is_confirmed()),
    )?;
    per_master(
        e,
        "redlock_master_trusted",
        "1 when the master's replies count as votes.",
        None,
        gauge,
        masters,
        |m| flag(m.is_trusted()),
    )?;
    per_master(
        e,
        "redlock_master_quarantined",
        "1 while the master sits out a quarantine (restart, young, failover or new-member; \
         see redlock_master_info's quarantine_reason).",
        None,
        gauge,
        masters,
        |m| flag(m.status() == Status::Quarantined),
    )?;
    {
        let mut family = e.encode_descriptor(
            "redlock_master_quarantine_reason",
            "1 for each quarantined master, labelled with why: restart (it restarted), \
             young (it started recently and may have lost locks), failover (a new primary) or \
             new-member (just added to the set).",
            None,
            gauge,
        )?;
        for m in masters
            .iter()
            .filter(|m| !m.quarantine_left().is_zero() && !m.is_duplicate())
        {
            {
                let reason = m.quarantine_reason();
                let labels = [("master", m.addr.as_str()), ("reason", reason.as_str())];
                flag(true).encode(family.encode_family(&labels)?)?;
            }
        }
    }
    {
        let mut family = e.encode_descriptor(
            "redlock_master_duplicate",
            "1 for each member that reaches the same Redis server (run_id) as another member, \
             labelled with that member (of): the server votes through that one only, and \
             this one is sent nothing.",
            None,
            gauge,
        )?;
        for m in masters.iter().filter(|m| m.is_duplicate()) {
            let of = m.duplicate_of();
            let labels = [("master", m.addr.as_str()), ("of", of.as_str())];
            flag(true).encode(family.encode_family(&labels)?)?;
        }
    }
    {
        let mut family = e.encode_descriptor(
            "redlock_master_member",
            "1 for each master, labelled with the set it belongs to: current, or during a \
             change of members old, new or both.",
            None,
            gauge,
        )?;
        for (i, m) in masters.iter().enumerate() {
            let side = snapshot.rule().side(i).unwrap_or("current");
            let labels = [("master", m.addr.as_str()), ("member", side)];
            flag(true).encode(family.encode_family(&labels)?)?;
        }
    }
    ConstGauge::new(i64::from(snapshot.rule().is_joint())).encode(e.encode_descriptor(
        "redlock_membership_transition",
        "1 while a change of members is in its transition (a grant needs a quorum of the \
         old members and one of the new).",
        None,
        MetricType::Gauge,
    )?)?;
    per_master(
        e,
        "redlock_master_clock_suspect",
        "1 while the master's clock is not trusted.",
        None,
        gauge,
        masters,
        |m| flag(m.status() == Status::ClockSuspect),
    )?;
    member_kind_families(e, snapshot)
}

/// Each member's kind, and a Cluster member's shards: their primaries, health and quarantines.
fn member_kind_families(e: &mut DescriptorEncoder, snapshot: &Masters) -> Result<(), fmt::Error> {
    let gauge = MetricType::Gauge;
    let flag = |b: bool| ConstGauge::new(i64::from(b));
    {
        let mut kinds = e.encode_descriptor(
            "redlock_master_kind",
            "1 for each member, labelled with its kind: standalone, sentinel, or cluster (a Redis \
             Cluster whose shards have their own series below).",
            None,
            MetricType::Gauge,
        )?;
        for b in snapshot.iter() {
            let labels = [("master", b.info().addr.as_str()), ("kind", b.kind())];
            ConstGauge::new(1).encode(kinds.encode_family(&labels)?)?;
        }
    }
    let shards: Vec<(String, crate::backend::router::ShardView)> = snapshot
        .iter()
        .flat_map(|b| {
            let member = b.info().addr.clone();
            b.shards().into_iter().map(move |s| (member.clone(), s))
        })
        .collect();
    for (name, help, value) in [
        (
            "redlock_shard_up",
            "1 when a cluster member's shard primary is connected (labels: member, primary, \
             slots).",
            (|s| s.info.is_connected()) as fn(&crate::backend::router::ShardView) -> bool,
        ),
        (
            "redlock_shard_trusted",
            "1 when a cluster member's shard primary's replies count as votes.",
            |s| s.info.is_trusted(),
        ),
    ] {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (member, s) in &shards {
            let labels = [
                ("master", member.as_str()),
                ("primary", s.primary.as_str()),
                ("slots", s.slots.as_str()),
            ];
            flag(value(s)).encode(family.encode_family(&labels)?)?;
        }
    }
    {
        let mut family = e.encode_descriptor(
            "redlock_shard_quarantined",
            "1 while a cluster member's shard primary sits out a quarantine, labelled with \
             why (a promoted replica, a restart, a recent start).",
            None,
            MetricType::Gauge,
        )?;
        for (member, s) in &shards {
            let reason = s.quarantine_reason.as_deref().unwrap_or("");
            let labels = [
                ("master", member.as_str()),
                ("primary", s.primary.as_str()),
                ("reason", reason),
            ];
            flag(s.quarantine_reason.is_some()).encode(family.encode_family(&labels)?)?;
        }
    }
    {
        let mut family = e.encode_descriptor(
            "redlock_master_info",
            "Always 1: the member's kind (standalone, sentinel, cluster), the data node serving it \
             (primary) and why its votes do not count now (quarantine_reason: restart, young, \
             failover, new-member, clock, or duplicate of member <name>; empty when they count).",
            None,
            gauge,
        )?;
        for b in snapshot.iter() {
            let m = b.info();
            let primary = m.primary();
            let reason = m.quarantine_reason();
            let labels = [
                ("master", m.addr.as_str()),
                ("kind", b.kind()),
                ("primary", primary.as_str()),
                ("quarantine_reason", reason.as_str()),
            ];
            ConstGauge::new(1i64).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Sentinel members' confirmations, and each master's history: failovers, restarts, clock jumps,
/// reconnects, timeouts, reply latency.
fn sentinel_and_history_families(
    e: &mut DescriptorEncoder,
    masters: &[&MasterInfo],
) -> Result<(), fmt::Error> {
    let gauge = MetricType::Gauge;
    // Sentinel members under the majority rule (`sentinel_majority`).
    let majority: Vec<(&MasterInfo, (usize, usize))> = masters
        .iter()
        .filter_map(|m| m.confirmations().map(|c| (*m, c)))
        .collect();
    for (name, help, value) in [
        (
            "redlock_sentinel_confirmations",
            "Sentinel members: how many of the configured Sentinels named the primary at the \
             newest config epoch in the last round of questions (a majority, floor(S/2)+1, \
             confirms it).",
            (|_, (votes, _)| votes as i64) as fn(&MasterInfo, (usize, usize)) -> i64,
        ),
        (
            "redlock_sentinels",
            "Sentinel members: how many Sentinels are configured (S).",
            |_, (_, of)| of as i64,
        ),
        (
            "redlock_sentinel_confirmed",
            "Sentinel members: 1 while a majority of the configured Sentinels has confirmed \
             the primary within the confirmation bound; 0 makes the member down.",
            |m, _| i64::from(m.is_confirmed()),
        ),
    ] {
        let mut family = e.encode_descriptor(name, help, None, gauge)?;
        for (m, c) in &majority {
            let labels = [("master", m.addr.as_str())];
            ConstGauge::new(value(m, *c)).encode(family.encode_family(&labels)?)?;
        }
    }
    let count = MetricType::Counter;
    per_master(
        e,
        "redlock_master_failovers",
        "Primaries replaced (Sentinel members: another address or run_id).",
        None,
        count,
        masters,
        |m| ConstCounter::new(m.failovers()),
    )?;
    per_master(
        e,
        "redlock_master_restarts",
        "Restarts seen (run_id changed).",
        None,
        count,
        masters,
        |m| ConstCounter::new(m.restarts()),
    )?;
    per_master(
        e,
        "redlock_master_clock_jumps",
        "Clock jumps seen.",
        None,
        count,
        masters,
        |m| ConstCounter::new(m.clock_jumps()),
    )?;
    per_master(
        e,
        "redlock_master_reconnects",
        "Connections opened after the first.",
        None,
        count,
        masters,
        |m| ConstCounter::new(m.reconnects()),
    )?;
    per_master(
        e,
        "redlock_master_request_timeouts",
        "Connections dropped because a request went unanswered for stall_timeout_ms.",
        None,
        count,
        masters,
        |m| ConstCounter::new(m.timeouts()),
    )?;
    let mut family = e.encode_descriptor(
        "redlock_master_reply",
        "Time from writing a request to a master to its reply.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for m in masters {
        let labels = [("master", m.addr.as_str())];
        m.latency().encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The registry of every family, for one proxy.
pub fn registry(proxy: Arc<Proxy>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(ProxyCollector(proxy)));
    r
}

/// The OpenMetrics text Prometheus scrapes.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}

/// The same samples in the classic Prometheus text format (0.0.4), for readers that do not ask
/// for OpenMetrics (`promtool check metrics`, curl). The two differ only in framing: a counter
/// family is named after its `_total` samples, and there are no `# UNIT` or `# EOF` lines.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let name = if kind == "counter" && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// How many connections are served at once; past it, new ones wait in the listen backlog.
/// Prometheus needs one per scrape; the room is for clients that connect and say nothing,
/// each of which holds a slot (a task and at most `MAX_HEAD` bytes) for `HEAD_TIMEOUT`, so
/// that a handful of them cannot make a scrape wait.
const MAX_CONNECTIONS: usize = 256;

/// How long a client may take to send its request head; an idle connection is closed then.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one connection may last in all, so that a scraper that reads its answer slowly
/// cannot hold a task and a rendered body for ever.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);

/// Largest request head read (hyper's least read buffer); Prometheus sends a few hundred bytes.
const MAX_HEAD: usize = 8192;

/// Serves `/metrics` on `listener` until the task is dropped.
///
/// HTTP/1.1 by hyper, one request per connection (`Connection: close`), as many connections at
/// once as `MAX_CONNECTIONS`, each for at most `CONNECTION_DEADLINE`.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    let site = Arc::new(Site::of(proxy));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let http = builder();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return; // closed, which it never is
        };
        let (socket, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                // Out of descriptors, say: retrying at once would spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let conn = connection(&http, socket, site.clone());
        tokio::spawn(async move {
            match conn.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(error = %e, peer = %peer, "metrics request failed"),
                Err(_) => debug!(peer = %peer, "metrics connection timed out"),
            }
            drop(slot);
        });
    }
}

/// hyper's HTTP/1.1 server, bounded: the request head must come within `HEAD_TIMEOUT` (an idle
/// connection is closed then) and within `MAX_HEAD` bytes, and there is one request per
/// connection.
fn builder() -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .keep_alive(false)
        // A client may shut its side once it has sent the request (`nc -N`, and some
        // netcats by default); without this, hyper drops it unanswered when the EOF
        // comes before the answer is written.
        .half_close(true)
        .title_case_headers(true);
    http
}

/// Serves one connection until hyper closes it, or fails with `Elapsed` at
/// `CONNECTION_DEADLINE`.
fn connection<T>(
    http: &http1::Builder,
    io: T,
    site: Arc<Site>,
) -> Timeout<http1::Connection<TokioIo<T>, Routes>>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let conn = http.serve_connection(TokioIo::new(io), Routes(site));
    tokio::time::timeout(CONNECTION_DEADLINE, conn)
}

/// Whether the proxy can grant locks now: `Err` says why not.
type Readiness = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the endpoint serves: the metrics, and the readiness the health probes read.
pub struct Site {
    registry: Registry,
    ready: Readiness,
}

impl Site {
    /// The endpoint of `proxy`.
    pub fn of(proxy: Arc<Proxy>) -> Site {
        let registry = registry(proxy.clone());
        let ready = Box::new(move || readiness(&proxy));
        Site { registry, ready }
    }
}

/// Ready when a quorum of masters can vote (connected, out of quarantine, clock trusted), so a
/// lock can be granted; not while the proxy shuts down.
fn readiness(proxy: &Proxy) -> Result<(), String> {
    if proxy.shutdown().is_cancelled() {
        return Err("shutting down".into());
    }
    let masters = proxy.masters();
    let voting = masters.iter().filter(|m| m.is_trusted()).count();
    if masters.quorum_trusted() {
        Ok(())
    } else if masters.rule().is_joint() {
        Err(format!(
            "{voting} of {} masters can vote: a quorum of the old members and one of the new \
             are needed while the member set changes",
            masters.len()
        ))
    } else {
        Err(format!(
            "{voting} of {} masters can vote, {} needed",
            masters.len(),
            masters.rule().size()
        ))
    }
}

/// The paths served, as a hyper service: every answer is ready at once.
struct Routes(Arc<Site>);

impl Service<Request<Incoming>> for Routes {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        ready(Ok(route(&req, &self.0)))
    }
}

/// The answer to one request: the method first, then one arm per path.
fn route<B>(req: &Request<B>, site: &Site) -> Response<String> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => metrics(req, &site.registry),
        // Liveness: the process serves.
        "/healthz" => plain(StatusCode::OK, "ok\n"),
        // Readiness: it can grant locks.
        "/readyz" => match (site.ready)() {
            Ok(()) => plain(StatusCode::OK, "ready\n"),
            Err(why) => answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                format!("not ready: {why}\n"),
            ),
        },
        _ => plain(
            StatusCode::NOT_FOUND,
            "metrics are at /metrics, health at /healthz and /readyz\n",
        ),
    }
}

/// The media type Prometheus puts in `Accept` when it can read OpenMetrics.
const OPENMETRICS: &str = "application/openmetrics-text";

/// `GET /metrics`: OpenMetrics for a client that asks for it (Prometheus), the classic text
/// format for everyone else. hyper leaves the body out of an answer to `HEAD`.
fn metrics<B>(req: &Request<B>, registry: &Registry) -> Response<String> {
    let openmetrics = req.headers().get_all(ACCEPT).iter().any(|v| {
        v.as_bytes()
            .windows(OPENMETRICS.len())
            .any(|w| w.eq_ignore_ascii_case(OPENMETRICS.as_bytes()))
    });
    let (kind, body) = if openmetrics {
        (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(registry),
        )
    } else {
        (
            "text/plain; version=0.0.4; charset=utf-8",
            classic(&render(registry)),
        )
    };
    answer(StatusCode::OK, kind, body)
}

fn plain(status: StatusCode, body: &'static str) -> Response<String> {
    answer(status, "text/plain", body.to_string())
}

fn answer(status: StatusCode, kind: &'static str, body: String) -> Response<String> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    // hyper closes the connection anyway (keep-alive is off), but says so only to HTTP/1.1.
    h.insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn latency_buckets_are_upper_bounds_and_render_cumulatively() {
        let l = Latency::default();
        // On a bound, just above it, below the first bound, and past the last.
        l.observe(Duration::from_micros(100));
        l.observe(Duration::from_micros(101));
        l.observe(Duration::from_nanos(5));
        l.observe(Duration::from_secs(3));
        assert_eq!(l.count(), 4);
        let mut r = Registry::default();
        r.register("lat", "Latency.", l);
        let text = render(&r);
        for line in [
            "lat_bucket{le=\"0.0001\"} 2\n",
            "lat_bucket{le=\"0.00025\"} 3\n",
            "lat_bucket{le=\"1.0\"} 3\n",
            "lat_bucket{le=\"+Inf\"} 4\n",
            "lat_count 4\n",
            "lat_sum 3.000201005\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from {text}");
        }
    }

    #[test]
    fn the_classic_format_names_counters_after_their_samples() {
        let om = "# HELP redlock_locks Locks.\n# TYPE redlock_locks counter\n\
                  redlock_locks_total{outcome=\"granted\"} 1\n\
                  # HELP redlock_master_reply_seconds Time.\n# TYPE redlock_master_reply_seconds histogram\n\
                  # UNIT redlock_master_reply_seconds seconds\n\
                  redlock_master_reply_seconds_count 0\n# EOF\n";
        assert_eq!(
            classic(om),
            "# HELP redlock_locks_total Locks.\n# TYPE redlock_locks_total counter\n\
             redlock_locks_total{outcome=\"granted\"} 1\n\
             # HELP redlock_master_reply_seconds Time.\n# TYPE redlock_master_reply_seconds histogram\n\
             redlock_master_reply_seconds_count 0\n"
        );
    }
    /// A registry with one histogram, so that `/metrics` has something to say.
    fn small_registry() -> Arc<Site> {
        let mut r = Registry::default();
        r.register("lat", "Latency.", Latency::default());
        Arc::new(Site {
            registry: r,
            ready: Box::new(|| Ok(())),
        })
    }

    /// Sends `request` to one connection over a duplex pipe of `room` bytes; returns all it
    /// answered and how the connection ended.
    async fn exchange(request: &[u8], room: usize) -> (String, Result<(), String>) {
        let (mut client, server) = tokio::io::duplex(room);
        let conn = tokio::spawn(connection(&builder(), server, small_registry()));
        client.write_all(request).await.expect("write");
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.expect("read");
        let ended = match conn.await.expect("join") {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("deadline".to_string()),
        };
        (String::from_utf8_lossy(&out).into_owned(), ended)
    }

    fn head_of(answer: &str) -> &str {
        answer.split_once("\r\n\r\n").map_or(answer, |(h, _)| h)
    }

    fn body_of(answer: &str) -> &str {
        answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
    }

    #[tokio::test]
    async fn get_metrics_answers_the_classic_format_to_1_0_and_1_1_clients() {
        for version in ["1.0", "1.1"] {
            let request = format!("GET /metrics?x=1 HTTP/{version}\r\nHost: a\r\n\r\n");
            let (answer, ended) = exchange(request.as_bytes(), 64).await;
            assert_eq!(ended, Ok(()));
            let head = head_of(&answer);
            assert!(
                head.starts_with(&format!("HTTP/{version} 200 OK\r\n")),
                "{answer}"
            );
            assert!(
                head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
                "{answer}"
            );
            assert!(head.contains("\r\nConnection: close\r\n"), "{answer}");
            let body = body_of(&answer);
            assert!(head.contains(&format!("\r\nContent-Length: {}", body.len())));
            assert!(body.starts_with("# HELP lat Latency"), "{body}");
            assert!(body.contains("\nlat_count 0\n"), "{body}");
            assert!(!body.contains("# EOF"), "{body}");
        }
    }

    #[tokio::test]
    async fn a_client_that_shuts_its_side_after_the_request_still_gets_the_answer() {
        for _ in 0..20 {
            let (mut client, server) = tokio::io::duplex(1024);
            let conn = tokio::spawn(connection(&builder(), server, small_registry()));
            client
                .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
                .await
                .expect("write");
            client.shutdown().await.expect("shutdown");
            let mut out = Vec::new();
            client.read_to_end(&mut out).await.expect("read");
            let answer = String::from_utf8_lossy(&out);
            assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
            assert!(matches!(conn.await, Ok(Ok(Ok(())))));
        }
    }

    #[tokio::test]
    async fn prometheus_asking_for_openmetrics_gets_it() {
        let (answer, _) = exchange(
            b"GET /metrics HTTP/1.1\r\nAccept: Application/OpenMetrics-Text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
            1024,
        )
        .await;
        assert!(
            head_of(&answer).contains(
                "\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"
            ),
            "{answer}"
        );
        assert!(body_of(&answer).ends_with("# EOF\n"), "{answer}");
    }

    #[tokio::test]
    async fn head_gets_the_length_without_the_body() {
        let (get, _) = exchange(b"GET /metrics HTTP/1.1\r\n\r\n", 1024).await;
        let (head, _) = exchange(b"HEAD /metrics HTTP/1.1\r\n\r\n", 1024).await;
        let length = format!("Content-Length: {}\r\n", body_of(&get).len());
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains(&length), "{length:?} in {head}");
        assert_eq!(body_of(&head), "");
    }

    #[tokio::test]
    async fn other_methods_paths_and_garbage_are_refused() {
        for (request, status, body) in [
            (
                &b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"[..],
                "HTTP/1.1 405 Method Not Allowed\r\n",
                "GET only\n",
            ),
            (
                b"POST /other HTTP/1.0\r\n\r\n",
                "HTTP/1.0 405 Method Not Allowed\r\n",
                "GET only\n",
            ),
            (
                b"GET /other HTTP/1.1\r\n\r\n",
                "HTTP/1.1 404 Not Found\r\n",
                "metrics are at /metrics, health at /healthz and /readyz\n",
            ),
            (
                b"GET /metricsx HTTP/1.0\r\n\r\n",
                "HTTP/1.0 404 Not Found\r\n",
                "metrics are at /metrics, health at /healthz and /readyz\n",
            ),
            (b"garbage\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n", ""),
            (
                b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
                "HTTP/1.1 400 Bad Request\r\n",
                "",
            ),
        ] {
            let (answer, _) = exchange(request, 1024).await;
            assert!(answer.starts_with(status), "{status:?}: {answer}");
            assert_eq!(body_of(&answer), body, "{answer}");
            if status.contains("405") {
                assert!(answer.contains("\r\nAllow: GET, HEAD\r\n"), "{answer}");
            }
        }
    }

    #[tokio::test]
    async fn a_head_past_the_limit_is_refused_without_being_kept() {
        let mut request = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        request.resize(4 * MAX_HEAD, b'a');
        let (answer, ended) = exchange(&request, 64 * MAX_HEAD).await;
        assert!(
            answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{answer}"
        );
        assert!(ended.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_or_slow_client_is_dropped_after_the_head_timeout() {
        let start = tokio::time::Instant::now();
        // Nothing at all, then half a head.
        for request in byte_strings![b"", b"GET /metrics HTTP/1.1\r\nHost"] {
            let (answer, ended) = exchange(request, 1024).await;
            assert_eq!(answer, "");
            assert!(ended.is_err(), "{ended:?}");
        }
        assert!(start.elapsed() >= 2 * HEAD_TIMEOUT);
        assert!(start.elapsed() < CONNECTION_DEADLINE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_does_not_read_its_answer_is_dropped_at_the_deadline() {
        let (mut client, server) = tokio::io::duplex(16);
        let conn = tokio::spawn(connection(&builder(), server, small_registry()));
        client
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let start = tokio::time::Instant::now();
        assert!(conn.await.expect("join").is_err(), "the deadline ends it");
        assert!(start.elapsed() >= CONNECTION_DEADLINE);
    }

    #[tokio::test]
    async fn health_probes_answer_whether_the_proxy_serves_and_can_grant() {
        let (answer, _) = exchange(b"GET /healthz HTTP/1.1\r\n\r\n", 1024).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert_eq!(body_of(&answer), "ok\n");
        let (answer, _) = exchange(b"GET /readyz HTTP/1.1\r\n\r\n", 1024).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert_eq!(body_of(&answer), "ready\n");
        let unready = Arc::new(Site {
            registry: Registry::default(),
            ready: Box::new(|| Err("1 of 3 masters can vote, 2 needed".into())),
        });
        let (mut client, server) = tokio::io::duplex(1024);
        let conn = tokio::spawn(connection(&builder(), server, unready));
        client
            .write_all(b"GET /readyz HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.expect("read");
        let answer = String::from_utf8_lossy(&out);
        assert!(
            answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{answer}"
        );
        assert_eq!(
            body_of(&answer),
            "not ready: 1 of 3 masters can vote, 2 needed\n"
        );
        assert!(matches!(conn.await, Ok(Ok(Ok(())))));
    }
}
