//! What a Lua script means.
//!
//! Clients send lock scripts with `EVAL` or load them and call `EVALSHA`. The proxy keeps its
//! own script cache (SHA1 of the exact text → script), so `EVALSHA` works whatever the masters
//! remember, and recognises scripts by *what they do* (see [`crate::lua`]): the script is run
//! symbolically from every starting state of its keys, and its behaviour table must match one
//! lock operation exactly. Spelling (comments, spacing, quotes, local aliases, `if`/`else`
//! forms, early returns, `pcall`, `unlink`, ...) does not matter.
//!
//! A recognised script becomes a [`LockScript`]: one of the operations in [`Op`], where its
//! token and TTL sit in `ARGV`, whether it works on one key or on all of `KEYS`, and the reply
//! shape its library expects ([`Answer`]). A re-entrant hash lock's script (Redisson's `RLock`)
//! becomes a [`HashScript`] instead: one of [`HashOp`], with where its field, TTL, publish and
//! unlock latch sit. The masters never run client scripts that the proxy
//! understands; they run the proxy's canonical scripts below ([`ACQUIRE`], [`EXTEND`],
//! [`RELEASE`]), sent with `EVAL`, so that a restarted master that forgot every script needs no
//! reloading. Operators can declare the meaning of their own scripts in the configuration.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::config::ScriptDecl;
use crate::lockop::{Choice, HashScript, LockScript, PlainSet, TtlUnit, WriteUnless};
use crate::lua;

/// What a script does.
// Built once per script and kept behind an `Arc` in the cache: the size is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meaning {
    /// A lock operation the proxy runs as a quorum operation.
    Lock(LockScript),
    /// A hash-lock operation the proxy runs as a quorum operation.
    Hash(HashScript),
    /// One plain command whatever the key held, run as that command (see [`PlainSet`]).
    Plain(PlainSet),
    /// A read–write or fair lock operation (Redisson's `RReadWriteLock`, `RFairLock`): the
    /// client's script runs on every master and the quorum decides (see `lua/redisson.rs`).
    Redisson(lua::redisson::RedissonScript),
    /// A constant written unless the key holds it, run as `SET key c IFNE c PX ttl` (see
    /// [`WriteUnless`]).
    Unless(WriteUnless),
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
    /// Why it is not understood (empty when it is): see [`lua::refusal`].
    pub refused: String,
}

/// Lower-case hex SHA1, the name Redis gives a script.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// A script meaning declared in the configuration, matched by SHA1 or by the canonical form of
/// its syntax tree (see [`lua::canonical`]).
#[derive(Debug, Clone)]
struct Declared {
    sha: Option<String>,
    canonical: Option<String>,
    meaning: LockScript,
}

impl Declared {
    fn from_config(d: &ScriptDecl) -> Declared {
        let op = d.meaning;
        Declared {
            sha: d.sha.as_ref().map(|s| s.to_ascii_lowercase()),
            canonical: d.text.as_ref().and_then(|t| lua::canonical(t.as_bytes())),
            meaning: LockScript {
                choice: Choice::Always(op),
                token_arg: d.token_arg,
                ttl_arg: d.ttl_arg,
                unit: TtlUnit::Millis,
                all_keys: d.all_keys,
                params_in_keys: false,
                token_literal: None,
                ttl_literal: None,
                answer: d.reply,
                signal: None,
                announce: None,
                argv_count: None,
                keys_count: None,
            },
        }
    }
}

/// Classifies a script: declared meanings first (by SHA1, then by syntax tree), then by what
/// the script does (see [`crate::lua`]).
fn classify(body: &[u8], sha: &str, declared: &[Declared]) -> Meaning {
    if let Some(d) = declared.iter().find(|d| d.sha.as_deref() == Some(sha)) {
        return Meaning::Lock(d.meaning.clone());
    }
    if declared.iter().any(|d| d.canonical.is_some())
        && let Some(canonical) = lua::canonical(body)
        && let Some(d) = declared
            .iter()
            .find(|d| d.canonical.as_deref() == Some(canonical.as_str()))
    {
        return Meaning::Lock(d.meaning.clone());
    }
    recognise(body)
}

/// Classifies a script by its content alone (no declared meanings).
pub fn recognise(body: &[u8]) -> Meaning {
    match lua::recognise_any(body) {
        Some(lua::Recognised::Lock(lock)) => Meaning::Lock(lock),
        Some(lua::Recognised::Hash(hash)) => Meaning::Hash(hash),
        Some(lua::Recognised::Plain(plain)) => Meaning::Plain(plain),
        Some(lua::Recognised::Redisson(rw)) => Meaning::Redisson(rw),
        Some(lua::Recognised::Unless(w)) => Meaning::Unless(w),
        None => Meaning::Unknown,
    }
}

// ---------------------------------------------------------------------------------------------
// The proxy's canonical scripts, run on the masters.

/// Acquire: `KEYS` = the keys, `ARGV` = token, TTL ms, `"1"` to accept keys that already hold
/// the token. All or nothing: answers 0 when it wrote nothing (-1 when the key that stopped it
/// holds the token itself, so a refused attempt knows a grant of its value may exist there),
/// else one code per key: 1 created, 2 already held the token (TTL reset), so a refused attempt
/// can undo exactly what it created. `ARGV[3] = "2"` accepts keys that hold the token only
/// when all of them do (a mix of missing keys and the token's answers -1). `ARGV[4]`, when
/// given, is the TTL in ms set where a key already held the token (a refresh whose TTL is
/// read in another unit, see [`crate::lockop::Op::AcquireOrRefreshSeconds`]).
pub const ACQUIRE: &str = "local done = {} \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then done[i] = 1 \
      elseif ARGV[3] ~= '0' and v == ARGV[1] then done[i] = 2 \
      elseif v == ARGV[1] then return -1 \
      else return 0 end \
    end \
    if ARGV[3] == '2' then for i = 2, #done do if done[i] ~= done[1] then return -1 end end end \
    for i, key in ipairs(KEYS) do \
      redis.call('set', key, ARGV[1], 'px', done[i] == 2 and ARGV[4] or ARGV[2]) end \
    return done";

/// Extend: `KEYS` = the keys, `ARGV` = token, ms, `"1"` to add to the TTL (else replace it),
/// max TTL. All or nothing: answers the smallest new TTL (> 0) when every key held the token,
/// 0 when some key did not (-3 when the one key is missing), -2 when the new TTL would exceed
/// the max. A key's fencing instance
/// (see the fencing commands) learns its new expiry, so the grant keeps its token.
pub const EXTEND: &str = "local ttl = {} local least = nil \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v ~= ARGV[1] then if v == false and #KEYS == 1 then return -3 end return 0 end \
      local t = tonumber(ARGV[2]) \
      if ARGV[3] == '1' then \
        local left = redis.call('pttl', key) \
        if left < 0 then return 0 end \
        t = t + left \
      end \
      if t > tonumber(ARGV[4]) then return -2 end \
      ttl[i] = t \
      if least == nil or t < least then least = t end \
    end \
    for i, key in ipairs(KEYS) do \
      redis.call('pexpire', key, ttl[i]) \
      local fk = 'redlock-fence:{' .. key .. '}' \
      if redis.call('hget', fk, 'h') == ARGV[1] then \
        local e = redis.pcall('pexpiretime', key) \
        if type(e) ~= 'table' then redis.call('hset', fk, 'e', string.format('%d', e)) end \
      end \
    end \
    return least";

/// Inspect: the value of `KEYS[1]` and its PTTL, as `{value or nil, pttl}`.
pub const INSPECT: &str = "return { redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]) }";

/// Release all or nothing: `KEYS` = the keys, `ARGV[1]` = token. Deletes the keys only when
/// every one holds the token; answers one code per key as [`RELEASE`] does (1 deleted,
/// -1 missing, 0 not deleted: held by another token, or held by this one while another key
/// was not).
pub const RELEASE_ALL: &str = "local out = {} local all = true \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then out[i] = -1 all = false \
      elseif v == ARGV[1] then out[i] = 0 \
      else out[i] = 0 all = false end \
    end \
    if all then for i, key in ipairs(KEYS) do redis.call('del', key) out[i] = 1 end end \
    return out";

/// Remaining: `KEYS` = the keys, `ARGV[1]` = token. The smallest PTTL of the keys (-1 for a
/// key without a TTL) when every one holds the token, else -3.
pub const REMAINING: &str = "local least = nil \
    for i, key in ipairs(KEYS) do \
      if redis.call('get', key) ~= ARGV[1] then return -3 end \
      local t = redis.call('pttl', key) \
      if least == nil or t < least then least = t end \
    end \
    return least";

/// The end of [`RELEASE`] and [`DELETE`]: the wake-up signal (see [`Signal`]) on the list that
/// follows the `n` lock keys in `KEYS`, with `ARGV[3]` its TTL in ms, `ARGV[4]` its element and
/// `ARGV[5] == "1"` to signal whatever the outcome (else only where every key was deleted).
macro_rules! signal_then_return {
    () => {
        "if n < #KEYS and (all or ARGV[5] == '1') then \
          local s = KEYS[n + 1] \
          redis.call('del', s) redis.call('lpush', s, ARGV[4]) redis.call('pexpire', s, ARGV[3]) \
        end \
        return out"
    };
}

/// Release: `KEYS` = the keys, `ARGV[1]` = token. Answers one code per key: 1 deleted,
/// 0 held by another token, -1 missing. With a wake-up signal, the list follows the keys in
/// `KEYS` and `ARGV[2]` is the number of lock keys (see `signal_then_return`).
pub const RELEASE: &str = concat!(
    "local out = {} local n = tonumber(ARGV[2]) or #KEYS local all = true \
    for i = 1, n do \
      local key = KEYS[i] \
      local v = redis.call('get', key) \
      if v == false then out[i] = -1 all = false \
      elseif v == ARGV[1] then redis.call('del', key) out[i] = 1 \
      else out[i] = 0 all = false end \
    end ",
    signal_then_return!()
);

/// Release and publish: `KEYS` = the keys, `ARGV` = token, publish command, channel, message,
/// mode. Each key is released as [`RELEASE`] does, and the message is published once when
/// `mode` is `"1"` (always), `"0"` (every key was deleted) or `"2"` (every key was deleted or
/// already gone). Answers one code per key as [`RELEASE`].
pub const RELEASE_PUBLISH: &str = "local out = {} local all = true local done = true \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then out[i] = -1 all = false \
      elseif v == ARGV[1] then redis.call('del', key) out[i] = 1 \
      else out[i] = 0 all = false done = false end \
    end \
    if ARGV[5] == '1' or all or (ARGV[5] == '2' and done) then \
      redis.call(ARGV[2], ARGV[3], ARGV[4]) \
    end \
    return out";

/// Delete: `KEYS` and `ARGV` as [`RELEASE`] with a signal (`ARGV[1]` is not read), but every key
/// is deleted whatever it holds. Answers one code per key: 1 deleted, -1 missing.
pub const DELETE: &str = concat!(
    "local out = {} local n = tonumber(ARGV[2]) local all = true \
    for i = 1, n do \
      if redis.call('del', KEYS[i]) == 1 then out[i] = 1 else out[i] = -1 all = false end \
    end ",
    signal_then_return!()
);

/// What a Redis Cluster member must know of the canonical scripts to split one whose keys
/// span slots (see [`crate::backend::cluster::Split`]): [`RELEASE`] and [`DELETE`] answer per
/// key, [`ACQUIRE`] is all or nothing; the others are refused.
pub struct ClusterScripts;

impl crate::backend::cluster::Scripts for ClusterScripts {
    fn split(&self, body: &[u8]) -> crate::backend::cluster::Split {
        use crate::backend::cluster::Split;
        if body == RELEASE.as_bytes() || body == DELETE.as_bytes() {
            Split::PerKey
        } else if body == ACQUIRE.as_bytes() {
            Split::Acquire
        } else {
            Split::No
        }
    }

    fn release(&self) -> &'static str {
        RELEASE
    }
}

// ---------------------------------------------------------------------------------------------
// The cache.

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
    use crate::lockop::*;

    /// Classifies every `*.lua` file under `$RECOG_CORPUS` and prints what each is recognised
    /// as, or why it is refused (a measuring aid: `RECOG_CORPUS=dir cargo test --lib
    /// scripts::tests::corpus -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn corpus() {
        let Ok(dir) = std::env::var("RECOG_CORPUS") else {
            return;
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "lua"))
            .collect();
        files.sort();
        let (mut yes, mut no) = (0, 0);
        for f in files {
            let body = std::fs::read(&f).unwrap();
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            match recognise(&body) {
                Meaning::Lock(l) => {
                    yes += 1;
                    println!(
                        "OK   {name}: {:?} token={} ttl={} {:?} {:?}",
                        l.choice, l.token_arg, l.ttl_arg, l.unit, l.answer
                    );
                }
                Meaning::Hash(h) => {
                    yes += 1;
                    println!("OK   {name}: {:?}", h.op);
                }
                Meaning::Plain(p) => {
                    yes += 1;
                    println!("OK   {name}: {p:?}");
                }
                Meaning::Redisson(r) => {
                    yes += 1;
                    println!("OK   {name}: {r:?}");
                }
                Meaning::Unless(w) => {
                    yes += 1;
                    println!("OK   {name}: {w:?}");
                }
                Meaning::Unknown => {
                    no += 1;
                    println!("NO   {name}: {}", lua::refusal(&body));
                    if std::env::var("RECOG_VERBOSE").is_ok() {
                        for t in 1..=3 {
                            println!("  token {t}: {:#?}", lua::behaviour_with(&body, t));
                        }
                    }
                }
            }
        }
        println!("recognised {yes}, refused {no}");
    }

    #[test]
    fn sha_matches_redis() {
        // SHA1 of the empty string, as `SCRIPT LOAD ""` answers.
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    fn op_of(body: &[u8], argv: &[&str]) -> Option<(Op, bool, Answer)> {
        let argv: Vec<Bytes> = argv
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        match recognise(body) {
            Meaning::Lock(l) => Some((l.op(&argv), l.all_keys, l.answer)),
            Meaning::Hash(_)
            | Meaning::Plain(_)
            | Meaning::Redisson(_)
            | Meaning::Unless(_)
            | Meaning::Unknown => None,
        }
    }

    /// The libraries' scripts, byte for byte (tests/clients/lua holds the exact texts).
    macro_rules! lua {
        ($name:literal) => {
            include_bytes!(concat!("../tests/clients/lua/", $name, ".lua")).as_slice()
        };
    }

    #[test]
    fn library_scripts_are_exact_copies() {
        // The fixtures must be the libraries' exact bytes, or the SHA1s clients send differ.
        for (body, sha) in [
            (
                lua!("redispy_release"),
                "c3f8721cbb97f72bc19e972846bd7aaf91901658",
            ),
            (
                lua!("redispy_extend"),
                "a4e8783852e6b949f9ef3a97212805108459a890",
            ),
            (
                lua!("redlock5_ACQUIRE_SCRIPT"),
                "96da70f7716f27d278a5218544df37fd8b0a5e4c",
            ),
            (
                lua!("redsync_deleteScript"),
                "e950836ed1e694540c503ef9972b8de518044d3b",
            ),
            (
                lua!("redlocknet_Extend_lua"),
                "9f614a785a5f9ae8c6396c6b4bf94d2087342603",
            ),
        ] {
            assert_eq!(sha1_hex(body), sha);
        }
    }

    #[test]
    fn every_library_script_is_recognised() {
        use Answer::*;
        use Op::*;
        type Case = (&'static [u8], &'static [&'static str], (Op, bool, Answer));
        let cases: &[Case] = &[
            (lua!("redispy_release"), &["t"], (Release, false, OneZero)),
            (
                lua!("redispy_extend"),
                &["t", "5", "0"],
                (ExtendAdd, false, OneZero),
            ),
            (
                lua!("redispy_extend"),
                &["t", "5", "1"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redispy_reacquire"),
                &["t", "5"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redlock5_ACQUIRE_SCRIPT"),
                &["t", "5"],
                (Acquire, true, Count),
            ),
            (
                lua!("redlock5_EXTEND_SCRIPT"),
                &["t", "5"],
                (Extend, true, Count),
            ),
            (
                lua!("redlock5_RELEASE_SCRIPT"),
                &["t"],
                (Release, true, Count),
            ),
            (
                lua!("redlock4_lockScript"),
                &["t", "5"],
                (Acquire, true, Count),
            ),
            (
                lua!("redlock4_extendScript"),
                &["t", "5"],
                (Extend, true, Count),
            ),
            (
                lua!("redlock4_unlockScript"),
                &["t"],
                (Release, true, Count),
            ),
            (
                lua!("redsync_deleteScript"),
                &["t"],
                (Release, false, Tristate),
            ),
            (
                lua!("redsync_old_deleteScript"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redsync_touchScript"),
                &["t", "5"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redsync_touchWithSetNXScript"),
                &["t", "5"],
                (AcquireOrRefresh, false, OneZero),
            ),
            (
                lua!("redlocknet_Unlock_lua"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redlocknet_Extend_lua"),
                &["t", "5"],
                (AcquireOrRefresh, false, OneMinusOne),
            ),
            (
                lua!("redlockrb_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redlockrb_v1_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redlockrb_LOCK_SCRIPT"),
                &["t", "5", "yes"],
                (AcquireOrRefresh, false, OkNil),
            ),
            (
                lua!("redlockrb_LOCK_SCRIPT"),
                &["t", "5", "no"],
                (Extend, false, OkNil),
            ),
            (
                lua!("redlockrb_v1_LOCK_SCRIPT"),
                &["t", "5", "yes"],
                (AcquireOrRefresh, false, OkNil),
            ),
            (
                lua!("php_ronnylt_unlock"),
                &["t"],
                (Release, false, OneZero),
            ),
            (lua!("php_signe_unlock"), &["t"], (Release, false, OneZero)),
            (
                lua!("rslock_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("rslock_EXTEND_SCRIPT"),
                &["t", "5"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redlockcrate2_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
            // Locals aliasing KEYS[1] / ARGV[1], `if ... end return 0`.
            (lua!("warlock_parityDel"), &["t"], (Release, false, OneZero)),
            // Called with KEYS = key, TTL, token (see `params_in_keys_bind_from_keys`).
            (lua!("warlock_parityRelock"), &[], (Extend, false, OkZero)),
            (
                lua!("distlock_RELEASE_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
        ];
        for (body, argv, want) in cases {
            assert_eq!(
                op_of(body, argv),
                Some(*want),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    fn hash(body: &[u8]) -> HashScript {
        match recognise(body) {
            Meaning::Hash(h) => h,
            other => panic!(
                "{}: {other:?}\n{:#?}",
                String::from_utf8_lossy(body),
                lua::behaviour(body)
            ),
        }
    }

    /// Redisson's `RLock` scripts are hash-lock operations, recognised by what they do.
    #[test]
    fn redisson_scripts_are_hash_lock_operations() {
        let by_arg = |j| Publish {
            channel_key: 2,
            message_arg: 1,
            command: PublishCommand::Arg(j),
        };
        let literal = Publish {
            channel_key: 2,
            message_arg: 1,
            command: PublishCommand::Literal(Bytes::from_static(b"PUBLISH")),
        };
        let script = |op, field_arg, ttl_arg, publish, latch| HashScript {
            op,
            field_arg,
            ttl_arg,
            publish,
            latch,
            unit: TtlUnit::Millis,
            replies: None,
            unlock_replies: None,
        };
        for (body, want) in [
            (
                lua!("redisson_lock"),
                script(HashOp::Acquire, 2, 1, None, None),
            ),
            (
                lua!("redisson_lock_old"),
                script(HashOp::Acquire, 2, 1, None, None),
            ),
            (
                lua!("redisson_renew"),
                script(HashOp::Renew, 2, 1, None, None),
            ),
            (
                lua!("redisson_unlock"),
                script(
                    HashOp::Unlock,
                    3,
                    2,
                    Some(by_arg(4)),
                    Some(Latch { key: 3, ttl_arg: 5 }),
                ),
            ),
            (
                lua!("redisson_unlock_old"),
                script(HashOp::Unlock, 3, 2, Some(literal), None),
            ),
            (
                lua!("redisson_forceUnlock"),
                script(HashOp::ForceUnlock, 0, 0, Some(by_arg(2)), None),
            ),
            (
                lua!("redisson_LockTask_chunk"),
                script(HashOp::RenewAll, 2, 1, None, None),
            ),
            (
                lua!("redisson_fenced_lock"),
                script(HashOp::FencedAcquire, 2, 1, None, None),
            ),
            (
                lua!("redisson_fenced_lockAndGetToken"),
                script(HashOp::FencedAcquireToken, 2, 1, None, None),
            ),
        ] {
            assert_eq!(hash(body), want, "{}", String::from_utf8_lossy(body));
        }
    }

    /// Near misses of Redisson's scripts do something else, and stay unknown.
    #[test]
    fn hash_lock_near_misses_stay_unknown() {
        for text in [
            // Takes the lock even when another holds it.
            "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil;",
            // Sets the hold count to 1 instead of counting re-entry.
            "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);",
            // No TTL on a new lock.
            "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); return nil; end; return redis.call('pttl', KEYS[1]);",
            // Renews whoever holds it.
            "if (redis.call('exists', KEYS[1]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;",
            // Unlock that deletes on the first of two holds.
            "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 1) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end;",
            // Unlock that publishes twice.
            "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end;",
            // Unlock that publishes on every decrement too.
            "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; redis.call(ARGV[4], KEYS[2], ARGV[1]); local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); return 1; end;",
            // Unlock that ignores its latch.
            "local val = redis.call('get', KEYS[3]); if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0; else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end;",
            // A command named by an argument that is not only a publish.
            "if (redis.call('del', KEYS[1]) == 1) then redis.call(ARGV[2], KEYS[1], ARGV[1]); return 1 else return 0 end",
            // forceUnlock that publishes even when nothing was deleted.
            "redis.call('del', KEYS[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1",
            // Multi-lock renewal with every key's field the same argument.
            "local result = {} for i = 1, #KEYS, 1 do if (redis.call('hexists', KEYS[i], ARGV[2]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); else table.insert(result, 0); end; end; return result;",
            // ... renewing whoever holds each key.
            "local result = {} for i = 1, #KEYS, 1 do if (redis.call('exists', KEYS[i]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); else table.insert(result, 0); end; end; return result;",
            // ... answering through an alias of the table it fills.
            "local result = {} local r2 = result for i = 1, #KEYS, 1 do if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(r2, 1); else table.insert(r2, 0); end; end; return result;",
            // ... stopping at the first key not held.
            "local result = {} for i = 1, #KEYS, 1 do if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); else return result; end; end; return result;",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
        // The TTL in seconds, or constants of its own in place of nil and the PTTL: the same
        // acquisition with that unit, or those replies (re-entrant hash locks of tutorials).
        let seconds = hash(b"if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('expire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);");
        assert_eq!(
            (seconds.op, seconds.unit, seconds.replies),
            (HashOp::Acquire, TtlUnit::Seconds, None)
        );
        let zero = hash(b"if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return 0;");
        assert_eq!(zero.replies, Some((Lit::Nil, Lit::Int(0))));
        let one_zero = hash(b"if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return 1; end; if (redis.call('hexists', KEYS[1], ARGV[1]) == 1) then redis.call('hincrby', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return 1; end; return 0;");
        assert_eq!(
            (
                one_zero.op,
                one_zero.field_arg,
                one_zero.ttl_arg,
                one_zero.unit,
                one_zero.replies
            ),
            (
                HashOp::Acquire,
                1,
                2,
                TtlUnit::Seconds,
                Some((Lit::Int(1), Lit::Int(0)))
            )
        );
        // An unlock given no channel publishes nothing (tutorials' unlocks, answering nil in
        // every case, or Redisson's nil/0/1): an unlock without a publish, with those replies.
        let quiet = hash(b"if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); return 1; end;");
        assert_eq!(
            (
                quiet.op,
                quiet.field_arg,
                quiet.ttl_arg,
                quiet.publish,
                quiet.unlock_replies
            ),
            (
                HashOp::Unlock,
                3,
                2,
                None,
                Some([Lit::Nil, Lit::Int(0), Lit::Int(1)])
            )
        );
        let nil = hash(b"if(redis.call('hexists', KEYS[1], ARGV[1]) == 0) then return nil; end; local count = redis.call('hincrby', KEYS[1], ARGV[1], -1); if(count > 0) then redis.call('expire', KEYS[1], ARGV[2]); return nil; else redis.call('del', KEYS[1]); return nil; end;");
        assert_eq!(
            (nil.op, nil.unit, nil.unlock_replies),
            (HashOp::Unlock, TtlUnit::Seconds, Some([Lit::Nil; 3]))
        );
        // ... but one that deletes on the first of two holds stays unknown.
        assert_eq!(
            recognise(b"if (redis.call('hexists', KEYS[1], ARGV[1]) == 0) then return nil; end; local count = redis.call('hincrby', KEYS[1], ARGV[1], -1); if (count > 1) then redis.call('expire', KEYS[1], ARGV[2]); return nil; else redis.call('del', KEYS[1]); return nil; end;"),
            Meaning::Unknown
        );
        // Answering the hold count on re-entry (each master counts its own) stays unknown.
        assert_eq!(
            recognise(b"if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return 1; end; if (redis.call('hexists', KEYS[1], ARGV[1]) == 1) then local n = redis.call('hincrby', KEYS[1], ARGV[1], '1'); redis.call('expire', KEYS[1], ARGV[2]); return n; end; return 0;"),
            Meaning::Unknown
        );
        // An older Redisson unlock answered 1 and published for a lock already gone: not the
        // unlock the proxy runs (nil there), so it stays unknown (and runs under the
        // unknown-script rule; its replies do not differ between masters).
        assert_eq!(recognise(lua!("redisson_unlock_oldest")), Meaning::Unknown);
        // RFencedLock near misses: the token counted on refusals too, or before the check
        // (also when refused), or twice; the token answered on refusals.
        for text in [
            "redis.call('incr', KEYS[2]); if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);",
            "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('incr', KEYS[2]); redis.call('incr', KEYS[2]); redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);",
            "if (redis.call('exists', KEYS[1]) == 0 or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then local token = redis.call('incr', KEYS[2]);redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return {-1, token}; end; return {redis.call('pttl', KEYS[1]), redis.call('get', KEYS[2])};",
            "if (redis.call('exists', KEYS[1]) == 0) then local token = redis.call('incr', KEYS[2]);redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return {-1, token}; end; return {redis.call('pttl', KEYS[1]), -1};",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    #[test]
    fn params_in_keys_bind_from_keys() {
        // warlock: `parityRelock(3, key, ttl, id)`.
        let Meaning::Lock(l) = recognise(lua!("warlock_parityRelock")) else {
            panic!("parityRelock not recognised");
        };
        assert!(l.params_in_keys);
        assert_eq!((l.token_arg, l.ttl_arg, l.unit), (2, 1, TtlUnit::Millis));
    }

    /// python-redis-lock 4.0: unlock and reset are a release / a delete that also leave a
    /// wake-up signal on `KEYS[2]`; extend is an `EXPIRE` in seconds answering 0 / 1.
    #[test]
    fn python_redis_lock_scripts_are_recognised_with_their_signal() {
        let signal = |always| {
            Some(Signal {
                key: 2,
                ttl_arg: 2,
                value: Bytes::from_static(b"1"),
                always,
            })
        };
        let Meaning::Lock(unlock) = recognise(lua!("redislock4_UNLOCK_SCRIPT")) else {
            panic!("unlock not recognised");
        };
        assert_eq!(unlock.choice, Choice::Always(Op::Release));
        assert_eq!((unlock.answer, unlock.all_keys), (Answer::ZeroOne, false));
        assert_eq!(unlock.signal, signal(false));
        let Meaning::Lock(reset) = recognise(lua!("redislock4_RESET_SCRIPT")) else {
            panic!("reset not recognised");
        };
        assert_eq!(reset.choice, Choice::Always(Op::Delete));
        assert_eq!(
            reset.signal,
            signal(true),
            "reset signals whatever it deleted"
        );
        let Meaning::Lock(extend) = recognise(lua!("redislock4_EXTEND_SCRIPT")) else {
            panic!("extend not recognised");
        };
        assert_eq!(extend.choice, Choice::Always(Op::Extend));
        assert_eq!(
            (extend.answer, extend.unit, extend.ttl_arg, extend.signal),
            (Answer::ZeroOne, TtlUnit::Seconds, 2, None)
        );
        // Variants that must not pass as the same thing: a signal pushed onto a list that
        // is not emptied first, a signal that depends on another key, a signal without a TTL.
        for body in [
            "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end \
             redis.call('lpush', KEYS[2], 1) redis.call('pexpire', KEYS[2], ARGV[2]) \
             redis.call('del', KEYS[1]) return 0",
            "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end \
             redis.call('del', KEYS[2]) redis.call('lpush', KEYS[2], 1) \
             redis.call('del', KEYS[1]) return 0",
            "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end \
             redis.call('del', KEYS[2]) redis.call('lpush', KEYS[2], 1) \
             redis.call('pexpire', KEYS[2], ARGV[2]) return 0",
        ] {
            assert_eq!(recognise(body.as_bytes()), Meaning::Unknown, "{body}");
        }
    }

    #[test]
    fn a_script_that_always_ends_in_one_plain_set_is_that_set() {
        // Redis::DistLock 0.07 extend: `SET XX` overwrites another holder's lock, and a missing
        // key is set too: from every state it ends as `SET key value PX ttl` would, answering
        // `OK` (a string where the key existed, a status where it did not).
        let set = Meaning::Plain(PlainSet {
            value_arg: 1,
            ttl_arg: 2,
            unit: TtlUnit::Millis,
        });
        assert_eq!(recognise(lua!("distlock_EXTEND_SCRIPT")), set);
        assert_eq!(
            recognise(b"redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[1]) return 'OK'"),
            Meaning::Plain(PlainSet {
                value_arg: 2,
                ttl_arg: 1,
                unit: TtlUnit::Seconds,
            })
        );
        for other in [
            // Only where the key exists: `SET XX`, another command.
            "return redis.call('set', KEYS[1], ARGV[1], 'XX', 'PX', ARGV[2])",
            // A value from a literal, or no expiry.
            "return redis.call('set', KEYS[1], 'v', 'PX', ARGV[2])",
            "return redis.call('set', KEYS[1], ARGV[1])",
            // Another key too.
            "redis.call('del', KEYS[2]) return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])",
            // A choice on an argument.
            "if ARGV[3] == '1' then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end \
             return redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2])",
        ] {
            assert_eq!(recognise(other.as_bytes()), Meaning::Unknown, "{other}");
        }
        let table = lua::behaviour(lua!("distlock_EXTEND_SCRIPT")).unwrap();
        assert!(
            table.contains(
                &"[other1 (ttl kept)]: set KEYS[1] ARGV[1] 'XX' 'PX' ARGV[2]; -> 'OK' [ARGV[1] (ttl ARGV[2] ms)]"
                    .to_string()
            ),
            "{table:#?}"
        );
    }

    #[test]
    fn a_constant_written_unless_the_key_holds_it_is_set_ifne() {
        use crate::lockop::{Lit, Short, WriteUnless};
        let unless = |value: &str, ttl_arg, unit, ok, no| {
            Meaning::Unless(WriteUnless {
                value: Bytes::copy_from_slice(value.as_bytes()),
                ttl_arg,
                unit,
                ok,
                no,
            })
        };
        let bulk = |s: &str| Lit::Bulk(Short::new(s.as_bytes()).unwrap());
        assert_eq!(
            recognise(
                b"if redis.call('GET', KEYS[1]) == 'busy' then return 'NO' \
                  else return redis.call('SET', KEYS[1], 'busy', 'PX', ARGV[1]) end"
            ),
            unless("busy", 1, TtlUnit::Millis, Lit::Ok, bulk("NO"))
        );
        // Another spelling: the value stored as a number, seconds, 1/0, the TTL in ARGV[2].
        assert_eq!(
            recognise(
                b"local v = redis.call('get', KEYS[1]) if v ~= '7' then \
                  redis.call('setex', KEYS[1], ARGV[2], 7) return 1 end return 0"
            ),
            unless("7", 2, TtlUnit::Seconds, Lit::Int(1), Lit::Int(0))
        );
        for other in [
            // Compares one constant, writes another.
            "if redis.call('get', KEYS[1]) == '1' then return 0 end \
             redis.call('set', KEYS[1], '2', 'PX', ARGV[1]) return 1",
            // Writes only where missing after the test (not what IFNE does to another value).
            "if redis.call('get', KEYS[1]) == '1' then return 0 end \
             return redis.call('set', KEYS[1], '1', 'NX', 'PX', ARGV[1])",
            // No expiry.
            "if redis.call('get', KEYS[1]) == '1' then return 0 end \
             redis.call('set', KEYS[1], '1') return 1",
            // The same reply either way.
            "if redis.call('get', KEYS[1]) == '1' then return 1 end \
             redis.call('set', KEYS[1], '1', 'PX', ARGV[1]) return 1",
            // Refreshes the TTL where it holds the constant.
            "if redis.call('get', KEYS[1]) == '1' then redis.call('pexpire', KEYS[1], ARGV[1]) return 0 end \
             redis.call('set', KEYS[1], '1', 'PX', ARGV[1]) return 1",
            // Two constants compared.
            "local v = redis.call('get', KEYS[1]) if v == '1' or v == '2' then return 0 end \
             redis.call('set', KEYS[1], '1', 'PX', ARGV[1]) return 1",
        ] {
            assert_eq!(recognise(other.as_bytes()), Meaning::Unknown, "{other}");
        }
    }

    /// `redis.replicate_commands()` changes nothing a script does (it answers `true`), and a
    /// reply of the TTL the call gave is kept as that TTL; near misses stay unknown.
    #[test]
    fn replicate_commands_and_ttl_replies() {
        let text = "redis.replicate_commands() if redis.call('get', KEYS[1]) == ARGV[1] then \
            return redis.call('del', KEYS[1]) end return 0";
        let Meaning::Lock(l) = recognise(text.as_bytes()) else {
            panic!("{text}");
        };
        assert_eq!(
            (l.choice, l.answer),
            (Choice::Always(Op::Release), Answer::OneZero)
        );
        for (text, unit, ok, no) in [
            (
                "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
                 return tonumber(ARGV[2]) end return 0",
                TtlUnit::Millis,
                Lit::TtlNum,
                Lit::Int(0),
            ),
            (
                "if redis.call('get', KEYS[1]) ~= ARGV[1] then return false end \
                 redis.call('expire', KEYS[1], ARGV[2]) return ARGV[2]",
                TtlUnit::Seconds,
                Lit::TtlText,
                Lit::Nil,
            ),
        ] {
            let Meaning::Lock(l) = recognise(text.as_bytes()) else {
                panic!("{text}");
            };
            assert_eq!(
                (l.choice, l.unit, l.ttl_arg, l.answer),
                (
                    Choice::Always(Op::Extend),
                    unit,
                    2,
                    Answer::Const(Replies::new(ok, no, no))
                ),
                "{text}"
            );
        }
        // redis.log writes to the server's log only, whatever its message holds.
        let logged = "local v = redis.call('get', KEYS[1]) \
            if v ~= ARGV[1] then redis.log(redis.LOG_WARNING, 'lost ' .. KEYS[1], v) return 0 end \
            redis.log(redis.LOG_DEBUG, 'extending by ' .. ARGV[2]) \
            return redis.call('pexpire', KEYS[1], ARGV[2])";
        let Meaning::Lock(l) = recognise(logged.as_bytes()) else {
            panic!("{logged}");
        };
        assert_eq!(
            (l.choice, l.answer),
            (Choice::Always(Op::Extend), Answer::OneZero)
        );
        assert_eq!(
            Replies::new(Lit::TtlNum, Lit::Int(0), Lit::Int(0)).bind_ttl(30),
            Replies::new(Lit::Int(30), Lit::Int(0), Lit::Int(0))
        );
        assert_eq!(
            Replies::new(Lit::TtlText, Lit::Nil, Lit::Nil).bind_ttl(30),
            Replies::new(Lit::Decimal(30), Lit::Nil, Lit::Nil)
        );
        for text in [
            // The refusal could be a TTL (a positive number or its digits): not told apart.
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
             return tonumber(ARGV[2]) end return 5",
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
             return ARGV[2] end return '100'",
            // Another argument than the TTL it set, and the TTL of a release.
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) \
             return tonumber(ARGV[3]) end return 0",
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) \
             return tonumber(ARGV[2]) end return 0",
            // The TTL answered on refusal as well as on success.
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) end \
             return tonumber(ARGV[2])",
            // replicate_commands with an argument, or another redis function.
            "redis.replicate_commands(1) if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
            "redis.set_repl(redis.REPL_ALL) if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
            // redis.log without a message, or at a level Redis refuses: an error there.
            "redis.log(redis.LOG_DEBUG) if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
            "redis.log(7, 'x') if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) end return 0",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    /// A TTL written in the script is that operation's TTL on every call; near misses (no
    /// positive integer, or a literal on one path and an argument on another) stay unknown.
    #[test]
    fn ttl_literals() {
        for (text, op, unit, k) in [
            (
                "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then redis.call('expire', KEYS[1], 30) \
                 return 1 end return 0",
                Op::Acquire,
                TtlUnit::Seconds,
                30,
            ),
            (
                "if redis.call('get', KEYS[1]) == ARGV[1] then \
                 return redis.call('pexpire', KEYS[1], 15000) end return 0",
                Op::Extend,
                TtlUnit::Millis,
                15000,
            ),
            (
                "local v = redis.call('get', KEYS[1]) if not v or v == ARGV[1] then \
                 redis.call('set', KEYS[1], ARGV[1], 'EX', 60) return 1 end return 0",
                Op::AcquireOrRefresh,
                TtlUnit::Seconds,
                60,
            ),
        ] {
            let Meaning::Lock(l) = recognise(text.as_bytes()) else {
                panic!("{text}");
            };
            assert_eq!(
                (l.choice, l.unit, l.ttl_arg, l.ttl_literal, l.token_arg),
                (Choice::Always(op), unit, 0, Some(k), 1),
                "{text}"
            );
        }
        for text in [
            // EXPIRE 0 deletes; a negative TTL too.
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], 0) end return 0",
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], -1) end return 0",
            // Taken for ARGV[2], refreshed for a literal.
            "local v = redis.call('get', KEYS[1]) if not v then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end \
             if v == ARGV[1] then return redis.call('pexpire', KEYS[1], 30000) end return 0",
            // Two different literals on two paths.
            "local v = redis.call('get', KEYS[1]) if not v then return redis.call('set', KEYS[1], ARGV[1], 'PX', 10000) end \
             if v == ARGV[1] then return redis.call('pexpire', KEYS[1], 30000) end return 0",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    /// A many-key acquisition that takes the keys one by one and gives back the ones it took
    /// when one is busy (`for j = 1, i - 1 do del(KEYS[j])`) is all or nothing; one that gives
    /// back too many (the busy key too) or none stays unknown.
    #[test]
    fn a_many_key_acquisition_that_rolls_back() {
        let body = |upto: &str| {
            format!(
                "for i, key in ipairs(KEYS) do \
                 if not redis.call('set', key, ARGV[1], 'NX', 'PX', ARGV[2]) then \
                 {upto} return 0 end end return 1"
            )
        };
        let Meaning::Lock(l) =
            recognise(body("for j = 1, i - 1 do redis.call('del', KEYS[j]) end").as_bytes())
        else {
            panic!("rollback");
        };
        assert_eq!(
            (l.choice, l.all_keys, l.answer),
            (Choice::Always(Op::Acquire), true, Answer::OneZero)
        );
        for upto in ["for j = 1, i do redis.call('del', KEYS[j]) end", ""] {
            let text = body(upto);
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    /// `tostring` of a command's table reply is Lua's `table: 0x…`: it equals no literal
    /// without that prefix (so `tostring(set(...)) == 'false'` is a test of the refusal), and
    /// anything it cannot be told apart from stays unknown.
    #[test]
    fn tostring_of_a_table_reply() {
        let text = "local r = tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])) \
            if r == 'false' then return 0 end return 1";
        let Meaning::Lock(l) = recognise(text.as_bytes()) else {
            panic!("{text}");
        };
        assert_eq!(
            (l.choice, l.answer),
            (Choice::Always(Op::Acquire), Answer::OneZero)
        );
        for text in [
            // A literal that could be the address, an argument, and the address answered.
            "local r = tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])) \
             if r == 'table: 0x1' then return 0 end return 1",
            "local r = tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])) \
             if r == ARGV[3] then return 0 end return 1",
            "return tostring(redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]))",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    #[test]
    fn seconds_are_a_unit() {
        for text in [
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0",
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) return 1 else return 0 end",
        ] {
            let Meaning::Lock(l) = recognise(text.as_bytes()) else {
                panic!("{text}");
            };
            assert_eq!(
                (l.choice, l.unit),
                (Choice::Always(Op::Extend), TtlUnit::Seconds)
            );
        }
    }

    /// Hand-written rewordings of every family: aliases, tonumber/tostring, `else` vs early
    /// return, `~=` with swapped branches, `== false` vs `not`, `#KEYS`, numeric `for`,
    /// pcall, unlink, option case, EX vs PX.
    #[test]
    fn rewordings_keep_their_meaning() {
        use Answer::*;
        use Op::*;
        type Case = (&'static str, &'static [&'static str], (Op, bool, Answer));
        let cases: &[Case] = &[
            (
                "local k, t = KEYS[1], ARGV[1] if redis.call('get', k) ~= t then return 0 end redis.call('unlink', k) return 1",
                &["t"],
                (Release, false, OneZero),
            ),
            (
                "local v = redis.pcall('GET', KEYS[1]) if v == false then return -1 elseif v ~= tostring(ARGV[1]) then return 0 else return redis.call('del', KEYS[1]) end",
                &["t"],
                (Release, false, Tristate),
            ),
            (
                "if not (redis.call('get', KEYS[1]) == ARGV[1]) then return 0 end return redis.call('del', KEYS[1])",
                &["t"],
                (Release, false, OneZero),
            ),
            (
                "local n = 0 for i = 1, #KEYS do if redis.call('get', KEYS[i]) == ARGV[1] then n = n + redis.call('del', KEYS[i]) end end return n",
                &["t"],
                (Release, true, Count),
            ),
            (
                "for _, k in ipairs(KEYS) do if redis.call('exists', k) ~= 0 then return 0 end end for _, k in ipairs(KEYS) do redis.call('set', k, ARGV[1], 'px', tonumber(ARGV[2])) end return #KEYS",
                &["t", "5"],
                (Acquire, true, Count),
            ),
            (
                "local ttl = tonumber(ARGV[2]) if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], ttl) return 1 end return 0",
                &["t", "5"],
                (Extend, false, OneZero),
            ),
            (
                "return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX')",
                &["t", "5"],
                (Acquire, false, OkNil),
            ),
            (
                "local v = redis.call('get', KEYS[1]) if not v or v == ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end return 0",
                &["t", "5"],
                (AcquireOrRefresh, false, OneZero),
            ),
            (
                "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}",
                &[],
                (Inspect, false, OneZero),
            ),
            (
                "local t = redis.call('get', KEYS[1]) if t ~= ARGV[1] then return 0 end local left = redis.call('pttl', KEYS[1]) if left <= 0 then return 0 end if ARGV[3] ~= '0' then redis.call('pexpire', KEYS[1], ARGV[2]) else redis.call('pexpire', KEYS[1], left + ARGV[2]) end return 1",
                &["t", "5", "0"],
                (ExtendAdd, false, OneZero),
            ),
        ];
        for (text, argv, want) in cases {
            assert_eq!(op_of(text.as_bytes(), argv), Some(*want), "{text}");
        }
    }

    /// Lay-out never changes a classification: whitespace, comments, quotes, local names,
    /// `;` and redundant parentheses.
    #[test]
    fn spelling_never_changes_the_meaning() {
        let fixtures: &[&[u8]] = &[
            lua!("redispy_extend"),
            lua!("redsync_deleteScript"),
            lua!("redlock5_ACQUIRE_SCRIPT"),
            lua!("redlockrb_LOCK_SCRIPT"),
            lua!("redlocknet_Extend_lua"),
            lua!("warlock_parityDel"),
            lua!("warlock_parityRelock"),
        ];
        for body in fixtures {
            let text = String::from_utf8_lossy(body).into_owned();
            let toks = lua::lex::lex(body).unwrap();
            // Re-spell token by token: other spacing, a comment between tokens, the other
            // quote style, renamed locals, `;` after each statement-ending token, and
            // parentheses around every `==` comparison's right side.
            let mut out = String::new();
            for (k, t) in toks.iter().enumerate() {
                let piece = match t {
                    lua::lex::Tok::Name(n)
                        if [
                            "token",
                            "val",
                            "key",
                            "content",
                            "value",
                            "currentVal",
                            "expiration",
                            "newttl",
                            "ttl",
                            "id",
                        ]
                        .contains(&n.as_str()) =>
                    {
                        format!("renamed_{n}")
                    }
                    lua::lex::Tok::Name(n) => n.clone(),
                    lua::lex::Tok::Str(s) => format!("[==[{}]==]", String::from_utf8_lossy(s)),
                    lua::lex::Tok::Num(n) => format!("{n}"),
                    lua::lex::Tok::Sym(s) => s.to_string(),
                };
                out.push_str(&piece);
                out.push_str(if k % 3 == 0 { " --[[c]] " } else { "\r\n\t " });
            }
            assert_eq!(
                recognise(out.as_bytes()),
                recognise(body),
                "{text}\n=>\n{out}"
            );
            assert_eq!(
                lua::canonical(out.as_bytes()),
                lua::canonical(body),
                "{out}"
            );
            assert_ne!(recognise(body), Meaning::Unknown, "{text}");
        }
        let base = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
        for variant in [
            "if ((redis.call(\"get\", (KEYS[1]))) == (ARGV[1])) then return (redis.call('del', KEYS[1])); else return (0); end;",
            "-- x\nif redis.call('get',KEYS[1])==ARGV[1]then return redis.call('del',KEYS[1])else return 0 end",
        ] {
            assert_eq!(
                recognise(variant.as_bytes()),
                recognise(base.as_bytes()),
                "{variant}"
            );
        }
    }

    /// Issue 10 row 6: hostile scripts are classified (unknown) in linear time and never overflow the
    /// stack.
    #[test]
    fn pathological_scripts_are_unknown_without_quadratic_work() {
        let mut inputs: Vec<Vec<u8>> = vec![
            b"if(".repeat(150_000),
            b"if(".repeat(20_000),
            b"(".repeat(60_000),
            b"{".repeat(60_000),
            b"-".repeat(60_000),
            b"not ".repeat(15_000),
            b"a.".repeat(30_000),
            b"x=1 ".repeat(15_000),
            b"do ".repeat(20_000),
            b"[[".repeat(30_000),
            b"return 1"
                .iter()
                .copied()
                .chain(b"+1".repeat(30_000))
                .collect(),
            b"return "
                .iter()
                .copied()
                .chain(b"f(".repeat(20_000))
                .collect(),
            b"local a = 1 ".repeat(5_000),
            b"for i = 1, #KEYS do ".repeat(2_000),
            // Long runs of hash commands, over fixed keys and over all of KEYS.
            b"local x = redis.call('hexists', KEYS[1], ARGV[2]) ".repeat(400),
            b"local x = redis.call('hincrby', KEYS[3], ARGV[2], 1) ".repeat(400),
            b"for i = 1, #KEYS do local x = redis.call('hexists', KEYS[i], ARGV[i + 1]) "
                .iter()
                .copied()
                .chain(b"x = redis.call('hexists', KEYS[i], ARGV[i + 1]) ".repeat(150))
                .chain(b"end".iter().copied())
                .collect(),
        ];
        let mut deep = b"return ".to_vec();
        deep.extend(b"{".repeat(10_000));
        deep.extend(b"}".repeat(10_000));
        inputs.push(deep);
        // Small scripts that are costly to run symbolically: runs forked on arguments, each
        // adding to one value in a loop (each addition copied and sorted the whole sum: one
        // 620-byte script took 5.6 s), or each as long as a run may be (0.16 s a script).
        let forks: String = (2..9)
            .map(|i| format!("if ARGV[{i}] == 'v{i}' then x = x + 1 end "))
            .collect();
        let sum = format!(
            "local x = tonumber(ARGV[1]) {forks}{}return redis.call('get', KEYS[1])",
            "for i = 1, 16 do for j = 1, 16 do x = x + tonumber(ARGV[1]) end end ".repeat(4)
        );
        inputs.push(sum.into_bytes());
        let long = format!(
            "local x = 0 {forks}{}return redis.call('get', KEYS[1])",
            "for i = 1, 16 do for j = 1, 16 do for k = 1, 16 do x = 1 end end end ".repeat(4)
        );
        inputs.push(long.into_bytes());
        // The same with eight arguments, each tried as the token's place.
        let eight = format!(
            "local x = 0 {forks}{}if redis.call('get', KEYS[1]) == ARGV[8] then return 1 end return 0",
            "for i = 1, 16 do for j = 1, 16 do for k = 1, 16 do x = 1 end end end ".repeat(4)
        );
        inputs.push(eight.into_bytes());
        for input in &inputs {
            let start = std::time::Instant::now();
            assert_eq!(recognise(input), Meaning::Unknown);
            let took = start.elapsed();
            if std::env::var("RECOG_VERBOSE").is_ok() {
                eprintln!("{took:?}");
            }
            // Not a speed test (`cargo bench --bench hot -- recognise` measures that): a bound
            // far above any linear cost, which only a return of the quadratic analysis (12-23 s
            // per script before) could exceed, however loaded the machine.
            assert!(
                took < std::time::Duration::from_secs(3),
                "{took:?} for {:?}...",
                String::from_utf8_lossy(&input[..20.min(input.len())])
            );
        }
    }

    #[test]
    fn release_is_recognised_whatever_the_spelling() {
        for text in [
            "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return redis.call(\"del\",KEYS[1]) else return 0 end",
            "if redis.call('get', KEYS[1]) == ARGV[1] then\r\n  return redis.call('del', KEYS[1])\r\nelse\r\n  return 0\r\nend",
            "if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) else return 0 end;",
            "if (redis.call('get', KEYS[1]) == ARGV[1]) then return redis.pcall('unlink', KEYS[1]) else return 0; end",
            "-- unlock\nif ARGV[1] == redis.call('get', KEYS[1]) then return redis.call('del', KEYS[1]) else return 0 end --[[ done ]]",
            "local value = redis.call('get', KEYS[1])\nif value == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
        ] {
            assert_eq!(
                op_of(text.as_bytes(), &["t"]),
                Some((Op::Release, false, Answer::OneZero)),
                "{text}"
            );
        }
    }

    #[test]
    fn different_meanings_stay_apart() {
        for text in [
            // Deletes when the token does NOT match.
            "if redis.call('get',KEYS[1]) ~= ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
            // Lua names are case-sensitive: `argv` is not `ARGV`.
            "if redis.call('get',KEYS[1]) == argv[1] then return redis.call('del',KEYS[1]) else return 0 end",
            "local n = 0 for i, k in ipairs(KEYS) do if i == 3 then redis.call('del', k) elseif redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end end return n",
            // Overwrites another holder's lock, and answers what no SET answers.
            "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1",
            // (A TTL from a literal, not from an argument, is that TTL on every call: see
            // `ttl_literals`.)
            // A key named by string.format is not a key it was given.
            "local k = string.format('%s:lock', KEYS[1]) if redis.call('get', k) == ARGV[1] then return redis.call('del', k) end return 0",
            // The type of a reply compared to what it never is: the branch never runs.
            "local r = redis.call('get', KEYS[1]) if type(r) == 'number' then return redis.call('del', KEYS[1]) end return 0",
            // A string compared outside redis.call keeps its case.
            "if redis.call('get',KEYS[1]) == 'ARGV' then return redis.call('del',KEYS[1]) else return 0 end",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
        // Different with three keys than with one or two: the analyser unrolls over one and
        // two keys, so the key count is never compared there; read for exactly one key, it is
        // a release bound to calls with one key (others run as written).
        let three = "if #KEYS == 3 then return redis.call('del', KEYS[1]) end local n = 0 for i, k in ipairs(KEYS) do if redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end end return n";
        match recognise(three.as_bytes()) {
            Meaning::Lock(l) => {
                assert_eq!(l.keys_count, Some(crate::lockop::Counts::one(1)));
                assert_eq!(l.choice, Choice::Always(Op::Release));
            }
            other => panic!("{other:?}"),
        }
        // A plain write with an expiry is that write (Redis::DistLock 0.07's extend is one).
        assert_eq!(
            recognise(b"return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])"),
            Meaning::Plain(PlainSet {
                value_arg: 1,
                ttl_arg: 2,
                unit: TtlUnit::Millis
            })
        );
        // The token may be any argument.
        let Meaning::Lock(l) = recognise(
            b"if redis.call('get',KEYS[1]) == ARGV[2] then return redis.call('del',KEYS[1]) else return 0 end",
        ) else {
            panic!("a release with the token in ARGV[2]");
        };
        assert_eq!((l.choice, l.token_arg), (Choice::Always(Op::Release), 2));
        // Deleting whatever the key holds is `DEL`, a delete: never a release.
        assert_eq!(
            op_of(b"return redis.call('del', KEYS[1])", &["t"]),
            Some((Op::Delete, false, Answer::OneZero))
        );
        // Spaces inside a string matter.
        assert_ne!(
            lua::canonical(b"return 'a b'"),
            lua::canonical(b"return 'ab'")
        );
        // Two different locals are not merged.
        assert_ne!(
            lua::canonical(b"local a = 1 local b = 2 return a"),
            lua::canonical(b"local a = 1 local b = 2 return b")
        );
    }

    #[test]
    fn canonical_form_ignores_spelling() {
        assert_eq!(
            lua::canonical(b"local tok = redis.call('GET', KEYS[1]); return (tok) -- c"),
            lua::canonical(b"local value=redis.call(\"get\",KEYS[1])\r\nreturn value")
        );
    }

    #[test]
    fn declared_meanings_win() {
        let decl = ScriptDecl {
            sha: None,
            text: Some("return redis.call('del', KEYS[1])".into()),
            meaning: Op::Release,
            reply: Answer::OneZero,
            token_arg: 1,
            ttl_arg: 2,
            all_keys: false,
        };
        let cache = ScriptCache::new(&[decl], 1 << 20);
        let s = cache.script(Bytes::from_static(
            b"return   redis.call(\"DEL\", KEYS[1])\r\n",
        ));
        assert!(
            matches!(s.meaning, Meaning::Lock(ref l) if l.choice == Choice::Always(Op::Release))
        );
        let by_sha = ScriptDecl {
            sha: Some(sha1_hex(b"return 7").to_uppercase()),
            text: None,
            meaning: Op::Extend,
            reply: Answer::Count,
            token_arg: 2,
            ttl_arg: 1,
            all_keys: true,
        };
        let cache = ScriptCache::new(&[by_sha], 1 << 20);
        let s = cache.script(Bytes::from_static(b"return 7"));
        assert!(matches!(s.meaning, Meaning::Lock(ref l) if l.token_arg == 2 && l.all_keys));
        assert_eq!(
            cache.script(Bytes::from_static(b"return 8")).meaning,
            Meaning::Unknown
        );
    }

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

    #[test]
    fn lexer_survives_garbage() {
        for junk in [
            &b"\"unterminated"[..],
            b"[[",
            b"--[==[",
            b"\xff\xfe(((",
            b"redis.call(",
            b")))",
        ] {
            assert_eq!(recognise(junk), Meaning::Unknown);
        }
    }
}

/// Lock libraries recognised since the first set: bsm/redislock (Go), pottery and aioredlock
/// (Python), and short hand-written forms seen in the wild, each with near misses that must
/// stay unknown.
#[cfg(test)]
mod more_libraries {
    use super::*;
    use crate::lockop::*;

    macro_rules! lua {
        ($name:literal) => {
            include_bytes!(concat!("../tests/clients/lua/", $name, ".lua")).as_slice()
        };
    }

    fn lock(body: &[u8]) -> LockScript {
        match recognise(body) {
            Meaning::Lock(l) => l,
            other => panic!(
                "not a lock script ({other:?}): {}",
                String::from_utf8_lossy(body)
            ),
        }
    }

    fn argv(a: &[&str]) -> Vec<Bytes> {
        a.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    fn bulk(s: &str) -> Lit {
        Lit::Bulk(Short::new(s.as_bytes()).unwrap())
    }

    fn error(s: &str) -> Lit {
        Lit::Error(Short::new(s.as_bytes()).unwrap())
    }

    /// The fixtures are the libraries' exact bytes (taken from their sources: Go raw strings
    /// and `go:embed` files, Python triple-quoted strings with their indentation), so a client
    /// sends these SHA1s.
    #[test]
    fn fixtures_are_the_libraries_exact_bytes() {
        for (body, sha) in [
            (
                lua!("bsm_obtain"),
                "eb0c00d98f6f33b4262419a509002884540f30be",
            ),
            (
                lua!("bsm_refresh"),
                "5a22d7e8431313862816d4416b5e46dd70fc340d",
            ),
            (
                lua!("bsm_release"),
                "9470c810040e272ee6c579d8d4331aaf6332a7b1",
            ),
            (
                lua!("bsm_v0_obtain"),
                "80a1b5f2cfccec3b7119ba7721d2127682b691a7",
            ),
            (
                lua!("aioredlock_SET_LOCK_SCRIPT"),
                "aecadef15d24ccd9360d8641cdec8e0337a0d343",
            ),
        ] {
            assert_eq!(sha1_hex(body), sha);
        }
    }

    /// bsm/redislock's current scripts work on all of `KEYS`, all or nothing.
    #[test]
    fn bsm_redislock_scripts_are_recognised() {
        let obtain = lock(lua!("bsm_obtain"));
        assert_eq!(
            obtain.choice,
            Choice::IfTokenLen {
                arg: 2,
                then: Op::AcquireOrRefreshAll,
                otherwise: Op::Acquire
            }
        );
        assert_eq!(
            (
                obtain.token_arg,
                obtain.ttl_arg,
                obtain.all_keys,
                obtain.answer
            ),
            (1, 3, true, Answer::OkNil)
        );
        // The prefix is the whole token: a key holding exactly the token is the caller's.
        assert_eq!(
            obtain.op(&argv(&["tok", "3", "5000"])),
            Op::AcquireOrRefreshAll
        );
        // Metadata after the token, a zero, an empty token or a non-number: never take a held
        // key back.
        for a in [
            &["tokmeta", "3", "5000"][..],
            &["tok", "0", "5000"],
            &["tok", "4", "5000"],
            &["", "0", "5000"],
            &["tok", " 3", "5000"],
            &["tok", "3.0", "5000"],
            &["tok"],
        ] {
            assert_eq!(obtain.op(&argv(a)), Op::Acquire, "{a:?}");
        }
        let refresh = lock(lua!("bsm_refresh"));
        assert_eq!(
            (
                refresh.choice,
                refresh.ttl_arg,
                refresh.all_keys,
                refresh.answer
            ),
            (Choice::Always(Op::Extend), 2, true, Answer::OkNil)
        );
        let release = lock(lua!("bsm_release"));
        assert_eq!(
            (release.choice, release.all_keys, release.answer),
            (Choice::Always(Op::ReleaseAll), true, Answer::OkNil)
        );
    }

    /// bsm/redislock before multi-key locks (v0.4 to v0.9): single-key scripts.
    #[test]
    fn bsm_redislock_single_key_scripts_are_recognised() {
        let obtain = lock(lua!("bsm_v0_obtain"));
        assert_eq!(
            (
                obtain.choice,
                obtain.ttl_arg,
                obtain.all_keys,
                obtain.answer
            ),
            (
                Choice::IfTokenLen {
                    arg: 2,
                    then: Op::AcquireOrRefresh,
                    otherwise: Op::Acquire
                },
                3,
                false,
                Answer::OkNil
            )
        );
        let refresh = lock(lua!("bsm_v0_refresh"));
        assert_eq!(
            (refresh.choice, refresh.answer),
            (Choice::Always(Op::Extend), Answer::OneZero)
        );
        let release = lock(lua!("bsm_v0_release"));
        assert_eq!(
            (release.choice, release.answer),
            (Choice::Always(Op::Release), Answer::OneZero)
        );
    }

    #[test]
    fn pottery_and_aioredlock_scripts_are_recognised() {
        let extend = lock(lua!("pottery_extend"));
        assert_eq!(
            (extend.choice, extend.answer),
            (Choice::Always(Op::Extend), Answer::OneZero)
        );
        let release = lock(lua!("pottery_release"));
        assert_eq!(
            (release.choice, release.answer),
            (Choice::Always(Op::Release), Answer::OneZero)
        );
        let set = lock(lua!("aioredlock_SET_LOCK_SCRIPT"));
        let refused = error("ERR ERROR");
        assert_eq!(
            (set.choice, set.ttl_arg, set.answer),
            (
                Choice::Always(Op::AcquireOrRefresh),
                2,
                Answer::Const(Replies::new(Lit::Ok, refused, refused))
            )
        );
        let unset = lock(lua!("aioredlock_UNSET_LOCK_SCRIPT"));
        assert_eq!(
            (unset.choice, unset.answer),
            (
                Choice::Always(Op::Release),
                Answer::Const(Replies::new(Lit::Int(1), refused, Lit::Ok))
            )
        );
    }

    #[test]
    fn short_forms_from_the_wild_are_recognised() {
        let setnx = lock(
            b"local key = KEYS[1] local value = ARGV[1] local ttl = ARGV[2] \
              if redis.call('SETNX', key, value) == 1 then redis.call('EXPIRE', key, ttl) return 1 else return 0 end",
        );
        assert_eq!(
            (setnx.choice, setnx.ttl_arg, setnx.unit, setnx.answer),
            (
                Choice::Always(Op::Acquire),
                2,
                TtlUnit::Seconds,
                Answer::OneZero
            )
        );
        let ok_fail = lock(
            b"local val = redis.call(\"get\", KEYS[1]) if not val or val == ARGV[1] then \
              redis.call(\"set\", KEYS[1], ARGV[1], \"PX\", ARGV[2]) return \"OK\" else return \"FAIL\" end",
        );
        assert_eq!(
            (ok_fail.choice, ok_fail.answer),
            (
                Choice::Always(Op::AcquireOrRefresh),
                Answer::Const(Replies::new(bulk("OK"), bulk("FAIL"), bulk("FAIL")))
            )
        );
        // An error reply with its own code keeps it.
        let coded = lock(
            b"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end \
              return redis.error_reply('NOTOWNER not yours')",
        );
        assert_eq!(
            coded.answer,
            Answer::Const(Replies::new(
                Lit::Int(1),
                error("NOTOWNER not yours"),
                error("NOTOWNER not yours")
            ))
        );
    }

    /// TTL reads: how long the caller still holds the lock, else a constant.
    #[test]
    fn ttl_reads_are_recognised() {
        let read = |body: &[u8]| {
            let l = lock(body);
            (l.choice, l.unit, l.answer)
        };
        let consts = |ok, no| Answer::Const(Replies::new(ok, no, no));
        assert_eq!(
            read(lua!("pottery_acquired")),
            (
                Choice::Always(Op::Remaining),
                TtlUnit::Millis,
                consts(Lit::Int(0), Lit::Int(0))
            )
        );
        assert_eq!(
            read(lua!("bsm_v0_pttl")),
            (
                Choice::Always(Op::Remaining),
                TtlUnit::Millis,
                consts(Lit::Int(-1), Lit::Int(-3))
            )
        );
        assert_eq!(
            read(lua!("aioredlock_GET_LOCK_TTL_SCRIPT")),
            (
                Choice::Always(Op::Remaining),
                TtlUnit::Seconds,
                consts(Lit::Int(-1), error("ERR ERROR"))
            )
        );
        // bsm/redislock's current pttl.lua: the smallest TTL of all the keys when every one
        // holds the token (0 when none has a TTL), else nil.
        let bsm = lock(lua!("bsm_pttl"));
        assert_eq!(
            (bsm.choice, bsm.all_keys, bsm.unit, bsm.answer),
            (
                Choice::Always(Op::Remaining),
                true,
                TtlUnit::Millis,
                consts(Lit::Int(0), Lit::Nil)
            )
        );
        for text in [
            // The largest of two TTLs, not the smallest.
            "local v = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do \
             if v[i] ~= ARGV[1] then return false end end local m = 0 \
             for _, k in ipairs(KEYS) do local t = redis.call('pttl', k) \
             if t > 0 and (m == 0 or t > m) then m = t end end return m",
            // The first key's TTL only.
            "local v = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do \
             if v[i] ~= ARGV[1] then return false end end return redis.call('pttl', KEYS[1])",
            // The TTL of someone else's lock.
            "return redis.call('pttl', KEYS[1])",
            // Answers the TTL whoever holds it.
            "if redis.call('get', KEYS[1]) then return redis.call('pttl', KEYS[1]) end return -3",
            // Reads, then extends: not a read.
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], 100) \
             return redis.call('pttl', KEYS[1]) end return -3",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    /// Hostile uses of what the analyser now follows stay unknown and fast: a large function
    /// defined again and again in nested loops, a table grown without bound, calls nested
    /// deeply.
    #[test]
    fn functions_and_tables_stay_cheap_to_analyse() {
        let body = "redis.call('get', KEYS[1]) ".repeat(400);
        let mut inputs = vec![
            format!(
                "for i = 1, 16 do for j = 1, 16 do local function f() {body} end f() end end return redis.call('del', KEYS[1])"
            ),
            "local t = {} for i = 1, 16 do for j = 1, 16 do table.insert(t, ARGV[1]) end end \
             return redis.call('del', unpack(t))"
                .to_string(),
        ];
        let mut nested = String::from("local function f0() return redis.call('get', KEYS[1]) end ");
        for i in 1..200 {
            nested.push_str(&format!("local function f{i}() return f{}() end ", i - 1));
        }
        nested.push_str("return f199()");
        inputs.push(nested);
        // Function bodies nested as deep as the parser allows, each calling the next at its
        // deepest point.
        let deep = |inner: &str| format!("{}{inner}{}", "do ".repeat(56), " end".repeat(56));
        let mut chain = format!(
            "local function g0() {} end ",
            deep("return redis.call('get', KEYS[1])")
        );
        for i in 1..4 {
            chain.push_str(&format!(
                "local function g{i}() {} end ",
                deep(&format!("return g{}()", i - 1))
            ));
        }
        chain.push_str(&deep("return g3()"));
        inputs.push(chain);
        for input in inputs {
            let start = std::time::Instant::now();
            assert!(lua::parse_script(input.as_bytes()).is_ok(), "{input}");
            // On a thread with the 2 MiB stack the proxy's worker threads have.
            let text = input.clone();
            let meaning = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || recognise(text.as_bytes()))
                .unwrap()
                .join()
                .unwrap();
            assert_eq!(meaning, Meaning::Unknown);
            let took = start.elapsed();
            assert!(
                took < std::time::Duration::from_millis(500),
                "{took:?} for {}...",
                &input[..40]
            );
        }
    }

    /// Near misses: each would be unsafe (or different) to run as the lock operation it
    /// resembles.
    #[test]
    fn near_misses_stay_unknown() {
        for text in [
            // bsm obtain without the prefix check: MSET overwrites another holder's keys.
            "local a = {} for _, k in ipairs(KEYS) do table.insert(a, k) table.insert(a, ARGV[1]) end \
             if redis.call('msetnx', unpack(a)) ~= 1 then redis.call('mset', unpack(a)) end \
             for _, k in ipairs(KEYS) do redis.call('pexpire', k, ARGV[3]) end return redis.status_reply('OK')",
            // The prefix taken from another argument than the token.
            "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return redis.status_reply('OK') end \
             local n = tonumber(ARGV[2]) \
             if redis.call('getrange', KEYS[1], 0, n - 1) == string.sub(ARGV[4], 1, n) then \
               return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[3]) end",
            // The prefix test inverted: takes over keys that are NOT the caller's.
            "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return redis.status_reply('OK') end \
             local n = tonumber(ARGV[2]) \
             if redis.call('getrange', KEYS[1], 0, n - 1) ~= string.sub(ARGV[1], 1, n) then \
               return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[3]) end",
            // bsm release without the value compare, still answering OK.
            "redis.call('del', unpack(KEYS)) return redis.status_reply('OK')",
            // bsm release that deletes when a value does not match.
            "local v = redis.call('mget', unpack(KEYS)) for i, _ in ipairs(KEYS) do \
             if v[i] == ARGV[1] then return false end end redis.call('del', unpack(KEYS)) return redis.status_reply('OK')",
            // A write to a key not in KEYS.
            "if redis.call('SETNX', KEYS[1], ARGV[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) \
             redis.call('set', 'last-owner', ARGV[1]) return 1 else return 0 end",
            // SETNX without a TTL: a lock that never expires.
            "if redis.call('SETNX', KEYS[1], ARGV[1]) == 1 then return 1 else return 0 end",
            // OK/FAIL where the refusal overwrites the holder anyway.
            "local val = redis.call('get', KEYS[1]) if not val or val == ARGV[1] then \
             redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 'OK' else \
             redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 'FAIL' end",
            // The same reply whether granted or not: the client could not tell.
            "local val = redis.call('get', KEYS[1]) if not val or val == ARGV[1] then \
             redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end return 'OK'",
            // A table alias: the insert goes through `b`, the delete reads `a`.
            "local a = {} local b = a table.insert(b, KEYS[1]) \
             if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', unpack(a)) end return 0",
            // A recursive function.
            "local function f() return f() end return f()",
            // unpack anywhere but the end of a redis.call.
            "local k = unpack(KEYS) if redis.call('get', k) == ARGV[1] then return redis.call('del', k) end return 0",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
        // A constant reply longer than the proxy keeps (Short::MAX bytes).
        let long = format!(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end \
             return '{}'",
            "x".repeat(Short::MAX + 1)
        );
        assert_eq!(recognise(long.as_bytes()), Meaning::Unknown);
    }

    /// Take-or-already-mine: a key that holds the caller's token answers the grant and keeps
    /// its TTL (no refresh), whatever the spelling.
    #[test]
    fn take_or_keep_is_recognised() {
        let keep = |text: &str| {
            let l = lock(text.as_bytes());
            (
                l.choice,
                l.token_arg,
                l.ttl_arg,
                l.unit,
                l.all_keys,
                l.answer,
            )
        };
        let plain = (
            Choice::Always(Op::AcquireOrKeep),
            1,
            2,
            TtlUnit::Millis,
            false,
            Answer::OneZero,
        );
        for text in [
            "if redis.call('get', KEYS[1]) == ARGV[1] then return 1 \
             elseif redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 else return 0 end",
            "local k = KEYS[1] local me = ARGV[1] \
             if redis.call('GET', k) == me or redis.call('SET', k, me, 'NX', 'PX', ARGV[2]) then return 1 end return 0",
        ] {
            assert_eq!(keep(text), plain, "{text}");
        }
        // Seconds, and a fresh grant told apart from "already mine".
        assert_eq!(
            keep(
                "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end \
                 if redis.call('get', KEYS[1]) == ARGV[1] then return 1 end return -1"
            ),
            (
                Choice::Always(Op::AcquireOrKeep),
                1,
                2,
                TtlUnit::Seconds,
                false,
                Answer::Const(Replies {
                    ok: Lit::Int(0),
                    no: Lit::Int(-1),
                    gone: Lit::Int(-1),
                    again: Lit::Int(1),
                })
            )
        );
        // Near misses: each must stay unknown.
        for text in [
            // "Already mine" where the value is NOT the token: any holder is answered yes.
            "if redis.call('get', KEYS[1]) then return 1 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
            // Already mine answered like a refusal and a fresh grant alike: nothing to tell.
            "if redis.call('get', KEYS[1]) == ARGV[1] then return 0 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end return 0",
            // Already mine: the TTL is cut to a constant (neither kept nor the one asked).
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('pexpire', KEYS[1], 100) return 1 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
            // Already mine: the key is rewritten without a TTL.
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[1], ARGV[1]) return 1 end \
             if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0",
            // Every key of KEYS: take-or-keep is one key only.
            "for _, k in ipairs(KEYS) do if redis.call('get', k) ~= ARGV[1] and \
             not redis.call('set', k, ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end end return 1",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    /// The token passed in `KEYS[2]`, its TTL in `ARGV[1]` (numbered after the keys' parameters,
    /// see `ARGV_AFTER_KEYS`).
    #[test]
    fn a_token_in_keys_with_its_ttl_in_argv_is_recognised() {
        let l = lock(
            b"local v = redis.call('get', KEYS[1]) \
              if not v then redis.call('set', KEYS[1], KEYS[2], 'PX', ARGV[1]) return 1 end \
              if v == KEYS[2] then redis.call('pexpire', KEYS[1], ARGV[1]) return 1 end return 0",
        );
        assert_eq!(
            (l.choice, l.params_in_keys, l.token_arg, l.ttl_arg, l.answer),
            (
                Choice::Always(Op::AcquireOrRefresh),
                true,
                1,
                crate::lockop::ARGV_AFTER_KEYS + 1,
                Answer::OneZero
            )
        );
        for text in [
            // Writes KEYS[2] but compares ARGV[1]: another holder's key is overwritten.
            "local v = redis.call('get', KEYS[1]) \
             if not v or v == ARGV[1] then redis.call('set', KEYS[1], KEYS[2], 'PX', ARGV[2]) return 1 end return 0",
            // Uses KEYS[2] as a key as well as the token.
            "if redis.call('set', KEYS[1], KEYS[2], 'NX', 'PX', ARGV[1]) then \
             redis.call('set', KEYS[2], '1') return 1 end return 0",
            // The TTL is the token itself.
            "if redis.call('set', KEYS[1], KEYS[2], 'NX', 'PX', KEYS[2]) then return 1 end return 0",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    /// A constant written as the lock's value (a mutex without ownership): an acquisition whose
    /// token is the literal; nothing else with a literal is taken for a lock operation.
    #[test]
    fn a_constant_value_acquisition_is_recognised() {
        let l = lock(
            b"if redis.call('exists', KEYS[1]) == 0 then \
              return redis.call('psetex', KEYS[1], ARGV[1], 'locked') end return 'BUSY'",
        );
        assert_eq!(
            (l.choice, l.token_literal.as_deref(), l.ttl_arg, l.answer),
            (
                Choice::Always(Op::Acquire),
                Some(&b"locked"[..]),
                1,
                Answer::Const(Replies::new(Lit::Ok, bulk("BUSY"), bulk("BUSY")))
            )
        );
        let l = lock(b"return redis.call('set', KEYS[1], 1, 'NX', 'EX', ARGV[2])");
        assert_eq!(
            (l.choice, l.token_literal.as_deref(), l.ttl_arg, l.unit),
            (
                Choice::Always(Op::Acquire),
                Some(&b"1"[..]),
                2,
                TtlUnit::Seconds
            )
        );
        // Overwrites any value but its own: not an acquisition, but `SET key locked IFNE locked
        // PX ttl` (see a_constant_written_unless_the_key_holds_it_is_set_ifne).
        assert!(matches!(
            recognise(
                b"if redis.call('get', KEYS[1]) == 'locked' then return 'BUSY' end \
                  return redis.call('psetex', KEYS[1], ARGV[1], 'locked')"
            ),
            Meaning::Unless(_)
        ));
        for text in [
            // Two different constants.
            "if redis.call('exists', KEYS[1]) == 1 then return 0 end \
             if ARGV[2] == 'a' then redis.call('psetex', KEYS[1], ARGV[1], 'x') \
             else redis.call('psetex', KEYS[1], ARGV[1], 'y') end return 1",
            // A release of the constant: anyone's release.
            "if redis.call('get', KEYS[1]) == 'locked' then return redis.call('del', KEYS[1]) end return 0",
            // An extension of the constant.
            "if redis.call('get', KEYS[1]) == 'locked' then return redis.call('pexpire', KEYS[1], ARGV[1]) end return 0",
            // No TTL: never expires.
            "if redis.call('setnx', KEYS[1], 'locked') == 1 then return 1 end return 0",
            // An empty constant.
            "return redis.call('set', KEYS[1], '', 'NX', 'PX', ARGV[1])",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
    }

    /// The shapes of issue 25: the token and TTL in any argument, any constant per outcome,
    /// a refresh answered apart from a fresh grant, a guarded expiry, a release that publishes.
    #[test]
    fn scripts_in_the_shapes_people_write_are_recognised() {
        use crate::lockop::{Announce, AnnounceWhen, NumTest, Param};
        // Token in ARGV[2], TTL (seconds) in ARGV[1].
        let l = lock(
            b"local v = redis.call('get', KEYS[1]) \
              if not v then redis.call('setex', KEYS[1], ARGV[1], ARGV[2]) return true \
              elseif v == ARGV[2] then redis.call('expire', KEYS[1], ARGV[1]) return true end",
        );
        assert_eq!(
            (l.choice, l.token_arg, l.ttl_arg, l.unit),
            (Choice::Always(Op::AcquireOrRefresh), 2, 1, TtlUnit::Seconds)
        );
        // A refresh answers 1, a fresh grant +OK, a refusal nil.
        let l = lock(
            b"if redis.call('get', KEYS[1]) == ARGV[1] then \
              return redis.call('pexpire', KEYS[1], ARGV[2]) end \
              return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])",
        );
        assert_eq!(
            l.answer,
            Answer::Const(Replies {
                ok: Lit::Ok,
                no: Lit::Nil,
                gone: Lit::Nil,
                again: Lit::Int(1),
            })
        );
        // `tostring` of a comparison; a one-element table.
        let l = lock(
            b"local ok = redis.call('get', KEYS[1]) == ARGV[1] \
              if ok then redis.call('del', KEYS[1]) end return tostring(ok)",
        );
        assert_eq!(
            l.answer,
            Answer::Const(Replies::new(bulk("true"), bulk("false"), bulk("false")))
        );
        let l = lock(
            b"if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) \
              return {1} end return {0}",
        );
        assert_eq!(
            l.answer,
            Answer::Const(Replies::new(Lit::Single(1), Lit::Single(0), Lit::Single(0)))
        );
        // An expiry behind a numeric test of its argument (the other branch persists the key:
        // a call with such a TTL is refused when bound).
        let l = lock(
            b"if redis.call('get', KEYS[1]) == ARGV[1] then \
              if tonumber(ARGV[2]) > 0 then return redis.call('expire', KEYS[1], ARGV[2]) end \
              redis.call('persist', KEYS[1]) return 1 else return 0 end",
        );
        assert_eq!(
            (l.choice, l.ttl_arg, l.unit),
            (Choice::Always(Op::Extend), 2, TtlUnit::Seconds)
        );
        for guard in [
            "tonumber(ARGV[2]) >= 1",
            "0 < tonumber(ARGV[2])",
            "ARGV[2] ~= ''",
        ] {
            let text = format!(
                "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then \
                 if {guard} then redis.call('pexpire', KEYS[1], ARGV[2]) end return 1 end return 0"
            );
            assert_eq!(
                lock(text.as_bytes()).choice,
                Choice::Always(Op::Acquire),
                "{guard}"
            );
        }
        // A test that some positive TTLs fail is no guard.
        for guard in [
            "tonumber(ARGV[2]) > 5",
            "ARGV[2] ~= '100'",
            "tonumber(ARGV[2]) < 9",
        ] {
            let text = format!(
                "if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then \
                 if {guard} then redis.call('pexpire', KEYS[1], ARGV[2]) end return 1 end return 0"
            );
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{guard}");
        }
        // Names taken from `unpack(ARGV)`.
        let l = lock(
            b"local token, ttl = unpack(ARGV) if redis.call('get', KEYS[1]) == token then \
              return redis.call('pexpire', KEYS[1], ttl) end return 0",
        );
        assert_eq!(
            (l.choice, l.token_arg, l.ttl_arg),
            (Choice::Always(Op::Extend), 1, 2)
        );
        // A numeric flag picks the operation; `pairs(KEYS)` walks the keys in order.
        let l = lock(
            b"if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
              local left = redis.call('pttl', KEYS[1]) if left < 0 then return 0 end \
              if tonumber(ARGV[3]) == 1 then return redis.call('pexpire', KEYS[1], ARGV[2]) end \
              return redis.call('pexpire', KEYS[1], left + ARGV[2])",
        );
        assert_eq!(
            l.choice,
            Choice::IfNum {
                arg: 3,
                test: NumTest::Equal(1),
                then: Op::Extend,
                otherwise: Op::ExtendAdd
            }
        );
        assert_eq!(l.op(&argv(&["t", "5", "1"])), Op::Extend);
        assert_eq!(l.op(&argv(&["t", "5", "0"])), Op::ExtendAdd);
        let l = lock(
            b"for _, k in pairs(KEYS) do if redis.call('get', k) ~= ARGV[1] then return 0 end end \
              for _, k in pairs(KEYS) do redis.call('del', k) end return 1",
        );
        assert_eq!(
            (l.choice, l.all_keys),
            (Choice::Always(Op::ReleaseAll), true)
        );
        // A release that publishes the key's name to a channel named by ARGV[2], where it
        // deleted.
        let l = lock(
            b"if redis.call('get', KEYS[1]) == ARGV[1] and redis.call('unlink', KEYS[1]) == 1 \
              then redis.call('publish', ARGV[2], KEYS[1]) return true end return false",
        );
        assert_eq!(l.choice, Choice::Always(Op::Release));
        assert_eq!(
            l.announce,
            Some(Announce {
                command: Bytes::from_static(b"PUBLISH"),
                channel: Param::Arg(2),
                message: Param::Key(1),
                when: AnnounceWhen::Released,
            })
        );
        // ... to KEYS[2], where it deleted or found the key gone.
        let l = lock(
            b"if redis.call('exists', KEYS[1]) == 1 then \
              if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
              redis.call('del', KEYS[1]) end redis.call('publish', KEYS[2], ARGV[2]) return 1",
        );
        assert_eq!(
            l.announce.map(|a| (a.channel, a.message, a.when)),
            Some((Param::Key(2), Param::Arg(2), AnnounceWhen::ReleasedOrGone))
        );
        // Publishing where it did not release, or twice: not a release's announcement.
        for text in [
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) return 1 end \
             redis.call('publish', ARGV[2], 'x') return 0",
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) \
             redis.call('publish', ARGV[2], 'x') redis.call('publish', ARGV[2], 'x') return 1 end return 0",
            "redis.call('publish', ARGV[2], 'x') return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3])",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
        // A re-entry counter in a key built from KEYS[1]: refused, and the reason says so.
        let counter = b"local n = KEYS[1] .. ':count:' .. ARGV[1] \
            if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
            redis.call('incr', n) return 1 end return 0";
        assert_eq!(recognise(counter), Meaning::Unknown);
        assert!(
            lua::refusal(counter).starts_with("touches a key not given in KEYS"),
            "{}",
            lua::refusal(counter)
        );
    }
}
