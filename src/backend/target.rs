//! How a master is reached: whether over TLS, and the credentials the proxy authenticates with
//! on every connect (each member kind's link is made in `kind::table` with these).
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

use crate::config::{Config, ConfigError};
use crate::endpoint::Endpoint;
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

/// The environment variable read for the masters' password when no setting gives one.
pub const PASSWORD_ENV: &str = "REDLOCK_BACKEND_PASSWORD";

/// How members are reached, from the configuration: each member's credentials (URL, then
/// `backend_password`, `backend_password_file`, `REDLOCK_BACKEND_PASSWORD`) and TLS (files read
/// once, so a bad one stops the start).
pub struct Reach<'a> {
    /// The configuration the members are read from.
    pub config: &'a Config,
    shared_password: Option<String>,
    connector: Option<tokio_rustls::TlsConnector>,
}

impl<'a> Reach<'a> {
    /// Reads the shared password (from its file or the environment) once.
    pub fn new(config: &'a Config) -> Result<Reach<'a>, ConfigError> {
        let shared_password = match (&config.backend_password, &config.backend_password_file) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(file)) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    ConfigError::Invalid(format!("backend_password_file {file}: {e}"))
                })?;
                Some(text.trim_end_matches(['\r', '\n']).to_string())
            }
            (None, None) => std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()),
        };
        Ok(Reach {
            config,
            shared_password,
            connector: None,
        })
    }

    /// The credentials and TLS a connection to `e` uses: the URL's own user and password
    /// first, then the shared ones; TLS when the URL or `backend_tls` asks for it.
    pub fn reach(
        &mut self,
        e: &Endpoint,
    ) -> Result<(Option<Credentials>, Option<TlsTarget>), ConfigError> {
        let invalid = ConfigError::Invalid;
        let config = self.config;
        let user = e.user.clone().or_else(|| config.backend_user.clone());
        let auth = match (
            e.password.clone().or_else(|| self.shared_password.clone()),
            user,
        ) {
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
            if self.connector.is_none() {
                self.connector = Some(
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
                connector: self
                    .connector
                    .clone()
                    .ok_or_else(|| invalid("backend TLS".into()))?,
                name: crate::tls::server_name(name).map_err(invalid)?,
            })
        } else {
            None
        };
        Ok((auth, tls))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::redact;

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
