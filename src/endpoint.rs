//! A master's address as the configuration writes it: `host:port`, or a URL the way redis-py,
//! redis-rs and go-redis accept it, `redis://[user:password@]host:port` or `rediss://...` for
//! TLS. Passwords are kept out of every `Debug` and `Display`, so they cannot reach a log line,
//! `INFO` or an error reply.

use std::fmt;

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
