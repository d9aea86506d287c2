//! One client's session: the state its commands read and change (protocol, name, login, the
//! transaction being queued, watched keys, subscriptions, `CLIENT REPLY`), kept apart from the
//! socket loop that carries it.
//!
//! The state is private: commands change it through methods named for what they do (`log_in`,
//! `begin_multi`, `queue`, `fail_multi`, `take_multi`, `watch`, `take_watched`, `reply_off`,
//! ...), so each rule that ties two fields together (a refused command fails only an open
//! transaction; unwatching frees the watched values' byte budget; a `SKIP` applies to the next
//! command only) is kept in one place.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::acl::{Access, Patterns};
use crate::error::Error;
use crate::pubsub::{ClientSubs, Hub};
use crate::wire::reply::Reply;

/// Per-connection state that commands read and change, through methods named for what they
/// do with it.
#[derive(Debug, Clone)]
pub struct Conn {
    /// Client id, as `CLIENT ID` reports it.
    id: u64,
    /// Replies are RESP3 after `HELLO 3`.
    resp3: bool,
    /// Name set by `CLIENT SETNAME` or `HELLO ... SETNAME`.
    name: Option<Bytes>,
    /// False until `AUTH` succeeds, when a password is configured.
    authed: bool,
    /// The keys the logged-in user may touch.
    keys: Patterns,
    /// The channels the logged-in user may subscribe and publish to.
    channels: Patterns,
    /// The transaction being queued since `MULTI`; `None` outside one.
    multi: Option<Multi>,
    /// The keys under `WATCH`, with what the majority held when each was watched.
    watched: Vec<Watched>,
    /// Bytes of the values kept for `watched` (made by the first `WATCH`, and anew when the
    /// keys are unwatched): capped at `client_query_buffer_limit`.
    watched_bytes: Option<Arc<AtomicUsize>>,
    /// Subscriptions, once the client has subscribed to anything.
    pubsub: Option<Arc<ClientSubs>>,
    /// `CLIENT REPLY OFF`: no reply is written until `CLIENT REPLY ON`.
    replies_off: bool,
    /// `CLIENT REPLY SKIP` has just run: the next command's reply is not written.
    skip_next: bool,
    /// The command running is the one after `CLIENT REPLY SKIP` (`CLIENT REPLY ON` clears it).
    skip_this: bool,
    /// Tells blocking commands (`BLPOP`) that the client has gone.
    gone: Gone,
    /// The connection's leases, when it may hold any (shared with `EXEC`'s copy).
    leases: Option<Arc<Leases>>,
    /// The keys whose locks get a lease on this connection: the user's own, or `lease_keys`.
    lease_patterns: Patterns,
}

/// A transaction being queued, between `MULTI` and `EXEC` or `DISCARD`.
#[derive(Debug, Clone, Default)]
struct Multi {
    /// The commands queued, in order.
    queued: Vec<Vec<Bytes>>,
    /// What the queued commands hold: their bytes, and the bookkeeping of each argument
    /// (counted by the caller of [`Conn::queue`] as each command is queued).
    bytes: usize,
    /// A command was refused since `MULTI`, so `EXEC` must abort.
    failed: bool,
}

/// What a transaction came to, once `EXEC` or `DISCARD` closes it.
#[derive(Debug)]
pub enum Transaction {
    /// Every command was queued: `EXEC` runs them, in order.
    Queued(Vec<Vec<Bytes>>),
    /// A command was refused while queueing: `EXEC` aborts (`EXECABORT`).
    Failed,
}

/// Tells a connection's blocking commands that its client has gone: it has sent all it will
/// (end of input), or the connection has ended. Redis drops a blocked client that disconnects;
/// here its `BLPOP`s stop polling the masters then, rather than for up to their full timeout in
/// the background. The signal is made by the first blocking command only (an idle connection
/// carries none), is raised when the connection's state is dropped, and is not shared by a
/// clone of that state (the scratch copy a transaction runs with).
#[derive(Default, Debug)]
struct Gone(Option<CancellationToken>);

impl Gone {
    /// The signal, for a blocking command to watch.
    fn watch(&mut self) -> CancellationToken {
        self.0.get_or_insert_with(Default::default).clone()
    }

    /// Raises the signal.
    fn raise(&self) {
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
            keys: Patterns::All,
            channels: Patterns::All,
            multi: None,
            watched: Vec::new(),
            watched_bytes: None,
            pubsub: None,
            replies_off: false,
            skip_next: false,
            skip_this: false,
            gone: Gone::default(),
            leases: None,
            lease_patterns: Patterns::Only(Arc::from([])),
        }
    }

    /// `RESET`: back to a new connection's state, keeping the id and the gone signal (the
    /// client is still here: its blocking commands keep waiting).
    pub fn reset(&mut self, needs_auth: bool) {
        let gone = std::mem::take(&mut self.gone);
        let leases = self.leases.take();
        *self = Conn::new(self.id, needs_auth);
        self.gone = gone;
        self.leases = leases;
    }

    /// Gives the connection its leases, for locks on keys that match `patterns`.
    pub fn set_leases(&mut self, leases: Arc<Leases>, patterns: Patterns) {
        self.leases = Some(leases);
        self.lease_patterns = patterns;
    }

    /// After a login: the keys whose locks get a lease are the user's.
    pub fn set_lease_patterns(&mut self, patterns: Patterns) {
        self.lease_patterns = patterns;
    }

    /// True when the connection may hold leases at all.
    pub fn may_lease(&self) -> bool {
        self.leases.is_some()
    }

    /// The connection's leases, when a lock on `keys` gets one: there is at least one key, and
    /// every one matches the connection's patterns.
    pub fn leases_for<'a>(&self, mut keys: impl Iterator<Item = &'a [u8]>) -> Option<&Arc<Leases>> {
        let leases = self.leases.as_ref()?;
        let mut any = false;
        let all = keys.all(|k| {
            any = true;
            self.lease_patterns.allows(k)
        });
        (any && all).then_some(leases)
    }

    /// A copy for `EXEC` to run the queued commands with: the same login, protocol, name and
    /// subscriptions, but a gone signal of its own (dropping the copy tells nobody the client
    /// has gone).
    pub fn scratch(&self) -> Conn {
        self.clone()
    }

    // --- Who the client is, and how it is answered. ---

    /// Client id, as `CLIENT ID` reports it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// True when replies are RESP3 (after `HELLO 3`).
    pub fn resp3(&self) -> bool {
        self.resp3
    }

    /// Answers in RESP3 from the next reply on when `resp3` is set, else in RESP2 (`HELLO`).
    pub fn set_resp3(&mut self, resp3: bool) {
        self.resp3 = resp3;
    }

    /// The name set by `CLIENT SETNAME` or `HELLO ... SETNAME`.
    pub fn name(&self) -> Option<&Bytes> {
        self.name.as_ref()
    }

    /// Names the connection (`None` clears the name).
    pub fn set_name(&mut self, name: Option<Bytes>) {
        self.name = name;
    }

    // --- Login. ---

    /// False until the client has logged in, when a password is configured.
    pub fn logged_in(&self) -> bool {
        self.authed
    }

    /// The client has logged in as a user who may touch what `access` grants. Its
    /// subscriptions stay (as in Redis), but the proxy's own notices reach it from now on only
    /// for the new user's keys.
    pub fn log_in(&mut self, access: Access) {
        self.authed = true;
        if let Some(subs) = &self.pubsub {
            subs.set_keys(access.keys.clone());
        }
        self.keys = access.keys;
        self.channels = access.channels;
    }

    /// True when the logged-in user may subscribe or publish to `channel`.
    pub fn may_use_channel(&self, channel: &[u8]) -> bool {
        self.channels.allows(channel)
    }

    /// True when the logged-in user may `PSUBSCRIBE` to `pattern` (see
    /// [`Patterns::allows_pattern`]).
    pub fn may_use_pattern(&self, pattern: &[u8]) -> bool {
        self.channels.allows_pattern(pattern)
    }

    /// True when the logged-in user may touch every one of the keys `keys` names (not even
    /// worked out for a user who may touch any key, as every request on the hot path is).
    pub fn may_touch<'a, I: Iterator<Item = &'a [u8]>>(&self, keys: impl FnOnce() -> I) -> bool {
        match &self.keys {
            Patterns::All => true,
            only => keys().all(|k| only.allows(k)),
        }
    }

    // --- Transactions. ---

    /// True between `MULTI` and `EXEC` or `DISCARD`.
    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// `MULTI`: starts queueing, with nothing queued yet.
    pub fn begin_multi(&mut self) {
        self.multi = Some(Multi::default());
    }

    /// Queues `args` in the open transaction, counting `size` (what keeping them costs)
    /// against `max_bytes`. Past `max_commands` commands or `max_bytes`, the command is not
    /// queued and the transaction fails ([`Conn::fail_multi`]). Outside a transaction, nothing
    /// is queued.
    pub fn queue(
        &mut self,
        args: Vec<Bytes>,
        size: usize,
        max_commands: usize,
        max_bytes: usize,
    ) -> Result<(), Error> {
        let Some(m) = self.multi.as_mut() else {
            return Ok(());
        };
        if m.queued.len() >= max_commands {
            m.failed = true;
            return Err(Error::TooManyQueued { max: max_commands });
        }
        if m.bytes + size > max_bytes {
            m.failed = true;
            return Err(Error::QueuedTooLarge { max: max_bytes });
        }
        m.bytes += size;
        m.queued.push(args);
        Ok(())
    }

    /// A command was refused inside a transaction: `EXEC` will abort, as Redis's does. Outside
    /// one, nothing happens.
    pub fn fail_multi(&mut self) {
        if let Some(m) = self.multi.as_mut() {
            m.failed = true;
        }
    }

    /// Closes the transaction (`EXEC`, `DISCARD`): what it came to, or `None` when none was
    /// open.
    pub fn take_multi(&mut self) -> Option<Transaction> {
        self.multi.take().map(|m| {
            if m.failed {
                Transaction::Failed
            } else {
                Transaction::Queued(m.queued)
            }
        })
    }

    /// Puts `keys` under `WATCH`, unless that would make more than `max_keys` watched.
    /// Returns their watches, for the `WATCH` read to record what it saw, and the count of
    /// bytes the watched keys' values hold, which that read adds its own to (the same count
    /// until the keys are unwatched).
    pub fn watch(
        &mut self,
        keys: &[Bytes],
        max_keys: usize,
    ) -> Result<(Vec<Watched>, Arc<AtomicUsize>), Error> {
        if self.watched.len() + keys.len() > max_keys {
            return Err(Error::TooManyWatched { max: max_keys });
        }
        let watches: Vec<Watched> = keys
            .iter()
            .map(|key| Watched {
                key: key.clone(),
                seen: Arc::default(),
            })
            .collect();
        self.watched.extend_from_slice(&watches);
        let held = self.watched_bytes.get_or_insert_with(Default::default);
        Ok((watches, held.clone()))
    }

    /// Forgets every watched key, and the bytes their values held; returns the keys.
    pub fn take_watched(&mut self) -> Vec<Watched> {
        self.watched_bytes = None;
        std::mem::take(&mut self.watched)
    }

    // --- Subscriptions. ---

    /// The client's subscriptions, once it has subscribed to anything.
    pub fn subs(&self) -> Option<&Arc<ClientSubs>> {
        self.pubsub.as_ref()
    }

    /// The client's subscriptions, attached to `hub` on its first subscription.
    pub fn subscribe_with(&mut self, hub: &Arc<Hub>) -> Arc<ClientSubs> {
        let id = self.id;
        let keys = &self.keys;
        self.pubsub
            .get_or_insert_with(|| ClientSubs::new(hub, id, keys.clone()))
            .clone()
    }

    /// True while subscribed to a channel, pattern or shard channel.
    pub fn subscribed(&self) -> bool {
        self.pubsub.as_ref().is_some_and(|s| s.active())
    }

    // --- `CLIENT REPLY`. ---

    /// `CLIENT REPLY ON`: every reply is written again, from this one on.
    pub fn reply_on(&mut self) {
        self.replies_off = false;
        self.skip_next = false;
        self.skip_this = false;
    }

    /// `CLIENT REPLY OFF`: no reply is written (this one included) until `CLIENT REPLY ON`.
    pub fn reply_off(&mut self) {
        self.replies_off = true;
    }

    /// `CLIENT REPLY SKIP`: the next command's reply is not written (nothing changes while
    /// replies are off).
    pub fn reply_skip(&mut self) {
        self.skip_next = !self.replies_off;
    }

    /// A command is about to run: a `SKIP` just before it applies to it.
    pub fn next_command(&mut self) {
        self.skip_this = std::mem::take(&mut self.skip_next);
    }

    /// Whether the reply of the command that has just run is dropped (`CLIENT REPLY OFF`, or
    /// the command after `CLIENT REPLY SKIP`); asking consumes a `SKIP`.
    pub fn reply_dropped(&mut self) -> bool {
        self.replies_off || std::mem::take(&mut self.skip_this)
    }

    // --- The client's going. ---

    /// The signal a blocking command watches to stop once the client has gone (made by the
    /// first one to ask).
    pub fn gone_signal(&mut self) -> CancellationToken {
        self.gone.watch()
    }

    /// The client has gone (it sent all it will): its blocking commands stop waiting.
    pub fn client_gone(&self) {
        self.gone.raise();
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

/// How many lease notices wait for a connection before more are dropped.
const LOST_QUEUE: usize = 64;

/// The most locks one connection's leases keep at once; a lock granted beyond them gets no
/// lease (it expires by its TTL, as without leases), so one client cannot make the proxy renew
/// without bound.
pub const MAX_LEASES: usize = 10_000;

/// One connection's leases: the locks they keep, the signal that the connection closed, and
/// the way back to it for lease notices.
#[derive(Debug)]
pub struct Leases {
    /// The locks kept now, by key and token (or field): a lock acquired again by its holder
    /// (re-entered, refreshed) keeps its one lease.
    held: Mutex<HashSet<(Bytes, Bytes)>>,
    /// Leases kept plus lease notices not yet read: the connection listens for notices
    /// only while this is above zero, so a connection that holds none pays nothing for them.
    watched: AtomicUsize,
    closed: CancellationToken,
    pushes: mpsc::Sender<Notice>,
}

/// A notice about one of the connection's leases: the proxy's channel it is told on (see
/// [`crate::pubsub::LEASE_LOST`]) and the message.
pub type Notice = (&'static [u8], Bytes);

/// The connection's end of its lease notices, pushed to it as the channel's messages.
pub type Pushes = mpsc::Receiver<Notice>;

impl Leases {
    /// Leases for a connection; the receiver is the connection's.
    pub fn new() -> (Arc<Leases>, Pushes) {
        let (pushes, rx) = mpsc::channel(LOST_QUEUE);
        let leases = Leases {
            held: Mutex::default(),
            watched: AtomicUsize::new(0),
            closed: CancellationToken::new(),
            pushes,
        };
        (Arc::new(leases), rx)
    }

    /// The connection has closed: every lease of it stops renewing.
    pub fn close(&self) {
        self.closed.cancel();
    }
}

impl Leases {
    fn held(&self) -> std::sync::MutexGuard<'_, HashSet<(Bytes, Bytes)>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that the lock `id` (its key, and its token or field) is kept from now on; false
    /// when it is kept already, or when the connection keeps [`MAX_LEASES`] locks already.
    pub fn keep(&self, id: (Bytes, Bytes)) -> bool {
        let mut held = self.held();
        let kept = held.len() < MAX_LEASES && held.insert(id);
        if kept {
            self.watched.fetch_add(1, Ordering::Relaxed);
        }
        kept
    }

    /// Notes that the lock `id` is kept no more; `told` when its loss was told to the
    /// connection (which still has to read the notice).
    pub fn kept(&self, id: &(Bytes, Bytes), told: bool) {
        self.held().remove(id);
        if !told {
            self.watched.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// True while the connection keeps a lease or has a lease notice to read.
    pub fn watching(&self) -> bool {
        self.watched.load(Ordering::Relaxed) > 0
    }

    /// The connection has read a lease notice.
    pub fn notice_read(&self) {
        self.watched.fetch_sub(1, Ordering::Relaxed);
    }

    /// Completes once the connection has closed.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }

    /// Tells the connection a notice that ends one of its leases (its lease slot of
    /// `watched` now waits for the notice to be read); false when it could not be told (the
    /// connection is gone, or too far behind).
    pub fn tell(&self, notice: Notice) -> bool {
        self.pushes.try_send(notice).is_ok()
    }

    /// Tells the connection a notice about a lease that goes on: one more notice to read.
    pub fn warn(&self, notice: Notice) -> bool {
        self.watched.fetch_add(1, Ordering::Relaxed);
        let told = self.tell(notice);
        if !told {
            self.watched.fetch_sub(1, Ordering::Relaxed);
        }
        told
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&'static str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::from_static(w.as_bytes()))
            .collect()
    }

    #[test]
    fn a_transaction_queues_within_its_caps_and_a_refusal_fails_it() {
        let mut conn = Conn::new(1, false);
        // Outside a transaction nothing is queued and nothing fails.
        conn.fail_multi();
        assert_eq!(conn.queue(args(&["GET", "k"]), 10, 1, 100), Ok(()));
        assert!(conn.take_multi().is_none());

        // A refusal fails the transaction: past the bytes (counted as commands are queued:
        // 60 + 50 passes 100), or past the number of commands.
        for ((first, second), most, refusal) in [
            ((60, 50), 2, Error::QueuedTooLarge { max: 100 }),
            ((1, 1), 1, Error::TooManyQueued { max: 1 }),
        ] {
            conn.begin_multi();
            assert_eq!(conn.queue(args(&["GET", "a"]), first, most, 100), Ok(()));
            let queued = conn.queue(args(&["GET", "b"]), second, most, 100);
            assert_eq!(queued, Err(refusal));
            assert!(matches!(conn.take_multi(), Some(Transaction::Failed)));
            assert!(!conn.in_multi());
        }

        // A new MULTI starts afresh: nothing queued, no bytes counted, not failed.
        conn.begin_multi();
        assert_eq!(conn.queue(args(&["GET", "a"]), 100, 1, 100), Ok(()));
        match conn.take_multi() {
            Some(Transaction::Queued(q)) => assert_eq!(q, vec![args(&["GET", "a"])]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn watches_are_capped_and_unwatching_frees_their_budget() {
        let mut conn = Conn::new(1, false);
        let (first, held) = conn.watch(&args(&["a", "b"]), 3).unwrap();
        assert_eq!(first.len(), 2);
        held.fetch_add(7, std::sync::atomic::Ordering::Relaxed);
        let (_, same) = conn.watch(&args(&["c"]), 3).unwrap();
        assert!(Arc::ptr_eq(&held, &same));
        assert_eq!(
            conn.watch(&args(&["d"]), 3).map(|_| ()),
            Err(Error::TooManyWatched { max: 3 })
        );
        let keys: Vec<Bytes> = conn.take_watched().into_iter().map(|w| w.key).collect();
        assert_eq!(keys, args(&["a", "b", "c"]));
        let (_, fresh) = conn.watch(&args(&["a"]), 3).unwrap();
        assert!(!Arc::ptr_eq(&held, &fresh));
    }

    #[test]
    fn client_reply_skip_drops_the_next_reply_only() {
        let mut conn = Conn::new(1, false);
        conn.reply_skip();
        assert!(
            !conn.reply_dropped(),
            "SKIP's own reply is not the one skipped"
        );
        conn.next_command();
        assert!(conn.reply_dropped());
        conn.next_command();
        assert!(!conn.reply_dropped());
        conn.reply_off();
        conn.reply_skip();
        conn.next_command();
        assert!(conn.reply_dropped());
        conn.reply_on();
        assert!(!conn.reply_dropped());
    }

    #[test]
    fn the_gone_signal_survives_reset_and_is_not_shared_by_a_scratch_copy() {
        let mut conn = Conn::new(7, true);
        let signal = conn.gone_signal();
        conn.log_in(Access::all());
        conn.reset(true);
        assert_eq!(conn.id(), 7);
        assert!(!conn.logged_in());
        drop(conn.scratch());
        assert!(!signal.is_cancelled());
        conn.client_gone();
        assert!(signal.is_cancelled());
    }

    #[test]
    fn a_user_limited_to_some_keys_may_touch_only_those() {
        let mut conn = Conn::new(1, true);
        assert!(conn.may_touch(|| [&b"any"[..]].into_iter()));
        conn.log_in(Access {
            keys: Patterns::Only(vec![b"lock:*".to_vec()].into()),
            channels: Patterns::Only(vec![b"ch:*".to_vec()].into()),
        });
        assert!(conn.may_touch(|| [&b"lock:a"[..]].into_iter()));
        assert!(conn.may_use_channel(b"ch:1") && !conn.may_use_channel(b"lock:a"));
        assert!(conn.may_use_pattern(b"ch:*") && !conn.may_use_pattern(b"ch:1*"));
        assert!(!conn.may_touch(|| [&b"lock:a"[..], b"other"].into_iter()));
        assert!(conn.may_touch(std::iter::empty));
    }

    #[test]
    fn a_lock_is_leased_when_every_one_of_its_keys_matches() {
        let mut conn = Conn::new(1, false);
        let keys = |k: &'static [&'static str]| k.iter().map(|k| k.as_bytes());
        assert!(
            conn.leases_for(keys(&["lock:a"])).is_none(),
            "no leases at all"
        );
        let (leases, _lost) = Leases::new();
        let patterns = crate::acl::patterns(&["lock:*".into(), "jobs:?".into()]);
        conn.set_leases(leases, patterns);
        assert!(conn.leases_for(keys(&["lock:a"])).is_some());
        assert!(conn.leases_for(keys(&["lock:a", "jobs:1"])).is_some());
        assert!(conn.leases_for(keys(&["lock:a", "other"])).is_none());
        assert!(conn.leases_for(keys(&["jobs:12"])).is_none());
        assert!(conn.leases_for(keys(&[])).is_none(), "no key, no lease");
        conn.set_lease_patterns(crate::acl::patterns(&[]));
        assert!(
            conn.leases_for(keys(&["lock:a"])).is_none(),
            "no patterns lease nothing"
        );
        conn.set_lease_patterns(crate::acl::patterns(&["*".into()]));
        assert!(conn.leases_for(keys(&["anything"])).is_some());
        let scratch = conn.scratch();
        assert!(
            scratch.leases_for(keys(&["anything"])).is_some(),
            "EXEC's copy shares them"
        );
    }

    #[test]
    fn a_connection_keeps_at_most_max_leases_and_each_lock_once() {
        let (leases, _lost) = Leases::new();
        let id = |n: usize| (Bytes::from(format!("k{n}")), Bytes::from_static(b"t"));
        assert!(leases.keep(id(0)));
        assert!(
            !leases.keep(id(0)),
            "a lock kept already keeps its one lease"
        );
        for n in 1..MAX_LEASES {
            assert!(leases.keep(id(n)));
        }
        assert!(!leases.keep(id(MAX_LEASES)), "one past the most");
        leases.kept(&id(0), false);
        assert!(leases.keep(id(MAX_LEASES)), "a lease that ended makes room");
        assert!(leases.watching());
    }
}
