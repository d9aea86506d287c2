//! The I/O loops of one master connection, generic over any byte stream (a TCP socket in
//! production, `tokio::io::duplex` in the unit tests below).
//!
//! The writer takes every queued request, writes them in one batch (appending one `TIME` after
//! a batch holding timed requests) and hands each request's reply slot to the reader in the same
//! order; the reader matches replies first-in, first-out. Both run in one `select!` of one task,
//! so neither can block the other on full buffers, and the requests in flight between them are
//! a plain queue they share ([`Flight`]): no channel and no allocation per request.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::task::Poll;

use super::queue;
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, MissedTickBehavior, sleep_until};
use tracing::info;

use super::clock::{ClockWatch, Sample, judge, parse_time};
use super::health::MasterInfo;
use super::{BackendError, Pending, Settings};
use crate::reply::{Reply, ReplyDecoder, command};

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

/// The requests written and not yet answered, oldest first, shared by the writer and the reader
/// of one connection. Both run in the same task, so the mutex is never contended (it is there
/// because the task may move between threads); no guard is held across an `await`.
///
/// The writer never wakes the reader: [`serve`] polls the writer first and the reader right
/// after it in every poll of the task, so whatever the writer queued is seen by the reader in
/// the same poll (this is what arms the reader's stall timer).
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

/// Runs one connection until it fails or every handle is gone.
pub(super) async fn serve<S>(
    stream: S,
    rx: &mut queue::Receiver<Pending>,
    settings: &Settings,
    info: &MasterInfo,
    clock: Option<&mut ClockWatch>,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Send,
{
    let (rd, wr) = tokio::io::split(stream);
    let flight = Flight::default();
    // Biased: the writer first, then the reader in the same poll (see `Flight`).
    tokio::select! {
        biased;
        e = write_loop(wr, rx, &flight, settings, info) => e,
        e = read_loop(rd, &flight, settings, info, clock) => e,
    }
}

/// The bytes of `TIME`, appended after a timed request.
fn time_command() -> Bytes {
    command(&[b"TIME"])
}

async fn write_loop(
    mut wr: impl AsyncWrite + Unpin,
    rx: &mut queue::Receiver<Pending>,
    flight: &Flight,
    settings: &Settings,
    info: &MasterInfo,
) -> Ended {
    let time = time_command();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut probe =
        tokio::time::interval_at(Instant::now() + settings.probe_every, settings.probe_every);
    probe.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Requests taken from the queue in one go and not written yet (what did not fit a batch).
    let mut taken: VecDeque<Pending> = VecDeque::new();
    loop {
        let first = if let Some(p) = taken.pop_front() {
            p
        } else {
            tokio::select! {
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
            }
        };
        let now = Instant::now();
        let mut next = Some(first);
        // Timed requests in this batch share one `TIME`, written after all of them: it is read
        // after each of their commands ran, so a clock that leapt before any of them shows.
        let mut batch_timed = false;
        // Locked once for the whole batch.
        {
            let mut queue = flight.queue();
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
                Flight::push(&mut queue, pending, now);
                next = if buf.len() < 1 << 20 {
                    if taken.is_empty() {
                        rx.take_all(&mut taken);
                    }
                    taken.pop_front()
                } else {
                    None
                };
                if next.is_none() && batch_timed {
                    batch_timed = false;
                    next = Some(Pending::probe(true));
                }
            }
        }
        // TLS buffers inside the session: flush pushes the batch out (free on plain TCP).
        if let Err(e) = async {
            wr.write_all(&buf).await?;
            wr.flush().await
        }
        .await
        {
            return Ended::Failed(format!("write: {e}"));
        }
        buf.clear();
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
                if p.replies == 1 && p.hold {
                    // One reply that waits for its batch's `TIME` (every timed request but the
                    // batch's last): held as it is, without a list of its own.
                    if let Some(f) = queue.pop_front() {
                        held.push((f.pending, reply));
                    }
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
            queue.front().map(|f| f.sent + stall)
        };
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use tokio::io::DuplexStream;

    use super::*;
    use crate::inbox::{ReplyRx, inbox};

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

    fn pending(cmd: &[&[u8]], time: bool, tx: &crate::inbox::ReplyTx, slot: usize) -> Pending {
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
        let (proxy_end, mut master) = tokio::io::duplex(1 << 16);
        let (qtx, mut qrx) = queue::channel(16);
        let info = MasterInfo::new("duplex".into());
        let s = settings(true);
        let (tx, mut rx) = inbox(3);
        // Two plain requests and a timed one, queued before the loops start: one batch.
        qtx.try_send(pending(&[b"GET", b"a"], false, &tx, 0)).ok();
        qtx.try_send(pending(&[b"SET", b"k", b"v", b"NX"], true, &tx, 1))
            .ok();
        qtx.try_send(pending(&[b"GET", b"b"], false, &tx, 2)).ok();
        let mut watch = ClockWatch::new(s.clock.unwrap());
        let driver = async { serve(proxy_end, &mut qrx, &s, &info, Some(&mut watch)).await };
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
    async fn a_master_that_stops_answering_is_failed_after_the_stall_timeout() {
        let (proxy_end, mut master) = tokio::io::duplex(1 << 16);
        let (qtx, mut qrx) = queue::channel(16);
        let info = MasterInfo::new("duplex".into());
        let s = settings(false);
        let (tx, mut rx) = inbox(1);
        qtx.try_send(pending(&[b"GET", b"a"], false, &tx, 0)).ok();
        let started = Instant::now();
        let ended = serve(proxy_end, &mut qrx, &s, &info, None).await;
        assert!(matches!(ended, Ended::Failed(ref why) if why.contains("no reply")));
        assert!(started.elapsed() >= Duration::from_millis(300));
        // The request was written, and its caller hears that the connection is gone.
        assert_eq!(next(&mut rx).await, (0, Err(BackendError::Closed)));
        let got = read_requests(&mut master, command(&[b"GET", b"a"]).len()).await;
        assert_eq!(got, command(&[b"GET", b"a"]).to_vec());
    }

    #[tokio::test]
    async fn a_reply_nobody_asked_for_or_a_garbled_one_ends_the_connection() {
        for wire in [&b"+OK\r\n"[..], b"?what\r\n"] {
            let (proxy_end, mut master) = tokio::io::duplex(1 << 16);
            let (_qtx, mut qrx) = queue::channel::<Pending>(16);
            let info = MasterInfo::new("duplex".into());
            let s = settings(false);
            master.write_all(wire).await.unwrap();
            let ended = serve(proxy_end, &mut qrx, &s, &info, None).await;
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
        let driver = async { serve(proxy_end, &mut qrx, &s, &info, None).await };
        let master_side = async {
            let mut deep = b"*1\r\n".repeat(100_000);
            deep.extend_from_slice(b":1\r\n+PONG\r\n");
            master.write_all(&deep).await.unwrap();
            assert_eq!(
                next(&mut rx).await,
                (0, Ok(Reply::static_error(crate::reply::TOO_DEEP)))
            );
            assert_eq!(next(&mut rx).await, (1, Ok(Reply::simple("PONG"))));
            drop(qtx);
        };
        let (ended, ()) = tokio::join!(driver, master_side);
        assert!(matches!(ended, Ended::Shutdown));
    }
}
