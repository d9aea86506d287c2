//! A master's address as the configuration writes it: `host:port`, or a URL the way redis-py,
//! redis-rs and go-redis accept it, `redis://[user:password@]host:port` or `rediss://...` for
//! TLS. A Redis Cluster member is named by seed nodes, `redis-cluster://[user:password@]host:port[,host:port…]`
//! (`rediss-cluster://` with TLS). Passwords are kept out of every `Debug` and `Display`, so they cannot reach a log line,
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

/// A member as written in `backends`: one master, or a Redis Cluster named by its seeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// One master.
    Standalone(Endpoint),
    /// A Redis Cluster: the nodes asked for its slot map (each carries the URL's credentials
    /// and TLS).
    Cluster(Vec<Endpoint>),
}

/// The schemes of a cluster member, plain and TLS.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis-cluster://", "redis://"),
    ("rediss-cluster://", "rediss://"),
];

impl Member {
    /// Parses a `backends` entry: a master (see [`Endpoint::parse`]) or a cluster URL.
    pub fn parse(text: &str) -> Result<Member, String> {
        let Some((rest, scheme)) = CLUSTER_SCHEMES
            .iter()
            .find_map(|(c, plain)| text.strip_prefix(c).map(|r| (r, *plain)))
        else {
            return Endpoint::parse(text).map(Member::Standalone);
        };
        let (rest, db) = match rest.split_once('/') {
            Some((r, db)) => (r, format!("/{db}")),
            None => (rest, String::new()),
        };
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((u, h)) => (format!("{u}@"), h),
            None => (String::new(), rest),
        };
        let seeds = hosts
            .split(',')
            .map(|h| h.trim())
            .filter(|h| !h.is_empty())
            .map(|h| Endpoint::parse(&format!("{scheme}{userinfo}{h}{db}")))
            .collect::<Result<Vec<_>, _>>()?;
        if seeds.is_empty() {
            return Err("a cluster member needs at least one seed HOST:PORT".into());
        }
        Ok(Member::Cluster(seeds))
    }

    /// The member's name in logs, `INFO` and `/metrics`: `host:port`, or
    /// `redis-cluster://host:port,host:port` (never a password).
    pub fn name(&self) -> String {
        match self {
            Member::Standalone(e) => e.addr(),
            Member::Cluster(seeds) => {
                let scheme = if seeds.first().is_some_and(|e| e.tls) {
                    "rediss-cluster://"
                } else {
                    "redis-cluster://"
                };
                let hosts: Vec<String> = seeds.iter().map(Endpoint::addr).collect();
                format!("{scheme}{}", hosts.join(","))
            }
        }
    }
}

/// Splits `--backends` into members. Members are separated by `;` when the list holds one;
/// otherwise by `,`, where a piece without a scheme that follows a multi-host URL (a cluster
/// member's seeds) belongs to that URL. So `redis-cluster://a:1,b:2,redis://c:3` is two
/// members, and a plain `host:port` after a cluster URL needs `;` to stand on its own.
pub fn split_backends(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if list.contains(';') {
        out.extend(list.split(';').map(|s| s.trim().to_string()));
    } else {
        for piece in list.split(',').map(str::trim) {
            match out.last_mut() {
                Some(prev) if !piece.contains("://") && is_multi_host(prev) => {
                    prev.push(',');
                    prev.push_str(piece);
                }
                _ => out.push(piece.to_string()),
            }
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// True for a URL scheme that names several hosts.
fn is_multi_host(text: &str) -> bool {
    text.split_once("://")
        .is_some_and(|(scheme, _)| scheme.ends_with("-cluster") || scheme.contains("sentinel"))
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
    if let Ok(Member::Cluster(seeds)) = Member::parse(text) {
        let name = Member::Cluster(seeds.clone()).name();
        return match seeds.first() {
            Some(e) if e.password.is_some() => {
                let (scheme, hosts) = name.split_once("://").unwrap_or(("", &name));
                let user = e.user.as_deref().unwrap_or("");
                format!("{scheme}://{user}:<redacted>@{hosts}")
            }
            _ => name,
        };
    }
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
    fn cluster_members_are_named_by_seeds() {
        let m = Member::parse("redis-cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2:7001").unwrap();
        let Member::Cluster(seeds) = &m else {
            panic!("{m:?}")
        };
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds[1].addr(), "10.0.0.2:7001");
        assert_eq!(seeds[1].password.as_deref(), Some("p@ss"));
        assert!(!seeds[0].tls);
        assert_eq!(m.name(), "redis-cluster://10.0.0.1:7000,10.0.0.2:7001");
        let m = Member::parse("rediss-cluster://h:1").unwrap();
        assert!(matches!(&m, Member::Cluster(s) if s[0].tls));
        assert!(Member::parse("redis-cluster://").is_err());
        assert!(Member::parse("redis-cluster://h:0").is_err());
        assert!(matches!(Member::parse("h:1"), Ok(Member::Standalone(_))));
        assert_eq!(
            redact("redis-cluster://u:hunter2@a:1,b:2"),
            "redis-cluster://u:<redacted>@a:1,b:2"
        );
    }

    #[test]
    fn backends_lists_split_into_members() {
        assert_eq!(split_backends("a:1, b:2"), vec!["a:1", "b:2"]);
        assert_eq!(
            split_backends("redis-cluster://a:1,b:2,redis://c:3,d:4"),
            vec!["redis-cluster://a:1,b:2", "redis://c:3", "d:4"]
        );
        assert_eq!(
            split_backends("redis-cluster://a:1,b:2;c:3;"),
            vec!["redis-cluster://a:1,b:2", "c:3"]
        );
        assert_eq!(
            split_backends("redis-cluster://a:1,b:2,redis-cluster://c:3,d:4"),
            vec!["redis-cluster://a:1,b:2", "redis-cluster://c:3,d:4"]
        );
    }
}
