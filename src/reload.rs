//! `SIGHUP` and the member list: the configuration file is read again and its masters become
//! the member set, without a restart (see [`crate::quorum::members`] for how a change is made
//! safely, and `docs/operations.md` for the procedure with several proxies).
//!
//! Only the member list and what reaching a member needs (credentials, TLS towards masters)
//! are taken from the file; a change to any other setting is ignored with a warning naming it,
//! and takes effect at the next restart. A file that cannot be read, parsed or checked leaves
//! the members as they were, with an error in the log.

use std::path::Path;

use tracing::{error, info, warn};

use crate::backend::kind::table;
use crate::config::Config;
use crate::proxy::Proxy;

/// The settings a reload applies: the members and how each is reached. The client listener's
/// certificate files are reloaded on the same `SIGHUP` by the server.
const APPLIED: &[&str] = &[
    "backends",
    "backend_user",
    "backend_password",
    "backend_password_file",
    "backend_tls",
    "backend_tls_ca_cert_file",
    "backend_tls_cert_file",
    "backend_tls_key_file",
    "backend_tls_server_name",
    "tls_cert_file",
    "tls_key_file",
    "tls_ca_cert_file",
];

/// Re-reads `path` and makes its member list the proxy's (see the module docs).
pub fn members(proxy: &Proxy, path: &Path) {
    let config = match Config::from_file(path).and_then(|c| c.validate().map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            error!(error = %e, "SIGHUP: configuration not re-read; the member list stays as it was");
            return;
        }
    };
    let links = match table::links(&config) {
        Ok(links) => links,
        Err(e) => {
            error!(error = %e, "SIGHUP: masters not reloaded; the member list stays as it was");
            return;
        }
    };
    let ignored = ignored(proxy.config(), &config);
    if !ignored.is_empty() {
        warn!(
            settings = ?ignored,
            "SIGHUP: these settings changed in the file but apply only at the next restart"
        );
    }
    match proxy.change_members(links) {
        Ok(c) if c.is_none() => info!("SIGHUP: the member list is unchanged"),
        Ok(c) => info!(
            added = ?c.added,
            removed = ?c.removed,
            kept = c.kept,
            transition_ms = c.transition.map(|t| t.as_millis() as u64),
            "SIGHUP: member list changed; a grant needs a quorum of the old members and of the \
             new until the transition ends"
        ),
        Err(why) => error!(%why, "SIGHUP: member list not changed"),
    }
}

/// The settings that differ between `running` and `file`, apart from those a reload applies.
fn ignored(running: &Config, file: &Config) -> Vec<String> {
    let table = |c: &Config| toml::Table::try_from(c).unwrap_or_default();
    let (a, b) = (table(running), table(file));
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| !APPLIED.contains(&k.as_str()) && a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_settings_a_reload_does_not_apply_are_named() {
        let running = Config::from_toml("backends = [\"127.0.0.1:1\"]\nmax_ttl_ms = 1000").unwrap();
        let file = Config::from_toml(
            "backends = [\"127.0.0.1:2\"]\nmax_ttl_ms = 2000\nbackend_password = \"p\"",
        )
        .unwrap();
        assert_eq!(ignored(&running, &file), ["max_ttl_ms"]);
        assert!(ignored(&running, &running).is_empty());
    }
}
