//! A Redis Cluster as one member: the member's keys live on several shards, each with its own
//! primary, and the proxy sends each command to the primary that owns its key's hash slot.
//!
//! A cluster member is a [`Backend`] handle like any other, so the quorum layer is unchanged:
//! [`Cluster::route`] takes the request's bytes, reads the keys of its commands (the proxy built
//! them: see [`route`]) and sends them to the shard's own [`Backend`], one per shard primary,
//! each with its own connection, health, clock watch and restart quarantine. Trust is per
//! shard: a reply from a shard that was not trusted when the request was sent, or is not when
//! the reply comes, is delivered as [`BackendError::Excluded`], so it is never a vote.
//!
//! - A request whose commands all hash to one slot goes to its shard as it is, at once (so a
//!   caller's requests keep their order on that shard).
//! - Commands in several slots run one after the other, each on its own shard, and their
//!   replies are joined in order.
//! - One command whose keys span slots is split where per-slot parts answer as one Redis
//!   would (`DEL`/`UNLINK`/`EXISTS`/`TOUCH` sum, `MGET` joins, a per-key release with its
//!   wake-up signal runs per slot and signals after, an all-or-nothing acquisition runs per
//!   slot and undoes the parts that wrote when one part could not), and refused with Redis's
//!   own `CROSSSLOT` error otherwise (see docs/design.md).
//! - `MOVED` refreshes the slot map (`CLUSTER SLOTS`) and resends; `ASK` resends once to the
//!   importing node after `ASKING`; `TRYAGAIN` waits a moment and resends.
//! - A node that becomes a primary while the proxy knew the cluster (a replica promoted by a
//!   failover) may lack writes its old primary acknowledged: it is quarantined for the
//!   quarantine window, and only the slots it serves are affected.

pub mod route;
pub mod slots;
mod split;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, watch};
use tracing::{Instrument, debug, info_span, warn};

use super::dial;
use super::health::MasterInfo;
use super::inbox::{ReplyTx, inbox};
use super::router::{Router, ShardView};
use super::{Backend, Settings};
use crate::error::BackendError;
use crate::wire::master::{ReplyDecoder, ask_once, command, encode_command};
use crate::wire::reply::Reply;
use route::{Place, Redirect, Routed};
pub use route::{Scripts, Split};
use slots::{Range, SLOTS};

/// Redis's own answer to keys of one command in several slots, for the commands the proxy
/// cannot split so that they answer as one Redis would.
pub const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// How often the slot map is read again without a reason.
const REFRESH_EVERY: Duration = Duration::from_millis(1000);

/// The least time between two reads of the slot map, however often one is asked for (a shard
/// that stays down would otherwise ask on every request).
const REFRESH_GAP: Duration = Duration::from_millis(100);

/// Redirections followed for one command before it fails.
const MAX_REDIRECTS: usize = 8;

/// The most node connections a member keeps: every primary a slot map may name, and as many
/// again for the nodes `ASK` sends to (an importing node is usually a primary already).
const MAX_NODES: usize = 2 * slots::MAX_PRIMARIES;

/// Whether a member keeping `nodes` may use `addr`: one it knows, or a new one while it keeps
/// fewer than `max`.
fn room_for<V>(nodes: &HashMap<String, V>, addr: &str, max: usize) -> bool {
    nodes.len() < max || nodes.contains_key(addr)
}

struct Shard {
    primary: String,
    backend: Backend,
    ranges: Vec<(u16, u16)>,
    replicas: Vec<String>,
}

#[derive(Default)]
struct Map {
    /// The shard of each slot (an index into `shards`), `u16::MAX` when unassigned.
    owner: Vec<u16>,
    shards: Vec<Shard>,
}

impl Map {
    fn shard(&self, slot: Option<u16>) -> Option<&Shard> {
        match slot {
            Some(s) => {
                let i = *self.owner.get(usize::from(s))?;
                self.shards.get(usize::from(i))
            }
            // Any primary answers a keyless command; a trusted one if there is one.
            None => self
                .shards
                .iter()
                .find(|s| s.backend.is_trusted())
                .or(self.shards.first()),
        }
    }

    fn is_primary(&self, addr: &str) -> Option<&Shard> {
        self.shards.iter().find(|s| s.primary == addr)
    }
}

/// A cluster member: its seeds, its slot map and one [`Backend`] per primary.
pub struct Cluster {
    seeds: Vec<String>,
    settings: Settings,
    /// The member as a whole: connected while some shard is.
    info: Arc<MasterInfo>,
    scripts: Arc<dyn Scripts>,
    /// Starts the connection to one node.
    node: Node,
    map: RwLock<Arc<Map>>,
    /// Every node ever a primary, by address, so a shard keeps its connection across maps.
    nodes: Mutex<HashMap<String, Backend>>,
    /// Why a node is quarantined, when the cluster code quarantined it, with the restarts the
    /// node had then (a later restart is the newer reason).
    reasons: Mutex<HashMap<String, (String, u64)>>,
    /// Bumped on every map read.
    generation: watch::Sender<u64>,
    wake: Notify,
}

/// How a cluster starts the connection to one of its nodes (`host:port`), with the member's
/// settings: a standalone master's.
pub type Node = fn(String, Settings) -> Backend;

/// Starts watching the Redis Cluster named by `seeds` (`host:port` each) and returns the
/// member's handle; `info` is the member's as a whole (its name in logs and `INFO`),
/// `settings` are every shard primary's (the member's credentials and TLS), and `node` starts
/// each node's connection.
pub fn member(
    info: MasterInfo,
    seeds: Vec<String>,
    settings: Settings,
    scripts: Arc<dyn Scripts>,
    node: Node,
) -> Backend {
    let info = Arc::new(info);
    let clock = settings.clock.is_some();
    // Every shard's connection tells its server for the member as a whole: a cluster member
    // that shares a node with another member votes through one of them only.
    let settings = Settings {
        identity: settings.identity.map(|c| c.for_member(info.clone())),
        ..settings
    };
    let c = Cluster::start(seeds, settings, info.clone(), scripts, node);
    Backend::routed(info, clock, Arc::new(ClusterRouter(c)))
}

/// The handle's side of a cluster (the cluster's own tasks hold it weakly).
struct ClusterRouter(Arc<Cluster>);

impl Router for ClusterRouter {
    fn route(&self, bytes: Bytes, replies: usize, time: bool, reply_to: Option<(ReplyTx, usize)>) {
        self.0.route(bytes, replies, time, reply_to);
    }

    fn shards(&self) -> Vec<ShardView> {
        self.0.shards()
    }
}

impl Cluster {
    fn start(
        seeds: Vec<String>,
        settings: Settings,
        info: Arc<MasterInfo>,
        scripts: Arc<dyn Scripts>,
        node: Node,
    ) -> Arc<Cluster> {
        let (generation, _) = watch::channel(0);
        let c = Arc::new(Cluster {
            seeds,
            settings,
            info,
            scripts,
            node,
            map: RwLock::default(),
            nodes: Mutex::default(),
            reasons: Mutex::default(),
            generation,
            wake: Notify::new(),
        });
        let span = info_span!("cluster", backend.addr = %c.info.addr);
        tokio::spawn(watch_map(Arc::downgrade(&c)).instrument(span));
        c
    }

    fn map(&self) -> Arc<Map> {
        self.map.read().map(|m| m.clone()).unwrap_or_default()
    }

    fn shards(&self) -> Vec<ShardView> {
        let reasons = self.reasons.lock().map(|r| r.clone()).unwrap_or_default();
        self.map()
            .shards
            .iter()
            .map(|s| {
                let info = s.backend.info.clone();
                let quarantined = !info.quarantine_left().is_zero();
                let quarantine_reason = quarantined.then(|| {
                    let ours = reasons
                        .get(&s.primary)
                        .filter(|(_, restarts)| *restarts == info.restarts());
                    ours.map(|(why, _)| why.clone()).unwrap_or_else(|| {
                        if info.restarts() > 0 {
                            "restarted (new run_id)".to_string()
                        } else {
                            "started recently".to_string()
                        }
                    })
                });
                ShardView {
                    primary: s.primary.clone(),
                    slots: slots::ranges_text(&s.ranges),
                    replicas: s.replicas.clone(),
                    info,
                    quarantine_reason,
                }
            })
            .collect()
    }

    /// Sends a request (`replies` commands in `bytes`) and delivers its reply to `reply_to`,
    /// as [`Backend::send`] does for one master.
    fn route(
        self: &Arc<Self>,
        bytes: Bytes,
        replies: usize,
        time: bool,
        reply_to: Option<(ReplyTx, usize)>,
    ) {
        let cmds = route::commands(&bytes, replies);
        let me = self.clone();
        // One slot (the usual case): queued on its shard now, so the caller's order holds.
        if let Some(Ok(slot)) = cmds.as_deref().map(route::one_slot) {
            let map = self.map();
            if let Some(shard) = map.shard(slot) {
                let backend = shard.backend.clone();
                let (tx, rx) = inbox(1);
                let trusted = backend.is_trusted();
                backend.queue(bytes, replies, time, Some((tx, 0)));
                tokio::spawn(async move {
                    let result = await_one(rx).await;
                    let result = me
                        .follow(result, trusted, &backend, cmds.unwrap_or_default(), time)
                        .await;
                    deliver(reply_to, result);
                });
                return;
            }
        }
        tokio::spawn(async move {
            let result = match cmds {
                Some(cmds) => me.run_all(&cmds, time).await,
                None => Ok(Reply::static_error(
                    "ERR redlock-proxy: request not understood by the cluster router",
                )),
            };
            deliver(reply_to, result);
        });
    }

    /// The reply of a request sent to one shard as it was: redirected commands run again
    /// where they belong, and a shard not trusted throughout casts no vote.
    async fn follow(
        &self,
        result: Result<Reply, BackendError>,
        trusted_at_send: bool,
        backend: &Backend,
        cmds: Vec<Routed>,
        time: bool,
    ) -> Result<Reply, BackendError> {
        let reply = match result {
            Ok(r) => r,
            Err(e) => {
                // A shard primary that is gone may have been failed over: read the map now
                // rather than at the next round.
                if matches!(e, BackendError::Down | BackendError::Closed) {
                    self.wake.notify_one();
                }
                return Err(e);
            }
        };
        let trusted = trusted_at_send && backend.is_trusted();
        let mut excluded = !trusted;
        let reply = if cmds.len() == 1 {
            if route::redirect(&reply).is_some() {
                // Nothing ran there: the command's own run decides.
                excluded = false;
                self.run_cmd(&cmds[0], time).await?
            } else {
                reply
            }
        } else {
            let Reply::Array(mut parts) = reply else {
                return if excluded {
                    Err(BackendError::Excluded)
                } else {
                    Ok(reply)
                };
            };
            for (part, cmd) in parts.iter_mut().zip(&cmds) {
                if route::redirect(part).is_some() {
                    match self.run_cmd(cmd, time).await {
                        Ok(r) => *part = r,
                        Err(BackendError::Excluded) => excluded = true,
                        Err(_) => return Err(BackendError::Closed),
                    }
                }
            }
            Reply::Array(parts)
        };
        if excluded {
            Err(BackendError::Excluded)
        } else {
            Ok(reply)
        }
    }

    /// Runs commands one after the other, each where it belongs; one reply, or an array.
    async fn run_all(&self, cmds: &[Routed], time: bool) -> Result<Reply, BackendError> {
        let mut out = Vec::with_capacity(cmds.len());
        let mut excluded = false;
        for (i, cmd) in cmds.iter().enumerate() {
            match self.run_cmd(cmd, time).await {
                Ok(r) => out.push(r),
                Err(BackendError::Excluded) => {
                    excluded = true;
                    out.push(Reply::Nil);
                }
                // Something before ran: the request as a whole may have run.
                Err(BackendError::Down | BackendError::Overloaded) if i > 0 => {
                    return Err(BackendError::Closed);
                }
                Err(e) => return Err(e),
            }
        }
        if excluded {
            return Err(BackendError::Excluded);
        }
        if cmds.len() == 1 {
            Ok(out.pop().unwrap_or(Reply::Nil))
        } else {
            Ok(Reply::Array(out))
        }
    }

    /// Runs one command where it belongs.
    async fn run_cmd(&self, cmd: &Routed, time: bool) -> Result<Reply, BackendError> {
        match &cmd.place {
            Place::Slot(s) => self.run_in(encode(&cmd.args), Some(*s), time).await,
            Place::Anywhere => self.run_in(encode(&cmd.args), None, time).await,
            Place::Everywhere => {
                let map = self.map();
                let bytes = encode(&cmd.args);
                let mut first = None;
                for s in &map.shards {
                    let r = send_one(&s.backend, bytes.clone(), 1, time).await;
                    first.get_or_insert(r);
                }
                first.unwrap_or(Err(BackendError::Down))
            }
            Place::Cross(keys) => self.run_cross(cmd, keys, time).await,
        }
    }

    /// Runs one command (already encoded) on the primary of `slot`, following redirections.
    async fn run_in(
        &self,
        bytes: Bytes,
        slot: Option<u16>,
        time: bool,
    ) -> Result<Reply, BackendError> {
        let mut ask: Option<Backend> = None;
        let mut moved: Option<Backend> = None;
        for _ in 0..MAX_REDIRECTS {
            let (backend, asking) = match (ask.take(), moved.take()) {
                (Some(b), _) => (b, true),
                (None, Some(b)) => (b, false),
                (None, None) => match self.map().shard(slot) {
                    Some(s) => (s.backend.clone(), false),
                    None => {
                        self.refresh_now().await;
                        match self.map().shard(slot) {
                            Some(s) => (s.backend.clone(), false),
                            None => return Err(BackendError::Down),
                        }
                    }
                },
            };
            let trusted = backend.is_trusted();
            let reply = if asking {
                let mut both = BytesMut::from(&command(&[b"ASKING"])[..]);
                both.extend_from_slice(&bytes);
                match send_one(&backend, both.freeze(), 2, time).await? {
                    Reply::Array(mut two) if two.len() == 2 => two.pop().unwrap_or(Reply::Nil),
                    other => other,
                }
            } else {
                send_one(&backend, bytes.clone(), 1, time).await?
            };
            match route::redirect(&reply) {
                None => {
                    return if trusted && backend.is_trusted() {
                        Ok(reply)
                    } else {
                        Err(BackendError::Excluded)
                    };
                }
                Some(Redirect::Ask(addr)) => match self.node_for_ask(&addr).await {
                    Some(b) => ask = Some(b),
                    None => return Err(BackendError::Down),
                },
                Some(Redirect::Moved(addr)) => {
                    // A primary the map already knows (slots moved by resharding) is used at
                    // once; anything else (a promoted replica) only once the map says so, so
                    // that a failover is always noticed, and quarantined, first.
                    let known = self.map().is_primary(&addr).map(|s| s.backend.clone());
                    match known {
                        Some(b) => {
                            self.wake.notify_one();
                            moved = Some(b);
                        }
                        None => self.refresh_now().await,
                    }
                }
                Some(Redirect::Retry) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        Err(BackendError::Closed)
    }

    /// The node an `ASK` names: a known node's connection, or a new one once it is up. `None`
    /// when the member already keeps [`MAX_NODES`] connections and `addr` is none of them: a
    /// node that names ever new addresses opens no more.
    async fn node_for_ask(&self, addr: &str) -> Option<Backend> {
        {
            let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            if !room_for(&nodes, addr, MAX_NODES) {
                return None;
            }
        }
        let b = self.node(addr);
        let until = tokio::time::Instant::now() + self.settings.connect_timeout;
        while !b.is_up() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Some(b)
    }

    fn node(&self, addr: &str) -> Backend {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes
            .entry(addr.to_string())
            .or_insert_with(|| (self.node)(addr.to_string(), self.settings.clone()))
            .clone()
    }

    /// Asks for a new map now and waits (a little) for it.
    async fn refresh_now(&self) {
        let mut rx = self.generation.subscribe();
        rx.borrow_and_update();
        self.wake.notify_one();
        let _ = tokio::time::timeout(self.settings.connect_timeout, rx.changed()).await;
    }

    /// Reads `CLUSTER SLOTS` from the first node that answers: the primaries, then the seeds.
    async fn refresh(&self) -> Result<(), String> {
        let mut candidates: Vec<String> = self
            .map()
            .shards
            .iter()
            .map(|s| s.primary.clone())
            .collect();
        for s in &self.seeds {
            if !candidates.contains(s) {
                candidates.push(s.clone());
            }
        }
        let mut last = String::from("no node to ask");
        for addr in candidates {
            match self.read_slots(&addr).await {
                Ok(ranges) if !ranges.is_empty() => {
                    self.install(ranges);
                    return Ok(());
                }
                Ok(_) => last = format!("{addr}: no slots assigned"),
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        Err(last)
    }

    async fn read_slots(&self, addr: &str) -> Result<Vec<Range>, String> {
        let within = self.settings.connect_timeout;
        let ask = async {
            let (auth, tls) = (self.settings.auth.as_ref(), self.settings.tls.as_ref());
            let mut wire = dial::open(addr, auth, tls, within).await?;
            let (mut buf, mut decoder) = (BytesMut::new(), ReplyDecoder::default());
            let args: [&[u8]; 2] = [b"CLUSTER", b"SLOTS"];
            // About 100 bytes per shard and replica; a thousand shards stay well inside.
            ask_once(&mut wire, &mut buf, &mut decoder, &args, 16 << 20)
                .await
                .map_err(|e| format!("CLUSTER SLOTS: {e}"))
        };
        let reply = tokio::time::timeout(within, ask)
            .await
            .map_err(|_| "timed out".to_string())??;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        slots::parse_cluster_slots(&reply, host)
    }

    /// Installs a new map. A primary that was not one in the previous map was promoted (or is
    /// new): it may lack acknowledged writes, so it sits out the quarantine window first.
    fn install(&self, ranges: Vec<Range>) {
        let old = self.map();
        if same_layout(&old, &ranges) {
            // Nothing moved: the map in use stays (and so does its 32 KiB slot table).
            self.generation.send_modify(|g| *g += 1);
            return;
        }
        let mut shards: Vec<Shard> = Vec::new();
        let mut owner = vec![u16::MAX; SLOTS];
        for r in ranges {
            let i = match shards.iter().position(|s| s.primary == r.primary) {
                Some(i) => i,
                None => {
                    shards.push(Shard {
                        backend: self.node(&r.primary),
                        primary: r.primary.clone(),
                        ranges: Vec::new(),
                        replicas: r.replicas.clone(),
                    });
                    shards.len() - 1
                }
            };
            shards[i].ranges.push((r.start, r.end));
            for s in r.start..=r.end {
                owner[usize::from(s)] = i as u16;
            }
        }
        for s in &mut shards {
            s.ranges.sort_unstable();
            if !old.shards.is_empty() && old.is_primary(&s.primary).is_none() {
                let slots = slots::ranges_text(&s.ranges);
                match self.settings.quarantine {
                    Some(window) => {
                        s.backend.info.quarantine(window, "failover");
                        let why = format!("promoted to primary of slots {slots} (failover)");
                        warn!(
                            shard = %s.primary,
                            quarantine_ms = window.as_millis() as u64,
                            status = "quarantined",
                            "{why}"
                        );
                        if let Ok(mut r) = self.reasons.lock() {
                            r.insert(s.primary.clone(), (why, s.backend.info.restarts()));
                        }
                    }
                    None => warn!(shard = %s.primary, slots, "new primary (quarantine off)"),
                }
            }
        }
        let map = Arc::new(Map { owner, shards });
        self.info.set_version(Some(
            if map.shards.iter().all(|s| s.backend.info.set_nx_get()) {
                "7"
            } else {
                "6"
            },
        ));
        if let Ok(mut m) = self.map.write() {
            *m = map;
        }
        self.generation.send_modify(|g| *g += 1);
    }

    fn update_health(&self) {
        let map = self.map();
        let up = !map.shards.is_empty() && map.shards.iter().any(|s| s.backend.is_up());
        self.info.set_connected(up);
        if map.shards.iter().all(|s| s.backend.is_up()) && !map.shards.is_empty() {
            self.info.set_version(Some(
                if map.shards.iter().all(|s| s.backend.info.set_nx_get()) {
                    "7"
                } else {
                    "6"
                },
            ));
        }
    }
}

/// Reads the slot map every [`REFRESH_EVERY`], or at once when asked, while the cluster lives.
async fn watch_map(cluster: Weak<Cluster>) {
    let mut warned = String::new();
    loop {
        let Some(c) = cluster.upgrade() else { return };
        match c.refresh().await {
            Ok(()) => {
                warned.clear();
                c.info.set_last_error("");
            }
            Err(why) => {
                c.info.set_last_error(&why);
                if why != warned {
                    warn!(reason = %why, "cluster slot map not read");
                    warned = why;
                } else {
                    debug!(reason = %why, "cluster slot map not read");
                }
                c.generation.send_modify(|g| *g += 1);
            }
        }
        c.update_health();
        drop(c);
        tokio::time::sleep(REFRESH_GAP).await;
        let Some(c) = cluster.upgrade() else { return };
        let wake = async {
            c.wake.notified().await;
        };
        let _ = tokio::time::timeout(REFRESH_EVERY - REFRESH_GAP, wake).await;
        drop(c);
    }
}

/// True when `ranges` name the same primaries for the same slots (and replicas) as `map`.
fn same_layout(map: &Map, ranges: &[Range]) -> bool {
    if map.shards.is_empty() {
        return false;
    }
    let assigned: usize = ranges
        .iter()
        .map(|r| usize::from(r.end - r.start) + 1)
        .sum();
    let before: usize = map
        .shards
        .iter()
        .flat_map(|s| &s.ranges)
        .map(|(a, b)| usize::from(b - a) + 1)
        .sum();
    assigned == before
        && ranges.iter().all(|r| {
            map.shard(Some(r.start)).is_some_and(|s| {
                s.primary == r.primary
                    && s.ranges.contains(&(r.start, r.end))
                    && s.replicas == r.replicas
            })
        })
}

fn deliver(reply_to: Option<(ReplyTx, usize)>, result: Result<Reply, BackendError>) {
    if let Some((tx, slot)) = reply_to {
        tx.send(slot, result);
    }
}

/// Waits for the one reply of an inbox made for one request.
async fn await_one(mut rx: super::inbox::ReplyRx) -> Result<Reply, BackendError> {
    let mut out = Err(BackendError::Closed);
    std::future::poll_fn(|cx| {
        rx.poll_each(cx, |(_, r)| {
            out = r.clone();
            true
        })
    })
    .await;
    out
}

/// Sends one request to one node and waits for its reply.
async fn send_one(
    backend: &Backend,
    bytes: Bytes,
    replies: usize,
    time: bool,
) -> Result<Reply, BackendError> {
    let (tx, rx) = inbox(1);
    backend.queue(bytes, replies, time, Some((tx, 0)));
    await_one(rx).await
}

fn encode(args: &[Bytes]) -> Bytes {
    let parts: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
    let mut out = BytesMut::new();
    encode_command(&mut out, &parts);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_to_ever_new_nodes_opens_no_more_than_the_cap() {
        let mut nodes: HashMap<String, ()> = HashMap::new();
        for i in 0..3 {
            assert!(room_for(&nodes, &format!("h:{i}"), 3));
            nodes.insert(format!("h:{i}"), ());
        }
        assert!(!room_for(&nodes, "h:3", 3), "a fourth new node");
        assert!(room_for(&nodes, "h:1", 3), "a node it keeps");
        const { assert!(MAX_NODES >= slots::MAX_PRIMARIES) };
    }
}
