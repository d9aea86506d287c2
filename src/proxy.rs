//! The state every client connection shares: the configuration, the masters, the script cache,
//! the per-key order, the pub/sub hub, the accounts and the counters. Commands read it through
//! narrow methods; the bootstrap step ([`Proxy::new`]'s caller) builds what it is made of.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::acl::{Accounts, Patterns};
use crate::backend::clock::Rules as ClockRules;
use crate::backend::kind::{Context, Link};
use crate::backend::{Backend, Settings};
use crate::config::Config;
use crate::counters::Counters;
use crate::keylock::KeyLocks;
use crate::pubsub::Hub;
use crate::quorum::Masters;
use crate::quorum::members::{Changed, Membership, Rules};
use crate::scripts::ScriptCache;

/// State shared by every client connection.
pub struct Proxy {
    /// The validated configuration.
    config: Config,
    /// The member set: one handle per master, swapped on `SIGHUP` (see
    /// [`crate::quorum::members`]).
    members: Arc<Membership>,
    /// How a master's connection is set up (each member's credentials and TLS added).
    settings: Settings,
    /// Scripts loaded through the proxy.
    scripts: ScriptCache,
    /// Per-key ordering of operations.
    keylocks: Arc<KeyLocks>,
    /// The one counter store, read by `INFO` and `/metrics`.
    counters: Counters,
    /// Publish/subscribe across the masters.
    hub: Arc<Hub>,
    /// When the proxy started.
    started: Instant,
    /// The address clients connect to.
    listen_addr: SocketAddr,
    /// Random id of this proxy process, reported as `run_id`.
    run_id: String,
    /// Connected clients (the accept loop keeps it).
    clients: AtomicUsize,
    /// The next `CLIENT ID`.
    next_client_id: AtomicU64,
    /// Client users and the keys each may touch.
    accounts: Accounts,
    /// Cancelled on `SIGTERM`/`SIGINT`: clients answer what they have read, then close.
    shutdown: CancellationToken,
    /// The keys whose locks get a lease (`lease_keys`), for a user without its own.
    lease_patterns: Patterns,
    /// True when any connection may hold a lease: `lease_keys` or some user's own.
    leases_on: bool,
}

impl Proxy {
    /// Starts a connection to each master (in the background) from `links`, already built from
    /// `config` with the accounts, and prepares the shared state. `commands` is the number of
    /// rows of the command table, one counter each.
    pub fn new(
        config: Config,
        links: Vec<Link>,
        accounts: Accounts,
        commands: usize,
        listen_addr: SocketAddr,
    ) -> Arc<Proxy> {
        let settings = settings(&config);
        let hub = Hub::new(&links);
        let members = links
            .into_iter()
            .map(|link| {
                let backend = spawn_member(&link, &settings);
                (link, backend)
            })
            .collect();
        let run_id = (0..40)
            .map(|_| char::from_digit(rand::random_range(0..16), 16).unwrap_or('0'))
            .collect();
        let scripts = ScriptCache::new(&config.scripts, config.script_cache_bytes);
        let lease_patterns = crate::acl::patterns(&config.lease_keys);
        let leases_on = !config.lease_keys.is_empty() || accounts.any_lease_keys();
        let members = Membership::new(members);
        // The hub's subscriber links follow the members in force (see `Hub::follow`).
        let follower = Arc::downgrade(&hub);
        members.observe(move |links| {
            if let Some(hub) = follower.upgrade() {
                hub.follow(links);
            }
        });
        Arc::new(Proxy {
            config,
            members,
            settings,
            scripts,
            keylocks: Arc::new(KeyLocks::default()),
            counters: Counters::new(commands),
            hub,
            started: Instant::now(),
            listen_addr,
            run_id,
            clients: AtomicUsize::new(0),
            next_client_id: AtomicU64::new(1),
            accounts,
            shutdown: CancellationToken::new(),
            lease_patterns,
            leases_on,
        })
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The masters, one handle each, in configuration order: the snapshot one operation takes
    /// when it starts and uses to its end (during a change of members, the union of the old
    /// set and the new, with the rule that needs a quorum of each).
    pub fn masters(&self) -> Masters {
        self.members.snapshot()
    }

    /// Makes `links` (built from a re-read configuration) the member set (see
    /// [`crate::quorum::members`]); refused with why while a transition runs.
    pub fn change_members(&self, links: Vec<Link>) -> Result<Changed, String> {
        let c = &self.config;
        let rules = Rules {
            transition: c.membership_transition.then(|| c.membership_transition()),
            quarantine: c.quarantine.then(|| c.quarantine_window()),
        };
        self.members
            .change(links, rules, |link| spawn_member(link, &self.settings))
    }

    /// Time left in the change of members in progress, if any.
    pub fn transition_left(&self) -> Option<std::time::Duration> {
        self.members.transition_left()
    }

    /// Scripts loaded through the proxy.
    pub fn scripts(&self) -> &ScriptCache {
        &self.scripts
    }

    /// The per-key order of operations.
    pub fn keylocks(&self) -> &Arc<KeyLocks> {
        &self.keylocks
    }

    /// The counters `INFO` and `/metrics` report.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Publish/subscribe across the masters.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// When the proxy started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The address clients connect to.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    /// This process's random id, reported as `run_id`.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Client users and the keys each may touch.
    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }

    /// True when any connection may hold a lease.
    pub fn leases_on(&self) -> bool {
        self.leases_on
    }

    /// The lease patterns of user `name` (`None`: `default`): its own, or `lease_keys`.
    pub fn lease_patterns(&self, name: Option<&[u8]>) -> Patterns {
        self.accounts
            .lease_keys(name)
            .unwrap_or_else(|| self.lease_patterns.clone())
    }

    /// Cancelled when the proxy shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Takes a place for one more client, unless `max_clients` are connected already.
    pub fn admit_client(&self) -> bool {
        if self.clients.fetch_add(1, Ordering::AcqRel) >= self.config.max_clients {
            self.clients.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives back a place taken by [`Proxy::admit_client`].
    pub fn client_left(&self) {
        self.clients.fetch_sub(1, Ordering::AcqRel);
    }

    /// A new `CLIENT ID`.
    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Number of connected clients.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// Client connections accepted since start (refused ones not counted).
    pub fn clients_total(&self) -> u64 {
        self.next_client_id.load(Ordering::Relaxed) - 1
    }

    /// The quorum: `⌊N/2⌋ + 1` of the configured masters (of the new set, during a change).
    pub fn quorum(&self) -> usize {
        self.masters().rule().size()
    }
}

/// How every master's connection is set up, from the configuration.
fn settings(config: &Config) -> Settings {
    let ms = std::time::Duration::from_millis;
    let window = config.quarantine_window();
    Settings {
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
        sentinel: None,
        identity: config
            .member_identity_check
            .then(|| crate::backend::identity::Claimant::new(Arc::default())),
    }
}

/// Starts one member (in the background), of its link's kind: `settings` with the link's
/// credentials and TLS.
fn spawn_member(link: &Link, settings: &Settings) -> Backend {
    let cx = Context {
        scripts: Arc::new(crate::scripts::ClusterScripts),
    };
    link.spawn(settings, &cx)
}
