//! Sentinel members: a member whose primary the Sentinels name, and which follows it when they
//! fail it over.
//!
//! With `sentinel_majority` (the default) the primary is the node that a majority of the
//! *configured* Sentinels name: all of them are asked at once (`SENTINEL MASTER name`: the
//! address, its `config-epoch`, `role-reported-time` and `down-after-milliseconds`), only the
//! answers at the newest config epoch any of them reports are counted, and a node needs
//! `⌊S/2⌋ + 1` of the `S` listed (never of those that answered). Such a majority *confirms* the
//! primary for a bound ([`Majority::bound`], derived from `max_ttl_ms`, `drift_factor` and
//! `down-after-milliseconds`): the member's votes count only until the confirmation, measured
//! from when the question was sent, is that old. A probe loop ([`confirm`]) asks again well
//! inside the bound, so a healthy member never lapses; without a confirming majority the member
//! is down, sent nothing, and `INFO` says why. docs/design.md ("Following a majority of the
//! Sentinels") has the argument. With `sentinel_majority = false` (a negative control) the
//! Sentinels are asked in turn and the first answer wins (`SENTINEL GET-MASTER-ADDR-BY-NAME`),
//! with no bound.
//!
//! Either way the greeting then checks with `ROLE` that the node really is a master (a
//! Sentinel's view may lag). A watcher task per member keeps a subscription to `+switch-master`
//! on one Sentinel (moving to the next when it fails) and, every few seconds and after every
//! reconnect, asks again; when the primary it hears of is not the one the member is connected
//! to, it bumps a generation number that the driver watches: the data connection is dropped
//! (every request in flight on it fails: a vote sent to the old primary does not count once the
//! switch is known) and the driver resolves again. With the majority rule a `+switch-master`
//! from one Sentinel is only a reason to ask them all again at once.
//!
//! What a new primary means for the member's votes (the failover quarantine) is decided where
//! every greeting is judged, in `handshake::admit`. No Sentinel answering means no primary: the
//! member is down, never served from the last address it knew, since that node may have been
//! replaced meanwhile.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep, timeout};
use tracing::{debug, info, warn};

use super::health::{MasterInfo, unconfirmed_reason};
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
    /// With the majority rule only a confirming majority names it.
    named: watch::Sender<String>,
    /// `sentinel_majority`: the rule's parameters; `None` takes the first answer.
    majority: Option<Majority>,
    /// Set once the Sentinels' disagreement on `down-after-milliseconds` has been logged.
    warned_down_after: AtomicBool,
}

/// The majority rule's parameters (`sentinel_majority = true`), from the proxy's configuration.
#[derive(Debug, Clone, Copy)]
pub struct Majority {
    /// `max_ttl_ms`: the longest lock any proxy grants.
    pub max_ttl: Duration,
    /// `drift_factor`: how far clocks may run apart, as a fraction of a duration.
    pub drift_factor: f64,
}

impl Majority {
    /// How long a majority's confirmation lets the member's votes count, and how much the
    /// failover quarantine of a primary confirmed this way is lengthened, given the
    /// Sentinels' `down-after-milliseconds` (`None` when they do not say: `max_ttl` stands
    /// in). With `base = min(down_after, max_ttl)`:
    /// `bound = base × (1 − 2 × drift_factor) − 2 ms` and `extra = base`, so that
    /// `extra ≥ bound × (1 + drift_factor)` (docs/design.md, "Following a majority of the
    /// Sentinels").
    pub fn bound(&self, down_after: Option<Duration>) -> (Duration, Duration) {
        self.bound_and_extra(down_after, down_after)
    }

    /// [`Majority::bound`], the bound from `down_after` and the extra quarantine from
    /// `down_after_max` (the largest any Sentinel reports: another proxy's bound may come from
    /// Sentinels this one did not count).
    fn bound_and_extra(
        &self,
        down_after: Option<Duration>,
        down_after_max: Option<Duration>,
    ) -> (Duration, Duration) {
        let cap = |d: Option<Duration>| d.map_or(self.max_ttl, |d| d.min(self.max_ttl));
        let (base, extra) = (cap(down_after), cap(down_after_max).max(cap(down_after)));
        let factor = (1.0 - 2.0 * self.drift_factor).clamp(0.0, 1.0);
        let bound = Duration::from_secs_f64(base.as_secs_f64() * factor)
            .saturating_sub(Duration::from_millis(2));
        (bound, extra)
    }
}

/// The primary the Sentinels named.
#[derive(Debug)]
pub struct Named {
    /// `host:port`.
    pub addr: String,
    /// How long the Sentinels have known it as the primary (`role-reported-time`; with the
    /// majority rule the youngest of the confirming Sentinels'), `None` when they do not say.
    pub age: Option<Duration>,
    /// With the majority rule: the confirmation.
    pub confirmed: Option<Confirmed>,
}

/// A majority's confirmation of a primary.
#[derive(Debug, Clone, Copy)]
pub struct Confirmed {
    /// The member's votes count until then (the questions were sent at `until − bound`).
    pub until: Instant,
    /// How long a confirmation lasts ([`Majority::bound`]).
    pub bound: Duration,
    /// Added to the failover quarantine of a primary confirmed this way.
    pub extra: Duration,
    /// Sentinels that named the primary at the newest config epoch.
    pub votes: usize,
    /// Sentinels configured.
    pub of: usize,
    /// That epoch (`config-epoch`): the same node at another epoch has been replaced and
    /// promoted again meanwhile (a failover and a failback), so it is a new primary too.
    pub epoch: u64,
}

/// No primary: why, and (with the majority rule) how many of the configured Sentinels agreed.
#[derive(Debug)]
pub struct Unnamed {
    /// For the log and `last_error`.
    pub why: String,
    /// `(votes, of)`: the most Sentinels naming one node at the newest epoch, and how many are
    /// configured.
    pub tally: Option<(usize, usize)>,
}

/// One Sentinel's view of the master, from `SENTINEL MASTER name`.
#[derive(Debug, Clone, PartialEq)]
struct View {
    /// The Sentinel answering (`host:port`).
    from: String,
    /// The primary it names, `host:port`.
    addr: String,
    /// `config-epoch`: the epoch of the failover that made this configuration (0 before any).
    epoch: u64,
    /// `role-reported-time`.
    age: Option<Duration>,
    /// `down-after-milliseconds`.
    down_after: Option<Duration>,
}

/// What one round of answers says.
#[derive(Debug, PartialEq)]
struct Tally {
    /// The primary, when a majority confirms it.
    addr: Option<String>,
    /// The most Sentinels naming one node at the newest epoch.
    votes: usize,
    /// Sentinels configured.
    of: usize,
    /// The newest `config-epoch` reported.
    epoch: u64,
    /// The youngest `role-reported-time` of the confirming Sentinels (0 when one does not say).
    age: Option<Duration>,
    /// The smallest `down-after-milliseconds` of the confirming Sentinels (the bound is
    /// derived from it).
    down_after: Option<Duration>,
    /// The largest `down-after-milliseconds` any Sentinel that answered reports (the extra
    /// quarantine is derived from it; the two differ only when the Sentinels disagree).
    down_after_max: Option<Duration>,
}

/// The majority rule over the views of the Sentinels that answered, `of` being how many are
/// configured. Only the views at the newest `config-epoch` reported count: a Sentinel that
/// names a node at an older epoch has not yet heard of a failover another has seen, and is
/// outvoted, never counted for the node it names (nor is anyone while the newest epoch has no
/// majority). A node is confirmed when `⌊of/2⌋ + 1` name it at that epoch.
fn tally(views: &[View], of: usize) -> Tally {
    let newest = views.iter().map(|v| v.epoch).max().unwrap_or(0);
    let current: Vec<&View> = views.iter().filter(|v| v.epoch == newest).collect();
    let (addr, votes) = current
        .iter()
        .map(|v| {
            let n = current.iter().filter(|w| w.addr == v.addr).count();
            (v.addr.as_str(), n)
        })
        .max_by_key(|(_, n)| *n)
        .unwrap_or(("", 0));
    let agree: Vec<&&View> = current.iter().filter(|v| v.addr == addr).collect();
    // ⌊of/2⌋ + 1 of the configured.
    let confirmed = votes > of / 2;
    Tally {
        addr: confirmed.then(|| addr.to_string()),
        votes,
        of,
        epoch: newest,
        age: confirmed.then(|| {
            agree
                .iter()
                .map(|v| v.age.unwrap_or_default())
                .min()
                .unwrap_or_default()
        }),
        down_after: agree.iter().filter_map(|v| v.down_after).min(),
        down_after_max: views.iter().filter_map(|v| v.down_after).max(),
    }
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
            majority: None,
            warned_down_after: AtomicBool::new(false),
        }
    }

    /// The same Sentinels under the majority rule (`sentinel_majority`).
    pub fn with_majority(self, rule: Majority) -> Sentinels {
        Sentinels {
            majority: Some(rule),
            ..self
        }
    }

    /// The majority rule, when it is in force.
    pub fn majority(&self) -> Option<Majority> {
        self.majority
    }

    /// How many Sentinels are configured.
    pub fn count(&self) -> usize {
        self.sentinels.len()
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

    /// The primary's `host:port`, each Sentinel asked within `within`: the node a majority of
    /// them confirms (`sentinel_majority`), or the first answer. The error names every
    /// Sentinel's failure (no password).
    pub async fn resolve(&self, within: Duration) -> Result<String, String> {
        self.resolve_named(within)
            .await
            .map(|named| named.addr)
            .map_err(|u| u.why)
    }

    /// The primary, how long the Sentinels have known it as the primary, and (with the
    /// majority rule) the confirmation: see [`Named`].
    pub async fn resolve_named(&self, within: Duration) -> Result<Named, Unnamed> {
        match self.majority {
            Some(rule) => self.resolve_by_majority(rule, within).await,
            None => self.resolve_first(within).await,
        }
    }

    /// Today's rule without `sentinel_majority`: each Sentinel in turn, the first answer wins.
    async fn resolve_first(&self, within: Duration) -> Result<Named, Unnamed> {
        let mut why = Vec::new();
        let n = self.sentinels.len();
        let first = self.first.load(Ordering::Relaxed);
        for s in (0..n).map(|i| &self.sentinels[(first + i) % n]) {
            match timeout(within, self.ask_primary(s)).await {
                Ok(Ok((addr, age))) => {
                    self.name(&addr);
                    return Ok(Named {
                        addr,
                        age,
                        confirmed: None,
                    });
                }
                Ok(Err(e)) => why.push(format!("{}: {e}", s.addr())),
                Err(_) => why.push(format!("{}: timed out", s.addr())),
            }
        }
        Err(Unnamed {
            why: format!(
                "no Sentinel named a primary for '{}' ({})",
                self.master,
                why.join("; ")
            ),
            tally: None,
        })
    }

    /// The majority rule: every Sentinel at once, `SENTINEL MASTER name`, counted by
    /// [`tally`]; the confirmation runs from when the questions were sent.
    async fn resolve_by_majority(
        &self,
        rule: Majority,
        within: Duration,
    ) -> Result<Named, Unnamed> {
        let sent = Instant::now();
        let asks = self.sentinels.iter().map(|s| async move {
            match timeout(within, self.ask_master(s)).await {
                Ok(Ok(view)) => Ok(view),
                Ok(Err(e)) => Err(format!("{}: {e}", s.addr())),
                Err(_) => Err(format!("{}: timed out", s.addr())),
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let (views, errors): (Vec<_>, Vec<_>) = answers.into_iter().partition(Result::is_ok);
        let views: Vec<View> = views.into_iter().filter_map(Result::ok).collect();
        let errors: Vec<String> = errors.into_iter().filter_map(Result::err).collect();
        let t = tally(&views, self.sentinels.len());
        let counted = (t.votes, t.of);
        match t.addr {
            Some(addr) => {
                self.name(&addr);
                if t.down_after != t.down_after_max
                    && !self.warned_down_after.swap(true, Ordering::Relaxed)
                {
                    warn!(
                        smallest_ms = t.down_after.map_or(0, |d| d.as_millis() as u64),
                        largest_ms = t.down_after_max.map_or(0, |d| d.as_millis() as u64),
                        "the Sentinels disagree on down-after-milliseconds: the confirmation \
                         bound uses the smallest, the failover quarantine's extra the largest \
                         (give every Sentinel the same value)"
                    );
                }
                let (bound, extra) = rule.bound_and_extra(t.down_after, t.down_after_max);
                Ok(Named {
                    addr,
                    age: t.age,
                    confirmed: Some(Confirmed {
                        until: sent + bound,
                        bound,
                        extra,
                        votes: t.votes,
                        of: t.of,
                        epoch: t.epoch,
                    }),
                })
            }
            None => {
                let mut detail: Vec<String> = views
                    .iter()
                    .map(|v| format!("{} names {} at epoch {}", v.from, v.addr, v.epoch))
                    .collect();
                detail.extend(errors);
                Err(Unnamed {
                    why: format!(
                        "{} for '{}' ({})",
                        unconfirmed_reason(t.votes, t.of),
                        self.master,
                        detail.join("; ")
                    ),
                    tally: Some(counted),
                })
            }
        }
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

    /// One Sentinel's view of the master (`SENTINEL MASTER name`).
    async fn ask_master(&self, s: &Endpoint) -> Result<View, String> {
        let mut wire = self.open(s).await?;
        let mut buf = BytesMut::new();
        let mut decoder = ReplyDecoder::default();
        let args: [&[u8]; 3] = [b"SENTINEL", b"MASTER", self.master.as_bytes()];
        let reply = ask(&mut wire, &mut buf, &mut decoder, &args).await?;
        view_of(&reply, s.addr())
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

/// A Sentinel's view from its `SENTINEL MASTER` reply (a flat list of fields and values): `ip`,
/// `port` and `config-epoch` are needed; `role-reported-time` and `down-after-milliseconds`
/// are read when present.
fn view_of(reply: &Reply, from: String) -> Result<View, String> {
    let Reply::Array(items) = reply else {
        return Err(match reply {
            Reply::Error(e) if e.is_empty() => "an empty error".into(),
            Reply::Error(_) => shown(reply),
            other => format!("unexpected reply {}", shown(other)),
        });
    };
    let field = |name: &[u8]| {
        items.chunks(2).find_map(|kv| match kv {
            [Reply::Bulk(k), Reply::Bulk(v)] if k.as_ref() == name => Some(v.clone()),
            _ => None,
        })
    };
    let number = |name: &[u8]| {
        field(name)
            .filter(|v| !v.is_empty() && v.iter().all(u8::is_ascii_digit))
            .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok())
    };
    let (Some(ip), Some(port)) = (field(b"ip"), field(b"port")) else {
        return Err("SENTINEL MASTER names no ip and port".into());
    };
    let addr = primary_of(&Reply::Array(vec![Reply::Bulk(ip), Reply::Bulk(port)]))?;
    let epoch = number(b"config-epoch").ok_or("SENTINEL MASTER names no config-epoch")?;
    Ok(View {
        from,
        addr,
        epoch,
        age: number(b"role-reported-time").map(Duration::from_millis),
        down_after: number(b"down-after-milliseconds").map(Duration::from_millis),
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
/// subscription) an answer to `GET-MASTER-ADDR-BY-NAME`. With the majority rule a
/// `+switch-master` only wakes [`confirm`], which asks every Sentinel and keeps the member's
/// confirmation. Ends when the driver is gone.
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
    let wake = Notify::new();
    let majority = sentinels.majority.is_some();
    let lookout = Lookout {
        sentinels: &sentinels,
        bump: &bump,
        wake: &wake,
        switched: &switched,
        every,
        within,
    };
    let subscription = subscribe(lookout);
    if majority {
        tokio::join!(subscription, confirm(lookout, &info));
    } else {
        subscription.await;
    }
}

/// What the watch's two loops ([`subscribe`], [`confirm`]) share.
struct Lookout<'a, B> {
    sentinels: &'a Sentinels,
    /// Moves the member when the Sentinels name another primary (why, and the node named).
    bump: &'a B,
    /// Wakes [`confirm`] (a `+switch-master` under the majority rule).
    wake: &'a Notify,
    switched: &'a watch::Sender<u64>,
    /// How often the Sentinels are asked anyway.
    every: Duration,
    /// How long one question may take.
    within: Duration,
}

// By hand: the derives would ask `B: Copy` of the closure behind the reference.
impl<B> Clone for Lookout<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Lookout<'_, B> {}

/// The `+switch-master` subscription, moving to the next Sentinel when one fails.
async fn subscribe(lookout: Lookout<'_, impl Fn(&str, &str)>) {
    let majority = lookout.sentinels.majority.is_some();
    // Anything missed while unsubscribed (or, with the majority rule, a reason to ask them all).
    let ask_again = || async {
        if majority {
            lookout.wake.notify_one();
        } else if let Ok(now) = lookout.sentinels.resolve(lookout.within).await {
            (lookout.bump)("resolved", &now);
        }
    };
    let mut next = 0;
    let mut failures = 0u32;
    loop {
        let s = &lookout.sentinels.sentinels[next % lookout.sentinels.sentinels.len()];
        next += 1;
        let subscribed = async {
            let mut wire = timeout(lookout.within, lookout.sentinels.open(s))
                .await
                .map_err(|_| "connect timed out".to_string())??;
            let mut buf = BytesMut::new();
            let mut decoder = ReplyDecoder::default();
            let confirm = timeout(
                lookout.within,
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
                    if failures == lookout.sentinels.sentinels.len() as u32 {
                        warn!(sentinel = %s.addr(), error = %e, "no Sentinel reachable: a failover would go unheard until one answers");
                    } else {
                        debug!(sentinel = %s.addr(), error = %e, "Sentinel subscription failed");
                    }
                    tokio::select! {
                        _ = sleep(Duration::from_millis(200)) => continue,
                        _ = lookout.switched.closed() => return,
                    }
                }
            },
            _ = lookout.switched.closed() => return,
        };
        failures = 0;
        debug!(sentinel = %s.addr(), "subscribed to +switch-master");
        ask_again().await;
        let mut poll = tokio::time::interval(lookout.every);
        poll.tick().await;
        loop {
            tokio::select! {
                r = next_reply(&mut wire, &mut buf, &mut decoder) => match r {
                    Ok(Reply::Array(items)) => {
                        if let [Reply::Bulk(kind), Reply::Bulk(_), Reply::Bulk(payload)] = items.as_slice()
                            && kind.as_ref() == b"message"
                            && let Some((name, to)) = switch_of(payload)
                            && name == lookout.sentinels.master
                        {
                            if majority {
                                // One Sentinel's word: ask them all.
                                lookout.wake.notify_one();
                            } else {
                                lookout.sentinels.name(&to);
                                (lookout.bump)("+switch-master", &to);
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        debug!(sentinel = %s.addr(), error = %e, "Sentinel subscription lost");
                        break;
                    }
                },
                // With the majority rule `confirm` asks on its own schedule.
                _ = poll.tick(), if !majority => ask_again().await,
                _ = lookout.switched.closed() => return,
            }
        }
    }
}

/// The majority rule's probe loop: asks every Sentinel, at a quarter of the confirmation bound
/// (at most `every`), and at once when woken (a `+switch-master`). A majority naming the
/// member's primary extends its confirmation; one naming another node moves the member there;
/// none lets the confirmation lapse, and the member is down until a majority returns.
async fn confirm(lookout: Lookout<'_, impl Fn(&str, &str)>, info: &MasterInfo) {
    let retry = lookout.every.min(Duration::from_millis(250));
    let mut lost = false;
    // The `last_error` this loop wrote (cleared again when a majority returns, unless the
    // driver has written another since).
    let mut wrote = String::new();
    let mut warned_tight = false;
    loop {
        let pause = match lookout.sentinels.resolve_named(lookout.within).await {
            Ok(Named {
                addr,
                confirmed: Some(c),
                ..
            }) => {
                info.note_confirmations(c.votes, c.of);
                if c.bound < lookout.within * 2 && !warned_tight {
                    // A round may take `within`: with the bound this short a healthy member
                    // can lapse between two rounds.
                    warned_tight = true;
                    warn!(
                        bound_ms = c.bound.as_millis() as u64,
                        connect_timeout_ms = lookout.within.as_millis() as u64,
                        "the Sentinels' confirmation bound is under twice connect_timeout_ms: a \
                         healthy member may go down between two rounds (raise \
                         down-after-milliseconds or lower connect_timeout_ms)"
                    );
                }
                if info.confirm(&addr, c.epoch, c.until) {
                    if lost {
                        info!(primary = %addr, sentinels = c.votes, of = c.of, "a majority of the Sentinels confirms the primary again");
                        if !wrote.is_empty() && info.last_error() == wrote {
                            info.set_last_error("");
                        }
                        wrote.clear();
                    }
                    lost = false;
                } else if info.primary() == addr {
                    // The same node at another epoch: replaced and promoted again meanwhile,
                    // it may lack locks it once held. The connection is dropped, and the
                    // greeting judges the node as a new primary.
                    info!(primary = %addr, epoch = c.epoch, "the Sentinels name this primary at a new config epoch (a failover and back): reconnecting");
                    lookout.switched.send_modify(|g| *g += 1);
                } else if !info.primary().is_empty() {
                    (lookout.bump)("a majority of the Sentinels", &addr);
                }
                (c.bound / 4).clamp(Duration::from_millis(10), lookout.every)
            }
            Ok(_) => lookout.every,
            Err(u) => {
                if let Some((votes, of)) = u.tally {
                    info.note_confirmations(votes, of);
                }
                info.set_last_error(&u.why);
                wrote = info.last_error();
                if !lost {
                    warn!(reason = %u.why, "no majority of the Sentinels confirms the primary: the member's votes stop counting when the last confirmation lapses");
                }
                lost = true;
                retry
            }
        };
        tokio::select! {
            _ = sleep(pause) => {}
            _ = lookout.wake.notified() => {}
            _ = lookout.switched.closed() => return,
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

    fn view(from: &str, addr: &str, epoch: u64, age_ms: u64) -> View {
        View {
            from: from.into(),
            addr: addr.into(),
            epoch,
            age: Some(Duration::from_millis(age_ms)),
            down_after: Some(Duration::from_millis(1000 + age_ms)),
        }
    }

    #[test]
    fn a_majority_of_the_configured_sentinels_at_the_newest_epoch_names_the_primary() {
        let (p1, p2) = ("10.0.0.1:6379", "10.0.0.2:6379");
        // Two of three name p2: p2, its youngest age and smallest down-after.
        let t = tally(
            &[
                view("s1", p1, 0, 9),
                view("s2", p2, 0, 500),
                view("s3", p2, 0, 300),
            ],
            3,
        );
        assert_eq!(t.addr.as_deref(), Some(p2));
        assert_eq!((t.votes, t.of), (2, 3));
        assert_eq!(t.age, Some(Duration::from_millis(300)));
        assert_eq!(t.down_after, Some(Duration::from_millis(1300)));
        assert_eq!(t.down_after_max, Some(Duration::from_millis(1500)));
        // The majority is of the configured Sentinels: one answer of three is none, even
        // though every Sentinel that answered agrees.
        let t = tally(&[view("s1", p1, 0, 9)], 3);
        assert_eq!((t.addr, t.votes, t.of), (None, 1, 3));
        // One Sentinel has seen a newer failover: the two naming p1 at the older epoch make no
        // majority for it, and p2 has one vote at the newest: nobody is confirmed.
        let t = tally(
            &[
                view("s1", p2, 7, 9),
                view("s2", p1, 6, 9),
                view("s3", p1, 6, 9),
            ],
            3,
        );
        assert_eq!((t.addr, t.votes), (None, 1));
        // Once a second Sentinel has caught up, p2 is confirmed; a straggler at the older
        // epoch naming the same node is not counted for it either.
        let t = tally(
            &[
                view("s1", p2, 7, 9),
                view("s2", p2, 7, 9),
                view("s3", p2, 6, 9),
            ],
            3,
        );
        assert_eq!((t.addr.as_deref(), t.votes), (Some(p2), 2));
        // Five Sentinels: two of five is no majority; three is.
        let two = [view("a", p1, 1, 9), view("b", p1, 1, 9)];
        assert_eq!(tally(&two, 5).addr, None);
        let three = [two[0].clone(), two[1].clone(), view("c", p1, 1, 9)];
        assert_eq!(tally(&three, 5).addr.as_deref(), Some(p1));
        // An even split names nobody.
        let t = tally(
            &[
                view("a", p1, 1, 9),
                view("b", p1, 1, 9),
                view("c", p2, 1, 9),
                view("d", p2, 1, 9),
            ],
            4,
        );
        assert_eq!((t.addr, t.votes), (None, 2));
        assert_eq!(tally(&[], 3).votes, 0);
    }

    #[test]
    fn the_confirmation_bound_is_below_down_after_and_max_ttl() {
        let rule = Majority {
            max_ttl: Duration::from_millis(10_000),
            drift_factor: 0.01,
        };
        // base = min(down-after, max TTL); bound = base × 0.98 − 2 ms; extra = base.
        assert_eq!(
            rule.bound(Some(Duration::from_millis(5000))),
            (Duration::from_millis(4898), Duration::from_millis(5000))
        );
        assert_eq!(
            rule.bound(Some(Duration::from_millis(30_000))),
            (Duration::from_millis(9798), Duration::from_millis(10_000))
        );
        assert_eq!(
            rule.bound(None),
            (Duration::from_millis(9798), Duration::from_millis(10_000))
        );
        // Sentinels that disagree: the bound from the confirming ones' smallest, the extra from
        // the largest any reports.
        assert_eq!(
            rule.bound_and_extra(
                Some(Duration::from_millis(5000)),
                Some(Duration::from_millis(8000))
            ),
            (Duration::from_millis(4898), Duration::from_millis(8000))
        );
        for d in [1u64, 100, 5000, 60_000] {
            let (bound, extra) = rule.bound(Some(Duration::from_millis(d)));
            assert!(bound.mul_f64(1.01) <= extra, "{d}");
            assert!(bound < Duration::from_millis(d));
        }
    }

    #[test]
    fn a_sentinels_view_is_read_from_sentinel_master() {
        let b = |t: &str| Reply::Bulk(Bytes::copy_from_slice(t.as_bytes()));
        // As redis-sentinel 7.0 answers (fields abridged).
        let reply = Reply::Array(
            [
                "name",
                "mm",
                "ip",
                "127.0.0.1",
                "port",
                "16390",
                "flags",
                "master",
                "down-after-milliseconds",
                "1234",
                "role-reported-time",
                "1068",
                "config-epoch",
                "3",
                "quorum",
                "2",
            ]
            .map(b)
            .to_vec(),
        );
        assert_eq!(
            view_of(&reply, "s:1".into()),
            Ok(View {
                from: "s:1".into(),
                addr: "127.0.0.1:16390".into(),
                epoch: 3,
                age: Some(Duration::from_millis(1068)),
                down_after: Some(Duration::from_millis(1234)),
            })
        );
        let no_epoch = Reply::Array(["ip", "h", "port", "1"].map(b).to_vec());
        assert!(view_of(&no_epoch, String::new()).is_err());
        let bad_epoch = Reply::Array(
            ["ip", "h", "port", "1", "config-epoch", "-1"]
                .map(b)
                .to_vec(),
        );
        assert!(view_of(&bad_epoch, String::new()).is_err());
        let unknown = Reply::Error(Bytes::from_static(b"ERR No such master with that name"));
        assert_eq!(
            view_of(&unknown, String::new()),
            Err("ERR No such master with that name".into())
        );
    }

    /// Hostile replies to `SENTINEL GET-MASTER-ADDR-BY-NAME`, as bytes on the wire: each is
    /// decoded without a panic or a large allocation, and none names a primary.
    #[test]
    fn garbage_from_a_sentinel_names_no_primary() {
        let mut deep = b"*1\r\n".repeat(10_000);
        deep.extend_from_slice(b":1\r\n");
        let long_error = [b"-".as_slice(), &[b'E'; 100_000], b"\r\n"].concat();
        for wire in byte_strings![
            b"*4294967295\r\n",
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
