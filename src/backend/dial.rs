//! Side connections to a master (the pub/sub links, a cluster's slot-map reads): TCP, TLS and
//! `AUTH`, and the `ROLE` question. A member's link decides where to dial (`kind::Link::dial`);
//! the data connections are the driver's (`super::handshake`).

use std::time::Duration;

use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::handshake::{Wire, role_of};
use super::target::Credentials;
use crate::tls::TlsTarget;
use crate::wire::master::{ReplyDecoder, SMALL_REPLY, ask_once};

/// A side connection to the master at `addr`: TCP, TLS when configured, and `AUTH` when
/// configured, within `within`. Errors name no password.
pub async fn open(
    addr: &str,
    auth: Option<&Credentials>,
    tls: Option<&TlsTarget>,
    within: Duration,
) -> Result<Wire, String> {
    let open = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut wire: Wire = match tls {
            None => Box::new(stream),
            Some(tls) => Box::new(
                tls.connector
                    .connect(tls.name.clone(), stream)
                    .await
                    .map_err(|e| format!("TLS handshake failed: {e}"))?,
            ),
        };
        if let Some(c) = auth {
            let mut auth: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(u) = &c.user {
                auth.push(u.as_bytes());
            }
            auth.push(c.password.as_bytes());
            let (mut buf, mut decoder) = (BytesMut::new(), ReplyDecoder::default());
            let reply = ask_once(&mut wire, &mut buf, &mut decoder, &auth, SMALL_REPLY)
                .await
                .map_err(|e| format!("AUTH: {e}"))?;
            if !reply.is_ok() {
                return Err("authentication failed".to_string());
            }
        }
        Ok(wire)
    };
    timeout(within, open)
        .await
        .map_err(|_| "connect timed out".to_string())?
}

/// The role the node on `wire` reports (`master`, `slave`, `sentinel`), asked within `within`.
pub async fn role(wire: &mut Wire, within: Duration) -> Result<String, String> {
    let (mut buf, mut decoder) = (BytesMut::new(), ReplyDecoder::default());
    let ask = ask_once(wire, &mut buf, &mut decoder, &[b"ROLE"], SMALL_REPLY);
    let reply = timeout(within, ask)
        .await
        .map_err(|_| "ROLE timed out".to_string())?
        .map_err(|e| format!("ROLE: {e}"))?;
    Ok(role_of(&reply))
}
