//! One client's session: the state its commands read and change (protocol, name, login, the
//! transaction being queued, watched keys, subscriptions, `CLIENT REPLY`), kept apart from the
//! socket loop that carries it.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::acl::Keys;
use crate::pubsub::ClientSubs;
use crate::wire::reply::Reply;

/// Per-connection state that commands may read and change.
#[derive(Debug, Clone)]
pub struct Conn {
    /// Client id, as `CLIENT ID` reports it.
    pub id: u64,
    /// Replies are RESP3 after `HELLO 3`.
    pub resp3: bool,
    /// Name set by `CLIENT SETNAME` or `HELLO ... SETNAME`.
    pub name: Option<Bytes>,
    /// False until `AUTH` succeeds, when a password is configured.
    pub authed: bool,
    /// The commands queued since `MULTI`; `None` outside a transaction.
    pub multi: Option<Vec<Vec<Bytes>>>,
    /// What the commands queued since `MULTI` hold: their bytes, and the bookkeeping of each
    /// argument (see `transaction::queue`).
    pub multi_bytes: usize,
    /// A command queued since `MULTI` was refused, so `EXEC` must abort.
    pub multi_failed: bool,
    /// The keys under `WATCH`, with what the majority held when each was watched.
    pub watched: Vec<Watched>,
    /// Bytes of the values kept for `watched` (made by the first `WATCH`, and anew when the
    /// keys are unwatched): capped at `client_query_buffer_limit`.
    pub watched_bytes: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// Subscriptions, once the client has subscribed to anything.
    pub pubsub: Option<Arc<ClientSubs>>,
    /// The keys the logged-in user may touch.
    pub keys: Keys,
    /// `CLIENT REPLY OFF`: no reply is written until `CLIENT REPLY ON`.
    pub replies_off: bool,
    /// `CLIENT REPLY SKIP` has just run: the next command's reply is not written.
    pub skip_next: bool,
    /// The command running is the one after `CLIENT REPLY SKIP` (`CLIENT REPLY ON` clears it).
    pub skip_this: bool,
    /// Tells blocking commands (`BLPOP`) that the client has gone.
    pub gone: Gone,
}

/// Tells a connection's blocking commands that its client has gone: it has sent all it will
/// (end of input), or the connection has ended. Redis drops a blocked client that disconnects;
/// here its `BLPOP`s stop polling the masters then, rather than for up to their full timeout in
/// the background. The signal is made by the first blocking command only (an idle connection
/// carries none), is raised when the connection's state is dropped, and is not shared by a
/// clone of that state (the scratch copy a transaction runs with).
#[derive(Default, Debug)]
pub struct Gone(Option<tokio_util::sync::CancellationToken>);

impl Gone {
    /// The signal, for a blocking command to watch.
    pub fn watch(&mut self) -> tokio_util::sync::CancellationToken {
        self.0.get_or_insert_with(Default::default).clone()
    }

    /// Raises the signal.
    pub fn raise(&self) {
        if let Some(t) = &self.0 {
            t.cancel();
        }
    }
}

impl Clone for Gone {
    /// A clone watches nothing of the original's: dropping it tells nobody the client has gone.
    fn clone(&self) -> Gone {
        Gone(None)
    }
}

impl Drop for Gone {
    fn drop(&mut self) {
        self.raise();
    }
}

impl Conn {
    /// A new connection's state.
    pub fn new(id: u64, needs_auth: bool) -> Conn {
        Conn {
            id,
            resp3: false,
            name: None,
            authed: !needs_auth,
            multi: None,
            multi_bytes: 0,
            multi_failed: false,
            watched: Vec::new(),
            watched_bytes: None,
            pubsub: None,
            keys: Keys::All,
            replies_off: false,
            skip_next: false,
            skip_this: false,
            gone: Gone::default(),
        }
    }

    /// Whether the reply of the command that has just run is dropped (`CLIENT REPLY OFF`, or
    /// the command after `CLIENT REPLY SKIP`); asking consumes a `SKIP`.
    pub fn reply_dropped(&mut self) -> bool {
        self.replies_off || std::mem::take(&mut self.skip_this)
    }

    /// True while subscribed to a channel, pattern or shard channel.
    pub fn subscribed(&self) -> bool {
        self.pubsub.as_ref().is_some_and(|s| s.active())
    }
}

/// A key under `WATCH`.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The key.
    pub key: Bytes,
    /// What a quorum held at `WATCH` (`Some(reply)`, nil included), or `None` when no reply had
    /// a quorum; unset until the read is done.
    pub(super) seen: Arc<OnceLock<Option<Reply>>>,
}

impl Watched {
    /// The value seen at `WATCH`, when a quorum held one.
    pub(super) fn value(&self) -> Option<Bytes> {
        match self.seen.get() {
            Some(Some(Reply::Bulk(v))) => Some(v.clone()),
            _ => None,
        }
    }
}
