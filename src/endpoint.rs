//! A member's address as the configuration writes it: `host:port`, or a URL the way redis-py,
//! redis-rs and go-redis accept it, `redis://[user:password@]host:port` or `rediss://...` for
//! TLS; a member named by its Sentinels, in Lettuce's form
//! `redis-sentinel://[password@]host:port[,host:port...]#master-name` (`rediss-sentinel://`
//! when the data nodes speak TLS); or a Redis Cluster named by seed nodes,
//! `redis-cluster://[user:password@]host:port[,host:port...]` (`rediss-cluster://` with TLS).
//! Passwords are kept out of every `Debug` and `Display`, so they cannot reach a log line,
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
        if host.contains(['[', ']']) || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("bad host '{host}'"));
        }
        let port = port_of(port)?;
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

/// A member as written in `backends`: one master, a primary its Sentinels name, or a Redis
/// Cluster named by its seeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberUrl {
    /// One master.
    Standalone(Endpoint),
    /// A primary the Sentinels name: `redis-sentinel://...#name`.
    Sentinel(SentinelUrl),
    /// A Redis Cluster: the nodes asked for its slot map (each carries the URL's credentials
    /// and TLS).
    Cluster(Vec<Endpoint>),
}

/// The schemes of a cluster member, plain and TLS.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis-cluster://", "redis://"),
    ("rediss-cluster://", "rediss://"),
];

impl MemberUrl {
    /// Parses a `backends` entry: a master (see [`Endpoint::parse`]), a Sentinel URL or a
    /// cluster URL.
    pub fn parse(text: &str) -> Result<MemberUrl, String> {
        if let Some(s) = SentinelUrl::parse(text)? {
            return Ok(MemberUrl::Sentinel(s));
        }
        let Some((rest, scheme)) = CLUSTER_SCHEMES
            .iter()
            .find_map(|(c, plain)| text.strip_prefix(c).map(|r| (r, *plain)))
        else {
            return Endpoint::parse(text).map(MemberUrl::Standalone);
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
        Ok(MemberUrl::Cluster(seeds))
    }

    /// The member's name in logs, `INFO` and `/metrics`: `host:port`, or
    /// `redis-sentinel://host:port,...#name` or `redis-cluster://host:port,host:port` (never a
    /// password).
    pub fn name(&self) -> String {
        match self {
            MemberUrl::Standalone(e) => e.addr(),
            MemberUrl::Sentinel(s) => s.name(),
            MemberUrl::Cluster(seeds) => {
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

/// The port a Sentinel listens on when a `redis-sentinel://` URL gives none.
pub const SENTINEL_PORT: u16 = 26379;

/// A member named by its Sentinels: `redis-sentinel://[[user:]password@]host[:port][,...]#name`.
/// The URL's user and password are the data nodes' (as Lettuce reads them); the Sentinels' own
/// password is the `backend_sentinel_password` setting.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    /// The Sentinels, in the order they are asked (their own user and password are `None`).
    pub sentinels: Vec<Endpoint>,
    /// The master name the Sentinels monitor.
    pub master: String,
    /// `rediss-sentinel://`: the data nodes (and the Sentinels) speak TLS.
    pub tls: bool,
    /// The data nodes' ACL user.
    pub user: Option<String>,
    /// The data nodes' password.
    pub password: Option<String>,
}

impl fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl SentinelUrl {
    /// Parses a `redis-sentinel://` or `rediss-sentinel://` URL; `Ok(None)` for any other text.
    pub fn parse(text: &str) -> Result<Option<SentinelUrl>, String> {
        let (tls, rest) = if let Some(r) = text.strip_prefix("rediss-sentinel://") {
            (true, r)
        } else if let Some(r) = text.strip_prefix("redis-sentinel://") {
            (false, r)
        } else {
            return Ok(None);
        };
        let (rest, master) = rest
            .rsplit_once('#')
            .ok_or("a redis-sentinel:// URL ends with #master-name")?;
        let master = decode(master)?;
        if master.is_empty() || master.chars().any(|c| c.is_whitespace() || c == ',') {
            return Err(format!("bad master name '{master}'"));
        }
        if rest.contains('?') {
            return Err("URL options (?...) are not supported; use the configuration".into());
        }
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let (hosts, db) = hosts.split_once('/').unwrap_or((hosts, ""));
        if !db.is_empty() && db != "0" {
            return Err(format!("database '{db}': the proxy uses database 0 only"));
        }
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                // Lettuce's form is `password@`; `user:password@` names an ACL user as well.
                let (user, pass) = match u.split_once(':') {
                    Some((user, pass)) => (decode(user)?, decode(pass)?),
                    None => (String::new(), decode(u)?),
                };
                (
                    (!user.is_empty()).then_some(user),
                    (!pass.is_empty()).then_some(pass),
                )
            }
        };
        let mut sentinels = Vec::new();
        for one in hosts.split(',') {
            sentinels.push(sentinel_host(one)?);
        }
        Ok(Some(SentinelUrl {
            sentinels,
            master,
            tls,
            user,
            password,
        }))
    }

    /// The member's name in logs, `INFO` and metrics: the URL without its password,
    /// `redis-sentinel://host:port,...#name`.
    pub fn name(&self) -> String {
        let scheme = if self.tls {
            "rediss-sentinel"
        } else {
            "redis-sentinel"
        };
        let hosts: Vec<String> = self.sentinels.iter().map(Endpoint::addr).collect();
        format!("{scheme}://{}#{}", hosts.join(","), self.master)
    }
}

/// A port: 1 to 65535 in decimal digits only (no sign, no spaces).
fn port_of(text: &str) -> Result<u16, String> {
    Some(text)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("bad port '{text}'"))
}

/// One `host[:port]` of a Sentinel list (IPv6 in brackets).
fn sentinel_host(text: &str) -> Result<Endpoint, String> {
    let (host, port) = if let Some(r) = text.strip_prefix('[') {
        let (h, after) = r
            .split_once(']')
            .ok_or("unclosed '[' in a Sentinel address")?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(format!("bad Sentinel address '{text}'")),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err("empty Sentinel host".into());
    }
    if host.contains(['[', ']']) || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("bad Sentinel host '{host}'"));
    }
    let port = match port {
        None => SENTINEL_PORT,
        Some(p) => port_of(p)?,
    };
    Ok(Endpoint {
        host: host.to_string(),
        port,
        tls: false,
        user: None,
        password: None,
    })
}

/// Splits `--backends` into members. Members are separated by `;` when the list holds one.
/// Otherwise by `,`, except that a Sentinel URL keeps its own comma-separated Sentinels up to
/// its `#master-name`, and a piece without a scheme that follows a cluster URL is one more of
/// its seeds. So `a:1,redis-sentinel://s1:26379,s2:26379#m,b:2` is three members,
/// `redis-cluster://a:1,b:2,redis://c:3` two, and a plain `host:port` after a cluster URL needs
/// `;` to stand on its own.
pub fn split_backends(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if list.contains(';') {
        out.extend(list.split(';').map(|s| s.trim().to_string()));
    } else {
        // A Sentinel URL whose `#master-name` has not come yet.
        let mut open = false;
        for piece in list.split(',').map(str::trim) {
            match out.last_mut() {
                Some(prev) if open || (!piece.contains("://") && is_cluster(prev)) => {
                    prev.push(',');
                    prev.push_str(piece);
                    open = open && !piece.contains('#');
                }
                _ => {
                    open = is_sentinel(piece) && !piece.contains('#');
                    out.push(piece.to_string());
                }
            }
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// The first two members of `members` that name the same master (both names, as logs give
/// them), if any: the same `host:port` (host without case), a cluster seed another member
/// also names, or a Sentinel another Sentinel member also asks for the same master name. A
/// master listed twice would vote twice, so a "quorum" could be fewer masters than it says.
pub fn listed_twice(members: &[MemberUrl]) -> Option<(String, String)> {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, m) in members.iter().enumerate() {
        let places: Vec<String> = match m {
            MemberUrl::Standalone(e) => vec![place(e)],
            MemberUrl::Cluster(seeds) => seeds.iter().map(place).collect(),
            MemberUrl::Sentinel(s) => s
                .sentinels
                .iter()
                .map(|e| format!("{}#{}", place(e), s.master))
                .collect(),
        };
        for p in places {
            match seen.get(&p) {
                Some(&j) if j != i => return Some((members[j].name(), m.name())),
                _ => {
                    seen.insert(p, i);
                }
            }
        }
    }
    None
}

/// A Sentinel that a Sentinel member lists twice (as `host:port`), if any: each Sentinel
/// counts once toward the majority of the Sentinels listed, and one listed twice would count
/// twice (two entries of three, a "majority" alone). Compared by place, as [`listed_twice`].
pub fn sentinel_listed_twice(member: &MemberUrl) -> Option<String> {
    let MemberUrl::Sentinel(s) = member else {
        return None;
    };
    let mut seen = std::collections::HashSet::new();
    s.sentinels
        .iter()
        .find(|e| !seen.insert(place(e)))
        .map(Endpoint::addr)
}

/// Where `e` listens, in one spelling per place: an IP address in its canonical form (an
/// IPv4-mapped IPv6 address as the IPv4 one), a host name in lower case without a final dot,
/// and this host's loopback under every name it goes by (`localhost`, `127.0.0.1`, `::1`: a
/// Redis bound to loopback listens on both, and `localhost` resolves to either).
fn place(e: &Endpoint) -> String {
    let host = e.host.trim_end_matches('.').to_ascii_lowercase();
    let host = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => {
            let ip = match ip {
                std::net::IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
                v4 => v4,
            };
            let loopback = ip == std::net::IpAddr::from([127, 0, 0, 1])
                || ip == std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
            if loopback {
                "localhost".to_string()
            } else {
                ip.to_string()
            }
        }
        Err(_) => host,
    };
    format!("{host}:{}", e.port)
}

/// True for a cluster URL, whose seeds follow it.
fn is_cluster(text: &str) -> bool {
    text.starts_with("redis-cluster://") || text.starts_with("rediss-cluster://")
}

/// True for a Sentinel URL.
fn is_sentinel(text: &str) -> bool {
    text.starts_with("redis-sentinel://") || text.starts_with("rediss-sentinel://")
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
    match SentinelUrl::parse(text) {
        Ok(Some(s)) => {
            let name = s.name();
            let (scheme, rest) = name.split_once("://").unwrap_or(("", &name));
            return match (&s.user, &s.password) {
                (Some(u), Some(_)) => format!("{scheme}://{u}:<redacted>@{rest}"),
                (None, Some(_)) => format!("{scheme}://<redacted>@{rest}"),
                (Some(u), None) => format!("{scheme}://{u}@{rest}"),
                (None, None) => name,
            };
        }
        Ok(None) => {}
        Err(_) if text.contains('@') => return "<unparsable backend, redacted>".to_string(),
        Err(_) => return text.to_string(),
    }
    if let Ok(MemberUrl::Cluster(seeds)) = MemberUrl::parse(text) {
        let name = MemberUrl::Cluster(seeds.clone()).name();
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
        let m = MemberUrl::parse("redis-cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2:7001").unwrap();
        let MemberUrl::Cluster(seeds) = &m else {
            panic!("{m:?}")
        };
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds[1].addr(), "10.0.0.2:7001");
        assert_eq!(seeds[1].password.as_deref(), Some("p@ss"));
        assert!(!seeds[0].tls);
        assert_eq!(m.name(), "redis-cluster://10.0.0.1:7000,10.0.0.2:7001");
        let m = MemberUrl::parse("rediss-cluster://h:1").unwrap();
        assert!(matches!(&m, MemberUrl::Cluster(s) if s[0].tls));
        assert!(MemberUrl::parse("redis-cluster://").is_err());
        assert!(MemberUrl::parse("redis-cluster://h:0").is_err());
        assert!(matches!(
            MemberUrl::parse("h:1"),
            Ok(MemberUrl::Standalone(_))
        ));
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

    #[test]
    fn sentinel_urls_in_lettuces_form() {
        let s = SentinelUrl::parse("redis-sentinel://s1:26380,s2,[::1]:5000#mymaster")
            .unwrap()
            .unwrap();
        let addrs: Vec<String> = s.sentinels.iter().map(Endpoint::addr).collect();
        assert_eq!(addrs, ["s1:26380", "s2:26379", "[::1]:5000"]);
        assert_eq!(s.master, "mymaster");
        assert!(!s.tls);
        assert_eq!((s.user, s.password), (None, None));
        let s = SentinelUrl::parse("rediss-sentinel://p%40ss@s1:1/0#m")
            .unwrap()
            .unwrap();
        assert!(s.tls);
        assert_eq!(s.password.as_deref(), Some("p@ss"));
        assert_eq!(s.user, None);
        let s = SentinelUrl::parse("redis-sentinel://locker:pw@s1:1#m")
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref()),
            (Some("locker"), Some("pw"))
        );
        assert_eq!(SentinelUrl::parse("redis://h:1").unwrap(), None);
        for bad in [
            "redis-sentinel://s1:1",
            "redis-sentinel://s1:1#",
            "redis-sentinel://s1:0#m",
            "redis-sentinel://s1:1,#m",
            "redis-sentinel://s1:1/2#m",
            "redis-sentinel://s1:1?timeout=1#m",
            "redis-sentinel://[::1#m",
        ] {
            assert!(MemberUrl::parse(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            MemberUrl::parse("h:1"),
            Ok(MemberUrl::Standalone(_))
        ));
        assert!(matches!(
            MemberUrl::parse("redis-sentinel://h#m"),
            Ok(MemberUrl::Sentinel(_))
        ));
    }

    #[test]
    fn sentinel_passwords_are_never_printed() {
        let text = "redis-sentinel://u:hunter2@s1:1,s2:2#m";
        assert_eq!(redact(text), "redis-sentinel://u:<redacted>@s1:1,s2:2#m");
        assert_eq!(
            redact("rediss-sentinel://hunter2@s1:1#m"),
            "rediss-sentinel://<redacted>@s1:1#m"
        );
        assert_eq!(
            redact("redis-sentinel://s1#m"),
            "redis-sentinel://s1:26379#m"
        );
        assert!(!redact("redis-sentinel://hunter2@s1:bad#m").contains("hunter2"));
        let s = SentinelUrl::parse(text).unwrap().unwrap();
        assert!(!format!("{s:?}").contains("hunter2"));
    }

    #[test]
    fn hostile_member_urls_are_clear_errors() {
        for bad in [
            "h:+1",
            "h: 1",
            "h:65536",
            "h:-1",
            "h:",
            ":1",
            "[:1",
            "[]:1",
            "[::1]",
            "h x:1",
            "redis://h:99999999999999999999",
            "redis-cluster://",
            "redis-cluster://,",
            "redis-cluster://h:1,h:0",
            "redis-sentinel://#m",
            "redis-sentinel://s1:+1#m",
            "redis-sentinel://s]:1#m",
            "rediss-sentinel://a:1#m#n",
            "foo://h:1",
        ] {
            let e = MemberUrl::parse(bad).expect_err(bad);
            assert!(!e.is_empty(), "{bad}");
        }
        for (good, name) in [
            ("[::1]:6379", "[::1]:6379"),
            ("::1:6379", "[::1]:6379"),
            ("redis://[fe80::1]:1/0", "[fe80::1]:1"),
            (
                "redis-sentinel://[::1],[::2]:5#m",
                "redis-sentinel://[::1]:26379,[::2]:5#m",
            ),
            (
                "redis-cluster://[::1]:7000,h:7001",
                "redis-cluster://[::1]:7000,h:7001",
            ),
        ] {
            assert_eq!(MemberUrl::parse(good).expect(good).name(), name);
        }
        // A huge list parses member by member, without anything quadratic.
        let many: Vec<String> = (1..=20_000).map(|p| format!("h:{p}")).collect();
        let members: Vec<MemberUrl> = split_backends(&many.join(","))
            .iter()
            .map(|m| MemberUrl::parse(m).unwrap())
            .collect();
        assert_eq!(members.len(), 20_000);
        assert_eq!(listed_twice(&members), None);
    }

    #[test]
    fn a_master_listed_twice_is_found() {
        let twice = |list: &str| {
            let members: Vec<MemberUrl> = split_backends(list)
                .iter()
                .map(|m| MemberUrl::parse(m).unwrap())
                .collect();
            listed_twice(&members)
        };
        assert_eq!(twice("a:1,b:1,c:1"), None);
        assert_eq!(
            twice("a:1,b:1,A:1"),
            Some(("a:1".to_string(), "A:1".to_string()))
        );
        assert!(twice("a:1;redis://a:1").is_some());
        assert!(twice("[::1]:1;::1:1").is_some());
        assert!(twice("redis-cluster://a:1,b:2;redis-cluster://c:3,b:2").is_some());
        assert!(twice("a:1;redis-cluster://a:1").is_some());
        assert!(twice("redis-sentinel://s:1,t:1#m;redis-sentinel://t:1#m").is_some());
        // Two master names on the same Sentinels are two primaries; a seed or Sentinel listed
        // twice inside one member is still one member.
        assert_eq!(twice("redis-sentinel://s:1#m;redis-sentinel://s:1#n"), None);
        assert_eq!(twice("redis-cluster://a:1,a:1;b:1"), None);
    }

    #[test]
    fn a_backends_list_keeps_a_sentinel_url_whole() {
        assert_eq!(
            split_backends("a:1, redis-sentinel://s1:1,s2:2#m ,b:2,,rediss-sentinel://x@s3#n"),
            [
                "a:1",
                "redis-sentinel://s1:1,s2:2#m",
                "b:2",
                "rediss-sentinel://x@s3#n"
            ]
        );
        assert_eq!(split_backends("a:1,b:2"), ["a:1", "b:2"]);
        // An unterminated Sentinel list swallows the rest, and then fails to parse.
        let open = split_backends("redis-sentinel://s1:1,b:2");
        assert_eq!(open, ["redis-sentinel://s1:1,b:2"]);
        assert!(MemberUrl::parse(&open[0]).is_err());
    }
}
