//! The proxy's script cache: SHA1 → script (its text, meaning and refusal reason), bounded in
//! bytes, oldest forgotten first. Kept apart from the meaning of a script (the parent module)
//! and from the proxy's own script texts.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use super::meaning::{Declared, Meaning, Script, classify, sha1_hex};
use crate::config::ScriptDecl;
use crate::lua;

/// What one cached script is counted as besides its text (its SHA1, meaning and the map's
/// own bookkeeping), so a flood of tiny scripts is bounded too.
const ENTRY_OVERHEAD: usize = 256;

/// The proxy's script cache, shared by all clients, bounded in bytes.
///
/// When adding a script would pass the budget, the oldest scripts are forgotten first. That
/// never breaks a client: `EVAL` carries its script and always runs it (cached or not),
/// `SCRIPT LOAD` always succeeds for a script that fits the budget, and `EVALSHA` of a
/// forgotten script answers `NOSCRIPT`, on which every client library sends the script again.
/// Cached texts are copies, so no client's request buffer stays alive with them.
pub struct ScriptCache {
    inner: RwLock<Cached>,
    declared: Vec<Declared>,
    budget: usize,
}

#[derive(Default)]
struct Cached {
    map: HashMap<String, Arc<Script>>,
    /// SHA1s in the order they were added, oldest first.
    order: std::collections::VecDeque<String>,
    bytes: usize,
}

impl ScriptCache {
    /// An empty cache of at most `budget` bytes that knows the meanings declared in the
    /// configuration.
    pub fn new(declared: &[ScriptDecl], budget: usize) -> ScriptCache {
        ScriptCache {
            inner: RwLock::default(),
            declared: declared.iter().map(Declared::from_config).collect(),
            budget,
        }
    }

    /// Hashes and classifies `body` without caching it.
    pub fn script(&self, body: Bytes) -> Script {
        let sha = sha1_hex(&body);
        let meaning = classify(&body, &sha, &self.declared);
        let refused = if meaning == Meaning::Unknown {
            lua::refusal(&body)
        } else {
            String::new()
        };
        Script {
            body,
            sha,
            meaning,
            refused,
        }
    }

    /// Adds a script (from `SCRIPT LOAD` or `EVAL`), forgetting the oldest ones if the budget
    /// needs it, and returns it. `None` only for a script larger than the whole budget.
    pub fn insert(&self, body: Bytes) -> Option<Arc<Script>> {
        let sha = sha1_hex(&body);
        if let Some(s) = self.get(&sha) {
            return Some(s);
        }
        let cost = body.len() + ENTRY_OVERHEAD;
        if cost > self.budget {
            return None;
        }
        // A copy: `body` is a slice of the client's whole request buffer.
        let script = Arc::new(self.script(Bytes::copy_from_slice(&body)));
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = inner.map.get(&sha) {
            return Some(s.clone());
        }
        while inner.bytes + cost > self.budget {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.map.remove(&old) {
                inner.bytes -= gone.body.len() + ENTRY_OVERHEAD;
            }
        }
        inner.bytes += cost;
        inner.order.push_back(sha.clone());
        inner.map.insert(sha, script.clone());
        Some(script)
    }

    /// Looks a script up by SHA1 (any case).
    pub fn get(&self, sha: &str) -> Option<Arc<Script>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner
            .map
            .get(sha)
            .or_else(|| inner.map.get(&sha.to_ascii_lowercase()))
            .cloned()
    }

    /// Forgets every script.
    pub fn flush(&self) {
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = Cached::default();
    }

    /// Number of cached scripts.
    pub fn len(&self) -> usize {
        self.inner.read().map(|m| m.map.len()).unwrap_or(0)
    }

    /// Bytes the cached scripts count for (texts plus a fixed overhead each).
    pub fn bytes(&self) -> usize {
        self.inner.read().map(|m| m.bytes).unwrap_or(0)
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
    fn cache_finds_by_sha() {
        let cache = ScriptCache::new(&[], 1 << 20);
        let s = cache.insert(Bytes::from_static(b"return 1")).unwrap();
        assert!(cache.get(&s.sha).is_some());
        assert!(cache.get(&s.sha.to_uppercase()).is_some());
        cache.flush();
        assert!(cache.get(&s.sha).is_none());
    }

    #[test]
    fn the_cache_forgets_its_oldest_scripts_to_stay_within_its_budget() {
        let budget = 10 * (1000 + ENTRY_OVERHEAD);
        let cache = ScriptCache::new(&[], budget);
        let script = |i: usize| Bytes::from(format!("return {i} --{}", "x".repeat(990)));
        let shas: Vec<String> = (0..25)
            .map(|i| cache.insert(script(i)).expect("fits").sha.clone())
            .collect();
        assert!(cache.bytes() <= budget, "{}", cache.bytes());
        assert!(cache.get(&shas[0]).is_none(), "the oldest is gone");
        assert!(cache.get(&shas[24]).is_some(), "the newest stays");
        // A script larger than the whole budget is not cached (EVAL still runs it).
        assert!(cache.insert(Bytes::from(vec![b' '; budget])).is_none());
        // Cached text is a copy, not a slice of the request that carried it.
        let frame = Bytes::from(vec![b'-'; 64]);
        let s = cache.insert(frame.slice(0..10)).unwrap();
        assert_ne!(s.body.as_ptr(), frame.as_ptr());
    }
}
