//! A standalone master: `host:port`, `redis://…` or `rediss://…`. The member is one master's
//! pipelined connection (see `super::super`), with nothing to follow and nothing to route.

use std::sync::Arc;

use super::{Context, Kind, Link};
use crate::backend::health::MasterInfo;
use crate::backend::target::Reach;
use crate::backend::{Backend, Settings};
use crate::config::ConfigError;
use crate::endpoint::Endpoint;

/// The kind's name in `INFO` and `/metrics`.
pub const NAME: &str = "standalone";

/// The standalone kind.
#[derive(Debug)]
pub struct Standalone;

impl Kind for Standalone {
    fn name(&self) -> &'static str {
        NAME
    }

    fn spawn(&self, link: &Link, settings: Settings, _cx: &Context) -> Backend {
        member(link.addr.clone(), settings)
    }
}

/// A link to one master at `addr`, for unit tests.
#[cfg(test)]
pub(crate) fn link(
    addr: String,
    auth: Option<crate::backend::target::Credentials>,
    tls: Option<crate::tls::TlsTarget>,
) -> Link {
    Link {
        addr,
        auth,
        tls,
        kind: Arc::new(Standalone),
    }
}

/// Starts the connection to the master at `addr` and returns its handle.
pub fn member(addr: String, settings: Settings) -> Backend {
    let info = MasterInfo::of_kind(addr.clone(), NAME, addr);
    Backend::start(Arc::new(info), settings, None)
}

/// One master.
pub(super) fn resolve(e: Endpoint, reach: &mut Reach) -> Result<Link, ConfigError> {
    let (auth, tls) = reach.reach(&e)?;
    Ok(Link {
        addr: e.addr(),
        auth,
        tls,
        kind: Arc::new(Standalone),
    })
}
