//! How a master is reached: its address, whether over TLS, and the credentials the proxy
//! authenticates with on every connect.
//!
//! A master is written `host:port`, or as a URL the way redis-py, redis-rs and go-redis accept
//! it: `redis://[user:password@]host:port` or `rediss://...` for TLS. A URL's own user and
//! password win over `backend_user` / `backend_password`. Passwords are kept out of every
//! `Debug` and `Display`, so they cannot reach a log line, `INFO` or an error reply.

use std::fmt;

use crate::config::{Config, ConfigError};
use crate::tls::TlsTarget;

/// A master as written in `backends`.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `rediss://`: TLS whatever `backend_tls` says.
    pub tls: bool,
    /// User from the URL.
    pub user: Option<String>,
    /// Password from the URL.
    pub password: Option<String>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.addr())
    }
}

impl Endpoint {
    /// Parses `host:port`, `redis://[user[:password]@]host:port[/db]` or `rediss://...`.
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let (tls, rest) = if let Some(r) = text.strip_prefix("rediss://") {
            (true, r)
        } else if let Some(r) = text.strip_prefix("redis://") {
            (false, r)
        } else if text.contains("://") {
            return Err("expected HOST:PORT, redis://... or rediss://...".into());
        } else {
            (false, text)
        };
        let url = rest.len() != text.len();
        // The database number (`/0`) means nothing to a lock proxy: only 0 is accepted.
        let (rest, db) = match rest.split_once('/') {
            Some((r, db)) if url => (r, db),
            _ => (rest, ""),
        };
        if !db.is_empty() && db != "0" {
            return Err(format!("database '{db}': the proxy uses database 0 only"));
        }
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) if url => (Some(u), h),
            _ => (None, rest),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = match u.split_once(':') {
                    Some((user, pass)) => (user, Some(pass)),
                    // `redis://secret@host` is a password alone, as redis-py reads it.
                    None => ("", Some(u)),
                };
                let user = decode(user)?;
                let pass = pass.map(decode).transpose()?;
                (
                    (!user.is_empty()).then_some(user),
                    pass.filter(|p| !p.is_empty()),
                )
            }
        };
        let (host, port) = hostport.rsplit_once(':').ok_or("expected HOST:PORT")?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err("empty host".into());
        }
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("bad port '{port}'"))?;
        Ok(Endpoint {
            host: host.to_string(),
            port,
            tls,
            user,
            password,
        })
    }

    /// `host:port` (IPv6 in brackets), as logs and `INFO` name the master.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Percent-decoding of a URL's user or password (`%40` for `@`, `%3A` for `:`).
fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("bad percent-escape in the URL's user or password")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the URL's user or password is not UTF-8".to_string())
}

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
    /// `host:port`, the master's name in logs and `INFO`.
    pub addr: String,
    /// Sent as `AUTH` before anything else on every connect.
    pub auth: Option<Credentials>,
    /// Set when the connection is TLS.
    pub tls: Option<TlsTarget>,
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
        let e = Endpoint::parse(text)
            .map_err(|m| invalid(format!("bad backend address '{}': {m}", redact(text))))?;
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
        out.push(Link {
            addr: e.addr(),
            auth,
            tls,
        });
    }
    Ok(out)
}

/// `backends` entries with the password of any URL replaced, for logs and `Debug`.
pub fn redact(text: &str) -> String {
    match Endpoint::parse(text) {
        Ok(e) => {
            let scheme = if e.tls { "rediss" } else { "redis" };
            match (&e.user, &e.password, text.contains("://")) {
                (_, _, false) => text.to_string(),
                (Some(u), Some(_), true) => format!("{scheme}://{u}:<redacted>@{}", e.addr()),
                (None, Some(_), true) => format!("{scheme}://:<redacted>@{}", e.addr()),
                (Some(u), None, true) => format!("{scheme}://{u}@{}", e.addr()),
                (None, None, true) => format!("{scheme}://{}", e.addr()),
            }
        }
        // Unparsable: it may still hold a secret, so show only that it was there.
        Err(_) if text.contains('@') => "<unparsable backend, redacted>".to_string(),
        Err(_) => text.to_string(),
    }
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
