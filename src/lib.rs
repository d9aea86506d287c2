//! # redlock-proxy
//!
//! A Redis-protocol server that turns the ordinary lock commands of unmodified clients into
//! Redlock quorum operations across N independent Redis masters.
//!
//! # Layout
//! Follow one `SET key token NX PX ttl` from top to bottom:
//!
//! - [`server`]: accept loop and client cap.
//! - [`proxy`]: [`proxy::Proxy`], the state all clients share.
//! - [`client`]: one connection: decode, dispatch, answer in request order.
//! - [`request`]: RESP multibulk and inline request decoding, with size limits.
//! - [`resp`]: the one line-end finder and the one integer parser every RESP reader uses.
//! - [`command`]: the command table, arity checks, and one module per command family.
//! - [`keylock`]: per-key ordering so an operation's clean-up precedes the next one on its key.
//! - [`quorum`]: quorum and validity arithmetic, and the one fan-out + majority rule.
//! - [`inbox`]: where one fan-out's replies land. [`deadline`]: one timer for every vote's
//!   deadline.
//! - [`backend`]: one pipelined connection per master: a cloneable handle plus a driver task,
//!   and the master's health (down, restart quarantine, clock watch).
//! - [`scripts`]: the script cache and what a Lua script means.
//! - [`lua`]: Lua lexer, depth-capped parser and behavioural analyser that recognise lock scripts.
//! - [`pubsub`]: publish/subscribe across the masters, each message delivered once.
//! - [`reply`]: reply values and their RESP2/RESP3 encoding.
//! - [`acl`]: client users, their passwords and the keys each may touch.
//! - [`error`]: the error catalogue: every error the proxy words, and the kinds (an error's
//!   first word) that replies, logs and `/metrics` labels derive from.
//! - [`config`]: the TOML file and flags. [`stats`]: counters for `INFO`. [`dev`]: local masters.
//! - [`tls`]: rustls towards TLS masters, and the TLS listener for clients. [`logging`]: stderr, text or
//!   JSON. [`metrics`]: Prometheus families served at `/metrics`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod acl;
pub(crate) mod backend;
pub mod bootstrap;
pub(crate) mod client;
pub mod command;
pub mod config;
pub(crate) mod counters;
pub mod dev;
pub(crate) mod endpoint;
pub mod error;
pub(crate) mod keylock;
pub mod lockop;
pub mod logging;
pub(crate) mod lua;
pub(crate) mod metrics;
pub(crate) mod proxy;
pub(crate) mod pubsub;
pub mod quorum;
pub mod scripts;
pub mod server;
pub(crate) mod tls;
pub mod wire;
