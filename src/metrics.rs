//! Prometheus metrics at `http://metrics_listen/metrics`, in the OpenMetrics text format
//! written by the `prometheus-client` crate.
//!
//! The counters the proxy already keeps for `INFO` (in [`Stats`], in each
//! master's [`MasterInfo`]) are the source of truth: a collector reads them on every scrape, so
//! the hot path pays nothing extra and `INFO` and `/metrics` always agree. Only the per-master
//! reply latency is a histogram observed as replies arrive; the few figures `INFO` does not
//! keep (commands by name, errors by kind, acquisition latency) live in [`Live`].
//!
//! Families (all prefixed `redlock_`; counters end in `_total`, durations in `_seconds`):
//! - `redlock_locks_total{outcome}`: `granted`, `denied`, `rolled_back`, `released`;
//! - `redlock_commands_total`, and `redlock_commands_by_name_total{command}`;
//!   `redlock_errors_total{kind}` (error replies by their first word, as Redis's
//!   `errorstat_*`); `redlock_acquire_seconds` (from a `SET ... NX` request being read to its
//!   answer); `redlock_client_connections` (open) and
//!   `redlock_client_connections_accepted_total`;
//! - per master (`master="host:port"`): `redlock_master_up`, `_trusted`, `_quarantined`,
//!   `_clock_suspect` (0 or 1), `redlock_master_restarts_total`, `_clock_jumps_total`,
//!   `_reconnects_total`, `_request_timeouts_total`, and `redlock_master_reply_seconds`.
//!
//! The HTTP side is the least that Prometheus needs: `GET /metrics` over HTTP/1.1, one request
//! per connection.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use crate::backend::{MasterInfo, Status};
use crate::command::TABLE;
use crate::counters::{Counters, Latency};
use crate::proxy::Proxy;

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
        let s = p.counters();
        {
            let mut locks = e.encode_descriptor(
                "redlock_locks",
                "Lock operations by outcome: granted, denied, rolled_back (a refusal undone on \
                 the masters), released.",
                None,
                MetricType::Counter,
            )?;
            for (outcome, c) in [
                ("granted", &s.grants),
                ("denied", &s.denials),
                ("rolled_back", &s.rollbacks),
                ("released", &s.releases),
            ] {
                let labels = [("outcome", outcome)];
                ConstCounter::new(Counters::get(c)).encode(locks.encode_family(&labels)?)?;
            }
        }
        counter(
            &mut e,
            "redlock_commands",
            "Client commands processed.",
            Counters::get(&s.commands),
        )?;
        {
            let mut family = e.encode_descriptor(
                "redlock_commands_by_name",
                "Client commands processed, by command (unknown commands not counted).",
                None,
                MetricType::Counter,
            )?;
            for (spec, n) in TABLE.iter().zip(s.by_command()) {
                let labels = [("command", spec.name)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = e.encode_descriptor(
                "redlock_errors",
                "Error replies sent to clients, by kind (the error's first word).",
                None,
                MetricType::Counter,
            )?;
            for (kind, n) in s.errors() {
                let labels = [("kind", kind)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        s.acquire().encode(e.encode_descriptor(
            "redlock_acquire",
            "Time from reading a SET ... NX request to its answer.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?)?;
        ConstGauge::new(p.clients() as i64).encode(e.encode_descriptor(
            "redlock_client_connections",
            "Client connections open.",
            None,
            MetricType::Gauge,
        )?)?;
        counter(
            &mut e,
            "redlock_client_connections_accepted",
            "Client connections accepted.",
            p.clients_total(),
        )?;
        let masters: Vec<&MasterInfo> = p.masters().iter().map(|b| b.info()).collect();
        let gauge = MetricType::Gauge;
        let flag = |b: bool| ConstGauge::new(i64::from(b));
        per_master(
            &mut e,
            "redlock_master_up",
            "1 when the master is connected.",
            None,
            gauge,
            &masters,
            |m| flag(m.is_connected()),
        )?;
        per_master(
            &mut e,
            "redlock_master_trusted",
            "1 when the master's replies count as votes.",
            None,
            gauge,
            &masters,
            |m| flag(m.is_trusted()),
        )?;
        per_master(
            &mut e,
            "redlock_master_quarantined",
            "1 while the master sits out a restart quarantine.",
            None,
            gauge,
            &masters,
            |m| flag(m.status() == Status::Quarantined),
        )?;
        per_master(
            &mut e,
            "redlock_master_clock_suspect",
            "1 while the master's clock is not trusted.",
            None,
            gauge,
            &masters,
            |m| flag(m.status() == Status::ClockSuspect),
        )?;
        let count = MetricType::Counter;
        per_master(
            &mut e,
            "redlock_master_restarts",
            "Restarts seen (run_id changed).",
            None,
            count,
            &masters,
            |m| ConstCounter::new(m.restarts()),
        )?;
        per_master(
            &mut e,
            "redlock_master_clock_jumps",
            "Clock jumps seen.",
            None,
            count,
            &masters,
            |m| ConstCounter::new(m.clock_jumps()),
        )?;
        per_master(
            &mut e,
            "redlock_master_reconnects",
            "Connections opened after the first.",
            None,
            count,
            &masters,
            |m| ConstCounter::new(m.reconnects()),
        )?;
        per_master(
            &mut e,
            "redlock_master_request_timeouts",
            "Connections dropped because a request went unanswered for stall_timeout_ms.",
            None,
            count,
            &masters,
            |m| ConstCounter::new(m.timeouts()),
        )?;
        let mut family = e.encode_descriptor(
            "redlock_master_reply",
            "Time from writing a request to a master to its reply.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for m in &masters {
            let labels = [("master", m.addr.as_str())];
            m.latency().encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
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

/// Serves `/metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    let registry = Arc::new(registry(proxy));
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(socket, &registry).await {
                debug!(error = %e, peer = %peer, "metrics request failed");
            }
        });
    }
}

/// The media type Prometheus puts in `Accept` when it can read OpenMetrics.
const OPENMETRICS: &str = "application/openmetrics-text";

/// Largest request head read; Prometheus sends a few hundred bytes.
const MAX_HEAD: usize = 8192;

async fn answer(mut socket: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() >= MAX_HEAD || socket.read_buf(&mut head).await? == 0 {
                return Ok::<_, std::io::Error>(false);
            }
        }
        Ok(true)
    };
    let complete = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or(Ok(false))?;
    // Prometheus asks for OpenMetrics; everything else gets the classic text format.
    let openmetrics = head
        .windows(OPENMETRICS.len())
        .any(|w| w.eq_ignore_ascii_case(OPENMETRICS.as_bytes()));
    let line = head.split(|&c| c == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&c| c == b' ');
    let method = words.next().unwrap_or_default();
    let path = words.next().unwrap_or_default();
    let path = path.split(|&c| c == b'?').next().unwrap_or_default();
    let (status, kind, body) = if !complete {
        ("400 Bad Request", "text/plain", "bad request\n".to_string())
    } else if method != b"GET" && method != b"HEAD" {
        (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        )
    } else if path != b"/metrics" {
        (
            "404 Not Found",
            "text/plain",
            "metrics are at /metrics\n".to_string(),
        )
    } else if openmetrics {
        (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(registry),
        )
    } else {
        (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            classic(&render(registry)),
        )
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(header.as_bytes()).await?;
    if method != b"HEAD" {
        socket.write_all(body.as_bytes()).await?;
    }
    socket.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
