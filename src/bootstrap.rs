//! From configuration to parts, once: the configuration is plain data; this step reads the
//! files it names (master passwords, TLS certificates and keys, user password files) and builds
//! what the proxy is made of: each master's link, the client accounts and the TLS acceptor for
//! clients. `--check-config` runs the same step, so a file that cannot be read is a
//! configuration error (exit 2) before anything is served.

use tokio_rustls::TlsAcceptor;

use crate::acl::Accounts;
use crate::backend::kind::{Link, table};
use crate::config::{Config, ConfigError};

/// What a validated configuration builds.
pub struct Parts {
    /// One link per configured master, with its credentials and TLS.
    pub links: Vec<Link>,
    /// Client users and the keys each may touch.
    pub accounts: Accounts,
    /// The client listener's TLS, when `tls_listen` is set.
    pub acceptor: Option<TlsAcceptor>,
    /// The configuration file whose member list `SIGHUP` reloads (`None`: no reload, as when
    /// the masters were given as flags or started by `--dev`). The caller that read the file
    /// sets it.
    pub source: Option<std::path::PathBuf>,
}

/// Validates `config` and builds its parts, reading every file it names once.
pub fn build(config: &Config) -> Result<Parts, ConfigError> {
    config.validate()?;
    let acceptor = match &config.tls_listen {
        Some(_) => Some(crate::tls::acceptor(config).map_err(ConfigError::Invalid)?),
        None => None,
    };
    let accounts = Accounts::from_config(config)?;
    let links = table::links(config)?;
    Ok(Parts {
        links,
        accounts,
        acceptor,
        source: None,
    })
}

/// `--check-config FILE`: reads the file and builds from it, without contacting any master.
pub fn check_file(path: &std::path::Path) -> Result<Config, ConfigError> {
    let config = Config::from_file(path)?;
    build(&config)?;
    Ok(config)
}

/// The shared state for a unit test, built from `config` as the server builds it.
#[cfg(test)]
pub(crate) fn proxy_for_tests(config: Config) -> std::sync::Arc<crate::proxy::Proxy> {
    let parts = build(&config).expect("a valid configuration");
    crate::proxy::Proxy::new(
        config,
        parts.links,
        parts.accounts,
        crate::command::TABLE.len(),
        "127.0.0.1:0".parse().expect("an address"),
    )
}
