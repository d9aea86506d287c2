//! Client users, as Redis ACL: who may log in (`AUTH [user] password`, `HELLO 3 AUTH user
//! password`), which keys each user may lock, read or release, and which publish/subscribe
//! channels it may use.
//!
//! The `password` setting is the `default` user (every key, every channel); `[[users]]` add
//! named users, each limited to the keys and channels matching its glob patterns. As in Redis 7
//! (`acl-pubsub-default resetchannels`), a named user given no channel patterns may use no
//! channel. Passwords are kept only as SHA-256 digests
//! (the form Redis's `ACL GETUSER` shows, and `password_sha256` accepts), and a login compares
//! digests in time that depends on neither password.

use std::sync::Arc;

use ring::digest::{SHA256, digest};

use crate::config::{Config, ConfigError};
use crate::error::Error;

/// What a user is granted of one kind of name (keys, or channels): every name, or those that
/// match its glob patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patterns {
    /// Every name (the `default` user, or a user with `~*` / `&*`).
    All,
    /// Only names matching one of these glob patterns.
    Only(Arc<[Vec<u8>]>),
}

impl Patterns {
    /// True when `name` (a key, or a channel) is one the user may touch.
    pub fn allows(&self, name: &[u8]) -> bool {
        match self {
            Patterns::All => true,
            Patterns::Only(patterns) => patterns.iter().any(|p| glob(p, name)),
        }
    }

    /// True when the user may `PSUBSCRIBE` to `pattern`: as Redis 7 decides it, only a user
    /// with every channel, or one of whose own patterns is exactly `pattern` (a pattern is
    /// never matched as if it were a channel name: `a:*` does not allow `*`).
    pub fn allows_pattern(&self, pattern: &[u8]) -> bool {
        match self {
            Patterns::All => true,
            Patterns::Only(patterns) => patterns.iter().any(|p| p.as_slice() == pattern),
        }
    }
}

/// What a logged-in user may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The keys it may lock, read or release.
    pub keys: Patterns,
    /// The channels it may subscribe and publish to.
    pub channels: Patterns,
}

impl Access {
    /// Everything: the `default` user.
    pub fn all() -> Access {
        Access {
            keys: Patterns::All,
            channels: Patterns::All,
        }
    }
}

/// One user who may log in.
struct Account {
    name: String,
    sha256: [u8; 32],
    access: Access,
    /// The user's own lease patterns, when it has them.
    lease_keys: Option<Patterns>,
}

/// Key glob patterns as written in the configuration (a leading `~` accepted), as the keys
/// they allow: exactly those that match one of them. No patterns allow no key; `*` every key.
pub fn patterns(written: &[String]) -> Patterns {
    grant(written, '~')
}

/// Channel glob patterns as written in the configuration (a leading `&` accepted, as Redis
/// writes them in ACL rules). No patterns allow no channel; `*` every channel.
pub fn channel_patterns(written: &[String]) -> Patterns {
    grant(written, '&')
}

/// Glob patterns, each with Redis's ACL sigil (`~` for keys, `&` for channels) or without.
fn grant(written: &[String], sigil: char) -> Patterns {
    let patterns: Vec<Vec<u8>> = written
        .iter()
        .map(|k| k.strip_prefix(sigil).unwrap_or(k).as_bytes().to_vec())
        .collect();
    if patterns.iter().any(|p| p == b"*") {
        Patterns::All
    } else {
        Patterns::Only(patterns.into())
    }
}

/// Every user, built once from the configuration.
pub struct Accounts {
    users: Vec<Account>,
}

impl Accounts {
    /// Builds the users from `password` (the `default` user) and `[[users]]`, reading password
    /// files; errors name the user and what is wrong.
    pub fn from_config(config: &Config) -> Result<Accounts, ConfigError> {
        let bad = |m: String| ConfigError::Invalid(m);
        let mut users = Vec::new();
        if let Some(p) = &config.password {
            users.push(Account {
                name: "default".into(),
                sha256: sha256(p.as_bytes()),
                access: Access::all(),
                lease_keys: None,
            });
        }
        for u in &config.users {
            if u.name.is_empty() || u.name.contains(char::is_whitespace) {
                return Err(bad(format!("users: bad user name '{}'", u.name)));
            }
            if users.iter().any(|a: &Account| a.name == u.name) {
                return Err(bad(format!(
                    "users: '{}' is defined twice (`password` is the user 'default')",
                    u.name
                )));
            }
            let sha256 = match (&u.password, &u.password_sha256, &u.password_file) {
                (Some(p), None, None) => sha256(p.as_bytes()),
                (None, Some(h), None) => parse_hex(h).ok_or_else(|| {
                    bad(format!(
                        "users '{}': password_sha256 must be 64 hex digits",
                        u.name
                    ))
                })?,
                (None, None, Some(f)) => {
                    let text = std::fs::read_to_string(f).map_err(|e| {
                        bad(format!(
                            "users '{}': cannot read password_file {f}: {e}",
                            u.name
                        ))
                    })?;
                    sha256(text.trim_end_matches(['\r', '\n']).as_bytes())
                }
                _ => {
                    return Err(bad(format!(
                        "users '{}': set exactly one of password, password_sha256, password_file",
                        u.name
                    )));
                }
            };
            users.push(Account {
                name: u.name.clone(),
                sha256,
                access: Access {
                    keys: patterns(&u.keys),
                    channels: channel_patterns(&u.channels),
                },
                lease_keys: u.lease_keys.as_deref().map(self::patterns),
            });
        }
        Ok(Accounts { users })
    }

    /// The lease patterns of user `name` (`None`: `default`) when it has its own.
    pub fn lease_keys(&self, name: Option<&[u8]>) -> Option<Patterns> {
        let name = name.unwrap_or(b"default");
        self.users
            .iter()
            .find(|a| a.name.as_bytes() == name)
            .and_then(|a| a.lease_keys.clone())
    }

    /// True when some user has lease patterns of its own.
    pub fn any_lease_keys(&self) -> bool {
        self.users.iter().any(|a| a.lease_keys.is_some())
    }

    /// True when clients must log in before other commands (some user has a password).
    pub fn required(&self) -> bool {
        !self.users.is_empty()
    }

    /// Checks `AUTH [user] password` as Redis 7 does; `None` for the user means `default`.
    /// On success, what the user may touch; on failure, Redis's error
    /// ([`Error::WrongPass`] for an unknown user or a wrong password).
    ///
    /// With no users configured, `default` is Redis's `nopass` user: any password logs in, and
    /// the one-argument form is refused with Redis's hint. With users but no `password`, the
    /// `default` user is disabled. Every configured user's digest is compared, whoever asks, so
    /// the time taken tells nothing about names or passwords.
    pub fn login(&self, user: Option<&[u8]>, given: &[u8]) -> Result<Access, Error> {
        if self.users.is_empty() {
            return match user {
                None => Err(Error::AuthWithoutPassword),
                Some(b"default") => Ok(Access::all()),
                Some(_) => Err(Error::WrongPass),
            };
        }
        let name = user.unwrap_or(b"default");
        let given = sha256(given);
        let mut found = None;
        for a in &self.users {
            let same = same_digest(&a.sha256, &given);
            if same & (a.name.as_bytes() == name) {
                found = Some(a.access.clone());
            }
        }
        found.ok_or(Error::WrongPass)
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, data).as_ref());
    out
}

/// Compares two digests looking at every byte, whatever the first difference.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn parse_hex(h: &str) -> Option<[u8; 32]> {
    let h = h.trim();
    if h.len() != 64 || !h.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Redis's glob (`stringmatchlen`): `*`, `?`, `[abc]`, `[a-z]`, `[^x]` and `\` escapes, over
/// bytes. Iterative: a `*` remembers where to resume, so no input makes it recurse or blow up.
pub fn glob(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, i));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, s[i])
                        && matched
                    {
                        p = next;
                        i += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == s[i] {
                        p += 2;
                        i += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[i] {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp + 1;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[start] == b'['`; returns whether it
/// matched and where the pattern continues. An unclosed class runs to the end, as in Redis.
fn class(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut p = start + 1;
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut matched = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            matched |= pattern[p + 1] == c;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (lo, hi) = (
                pattern[p].min(pattern[p + 2]),
                pattern[p].max(pattern[p + 2]),
            );
            matched |= (lo..=hi).contains(&c);
            p += 3;
        } else {
            matched |= pattern[p] == c;
            p += 1;
        }
    }
    Some((matched != negate, (p + 1).min(pattern.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis() {
        assert!(glob(b"lock:*", b"lock:a"));
        assert!(glob(b"lock:*", b"lock:"));
        assert!(!glob(b"lock:*", b"other:a"));
        assert!(glob(b"*", b""));
        assert!(glob(b"a?c", b"abc"));
        assert!(!glob(b"a?c", b"ac"));
        assert!(glob(b"l[oa]ck", b"lack"));
        assert!(!glob(b"l[^o]ck", b"lock"));
        assert!(glob(b"k[a-c]", b"kb"));
        assert!(glob(b"a\\*", b"a*"));
        assert!(!glob(b"a\\*", b"ab"));
        assert!(glob(b"*a*b*c", b"xxaxxbxxbc"));
        // Many stars over a long input that does not match finish at once.
        assert!(!glob(b"*a*a*a*a*a*b", &[b'a'; 5_000]));
    }

    fn config(text: &str) -> Config {
        Config::from_toml(text).unwrap()
    }

    #[test]
    fn users_log_in_with_their_own_password_only() {
        let hex = "a8f5f167f44f4964e6c998dee827110c3b6a4c33c7d3c1b2c6a5b8b4a5b6c7d8";
        let c = config(&format!(
            "password = \"root\"\n[[users]]\nname = \"locker\"\npassword = \"pw\"\nkeys = [\"~lock:*\"]\n\
             [[users]]\nname = \"h\"\npassword_sha256 = \"{hex}\"\nkeys = [\"*\"]\n"
        ));
        let a = Accounts::from_config(&c).unwrap();
        assert!(a.required());
        assert_eq!(a.login(None, b"root"), Ok(Access::all()));
        assert_eq!(a.login(Some(b"default"), b"root"), Ok(Access::all()));
        assert_eq!(a.login(Some(b"locker"), b"root"), Err(Error::WrongPass));
        assert_eq!(a.login(Some(b"nobody"), b"pw"), Err(Error::WrongPass));
        let keys = a.login(Some(b"locker"), b"pw").unwrap().keys;
        assert!(keys.allows(b"lock:a"));
        assert!(!keys.allows(b"other:a"));
        assert_eq!(a.login(Some(b"h"), b"x"), Err(Error::WrongPass));
    }

    #[test]
    fn a_password_file_is_read_and_passwords_are_redacted() {
        let path = std::env::temp_dir().join(format!("redlock-acl-{}", std::process::id()));
        std::fs::write(&path, "from-a-file\n").unwrap();
        let c = config(&format!(
            "[[users]]\nname = \"f\"\npassword_file = {:?}\nkeys = [\"a*\"]\n\
             [[users]]\nname = \"p\"\npassword = \"inline-secret\"\n",
            path.display().to_string()
        ));
        let a = Accounts::from_config(&c).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(a.login(Some(b"f"), b"from-a-file").is_ok());
        // A user with no key patterns may touch no key.
        let none = a.login(Some(b"p"), b"inline-secret").unwrap();
        assert!(!none.keys.allows(b"a"));
        // Nor any channel (Redis 7's `resetchannels` default).
        assert!(!none.channels.allows(b"a"));
        let shown = format!("{c:?}");
        assert!(!shown.contains("inline-secret"), "{shown}");
        assert!(refused(
            "[[users]]\nname = \"x\"\npassword_file = \"/nonexistent\"\n"
        ));
    }

    /// Whether the configuration `toml` is refused.
    fn refused(toml: &str) -> bool {
        Accounts::from_config(&config(toml)).is_err()
    }

    #[test]
    fn a_password_sha256_is_the_digest_redis_shows() {
        // `ACL SETUSER u >pw` then `ACL GETUSER u` shows this digest.
        let hex = "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4";
        let c = config(&format!(
            "[[users]]\nname = \"u\"\npassword_sha256 = \"{hex}\"\nkeys = [\"lock:*\"]\n"
        ));
        let a = Accounts::from_config(&c).unwrap();
        assert!(a.login(Some(b"u"), b"pw").is_ok());
        // No `password`: the default user is disabled.
        assert_eq!(a.login(None, b""), Err(Error::WrongPass));
        assert!(refused(
            "[[users]]\nname = \"u\"\npassword_sha256 = \"zz\"\n"
        ));
        assert!(refused(
            "[[users]]\nname = \"u\"\npassword = \"a\"\npassword_sha256 = \"zz\"\n"
        ));
    }

    #[test]
    fn channels_are_granted_as_redis_7_grants_them() {
        let c = config(
            "password = \"root\"\n[[users]]\nname = \"a\"\npassword = \"pa\"\nkeys = [\"a:*\"]\n\
             channels = [\"&redisson_lock__channel:{a:*}\", \"news.*\"]\n\
             [[users]]\nname = \"all\"\npassword = \"pall\"\nchannels = [\"*\"]\n",
        );
        let a = Accounts::from_config(&c).unwrap();
        let ch = a.login(Some(b"a"), b"pa").unwrap().channels;
        assert!(ch.allows(b"redisson_lock__channel:{a:lock}"));
        assert!(!ch.allows(b"redisson_lock__channel:{b:lock}"));
        assert!(ch.allows(b"news.art"));
        assert!(!ch.allows(b"redlock-proxy:lease-lost"));
        // A pattern subscription needs one of the user's patterns exactly.
        assert!(ch.allows_pattern(b"news.*"));
        assert!(!ch.allows_pattern(b"news.a*"));
        assert!(!ch.allows_pattern(b"*"));
        let all = a.login(Some(b"all"), b"pall").unwrap();
        assert_eq!(all.channels, Patterns::All);
        assert!(all.channels.allows_pattern(b"*"));
        assert!(!all.keys.allows(b"a:x"), "channels grant no key");
        // The default user keeps every channel.
        assert_eq!(a.login(None, b"root").unwrap().channels, Patterns::All);
    }
}
