//! Where each member kind is registered: a `backends` entry, parsed by its URL scheme
//! (`crate::endpoint::Member`), becomes a [`Link`] of its kind here, and nowhere else. A new
//! kind is one more line in [`link`].

use std::sync::Arc;

use super::Link;
use super::cluster::Cluster;
use super::sentinel::Sentinel;
use super::standalone::Standalone;
use crate::backend::sentinel::{Majority, Sentinels};
use crate::backend::target::Reach;
use crate::config::{Config, ConfigError};
use crate::endpoint::{Endpoint, Member, SentinelUrl, redact};

/// Resolves every backend into its link: its kind, credentials and TLS.
pub fn links(config: &Config) -> Result<Vec<Link>, ConfigError> {
    let mut reach = Reach::new(config)?;
    let mut out = Vec::with_capacity(config.backends.len());
    for text in &config.backends {
        let member = Member::parse(text).map_err(|m| {
            ConfigError::Invalid(format!("bad backend address '{}': {m}", redact(text)))
        })?;
        out.push(link(member, text, &mut reach)?);
    }
    Ok(out)
}

/// The registration table: each kind of `backends` entry, and how its link is made.
fn link(member: Member, text: &str, reach: &mut Reach) -> Result<Link, ConfigError> {
    match member {
        Member::Standalone(e) => standalone(e, reach),
        Member::Sentinel(s) => sentinel(s, text, reach),
        Member::Cluster(seeds) => cluster(seeds, reach),
    }
}

/// One master.
fn standalone(e: Endpoint, reach: &mut Reach) -> Result<Link, ConfigError> {
    let (auth, tls) = reach.reach(&e)?;
    Ok(Link {
        addr: e.addr(),
        auth,
        tls,
        kind: Arc::new(Standalone),
    })
}

/// A primary the Sentinels name: its data nodes take the URL's credentials and TLS as a
/// standalone master's would; their address comes from the Sentinels on each connect.
fn sentinel(s: SentinelUrl, text: &str, reach: &mut Reach) -> Result<Link, ConfigError> {
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

/// A Redis Cluster: its seeds carry the URL's credentials and TLS; the first stands for them
/// all.
fn cluster(seeds: Vec<Endpoint>, reach: &mut Reach) -> Result<Link, ConfigError> {
    let addrs: Vec<String> = seeds.iter().map(Endpoint::addr).collect();
    let Some(first) = seeds.into_iter().next() else {
        return Err(ConfigError::Invalid("a cluster member needs a seed".into()));
    };
    let (auth, tls) = reach.reach(&first)?;
    Ok(Link {
        addr: first.addr(),
        auth,
        tls,
        kind: Arc::new(Cluster(addrs)),
    })
}
