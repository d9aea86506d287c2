//! Where each member kind is registered: a `backends` entry, parsed by its URL scheme
//! (`crate::endpoint::MemberUrl`), becomes a [`Link`] of its kind here, by its kind's module, and
//! nowhere else. A new kind is one more line in [`link`].

use super::{Link, cluster, sentinel, standalone};
use crate::backend::target::Reach;
use crate::config::{Config, ConfigError};
use crate::endpoint::{MemberUrl, redact};

/// Resolves every backend into its link: its kind, credentials and TLS.
pub fn links(config: &Config) -> Result<Vec<Link>, ConfigError> {
    let mut reach = Reach::new(config)?;
    let mut out = Vec::with_capacity(config.backends.len());
    for text in &config.backends {
        let member = MemberUrl::parse(text).map_err(|m| {
            ConfigError::Invalid(format!("bad backend address '{}': {m}", redact(text)))
        })?;
        out.push(link(member, text, &mut reach)?);
    }
    Ok(out)
}

/// The registration table: each kind of `backends` entry, and how its link is made.
fn link(member: MemberUrl, text: &str, reach: &mut Reach) -> Result<Link, ConfigError> {
    match member {
        MemberUrl::Standalone(e) => standalone::resolve(e, reach),
        MemberUrl::Sentinel(s) => sentinel::resolve(s, text, reach),
        MemberUrl::Cluster(seeds) => cluster::resolve(seeds, reach),
    }
}
