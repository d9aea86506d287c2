//! Sentinel members: a member whose primary the Sentinels name, and which follows it when they
//! fail it over.
//!
//! Before every connect the driver asks the Sentinels, in turn, for the primary
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME name`); the greeting then checks with `ROLE` that the node
//! really is a master (a Sentinel's view may lag). A watcher task per member keeps a
//! subscription to `+switch-master` on one Sentinel (moving to the next when it fails) and, every
//! few seconds and after every reconnect, asks again; when the primary it hears of is not the one
//! the member is connected to, it bumps a generation number that the driver watches: the data
//! connection is dropped (every request in flight on it fails: a vote sent to the old primary
//! does not count once the switch is known) and the driver resolves again.
//!
//! What a new primary means for the member's votes (the failover quarantine) is decided where
//! every greeting is judged, in `handshake::admit`. No Sentinel answering means no primary: the
//! member is down, never served from the last address it knew, since that node may have been
//! replaced meanwhile.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{sleep, timeout};
use tracing::{debug, info, warn};

use super::health::MasterInfo;
use crate::endpoint::Endpoint;
use crate::wire::master::{ReplyDecoder, SMALL_REPLY, ask_once, command, read_reply};
use crate::wire::reply::Reply;

/// A connection to a Sentinel: plain TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
type Wire = Box<dyn Io>;

/// How the Sentinels of one member are reached, and which master they are asked about.
pub struct Sentinels {
    /// The Sentinels, asked in this order.
    sentinels: Vec<Endpoint>,
    /// The master name they monitor.
    pub master: String,
    /// Sent as `AUTH password` to every Sentinel (`backend_sentinel_password`); never printed.
    password: Option<String>,
    /// TLS towards the Sentinels (`rediss-sentinel://`).
    tls: Option<tokio_rustls::TlsConnector>,
    /// The data nodes' certificates are checked against the host the Sentinels name (no
    /// `backend_tls_server_name` was given).
    pub(super) tls_name_follows_host: bool,
    /// The Sentinel asked first; moved on when the node one named could not be served, so a
    /// Sentinel left behind (cut off from the others, still naming a demoted primary) does not
    /// keep the member down.
    first: AtomicUsize,
    /// The primary the Sentinels named last (by an answer or a `+switch-master`), for the side
    /// connections that must follow it too (the pub/sub links); "" before they named one.
    named: watch::Sender<String>,
}

impl fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sentinels")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .finish_non_exhaustive()
    }
}

impl Sentinels {
    /// The Sentinels of a member, with their password and TLS.
    pub fn new(
        sentinels: Vec<Endpoint>,
        master: String,
        password: Option<String>,
        tls: Option<tokio_rustls::TlsConnector>,
        tls_name_follows_host: bool,
    ) -> Sentinels {
        Sentinels {
            sentinels,
            master,
            password,
            tls,
            tls_name_follows_host,
            first: AtomicUsize::new(0),
            named: watch::Sender::new(String::new()),
        }
    }

    /// The primary the Sentinels named last, changing with every answer or `+switch-master`
    /// that names another: a side connection to the member (the pub/sub links) watches it and
    /// reconnects (resolving again) when it no longer names the node it is on.
    pub fn named(&self) -> watch::Receiver<String> {
        self.named.subscribe()
    }

    /// Records `addr` as the primary named last (waking the watchers of [`Sentinels::named`]
    /// only when it changed).
    fn name(&self, addr: &str) {
        self.named.send_if_modified(|last| {
            if last == addr {
                false
            } else {
                addr.clone_into(last);
                true
            }
        });
    }

    /// Asks the next Sentinel first from now on (the node the last answer named could not be
    /// served).
    pub(super) fn rotate(&self) {
        self.first.fetch_add(1, Ordering::Relaxed);
    }

    /// Asks each Sentinel in turn for the primary's `host:port`, each within `within`; the
    /// first answer wins. The error names every Sentinel's failure (no password).
    pub async fn resolve(&self, within: Duration) -> Result<String, String> {
        self.resolve_with_age(within).await.map(|(addr, _)| addr)
    }

    /// [`Sentinels::resolve`], and how long the answering Sentinel has known that node as the
    /// primary (`role-reported-time` of `SENTINEL MASTER`: reset when it switched to it, or when
    /// the Sentinel itself started, so never longer than the node's time as primary); `None`
    /// when the Sentinel does not say.
    pub async fn resolve_with_age(
        &self,
        within: Duration,
    ) -> Result<(String, Option<Duration>), String> {
        let mut why = Vec::new();
        let n = self.sentinels.len();
        let first = self.first.load(Ordering::Relaxed);
        for s in (0..n).map(|i| &self.sentinels[(first + i) % n]) {
            match timeout(within, self.ask_primary(s)).await {
                Ok(Ok(found)) => {
                    self.name(&found.0);
                    return Ok(found);
                }
                Ok(Err(e)) => why.push(format!("{}: {e}", s.addr())),
                Err(_) => why.push(format!("{}: timed out", s.addr())),
            }
        }
        Err(format!(
            "no Sentinel named a primary for '{}' ({})",
            self.master,
            why.join("; ")
        ))
    }

    async fn ask_primary(&self, s: &Endpoint) -> Result<(String, Option<Duration>), String> {
        let mut wire = self.open(s).await?;
        let mut buf = BytesMut::new();
        let mut decoder = ReplyDecoder::default();
        let name = self.master.as_bytes();
        let both = [
            command(&[b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", name]),
            command(&[b"SENTINEL", b"MASTER", name]),
        ]
        .concat();
        wire.write_all(&both).await.map_err(|e| e.to_string())?;
        wire.flush().await.map_err(|e| e.to_string())?;
        let addr = primary_of(&next_reply(&mut wire, &mut buf, &mut decoder).await?)?;
        let age = age_of(&next_reply(&mut wire, &mut buf, &mut decoder).await?);
        Ok((addr, age))
    }

    /// A connection to Sentinel `s`: TCP, TLS when configured, `AUTH` when configured.
    async fn open(&self, s: &Endpoint) -> Result<Wire, String> {
        let stream = TcpStream::connect((s.host.as_str(), s.port))
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut wire: Wire = match &self.tls {
            None => Box::new(stream),
            Some(connector) => {
                let name = crate::tls::server_name(&s.host)?;
                Box::new(
                    connector
                        .connect(name, stream)
                        .await
                        .map_err(|e| format!("TLS handshake failed: {e}"))?,
                )
            }
        };
        if let Some(password) = &self.password {
            let mut buf = BytesMut::new();
            let mut decoder = ReplyDecoder::default();
            let args: [&[u8]; 2] = [b"AUTH", password.as_bytes()];
            let reply = ask(&mut wire, &mut buf, &mut decoder, &args).await?;
            if !reply.is_ok() {
                return Err("Sentinel authentication failed".into());
            }
        }
        Ok(wire)
    }
}

/// Sends one command and reads one reply.
async fn ask(
    wire: &mut Wire,
    buf: &mut BytesMut,
    decoder: &mut ReplyDecoder,
    args: &[&[u8]],
) -> Result<Reply, String> {
    ask_once(wire, buf, decoder, args, SMALL_REPLY).await
}

/// Reads the next reply (or push message).
async fn next_reply(
    wire: &mut Wire,
    buf: &mut BytesMut,
    decoder: &mut ReplyDecoder,
) -> Result<Reply, String> {
    read_reply(wire, buf, decoder, SMALL_REPLY).await
}

/// `host:port` from a `GET-MASTER-ADDR-BY-NAME` reply.
fn primary_of(reply: &Reply) -> Result<String, String> {
    match reply {
        Reply::Array(items) => match items.as_slice() {
            [Reply::Bulk(host), Reply::Bulk(port)] => {
                let host = std::str::from_utf8(host)
                    .ok()
                    .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
                    .ok_or("bad host")?;
                // Decimal digits only, 1 to 65535 (the parser alone would take `+6379`).
                let port: u16 = Some(port.as_ref())
                    .filter(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit))
                    .and_then(|p| std::str::from_utf8(p).ok()?.parse().ok())
                    .filter(|p| *p > 0)
                    .ok_or("bad port")?;
                Ok(join(host, port))
            }
            _ => Err(format!("unexpected reply {}", shown(reply))),
        },
        Reply::Nil => Err("does not know this master name".into()),
        Reply::Error(e) if e.is_empty() => Err("an empty error".into()),
        Reply::Error(_) => Err(shown(reply)),
        other => Err(format!("unexpected reply {}", shown(other))),
    }
}

/// A reply as an error message names it: at most 200 characters of its `Debug` text, since a
/// hostile Sentinel's reply may be a megabyte.
fn shown(reply: &Reply) -> String {
    let text = match reply {
        Reply::Error(e) => String::from_utf8_lossy(&e[..e.len().min(200)]).into_owned(),
        other => format!("{other:?}"),
    };
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

/// `role-reported-time` (ms) from a `SENTINEL MASTER` reply (a flat list of fields and values).
fn age_of(reply: &Reply) -> Option<Duration> {
    let Reply::Array(items) = reply else {
        return None;
    };
    items.chunks(2).find_map(|kv| match kv {
        [Reply::Bulk(k), Reply::Bulk(v)] if k.as_ref() == b"role-reported-time" => {
            std::str::from_utf8(v)
                .ok()?
                .parse::<u64>()
                .ok()
                .map(Duration::from_millis)
        }
        _ => None,
    })
}

/// `host:port`, IPv6 in brackets.
fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The master and new address a `+switch-master` message names: `name old-ip old-port new-ip
/// new-port`.
fn switch_of(payload: &[u8]) -> Option<(&str, String)> {
    let text = std::str::from_utf8(payload).ok()?;
    let parts: Vec<&str> = text.split(' ').collect();
    match parts.as_slice() {
        [name, _, _, ip, port] => Some((name, join(ip, port.parse().ok()?))),
        _ => None,
    }
}

/// Keeps `switched` bumped whenever the Sentinels name a primary other than the one the member
/// is connected to: a `+switch-master` for this master, or (every `every`, and on each
/// subscription) an answer to `GET-MASTER-ADDR-BY-NAME`. Ends when the driver is gone.
pub(super) async fn watch(
    sentinels: Arc<Sentinels>,
    info: Arc<MasterInfo>,
    switched: watch::Sender<u64>,
    every: Duration,
    within: Duration,
) {
    // Bumped whenever the primary named is not the member's: while connected that drops the
    // connection; while connecting, the connection about to be served (perhaps to the node just
    // replaced) is dropped at once and the driver resolves again.
    let bump = |why: &str, to: &str| {
        let primary = info.primary();
        if primary != to {
            info!(
                primary = %primary,
                new_primary = to,
                reason = why,
                "the Sentinels name another primary: reconnecting"
            );
            switched.send_modify(|g| *g += 1);
        }
    };
    let mut next = 0;
    let mut failures = 0u32;
    loop {
        let s = &sentinels.sentinels[next % sentinels.sentinels.len()];
        next += 1;
        let subscribed = async {
            let mut wire = timeout(within, sentinels.open(s))
                .await
                .map_err(|_| "connect timed out".to_string())??;
            let mut buf = BytesMut::new();
            let mut decoder = ReplyDecoder::default();
            let confirm = timeout(
                within,
                ask(
                    &mut wire,
                    &mut buf,
                    &mut decoder,
                    &[b"SUBSCRIBE", b"+switch-master"],
                ),
            )
            .await
            .map_err(|_| "SUBSCRIBE timed out".to_string())??;
            if matches!(confirm, Reply::Error(_)) {
                return Err(format!("SUBSCRIBE refused: {}", shown(&confirm)));
            }
            Ok::<_, String>((wire, buf, decoder))
        };
        let (mut wire, mut buf, mut decoder) = tokio::select! {
            r = subscribed => match r {
                Ok(w) => w,
                Err(e) => {
                    failures += 1;
                    // Once per outage: every Sentinel failed in turn.
                    if failures == sentinels.sentinels.len() as u32 {
                        warn!(sentinel = %s.addr(), error = %e, "no Sentinel reachable: a failover would go unheard until one answers");
                    } else {
                        debug!(sentinel = %s.addr(), error = %e, "Sentinel subscription failed");
                    }
                    tokio::select! {
                        _ = sleep(Duration::from_millis(200)) => continue,
                        _ = switched.closed() => return,
                    }
                }
            },
            _ = switched.closed() => return,
        };
        failures = 0;
        debug!(sentinel = %s.addr(), "subscribed to +switch-master");
        // Anything missed while unsubscribed.
        if let Ok(now) = sentinels.resolve(within).await {
            bump("resolved", &now);
        }
        let mut poll = tokio::time::interval(every);
        poll.tick().await;
        loop {
            tokio::select! {
                r = next_reply(&mut wire, &mut buf, &mut decoder) => match r {
                    Ok(Reply::Array(items)) => {
                        if let [Reply::Bulk(kind), Reply::Bulk(_), Reply::Bulk(payload)] = items.as_slice()
                            && kind.as_ref() == b"message"
                            && let Some((name, to)) = switch_of(payload)
                            && name == sentinels.master
                        {
                            sentinels.name(&to);
                            bump("+switch-master", &to);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        debug!(sentinel = %s.addr(), error = %e, "Sentinel subscription lost");
                        break;
                    }
                },
                _ = poll.tick() => {
                    if let Ok(now) = sentinels.resolve(within).await {
                        bump("resolved", &now);
                    }
                }
                _ = switched.closed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn the_primary_named_last_wakes_its_watchers_only_when_it_changes() {
        let s = Sentinels::new(Vec::new(), "m".into(), None, None, false);
        let mut named = s.named();
        assert_eq!(*named.borrow(), "");
        s.name("10.0.0.1:6379");
        assert!(named.has_changed().unwrap());
        assert_eq!(*named.borrow_and_update(), "10.0.0.1:6379");
        s.name("10.0.0.1:6379");
        assert!(!named.has_changed().unwrap(), "the same primary again");
        s.name("10.0.0.2:6379");
        assert!(named.has_changed().unwrap());
    }

    #[test]
    fn replies_the_sentinels_give() {
        let ok = Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(b"10.0.0.1")),
            Reply::Bulk(Bytes::from_static(b"6380")),
        ]);
        assert_eq!(primary_of(&ok), Ok("10.0.0.1:6380".into()));
        let v6 = Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(b"::1")),
            Reply::Bulk(Bytes::from_static(b"6380")),
        ]);
        assert_eq!(primary_of(&v6), Ok("[::1]:6380".into()));
        assert!(primary_of(&Reply::Nil).is_err());
        assert!(primary_of(&Reply::Array(vec![])).is_err());
        assert_eq!(
            switch_of(b"mymaster 127.0.0.1 6379 127.0.0.1 6380"),
            Some(("mymaster", "127.0.0.1:6380".to_string()))
        );
        assert_eq!(switch_of(b"mymaster 127.0.0.1 6379"), None);
        let b = |t: &'static str| Reply::Bulk(Bytes::from_static(t.as_bytes()));
        let master = Reply::Array(vec![b("name"), b("m"), b("role-reported-time"), b("2040")]);
        assert_eq!(age_of(&master), Some(Duration::from_millis(2040)));
        assert_eq!(age_of(&Reply::Error(Bytes::from_static(b"ERR no"))), None);
        assert_eq!(switch_of(b"m a b c notaport"), None);
    }

    /// Hostile replies to `SENTINEL GET-MASTER-ADDR-BY-NAME`, as bytes on the wire: each is
    /// decoded without a panic or a large allocation, and none names a primary.
    #[test]
    fn garbage_from_a_sentinel_names_no_primary() {
        let mut deep = b"*1\r\n".repeat(10_000);
        deep.extend_from_slice(b":1\r\n");
        let long_error = [b"-".as_slice(), &[b'E'; 100_000], b"\r\n"].concat();
        for wire in [
            &b"*4294967295\r\n"[..],
            b"*9223372036854775807\r\n:1\r\n",
            b"*-9223372036854775808\r\n",
            b"*2\r\n:1\r\n:2\r\n",
            b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\n99999\r\n",
            b"*2\r\n$9\r\n127.0.0.1\r\n$1\r\n0\r\n",
            b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\n+6379\r\n",
            b"*2\r\n$0\r\n\r\n$4\r\n6379\r\n",
            b"*2\r\n$4\r\na b\n\r\n$4\r\n6379\r\n",
            b"*2\r\n$2\r\n\xff\xfe\r\n$4\r\n6379\r\n",
            b"*3\r\n$1\r\nh\r\n$4\r\n6379\r\n$1\r\nx\r\n",
            b"$99999999999\r\n",
            b"$-5\r\n",
            b"*-1\r\n",
            b"\x00\xff\xfe garbage\r\n",
            b"+OK\r\n",
            b"-\r\n",
            &long_error,
            &deep,
        ] {
            let mut buf = BytesMut::from(wire);
            let decoded = ReplyDecoder::default().decode(&mut buf);
            if let Ok(Some(reply)) = decoded {
                let e = primary_of(&reply).expect_err(&format!("{reply:?}"));
                assert!(!e.is_empty() && e.len() < 300, "{e}");
            }
        }
    }
}
