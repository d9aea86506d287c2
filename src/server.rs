//! The accept loops (plaintext and TLS), the client cap, certificate and member reloads on
//! `SIGHUP` (members: [`crate::reload`]), and graceful shutdown; the shared state is
//! [`crate::proxy::Proxy`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, debug_span, error, info, warn};

use crate::quorum::Request;

use crate::bootstrap::Parts;
use crate::command::TABLE;
use crate::config::Config;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::wire::reply::Reply;

/// How long a client connection may be silent before its peer is probed, how often, and how
/// many unanswered probes close it: a holder whose host vanished (power, network) loses its
/// leases within about 30 s instead of holding its locks until `lease_max_ms`.
const KEEPALIVE: (Duration, Duration, u32) = (Duration::from_secs(15), Duration::from_secs(5), 3);

/// Probes an idle client's peer with TCP keepalives (see [`KEEPALIVE`]).
fn watch_peer(socket: &TcpStream) {
    let (idle, every, probes) = KEEPALIVE;
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(every)
        .with_retries(probes);
    if let Err(e) = socket2::SockRef::from(socket).set_tcp_keepalive(&keepalive) {
        debug!(error = %e, "cannot set TCP keepalive on a client connection");
    }
}

/// One client's place under `max_clients`, given back when its task ends, however it ends.
struct Slot(Arc<Proxy>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.client_left();
    }
}

/// Binds the listeners and serves clients until the task is dropped.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&config.listen).await?;
    serve(listener, config).await
}

/// Serves clients on an already bound listener (tests bind port 0 themselves).
pub async fn serve(listener: TcpListener, config: Config) -> anyhow::Result<()> {
    let parts = crate::bootstrap::build(&config)?;
    serve_until(Some(listener), config, parts, std::future::pending()).await
}

/// Serves clients on `listener` (`None` when `listen = ""`) and on `tls_listen` until
/// `shutdown` completes, then shuts down gracefully (see `drain`).
pub async fn serve_until(
    listener: Option<TcpListener>,
    config: Config,
    parts: Parts,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let tls = match (&config.tls_listen, parts.acceptor) {
        (Some(at), Some(acceptor)) => Some((
            TcpListener::bind(at).await?,
            Arc::new(RwLock::new(acceptor)),
        )),
        _ => None,
    };
    let addr = match (&listener, &tls) {
        (Some(l), _) => l.local_addr()?,
        (None, Some((t, _))) => t.local_addr()?,
        (None, None) => anyhow::bail!("no listener: set listen or tls_listen"),
    };
    let source = parts.source;
    let proxy = Proxy::new(config, parts.links, parts.accounts, TABLE.len(), addr);
    announce(&proxy, listener.as_ref(), tls.as_ref().map(|(t, _)| t))?;
    serve_metrics(&proxy).await?;
    let tasks = TaskTracker::new();
    let mut hangup = hangups();
    tokio::pin!(shutdown);
    loop {
        let (socket, peer, secure) = tokio::select! {
            () = &mut shutdown => break,
            Some(()) = next_hangup(&mut hangup) => {
                if let Some((_, acceptor)) = &tls {
                    reload(proxy.config(), acceptor);
                }
                if let Some(path) = &source {
                    crate::reload::members(&proxy, path);
                }
                continue;
            }
            accepted = accept(listener.as_ref()) => match accepted {
                Ok((socket, peer)) => (socket, peer, false),
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            accepted = accept(tls.as_ref().map(|(t, _)| t)) => match accepted {
                Ok((socket, peer)) => (socket, peer, true),
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        let _ = socket.set_nodelay(true);
        if proxy.leases_on() {
            watch_peer(&socket);
        }
        let Some(slot) = Slot::take(&proxy) else {
            if !secure {
                let mut socket = socket;
                let mut refusal = BytesMut::new();
                Reply::from(Error::MaxClients).encode(&mut refusal, false);
                let _ = socket.write_all(&refusal).await;
            }
            continue;
        };
        let id = proxy.next_client_id();
        let acceptor = tls.as_ref().map(|(_, a)| current(a)).filter(|_| secure);
        spawn_client(&tasks, socket, peer, acceptor, slot, proxy.clone(), id);
    }
    drop(listener);
    drop(tls);
    tasks.close();
    drain(&proxy, &tasks).await;
    Ok(())
}

/// Logs where the proxy listens and which masters it serves.
fn announce(
    proxy: &Proxy,
    listener: Option<&TcpListener>,
    tls: Option<&TcpListener>,
) -> std::io::Result<()> {
    let snapshot = proxy.masters();
    let masters: Vec<&str> = snapshot.iter().map(|m| m.info().addr.as_str()).collect();
    match listener {
        Some(l) => {
            info!(listen = %l.local_addr()?, masters = ?masters, quorum = proxy.quorum(), "redlock-proxy listening")
        }
        None => {
            info!(listen = "off", masters = ?masters, quorum = proxy.quorum(), "redlock-proxy listening (TLS only)")
        }
    }
    if let Some(t) = tls {
        info!(tls_listen = %t.local_addr()?, mutual_tls = proxy.config().tls_ca_cert_file.is_some(), "listening for TLS clients");
    }
    Ok(())
}

/// Starts the `/metrics` listener, when `metrics_listen` is set.
async fn serve_metrics(proxy: &Arc<Proxy>) -> std::io::Result<()> {
    if let Some(at) = &proxy.config().metrics_listen {
        let metrics = TcpListener::bind(at).await?;
        info!(metrics = %metrics.local_addr()?, "serving Prometheus metrics at /metrics");
        tokio::spawn(crate::metrics::serve(metrics, proxy.clone()));
    }
    Ok(())
}

/// Serves client `id` in its own task, over TLS when `acceptor` is given; `slot` is its place
/// under `max_clients`.
fn spawn_client(
    tasks: &TaskTracker,
    socket: TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    slot: Slot,
    proxy: Arc<Proxy>,
    id: u64,
) {
    let secure = acceptor.is_some();
    // A panic in a client task ends that client only: tokio contains it (the release
    // profile keeps unwinding), and the slot is given back as it unwinds.
    // At debug level: entered on every poll, an enabled span costs more than decoding a
    // request; the connection's own warnings name the client instead (see client.rs).
    let span = debug_span!("client", client.addr = %peer, client.tls = secure);
    match acceptor {
        // The task of a plain connection holds only its session: thousands of idle clients
        // cost little.
        None => tasks.spawn(
            async move {
                let _slot = slot;
                if let Err(e) = crate::client::serve(socket, proxy, id).await {
                    debug!(error = %e, "client connection ended");
                }
            }
            .instrument(span),
        ),
        // A TLS session is over a kilobyte more; boxed, so it weighs on its own task only.
        Some(acceptor) => tasks.spawn(
            Box::pin(async move {
                let _slot = slot;
                let handshake = tokio::time::timeout(
                    Duration::from_millis(proxy.config().connect_timeout_ms.max(1000)),
                    acceptor.accept(socket),
                );
                let served = match handshake.await {
                    Ok(Ok(stream)) => {
                        crate::client::serve_stream(stream, proxy, id, Some(peer)).await
                    }
                    Ok(Err(e)) => {
                        info!(client.addr = %peer, error = %e, "TLS client refused");
                        return;
                    }
                    Err(_) => {
                        debug!("TLS handshake timed out");
                        return;
                    }
                };
                if let Err(e) = served {
                    debug!(error = %e, "client connection ended");
                }
            })
            .instrument(span),
        ),
    };
}

/// Graceful shutdown, after the listeners are closed: every client answers the requests it
/// has read and closes; then operations still running on their own (acquisitions whose client
/// left, roll-backs waiting for late answers) finish and free their keys; then a `PING` sent
/// behind everything queued to each master that is up shows that those writes have been
/// answered. All of it within `shutdown_timeout_ms`.
async fn drain(proxy: &Arc<Proxy>, tasks: &TaskTracker) {
    let timeout = Duration::from_millis(proxy.config().shutdown_timeout_ms);
    let deadline = Instant::now() + timeout;
    info!(
        clients = proxy.clients(),
        timeout_ms = timeout.as_millis() as u64,
        "shutting down: no new clients; finishing requests in flight"
    );
    proxy.shutdown().cancel();
    let finished = async {
        tasks.wait().await;
        while proxy.keylocks().busy() > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let ping = Request::Same(crate::wire::master::command(&[b"PING"]));
        crate::quorum::ask(&proxy.masters(), ping, 1, deadline)
            .finish()
            .await;
    };
    match tokio::time::timeout_at(deadline, finished).await {
        Ok(()) => info!("shut down cleanly"),
        Err(_) => warn!(
            clients = proxy.clients(),
            keys_in_flight = proxy.keylocks().busy(),
            "shutdown_timeout_ms reached with work unfinished; exiting anyway"
        ),
    }
}

impl Slot {
    /// Takes a place under `max_clients`, or `None` when every place is taken.
    fn take(proxy: &Arc<Proxy>) -> Option<Slot> {
        proxy.admit_client().then(|| Slot(proxy.clone()))
    }
}

/// Accepts on `listener`, or waits for ever when there is none.
async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

async fn accept_failed(e: std::io::Error) {
    // Running out of file descriptors must not end the server.
    warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// `SIGHUP`s, where the platform has them.
fn hangups() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGHUP; certificates and members will not be reloaded");
            None
        }
    }
}

async fn next_hangup(s: &mut Option<Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// The acceptor in force now.
fn current(acceptor: &RwLock<TlsAcceptor>) -> TlsAcceptor {
    acceptor.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Re-reads the listener's certificate, key and client CA. Connections already open keep the
/// session they have; new ones get the new files. A bad file keeps the old ones in force.
fn reload(config: &Config, acceptor: &RwLock<TlsAcceptor>) {
    match crate::tls::acceptor(config) {
        Ok(fresh) => {
            *acceptor.write().unwrap_or_else(|p| p.into_inner()) = fresh;
            info!("SIGHUP: TLS certificate files reloaded");
        }
        Err(e) => {
            error!(error = %e, "SIGHUP: TLS certificate files not reloaded; the old ones stay in force")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_client_task_gives_its_slot_back() {
        let config = Config {
            backends: vec!["127.0.0.1:1".into()],
            ..Config::default()
        };
        let proxy = crate::bootstrap::proxy_for_tests(config);
        let slot = Slot::take(&proxy).unwrap();
        assert_eq!(proxy.clients(), 1);
        let task = tokio::spawn(async move {
            let _slot = slot;
            panic!("a bug in one client's task");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(proxy.clients(), 0);
    }
}
