//! Member kinds behind one interface. A member is one voter of the quorum, of one of these
//! kinds:
//!
//! | kind | written as | module |
//! |---|---|---|
//! | `standalone` | `host:port`, `redis://…`, `rediss://…` | [`standalone`] |
//! | `sentinel` | `redis-sentinel://…#name`, `rediss-sentinel://…` | [`sentinel`] |
//! | `cluster` | `redis-cluster://…`, `rediss-cluster://…` | [`cluster`] |
//!
//! Every kind implements [`Kind`]: its name (defined once, in its module), how it is started
//! from its [`Link`] into a [`Backend`] handle (which sends each request through the member's
//! own pipelined connection, or through a `Router` for a member made of several masters),
//! what the member is called, and where its pub/sub link goes. [`table`] is where each kind is
//! registered: the one place that turns a `backends` entry into a [`Link`] of its kind. A new
//! kind is its module here, its line in [`table`], and its URL grammar in `crate::endpoint`.
//!
//! What the kinds share stays below them: one connection per master, its greeting, health,
//! quarantine and clock watch (`super`). A kind that follows its primary (Sentinel) hands the
//! driver its Sentinels in [`Settings::sentinel`], which the greeting asks before every connect
//! and judges failovers with.

pub mod cluster;
pub mod sentinel;
pub mod standalone;
pub mod table;

use std::fmt;
use std::sync::Arc;

use super::cluster::route::Scripts;
use super::sentinel::Sentinels;
use super::target::Credentials;
use super::{Backend, Settings};
use crate::tls::TlsTarget;

/// What every member kind does.
pub trait Kind: fmt::Debug + Send + Sync {
    /// The kind's name in `INFO` (`masterN_kind`) and `/metrics` (the `kind` label).
    fn name(&self) -> &'static str;

    /// The member's name in logs, `INFO` and `/metrics`, from its link (its address unless the
    /// kind says otherwise).
    fn member_name(&self, link: &Link) -> String {
        link.addr.clone()
    }

    /// Starts the member in the background and returns its handle. `settings` carry the
    /// link's credentials and TLS; `cx` what the layers above lend every member.
    fn spawn(&self, link: &Link, settings: Settings, cx: &Context) -> Backend;

    /// The Sentinels that name the member's primary, for a kind that follows one: a side
    /// connection (the pub/sub link) asks them where to go, and follows what they name.
    fn follows(&self) -> Option<&Arc<Sentinels>> {
        None
    }

    /// The node the member's pub/sub link dials after `failures` failed attempts.
    fn link_node(&self, link: &Link, failures: usize) -> String {
        let _ = failures;
        link.addr.clone()
    }

    /// Whether the pub/sub link must be on a primary (asked `ROLE`, and left when it is not).
    fn link_needs_primary(&self) -> bool {
        true
    }
}

/// What the layers above lend a member when it starts.
#[derive(Clone)]
pub struct Context {
    /// What the proxy's scripts mean, for a kind that routes them by key (cluster).
    pub scripts: Arc<dyn Scripts>,
}

/// One member, resolved from the configuration: its kind, where, how, and as whom.
#[derive(Debug, Clone)]
pub struct Link {
    /// `host:port`, the master's name in logs and `INFO` (a Sentinel member's URL without its
    /// password; a cluster member's first seed).
    pub addr: String,
    /// Sent as `AUTH` before anything else on every connect.
    pub auth: Option<Credentials>,
    /// Set when the connection is TLS.
    pub tls: Option<TlsTarget>,
    /// The member's kind, with what that kind needs (its Sentinels, its seeds).
    pub kind: Arc<dyn Kind>,
}

impl Link {
    /// The member's name in logs and `INFO`: its address, or its cluster URL (no password).
    pub fn name(&self) -> String {
        self.kind.member_name(self)
    }

    /// Two links reach the same member: the same kind, name, address, credentials and TLS use.
    pub fn same(&self, other: &Link) -> bool {
        self.kind.name() == other.kind.name()
            && self.addr == other.addr
            && self.name() == other.name()
            && self.auth == other.auth
            && self.tls.is_some() == other.tls.is_some()
    }

    /// Starts the member (see [`Kind::spawn`]): `settings` with the link's credentials and TLS.
    pub fn spawn(&self, settings: &Settings, cx: &Context) -> Backend {
        let settings = Settings {
            auth: self.auth.clone(),
            tls: self.tls.clone(),
            ..settings.clone()
        };
        self.kind.spawn(self, settings, cx)
    }
}
