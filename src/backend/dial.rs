//! Side connections to a member's master (the pub/sub links, a cluster's slot-map reads):
//! TCP, TLS and `AUTH` as the member's link says, resolved through its Sentinels for a
//! member that follows its primary. The data connections are the driver's (`super::handshake`).

use std::time::Duration;

use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::handshake::{Wire, role_of};
use super::kind::Link;
use crate::wire::master::{ReplyDecoder, SMALL_REPLY, ask_once};

/// A side connection to a master (the pub/sub links): TCP, TLS when configured, and `AUTH`
/// when configured, within `within`. Errors name no password.
pub async fn dial(link: &Link, within: Duration) -> Result<Wire, String> {
    dial_to(link, within).await.map(|(wire, _)| wire)
}

/// [`dial`], and the address connected to (for a Sentinel member, the primary its Sentinels
/// named).
async fn dial_to(link: &Link, within: Duration) -> Result<(Wire, String), String> {
    let addr = match link.kind.follows() {
        None => link.addr.clone(),
        Some(s) => s.resolve(within).await?,
    };
    let open = async {
        let stream = TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut wire: Wire = match &link.tls {
            None => Box::new(stream),
            Some(tls) => Box::new(
                tls.connector
                    .connect(tls.name.clone(), stream)
                    .await
                    .map_err(|e| format!("TLS handshake failed: {e}"))?,
            ),
        };
        if let Some(c) = &link.auth {
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
    let wire = timeout(within, open)
        .await
        .map_err(|_| "connect timed out".to_string())??;
    Ok((wire, addr))
}

/// [`dial_to`] for a subscriber link, which must be on a primary: a replica hears what is
/// published on its primary only through replication, late, and not at all while its link to
/// the primary is down (a demoted primary not yet attached to the new one hears nothing). So
/// the node is asked `ROLE`, as a data connection's greeting asks it, and one that is not a
/// primary is refused (for a Sentinel member, the next attempt asks another Sentinel first).
/// A Redis Cluster member's link is exempt: a cluster sends every `PUBLISH` to every node.
pub async fn dial_primary(link: &Link, within: Duration) -> Result<(Wire, String), String> {
    let (mut wire, addr) = dial_to(link, within).await?;
    if !link.kind.link_needs_primary() {
        return Ok((wire, addr));
    }
    let (mut buf, mut decoder) = (BytesMut::new(), ReplyDecoder::default());
    let ask = ask_once(&mut wire, &mut buf, &mut decoder, &[b"ROLE"], SMALL_REPLY);
    let reply = timeout(within, ask)
        .await
        .map_err(|_| "ROLE timed out".to_string())?
        .map_err(|e| format!("ROLE: {e}"))?;
    let role = role_of(&reply);
    if role == "master" {
        return Ok((wire, addr));
    }
    if let Some(s) = link.kind.follows() {
        s.rotate();
    }
    Err(format!(
        "{addr} reports role '{role}', not master: a subscriber there would not hear what is \
         published on the primary"
    ))
}
