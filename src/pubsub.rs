//! Publish/subscribe across the masters: what Redisson's waiters (`SUBSCRIBE
//! redisson_lock__channel:{name}`) and any other subscriber need.
//!
//! A release runs on every master, and so does a publish inside it: each master sends the same
//! message. The hub keeps one subscriber connection per master (apart from the masters' shared
//! command connections, which must never enter subscribed mode), subscribed to the union of what
//! this proxy's clients want, and hands each message to the local subscribers **once**.
//!
//! **De-duplication.** Messages are grouped by (kind, pattern, channel, payload). For each group
//! the hub counts how many copies each master has sent and how many it has delivered; a copy is
//! delivered when its master has now sent more copies than were delivered. So N masters each
//! sending a message once deliver it once, and a message genuinely published twice (each
//! master sends it twice) is delivered twice. A master that is down simply sends nothing; a
//! group is forgotten after [`DEDUP_WINDOW`] without copies.
//!
//! **Following the members.** A change of members (`SIGHUP`, [`crate::quorum::members`]) hands
//! the hub the links of the members in force ([`Hub::follow`]): a member that stays keeps its
//! link as it is (no gap, no resubscription), a member added gets a new link that subscribes
//! to everything wanted at once, and a member no longer in force has its link closed. Each
//! link has its own id, never reused, so copies counted for a removed link are never taken for
//! those of the link that replaced it.
//!
//! **The proxy's own channels.** Channels under [`RESERVED_PREFIX`] carry the proxy's notices
//! about leases, each naming a lock's key. No client publishes on them (see
//! `command::pubsub`), and a notice is delivered only to subscribers whose user may touch the
//! key it names ([`notice_key`]): a tenant never learns the name of another tenant's lock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span};

use crate::acl::Patterns;
use crate::backend::kind::Link;
use crate::wire::master::{ReplyDecoder, command};
use crate::wire::reply::Reply;

/// How long copies of one message are matched up.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(2);

/// Messages queued for one client before further ones are dropped (Redis would disconnect a
/// subscriber this far behind; the session does, when it sees [`Subscriber::overflowed`]).
pub const CLIENT_QUEUE: usize = 4096;

/// The prefix of the channels the proxy publishes its own notices on; clients may subscribe
/// to them, never publish.
pub const RESERVED_PREFIX: &[u8] = b"redlock-proxy:";

/// The channel a lost lease is told on: the message is the lock's key.
pub const LEASE_LOST: &[u8] = b"redlock-proxy:lease-lost";

/// The channel a failed lease renewal is told on, while the lock may still be valid: the
/// message is `<T> <key>`, T the Unix time in ms (the proxy's clock) until which the lock may
/// still be valid.
pub const LEASE_RENEWAL_FAILED: &[u8] = b"redlock-proxy:lease-renewal-failed";

/// True when `channel` is one of the proxy's own.
pub fn reserved(channel: &[u8]) -> bool {
    channel.starts_with(RESERVED_PREFIX)
}

/// The key a notice on one of the proxy's channels names; `None` when the channel is not the
/// proxy's, and `Some(None)` when it is but the message names no key it can read (such a
/// message reaches only users who may touch every key).
pub fn notice_key<'a>(channel: &[u8], payload: &'a [u8]) -> Option<Option<&'a [u8]>> {
    if !reserved(channel) {
        return None;
    }
    Some(match channel {
        LEASE_LOST => Some(payload),
        LEASE_RENEWAL_FAILED => payload
            .iter()
            .position(|&c| c == b' ')
            .filter(|&at| at > 0 && payload[..at].iter().all(u8::is_ascii_digit))
            .map(|at| &payload[at + 1..]),
        _ => None,
    })
}

/// What a subscription names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `SUBSCRIBE channel`
    Channel,
    /// `PSUBSCRIBE pattern`
    Pattern,
    /// `SSUBSCRIBE shardchannel`
    Shard,
}

impl Kind {
    /// The master command that subscribes to this kind.
    fn subscribe(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"SUBSCRIBE",
            Kind::Pattern => b"PSUBSCRIBE",
            Kind::Shard => b"SSUBSCRIBE",
        }
    }

    /// The master command that unsubscribes from this kind.
    fn unsubscribe(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"UNSUBSCRIBE",
            Kind::Pattern => b"PUNSUBSCRIBE",
            Kind::Shard => b"SUNSUBSCRIBE",
        }
    }
}

/// A message for a client: `message`, `pmessage` or `smessage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Which kind of subscription it matched.
    pub kind: Kind,
    /// The pattern, for `pmessage`.
    pub pattern: Option<Bytes>,
    /// The channel it was published on.
    pub channel: Bytes,
    /// The payload.
    pub payload: Bytes,
}

impl Message {
    /// The reply a subscribed client receives (sent as a push in RESP3).
    pub fn to_reply(&self) -> Reply {
        let mut items = Vec::with_capacity(4);
        items.push(Reply::Bulk(Bytes::from_static(match self.kind {
            Kind::Channel => b"message",
            Kind::Pattern => b"pmessage",
            Kind::Shard => b"smessage",
        })));
        if let Some(p) = &self.pattern {
            items.push(Reply::Bulk(p.clone()));
        }
        items.push(Reply::Bulk(self.channel.clone()));
        items.push(Reply::Bulk(self.payload.clone()));
        Reply::Push(items)
    }
}

/// One client's end: the messages for it, and whether some were dropped.
pub struct Subscriber {
    /// Messages, in the order the hub delivered them.
    pub rx: mpsc::Receiver<Message>,
    overflow: Arc<std::sync::atomic::AtomicBool>,
}

impl Subscriber {
    /// True once a message had to be dropped because the client fell too far behind.
    pub fn overflowed(&self) -> bool {
        self.overflow.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A client's sending side, kept by the hub.
#[derive(Clone)]
struct Sink {
    tx: mpsc::Sender<Message>,
    overflow: Arc<std::sync::atomic::AtomicBool>,
    /// The keys the client's user may touch (changed by a login): the proxy's notices reach it
    /// only for those. Shared by every copy of the sink.
    keys: Arc<Mutex<Patterns>>,
}

impl Sink {
    /// True when the client may hear a notice naming `key` (see [`notice_key`]).
    fn may_hear(&self, key: Option<&[u8]>) -> bool {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        match key {
            Some(key) => keys.allows(key),
            None => *keys == Patterns::All,
        }
    }

    fn send(&self, m: Message) {
        if self.tx.try_send(m).is_err() {
            self.overflow
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Copies of one message seen so far.
struct Copies {
    /// Copies counted per source: a link's id, or [`LOCAL`]. A short list (one entry per
    /// link that sent the message), searched in order.
    per_source: Vec<(u64, u32)>,
    delivered: u32,
    last: Instant,
}

/// The source id of the messages this proxy publishes itself (links count from 1).
const LOCAL: u64 = 0;

type Group = (Kind, Option<Bytes>, Bytes, Bytes);

#[derive(Default)]
struct State {
    /// Which links (by id) have confirmed each subscription.
    confirmed: HashMap<(Kind, Bytes), HashSet<u64>>,
    /// Local subscribers of each (kind, name).
    subs: HashMap<(Kind, Bytes), HashMap<u64, Sink>>,
    /// Each client's sink, once it has subscribed to anything.
    sinks: HashMap<u64, Sink>,
    copies: HashMap<Group, Copies>,
    last_prune: Option<Instant>,
}

/// One member's subscriber link, as the hub keeps it.
struct Slot {
    /// Its id: the source of its copies and confirmations. Never reused.
    id: u64,
    link: Link,
    /// Wakes it when the wanted subscriptions change.
    changed: Arc<Notify>,
    /// Closes it when its member is no longer in force.
    closed: CancellationToken,
}

/// The links, one per member in force.
struct Links {
    live: Vec<Slot>,
    /// The next link's id.
    next: u64,
    /// The links run from the first subscriber on: a proxy nobody subscribes through keeps no
    /// extra connections.
    started: bool,
}

/// The proxy's publish/subscribe hub.
pub struct Hub {
    state: Mutex<State>,
    /// The links. Taken before `state` when both are.
    links: Mutex<Links>,
    /// Wakes subscribers waiting for the masters to confirm a subscription.
    confirmed: Notify,
}

impl Hub {
    /// A hub for `links`, with one subscriber connection per master once someone subscribes
    /// (reconnecting with a short backoff).
    pub fn new(links: &[Link]) -> Arc<Hub> {
        let hub = Arc::new(Hub {
            state: Mutex::default(),
            links: Mutex::new(Links {
                live: Vec::new(),
                next: LOCAL + 1,
                started: false,
            }),
            confirmed: Notify::new(),
        });
        hub.follow(links);
        hub
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start_links(self: &Arc<Self>) {
        let mut links = self.links();
        if std::mem::replace(&mut links.started, true) {
            return;
        }
        for slot in &links.live {
            self.spawn_link(slot);
        }
    }

    fn spawn_link(self: &Arc<Self>, slot: &Slot) {
        let span = info_span!("pubsub", backend.addr = %slot.link.addr);
        let closed = slot.closed.clone();
        let run = link(
            Arc::downgrade(self),
            slot.id,
            slot.link.clone(),
            slot.changed.clone(),
        );
        tokio::spawn(
            async move {
                // Dropping the link's future closes its connection.
                tokio::select! {
                    () = closed.cancelled() => debug!("member no longer in force: pubsub link closed"),
                    () = run => {}
                }
            }
            .instrument(span),
        );
    }

    /// Makes the links those of `members`: a member that already has a link (the same
    /// address, credentials and TLS use) keeps it untouched, each other member gets one
    /// (subscribed to everything wanted as soon as it connects), and the links of members not
    /// in `members` are closed, their confirmations forgotten.
    ///
    /// The member set calls this with every member of the snapshot new operations take, so
    /// during a transition the links of the removed members stay open until it ends: releases
    /// still publish there (operations that started before the change, and proxies not yet
    /// reloaded, which the transition waits for), and a full replacement of the members would
    /// otherwise leave subscribers hearing nothing from those proxies. Closing them at the
    /// change would only lose messages; keeping them costs one connection each for one window.
    pub fn follow(self: &Arc<Self>, members: &[Link]) {
        let mut links = self.links();
        let mut kept = vec![false; links.live.len()];
        let mut added = Vec::new();
        for m in members {
            match (0..links.live.len()).find(|&j| !kept[j] && links.live[j].link.same(m)) {
                Some(j) => kept[j] = true,
                None => added.push(m.clone()),
            }
        }
        let mut gone = Vec::new();
        let mut j = 0;
        links.live.retain(|slot| {
            let keep = kept[j];
            j += 1;
            if !keep {
                slot.closed.cancel();
                gone.push(slot.id);
            }
            keep
        });
        for link in added {
            let slot = Slot {
                id: links.next,
                link,
                changed: Arc::new(Notify::new()),
                closed: CancellationToken::new(),
            };
            links.next += 1;
            if links.started {
                self.spawn_link(&slot);
            }
            links.live.push(slot);
        }
        if !gone.is_empty() {
            self.lock().confirmed.retain(|_, ids| {
                ids.retain(|id| !gone.contains(id));
                !ids.is_empty()
            });
        }
        drop(links);
        self.confirmed.notify_waiters();
    }

    /// How many links have confirmed their subscription to `name`.
    pub fn confirmations(&self, kind: Kind, name: &Bytes) -> usize {
        self.lock()
            .confirmed
            .get(&(kind, name.clone()))
            .map_or(0, HashSet::len)
    }

    /// Waits until a quorum of the links confirm the subscription to `name`, or `within`: a
    /// message published after `SUBSCRIBE` was answered then reaches the subscriber.
    pub async fn confirmed(&self, kind: Kind, name: &Bytes, within: Duration) {
        let until = Instant::now() + within;
        loop {
            let woken = self.confirmed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let quorum = crate::quorum::quorum(self.links().live.len());
            if self.confirmations(kind, name) >= quorum {
                return;
            }
            if tokio::time::timeout_at(until, woken).await.is_err() {
                return;
            }
        }
    }

    /// A new client's receiving end; its user may touch `keys`.
    pub fn attach(self: &Arc<Self>, client: u64, keys: Patterns) -> Subscriber {
        self.start_links();
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        let overflow = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.lock().sinks.insert(
            client,
            Sink {
                tx,
                overflow: overflow.clone(),
                keys: Arc::new(Mutex::new(keys)),
            },
        );
        Subscriber { rx, overflow }
    }

    /// The user of `client` (attached before) is now one who may touch `keys`.
    pub fn set_keys(&self, client: u64, keys: Patterns) {
        if let Some(sink) = self.lock().sinks.get(&client) {
            *sink.keys.lock().unwrap_or_else(|p| p.into_inner()) = keys;
        }
    }

    /// Subscribes `client` (attached before) to `name`; true when it was not subscribed yet.
    pub fn subscribe(&self, client: u64, kind: Kind, name: &Bytes) -> bool {
        let mut state = self.lock();
        let Some(sink) = state.sinks.get(&client).cloned() else {
            return false;
        };
        let subs = state.subs.entry((kind, name.clone())).or_default();
        let first = subs.is_empty();
        let new = subs.insert(client, sink).is_none();
        drop(state);
        if first {
            self.wake_links();
        }
        new
    }

    /// Unsubscribes `client` from `name`; true when it was subscribed.
    pub fn unsubscribe(&self, client: u64, kind: Kind, name: &Bytes) -> bool {
        let mut state = self.lock();
        let key = (kind, name.clone());
        let Some(subs) = state.subs.get_mut(&key) else {
            return false;
        };
        let was = subs.remove(&client).is_some();
        let last = subs.is_empty();
        if last {
            state.subs.remove(&key);
        }
        drop(state);
        if last {
            self.wake_links();
        }
        was
    }

    /// Forgets a client that has gone.
    pub fn detach(&self, client: u64) {
        let mut state = self.lock();
        state.sinks.remove(&client);
        let before = state.subs.len();
        state.subs.retain(|_, subs| {
            subs.remove(&client);
            !subs.is_empty()
        });
        let changed = state.subs.len() != before;
        drop(state);
        if changed {
            self.wake_links();
        }
    }

    /// What the master links should be subscribed to.
    fn wanted(&self) -> HashSet<(Kind, Bytes)> {
        self.lock().subs.keys().cloned().collect()
    }

    fn wake_links(&self) {
        for slot in &self.links().live {
            slot.changed.notify_one();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A master's answer to link `from`'s (un)subscription.
    fn confirm(&self, from: u64, reply: &Reply) {
        let (Reply::Array(items) | Reply::Push(items)) = reply else {
            return;
        };
        let (Some(Reply::Bulk(what)), Some(Reply::Bulk(name))) = (items.first(), items.get(1))
        else {
            return;
        };
        let (kind, on) = match what.as_ref() {
            b"subscribe" => (Kind::Channel, true),
            b"psubscribe" => (Kind::Pattern, true),
            b"ssubscribe" => (Kind::Shard, true),
            b"unsubscribe" => (Kind::Channel, false),
            b"punsubscribe" => (Kind::Pattern, false),
            b"sunsubscribe" => (Kind::Shard, false),
            _ => return,
        };
        // A link closed meanwhile confirms nothing (its confirmations were forgotten).
        let links = self.links();
        if !links.live.iter().any(|s| s.id == from) {
            return;
        }
        let mut state = self.lock();
        let masters = state.confirmed.entry((kind, name.clone())).or_default();
        if on {
            masters.insert(from);
        } else {
            masters.remove(&from);
            if masters.is_empty() {
                state.confirmed.remove(&(kind, name.clone()));
            }
        }
        drop(state);
        drop(links);
        self.confirmed.notify_waiters();
    }

    /// Link `from` (re)connected: none of its subscriptions stand yet.
    fn unconfirm(&self, from: u64) {
        self.lock().confirmed.retain(|_, masters| {
            masters.remove(&from);
            !masters.is_empty()
        });
    }

    /// A message this proxy publishes itself, delivered to its local subscribers of `channel`
    /// now, whether or not the masters can be reached; the copies the masters then send back
    /// are not delivered again (it counts as one more source in the de-duplication).
    pub fn deliver_local(&self, channel: Bytes, payload: Bytes) {
        let message = Message {
            kind: Kind::Channel,
            pattern: None,
            channel,
            payload,
        };
        self.deliver(LOCAL, message);
    }

    /// A copy of a message from link `from` (or [`LOCAL`]): delivered to the local subscribers
    /// unless an earlier copy from another source already was (see the module docs).
    fn deliver(&self, from: u64, message: Message) {
        let now = Instant::now();
        let mut state = self.lock();
        if state
            .last_prune
            .is_none_or(|t| now.duration_since(t) > DEDUP_WINDOW)
        {
            state
                .copies
                .retain(|_, c| now.duration_since(c.last) <= DEDUP_WINDOW);
            state.last_prune = Some(now);
        }
        let group = (
            message.kind,
            message.pattern.clone(),
            message.channel.clone(),
            message.payload.clone(),
        );
        let copies = state.copies.entry(group).or_insert_with(|| Copies {
            per_source: Vec::with_capacity(4),
            delivered: 0,
            last: now,
        });
        copies.last = now;
        let at = match copies.per_source.iter().position(|(id, _)| *id == from) {
            Some(at) => at,
            None => {
                copies.per_source.push((from, 0));
                copies.per_source.len() - 1
            }
        };
        let count = &mut copies.per_source[at].1;
        *count += 1;
        if *count <= copies.delivered {
            return;
        }
        copies.delivered = *count;
        let name = match message.kind {
            Kind::Pattern => message.pattern.clone().unwrap_or_default(),
            _ => message.channel.clone(),
        };
        let notice = notice_key(&message.channel, &message.payload);
        if let Some(subs) = state.subs.get(&(message.kind, name)) {
            for sink in subs.values() {
                if notice.is_none_or(|key| sink.may_hear(key)) {
                    sink.send(message.clone());
                }
            }
        }
    }
}

/// One client's subscriptions: its receiving end and what it is subscribed to. Dropped with
/// the connection (or at `RESET`), it unsubscribes the client everywhere.
pub struct ClientSubs {
    hub: Arc<Hub>,
    id: u64,
    /// The messages for this client.
    pub inbox: Mutex<Subscriber>,
    /// What this client is subscribed to, by kind (a set: unsubscribing from one of many is
    /// one lookup, not a scan).
    names: Mutex<HashMap<Kind, HashSet<Bytes>>>,
}

impl ClientSubs {
    /// Attaches client `id`, whose user may touch `keys`, to the hub.
    pub fn new(hub: &Arc<Hub>, id: u64, keys: Patterns) -> Arc<ClientSubs> {
        Arc::new(ClientSubs {
            hub: hub.clone(),
            id,
            inbox: Mutex::new(hub.attach(id, keys)),
            names: Mutex::default(),
        })
    }

    /// The client logged in as a user who may touch `keys`.
    pub fn set_keys(&self, keys: Patterns) {
        self.hub.set_keys(self.id, keys);
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<Kind, HashSet<Bytes>>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribes; returns the client's count afterwards (channels and patterns together,
    /// shard channels on their own, as Redis counts them).
    pub fn add(&self, kind: Kind, name: &Bytes) -> usize {
        if self.hub.subscribe(self.id, kind, name) {
            self.names().entry(kind).or_default().insert(name.clone());
        }
        self.count(kind)
    }

    /// Unsubscribes; returns the count afterwards.
    pub fn remove(&self, kind: Kind, name: &Bytes) -> usize {
        if self.hub.unsubscribe(self.id, kind, name)
            && let Some(list) = self.names().get_mut(&kind)
        {
            list.remove(name);
        }
        self.count(kind)
    }

    /// Everything subscribed to with `kind`, in no set order (as Redis lists them).
    pub fn list(&self, kind: Kind) -> Vec<Bytes> {
        self.names()
            .get(&kind)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The count Redis reports in (un)subscribe replies of `kind`.
    pub fn count(&self, kind: Kind) -> usize {
        let names = self.names();
        let n = |k: Kind| names.get(&k).map_or(0, HashSet::len);
        match kind {
            Kind::Shard => n(Kind::Shard),
            _ => n(Kind::Channel) + n(Kind::Pattern),
        }
    }

    /// True while subscribed to anything (the connection is in subscribed mode).
    pub fn active(&self) -> bool {
        self.names().values().any(|v| !v.is_empty())
    }

    /// The hub, to wait for the masters' confirmation.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }
}

impl Drop for ClientSubs {
    fn drop(&mut self) {
        self.hub.detach(self.id);
    }
}

impl std::fmt::Debug for ClientSubs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSubs").field("id", &self.id).finish()
    }
}

/// Reads a master's push (`message`, `pmessage`, `smessage`) into a [`Message`].
fn parse_push(reply: Reply) -> Option<Message> {
    let (Reply::Array(items) | Reply::Push(items)) = reply else {
        return None;
    };
    let mut items = items.into_iter().map(|r| match r {
        Reply::Bulk(b) => Some(b),
        _ => None,
    });
    let kind = items.next()??;
    let (kind, pattern) = match kind.as_ref() {
        b"message" => (Kind::Channel, None),
        b"smessage" => (Kind::Shard, None),
        b"pmessage" => (Kind::Pattern, Some(items.next()??)),
        _ => return None,
    };
    Some(Message {
        kind,
        pattern,
        channel: items.next()??,
        payload: items.next()??,
    })
}

/// One master's subscriber connection: keeps its subscriptions equal to what the hub wants and
/// hands every message to the hub. Ends when the hub is gone; dropped (its connection closed)
/// when its member is no longer in force ([`Hub::follow`]).
///
/// A Sentinel member's link follows the member's primary as its data connection does: it is
/// dropped as soon as the Sentinels name another node than the one it is on (a
/// `+switch-master`, or an answer naming it), and dials again at once, resolving through the
/// Sentinels; a link waiting to retry retries at once too. Without this the link would stay on
/// a demoted primary until something closed it (Sentinel's own reconfiguration does, some
/// seconds later, when it can reach that node), and messages published on the new primary
/// would not reach it meanwhile.
///
/// A standalone or Sentinel member's link asks the node `ROLE` and leaves one that is not a
/// primary for another try, as a data connection does: on a replica it would hear the
/// primary's messages only through replication, late, and not at all while that is cut.
///
/// A Redis Cluster member's link goes to one of its seeds (Redis Cluster forwards every
/// `PUBLISH` to every node): the first, and the next one after each failure, so a seed that is
/// gone for good (killed and replaced by its replica) does not leave the member without a link.
async fn link(hub: std::sync::Weak<Hub>, index: u64, addr: Link, changed: Arc<Notify>) {
    const FIRST: Duration = Duration::from_millis(50);
    let mut backoff = FIRST;
    let mut named = addr.kind.follows().map(|s| s.named());
    let mut target = addr.clone();
    let mut seed = 0;
    loop {
        if hub.strong_count() == 0 {
            return;
        }
        target.addr = addr.kind.link_node(&addr, seed);
        match run_link(&hub, index, &target, &changed, named.as_mut(), &mut backoff).await {
            Ok(End::HubGone) => return,
            Ok(End::Switched) => {
                debug!("the Sentinels named another primary: the pubsub link follows");
                backoff = FIRST;
                continue;
            }
            Err(e) => {
                debug!(error = %e, node = %target.addr, "pubsub connection ended");
                seed += 1;
            }
        }
        let pause = sleep(backoff.mul_f64(rand::random_range(0.5..1.0)));
        backoff = (backoff * 2).min(Duration::from_secs(2));
        match named.as_mut() {
            // A new primary named while waiting: try it now.
            Some(n) => {
                tokio::select! {
                    _ = pause => {}
                    Ok(()) = n.changed() => backoff = FIRST,
                }
            }
            None => pause.await,
        }
    }
}

/// Why a link ended without an error.
enum End {
    /// Nobody needs the hub any more.
    HubGone,
    /// The Sentinels named another primary than the node the link is on.
    Switched,
}

async fn run_link(
    hub: &std::sync::Weak<Hub>,
    index: u64,
    addr: &Link,
    changed: &Notify,
    mut named: Option<&mut tokio::sync::watch::Receiver<String>>,
    backoff: &mut Duration,
) -> std::io::Result<End> {
    if let Some(n) = named.as_mut() {
        // A switch heard from here on ends the connection about to be made.
        n.borrow_and_update();
    }
    // On a primary only (ROLE, as a data connection checks it): a link on a replica would
    // not hear what is published on the primary.
    let (mut stream, node) = addr
        .dial_primary(Duration::from_secs(2))
        .await
        .map_err(std::io::Error::other)?;
    // Connected: a later failure starts its retries from the shortest pause again.
    *backoff = Duration::from_millis(50);
    if let Some(h) = hub.upgrade() {
        h.unconfirm(index);
    }
    let mut current: HashSet<(Kind, Bytes)> = HashSet::new();
    let mut buf = BytesMut::with_capacity(4096);
    let mut decoder = ReplyDecoder::default();
    // The wanted set is compared with the link's only when it changed: comparing after every
    // read cost the whole set per read, quadratic in the subscriptions (the confirmations of
    // one `SUBSCRIBE` of 65,535 channels froze the proxy for seconds).
    let mut changes = true;
    loop {
        if std::mem::take(&mut changes) {
            let Some(h) = hub.upgrade() else {
                return Ok(End::HubGone);
            };
            let wanted = h.wanted();
            drop(h);
            let mut out = BytesMut::new();
            for (kind, name) in wanted.difference(&current) {
                out.extend_from_slice(&command(&[kind.subscribe(), name]));
            }
            for (kind, name) in current.difference(&wanted) {
                out.extend_from_slice(&command(&[kind.unsubscribe(), name]));
            }
            if !out.is_empty() {
                stream.write_all(&out).await?;
                stream.flush().await?;
            }
            current = wanted;
        }
        tokio::select! {
            _ = changed.notified() => changes = true,
            Some(()) = switched(named.as_deref_mut(), &node) => return Ok(End::Switched),
            n = stream.read_buf(&mut buf) => {
                if n? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                while let Some(reply) = decoder
                    .decode(&mut buf)
                    .map_err(std::io::Error::other)?
                {
                    let Some(h) = hub.upgrade() else {
                        return Ok(End::HubGone);
                    };
                    match parse_push(reply.clone()) {
                        Some(m) => h.deliver(index, m),
                        None => h.confirm(index, &reply),
                    }
                }
                // Keep the buffer small between bursts.
                if buf.is_empty() && buf.capacity() > 64 * 1024 {
                    buf = BytesMut::with_capacity(4096);
                }
            }
        }
    }
}

/// Resolves when the Sentinels name another primary than `node`; never without Sentinels (a
/// closed channel, the member gone, counts as no news).
async fn switched(
    named: Option<&mut tokio::sync::watch::Receiver<String>>,
    node: &str,
) -> Option<()> {
    let Some(named) = named else {
        return std::future::pending().await;
    };
    loop {
        if named.changed().await.is_err() {
            return std::future::pending().await;
        }
        let now = named.borrow_and_update().clone();
        if !now.is_empty() && now != node {
            return Some(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: usize) -> Link {
        crate::backend::kind::standalone::link(format!("127.0.0.1:{port}"), None, None)
    }

    /// A hub of `n` masters, their links numbered 1 to `n`.
    fn hub(n: usize) -> Arc<Hub> {
        let links: Vec<Link> = (1..=n).map(at).collect();
        let hub = Hub::new(&links);
        // No link tasks in unit tests.
        hub.links().started = true;
        hub
    }

    fn ids(h: &Hub) -> Vec<u64> {
        h.links().live.iter().map(|s| s.id).collect()
    }

    fn msg(payload: &'static str) -> Message {
        Message {
            kind: Kind::Channel,
            pattern: None,
            channel: Bytes::from_static(b"ch"),
            payload: Bytes::from_static(payload.as_bytes()),
        }
    }

    fn drain(s: &mut Subscriber) -> Vec<Bytes> {
        let mut out = Vec::new();
        while let Ok(m) = s.rx.try_recv() {
            out.push(m.payload);
        }
        out
    }

    #[test]
    fn one_message_from_every_master_is_delivered_once() {
        let h = hub(3);
        let mut s = h.attach(1, Patterns::All);
        assert!(h.subscribe(1, Kind::Channel, &Bytes::from_static(b"ch")));
        for master in 1..=3 {
            h.deliver(master, msg("0"));
        }
        assert_eq!(drain(&mut s), vec![Bytes::from_static(b"0")]);
        // Published twice: every master sends it twice, delivered twice.
        for _ in 0..2 {
            for master in [3, 1, 2] {
                h.deliver(master, msg("again"));
            }
        }
        assert_eq!(drain(&mut s).len(), 2);
        // A master that is down sends nothing: the others still deliver it, once.
        h.deliver(1, msg("x"));
        h.deliver(2, msg("x"));
        assert_eq!(drain(&mut s).len(), 1);
    }

    #[test]
    fn only_subscribers_of_the_channel_or_pattern_get_it() {
        let h = hub(1);
        let mut a = h.attach(1, Patterns::All);
        let mut b = h.attach(2, Patterns::All);
        h.subscribe(1, Kind::Channel, &Bytes::from_static(b"ch"));
        h.subscribe(2, Kind::Pattern, &Bytes::from_static(b"c*"));
        h.deliver(1, msg("plain"));
        h.deliver(
            1,
            Message {
                kind: Kind::Pattern,
                pattern: Some(Bytes::from_static(b"c*")),
                ..msg("by pattern")
            },
        );
        assert_eq!(drain(&mut a), vec![Bytes::from_static(b"plain")]);
        assert_eq!(drain(&mut b), vec![Bytes::from_static(b"by pattern")]);
        h.detach(1);
        assert!(h.wanted().len() == 1);
    }

    #[test]
    fn the_proxys_notices_reach_only_users_who_may_touch_their_key() {
        let h = hub(1);
        let only = |p: &str| Patterns::Only(vec![p.as_bytes().to_vec()].into());
        let mut a = h.attach(1, only("a:*"));
        let mut b = h.attach(2, only("b:*"));
        let mut root = h.attach(3, Patterns::All);
        let lost = Bytes::from_static(LEASE_LOST);
        let failed = Bytes::from_static(LEASE_RENEWAL_FAILED);
        for id in 1..=3 {
            h.subscribe(id, Kind::Channel, &lost);
            h.subscribe(id, Kind::Channel, &failed);
        }
        let notice = |channel: &Bytes, payload: &'static str| Message {
            kind: Kind::Channel,
            pattern: None,
            channel: channel.clone(),
            payload: Bytes::from_static(payload.as_bytes()),
        };
        h.deliver(1, notice(&lost, "a:lock"));
        h.deliver(1, notice(&failed, "1764000000000 b:lock"));
        // Unreadable: only for users who may touch every key.
        h.deliver(1, notice(&failed, "b:lock"));
        assert_eq!(drain(&mut a), vec![Bytes::from_static(b"a:lock")]);
        assert_eq!(
            drain(&mut b),
            vec![Bytes::from_static(b"1764000000000 b:lock")]
        );
        assert_eq!(drain(&mut root).len(), 3);
        // A login as another user changes what the client hears from then on.
        h.set_keys(1, only("b:*"));
        h.deliver(1, notice(&lost, "b:other"));
        assert_eq!(drain(&mut a), vec![Bytes::from_static(b"b:other")]);
        // Other channels are not filtered by key.
        h.subscribe(1, Kind::Channel, &Bytes::from_static(b"ch"));
        h.deliver(1, msg("anything"));
        assert_eq!(drain(&mut a), vec![Bytes::from_static(b"anything")]);
    }

    /// In a runtime: the links added are spawned (to ports nobody listens on).
    #[tokio::test]
    async fn the_links_follow_the_members() {
        let h = hub(3);
        let mut s = h.attach(1, Patterns::All);
        let ch = Bytes::from_static(b"ch");
        h.subscribe(1, Kind::Channel, &ch);
        for id in 1..=3 {
            h.confirm(
                id,
                &Reply::Array(vec![
                    Reply::Bulk("subscribe".into()),
                    Reply::Bulk(ch.clone()),
                ]),
            );
        }
        assert_eq!(h.confirmations(Kind::Channel, &ch), 3);
        // The third member replaced by a fourth: the others keep their links, the third's
        // confirmation is forgotten, and the new link gets a new id.
        h.follow(&[at(1), at(2), at(4)]);
        assert_eq!(ids(&h), [1, 2, 4]);
        assert_eq!(h.confirmations(Kind::Channel, &ch), 2);
        // A late answer from the closed link counts for nothing.
        h.confirm(
            3,
            &Reply::Array(vec![
                Reply::Bulk("subscribe".into()),
                Reply::Bulk(ch.clone()),
            ]),
        );
        assert_eq!(h.confirmations(Kind::Channel, &ch), 2);
        // One message from every link in force is still delivered once, the new one included.
        for id in [4, 1, 2] {
            h.deliver(id, msg("after"));
        }
        assert_eq!(drain(&mut s), vec![Bytes::from_static(b"after")]);
        // Every original member replaced: messages from the new links alone reach the client.
        h.follow(&[at(5), at(6), at(4)]);
        assert_eq!(ids(&h), [4, 5, 6]);
        h.deliver(5, msg("new only"));
        h.deliver(6, msg("new only"));
        assert_eq!(drain(&mut s), vec![Bytes::from_static(b"new only")]);
        // The same list again changes nothing.
        h.follow(&[at(4), at(5), at(6)]);
        assert_eq!(ids(&h), [4, 5, 6]);
    }

    #[test]
    fn pushes_read_like_redis() {
        let m = Message {
            kind: Kind::Pattern,
            pattern: Some(Bytes::from_static(b"p*")),
            channel: Bytes::from_static(b"pc"),
            payload: Bytes::from_static(b"x"),
        };
        let mut out = BytesMut::new();
        m.to_reply().encode(&mut out, false);
        assert_eq!(
            &out[..],
            b"*4\r\n$8\r\npmessage\r\n$2\r\np*\r\n$2\r\npc\r\n$1\r\nx\r\n"
        );
        assert_eq!(parse_push(m.to_reply()), Some(m));
    }
}
