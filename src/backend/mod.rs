//! One long-lived, pipelined connection per master, shared by every client, and the master's
//! health: up or down, restart quarantine, and clock watch.
//!
//! A [`Backend`] is a cheap, cloneable handle. Requests go into a bounded queue
//! ([`QUEUE_LIMIT`]; a master that falls that far behind fails further requests at once)
//! together with where the reply should be delivered; a driver task owns the socket. The
//! driver is four pieces: this module (the handle, the reconnect loop), `queue` (from the
//! handles to the driver), `handshake` (the greeting on every connect) and `io` (the reader and
//! writer), the last two generic over any `AsyncRead + AsyncWrite` stream and unit-tested over
//! `tokio::io::duplex`. The driver writes everything queued in one go (a handle that has just
//! queued [`io::EARLY_FLUSH`] requests may write them itself, under the same lock) and hands each
//! request's reply slot to a reader in the same order, so queue order is wire order and replies
//! are matched first-in, first-out. Reading
//! and writing run concurrently, so proxy and master can never block each other on full buffers.
//!
//! A master that is down answers "no" at once: [`Backend::send`] fails immediately instead of
//! queueing. When the connection fails, or a request goes unanswered for `stall_timeout`
//! (an idle connection is probed every `probe_every`, so a master that stalls is noticed
//! without traffic), every request still waiting is failed (a dropped [`Pending`] reports
//! [`BackendError::Closed`]), and the driver reconnects with jittered, doubling backoff. A
//! request that timed out for its caller may still run on the master; the lock logic cleans
//! up after that case.
//!
//! Which kind a member is (a standalone master, a Sentinel member, a Redis Cluster) is decided
//! once, when it starts ([`kind`]): its handle either has a connection of its own, driven here,
//! or routes each request to its shards ([`router`], [`cluster`]).
//!
//! A Sentinel member ([`sentinel`]) asks its Sentinels for the primary before every connect
//! (under `sentinel_majority`, all of them, and its votes count only while a majority of them
//! has confirmed the primary lately), and drops the connection when they name another one (or when the node answers `READONLY` or
//! `MASTERDOWN`, which any member's connection does: a node that is no longer a primary).
//!
//! On every connect the driver learns who the master is (`INFO server`, `ROLE`, `TIME`):
//! - a backend that reports itself as a replica is refused;
//! - a Sentinel member whose primary is another node than last time (address or `run_id`) had
//!   a failover: the new primary may lack locks, so it is quarantined for the window;
//! - a new `run_id` means the master restarted and may have lost locks, so it is quarantined
//!   for the quarantine window (max TTL + drift); on the first connect the master's uptime
//!   tells whether it started recently enough to have lost someone else's locks (see
//!   [`health`] and the README's "Behaviour under faults");
//! - its `TIME` starts or continues the [`clock`] watch, which also runs on every probe and,
//!   for requests sent with [`Backend::send_timed`], in the same round trip as the request.

pub mod clock;
pub mod cluster;
pub mod dial;
mod handshake;
pub mod health;
pub mod identity;
pub mod inbox;
mod io;
pub mod kind;
mod pending;
mod queue;
pub mod router;
pub mod sentinel;
mod settings;
pub mod target;

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::{Instant, sleep_until};
use tracing::{Instrument, debug, info, info_span, warn};

use clock::ClockWatch;
#[cfg(test)]
use handshake::info_field;
use handshake::{Refused, admit, connect};
pub use health::{MasterInfo, Status};
use io::{Ended, serve};

pub use crate::error::BackendError;
pub use inbox::ReplyTx;
use pending::Pending;
pub use pending::QUEUE_LIMIT;
pub use settings::Settings;

/// Handle to one member: one master's shared connection, or a member routed over several.
#[derive(Clone)]
pub struct Backend {
    info: Arc<MasterInfo>,
    clock: bool,
    path: Path,
}

/// Where a member's requests go.
#[derive(Clone)]
enum Path {
    /// The member's own pipelined connection (a standalone or Sentinel member).
    Queue {
        tx: queue::Sender<Pending>,
        /// The connection's writing side, which a handle uses to write early (see
        /// [`io::Outlet`]).
        outlet: Arc<io::Outlet>,
    },
    /// A member made of several masters (a Redis Cluster): its router sends each request on.
    Routed(Arc<dyn router::Router>),
}

/// A member's follower (see [`Backend::start`]).
pub type Follow = Box<dyn FnOnce() -> tokio::sync::watch::Receiver<u64> + Send>;

impl Backend {
    /// Starts the driver task for the master `info` names and returns the handle. A member
    /// that follows its primary (Sentinel) gives `follow`: called as the driver starts, in its
    /// span, it returns a generation the follower bumps whenever the primary moves, which drops
    /// the connection (and the one about to be made).
    pub(crate) fn start(
        info: Arc<MasterInfo>,
        settings: Settings,
        follow: Option<Follow>,
    ) -> Backend {
        let (tx, rx) = queue::channel(QUEUE_LIMIT);
        let clock = settings.clock.is_some();
        let span = info_span!("backend", backend.addr = %info.addr);
        let outlet = Arc::new(io::Outlet::default());
        tokio::spawn(drive(info.clone(), rx, outlet.clone(), settings, follow).instrument(span));
        Backend {
            info,
            clock,
            path: Path::Queue { tx, outlet },
        }
    }

    /// A member made of several masters: `info` is the member's as a whole, and `router`
    /// sends each request on.
    pub(crate) fn routed(
        info: Arc<MasterInfo>,
        clock: bool,
        router: Arc<dyn router::Router>,
    ) -> Backend {
        Backend {
            info,
            clock,
            path: Path::Routed(router),
        }
    }

    /// What kind of member this is, as `INFO` and `/metrics` name it (see [`kind`]).
    pub fn kind(&self) -> &'static str {
        self.info.kind()
    }

    /// A routed member's shards (empty for one master).
    pub fn shards(&self) -> Vec<router::ShardView> {
        match &self.path {
            Path::Routed(r) => r.shards(),
            Path::Queue { .. } => Vec::new(),
        }
    }

    /// What the proxy knows about this master.
    pub fn info(&self) -> &MasterInfo {
        &self.info
    }

    /// True when the master is connected (whether or not its votes count), and for a
    /// Sentinel member under the majority rule its primary confirmed (without, it is down).
    pub fn is_up(&self) -> bool {
        self.info.is_connected() && self.info.is_confirmed()
    }

    /// True when the master's replies count as votes: connected, not quarantined, and its
    /// clock trusted.
    pub fn is_trusted(&self) -> bool {
        self.info.is_trusted()
    }

    /// Queues `bytes` (holding `replies` commands) and delivers the reply to `reply_to`; several
    /// replies are delivered as one array. A master that is down gets nothing and reports
    /// [`BackendError::Down`] at once.
    pub fn send(&self, bytes: Bytes, replies: usize, reply_to: Option<(ReplyTx, usize)>) {
        self.queue(bytes, replies, false, reply_to);
    }

    /// Like [`Backend::send`], and reads the master's `TIME` in the same round trip. If the
    /// master's clock jumped, the reply is replaced by [`BackendError::ClockJump`], so a vote
    /// cast by a clock that just leapt is never counted. Without clock watch this is `send`.
    pub fn send_timed(&self, bytes: Bytes, replies: usize, reply_to: Option<(ReplyTx, usize)>) {
        self.queue(bytes, replies, self.clock, reply_to);
    }

    fn queue(&self, bytes: Bytes, replies: usize, time: bool, reply_to: Option<(ReplyTx, usize)>) {
        let (tx, outlet) = match &self.path {
            Path::Queue { tx, outlet } => (tx, outlet),
            Path::Routed(r) => {
                if self.info.is_duplicate() {
                    // Another member holds this member's server (see `identity`).
                    if let Some((tx, slot)) = reply_to {
                        tx.send(slot, Err(BackendError::Down));
                    }
                    return;
                }
                r.route(bytes, replies, time, reply_to);
                return;
            }
        };
        let mut pending = Pending {
            bytes,
            replies,
            time,
            hold: false,
            reply_to,
        };
        // Down, or a duplicate of another member (the same bits, one load): nothing is sent.
        if !self.info.accepts() {
            pending.deliver(Err(BackendError::Down));
            return;
        }
        match tx.try_send(pending) {
            // Enough waiting to be worth a write of its own: written now, not at the driver's
            // turn.
            Ok(waiting) if waiting >= io::EARLY_FLUSH => outlet.flush_early(tx),
            Ok(_) => {}
            // The queue is bounded: a master that cannot keep up gets no more than
            // QUEUE_LIMIT waiting requests, and the rest fail at once, unsent (no vote, nothing
            // ran), like a master that is down.
            Err(queue::TrySendError::Full(mut p)) => p.deliver(Err(BackendError::Overloaded)),
            // The driver is gone: the request is dropped, and its Drop reports Closed.
            Err(queue::TrySendError::Closed(_)) => {}
        }
    }
}

async fn drive(
    info: Arc<MasterInfo>,
    mut rx: queue::Receiver<Pending>,
    outlet: Arc<io::Outlet>,
    settings: Settings,
    follow: Option<Follow>,
) {
    let mut delay = settings.reconnect_min;
    let mut clock = settings.clock.map(ClockWatch::new);
    // A refusal that needs the operator (wrong password, certificate) is a WARN once, not on
    // every retry; it is repeated at debug, and a new reason is a new WARN.
    let mut warned = String::new();
    let mut connected_before = false;
    // A member that follows its primary: its follower bumps this when the primary moves.
    let mut switched = follow.map(|f| f());
    loop {
        // A switch heard from here on drops the connection about to be made.
        if let Some(rx) = switched.as_mut() {
            rx.borrow_and_update();
        }
        match connect(&info, &settings).await {
            Ok(hello) => {
                if connected_before {
                    info.count_reconnect();
                }
                connected_before = true;
                delay = settings.reconnect_min;
                warned.clear();
                info.set_last_error("");
                admit(&info, &settings, &hello, clock.as_mut());
                // Which server this is, told before the connection counts, so that a server
                // another member holds never votes twice, not even for a moment.
                let claim = settings
                    .identity
                    .as_ref()
                    .zip(info.run_id())
                    .map(|(c, run_id)| (c.member(&info), run_id));
                if let (Some(c), Some((member, run_id))) = (&settings.identity, &claim) {
                    c.identities().claim(run_id, member);
                }
                info.set_connected(true);
                info!(
                    run_id = info.run_id().as_deref().unwrap_or("?"),
                    status = info.status().name(),
                    "master up"
                );
                let reason = serve(
                    hello.stream,
                    &mut rx,
                    &outlet,
                    &settings,
                    &info,
                    clock.as_mut(),
                    switched.as_mut(),
                )
                .await;
                info.set_connected(false);
                if let (Some(c), Some((member, run_id))) = (&settings.identity, &claim) {
                    c.identities().release(run_id, member);
                }
                match reason {
                    Ended::Shutdown => return,
                    Ended::Failed(why) => {
                        info.set_last_error(&why);
                        warn!(reason = %why, status = "down", "master down")
                    }
                }
            }
            Err(Refused::Quietly(why)) => {
                info.set_last_error(&why);
                debug!(reason = %why, "connect failed")
            }
            Err(Refused::Loudly(why)) => {
                info.set_last_error(&why);
                if why != warned {
                    warn!(reason = %why, status = "down", "master refused");
                    warned = why;
                } else {
                    debug!(reason = %why, status = "down", "master refused");
                }
            }
        }
        // Wait before reconnecting; anything queued meanwhile fails at once.
        let jittered = delay.mul_f64(rand::random_range(0.5..1.0));
        delay = (delay * 2).min(settings.reconnect_max);
        let until = Instant::now() + jittered;
        loop {
            tokio::select! {
                _ = sleep_until(until) => break,
                req = rx.recv() => match req {
                    Some(mut p) => p.deliver(Err(BackendError::Down)),
                    None => return,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::master::command;
    use crate::wire::reply::Reply;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    use std::time::{SystemTime, UNIX_EPOCH};

    use bytes::BytesMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn info_fields() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:5\r\n";
        assert_eq!(info_field(text, "run_id"), Some("abc"));
        assert_eq!(info_field(text, "uptime_in_seconds"), Some("5"));
        assert_eq!(info_field(text, "nope"), None);
    }

    /// A standalone master's member.
    fn spawn(addr: String, settings: Settings) -> Backend {
        kind::standalone::member(addr, settings)
    }

    /// The Sentinels at `addrs`, asked for master `m`.
    fn sentinels_at(addrs: &[&str]) -> sentinel::Sentinels {
        let sentinels = addrs
            .iter()
            .map(|a| crate::endpoint::Endpoint::parse(a).unwrap())
            .collect();
        sentinel::Sentinels::new(sentinels, "m".into(), None, None, true)
    }

    /// A Sentinel member following the primary `sentinels` name, with a quarantine window of
    /// 3 s or none.
    fn follower(sentinels: sentinel::Sentinels, quarantine: bool) -> Backend {
        let settings = Settings {
            quarantine: quarantine.then_some(Duration::from_millis(3000)),
            ..settings()
        };
        kind::sentinel::member("redis-sentinel://x#m".into(), Arc::new(sentinels), settings)
    }

    fn settings() -> Settings {
        Settings {
            probe_every: Duration::from_millis(50),
            quarantine: Some(Duration::from_millis(3000)),
            quarantine_young: true,
            clock: Some(clock::Rules {
                rate: 0.01,
                tolerance: Duration::from_millis(5),
                span: Duration::from_millis(3000),
            }),
            ..Settings::for_tests()
        }
    }

    /// [`settings`] with probes too rare to get there before a test's own requests.
    fn unprobed() -> Settings {
        Settings {
            probe_every: Duration::from_secs(60),
            ..settings()
        }
    }

    #[tokio::test]
    async fn down_master_answers_at_once() {
        // Port 1 on loopback refuses connections.
        let b = spawn("127.0.0.1:1".into(), settings());
        let (tx, mut rx) = crate::backend::inbox::inbox(1);
        b.send(command(&[b"PING"]), 1, Some((tx, 3)));
        assert_eq!(rx.recv().await, (3, Err(BackendError::Down)));
    }

    /// What a fake master says about itself; tests change it between connections.
    #[derive(Clone)]
    struct Persona {
        run_id: &'static str,
        uptime_s: u64,
        role: &'static str,
        /// Added to the real clock in `TIME` replies.
        offset_ms: i64,
    }

    /// A fake master speaking just enough RESP: `INFO`, `ROLE`, `TIME`, anything else `+OK`.
    /// Returns its address and a handle to its persona, and a way to drop every connection.
    async fn fake_master(
        persona: Persona,
    ) -> (String, Arc<Mutex<Persona>>, Arc<tokio::sync::Notify>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let persona = Arc::new(Mutex::new(persona));
        let cut = Arc::new(tokio::sync::Notify::new());
        let (p, c) = (persona.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (p, c) = (p.clone(), c.clone());
                tokio::spawn(async move {
                    let mut buf = BytesMut::new();
                    // A command is an array of bulk strings, which the master reply decoder
                    // reads as well.
                    let mut decoder = crate::wire::master::ReplyDecoder::default();
                    loop {
                        while let Ok(Some(command)) = decoder.decode(&mut buf) {
                            let Reply::Array(args) = command else {
                                return;
                            };
                            let name = match args.first() {
                                Some(Reply::Bulk(b)) => b.to_ascii_uppercase(),
                                _ => return,
                            };
                            let me = p.lock().unwrap().clone();
                            let out: Vec<u8> = match name.as_slice() {
                                b"INFO" => {
                                    let t = format!(
                                        "run_id:{}\r\nuptime_in_seconds:{}\r\n",
                                        me.run_id, me.uptime_s
                                    );
                                    format!("${}\r\n{t}\r\n", t.len()).into_bytes()
                                }
                                b"ROLE" => format!("*1\r\n${}\r\n{}\r\n", me.role.len(), me.role)
                                    .into_bytes(),
                                b"TIME" => {
                                    let now = SystemTime::now()
                                        .duration_since(UNIX_EPOCH)
                                        .unwrap()
                                        .as_micros()
                                        as i64
                                        + me.offset_ms * 1000;
                                    let (s, us) = (
                                        (now / 1_000_000).to_string(),
                                        (now % 1_000_000).to_string(),
                                    );
                                    format!(
                                        "*2\r\n${}\r\n{s}\r\n${}\r\n{us}\r\n",
                                        s.len(),
                                        us.len()
                                    )
                                    .into_bytes()
                                }
                                // A replica refuses writes.
                                _ if me.role != "master" => {
                                    b"-READONLY You can't write against a read only replica.\r\n"
                                        .to_vec()
                                }
                                _ => b"+OK\r\n".to_vec(),
                            };
                            if s.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                        tokio::select! {
                            n = s.read_buf(&mut buf) => if !matches!(n, Ok(n) if n > 0) { return },
                            _ = c.notified() => return,
                        }
                    }
                });
            }
        });
        (addr, persona, cut)
    }

    /// [`persona`], of a replica.
    fn replica(run_id: &'static str) -> Persona {
        Persona {
            role: "slave",
            ..persona(run_id, 3600)
        }
    }

    fn persona(run_id: &'static str, uptime_s: u64) -> Persona {
        Persona {
            run_id,
            uptime_s,
            role: "master",
            offset_ms: 0,
        }
    }

    async fn wait_for(b: &Backend, want: Status) {
        for _ in 0..200 {
            if b.info().status() == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "status {:?}, wanted {want:?}: {}",
            b.info().status(),
            b.info().describe()
        );
    }

    async fn ask_timed(b: &Backend) -> Result<Reply, BackendError> {
        let (tx, mut rx) = crate::backend::inbox::inbox(1);
        b.send_timed(command(&[b"SET", b"k", b"v"]), 1, Some((tx, 0)));
        rx.recv().await.1
    }

    #[tokio::test]
    async fn an_old_master_is_trusted_at_once() {
        let (addr, _, _) = fake_master(persona("a", 3600)).await;
        let b = spawn(addr, settings());
        wait_for(&b, Status::Up).await;
        assert!(b.is_trusted());
        assert_eq!(ask_timed(&b).await, Ok(Reply::ok()), "TIME is stripped");
    }

    #[tokio::test]
    async fn a_young_master_sits_out_the_rest_of_the_window() {
        let (addr, _, _) = fake_master(persona("a", 1)).await;
        let b = spawn(addr, settings());
        wait_for(&b, Status::Quarantined).await;
        let left = b.info().quarantine_left();
        assert!(
            left > Duration::from_millis(1500) && left <= Duration::from_millis(2000),
            "{left:?}"
        );
        assert!(!b.is_trusted());
    }

    #[tokio::test]
    async fn a_restart_is_quarantined_for_the_whole_window() {
        let (addr, p, cut) = fake_master(persona("a", 3600)).await;
        let b = spawn(addr, settings());
        wait_for(&b, Status::Up).await;
        // The same process again (a dropped connection) is not a restart.
        cut.notify_waiters();
        tokio::time::sleep(Duration::from_millis(100)).await;
        wait_for(&b, Status::Up).await;
        // A new run_id is, even if the master claims a long uptime.
        p.lock().unwrap().run_id = "b";
        cut.notify_waiters();
        wait_for(&b, Status::Quarantined).await;
        assert!(b.info().quarantine_left() > Duration::from_millis(2500));
        assert!(
            b.info().describe().contains("restarts=1"),
            "{}",
            b.info().describe()
        );
    }

    #[tokio::test]
    async fn without_quarantine_a_restart_counts_at_once() {
        let (addr, p, cut) = fake_master(persona("a", 0)).await;
        let b = spawn(
            addr,
            Settings {
                quarantine: None,
                ..settings()
            },
        );
        wait_for(&b, Status::Up).await;
        p.lock().unwrap().run_id = "b";
        cut.notify_waiters();
        tokio::time::sleep(Duration::from_millis(100)).await;
        wait_for(&b, Status::Up).await;
        assert!(b.is_trusted());
    }

    #[tokio::test]
    async fn a_replica_is_refused() {
        let (addr, _, _) = fake_master(replica("a")).await;
        let b = spawn(addr, settings());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(b.info().status(), Status::Down);
    }

    #[tokio::test]
    async fn a_clock_jump_voids_the_vote_cast_in_the_same_round_trip() {
        let (addr, p, _) = fake_master(persona("a", 3600)).await;
        let b = spawn(addr, unprobed());
        wait_for(&b, Status::Up).await;
        assert_eq!(ask_timed(&b).await, Ok(Reply::ok()));
        p.lock().unwrap().offset_ms = 3_600_000;
        assert_eq!(ask_timed(&b).await, Err(BackendError::ClockJump));
        assert_eq!(b.info().status(), Status::ClockSuspect);
        assert!(!b.is_trusted());
        // The clock is steady from its new position, but stays distrusted for the window.
        assert_eq!(ask_timed(&b).await, Ok(Reply::ok()));
        assert_eq!(b.info().status(), Status::ClockSuspect);
        assert!(b.info().clock_suspect_left() > Duration::from_millis(2500));
    }

    #[tokio::test]
    async fn the_probe_catches_a_jump_without_traffic() {
        let (addr, p, _) = fake_master(persona("a", 3600)).await;
        let b = spawn(addr, settings());
        wait_for(&b, Status::Up).await;
        tokio::time::sleep(Duration::from_millis(120)).await;
        p.lock().unwrap().offset_ms = -2_000;
        wait_for(&b, Status::ClockSuspect).await;
    }

    #[tokio::test]
    async fn a_clock_jump_while_disconnected_is_caught_on_reconnect() {
        let (addr, p, cut) = fake_master(persona("a", 3600)).await;
        let b = spawn(addr, unprobed());
        wait_for(&b, Status::Up).await;
        p.lock().unwrap().offset_ms = 10_000;
        cut.notify_waiters();
        tokio::time::sleep(Duration::from_millis(50)).await;
        wait_for(&b, Status::ClockSuspect).await;
    }

    /// A fake Sentinel: names `primary` for any master name, confirms `SUBSCRIBE`, and pushes
    /// `+switch-master` messages to its subscribers when told.
    async fn fake_sentinel(
        primary: Arc<Mutex<String>>,
    ) -> (String, tokio::sync::broadcast::Sender<String>) {
        fake_sentinel_aged(primary, 3_600_000).await
    }

    /// A fake Sentinel that has known its primary for `age_ms` (`role-reported-time`).
    async fn fake_sentinel_aged(
        primary: Arc<Mutex<String>>,
        age_ms: u64,
    ) -> (String, tokio::sync::broadcast::Sender<String>) {
        fake_sentinel_at(primary, age_ms, Arc::new(AtomicU64::new(0))).await
    }

    /// A fake Sentinel naming `primary` at config epoch `epoch` (`SENTINEL MASTER`'s
    /// `config-epoch`, with `down-after-milliseconds` 1000).
    async fn fake_sentinel_at(
        primary: Arc<Mutex<String>>,
        age_ms: u64,
        epoch: Arc<AtomicU64>,
    ) -> (String, tokio::sync::broadcast::Sender<String>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (push, _) = tokio::sync::broadcast::channel::<String>(8);
        let pushes = push.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let primary = primary.clone();
                let epoch = epoch.clone();
                let mut pushed = pushes.subscribe();
                tokio::spawn(async move {
                    let mut buf = BytesMut::new();
                    let mut decoder = crate::wire::master::ReplyDecoder::default();
                    loop {
                        while let Ok(Some(Reply::Array(args))) = decoder.decode(&mut buf) {
                            let word = |i: usize| match args.get(i) {
                                Some(Reply::Bulk(b)) => b.to_ascii_uppercase(),
                                _ => Vec::new(),
                            };
                            let out = match word(0).as_slice() {
                                b"SENTINEL" if word(1) == b"MASTER" => {
                                    let p = primary.lock().unwrap().clone();
                                    let (h, port) = p.rsplit_once(':').unwrap();
                                    let e = epoch.load(Ordering::Relaxed).to_string();
                                    let fields = [
                                        ("name", "m"),
                                        ("ip", h),
                                        ("port", port),
                                        ("role-reported-time", &age_ms.to_string()),
                                        ("down-after-milliseconds", "1000"),
                                        ("config-epoch", &e),
                                    ]
                                    .map(|(k, v)| {
                                        format!("${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len())
                                    })
                                    .concat();
                                    format!("*12\r\n{fields}")
                                }
                                b"SENTINEL" => {
                                    let p = primary.lock().unwrap().clone();
                                    let (h, port) = p.rsplit_once(':').unwrap();
                                    format!(
                                        "*2\r\n${}\r\n{h}\r\n${}\r\n{port}\r\n",
                                        h.len(),
                                        port.len()
                                    )
                                }
                                b"SUBSCRIBE" => {
                                    "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
                                        .to_string()
                                }
                                _ => "+OK\r\n".to_string(),
                            };
                            if s.write_all(out.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        tokio::select! {
                            n = s.read_buf(&mut buf) => if !matches!(n, Ok(n) if n > 0) { return },
                            m = pushed.recv() => {
                                let Ok(m) = m else { return };
                                let msg = format!(
                                    "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n${}\r\n{m}\r\n",
                                    m.len()
                                );
                                if s.write_all(msg.as_bytes()).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        (addr, push)
    }

    /// A Sentinel member up on primary `a`, with `b` ready to be promoted: its one fake Sentinel
    /// names whatever `named` holds, and pushes `+switch-master` through `push`. Returns `a`,
    /// `b`, `named`, `push` and the member.
    async fn failover(
        quarantine: bool,
    ) -> (String, String, Arc<Mutex<String>>, SwitchMaster, Backend) {
        let (a, _, _) = fake_master(persona("a", 3600)).await;
        let (b, _, _) = fake_master(persona("b", 3600)).await;
        let named = Arc::new(Mutex::new(a.clone()));
        let (s, push) = fake_sentinel(named.clone()).await;
        let m = follower(sentinels_at(&[&s]), quarantine);
        wait_for(&m, Status::Up).await;
        (a, b, named, push, m)
    }

    /// Where a fake Sentinel's `+switch-master` messages are sent.
    type SwitchMaster = tokio::sync::broadcast::Sender<String>;

    fn field<'a>(line: &'a str, name: &str) -> &'a str {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("")
    }

    #[tokio::test]
    async fn a_sentinel_member_follows_switch_master_and_quarantines_the_new_primary() {
        let (a, b, named, push, m) = failover(true).await;
        let line = m.info().describe();
        assert_eq!(field(&line, "kind"), "sentinel", "{line}");
        assert_eq!(field(&line, "primary"), a, "{line}");
        // The Sentinels promote b and say so.
        *named.lock().unwrap() = b.clone();
        let (ah, ap) = a.rsplit_once(':').unwrap();
        let (bh, bp) = b.rsplit_once(':').unwrap();
        for _ in 0..50 {
            let _ = push.send(format!("m {ah} {ap} {bh} {bp}"));
            if m.info().primary() == b {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wait_for(&m, Status::Quarantined).await;
        let line = m.info().describe();
        assert_eq!(field(&line, "primary"), b, "{line}");
        assert_eq!(field(&line, "quarantine_reason"), "failover", "{line}");
        assert_eq!(field(&line, "failovers"), "1", "{line}");
        assert!(m.info().quarantine_left() > Duration::from_millis(2000));
    }

    #[tokio::test]
    async fn a_primary_the_sentinels_named_recently_sits_out_the_rest_of_the_window() {
        // An old node (up an hour), but the Sentinels switched to it half a second ago: a
        // failover this proxy did not see.
        let (a, _, _) = fake_master(persona("a", 3600)).await;
        let (s, _push) = fake_sentinel_aged(Arc::new(Mutex::new(a.clone())), 500).await;
        let m = follower(sentinels_at(&[&s]), true);
        wait_for(&m, Status::Quarantined).await;
        let left = m.info().quarantine_left();
        assert!(
            left > Duration::from_millis(2000) && left <= Duration::from_millis(2500),
            "{left:?}"
        );
        assert_eq!(m.info().quarantine_reason(), "failover");
        // Known for longer than the window: trusted at once.
        let (s, _push) = fake_sentinel_aged(Arc::new(Mutex::new(a)), 3000).await;
        let m = follower(sentinels_at(&[&s]), true);
        wait_for(&m, Status::Up).await;
    }

    #[tokio::test]
    async fn a_sentinel_that_names_a_replica_is_asked_after_the_others() {
        // The first Sentinel is behind: it still names the old primary, now a replica.
        let (old, _, _) = fake_master(replica("a")).await;
        let (new, _, _) = fake_master(persona("b", 3600)).await;
        let (stale, _p1) = fake_sentinel(Arc::new(Mutex::new(old))).await;
        let (fresh, _p2) = fake_sentinel(Arc::new(Mutex::new(new.clone()))).await;
        let m = follower(sentinels_at(&[&stale, &fresh]), true);
        wait_for(&m, Status::Up).await;
        assert_eq!(m.info().primary(), new);
    }

    /// A member whose Sentinels are the fakes at `addrs`, under the majority rule (max TTL
    /// 400 ms: a confirmation lasts 390 ms), with a quarantine window of 3 s or none.
    fn majority_member(addrs: &[&str], quarantine: bool) -> Backend {
        let s = sentinels_at(addrs).with_majority(sentinel::Majority {
            max_ttl: Duration::from_millis(400),
            drift_factor: 0.01,
        });
        follower(s, quarantine)
    }

    #[tokio::test]
    async fn the_same_primary_at_a_new_config_epoch_is_a_failover() {
        // b failed over to another node and back: same address, same run_id, but the
        // Sentinels' configuration is a new epoch, and b was a replica meanwhile.
        let (b, _, _) = fake_master(persona("b", 3600)).await;
        let epoch = Arc::new(AtomicU64::new(0));
        let mut fakes = Vec::new();
        for _ in 0..3 {
            let named = Arc::new(Mutex::new(b.clone()));
            fakes.push(fake_sentinel_at(named, 3_600_000, epoch.clone()).await);
        }
        let addrs: Vec<&str> = fakes.iter().map(|(s, _)| s.as_str()).collect();
        let m = majority_member(&addrs, true);
        wait_for(&m, Status::Up).await;
        assert_eq!(m.info().failovers(), 0);
        epoch.store(2, Ordering::Relaxed);
        wait_for(&m, Status::Quarantined).await;
        assert_eq!(m.info().quarantine_reason(), "failover");
        assert_eq!(m.info().failovers(), 1);
        assert_eq!(m.info().primary(), b);
        // The window, and the extra for the confirmation bound (down-after 1000 ms, max TTL
        // 400 ms: 400 ms more).
        assert!(m.info().quarantine_left() > Duration::from_millis(3000));
    }

    #[tokio::test]
    async fn a_sentinel_member_follows_the_majority_and_is_down_without_one() {
        let (a, _, _) = fake_master(persona("a", 3600)).await;
        let (b, _, _) = fake_master(persona("b", 3600)).await;
        let epochs: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
        // The first Sentinel names a; the other two name b.
        let mut fakes = Vec::new();
        let mut named = Vec::new();
        for (i, p) in [&a, &b, &b].into_iter().enumerate() {
            named.push(Arc::new(Mutex::new(p.clone())));
            fakes.push(fake_sentinel_at(named[i].clone(), 3_600_000, epochs[i].clone()).await);
        }
        let addrs: Vec<&str> = fakes.iter().map(|(s, _)| s.as_str()).collect();
        let m = majority_member(&addrs, false);
        wait_for(&m, Status::Up).await;
        let line = m.info().describe();
        assert_eq!(field(&line, "primary"), b, "{line}");
        assert_eq!(field(&line, "sentinels_confirming"), "2", "{line}");
        assert_eq!(field(&line, "sentinels"), "3", "{line}");

        // The lone Sentinel reports a newer epoch (a failover to a the other two have not
        // heard of yet): they are behind it, and no majority confirms anyone. The confirmation
        // lapses: down, and INFO says why, though the connection to b is still open.
        epochs[0].store(1, Ordering::Relaxed);
        wait_for(&m, Status::Down).await;
        assert!(m.info().is_connected());
        assert!(!m.is_trusted());
        assert_eq!(
            m.info().quarantine_reason(),
            "no majority of sentinels (1 of 3) confirmed the primary"
        );
        // The other two catch up: a majority names a at epoch 1, and the member moves there.
        for i in 1..3 {
            *named[i].lock().unwrap() = a.clone();
            epochs[i].store(1, Ordering::Relaxed);
        }
        wait_for(&m, Status::Up).await;
        assert_eq!(m.info().primary(), a);
        assert_eq!(m.info().failovers(), 1);

        // A member whose only reachable Sentinel is the lone one (two dead ports): one of three
        // configured is no majority, however many answered.
        let dead = [free_addr().await, free_addr().await];
        let lone = majority_member(&[addrs[0], &dead[0], &dead[1]], false);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(lone.info().status(), Status::Down);
        assert!(!lone.info().is_connected());
        assert_eq!(
            lone.info().quarantine_reason(),
            "no majority of sentinels (1 of 3) confirmed the primary"
        );
        // The negative control: the first answer wins, and that is a.
        let first = follower(sentinels_at(&[addrs[0], &dead[0], &dead[1]]), true);
        wait_for(&first, Status::Up).await;
        assert_eq!(first.info().primary(), a);
    }

    /// An address nothing listens on.
    async fn free_addr() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    }

    #[tokio::test]
    async fn without_quarantine_a_sentinel_members_new_primary_counts_at_once() {
        let (_, b, named, _push, m) = failover(false).await;
        // No message this time: the watcher's own question (on subscribing, then every
        // second) finds the new primary.
        *named.lock().unwrap() = b.clone();
        for _ in 0..300 {
            if m.info().primary() == b && m.is_up() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(m.info().primary(), b);
        wait_for(&m, Status::Up).await;
        assert!(m.is_trusted());
        assert_eq!(m.info().failovers(), 1);
    }

    #[tokio::test]
    async fn a_primary_turned_replica_is_left_at_its_first_readonly() {
        let (a, p, _) = fake_master(persona("a", 3600)).await;
        let b = spawn(a, settings());
        wait_for(&b, Status::Up).await;
        // The node becomes a replica: writes answer READONLY, and ROLE says so.
        p.lock().unwrap().role = "slave";
        let (tx, mut rx) = crate::backend::inbox::inbox(1);
        b.send(command(&[b"SET", b"ro", b"v"]), 1, Some((tx, 0)));
        let (_, reply) = rx.recv().await;
        assert!(
            matches!(&reply, Ok(Reply::Error(e)) if e.starts_with(b"READONLY")),
            "{reply:?}"
        );
        wait_for(&b, Status::Down).await;
        // Connecting again, the greeting finds a replica and refuses it.
        for _ in 0..200 {
            if b.info().last_error().contains("role") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            b.info().last_error().contains("role 'slave'"),
            "{}",
            b.info().last_error()
        );
        assert_eq!(b.info().status(), Status::Down);
    }
}
