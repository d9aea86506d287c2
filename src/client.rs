//! One client connection: decode requests, dispatch them, and answer in request order.
//!
//! Pipelined requests are dispatched as soon as they are decoded, so the masters see them
//! together, but replies are written strictly in request order (a `FuturesOrdered`). At most
//! `max_pipeline` commands may be in flight; beyond that the proxy stops reading, which bounds
//! the memory one client can use. A malformed request gets Redis's protocol error and the
//! connection closes after the replies before it have been written.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::future::{Either, FutureExt, Ready, ready};
use futures_util::stream::{FuturesOrdered, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::command::{self, Action, Later};
use crate::reply::Reply;
use crate::request::{self, Limits};
use crate::server::Proxy;

/// Per-connection state that commands may read and change.
#[derive(Debug, Clone)]
pub struct Conn {
    /// Client id, as `CLIENT ID` reports it.
    pub id: u64,
    /// Replies are RESP3 after `HELLO 3`.
    pub resp3: bool,
    /// Name set by `CLIENT SETNAME` or `HELLO ... SETNAME`.
    pub name: Option<Bytes>,
    /// False until `AUTH` succeeds, when a password is configured.
    pub authed: bool,
    /// The commands queued since `MULTI`; `None` outside a transaction.
    pub multi: Option<Vec<Vec<Bytes>>>,
    /// A command queued since `MULTI` was refused, so `EXEC` must abort.
    pub multi_failed: bool,
    /// The keys under `WATCH`, with what the majority held when each was watched.
    pub watched: Vec<crate::command::transaction::Watched>,
}

impl Conn {
    /// A new connection's state.
    pub fn new(id: u64, needs_auth: bool) -> Conn {
        Conn {
            id,
            resp3: false,
            name: None,
            authed: !needs_auth,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
        }
    }
}

type InFlight = Either<Ready<(Reply, bool)>, Tagged>;

/// A reply still being computed, with the protocol to encode it in.
struct Tagged {
    later: Later,
    resp3: bool,
}

impl Future for Tagged {
    type Output = (Reply, bool);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(Reply, bool)> {
        let resp3 = self.resp3;
        self.later.as_mut().poll(cx).map(|r| (r, resp3))
    }
}

/// Serves one client until it disconnects, sends `QUIT`, or breaks the protocol.
pub async fn serve(socket: TcpStream, proxy: Arc<Proxy>, id: u64) -> io::Result<()> {
    let (mut rd, mut wr) = socket.into_split();
    let mut conn = Conn::new(id, proxy.config.password.is_some());
    let limits = Limits {
        max_bulk_len: proxy.config.max_bulk_len,
        ..Limits::default()
    };
    let max_pipeline = proxy.config.max_pipeline;
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::with_capacity(16 * 1024);
    let mut inflight: FuturesOrdered<InFlight> = FuturesOrdered::new();
    let mut closing = false;
    loop {
        while !closing && inflight.len() < max_pipeline {
            match request::decode(&mut input, &limits) {
                Ok(Some(args)) => {
                    let action = command::dispatch(&proxy, &mut conn, args);
                    // The protocol in force after the command (HELLO 3 answers in RESP3).
                    let resp3 = conn.resp3;
                    inflight.push_back(match action {
                        Action::Reply(r) => Either::Left(ready((r, resp3))),
                        Action::Close(r) => {
                            closing = true;
                            Either::Left(ready((r, resp3)))
                        }
                        Action::Later(later) => Either::Right(Tagged { later, resp3 }),
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    closing = true;
                    inflight.push_back(Either::Left(ready((
                        Reply::error(e.to_string()),
                        conn.resp3,
                    ))));
                }
            }
        }
        while let Some(Some((reply, resp3))) = inflight.next().now_or_never() {
            reply.encode(&mut output, resp3);
        }
        if !output.is_empty() {
            if let Err(e) = wr.write_all(&output).await {
                finish_in_background(inflight);
                return Err(e);
            }
            output.clear();
        }
        if closing && inflight.is_empty() {
            return Ok(());
        }
        tokio::select! {
            n = rd.read_buf(&mut input), if !closing && inflight.len() < max_pipeline => {
                match n {
                    Ok(0) => {
                        finish_in_background(inflight);
                        return Ok(());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        finish_in_background(inflight);
                        return Err(e);
                    }
                }
            }
            Some((reply, resp3)) = inflight.next(), if !inflight.is_empty() => {
                reply.encode(&mut output, resp3);
            }
        }
    }
}

/// Lets commands already dispatched finish after their client has gone: nobody reads their
/// replies, but a failed acquisition must still roll back on the masters.
fn finish_in_background(mut inflight: FuturesOrdered<InFlight>) {
    if !inflight.is_empty() {
        tokio::spawn(async move { while inflight.next().await.is_some() {} });
    }
}
