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
//! understands; they run the proxy's canonical scripts ([`ACQUIRE`], [`EXTEND`],
//! [`RELEASE`]), sent with `EVAL`, so that a restarted master that forgot every script needs no
//! reloading. Operators can declare the meaning of their own scripts in the configuration.
//!
//! # Layout
//! - `meaning`: what a script means, declared or recognised ([`Meaning`], [`Script`]).
//! - `cache`: the script cache, by SHA1, bounded in bytes ([`ScriptCache`]).
//! - `texts`: the proxy's own scripts, run on the masters.
//!
//! [`LockScript`]: crate::lockop::LockScript
//! [`HashScript`]: crate::lockop::HashScript
//! [`Op`]: crate::lockop::Op
//! [`Answer`]: crate::lockop::Answer
//! [`HashOp`]: crate::lockop::HashOp

mod cache;
#[cfg(test)]
#[macro_use]
mod fixtures;
mod meaning;
#[cfg(test)]
mod more_libraries;
#[cfg(test)]
mod rewordings;
#[cfg(test)]
mod tests;
mod texts;

pub use cache::ScriptCache;
pub use meaning::{Meaning, Script, recognise, sha1_hex};
pub use texts::{
    ACQUIRE, ClusterScripts, DELETE, EXTEND, INSPECT, RELEASE, RELEASE_ALL, RELEASE_PUBLISH,
    REMAINING,
};
