//! How a master is reached: its address, whether over TLS, and the credentials the proxy
//! authenticates with on every connect.
//!
//! A master is written `host:port`, or as a URL the way redis-py, redis-rs and go-redis accept
//! it: `redis://[user:password@]host:port` or `rediss://...` for TLS. A URL's own user and
//! password win over `backend_user` / `backend_password`. Passwords are kept out of every
//! `Debug` and `Display`, so they cannot reach a log line, `INFO` or an error reply.
//!
//! A Sentinel member, `redis-sentinel://[password@]host:port,...#name`, is reached through its
//! Sentinels: the URL's password (or `backend_password`) is the data nodes', and
//! `backend_sentinel_password` the Sentinels'. `rediss-sentinel://` speaks TLS to both.

use std::fmt;

use std::sync::Arc;

use super::sentinel::{Majority, Sentinels};
use crate::config::{Config, ConfigError};
use crate::endpoint::{Endpoint, Member, redact};
use crate::tls::TlsTarget;

/// What the proxy sends as `AUTH [user] password` before anything else.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// ACL user; `None` authenticates as `default` (Redis's `requirepass`).
    pub user: Option<String>,
    /// The password, never printed.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// One master, resolved from the configuration: where, how, and as whom.
#[derive(Debug, Clone)]
pub struct Link {
    /// `host:port`, the master's name in logs and `INFO` (a Sentinel member's URL without its
    /// password).
    pub addr: String,
    /// For a Sentinel member: its Sentinels, who name the primary to connect to.
    pub sentinel: Option<Arc<Sentinels>>,
    /// Sent as `AUTH` before anything else on every connect.
    pub auth: Option<Credentials>,
    /// Set when the connection is TLS.
    pub tls: Option<TlsTarget>,
    /// A Redis Cluster member's seed nodes (`host:port`), asked for its slot map; empty for
    /// one master. `addr` is then the first seed.
    pub seeds: Vec<String>,
}

impl Link {
    /// The member's name in logs and `INFO`: its address, or its cluster URL (no password).
    pub fn name(&self) -> String {
        if self.seeds.is_empty() {
            self.addr.clone()
        } else {
            let scheme = if self.tls.is_some() {
                "rediss-cluster://"
            } else {
                "redis-cluster://"
            };
            format!("{scheme}{}", self.seeds.join(";"))
        }
    }
}

/// The environment variable read for the masters' password when no setting gives one.
pub const PASSWORD_ENV: &str = "REDLOCK_BACKEND_PASSWORD";

/// Resolves every backend: credentials (URL, then `backend_password`, `backend_password_file`,
/// `REDLOCK_BACKEND_PASSWORD`) and TLS (files read now, so a bad one stops the start).
pub fn links(config: &Config) -> Result<Vec<Link>, ConfigError> {
    let invalid = ConfigError::Invalid;
    let shared_password = match (&config.backend_password, &config.backend_password_file) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| invalid(format!("backend_password_file {file}: {e}")))?;
            Some(text.trim_end_matches(['\r', '\n']).to_string())
        }
        (None, None) => std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()),
    };
    let mut connector = None;
    let mut out = Vec::with_capacity(config.backends.len());
    for text in &config.backends {
        let member = Member::parse(text)
            .map_err(|m| invalid(format!("bad backend address '{}': {m}", redact(text))))?;
        // A Sentinel member's data nodes take the URL's credentials and TLS as a standalone
        // master's would; their address comes from the Sentinels on each connect. A cluster
        // member's seeds carry the URL's credentials and TLS; the first stands for them all.
        let (e, sentinel_url, seeds) = match member {
            Member::Standalone(e) => (e, None, Vec::new()),
            Member::Sentinel(s) => {
                let first = s.sentinels.first().cloned().ok_or_else(|| {
                    invalid(format!("backend '{}' names no Sentinel", redact(text)))
                })?;
                let e = Endpoint {
                    tls: s.tls,
                    user: s.user.clone(),
                    password: s.password.clone(),
                    ..first
                };
                (e, Some(s), Vec::new())
            }
            Member::Cluster(seeds) => {
                let addrs = seeds.iter().map(Endpoint::addr).collect();
                let Some(first) = seeds.into_iter().next() else {
                    return Err(invalid("a cluster member needs a seed".into()));
                };
                (first, None, addrs)
            }
        };
        let user = e.user.clone().or_else(|| config.backend_user.clone());
        let auth = match (e.password.clone().or_else(|| shared_password.clone()), user) {
            (Some(password), user) => Some(Credentials { user, password }),
            (None, Some(u)) => {
                return Err(invalid(format!(
                    "backend user '{u}' has no password (set backend_password, \
                     backend_password_file or {PASSWORD_ENV})"
                )));
            }
            (None, None) => None,
        };
        let tls = if e.tls || config.backend_tls {
            if connector.is_none() {
                connector = Some(
                    crate::tls::connector(crate::tls::ClientFiles {
                        ca_cert: config.backend_tls_ca_cert_file.as_deref(),
                        cert: config.backend_tls_cert_file.as_deref(),
                        key: config.backend_tls_key_file.as_deref(),
                    })
                    .map_err(|m| invalid(format!("backend TLS: {m}")))?,
                );
            }
            let name = config.backend_tls_server_name.as_deref().unwrap_or(&e.host);
            Some(TlsTarget {
                connector: connector
                    .clone()
                    .ok_or_else(|| invalid("backend TLS".into()))?,
                name: crate::tls::server_name(name).map_err(invalid)?,
            })
        } else {
            None
        };
        let sentinel = match sentinel_url {
            None => None,
            Some(s) => {
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
                Some(Arc::new(if config.sentinel_majority {
                    sentinels.with_majority(Majority {
                        max_ttl: std::time::Duration::from_millis(config.max_ttl_ms),
                        drift_factor: config.drift_factor,
                    })
                } else {
                    sentinels
                }))
            }
        };
        let addr = match &sentinel {
            Some(_) => Member::parse(text)
                .ok()
                .and_then(|m| match m {
                    Member::Sentinel(s) => Some(s.name()),
                    Member::Standalone(_) | Member::Cluster(_) => None,
                })
                .unwrap_or_else(|| redact(text)),
            None => e.addr(),
        };
        out.push(Link {
            addr,
            sentinel,
            auth,
            tls,
            seeds,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_plain_addresses() {
        let e = Endpoint::parse("127.0.0.1:6379").unwrap();
        assert_eq!(
            (e.addr(), e.tls, e.user, e.password),
            ("127.0.0.1:6379".into(), false, None, None)
        );
        let e = Endpoint::parse("rediss://locker:p%40ss@redis.example:6380/0").unwrap();
        assert_eq!(e.addr(), "redis.example:6380");
        assert!(e.tls);
        assert_eq!(e.user.as_deref(), Some("locker"));
        assert_eq!(e.password.as_deref(), Some("p@ss"));
        let e = Endpoint::parse("redis://:secret@[::1]:7000").unwrap();
        assert_eq!(
            (e.addr(), e.user, e.password.as_deref()),
            ("[::1]:7000".into(), None, Some("secret"))
        );
        let e = Endpoint::parse("redis://secret@h:1").unwrap();
        assert_eq!(e.password.as_deref(), Some("secret"));
        for bad in [
            "nohost",
            "redis://h:0",
            "http://h:1",
            "redis://h:1/3",
            ":1",
            "redis://u:%zz@h:1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_are_never_printed() {
        let e = Endpoint::parse("redis://u:hunter2@h:1").unwrap();
        assert!(!format!("{e:?}").contains("hunter2"));
        assert_eq!(redact("redis://u:hunter2@h:1"), "redis://u:<redacted>@h:1");
        assert_eq!(redact("rediss://:hunter2@h:1"), "rediss://:<redacted>@h:1");
        assert_eq!(redact("h:1"), "h:1");
        assert!(!redact("redis://u:hunter2@h:bad").contains("hunter2"));
        let c = Credentials {
            user: None,
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
