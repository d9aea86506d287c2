//! The accept loop and the client cap; the shared state is [`crate::proxy::Proxy`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::config::Config;
use crate::proxy::Proxy;

/// One client's place under `max_clients`, given back when its task ends, however it ends.
struct Slot(Arc<Proxy>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Binds the listener and serves clients until the task is dropped.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&config.listen).await?;
    serve(listener, config).await
}

/// Serves clients on an already bound listener (tests bind port 0 themselves).
pub async fn serve(listener: TcpListener, config: Config) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let proxy = Proxy::new(config, addr)?;
    let masters: Vec<&str> = proxy
        .masters
        .iter()
        .map(|m| m.info().addr.as_str())
        .collect();
    info!(listen = %addr, masters = ?masters, quorum = proxy.quorum(), "redlock-proxy listening");
    if let Some(at) = &proxy.config.metrics_listen {
        let metrics = TcpListener::bind(at).await?;
        info!(metrics = %metrics.local_addr()?, "serving Prometheus metrics at /metrics");
        tokio::spawn(crate::metrics::serve(metrics, proxy.clone()));
    }
    loop {
        let (mut socket, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                // Running out of file descriptors must not end the server.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        if proxy.clients.fetch_add(1, Ordering::AcqRel) >= proxy.config.max_clients {
            proxy.clients.fetch_sub(1, Ordering::AcqRel);
            let _ = socket
                .write_all(b"-ERR max number of clients reached\r\n")
                .await;
            continue;
        }
        let id = proxy.next_client_id.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(proxy.clone());
        let proxy = proxy.clone();
        // A panic in a client task ends that client only: tokio contains it (the release
        // profile keeps unwinding), and the slot is given back as it unwinds.
        tokio::spawn(
            async move {
                let _slot = slot;
                if let Err(e) = crate::client::serve(socket, proxy, id).await {
                    debug!(error = %e, "client connection ended");
                }
            }
            .instrument(info_span!("client", client.addr = %peer)),
        );
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
        let proxy = Proxy::new(config, "127.0.0.1:0".parse().unwrap()).unwrap();
        proxy.clients.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(proxy.clone());
        let task = tokio::spawn(async move {
            let _slot = slot;
            panic!("a bug in one client's task");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(proxy.clients(), 0);
    }
}
