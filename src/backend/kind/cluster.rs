//! A Redis Cluster member: `redis-cluster://[user:password@]host:port,...` (`rediss-cluster://`
//! for TLS), named by its seeds. The cluster itself (the slot map, the routing by key, the
//! redirections, the per-shard quarantine) is `crate::backend::cluster`; this module makes a
//! member of it.

use super::{Context, Kind, Link};
use std::sync::Arc;

use crate::backend::health::MasterInfo;
use crate::backend::target::Reach;
use crate::backend::{Backend, Settings, cluster};
use crate::config::ConfigError;
use crate::endpoint::Endpoint;

/// The kind's name in `INFO` and `/metrics`.
pub const NAME: &str = "cluster";

/// The cluster kind: the seeds (`host:port`) asked for the slot map. The link's address is
/// the first.
#[derive(Debug)]
pub struct Cluster(pub Vec<String>);

impl Kind for Cluster {
    fn name(&self) -> &'static str {
        NAME
    }

    fn member_name(&self, link: &Link) -> String {
        let scheme = if link.tls.is_some() {
            "rediss-cluster://"
        } else {
            "redis-cluster://"
        };
        format!("{scheme}{}", self.0.join(";"))
    }

    fn spawn(&self, link: &Link, settings: Settings, cx: &Context) -> Backend {
        let info = MasterInfo::of_kind(link.name(), NAME, String::new());
        cluster::member(
            info,
            self.0.clone(),
            settings,
            cx.scripts.clone(),
            super::standalone::member,
        )
    }

    /// A cluster sends every `PUBLISH` to every node: the link goes to a seed, the next one
    /// after each failure, so a seed gone for good does not leave the member without a link.
    fn link_node(&self, link: &Link, failures: usize) -> String {
        match self.0.len() {
            0 => link.addr.clone(),
            n => self.0[failures % n].clone(),
        }
    }

    /// Any node hears every `PUBLISH`: no need to be on a primary.
    fn link_needs_primary(&self) -> bool {
        false
    }
}

/// A Redis Cluster: its seeds carry the URL's credentials and TLS; the first stands for them
/// all.
pub(super) fn resolve(seeds: Vec<Endpoint>, reach: &mut Reach) -> Result<Link, ConfigError> {
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
