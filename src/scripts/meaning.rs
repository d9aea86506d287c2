//! What a script means: declared in the configuration (by SHA1 or by syntax tree) or
//! recognised by what it does (see [`crate::lua`]). The cache in [`super::cache`] stores the
//! answer with each script.

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
pub(super) struct Declared {
    sha: Option<String>,
    canonical: Option<String>,
    meaning: LockScript,
}

impl Declared {
    pub(super) fn from_config(d: &ScriptDecl) -> Declared {
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
pub(super) fn classify(body: &[u8], sha: &str, declared: &[Declared]) -> Meaning {
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
