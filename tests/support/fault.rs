//! A small TCP fault proxy to put between redlock-proxy and one master.
//!
//! It relays bytes both ways and, on command, misbehaves the way networks and hosts do:
//! - [`Fault::Delay`]: every reply reaches us late (a slow master or a congested link);
//! - [`Fault::Blackhole`]: nothing moves either way, connections stay open (a partition or a
//!   hung host); bytes already sent wait, as TCP would retransmit them after healing;
//! - [`Fault::Reset`]: every connection is reset and new ones are reset at once (the host is
//!   unreachable, the port refuses);
//! - [`FaultProxy::drop_replies`]: the next replies are swallowed and their connection is reset,
//!   so the request ran but its caller never learns how (an ambiguous outcome);
//! - [`FaultProxy::retarget`]: new connections go to another master (a name that comes to
//!   mean another server, as DNS or a virtual address can).
//!
//! Bytes are never dropped from a connection that stays open: TCP does not do that, and a
//! pipelined client that lost one reply in the middle of a stream could not tell which request
//! the next one answers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

/// What the fault proxy does to traffic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Relay faithfully.
    None,
    /// Deliver every reply this much later.
    Delay(Duration),
    /// Move nothing; keep connections open.
    Blackhole,
    /// Reset every connection, now and on arrival.
    Reset,
}

/// A running fault proxy in front of one master.
pub struct FaultProxy {
    /// Where redlock-proxy should connect instead of the master.
    pub addr: String,
    state: watch::Sender<Fault>,
    drops: Arc<AtomicUsize>,
    upstream: Arc<Mutex<String>>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and relays to `upstream`.
    pub async fn start(upstream: String) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (state, rx) = watch::channel(Fault::None);
        let drops = Arc::new(AtomicUsize::new(0));
        let d = drops.clone();
        let upstream = Arc::new(Mutex::new(upstream));
        let to = upstream.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                let at = to.lock().expect("upstream").clone();
                tokio::spawn(relay(client, at, rx.clone(), d.clone()));
            }
        });
        FaultProxy {
            addr,
            state,
            drops,
            upstream,
            task,
        }
    }

    /// Relays connections made from now on to `upstream` (open ones stay where they are).
    pub fn retarget(&self, upstream: String) {
        *self.upstream.lock().expect("upstream") = upstream;
    }

    /// Switches to `fault`; it applies to open connections too.
    pub fn set(&self, fault: Fault) {
        self.state.send_replace(fault);
    }

    /// Back to faithful relaying.
    pub fn heal(&self) {
        self.set(Fault::None);
    }

    /// Swallows the next `n` replies, resetting the connection each one was on.
    pub fn drop_replies(&self, n: usize) {
        self.drops.fetch_add(n, Ordering::AcqRel);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.set(Fault::Reset);
        self.task.abort();
    }
}

/// Closes `s` with a TCP reset rather than an orderly FIN.
fn reset(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

async fn relay(
    client: TcpStream,
    upstream: String,
    mut state: watch::Receiver<Fault>,
    drops: Arc<AtomicUsize>,
) {
    if *state.borrow() == Fault::Reset {
        return reset(client);
    }
    let server = match TcpStream::connect(&upstream).await {
        Ok(s) => s,
        Err(_) => return reset(client),
    };
    let _ = server.set_nodelay(true);
    let mut client = client;
    let mut server = server;
    pump(&mut client, &mut server, &mut state, &drops).await;
    reset(client);
    reset(server);
}

/// Moves bytes until a fault or either side ends the connection.
async fn pump(
    client: &mut TcpStream,
    server: &mut TcpStream,
    state: &mut watch::Receiver<Fault>,
    drops: &AtomicUsize,
) {
    let (mut crd, mut cwr) = client.split();
    let (mut srd, mut swr) = server.split();
    let mut up = vec![0u8; 16 * 1024];
    let mut down = vec![0u8; 16 * 1024];
    // Replies waiting for their delivery time, in order.
    let mut late: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    loop {
        let fault = *state.borrow();
        if fault == Fault::Reset {
            return;
        }
        let flowing = fault != Fault::Blackhole;
        let due = late.front().map(|(t, _)| *t);
        tokio::select! {
            r = crd.read(&mut up), if flowing => match r {
                Ok(n) if n > 0 => if swr.write_all(&up[..n]).await.is_err() { return },
                _ => return,
            },
            r = srd.read(&mut down), if flowing => match r {
                Ok(n) if n > 0 => {
                    let claimed = drops
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1))
                        .is_ok();
                    if claimed {
                        return;
                    }
                    let at = match fault {
                        Fault::Delay(d) => Instant::now() + d,
                        _ => Instant::now(),
                    };
                    late.push_back((at, down[..n].to_vec()));
                }
                _ => return,
            },
            _ = sleep_until(due.unwrap_or_else(Instant::now)), if flowing && due.is_some() => {
                let now = Instant::now();
                while late.front().is_some_and(|(t, _)| *t <= now) {
                    if let Some((_, bytes)) = late.pop_front()
                        && cwr.write_all(&bytes).await.is_err()
                    {
                        return;
                    }
                }
            },
            changed = state.changed() => if changed.is_err() { return },
        }
    }
}
