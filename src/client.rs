//! One client connection: decode requests, dispatch them, and answer in request order.
//!
//! Pipelined requests are dispatched as soon as they are decoded, so the masters see them
//! together, but replies are written strictly in request order (see `Pipeline`). One task
//! reads, runs and writes, and none of the three waits for another: commands in flight keep
//! being polled while replies wait for the client to read them, so a client that does not read
//! never holds a key's turn (which would stall every other client of that key).
//!
//! Everything is bounded. At most `max_pipeline` commands may be in flight; beyond that the
//! proxy stops reading. A request, and the unparsed input, may not exceed
//! `client_query_buffer_limit`; unread replies may not exceed `client_output_buffer_limit`, and
//! a client that accepts none of them for `client_write_timeout_ms` is disconnected. The
//! commands a disconnected client had in flight still complete (or are undone) on the masters.
//! An idle connection holds no buffer at all: its read and write buffers come from a small
//! per-thread pool while bytes are being read or replies written, and go back to it once empty
//! and waiting (see `BufferPool`), so thousands of idle clients cost under 2 KB
//! each. A buffer that grew for a large request or reply is freed instead of pooled.
//!
//! A malformed request gets Redis's protocol error and the connection closes after the replies
//! before it have been written. A request named `POST` or `Host:` (an HTTP request, sent by a
//! browser tricked into cross-protocol scripting) closes the connection at once, as Redis does.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tracing::{debug, warn};

use crate::command::lease::notice_push;
use crate::command::session::{Conn, Leases, Notice, Pushes};
use crate::command::{self, Action, Later};
use crate::proxy::Proxy;
use crate::pubsub::{ClientSubs, Message};
use crate::quorum::deadline::Watcher;
use crate::wire::reply::Reply;
use crate::wire::request::{Decoder, Limits};

/// The next notice about the connection's leases; pending for ever when it holds none.
fn next_lost(lost: &mut Option<Pushes>) -> impl Future<Output = Option<Notice>> + '_ {
    std::future::poll_fn(move |cx| match lost {
        Some(rx) => rx.poll_recv(cx),
        None => Poll::Pending,
    })
}

/// Closes a connection's leases when it ends, however it ends.
struct Closing(Arc<Leases>);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The next message for a subscribed client; pending for ever when it has no subscriptions.
fn next_message(subs: Option<&Arc<ClientSubs>>) -> impl Future<Output = Message> + '_ {
    std::future::poll_fn(move |cx| match subs {
        Some(s) => match s
            .inbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rx
            .poll_recv(cx)
        {
            Poll::Ready(Some(m)) => Poll::Ready(m),
            _ => Poll::Pending,
        },
        None => Poll::Pending,
    })
}

/// One command in flight: its reply once known, or the computation that yields it.
enum Slot {
    Done(Reply),
    Running(Later),
}

/// A command in flight with the protocol its reply is encoded in (`HELLO 3` switches it for
/// the commands after it).
struct InFlight {
    slot: Slot,
    form: Form,
}

/// How one reply is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Resp2,
    Resp3,
    /// Not at all: the client turned its replies off (`CLIENT REPLY OFF` or `SKIP`). The
    /// command still runs to the end.
    Dropped,
}

impl Form {
    /// Encodes `reply` at the end of `output` (a pooled buffer when it holds none), unless the
    /// reply is dropped.
    fn write(self, reply: &Reply, output: &mut BytesMut) {
        match self {
            Form::Resp2 => reply.encode(BufferPool::ready(output), false),
            Form::Resp3 => reply.encode(BufferPool::ready(output), true),
            Form::Dropped => {}
        }
    }
}

/// Waits for `timer`, made (boxed) at `deadline` on first use: the timer exists only while
/// replies wait for a client that does not read them, so an idle connection carries none.
fn lazy_sleep(
    timer: &mut Option<Pin<Box<Sleep>>>,
    deadline: Instant,
) -> impl Future<Output = ()> + '_ {
    std::future::poll_fn(move |cx| {
        timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)))
            .as_mut()
            .poll(cx)
    })
}

/// Most empty pipelines a thread's pool keeps.
const PIPELINES_MAX: usize = 32;

/// How many commands at the head of a pipeline are run at once. The rest wait in line, so a
/// wake-up polls at most this many; as the head's replies are written, the window moves on.
const WINDOW: usize = 64;

thread_local! {
    static PIPELINES: std::cell::RefCell<Vec<VecDeque<InFlight>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The commands of one connection in flight, answered in request order.
///
/// The commands are kept in request order and polled in place, all with the connection task's
/// waker: whatever a wake-up was for, every running command in the window is polled again
/// (a pending one only looks at its inbox or its key's turn), and the finished ones at the head
/// are taken. Pipelined commands mostly finish together, so one pass serves a whole batch,
/// without a scheduler node per command as a `FuturesOrdered` has. The queue's memory is
/// borrowed from a per-thread pool while commands are in flight and given back when the
/// connection goes idle ([`Pipeline::park`]), so an idle connection holds none.
///
/// The votes it polls do not go to the masters' shared deadline queue: the pipeline watches
/// their deadlines with one timer of its own ([`Watcher`]).
#[derive(Default)]
struct Pipeline {
    queue: VecDeque<InFlight>,
    watcher: Watcher,
}

impl Pipeline {
    fn len(&self) -> usize {
        self.queue.len()
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    fn push_back(&mut self, slot: Slot, form: Form) {
        if self.queue.capacity() == 0 {
            self.queue = PIPELINES.with_borrow_mut(Vec::pop).unwrap_or_default();
        }
        self.queue.push_back(InFlight { slot, form });
    }

    /// Polls every running command in the window with `cx`'s waker, watching the deadlines
    /// of the votes among them.
    fn poll_window(&mut self, cx: &mut Context<'_>) {
        if self.queue.is_empty() {
            return;
        }
        let Pipeline { queue, watcher } = self;
        watcher.poll(cx, |cx| {
            for c in queue.iter_mut().take(WINDOW) {
                if let Slot::Running(later) = &mut c.slot
                    && let Poll::Ready(reply) = later.as_mut().poll(cx)
                {
                    c.slot = Slot::Done(reply);
                }
            }
        });
    }

    /// The head's reply, if it is done.
    fn pop_done(&mut self) -> Option<(Reply, Form)> {
        if !matches!(self.queue.front()?.slot, Slot::Done(_)) {
            return None;
        }
        match self.queue.pop_front() {
            Some(InFlight {
                slot: Slot::Done(reply),
                form,
            }) => Some((reply, form)),
            _ => None,
        }
    }

    /// Polls the window (skipping the first poll when `polled` says the caller has just done
    /// so with this task's waker), then yields the head's reply once it is done; `None` when
    /// nothing is in flight.
    fn next(&mut self, mut polled: bool) -> impl Future<Output = Option<(Reply, Form)>> + '_ {
        std::future::poll_fn(move |cx| {
            if self.queue.is_empty() {
                return Poll::Ready(None);
            }
            if !std::mem::take(&mut polled) {
                self.poll_window(cx);
            }
            match self.pop_done() {
                Some(done) => Poll::Ready(Some(done)),
                None => Poll::Pending,
            }
        })
    }

    /// Gives the queue's memory back to the pool when nothing is in flight.
    fn park(&mut self) {
        if self.is_empty() && self.queue.capacity() > 0 {
            let q = std::mem::take(&mut self.queue);
            PIPELINES.with_borrow_mut(|pool| {
                if pool.len() < PIPELINES_MAX {
                    pool.push(q);
                }
            });
        }
    }
}

/// What a read or write buffer starts with, and shrinks back to when a large request or reply
/// has gone.
const BUFFER_START: usize = 16 * 1024;
/// A buffer this much larger than it needs to be is replaced by a small one.
const BUFFER_SHRINK: usize = 64 * 1024;
/// A read is only attempted with at least this much room; less, and the buffer grows first.
const READ_ROOM: usize = 1024;
/// Most buffers a thread's pool keeps (the rest are freed): `POOL_MAX × BUFFER_START` bytes.
const POOL_MAX: usize = 32;

thread_local! {
    static POOL: std::cell::RefCell<Vec<BytesMut>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The per-thread pool of client buffers.
///
/// A connection borrows a buffer only while it has bytes to hold: for a read attempt, or while
/// replies wait to be written. When the read would block with nothing buffered, or the last
/// reply byte has been written, the buffer goes back. Taking and giving are a `Vec` pop and
/// push, so a busy connection pays no allocation for this. A pooled buffer may still share
/// its memory with requests decoded from it; growing it then allocates afresh (as `BytesMut`
/// always does), and the old memory is freed with the last of those requests.
struct BufferPool;

impl BufferPool {
    /// A buffer with room to read into: a pooled one, or a new one of [`BUFFER_START`] bytes.
    fn take() -> BytesMut {
        let mut buf = POOL
            .with_borrow_mut(Vec::pop)
            .unwrap_or_else(|| BytesMut::with_capacity(BUFFER_START));
        if buf.capacity() < READ_ROOM {
            // Reclaims the whole allocation when nothing else uses it; allocates otherwise.
            buf.reserve(BUFFER_START);
        }
        buf
    }

    /// Gives `buf` back if it is empty, leaving an unallocated buffer in its place. A buffer
    /// that grew for a large request or reply is freed instead.
    fn give(buf: &mut BytesMut) {
        if !buf.is_empty() || buf.capacity() == 0 {
            return;
        }
        let buf = std::mem::take(buf);
        if buf.capacity() <= BUFFER_SHRINK {
            POOL.with_borrow_mut(|pool| {
                if pool.len() < POOL_MAX {
                    pool.push(buf);
                }
            });
        }
    }

    /// `buf`, borrowed from the pool first if it holds no memory (to encode replies into).
    fn ready(buf: &mut BytesMut) -> &mut BytesMut {
        if buf.capacity() == 0 {
            *buf = BufferPool::take();
        }
        buf
    }
}

/// Reads what the client sent into `input`, borrowing a buffer from the pool for the attempt
/// and giving it back if the read would block with nothing buffered.
fn read_pooled<'a, R: AsyncRead + Unpin>(
    rd: &'a mut R,
    input: &'a mut BytesMut,
) -> impl Future<Output = io::Result<usize>> + 'a {
    std::future::poll_fn(move |cx| {
        if input.capacity() - input.len() < READ_ROOM {
            if input.is_empty() {
                *input = BufferPool::take();
            } else {
                // A partial request: grow (amortised doubling for a large one).
                input.reserve(BUFFER_START.max(input.len()));
            }
        }
        let read = {
            let fut = rd.read_buf(input);
            std::pin::pin!(fut).poll(cx)
        };
        if read.is_pending() {
            BufferPool::give(input);
        }
        read
    })
}

/// How the reply of the command that has just run is written: in the protocol now in force
/// (`HELLO 3` answers in RESP3), or not at all under `CLIENT REPLY OFF` or `SKIP`.
fn reply_form(conn: &mut Conn) -> Form {
    if conn.reply_dropped() {
        Form::Dropped
    } else if conn.resp3() {
        Form::Resp3
    } else {
        Form::Resp2
    }
}

/// Counts an error reply by its kind, for `/metrics`.
fn count_error(proxy: &Proxy, reply: &Reply) {
    if let Some(kind) = reply.error_kind() {
        proxy.counters().count_error(kind);
    }
}

/// Serves one client until it disconnects, sends `QUIT`, breaks the protocol, or exceeds a limit.
pub async fn serve(socket: TcpStream, proxy: Arc<Proxy>, id: u64) -> io::Result<()> {
    let peer = Peer(socket.peer_addr().ok());
    let (rd, wr) = socket.into_split();
    serve_io(rd, wr, proxy, id, peer).await
}

/// Serves one client over any byte stream (a TLS session, a test's duplex pipe).
pub async fn serve_stream<S>(
    stream: S,
    proxy: Arc<Proxy>,
    id: u64,
    peer: Option<SocketAddr>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(stream);
    serve_io(rd, wr, proxy, id, Peer(peer)).await
}

/// A client's address in log lines. The connection's tracing span is at debug level (entering
/// a span on every poll of every connection costs more than a whole request's decoding), so
/// the few warnings a connection logs at the default level name the client themselves.
#[derive(Clone, Copy)]
struct Peer(Option<SocketAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(a) => a.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The connection loop over a read half and a write half.
///
/// On shutdown ([`Proxy::shutdown`]) it stops reading, runs the complete requests already read,
/// writes every reply, and returns.
async fn serve_io<R, W>(rd: R, wr: W, proxy: Arc<Proxy>, id: u64, peer: Peer) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Registered once, so waiting for shutdown costs nothing per loop turn.
    let stop = proxy.shutdown().clone().cancelled_owned();
    tokio::pin!(stop);
    let mut client = Client::new(rd, wr, proxy, id, peer);
    loop {
        let turn = match client.take_requests() {
            Ok(()) => client.answer_ready().await,
            Err(end) => Err(end),
        };
        let turn = match turn {
            Ok(()) => client.wait(stop.as_mut()).await,
            Err(end) => Err(end),
        };
        if let Err(end) = turn {
            return client.end(end);
        }
    }
}

/// The limits a client connection keeps to, read once from the configuration.
struct Bounds {
    /// `max_pipeline`.
    max_pipeline: usize,
    /// `client_query_buffer_limit`.
    query_limit: usize,
    /// `client_output_buffer_limit`.
    output_limit: usize,
    /// `client_write_timeout_ms`.
    write_timeout: Duration,
}

/// How a connection ends.
enum End {
    /// As asked (`QUIT`, a protocol error answered, the client gone, shutdown): every reply
    /// has been written.
    Closed,
    /// The proxy hangs up, for the reason given.
    Hangup(Hangup),
    /// The socket failed.
    Broken(io::Error),
}

/// One client connection between turns of its loop ([`serve_io`]): what it has read, what it
/// runs, and what waits to be written.
///
/// The fields are dropped in the order the loop's locals were: the connection's leases close
/// before its socket does.
struct Client<R, W> {
    /// Made only when a write has to wait, and dropped once the replies are all written.
    write_timer: Option<Pin<Box<Sleep>>>,
    /// When the client last accepted reply bytes (or replies started waiting for it). The timer
    /// is re-armed lazily, only when it fires early, so a write costs no timer update.
    progress: Instant,
    /// The connection closes once the commands in flight are answered.
    closing: bool,
    inflight: Pipeline,
    /// Both borrowed from the pool only while they hold bytes.
    output: BytesMut,
    input: BytesMut,
    decoder: Decoder,
    /// The notices about the connection's leases.
    lost: Option<Pushes>,
    /// A connection that may hold leases carries them; they stop when it ends, however it ends.
    leases: Option<Closing>,
    conn: Conn,
    /// Shutdown has begun: nothing more is read.
    stopping: bool,
    /// The client has sent all it will (it half-closed, as `nc -N` does): as on Redis, every
    /// complete request it sent is still run and answered before the connection closes.
    sent_all: bool,
    /// The wait for shutdown is polled once, which registers this task to be woken; after that
    /// a wake-up only needs a look at the token (its future would be polled on every loop turn).
    stop_registered: bool,
    bounds: Bounds,
    peer: Peer,
    proxy: Arc<Proxy>,
    wr: W,
    rd: R,
}

impl<R, W> Client<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    fn new(rd: R, wr: W, proxy: Arc<Proxy>, id: u64, peer: Peer) -> Self {
        let config = proxy.config();
        let mut conn = Conn::new(id, proxy.accounts().required());
        let (leases, lost) = lease_watch(&proxy, &mut conn);
        let decoder = Decoder::new(Limits {
            max_bulk_len: config.max_bulk_len,
            max_request_len: config.client_query_buffer_limit,
            ..Limits::default()
        });
        let bounds = Bounds {
            max_pipeline: config.max_pipeline,
            query_limit: config.client_query_buffer_limit,
            output_limit: config.client_output_buffer_limit,
            write_timeout: Duration::from_millis(config.client_write_timeout_ms),
        };
        Client {
            write_timer: None,
            progress: Instant::now(),
            closing: false,
            inflight: Pipeline::default(),
            output: BytesMut::new(),
            input: BytesMut::new(),
            decoder,
            lost,
            leases,
            conn,
            stopping: false,
            sent_all: false,
            stop_registered: false,
            bounds,
            peer,
            proxy,
            wr,
            rd,
        }
    }

    /// Decodes and dispatches the requests read, while the pipeline has room. Once shutdown
    /// has begun or the client has sent all it will, the last complete request read closes
    /// the connection.
    fn take_requests(&mut self) -> Result<(), End> {
        let exhausted = dispatch_read(
            &self.proxy,
            &mut self.conn,
            &mut self.decoder,
            &mut self.input,
            &mut self.inflight,
            &mut self.closing,
            self.bounds.max_pipeline,
        )
        .map_err(End::Hangup)?;
        if (self.stopping || self.sent_all) && exhausted {
            // Every complete request already read has been dispatched.
            self.closing = true;
        }
        if self.input.len() > self.bounds.query_limit {
            // Complete requests waiting behind a full pipeline count too, as in Redis.
            return Err(End::Hangup(Hangup::QueryBuffer(self.bounds.query_limit)));
        }
        // The read buffer goes back to the pool when a read finds nothing to read.
        shrink(&mut self.input);
        Ok(())
    }

    /// Runs what was dispatched and what woke up, with this task's waker, and writes the
    /// replies that are ready at the head. With nothing left to write, the buffers go back to
    /// their pools, and a closing connection with nothing in flight ends.
    async fn answer_ready(&mut self) -> Result<(), End> {
        let was_idle = self.output.is_empty();
        let inflight = &mut self.inflight;
        std::future::poll_fn(|cx| {
            inflight.poll_window(cx);
            Poll::Ready(())
        })
        .await;
        while let Some((reply, form)) = self.inflight.pop_done() {
            count_error(&self.proxy, &reply);
            form.write(&reply, &mut self.output);
        }
        if !self.output.is_empty() {
            // Written at once: replies nearly always fit the socket's buffer, and this saves a
            // turn of the loop per reply batch. What does not fit waits in `wait`.
            let (wr, output) = (&mut self.wr, &self.output);
            let written =
                std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *wr).poll_write(cx, output)))
                    .await;
            if let Poll::Ready(written) = written {
                took_bytes(written, &mut self.output, &mut self.progress).map_err(End::Broken)?;
            }
        }
        if self.output.len() > self.bounds.output_limit {
            return Err(End::Hangup(Hangup::OutputBuffer(self.bounds.output_limit)));
        }
        if self.output.is_empty() {
            BufferPool::give(&mut self.output);
            self.write_timer = None;
            if self.closing && self.inflight.is_empty() {
                return Err(End::Closed);
            }
            self.inflight.park();
        } else if was_idle {
            self.progress = Instant::now();
        }
        Ok(())
    }

    /// Waits for the first of: the client taking reply bytes, a command in flight finishing
    /// (the window was just polled), a lease notice, a subscribed message, a request, shutdown,
    /// or the client's time to read its replies running out.
    async fn wait<S: Future<Output = ()>>(&mut self, mut stop: Pin<&mut S>) -> Result<(), End> {
        let proxy = &self.proxy;
        let stop_registered = &mut self.stop_registered;
        let reading = !self.closing
            && !self.stopping
            && !self.sent_all
            && self.inflight.len() < self.bounds.max_pipeline;
        let watching = self.leases.as_ref().is_some_and(|l| l.0.watching());
        let write_timeout = self.bounds.write_timeout;
        tokio::select! {
            biased;
            written = self.wr.write(&self.output), if !self.output.is_empty() => {
                took_bytes(written, &mut self.output, &mut self.progress).map_err(End::Broken)?;
            }
            Some((reply, form)) = self.inflight.next(true), if !self.inflight.is_empty() => {
                if self.output.is_empty() {
                    self.progress = Instant::now();
                }
                count_error(&self.proxy, &reply);
                form.write(&reply, &mut self.output);
            }
            Some((channel, message)) = next_lost(&mut self.lost), if watching => {
                if let Some(l) = &self.leases {
                    l.0.notice_read();
                }
                if let Some(push) = lease_notice(&self.conn, channel, message) {
                    if self.output.is_empty() {
                        self.progress = Instant::now();
                    }
                    push.encode(BufferPool::ready(&mut self.output), true);
                }
            }
            m = next_message(self.conn.subs()), if self.conn.subs().is_some() => {
                if self.conn.subs().is_some_and(|s| s.inbox.lock().unwrap_or_else(|p| p.into_inner()).overflowed()) {
                    return Err(End::Hangup(Hangup::SubscriberBehind));
                }
                if self.output.is_empty() {
                    self.progress = Instant::now();
                }
                m.to_reply().encode(BufferPool::ready(&mut self.output), self.conn.resp3());
            }
            n = read_pooled(&mut self.rd, &mut self.input), if reading => {
                if n.map_err(End::Broken)? == 0 {
                    self.sent_all = true;
                    self.conn.client_gone();
                }
            }
            () = std::future::poll_fn(|cx| {
                if std::mem::replace(stop_registered, true) {
                    if proxy.shutdown().is_cancelled() { Poll::Ready(()) } else { Poll::Pending }
                } else {
                    stop.as_mut().poll(cx)
                }
            }), if !self.stopping => self.stopping = true,
            () = lazy_sleep(&mut self.write_timer, self.progress + write_timeout), if !self.output.is_empty() => {
                let deadline = self.progress + write_timeout;
                if Instant::now() >= deadline {
                    return Err(End::Hangup(Hangup::WriteTimeout(write_timeout)));
                }
                if let Some(timer) = self.write_timer.as_mut() {
                    timer.as_mut().reset(deadline);
                }
            }
        }
        Ok(())
    }

    /// Ends the connection: a hang-up is logged as Redis logs it, and the commands in flight
    /// still complete (or are undone) in the background.
    fn end(mut self, end: End) -> io::Result<()> {
        let inflight = std::mem::take(&mut self.inflight);
        let result = match end {
            End::Closed => Ok(()),
            End::Hangup(why) => {
                why.log(self.peer);
                Ok(())
            }
            End::Broken(e) => Err(e),
        };
        finish_in_background(inflight);
        result
    }
}

/// Starts watching the connection's leases, when the proxy gives leases: the connection
/// carries them, they stop when it ends, however it ends, and the notices about them arrive on
/// the receiver.
fn lease_watch(proxy: &Proxy, conn: &mut Conn) -> (Option<Closing>, Option<Pushes>) {
    if !proxy.leases_on() {
        return (None, None);
    }
    let (leases, lost) = Leases::new();
    conn.set_leases(leases.clone(), proxy.lease_patterns(None));
    (Some(Closing(leases)), Some(lost))
}

/// The push a lease's holder hears a notice about its lease as: the channel's message, unless
/// it is subscribed to the channel and hears of it that way, or has logged in since as a user
/// who may not touch the key. RESP3 clients only.
fn lease_notice(conn: &Conn, channel: &'static [u8], message: bytes::Bytes) -> Option<Reply> {
    let subscribed = conn.subs().is_some_and(|s| {
        s.list(crate::pubsub::Kind::Channel)
            .iter()
            .any(|c| c.as_ref() == channel)
    });
    let key = crate::pubsub::notice_key(channel, &message).flatten();
    let may_hear = key.is_some_and(|k| conn.may_touch(|| std::iter::once(k)));
    (conn.resp3() && !subscribed && may_hear).then(|| notice_push(channel, message))
}

/// Decodes and dispatches the requests read, while the pipeline has room; `Ok(true)` when
/// the input holds no further complete request. A request that closes the connection (`QUIT`,
/// a protocol error, answered first) sets `closing`; an HTTP request, or one over the query
/// buffer limit, ends it at once.
#[inline]
fn dispatch_read(
    proxy: &Arc<Proxy>,
    conn: &mut Conn,
    decoder: &mut Decoder,
    input: &mut BytesMut,
    inflight: &mut Pipeline,
    closing: &mut bool,
    max_pipeline: usize,
) -> Result<bool, Hangup> {
    while !*closing && inflight.len() < max_pipeline {
        match decoder.decode(input, conn.logged_in()) {
            Ok(Some(args)) => {
                if command::spec::is_http(&args[0]) {
                    return Err(Hangup::Http);
                }
                conn.next_command();
                let action = command::dispatch(proxy, conn, args);
                let form = reply_form(conn);
                let slot = match action {
                    Action::Reply(r) => Slot::Done(r),
                    Action::Close(r) => {
                        *closing = true;
                        Slot::Done(r)
                    }
                    Action::Later(later) => Slot::Running(later),
                };
                inflight.push_back(slot, form);
            }
            Ok(None) => return Ok(true),
            Err(e) => match e.answer() {
                Some(error) => {
                    *closing = true;
                    let error = Slot::Done(Reply::from(error));
                    inflight.push_back(error, reply_form(conn));
                }
                None => {
                    let limit = proxy.config().client_query_buffer_limit;
                    return Err(Hangup::QueryBuffer(limit));
                }
            },
        }
    }
    Ok(false)
}

/// Why the proxy closes a client's connection on its own.
enum Hangup {
    /// An HTTP request: someone is trying cross-protocol scripting.
    Http,
    /// A request, or the unparsed input, over `client_query_buffer_limit` (the limit).
    QueryBuffer(usize),
    /// Unread replies over `client_output_buffer_limit` (the limit).
    OutputBuffer(usize),
    /// A subscriber whose messages overflowed its inbox.
    SubscriberBehind,
    /// No reply accepted within `client_write_timeout_ms`.
    WriteTimeout(Duration),
}

impl Hangup {
    /// Logs the hang-up as Redis logs it.
    fn log(self, peer: Peer) {
        match self {
            Hangup::Http => warn!(
                client.addr = %peer,
                "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to redlock-proxy. This is likely due to an attacker attempting to use Cross Protocol Scripting in order to compromise your Redis instance. Connection aborted."
            ),
            Hangup::QueryBuffer(limit) => warn!(
                client.addr = %peer,
                limit,
                "closing client that reached max query buffer length"
            ),
            Hangup::OutputBuffer(limit) => warn!(
                client.addr = %peer,
                limit,
                "closing client for overcoming of output buffer limits"
            ),
            Hangup::SubscriberBehind => warn!(
                client.addr = %peer,
                "closing subscriber that fell too far behind its messages"
            ),
            Hangup::WriteTimeout(timeout) => debug!(
                timeout_ms = timeout.as_millis() as u64,
                "client accepted no reply in time; closing"
            ),
        }
    }
}

/// What a write of `output` to the client did: the bytes it took are gone from `output` and
/// count as progress; a write that took nothing is an error, as a closed socket.
fn took_bytes(
    written: io::Result<usize>,
    output: &mut BytesMut,
    progress: &mut Instant,
) -> io::Result<()> {
    match written? {
        0 => Err(io::ErrorKind::WriteZero.into()),
        n => {
            output.advance(n);
            *progress = Instant::now();
            Ok(())
        }
    }
}

/// Gives back a buffer's memory after a large request or reply: an empty (or nearly empty)
/// buffer holding far more than it needs is replaced by a small one. Rare, so cheap.
fn shrink(buf: &mut BytesMut) {
    if buf.capacity() > BUFFER_SHRINK && buf.len() < BUFFER_START {
        let mut small = BytesMut::with_capacity(BUFFER_START);
        small.extend_from_slice(buf);
        *buf = small;
    }
}

/// Lets commands already dispatched finish after their client has gone: nobody reads their
/// replies, but a failed acquisition must still roll back on the masters.
fn finish_in_background(mut inflight: Pipeline) {
    if !inflight.is_empty() {
        // Its deadline timer would wake the connection's task, which is ending: the new task
        // sets its own at its first poll.
        inflight.watcher = Watcher::default();
        tokio::spawn(async move { while inflight.next(false).await.is_some() {} });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_shrink_back_after_a_large_request() {
        let mut buf = BytesMut::with_capacity(BUFFER_START);
        buf.extend_from_slice(&vec![b'x'; 4 * 1024 * 1024]);
        let frame = buf.split_to(4 * 1024 * 1024 - 10);
        shrink(&mut buf);
        assert!(buf.capacity() <= BUFFER_START, "{}", buf.capacity());
        // What was left (the start of the next request) is kept.
        assert_eq!(&buf[..], &[b'x'; 10]);
        drop(frame);
        // A buffer in use for a large request keeps its memory.
        let mut big = BytesMut::with_capacity(1024 * 1024);
        big.extend_from_slice(&[0; 100_000]);
        shrink(&mut big);
        assert_eq!(big.len(), 100_000);
        assert!(big.capacity() >= 1024 * 1024 - 100_000);
    }

    #[tokio::test]
    async fn on_shutdown_pipelined_requests_already_read_are_answered_then_it_closes() {
        let config = crate::config::Config {
            backends: vec!["127.0.0.1:1".into()],
            ..crate::config::Config::default()
        };
        let proxy = crate::bootstrap::proxy_for_tests(config);
        let (mut ours, theirs) = tokio::io::duplex(64 * 1024);
        ours.write_all(b"PING\r\nECHO a\r\nECHO b\r\n")
            .await
            .unwrap();
        let task = tokio::spawn(serve_stream(theirs, proxy.clone(), 1, None));
        tokio::time::sleep(Duration::from_millis(20)).await;
        proxy.shutdown().cancel();
        let mut replies = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), ours.read_to_end(&mut replies))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(replies, b"+PONG\r\n$1\r\na\r\n$1\r\nb\r\n");
        task.await.unwrap().unwrap();
    }
}
