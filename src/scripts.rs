//! What a Lua script means.
//!
//! Clients send lock scripts with `EVAL` or load them and call `EVALSHA`. The proxy keeps its
//! own script cache (SHA1 of the exact text → script), so `EVALSHA` works whatever the masters
//! remember, and recognises scripts by *normalised content*: case folded, quotes unified, white
//! space and semicolons dropped. That way a reworded or CRLF-edited copy of a known script keeps
//! its meaning. The masters never run client scripts that the proxy understands; they run the
//! proxy's own canonical scripts below, sent with `EVAL` so that a restarted master needs no
//! reloading.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

/// What a recognised script does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// Compare-and-delete on `KEYS[1]` with token `ARGV[1]`, answering 1 or 0.
    Release,
    /// Not understood: handled by the `unknown_scripts` policy.
    Unknown,
}

/// A script the proxy has seen.
#[derive(Debug)]
pub struct Script {
    /// The exact text the client sent.
    pub body: Bytes,
    /// Lower-case hex SHA1 of `body`, as Redis computes it.
    pub sha: String,
    /// What it does.
    pub meaning: Meaning,
}

impl Script {
    /// Hashes and classifies `body`.
    pub fn new(body: Bytes) -> Script {
        let sha = sha1_hex(&body);
        let meaning = recognise(&body);
        Script { body, sha, meaning }
    }
}

/// Lower-case hex SHA1, the name Redis gives a script.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// Folds the spelling differences that do not change a script's meaning.
pub fn normalise(body: &[u8]) -> Vec<u8> {
    body.iter()
        .filter(|c| !c.is_ascii_whitespace() && **c != b';')
        .map(|c| match c {
            b'\'' => b'"',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Known scripts, each written once in a readable form; they are normalised before matching.
const KNOWN: &[(&str, Meaning)] = &[
    (
        r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#,
        Meaning::Release,
    ),
    (
        r#"if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("del",KEYS[1]) else return 0 end"#,
        Meaning::Release,
    ),
    (
        r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) end return 0"#,
        Meaning::Release,
    ),
];

/// Classifies a script by its normalised text.
pub fn recognise(body: &[u8]) -> Meaning {
    let n = normalise(body);
    KNOWN
        .iter()
        .find(|(text, _)| normalise(text.as_bytes()) == n)
        .map(|(_, m)| *m)
        .unwrap_or(Meaning::Unknown)
}

/// The proxy's own release script, run on the masters: 1 deleted, 0 held by another token,
/// -1 no such key.
pub const RELEASE: &str = "local v = redis.call('get', KEYS[1]) \
    if v == false then return -1 elseif v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// Most scripts kept; past this, scripts seen only through `EVAL` are not cached.
const CACHE_LIMIT: usize = 10_000;

/// The proxy's script cache, shared by all clients.
#[derive(Default)]
pub struct ScriptCache {
    map: RwLock<HashMap<String, Arc<Script>>>,
}

impl ScriptCache {
    /// Adds a script (from `SCRIPT LOAD` or `EVAL`) and returns it. Returns `None` when the
    /// cache is full and the script is new.
    pub fn insert(&self, body: Bytes) -> Option<Arc<Script>> {
        let sha = sha1_hex(&body);
        if let Some(s) = self.get(&sha) {
            return Some(s);
        }
        let script = Arc::new(Script::new(body));
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.len() >= CACHE_LIMIT {
            return None;
        }
        Some(map.entry(sha).or_insert(script).clone())
    }

    /// Looks a script up by SHA1 (any case).
    pub fn get(&self, sha: &str) -> Option<Arc<Script>> {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.get(sha)
            .or_else(|| map.get(&sha.to_ascii_lowercase()))
            .cloned()
    }

    /// Forgets every script.
    pub fn flush(&self) {
        self.map.write().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Number of cached scripts.
    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    /// True when no script is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_matches_redis() {
        // SHA1 of the empty string, as `SCRIPT LOAD ""` answers.
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    #[test]
    fn release_is_recognised_whatever_the_spelling() {
        for text in [
            "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return redis.call(\"del\",KEYS[1]) else return 0 end",
            "if redis.call('get', KEYS[1]) == ARGV[1] then\r\n  return redis.call('del', KEYS[1])\r\nelse\r\n  return 0\r\nend",
            "IF REDIS.CALL('GET',KEYS[1])==ARGV[1] THEN RETURN REDIS.CALL('DEL',KEYS[1]) ELSE RETURN 0 END;",
            "if ARGV[1] == redis.call('get', KEYS[1]) then return redis.call('del', KEYS[1]) else return 0 end",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Release, "{text}");
        }
    }

    #[test]
    fn other_scripts_are_unknown() {
        assert_eq!(
            recognise(b"return redis.call('del', KEYS[1])"),
            Meaning::Unknown
        );
        assert_eq!(
            recognise(b"if redis.call('get',KEYS[1]) ~= ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"),
            Meaning::Unknown
        );
    }

    #[test]
    fn cache_finds_by_sha() {
        let cache = ScriptCache::default();
        let s = cache.insert(Bytes::from_static(b"return 1")).unwrap();
        assert!(cache.get(&s.sha).is_some());
        assert!(cache.get(&s.sha.to_uppercase()).is_some());
        cache.flush();
        assert!(cache.get(&s.sha).is_none());
    }
}
