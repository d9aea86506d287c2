//! # redlock-proxy
//!
//! A Redis-protocol server that turns the ordinary lock commands of unmodified clients into
//! Redlock quorum operations across N independent Redis masters.
//!
//! # Layout
//! Layers that only look down (`docs/architecture.md` draws them; a unit test checks them).
//! Follow one `SET key token NX PX ttl` from the top:
//!
//! - [`server`]: accept loops, client cap, drain; [`bootstrap`] builds the parts a
//!   configuration names, once; `reload` changes the member set on `SIGHUP`; `metrics` serves `/metrics`; [`dev`] starts local masters;
//!   [`logging`] sets up logs.
//! - `client`: one connection: decode, dispatch, answer in request order.
//! - [`command`]: typed commands ([`command::spec`]), dispatch, session state, and one module
//!   per command family, down to the Redlock engine ([`command::lock`]).
//! - `proxy`: the state every connection shares.
//! - The lock engine: `keylock` (per-key order), [`scripts`] and `lua` (what a script
//!   means), `acl` (users and their keys), `pubsub` (publish/subscribe across the masters).
//! - [`quorum`]: the one fan-out and majority rule, with its deadlines.
//! - `backend`: one pipelined connection per master (a Sentinel member's follows its
//!   primary), its health and clock watch, and Redis Cluster members routed per slot to one
//!   such connection per shard primary; `tls`.
//! - [`wire`]: every RESP encoder and decoder, client side and master side.
//! - Vocabulary: [`lockop`] (lock operations, Redlock arithmetic), `error` (the error
//!   catalogue), `counters` (the one counter store), [`config`] (configuration as data),
//!   `endpoint` (a member's address: standalone or Sentinel).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// A table of byte strings of different lengths, as one array of slices, for the tests that
/// run one check over many inputs: `for bad in byte_strings![b"", b"-1x"] { ... }` (a plain
/// array of byte-string literals would not unify their lengths).
#[cfg(test)]
macro_rules! byte_strings {
    ($($b:expr),* $(,)?) => { [$(&$b[..]),*] };
}

pub(crate) mod acl;
pub(crate) mod backend;
pub mod bootstrap;
pub(crate) mod client;
pub mod command;
pub mod config;
pub(crate) mod counters;
pub mod dev;
pub mod endpoint;
pub mod error;
pub(crate) mod keylock;
#[cfg(test)]
mod layering;
pub mod lockop;
pub mod logging;
pub(crate) mod lua;
pub(crate) mod metrics;
pub(crate) mod proxy;
pub(crate) mod pubsub;
pub mod quorum;
pub(crate) mod reload;
pub mod scripts;
pub mod server;
pub(crate) mod tls;
pub mod wire;
