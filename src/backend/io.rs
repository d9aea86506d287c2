//! The I/O loops of one master connection, generic over any byte stream (a TCP socket in
//! production, `tokio::io::duplex` in the unit tests below).
//!
//! Whoever writes takes every queued request, writes them in one batch (appending one `TIME`
//! after a batch holding timed requests) and hands each request's reply slot to the reader in
//! the same order; the reader matches replies first-in, first-out. The writing side is an
//! [`Outlet`] shared with the handles: the driver writes, and a handle that has just queued
//! enough requests writes them itself when nothing else is being written
//! ([`Outlet::flush_early`]), so the master starts on one client's pipeline while the proxy is
//! still reading the next client's. A driver woken for only a few requests lets the runtime
//! poll its sockets once more first, so that unpipelined clients share larger writes. Writer
//! and reader run in one `select!` of the driver's task, so neither can block the other on
//! full buffers, and the requests in flight between them are a plain queue they share
//! ([`Flight`]): no channel and no allocation per request.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker, ready};

use super::queue;
use bytes::BytesMut;
use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, sleep_until};
use tracing::info;

use super::clock::{ClockWatch, Sample, judge, parse_time};
use super::health::MasterInfo;
use super::pending::Pending;
use super::settings::Settings;
use crate::error::BackendError;
use crate::wire::master::{ReplyDecoder, TIME_COMMAND};
use crate::wire::reply::Reply;

/// Why a connection's loops stopped.
pub(super) enum Ended {
    /// Every handle is gone: the proxy is shutting down.
    Shutdown,
    /// The connection failed; the master is down until it reconnects.
    Failed(String),
}

/// A request written to the socket, waiting for its replies.
struct InFlight {
    pending: Pending,
    sent: Instant,
    got: Vec<Reply>,
}

/// The requests written and not yet answered, oldest first, shared by the writers and the
/// reader of one connection; no guard is held across an `await`.
///
/// The driver's writer never wakes the reader: [`serve`] polls the writer first and the reader
/// right after it in every poll of the task, so whatever the writer queued is seen by the
/// reader in the same poll (this is what arms the reader's stall timer). An early flush by a
/// handle wakes the driver instead.
#[derive(Default)]
struct Flight {
    queue: Mutex<VecDeque<InFlight>>,
}

impl Flight {
    /// Hands a written request to the reader, which owns the order of replies (`queue` is
    /// [`Flight::queue`], locked once for a whole batch).
    fn push(queue: &mut VecDeque<InFlight>, pending: Pending, sent: Instant) {
        let frames = pending.replies + usize::from(pending.time && !pending.hold);
        let got = Vec::with_capacity(if frames > 1 { frames } else { 0 });
        queue.push_back(InFlight { pending, sent, got });
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<InFlight>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ready once something is in flight. It registers no waker: it is looked at again in
    /// every poll of the task, right after the writer (see the type's docs).
    fn busy(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|_| {
            if self.queue().is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    }
}

/// Requests a handle must see waiting before it writes them itself ([`Outlet::flush_early`]).
/// Fewer wait for the driver, which writes everything queued in one go. Measured with 50
/// clients (benches/PROFILE.md): at 16, pipelined clients gained most, but clients sending
/// one request at a time lost, the master paying for more, smaller reads; at 128 the gain was
/// gone. One extra write per 32 requests costs the proxy little.
pub(super) const EARLY_FLUSH: usize = 32;

/// The driver, woken for fewer queued requests than this, lets the runtime poll its sockets
/// once before it writes them (see `write_loop`); a pipelined client's read is usually more.
const GATHER_BELOW: usize = EARLY_FLUSH / 2;

/// The writing side of one master's connection, shared by its driver and its handles (see the
/// module docs). Whoever holds the lock takes what is queued, writes it and hands the replies'
/// slots to the reader, so queue order stays wire order.
#[derive(Default)]
pub(super) struct Outlet {
    /// The socket's write half and what is on its way through it; `None` while disconnected.
    writing: Mutex<Option<Writing>>,
    /// The driver's task, woken when an early flush leaves it something to finish or to watch.
    driver: AtomicWaker,
}

/// The write half of a connection and what is on its way through it.
struct Writing {
    wr: Box<dyn AsyncWrite + Send + Unpin>,
    /// Bytes of requests already handed to the reader; `buf[sent..]` is not written yet.
    buf: BytesMut,
    sent: usize,
    /// Bytes written since the last flush (which TLS needs to push its records out).
    unflushed: bool,
    /// Requests taken from the queue in one go and not written yet (what did not fit a batch).
    taken: VecDeque<Pending>,
    flight: Arc<Flight>,
}

impl Outlet {
    fn lock(&self) -> MutexGuard<'_, Option<Writing>> {
        self.writing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes what is queued on `tx` now, from the handle that has just queued it, when the
    /// driver is not in the middle of writing (its bytes, and what it took, go first): the
    /// master then starts on it without waiting for the driver's turn. Whatever the socket
    /// does not take at once is left to the driver, which is woken.
    pub(super) fn flush_early(&self, tx: &queue::Sender<Pending>) {
        let Ok(mut guard) = self.writing.try_lock() else {
            return;
        };
        let Some(w) = guard.as_mut() else { return };
        if !w.idle() {
            return;
        }
        w.fill(None, &mut |into| tx.take_all(into));
        // Polled without a waker: what does not go out now (or fails) is the driver's to
        // finish (or to report), with its own.
        let _ = w.poll_drain(&mut Context::from_waker(Waker::noop()));
        drop(guard);
        // Woken either way: the driver's reader arms its stall timer for what is in flight.
        self.driver.wake();
    }
}

impl Writing {
    /// Nothing taken and nothing unwritten: a handle may write.
    fn idle(&self) -> bool {
        self.sent == self.buf.len() && !self.unflushed && self.taken.is_empty()
    }

    /// Moves `first` and what is queued (`take` takes it all) into `buf` and the reader's
    /// queue, as one batch of up to about 1 MiB: each request's bytes, and one `TIME` after a
    /// batch holding timed requests.
    fn fill(&mut self, first: Option<Pending>, take: &mut dyn FnMut(&mut VecDeque<Pending>)) {
        let mut next = first.or_else(|| {
            if self.taken.is_empty() {
                take(&mut self.taken);
            }
            self.taken.pop_front()
        });
        if next.is_none() {
            return;
        }
        let now = Instant::now();
        // Timed requests in this batch share one `TIME`, written after all of them: it is read
        // after each of their commands ran, so a clock that leapt before any of them shows.
        let mut batch_timed = false;
        // Locked once for the whole batch.
        let mut queue = self.flight.queue();
        while let Some(mut pending) = next.take() {
            // Sent even when its caller has stopped waiting (decided early, or gone): a write
            // must reach every master, not only the ones that answered first.
            self.buf.extend_from_slice(&pending.bytes);
            if pending.time && pending.replies > 0 {
                pending.hold = true;
                batch_timed = true;
            } else if pending.time {
                self.buf.extend_from_slice(TIME_COMMAND);
            }
            Flight::push(&mut queue, pending, now);
            next = if self.buf.len() - self.sent < 1 << 20 {
                if self.taken.is_empty() {
                    take(&mut self.taken);
                }
                self.taken.pop_front()
            } else {
                None
            };
            if next.is_none() && batch_timed {
                batch_timed = false;
                next = Some(Pending::probe(true));
            }
        }
    }

    /// Writes the unwritten bytes and flushes them; `Pending` (the rest kept, in order) while
    /// the socket is full.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.wr).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
            self.unflushed = true;
        }
        self.buf.clear();
        self.sent = 0;
        if self.unflushed {
            // TLS buffers inside the session: flush pushes the batch out (free on plain TCP).
            ready!(Pin::new(&mut self.wr).poll_flush(cx))?;
            self.unflushed = false;
        }
        Poll::Ready(Ok(()))
    }
}

/// Runs one connection until it fails or every handle is gone; `outlet` holds its writing side
/// meanwhile.
pub(super) async fn serve<S>(
    stream: S,
    rx: &mut queue::Receiver<Pending>,
    outlet: &Outlet,
    settings: &Settings,
    info: &MasterInfo,
    clock: Option<&mut ClockWatch>,
    switched: Option<&mut watch::Receiver<u64>>,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(stream);
    let flight = Arc::new(Flight::default());
    *outlet.lock() = Some(Writing {
        wr: Box::new(wr),
        buf: BytesMut::with_capacity(64 * 1024),
        sent: 0,
        unflushed: false,
        taken: VecDeque::new(),
        flight: flight.clone(),
    });
    // Biased: the writer first, then the reader in the same poll (see `Flight`).
    let loops = async {
        tokio::select! {
            biased;
            e = write_loop(outlet, rx, settings, info) => e,
            e = read_loop(rd, &flight, settings, info, clock) => e,
        }
    };
    let ended = match switched {
        None => loops.await,
        // A Sentinel member also ends when the Sentinels name another primary: every request
        // in flight fails, so no vote of the replaced node counts once the switch is known.
        Some(switched) => tokio::select! {
            e = loops => e,
            // (A watcher that is gone disables this branch, not the connection.)
            Ok(()) = switched.changed() => {
                Ended::Failed("the Sentinels named another primary".into())
            }
        },
    };
    // The socket, and every request not answered, go with the connection (their callers hear
    // that it is closed).
    let writing = outlet.lock().take();
    drop(writing);
    ended
}

/// What the driver's writer was woken for.
enum Work {
    /// Bytes, or requests already taken, are left unwritten.
    Finish,
    /// This many requests are queued.
    Queued(usize),
    /// A probe is due.
    Probe,
    /// Every handle is gone.
    Shutdown,
}

async fn write_loop(
    outlet: &Outlet,
    rx: &mut queue::Receiver<Pending>,
    settings: &Settings,
    info: &MasterInfo,
) -> Ended {
    let mut probe =
        tokio::time::interval_at(Instant::now() + settings.probe_every, settings.probe_every);
    probe.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let work = std::future::poll_fn(|cx| {
            // The probe first: it is due on time even while requests keep coming (it joins
            // their batch).
            if probe.poll_tick(cx).is_ready() {
                return Poll::Ready(Work::Probe);
            }
            outlet.driver.register(cx.waker());
            if outlet.lock().as_ref().is_some_and(|w| !w.idle()) {
                return Poll::Ready(Work::Finish);
            }
            match rx.poll_waiting(cx) {
                Poll::Ready(0) => Poll::Ready(Work::Shutdown),
                Poll::Ready(n) => Poll::Ready(Work::Queued(n)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        let mut first = match work {
            Work::Shutdown => return Ended::Shutdown,
            Work::Finish => None,
            Work::Queued(n) => {
                if n < GATHER_BELOW {
                    // A small batch waits for the runtime to look at its sockets once more
                    // (a yield is woken after that poll, behind the tasks it wakes): clients
                    // whose requests arrived meanwhile join it. Under unpipelined load the
                    // master then gets fewer, larger writes (fewer reads, wake-ups and
                    // segments on every side); alone, a request waits one non-blocking poll.
                    tokio::task::yield_now().await;
                }
                None
            }
            Work::Probe => {
                if info.exclusion_ended() {
                    info!(
                        status = info.status().name(),
                        "master trusted again: its votes count"
                    );
                }
                Some(Pending::probe(settings.clock.is_some()))
            }
        };
        let written = std::future::poll_fn(|cx| {
            let mut guard = outlet.lock();
            let Some(w) = guard.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            // What was queued since the last poll goes after what is still unwritten.
            w.fill(first.take(), &mut |into| rx.take_all(into));
            w.poll_drain(cx)
        })
        .await;
        if let Err(e) = written {
            return Ended::Failed(format!("write: {e}"));
        }
    }
}

async fn read_loop(
    mut rd: impl AsyncRead + Unpin,
    flight: &Flight,
    settings: &Settings,
    info: &MasterInfo,
    mut clock: Option<&mut ClockWatch>,
) -> Ended {
    let stall = settings.stall_timeout;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut decoder = ReplyDecoder::default();
    // Timed replies waiting for their batch's `TIME`.
    let mut held: Vec<(Pending, Reply)> = Vec::new();
    // When the bytes being decoded arrived: one clock read per read, not one per reply.
    let mut arrived = Instant::now();
    // The last latency worked out, with the send and arrival times it is for: the requests of
    // one written batch share their send time and the replies decoded from one read share their
    // arrival time, so one subtraction serves a whole batch's replies.
    let mut latency = (arrived, arrived, std::time::Duration::ZERO);
    // The stall timer, set for the oldest request in flight and moved only after it fires: the
    // oldest request only ever gets younger, so a timer that fires early is set again for the
    // one now oldest, and most reads cost no timer update (a new one per read did).
    let stall_timer = sleep_until(Instant::now());
    tokio::pin!(stall_timer);
    let mut stall_armed = false;
    // A reply said the node is a replica now (`READONLY`, `MASTERDOWN`).
    let mut demoted = false;
    loop {
        // Locked once for all the replies of a read (the writer runs in this same task).
        let stall_at = {
            let mut queue = flight.queue();
            loop {
                let reply = match decoder.decode(&mut buf) {
                    Ok(Some(reply)) => reply,
                    Ok(None) => break,
                    Err(e) => return Ended::Failed(format!("bad reply from master: {e}")),
                };
                if let Reply::Error(e) = &reply {
                    demoted |= no_longer_primary(e);
                }
                let Some(front) = queue.front_mut() else {
                    return Ended::Failed("reply without a request".into());
                };
                if front.got.is_empty() {
                    if (latency.0, latency.1) != (front.sent, arrived) {
                        latency = (
                            front.sent,
                            arrived,
                            arrived.saturating_duration_since(front.sent),
                        );
                    }
                    info.latency().observe(latency.2);
                }
                let p = &mut front.pending;
                if p.replies == 1 && !p.time {
                    p.deliver(Ok(reply));
                    queue.pop_front();
                    continue;
                }
                gather(
                    &mut queue,
                    reply,
                    &mut held,
                    clock.as_deref_mut(),
                    settings,
                    info,
                );
            }
            queue.front().map(|f| f.sent + stall)
        };
        if demoted {
            // The reply was delivered (a "no"); the node is not a primary any more, so the
            // connection ends and the driver connects again (a Sentinel member asks its
            // Sentinels first; a replica is refused by the greeting).
            return Ended::Failed(
                "the master answered READONLY or MASTERDOWN: it is not a primary now".into(),
            );
        }
        if let Some(at) = stall_at
            && !stall_armed
        {
            stall_timer.as_mut().reset(at);
            stall_armed = true;
        }
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) => return Ended::Failed("connection closed by master".into()),
                Ok(_) => arrived = Instant::now(),
                Err(e) => return Ended::Failed(format!("read: {e}")),
            },
            () = flight.busy(), if stall_at.is_none() => {}
            () = &mut stall_timer, if stall_armed => {
                stall_armed = false;
                let oldest = flight.queue().front().map(|f| f.sent + stall);
                if oldest.is_some_and(|at| at <= Instant::now()) {
                    info.count_timeout();
                    return Ended::Failed(format!("no reply within {} ms", stall.as_millis()));
                }
            }
        }
    }
}

/// A reply for the request at the front of `queue` that is more than its one plain reply: one
/// of several, a timed request's, or its batch's `TIME`. A timed request waits in `held` for
/// its batch's `TIME`, and the `TIME` judges the clock for all of them; a request is delivered
/// and leaves the queue once complete.
#[inline]
fn gather(
    queue: &mut VecDeque<InFlight>,
    reply: Reply,
    held: &mut Vec<(Pending, Reply)>,
    clock: Option<&mut ClockWatch>,
    settings: &Settings,
    info: &MasterInfo,
) {
    let Some(front) = queue.front_mut() else {
        return;
    };
    let p = &mut front.pending;
    if p.replies == 1 && p.hold {
        // One reply that waits for its batch's `TIME` (every timed request but the
        // batch's last): held as it is, without a list of its own.
        if let Some(f) = queue.pop_front() {
            held.push((f.pending, reply));
        }
        return;
    }
    front.got.push(reply);
    let own_time = front.pending.time && !front.pending.hold;
    if front.got.len() < front.pending.replies + usize::from(own_time) {
        return;
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
        return;
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
        if let (Some(watch), Some(rules)) = (clock, settings.clock) {
            steady = judge(info, watch, rules.span, reading);
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

/// `-READONLY ...` or `-MASTERDOWN ...`: the node answering is a replica now.
fn no_longer_primary(error: &[u8]) -> bool {
    error.starts_with(b"READONLY") || error.starts_with(b"MASTERDOWN")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use tokio::io::DuplexStream;

    use super::*;
    use crate::backend::inbox::{ReplyRx, inbox};
    use crate::wire::master::command;
    use tokio::io::AsyncWriteExt;

    /// A connection to test: the proxy's end of a pipe and the master's, the request queue,
    /// the master's info, and settings with or without clock watch.
    fn rig(
        clock: bool,
    ) -> (
        DuplexStream,
        DuplexStream,
        queue::Sender<Pending>,
        queue::Receiver<Pending>,
        MasterInfo,
        Settings,
    ) {
        let (proxy_end, master) = tokio::io::duplex(1 << 16);
        let (qtx, qrx) = queue::channel(16);
        let info = MasterInfo::new("duplex".into());
        (proxy_end, master, qtx, qrx, info, settings(clock))
    }

    /// Serves `stream` as the driver would, with an outlet of its own and no generation to
    /// watch.
    async fn serve_on<S: AsyncRead + AsyncWrite + Send + 'static>(
        stream: S,
        rx: &mut queue::Receiver<Pending>,
        s: &Settings,
        info: &MasterInfo,
        clock: Option<&mut ClockWatch>,
    ) -> Ended {
        serve(stream, rx, &Outlet::default(), s, info, clock, None).await
    }

    fn settings(clock: bool) -> Settings {
        Settings {
            stall_timeout: Duration::from_millis(300),
            clock: clock.then_some(crate::backend::clock::Rules {
                rate: 0.01,
                tolerance: Duration::from_millis(5),
                span: Duration::from_millis(3000),
            }),
            ..Settings::for_tests()
        }
    }

    fn pending(
        cmd: &[&[u8]],
        time: bool,
        tx: &crate::backend::inbox::ReplyTx,
        slot: usize,
    ) -> Pending {
        Pending {
            bytes: command(cmd),
            replies: 1,
            time,
            hold: false,
            reply_to: Some((tx.clone(), slot)),
        }
    }

    /// Reads from the master's end until `want` bytes of requests have arrived.
    async fn read_requests(master: &mut DuplexStream, want: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while got.len() < want {
            let mut chunk = [0u8; 4096];
            let n = master.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed");
            got.extend_from_slice(&chunk[..n]);
        }
        got
    }

    fn time_reply() -> Vec<u8> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let (s, us) = (now.as_secs().to_string(), now.subsec_micros().to_string());
        format!("*2\r\n${}\r\n{s}\r\n${}\r\n{us}\r\n", s.len(), us.len()).into_bytes()
    }

    async fn next(rx: &mut ReplyRx) -> (usize, Result<Reply, BackendError>) {
        tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .expect("a delivery")
    }

    #[tokio::test]
    async fn pipelined_replies_are_matched_in_order_and_timed_ones_wait_for_their_time() {
        let (proxy_end, mut master, qtx, mut qrx, info, s) = rig(true);
        let (tx, mut rx) = inbox(3);
        // Two plain requests and a timed one, queued before the loops start: one batch.
        qtx.try_send(pending(&[b"GET", b"a"], false, &tx, 0)).ok();
        qtx.try_send(pending(&[b"SET", b"k", b"v", b"NX"], true, &tx, 1))
            .ok();
        qtx.try_send(pending(&[b"GET", b"b"], false, &tx, 2)).ok();
        let mut watch = ClockWatch::new(s.clock.unwrap());
        let driver = async { serve_on(proxy_end, &mut qrx, &s, &info, Some(&mut watch)).await };
        let master_side = async {
            let expect = [
                command(&[b"GET", b"a"]),
                command(&[b"SET", b"k", b"v", b"NX"]),
                command(&[b"GET", b"b"]),
                command(&[b"TIME"]),
            ]
            .concat();
            let got = read_requests(&mut master, expect.len()).await;
            assert_eq!(got, expect, "one batch, TIME after it");
            master
                .write_all(b"$1\r\nA\r\n+OK\r\n$-1\r\n")
                .await
                .unwrap();
            assert_eq!(next(&mut rx).await, (0, Ok(Reply::bulk("A"))));
            // The timed reply waits for TIME; the untimed one after it does not.
            assert_eq!(next(&mut rx).await, (2, Ok(Reply::Nil)));
            master.write_all(&time_reply()).await.unwrap();
            assert_eq!(next(&mut rx).await, (1, Ok(Reply::ok())));
            drop(qtx);
        };
        let (ended, ()) = tokio::join!(driver, master_side);
        assert!(matches!(ended, Ended::Shutdown));
    }

    #[tokio::test]
    async fn a_handle_writes_early_in_queue_order_and_the_driver_finishes_what_it_left() {
        // A pipe too small for the early write: the driver must finish it, then write what is
        // queued after it, all in queue order.
        let (proxy_end, mut master) = tokio::io::duplex(64);
        let (qtx, mut qrx) = queue::channel(1024);
        let outlet = Outlet::default();
        let info = MasterInfo::new("duplex".into());
        let s = settings(false);
        let n = EARLY_FLUSH + 8;
        let (tx, mut rx) = inbox(n + 1);
        let cmd = |i: usize| format!("k{i}");
        let driver = async { serve(proxy_end, &mut qrx, &outlet, &s, &info, None, None).await };
        let master_side = async {
            // The driver has been polled once (the connection is up), and not since.
            let mut waiting = 0;
            for i in 0..n {
                let key = cmd(i);
                let Ok(w) = qtx.try_send(pending(&[b"GET", key.as_bytes()], false, &tx, i)) else {
                    panic!("queue full");
                };
                waiting = w;
            }
            assert_eq!(waiting, n);
            outlet.flush_early(&qtx);
            {
                let guard = outlet.lock();
                let w = guard.as_ref().expect("connected");
                assert_eq!(
                    w.flight.queue().len(),
                    n,
                    "all taken and handed to the reader"
                );
                assert!(w.sent > 0 && !w.idle(), "written in part, the rest left");
            }
            let wire = |from: usize, to: usize| -> Vec<u8> {
                (from..to)
                    .flat_map(|i| command(&[b"GET", cmd(i).as_bytes()]).to_vec())
                    .collect()
            };
            // The driver finishes the early write with nothing more queued.
            let limit = Duration::from_secs(2);
            let first = tokio::time::timeout(limit, read_requests(&mut master, wire(0, n).len()));
            let first = first.await;
            assert_eq!(
                first.expect("the driver finished the early write"),
                wire(0, n)
            );
            // Queued after the early write: it goes after everything that write took.
            let last = cmd(n);
            assert!(
                qtx.try_send(pending(&[b"GET", last.as_bytes()], false, &tx, n))
                    .is_ok()
            );
            let rest =
                tokio::time::timeout(limit, read_requests(&mut master, wire(n, n + 1).len()));
            let rest = rest.await;
            assert_eq!(
                rest.expect("the driver wrote the next request"),
                wire(n, n + 1)
            );
            for i in 0..=n {
                let v = cmd(i);
                master
                    .write_all(format!("${}\r\n{v}\r\n", v.len()).as_bytes())
                    .await
                    .unwrap();
                assert_eq!(next(&mut rx).await, (i, Ok(Reply::bulk(v.clone()))));
            }
            drop(qtx);
        };
        let (ended, ()) = tokio::join!(driver, master_side);
        assert!(matches!(ended, Ended::Shutdown));
    }

    #[tokio::test]
    async fn requests_queued_before_the_runtime_next_polls_its_sockets_share_a_write() {
        let (proxy_end, mut master) = tokio::io::duplex(1 << 16);
        let (qtx, mut qrx) = queue::channel(16);
        let (tx, _rx) = inbox(2);
        let driver = tokio::spawn(async move {
            let s = settings(true);
            let mut watch = ClockWatch::new(s.clock.unwrap());
            let info = MasterInfo::new("duplex".into());
            let outlet = Outlet::default();
            serve(
                proxy_end,
                &mut qrx,
                &outlet,
                &s,
                &info,
                Some(&mut watch),
                None,
            )
            .await
        });
        // A second client, woken by the runtime's next look at its sockets, queues another
        // timed request.
        let (mut bell, ring) = std::os::unix::net::UnixStream::pair().unwrap();
        ring.set_nonblocking(true).unwrap();
        let (qtx2, tx2) = (qtx.clone(), tx.clone());
        let other = tokio::spawn(async move {
            let mut ring = tokio::net::UnixStream::from_std(ring).unwrap();
            ring.read_u8().await.unwrap();
            assert!(
                qtx2.try_send(pending(&[b"SET", b"b", b"t", b"NX"], true, &tx2, 1))
                    .is_ok()
            );
        });
        // Both tasks run up to their waits.
        tokio::task::yield_now().await;
        assert!(
            qtx.try_send(pending(&[b"SET", b"a", b"t", b"NX"], true, &tx, 0))
                .is_ok()
        );
        std::io::Write::write_all(&mut bell, b"!").unwrap();
        let expect = [
            command(&[b"SET", b"a", b"t", b"NX"]),
            command(&[b"SET", b"b", b"t", b"NX"]),
            command(&[b"TIME"]),
        ]
        .concat();
        let got = tokio::time::timeout(
            Duration::from_secs(2),
            read_requests(&mut master, expect.len()),
        )
        .await
        .expect("requests written");
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expect),
            "one batch, one TIME"
        );
        other.await.unwrap();
        drop((qtx, tx));
        assert!(matches!(driver.await.unwrap(), Ended::Shutdown));
    }

    #[tokio::test]
    async fn a_master_that_stops_answering_is_failed_after_the_stall_timeout() {
        let (proxy_end, mut master, qtx, mut qrx, info, s) = rig(false);
        let (tx, mut rx) = inbox(1);
        qtx.try_send(pending(&[b"GET", b"a"], false, &tx, 0)).ok();
        let started = Instant::now();
        let ended = serve_on(proxy_end, &mut qrx, &s, &info, None).await;
        assert!(matches!(ended, Ended::Failed(ref why) if why.contains("no reply")));
        assert!(started.elapsed() >= Duration::from_millis(300));
        // The request was written, and its caller hears that the connection is gone.
        assert_eq!(next(&mut rx).await, (0, Err(BackendError::Closed)));
        let got = read_requests(&mut master, command(&[b"GET", b"a"]).len()).await;
        assert_eq!(got, command(&[b"GET", b"a"]).to_vec());
    }

    #[tokio::test]
    async fn a_reply_nobody_asked_for_or_a_garbled_one_ends_the_connection() {
        for wire in byte_strings![b"+OK\r\n", b"?what\r\n"] {
            let (proxy_end, mut master, _qtx, mut qrx, info, s) = rig(false);
            master.write_all(wire).await.unwrap();
            let ended = serve_on(proxy_end, &mut qrx, &s, &info, None).await;
            assert!(matches!(ended, Ended::Failed(_)));
        }
    }

    #[tokio::test]
    async fn a_reply_nested_too_deep_is_an_error_for_its_caller_only() {
        let (proxy_end, mut master) = tokio::io::duplex(1 << 20);
        let (qtx, mut qrx) = queue::channel(16);
        let info = MasterInfo::new("duplex".into());
        let s = settings(false);
        let (tx, mut rx) = inbox(2);
        qtx.try_send(pending(&[b"EVAL", b"deep", b"0"], false, &tx, 0))
            .ok();
        qtx.try_send(pending(&[b"PING"], false, &tx, 1)).ok();
        let driver = async { serve_on(proxy_end, &mut qrx, &s, &info, None).await };
        let master_side = async {
            let mut deep = b"*1\r\n".repeat(100_000);
            deep.extend_from_slice(b":1\r\n+PONG\r\n");
            master.write_all(&deep).await.unwrap();
            assert_eq!(
                next(&mut rx).await,
                (0, Ok(Reply::from(crate::error::Error::ReplyTooDeep)))
            );
            assert_eq!(next(&mut rx).await, (1, Ok(Reply::simple("PONG"))));
            drop(qtx);
        };
        let (ended, ()) = tokio::join!(driver, master_side);
        assert!(matches!(ended, Ended::Shutdown));
    }
}
