//! A Sentinel member: `redis-sentinel://[password@]host:port,...#name` (`rediss-sentinel://`
//! for TLS), a primary its Sentinels name, followed when they fail it over. The Sentinels
//! themselves (who is asked, the majority rule, the watcher) are `crate::backend::sentinel`;
//! this module makes a member of them.
//!
//! The member is one master's pipelined connection whose settings carry the Sentinels: the
//! greeting asks them for the primary before every connect and judges a new one a failover.
//! The member's follower, started with the connection's driver, drops the connection whenever
//! they name another node. Under the majority rule the member is down until a majority of its
//! Sentinels confirms a primary.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::Instrument;

use super::{Context, Kind, Link};
use crate::backend::health::MasterInfo;
use crate::backend::sentinel::{self, Majority, Sentinels};
use crate::backend::target::Reach;
use crate::backend::{Backend, Follow, Settings};
use crate::config::ConfigError;
use crate::endpoint::{Endpoint, SentinelUrl, redact};

/// The kind's name in `INFO` and `/metrics`.
pub const NAME: &str = "sentinel";

/// The Sentinel kind: the member's Sentinels.
#[derive(Debug)]
pub struct Sentinel(pub Arc<Sentinels>);

impl Kind for Sentinel {
    fn name(&self) -> &'static str {
        NAME
    }

    fn spawn(&self, link: &Link, settings: Settings, _cx: &Context) -> Backend {
        member(link.addr.clone(), self.0.clone(), settings)
    }

    fn follows(&self) -> Option<&Arc<Sentinels>> {
        Some(&self.0)
    }
}

/// Starts a Sentinel member named `addr` whose primary the Sentinels `s` name.
pub fn member(addr: String, s: Arc<Sentinels>, settings: Settings) -> Backend {
    let settings = Settings {
        sentinel: Some(s.clone()),
        ..settings
    };
    let info = Arc::new(MasterInfo::of_kind(addr, NAME, String::new()));
    if s.majority().is_some() {
        // Down until a majority of its Sentinels confirms a primary.
        info.expect_confirmations(s.count());
    }
    let every = settings.probe_every.max(std::time::Duration::from_secs(1));
    let within = settings.connect_timeout;
    let watched = info.clone();
    // Started in the driver's span: the watcher bumps the generation the driver watches when
    // the Sentinels name another primary.
    let follow: Follow = Box::new(move || {
        let (tx, rx) = watch::channel(0u64);
        tokio::spawn(
            sentinel::watch(s, watched, tx, every, within).instrument(tracing::Span::current()),
        );
        rx
    });
    Backend::start(info, settings, Some(follow))
}

/// A primary the Sentinels name: its data nodes take the URL's credentials and TLS as a
/// standalone master's would; their address comes from the Sentinels on each connect.
pub(super) fn resolve(s: SentinelUrl, text: &str, reach: &mut Reach) -> Result<Link, ConfigError> {
    let first = s.sentinels.first().cloned().ok_or_else(|| {
        ConfigError::Invalid(format!("backend '{}' names no Sentinel", redact(text)))
    })?;
    let e = Endpoint {
        tls: s.tls,
        user: s.user.clone(),
        password: s.password.clone(),
        ..first
    };
    let (auth, tls) = reach.reach(&e)?;
    let config = reach.config;
    let to_sentinels = match &tls {
        Some(t) if s.tls => Some(t.connector.clone()),
        _ => None,
    };
    let sentinels = Sentinels::new(
        s.sentinels.clone(),
        s.master.clone(),
        config.backend_sentinel_password.clone(),
        to_sentinels,
        config.backend_tls_server_name.is_none(),
    );
    let sentinels = if config.sentinel_majority {
        sentinels.with_majority(Majority {
            max_ttl: std::time::Duration::from_millis(config.max_ttl_ms),
            drift_factor: config.drift_factor,
        })
    } else {
        sentinels
    };
    Ok(Link {
        addr: s.name(),
        auth,
        tls,
        kind: Arc::new(Sentinel(Arc::new(sentinels))),
    })
}
