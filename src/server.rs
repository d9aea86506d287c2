//! The accept loop and the state every client shares.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::backend::clock::Rules as ClockRules;
use crate::backend::{Backend, Settings};
use crate::config::Config;
use crate::keylock::KeyLocks;
use crate::scripts::ScriptCache;
use crate::stats::Stats;

/// State shared by every client connection.
pub struct Proxy {
    /// The validated configuration.
    pub config: Config,
    /// One handle per configured master; the quorum is computed from `masters.len()`.
    pub masters: Arc<[Backend]>,
    /// Scripts loaded through the proxy.
    pub scripts: ScriptCache,
    /// Per-key ordering of operations.
    pub keylocks: Arc<KeyLocks>,
    /// Counters for `INFO`.
    pub stats: Stats,
    /// Publish/subscribe across the masters.
    pub hub: Arc<crate::pubsub::Hub>,
    /// When the proxy started.
    pub started: Instant,
    /// The address clients connect to.
    pub listen_addr: SocketAddr,
    /// Random id of this proxy process, reported as `run_id`.
    pub run_id: String,
    clients: AtomicUsize,
    next_client_id: AtomicU64,
}

impl Proxy {
    /// Connects to the masters (in the background) and prepares the shared state.
    /// Fails when a master's credentials or TLS files cannot be read.
    pub fn new(
        config: Config,
        listen_addr: SocketAddr,
    ) -> Result<Arc<Proxy>, crate::config::ConfigError> {
        let ms = std::time::Duration::from_millis;
        let window = config.quarantine_window();
        let settings = Settings {
            connect_timeout: ms(config.connect_timeout_ms),
            stall_timeout: ms(config.stall_timeout_ms),
            reconnect_min: ms(config.reconnect_min_ms),
            reconnect_max: ms(config.reconnect_max_ms),
            probe_every: ms(config.probe_interval_ms),
            quarantine: config.quarantine.then_some(window),
            quarantine_young: !config.masters_started_here,
            masters_persist: config.masters_persist,
            clock: config.clock_watch.then_some(ClockRules {
                rate: config.drift_factor.max(0.001),
                tolerance: ms(config.clock_jump_ms),
                span: window,
            }),
            auth: None,
            tls: None,
        };
        let links = crate::backend::target::links(&config)?;
        let hub = crate::pubsub::Hub::new(&links);
        let masters = links
            .into_iter()
            .map(|link| {
                let settings = Settings {
                    auth: link.auth,
                    tls: link.tls,
                    ..settings.clone()
                };
                Backend::spawn(link.addr, settings)
            })
            .collect();
        let run_id = (0..40)
            .map(|_| char::from_digit(rand::random_range(0..16), 16).unwrap_or('0'))
            .collect();
        let scripts = ScriptCache::new(&config.scripts, config.script_cache_bytes);
        Ok(Arc::new(Proxy {
            config,
            masters,
            scripts,
            keylocks: Arc::new(KeyLocks::default()),
            stats: Stats::default(),
            hub,
            started: Instant::now(),
            listen_addr,
            run_id,
            clients: AtomicUsize::new(0),
            next_client_id: AtomicU64::new(1),
        }))
    }

    /// Number of connected clients.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// Client connections accepted since start (refused ones not counted).
    pub fn clients_total(&self) -> u64 {
        self.next_client_id.load(Ordering::Relaxed) - 1
    }

    /// The quorum: `⌊N/2⌋ + 1` of the configured masters.
    pub fn quorum(&self) -> usize {
        crate::quorum::quorum(self.masters.len())
    }
}

/// One client's place under `max_clients`, given back when its task ends, however it ends.
struct Slot(Arc<Proxy>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Binds the listener and serves clients until the task is dropped.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&config.listen).await?;
    serve(listener, config).await
}

/// Serves clients on an already bound listener (tests bind port 0 themselves).
pub async fn serve(listener: TcpListener, config: Config) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let proxy = Proxy::new(config, addr)?;
    let masters: Vec<&str> = proxy
        .masters
        .iter()
        .map(|m| m.info().addr.as_str())
        .collect();
    info!(listen = %addr, masters = ?masters, quorum = proxy.quorum(), "redlock-proxy listening");
    if let Some(at) = &proxy.config.metrics_listen {
        let metrics = TcpListener::bind(at).await?;
        info!(metrics = %metrics.local_addr()?, "serving Prometheus metrics at /metrics");
        tokio::spawn(crate::metrics::serve(metrics, proxy.clone()));
    }
    loop {
        let (mut socket, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                // Running out of file descriptors must not end the server.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        if proxy.clients.fetch_add(1, Ordering::AcqRel) >= proxy.config.max_clients {
            proxy.clients.fetch_sub(1, Ordering::AcqRel);
            let _ = socket
                .write_all(b"-ERR max number of clients reached\r\n")
                .await;
            continue;
        }
        let id = proxy.next_client_id.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(proxy.clone());
        let proxy = proxy.clone();
        // A panic in a client task ends that client only: tokio contains it (the release
        // profile keeps unwinding), and the slot is given back as it unwinds.
        tokio::spawn(
            async move {
                let _slot = slot;
                if let Err(e) = crate::client::serve(socket, proxy, id).await {
                    debug!(error = %e, "client connection ended");
                }
            }
            .instrument(info_span!("client", client.addr = %peer)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_client_task_gives_its_slot_back() {
        let config = Config {
            backends: vec!["127.0.0.1:1".into()],
            ..Config::default()
        };
        let proxy = Proxy::new(config, "127.0.0.1:0".parse().unwrap()).unwrap();
        proxy.clients.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(proxy.clone());
        let task = tokio::spawn(async move {
            let _slot = slot;
            panic!("a bug in one client's task");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(proxy.clients(), 0);
    }
}
