//! The state every client connection shares: the configuration, the masters, the script cache,
//! the per-key order, the pub/sub hub and the counters. Commands read it; the accept loop
//! ([`crate::server`]) creates it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::time::Instant;

use crate::backend::clock::Rules as ClockRules;
use crate::backend::{Backend, Settings};
use crate::config::Config;
use crate::keylock::KeyLocks;
use crate::quorum::Masters;
use crate::scripts::ScriptCache;
use crate::stats::Stats;

/// State shared by every client connection.
pub struct Proxy {
    /// The validated configuration.
    pub config: Config,
    /// One handle per configured master; the quorum is computed from `masters.len()`.
    pub masters: Masters,
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
    /// Connected clients (the accept loop keeps it).
    pub(crate) clients: AtomicUsize,
    /// The next `CLIENT ID`.
    pub(crate) next_client_id: AtomicU64,
    /// Client users and the keys each may touch.
    pub accounts: crate::acl::Accounts,
    /// Cancelled on `SIGTERM`/`SIGINT`: clients answer what they have read, then close.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Live metrics that have no `INFO` counterpart (histograms, per-command counters).
    pub metrics: crate::metrics::Live,
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
        let accounts = crate::acl::Accounts::from_config(&config)?;
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
            accounts,
            shutdown: tokio_util::sync::CancellationToken::new(),
            metrics: crate::metrics::Live::default(),
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
