//! One long-lived, pipelined connection per master, shared by every client.
//!
//! A [`Backend`] is a cheap, cloneable handle. Requests go into an unbounded channel together
//! with where the reply should be delivered; a driver task owns the socket. The driver writes
//! everything queued in one go and hands each request's reply slot to a reader in the same
//! order, so queue order is wire order and replies are matched first-in, first-out. Reading
//! and writing run concurrently, so proxy and master can never block each other on full buffers.
//!
//! A master that is down answers "no" at once: [`Backend::send`] fails immediately instead of
//! queueing. When the connection fails, every request still waiting is failed (a dropped
//! [`Pending`] reports [`BackendError::Closed`]), and the driver reconnects with jittered,
//! doubling backoff. A request that timed out for its caller may still run on the master; the
//! lock logic cleans up after that case.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::reply::{Reply, command};

/// Why a master gave no reply.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
pub enum BackendError {
    /// The master is marked down; the request was not sent.
    #[error("master is down")]
    Down,
    /// The connection failed before the reply came.
    #[error("connection to master lost")]
    Closed,
}

/// Where a master's reply goes: a fan-out's channel and this master's slot in it.
pub type ReplyTx = mpsc::UnboundedSender<(usize, Result<Reply, BackendError>)>;

/// Health of a master, as seen by this proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Not connected yet, or reconnecting.
    Down = 0,
    /// Connected and answering.
    Up = 1,
}

impl Status {
    /// Lower-case name for `INFO` and logs.
    pub fn name(self) -> &'static str {
        match self {
            Status::Down => "down",
            Status::Up => "up",
        }
    }
}

/// Connection settings for a master.
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
}

/// A request on its way to a master.
pub struct Pending {
    bytes: Bytes,
    replies: usize,
    reply_to: Option<(ReplyTx, usize)>,
}

impl Pending {
    /// True when nobody waits for the reply any more, so the request need not be sent.
    fn abandoned(&self) -> bool {
        matches!(&self.reply_to, Some((tx, _)) if tx.is_closed())
    }

    fn deliver(&mut self, result: Result<Reply, BackendError>) {
        if let Some((tx, slot)) = self.reply_to.take() {
            let _ = tx.send((slot, result));
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

/// What the proxy knows about a master; shared by handle and driver.
#[derive(Debug)]
pub struct MasterInfo {
    /// `host:port`.
    pub addr: String,
    status: AtomicU8,
    run_id: Mutex<Option<String>>,
}

impl MasterInfo {
    /// Current status.
    pub fn status(&self) -> Status {
        match self.status.load(Ordering::Acquire) {
            1 => Status::Up,
            _ => Status::Down,
        }
    }

    fn set_status(&self, s: Status) {
        self.status.store(s as u8, Ordering::Release);
    }

    /// The master's `run_id`, learnt on the last connect.
    pub fn run_id(&self) -> Option<String> {
        self.run_id.lock().ok().and_then(|g| g.clone())
    }
}

/// Handle to one master's shared connection.
#[derive(Clone)]
pub struct Backend {
    tx: mpsc::UnboundedSender<Pending>,
    info: Arc<MasterInfo>,
}

impl Backend {
    /// Starts the driver task for `addr` and returns the handle.
    pub fn spawn(addr: String, settings: Settings) -> Backend {
        let (tx, rx) = mpsc::unbounded_channel();
        let info = Arc::new(MasterInfo {
            addr: addr.clone(),
            status: AtomicU8::new(Status::Down as u8),
            run_id: Mutex::new(None),
        });
        let span = info_span!("backend", backend.addr = %addr);
        tokio::spawn(drive(info.clone(), rx, settings).instrument(span));
        Backend { tx, info }
    }

    /// What the proxy knows about this master.
    pub fn info(&self) -> &MasterInfo {
        &self.info
    }

    /// True when the master is connected and answering.
    pub fn is_up(&self) -> bool {
        self.info.status() == Status::Up
    }

    /// Queues `bytes` (holding `replies` commands) and delivers the reply to `reply_to`; several
    /// replies are delivered as one array. A master that is down gets nothing and reports
    /// [`BackendError::Down`] at once.
    pub fn send(&self, bytes: Bytes, replies: usize, reply_to: Option<(ReplyTx, usize)>) {
        let mut pending = Pending {
            bytes,
            replies,
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
    loop {
        match connect(&info, &settings).await {
            Ok(stream) => {
                delay = settings.reconnect_min;
                info.set_status(Status::Up);
                info!(
                    run_id = info.run_id().as_deref().unwrap_or("?"),
                    "master up"
                );
                let reason = serve(stream, &mut rx, &settings).await;
                info.set_status(Status::Down);
                match reason {
                    Ended::Shutdown => return,
                    Ended::Failed(why) => warn!(reason = %why, "master down"),
                }
            }
            Err(why) => debug!(reason = %why, "connect failed"),
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

/// Opens the connection and learns who the master is.
async fn connect(info: &MasterInfo, settings: &Settings) -> Result<TcpStream, String> {
    let greet = async {
        let mut stream = TcpStream::connect(&info.addr)
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut hello = BytesMut::new();
        hello.extend_from_slice(&command(&[b"INFO", b"server"]));
        hello.extend_from_slice(&command(&[b"ROLE"]));
        stream.write_all(&hello).await.map_err(|e| e.to_string())?;
        let mut buf = BytesMut::with_capacity(8192);
        let mut replies = Vec::new();
        while replies.len() < 2 {
            if let Some((frame, _, _)) = redis_protocol::resp2::decode::decode_bytes_mut(&mut buf)
                .map_err(|e| e.to_string())?
            {
                replies.push(Reply::from_resp2(frame));
                continue;
            }
            if stream.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                return Err("connection closed during handshake".to_string());
            }
        }
        Ok((stream, replies))
    };
    let (stream, replies) = timeout(settings.connect_timeout, greet)
        .await
        .map_err(|_| "handshake timed out".to_string())??;
    let info_text = match &replies[0] {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Error(e) => return Err(format!("INFO failed: {}", String::from_utf8_lossy(e))),
        other => return Err(format!("unexpected INFO reply {other:?}")),
    };
    let role = match &replies[1] {
        Reply::Array(items) => match items.first() {
            Some(Reply::Bulk(r)) => String::from_utf8_lossy(r).into_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    if role != "master" {
        warn!(role = %role, "refusing backend: it is not a master");
        return Err(format!("backend reports role '{role}', not master"));
    }
    let run_id = info_field(&info_text, "run_id").map(str::to_owned);
    if let Ok(mut g) = info.run_id.lock() {
        *g = run_id;
    }
    Ok(stream)
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
) -> Ended {
    let (rd, wr) = stream.into_split();
    let (flight_tx, flight_rx) = mpsc::unbounded_channel();
    tokio::select! {
        e = write_loop(wr, rx, flight_tx) => e,
        e = read_loop(rd, flight_rx, settings.stall_timeout) => e,
    }
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    rx: &mut mpsc::UnboundedReceiver<Pending>,
    flight: mpsc::UnboundedSender<InFlight>,
) -> Ended {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let Some(first) = rx.recv().await else {
            return Ended::Shutdown;
        };
        let now = Instant::now();
        let mut next = Some(first);
        while let Some(pending) = next {
            if !pending.abandoned() {
                buf.extend_from_slice(&pending.bytes);
                let got = Vec::with_capacity(if pending.replies > 1 {
                    pending.replies
                } else {
                    0
                });
                // The reader owns the order of replies; if it is gone the connection is failing.
                if flight
                    .send(InFlight {
                        pending,
                        sent: now,
                        got,
                    })
                    .is_err()
                {
                    return Ended::Failed("reader stopped".into());
                }
            }
            next = if buf.len() < 1 << 20 {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        if let Err(e) = wr.write_all(&buf).await {
            return Ended::Failed(format!("write: {e}"));
        }
        buf.clear();
    }
}

async fn read_loop(
    mut rd: OwnedReadHalf,
    mut flight: mpsc::UnboundedReceiver<InFlight>,
    stall: Duration,
) -> Ended {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut queue: VecDeque<InFlight> = VecDeque::new();
    loop {
        loop {
            let frame = match redis_protocol::resp2::decode::decode_bytes_mut(&mut buf) {
                Ok(Some((frame, _, _))) => frame,
                Ok(None) => break,
                Err(e) => return Ended::Failed(format!("bad reply from master: {e:?}")),
            };
            while let Ok(f) = flight.try_recv() {
                queue.push_back(f);
            }
            let Some(front) = queue.front_mut() else {
                return Ended::Failed("reply without a request".into());
            };
            let reply = Reply::from_resp2(frame);
            if front.pending.replies <= 1 {
                front.pending.deliver(Ok(reply));
            } else {
                front.got.push(reply);
                if front.got.len() < front.pending.replies {
                    continue;
                }
                let all = std::mem::take(&mut front.got);
                front.pending.deliver(Ok(Reply::Array(all)));
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

    #[test]
    fn info_fields() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:5\r\n";
        assert_eq!(info_field(text, "run_id"), Some("abc"));
        assert_eq!(info_field(text, "uptime_in_seconds"), Some("5"));
        assert_eq!(info_field(text, "nope"), None);
    }

    #[tokio::test]
    async fn down_master_answers_at_once() {
        let settings = Settings {
            connect_timeout: Duration::from_millis(50),
            stall_timeout: Duration::from_millis(50),
            reconnect_min: Duration::from_millis(10),
            reconnect_max: Duration::from_millis(20),
        };
        // Port 1 on loopback refuses connections.
        let b = Backend::spawn("127.0.0.1:1".into(), settings);
        let (tx, mut rx) = mpsc::unbounded_channel();
        b.send(command(&[b"PING"]), 1, Some((tx, 3)));
        assert_eq!(rx.recv().await, Some((3, Err(BackendError::Down))));
    }
}
