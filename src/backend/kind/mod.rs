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
use std::time::Duration;

use super::cluster::route::Scripts;
use super::dial;
use super::handshake::Wire;
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

    /// A side connection to the member (the pub/sub links), and the address connected to: for
    /// a member that follows its primary, the node its Sentinels name now.
    pub async fn dial(&self, within: Duration) -> Result<(Wire, String), String> {
        let addr = match self.kind.follows() {
            None => self.addr.clone(),
            Some(s) => s.resolve(within).await?,
        };
        let wire = dial::open(&addr, self.auth.as_ref(), self.tls.as_ref(), within).await?;
        Ok((wire, addr))
    }

    /// [`Link::dial`] for a subscriber link, which must be on a primary: a replica hears what
    /// is published on its primary only through replication, late, and not at all while its
    /// link to the primary is down (a demoted primary not yet attached to the new one hears
    /// nothing). So the node is asked `ROLE`, as a data connection's greeting asks it, and one
    /// that is not a primary is refused (for a Sentinel member, the next attempt asks another
    /// Sentinel first). A kind whose nodes all hear every `PUBLISH` (cluster) is exempt.
    pub async fn dial_primary(&self, within: Duration) -> Result<(Wire, String), String> {
        let (mut wire, addr) = self.dial(within).await?;
        if !self.kind.link_needs_primary() {
            return Ok((wire, addr));
        }
        let role = dial::role(&mut wire, within).await?;
        if role == "master" {
            return Ok((wire, addr));
        }
        if let Some(s) = self.kind.follows() {
            s.rotate();
        }
        Err(format!(
            "{addr} reports role '{role}', not master: a subscriber there would not hear what is \
             published on the primary"
        ))
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
