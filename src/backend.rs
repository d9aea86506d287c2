//! One long-lived, pipelined connection per master, shared by every client, and the master's
//! health: up or down, restart quarantine, and clock watch.
//!
//! A [`Backend`] is a cheap, cloneable handle. Requests go into an unbounded channel together
//! with where the reply should be delivered; a driver task owns the socket. The driver writes
//! everything queued in one go and hands each request's reply slot to a reader in the same
//! order, so queue order is wire order and replies are matched first-in, first-out. Reading
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
//! On every connect the driver learns who the master is (`INFO server`, `ROLE`, `TIME`):
//! - a backend that reports itself as a replica is refused;
//! - a new `run_id` means the master restarted and may have lost locks, so it is quarantined
//!   for the quarantine window (max TTL + drift); on the first connect the master's uptime
//!   tells whether it started recently enough to have lost someone else's locks (see
//!   [`health`] and the README's "Behaviour under faults");
//! - its `TIME` starts or continues the [`clock`] watch, which also runs on every probe and,
//!   for requests sent with [`Backend::send_timed`], in the same round trip as the request.

pub mod clock;
pub mod health;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, sleep_until, timeout};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::reply::{Reply, ReplyDecoder, command};
use clock::{ClockWatch, Sample, parse_time};
pub use health::{MasterInfo, Status};

/// Why a master's reply does not count.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
pub enum BackendError {
    /// The master is marked down; the request was not sent.
    #[error("master is down")]
    Down,
    /// The connection failed before the reply came.
    #[error("connection to master lost")]
    Closed,
    /// The master's clock jumped: the `TIME` read with the request disagrees with the proxy's
    /// monotonic clock. The request did run.
    #[error("master clock jumped")]
    ClockJump,
    /// The master answered, but it is quarantined or clock-suspect, so its reply is no vote.
    #[error("master is excluded from the quorum")]
    Excluded,
}

pub use crate::inbox::ReplyTx;

/// Connection and health settings for a master.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Time allowed to connect and greet.
    pub connect_timeout: Duration,
    /// An unanswered request older than this marks the master down.
    pub stall_timeout: Duration,
    /// First reconnect delay.
    pub reconnect_min: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
    /// How often the connection is probed (`TIME`, or `PING` without clock watch).
    pub probe_every: Duration,
    /// How long a restarted master sits out (max TTL + drift); `None` switches quarantine off.
    pub quarantine: Option<Duration>,
    /// Also quarantine a master that, when first seen, started less than the window ago.
    pub quarantine_young: bool,
    /// The operator declares that masters persist every write; checked on each master.
    pub masters_persist: bool,
    /// Clock watch rules (their `span` is also how long a jumped clock stays distrusted);
    /// `None` switches the watch off.
    pub clock: Option<clock::Rules>,
}

/// A request on its way to a master.
pub struct Pending {
    bytes: Bytes,
    replies: usize,
    /// The reply counts only if the master's clock is steady: `TIME` is read in the same round
    /// trip (once per write batch, after the batch) and checked before the reply is delivered.
    time: bool,
    /// Set by the writer: this request's reply waits for its batch's `TIME`.
    hold: bool,
    reply_to: Option<(ReplyTx, usize)>,
}

impl Pending {
    fn deliver(&mut self, result: Result<Reply, BackendError>) {
        if let Some((tx, slot)) = self.reply_to.take() {
            tx.send(slot, result);
        }
    }

    /// The driver's own probe: `TIME` alone (or `PING`), answered to nobody.
    fn probe(clock: bool) -> Pending {
        if clock {
            Pending {
                bytes: Bytes::new(),
                replies: 0,
                time: true,
                hold: false,
                reply_to: None,
            }
        } else {
            Pending {
                bytes: command(&[b"PING"]),
                replies: 1,
                time: false,
                hold: false,
                reply_to: None,
            }
        }
    }
}

impl Drop for Pending {
    // A request dropped without a reply (connection lost, driver gone) still tells its caller,
    // so no fan-out ever waits out its timeout for a master that is known to be gone.
    fn drop(&mut self) {
        self.deliver(Err(BackendError::Closed));
    }
}

/// Handle to one master's shared connection.
#[derive(Clone)]
pub struct Backend {
    tx: mpsc::UnboundedSender<Pending>,
    info: Arc<MasterInfo>,
    clock: bool,
}

impl Backend {
    /// Starts the driver task for `addr` and returns the handle.
    pub fn spawn(addr: String, settings: Settings) -> Backend {
        let (tx, rx) = mpsc::unbounded_channel();
        let info = Arc::new(MasterInfo::new(addr.clone()));
        let clock = settings.clock.is_some();
        let span = info_span!("backend", backend.addr = %addr);
        tokio::spawn(drive(info.clone(), rx, settings).instrument(span));
        Backend { tx, info, clock }
    }

    /// What the proxy knows about this master.
    pub fn info(&self) -> &MasterInfo {
        &self.info
    }

    /// True when the master is connected (whether or not its votes count).
    pub fn is_up(&self) -> bool {
        self.info.is_connected()
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
        let mut pending = Pending {
            bytes,
            replies,
            time,
            hold: false,
            reply_to,
        };
        if !self.is_up() {
            pending.deliver(Err(BackendError::Down));
            return;
        }
        // If the driver is gone the request is dropped, and its Drop reports Closed.
        let _ = self.tx.send(pending);
    }
}

async fn drive(
    info: Arc<MasterInfo>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    settings: Settings,
) {
    let mut delay = settings.reconnect_min;
    let mut clock = settings.clock.map(ClockWatch::new);
    loop {
        match connect(&info, &settings).await {
            Ok(hello) => {
                delay = settings.reconnect_min;
                admit(&info, &settings, &hello, clock.as_mut());
                info.set_connected(true);
                info!(
                    run_id = info.run_id().as_deref().unwrap_or("?"),
                    status = info.status().name(),
                    "master up"
                );
                let reason = serve(hello.stream, &mut rx, &settings, &info, clock.as_mut()).await;
                info.set_connected(false);
                match reason {
                    Ended::Shutdown => return,
                    Ended::Failed(why) => warn!(reason = %why, status = "down", "master down"),
                }
            }
            Err(Refused::Quietly(why)) => debug!(reason = %why, "connect failed"),
            Err(Refused::Loudly(why)) => warn!(reason = %why, "master refused"),
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

/// What the greeting told about a master.
struct Hello {
    stream: TcpStream,
    run_id: Option<String>,
    /// `redis_version` from `INFO server`.
    version: Option<String>,
    uptime_s: Option<u64>,
    /// `appendonly yes` and `appendfsync always`: every acknowledged write survives a restart.
    persists: bool,
    /// The master's clock, read during the greeting (`None` without clock watch).
    time: Option<Result<Sample, Reply>>,
}

enum Refused {
    /// Unreachable or slow: expected while a master is down, logged at debug.
    Quietly(String),
    /// Reachable but unusable (a replica, an error): worth an operator's attention.
    Loudly(String),
}

/// Opens the connection and learns who the master is.
async fn connect(info: &MasterInfo, settings: &Settings) -> Result<Hello, Refused> {
    let mut asks: Vec<&[&[u8]]> = vec![
        &[b"INFO", b"server"],
        &[b"ROLE"],
        &[b"INFO", b"persistence"],
    ];
    if settings.clock.is_some() {
        asks.push(&[b"TIME"]);
    }
    if settings.masters_persist {
        asks.push(&[b"CONFIG", b"GET", b"appendfsync"]);
    }
    let greet = async {
        let quiet = |e: std::io::Error| Refused::Quietly(e.to_string());
        let mut stream = TcpStream::connect(&info.addr).await.map_err(quiet)?;
        stream.set_nodelay(true).map_err(quiet)?;
        let mut hello = BytesMut::new();
        for a in &asks {
            hello.extend_from_slice(&command(a));
        }
        let sent = Instant::now();
        stream.write_all(&hello).await.map_err(quiet)?;
        let mut buf = BytesMut::with_capacity(8192);
        let mut decoder = ReplyDecoder::default();
        let mut replies = Vec::new();
        let mut times = Vec::new();
        while replies.len() < asks.len() {
            if let Some(reply) = decoder
                .decode(&mut buf)
                .map_err(|e| Refused::Loudly(format!("bad reply: {e}")))?
            {
                replies.push(reply);
                times.push(Instant::now());
                continue;
            }
            read_more(&mut stream, &mut buf).await?;
        }
        if replies.iter().any(is_busy) {
            // A script is running on the master (it answers every other command with BUSY):
            // this new connection is not the one running it, so it can ask the master to kill
            // it. Redis refuses (UNKILLABLE) once the script has written; then only the
            // operator can help (SHUTDOWN NOSAVE), and the log says so.
            stream
                .write_all(&command(&[b"SCRIPT", b"KILL"]))
                .await
                .map_err(quiet)?;
            let answer = loop {
                if let Some(reply) = decoder
                    .decode(&mut buf)
                    .map_err(|e| Refused::Loudly(format!("bad reply: {e}")))?
                {
                    break reply;
                }
                read_more(&mut stream, &mut buf).await?;
            };
            return Err(Refused::Loudly(match answer {
                Reply::Simple(_) => {
                    "busy running a script (a client's script that does not end): sent SCRIPT \
                     KILL, which stopped it"
                        .to_string()
                }
                other => format!(
                    "busy running a script: SCRIPT KILL answered {:?}; a script that has written \
                     cannot be killed, only the master's operator can stop it (SHUTDOWN NOSAVE)",
                    other
                ),
            }));
        }
        Ok((stream, sent, replies, times))
    };
    let (stream, sent, replies, times) = timeout(settings.connect_timeout, greet)
        .await
        .map_err(|_| Refused::Quietly("handshake timed out".into()))??;
    let text = |r: &Reply| match r {
        Reply::Bulk(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Reply::Error(e) => Err(Refused::Loudly(format!(
            "INFO failed: {}",
            String::from_utf8_lossy(e)
        ))),
        other => Err(Refused::Loudly(format!("unexpected INFO reply {other:?}"))),
    };
    let server = text(&replies[0])?;
    let role = match &replies[1] {
        Reply::Array(items) => match items.first() {
            Some(Reply::Bulk(r)) => String::from_utf8_lossy(r).into_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    if role != "master" {
        return Err(Refused::Loudly(format!(
            "backend reports role '{role}', not master: a replica cannot hold locks safely \
             (point the proxy at independent masters)"
        )));
    }
    // A master still loading its dataset (a restart reading its AOF) answers writes with
    // `-LOADING` and may not report its persistence settings yet: come back when it is done.
    let persistence = text(&replies[2])?;
    if info_field(&persistence, "loading") == Some("1") {
        return Err(Refused::Quietly("still loading its dataset".into()));
    }
    let mut next = 3;
    let time = settings.clock.map(|_| {
        let r = &replies[next];
        let at = times[next];
        next += 1;
        parse_time(r)
            .map(|master_us| Sample {
                sent,
                recv: at,
                master_us,
            })
            .ok_or_else(|| r.clone())
    });
    let persists = settings.masters_persist
        && {
            let fsync = &replies[next];
            info_field(&persistence, "aof_enabled") == Some("1")
                && matches!(fsync, Reply::Array(kv) if kv.get(1) == Some(&Reply::Bulk(Bytes::from_static(b"always"))))
        };
    Ok(Hello {
        stream,
        run_id: info_field(&server, "run_id").map(str::to_owned),
        version: info_field(&server, "redis_version").map(str::to_owned),
        uptime_s: info_field(&server, "uptime_in_seconds").and_then(|u| u.parse().ok()),
        persists,
        time,
    })
}

/// Reads more of the greeting's replies.
async fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> Result<(), Refused> {
    match stream.read_buf(buf).await {
        Ok(0) => Err(Refused::Quietly(
            "connection closed during handshake".into(),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(Refused::Quietly(e.to_string())),
    }
}

/// True for a master's `-BUSY ...` error (a Lua script or function is running).
fn is_busy(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e) if e.starts_with(b"BUSY"))
}

/// Applies what the greeting told: restart quarantine and the clock baseline.
fn admit(info: &MasterInfo, settings: &Settings, hello: &Hello, clock: Option<&mut ClockWatch>) {
    info.set_version(hello.version.as_deref());
    let previous = info.replace_run_id(hello.run_id.clone());
    let first = previous.is_none();
    let restarted = !first && previous != hello.run_id;
    if restarted {
        info.count_restart();
    }
    if let Some(window) = settings.quarantine {
        if settings.masters_persist && !hello.persists {
            warn!(
                "masters_persist is set, but this master does not persist every write \
                 (needs appendonly yes and appendfsync always): it is quarantined after restarts"
            );
        }
        let persists = settings.masters_persist && hello.persists;
        let old = previous.as_deref().unwrap_or("");
        let new = hello.run_id.as_deref().unwrap_or("?");
        if hello.run_id.is_none() {
            // Without a run_id a restart cannot be told from a reconnect.
            info.quarantine(window);
            warn!(
                quarantine_ms = window.as_millis() as u64,
                status = "quarantined",
                "master reports no run_id: quarantined"
            );
        } else if restarted && persists {
            info!(
                old_run_id = old,
                run_id = new,
                "master restarted; it persists every write, so no quarantine"
            );
        } else if restarted {
            info.quarantine(window);
            warn!(
                old_run_id = old,
                run_id = new,
                quarantine_ms = window.as_millis() as u64,
                status = "quarantined",
                "master restarted (run_id changed) and may have lost locks: its votes do not count until every lock it held has expired"
            );
        } else if first && settings.quarantine_young && !persists {
            // Another proxy, or this one before a restart, may have granted locks that this
            // master lost. A master up for at least the window holds everything it was given
            // since; a younger one sits out the rest of the window. Uptime is whole seconds,
            // rounded down, so the rest is never underestimated.
            let up = Duration::from_secs(hello.uptime_s.unwrap_or(0));
            if let Some(left) = window.checked_sub(up).filter(|l| !l.is_zero()) {
                info.quarantine(left);
                warn!(
                    uptime_s = up.as_secs(),
                    quarantine_ms = left.as_millis() as u64,
                    status = "quarantined",
                    "master started recently and may have lost locks granted before: quarantined"
                );
            }
        }
    }
    if let (Some(watch), Some(rules), Some(time)) = (clock, settings.clock, &hello.time) {
        judge_clock(info, watch, rules.span, time.clone());
    }
}

/// Checks one `TIME` reading; on a jump (or no reading) the master's clock is distrusted.
/// Returns true when the reading is consistent.
fn judge_clock(
    info: &MasterInfo,
    watch: &mut ClockWatch,
    distrust_for: Duration,
    reading: Result<Sample, Reply>,
) -> bool {
    match reading {
        Ok(sample) => match watch.observe(sample) {
            Ok(()) => true,
            Err(jump) => {
                info.distrust_clock(distrust_for);
                warn!(
                    jump_ms = jump.by_ms,
                    over_ms = jump.over_ms,
                    distrust_ms = distrust_for.as_millis() as u64,
                    status = "clock-suspect",
                    "master clock jumped: its votes do not count until it has been steady for the window"
                );
                false
            }
        },
        Err(reply) => {
            info.distrust_clock(distrust_for);
            warn!(
                reply = ?reply,
                status = "clock-suspect",
                "master did not answer TIME, so its clock cannot be watched (set clock_watch = false if TIME is disabled)"
            );
            false
        }
    }
}

/// Reads `field:value` from an `INFO` reply.
pub fn info_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|rest| rest.strip_prefix(':'))
        })
        .map(str::trim)
}

enum Ended {
    Shutdown,
    Failed(String),
}

/// A request written to the socket, waiting for its replies.
struct InFlight {
    pending: Pending,
    sent: Instant,
    got: Vec<Reply>,
}

async fn serve(
    stream: TcpStream,
    rx: &mut mpsc::UnboundedReceiver<Pending>,
    settings: &Settings,
    info: &MasterInfo,
    clock: Option<&mut ClockWatch>,
) -> Ended {
    let (rd, wr) = stream.into_split();
    let (flight_tx, flight_rx) = mpsc::unbounded_channel();
    tokio::select! {
        e = write_loop(wr, rx, flight_tx, settings, info) => e,
        e = read_loop(rd, flight_rx, settings, info, clock) => e,
    }
}

/// The bytes of `TIME`, appended after a timed request.
fn time_command() -> Bytes {
    command(&[b"TIME"])
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    rx: &mut mpsc::UnboundedReceiver<Pending>,
    flight: mpsc::UnboundedSender<InFlight>,
    settings: &Settings,
    info: &MasterInfo,
) -> Ended {
    let time = time_command();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut probe =
        tokio::time::interval_at(Instant::now() + settings.probe_every, settings.probe_every);
    probe.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let first = tokio::select! {
            p = rx.recv() => match p {
                Some(p) => p,
                None => return Ended::Shutdown,
            },
            _ = probe.tick() => {
                if info.exclusion_ended() {
                    info!(status = info.status().name(), "master trusted again: its votes count");
                }
                Pending::probe(settings.clock.is_some())
            }
        };
        let now = Instant::now();
        let mut next = Some(first);
        // Timed requests in this batch share one `TIME`, written after all of them: it is read
        // after each of their commands ran, so a clock that leapt before any of them shows.
        let mut batch_timed = false;
        while let Some(mut pending) = next.take() {
            // Sent even when its caller has stopped waiting (decided early, or gone): a write
            // must reach every master, not only the ones that answered first.
            buf.extend_from_slice(&pending.bytes);
            if pending.time && pending.replies > 0 {
                pending.hold = true;
                batch_timed = true;
            } else if pending.time {
                buf.extend_from_slice(&time);
            }
            if !send_flight(&flight, pending, now) {
                return Ended::Failed("reader stopped".into());
            }
            next = if buf.len() < 1 << 20 {
                rx.try_recv().ok()
            } else {
                None
            };
            if next.is_none() && batch_timed {
                batch_timed = false;
                next = Some(Pending::probe(true));
            }
        }
        if let Err(e) = wr.write_all(&buf).await {
            return Ended::Failed(format!("write: {e}"));
        }
        buf.clear();
    }
}

/// Hands a written request to the reader, which owns the order of replies; false when the
/// reader is gone (the connection is failing).
fn send_flight(flight: &mpsc::UnboundedSender<InFlight>, pending: Pending, sent: Instant) -> bool {
    let frames = pending.replies + usize::from(pending.time && !pending.hold);
    let got = Vec::with_capacity(if frames > 1 { frames } else { 0 });
    flight.send(InFlight { pending, sent, got }).is_ok()
}

async fn read_loop(
    mut rd: OwnedReadHalf,
    mut flight: mpsc::UnboundedReceiver<InFlight>,
    settings: &Settings,
    info: &MasterInfo,
    mut clock: Option<&mut ClockWatch>,
) -> Ended {
    let stall = settings.stall_timeout;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut decoder = ReplyDecoder::default();
    let mut queue: VecDeque<InFlight> = VecDeque::new();
    // Timed replies waiting for their batch's `TIME`.
    let mut held: Vec<(Pending, Reply)> = Vec::new();
    loop {
        loop {
            let reply = match decoder.decode(&mut buf) {
                Ok(Some(reply)) => reply,
                Ok(None) => break,
                Err(e) => return Ended::Failed(format!("bad reply from master: {e}")),
            };
            while let Ok(f) = flight.try_recv() {
                queue.push_back(f);
            }
            let Some(front) = queue.front_mut() else {
                return Ended::Failed("reply without a request".into());
            };
            let p = &mut front.pending;
            if p.replies == 1 && !p.time {
                p.deliver(Ok(reply));
                queue.pop_front();
                continue;
            }
            front.got.push(reply);
            let own_time = front.pending.time && !front.pending.hold;
            if front.got.len() < front.pending.replies + usize::from(own_time) {
                continue;
            }
            let mut got = std::mem::take(&mut front.got);
            if front.pending.hold {
                // Complete, but it waits for its batch's `TIME` before it counts.
                let answer = match front.pending.replies {
                    1 => got.pop().unwrap_or(Reply::Nil),
                    _ => Reply::Array(got),
                };
                if let Some(f) = queue.pop_front() {
                    held.push((f.pending, answer));
                }
                continue;
            }
            let mut steady = true;
            if own_time {
                let reading = match got.pop() {
                    Some(r) => match parse_time(&r) {
                        Some(master_us) => Ok(Sample {
                            sent: front.sent,
                            recv: Instant::now(),
                            master_us,
                        }),
                        None => Err(r),
                    },
                    None => Err(Reply::Nil),
                };
                if let (Some(watch), Some(rules)) = (clock.as_deref_mut(), settings.clock) {
                    steady = judge_clock(info, watch, rules.span, reading);
                }
            }
            for (mut p, answer) in held.drain(..) {
                p.deliver(if steady {
                    Ok(answer)
                } else {
                    Err(BackendError::ClockJump)
                });
            }
            let p = &mut front.pending;
            if !steady {
                p.deliver(Err(BackendError::ClockJump));
            } else if p.replies == 1 {
                p.deliver(Ok(got.pop().unwrap_or(Reply::Nil)));
            } else if p.replies > 1 {
                p.deliver(Ok(Reply::Array(got)));
            }
            queue.pop_front();
        }
        let stall_at = queue.front().map(|f| f.sent + stall);
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) => return Ended::Failed("connection closed by master".into()),
                Ok(_) => {}
                Err(e) => return Ended::Failed(format!("read: {e}")),
            },
            f = flight.recv() => match f {
                Some(f) => queue.push_back(f),
                None => return Ended::Failed("writer stopped".into()),
            },
            _ = sleep_until(stall_at.unwrap_or_else(Instant::now)), if stall_at.is_some() => {
                return Ended::Failed(format!("no reply within {} ms", stall.as_millis()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::{SystemTime, UNIX_EPOCH};
    use tokio::net::TcpListener;

    #[test]
    fn info_fields() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:5\r\n";
        assert_eq!(info_field(text, "run_id"), Some("abc"));
        assert_eq!(info_field(text, "uptime_in_seconds"), Some("5"));
        assert_eq!(info_field(text, "nope"), None);
    }

    fn settings() -> Settings {
        Settings {
            connect_timeout: Duration::from_millis(500),
            stall_timeout: Duration::from_millis(500),
            reconnect_min: Duration::from_millis(10),
            reconnect_max: Duration::from_millis(20),
            probe_every: Duration::from_millis(50),
            quarantine: Some(Duration::from_millis(3000)),
            quarantine_young: true,
            masters_persist: false,
            clock: Some(clock::Rules {
                rate: 0.01,
                tolerance: Duration::from_millis(5),
                span: Duration::from_millis(3000),
            }),
        }
    }

    #[tokio::test]
    async fn down_master_answers_at_once() {
        // Port 1 on loopback refuses connections.
        let b = Backend::spawn("127.0.0.1:1".into(), settings());
        let (tx, mut rx) = crate::inbox::inbox(1);
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
                    loop {
                        while let Ok(Some((frame, _, _))) =
                            redis_protocol::resp2::decode::decode_bytes_mut(&mut buf)
                        {
                            let Reply::Array(args) = Reply::from_resp2(frame) else {
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
        let (tx, mut rx) = crate::inbox::inbox(1);
        b.send_timed(command(&[b"SET", b"k", b"v"]), 1, Some((tx, 0)));
        rx.recv().await.1
    }

    #[tokio::test]
    async fn an_old_master_is_trusted_at_once() {
        let (addr, _, _) = fake_master(persona("a", 3600)).await;
        let b = Backend::spawn(addr, settings());
        wait_for(&b, Status::Up).await;
        assert!(b.is_trusted());
        assert_eq!(ask_timed(&b).await, Ok(Reply::ok()), "TIME is stripped");
    }

    #[tokio::test]
    async fn a_young_master_sits_out_the_rest_of_the_window() {
        let (addr, _, _) = fake_master(persona("a", 1)).await;
        let b = Backend::spawn(addr, settings());
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
        let b = Backend::spawn(addr, settings());
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
        let b = Backend::spawn(
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
        let (addr, _, _) = fake_master(Persona {
            role: "slave",
            ..persona("a", 3600)
        })
        .await;
        let b = Backend::spawn(addr, settings());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(b.info().status(), Status::Down);
    }

    #[tokio::test]
    async fn a_clock_jump_voids_the_vote_cast_in_the_same_round_trip() {
        let (addr, p, _) = fake_master(persona("a", 3600)).await;
        let b = Backend::spawn(
            addr,
            Settings {
                // No probe gets there first.
                probe_every: Duration::from_secs(60),
                ..settings()
            },
        );
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
        let b = Backend::spawn(addr, settings());
        wait_for(&b, Status::Up).await;
        tokio::time::sleep(Duration::from_millis(120)).await;
        p.lock().unwrap().offset_ms = -2_000;
        wait_for(&b, Status::ClockSuspect).await;
    }

    #[tokio::test]
    async fn a_clock_jump_while_disconnected_is_caught_on_reconnect() {
        let (addr, p, cut) = fake_master(persona("a", 3600)).await;
        let b = Backend::spawn(
            addr,
            Settings {
                probe_every: Duration::from_secs(60),
                ..settings()
            },
        );
        wait_for(&b, Status::Up).await;
        p.lock().unwrap().offset_ms = 10_000;
        cut.notify_waiters();
        tokio::time::sleep(Duration::from_millis(50)).await;
        wait_for(&b, Status::ClockSuspect).await;
    }
}
