//! The greeting on every (re)connect: who the master is (`INFO`, `ROLE`, `TIME`), whether it
//! is busy with a script (then `SCRIPT KILL`), and what that means for its health (restart
//! quarantine, clock baseline). The greeting runs over any byte stream, so it is tested over
//! `tokio::io::duplex` as well as against real masters.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tracing::{info, warn};

use super::clock::{ClockWatch, Sample, judge, parse_time};
use super::health::MasterInfo;
use super::settings::Settings;
use crate::error::Kind;
use crate::wire::master::{ReplyDecoder, SMALL_REPLY, command};
use crate::wire::reply::Reply;

/// What the greeting told about a master.
pub(super) struct Hello<S> {
    /// The connection, ready for requests.
    pub(super) stream: S,
    /// The data node's `host:port` (set by [`connect`]).
    addr: String,
    /// A Sentinel member: how long the Sentinels have known this node as the primary (set by
    /// [`connect`]).
    primary_for: Option<Duration>,
    /// A Sentinel member under the majority rule: how much longer than the window a new
    /// primary sits out (the confirmation bound another proxy may still be counting the old
    /// primary for; see `sentinel::Majority::bound`). Zero otherwise.
    extra: Duration,
    /// A Sentinel member under the majority rule: the config epoch the primary was confirmed
    /// at.
    epoch: Option<u64>,
    run_id: Option<String>,
    /// `redis_version` from `INFO server`.
    version: Option<String>,
    uptime_s: Option<u64>,
    /// `appendonly yes` and `appendfsync always`: every acknowledged write survives a restart.
    persists: bool,
    /// The master's clock, read during the greeting (`None` without clock watch).
    time: Option<Result<Sample, Reply>>,
}

pub(super) enum Refused {
    /// Unreachable or slow: expected while a master is down, logged at debug.
    Quietly(String),
    /// Reachable but unusable (a replica, an error): worth an operator's attention.
    Loudly(String),
}

/// A master connection: plain TCP, or TLS over it.
pub trait Duplex: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Duplex for T {}

/// The stream the driver serves: boxed, so plain and TLS masters share one code path (one
/// dynamic call per read or write batch, nothing per request).
pub type Wire = Box<dyn Duplex>;

/// Opens a TCP connection to the master, TLS over it when configured, and greets it (see
/// [`greet`]), all within `connect_timeout`.
pub(super) async fn connect(
    info: &MasterInfo,
    settings: &Settings,
) -> Result<Hello<Wire>, Refused> {
    // A Sentinel member asks its Sentinels first, each time: the primary may have moved.
    let mut primary_for = None;
    let mut extra = Duration::ZERO;
    let mut epoch = None;
    let addr = match &settings.sentinel {
        None => info.addr.clone(),
        Some(s) => {
            let named = match s.resolve_named(settings.connect_timeout).await {
                Ok(named) => named,
                Err(u) => {
                    if let Some((votes, of)) = u.tally {
                        info.note_confirmations(votes, of);
                    }
                    return Err(Refused::Quietly(u.why));
                }
            };
            match named.confirmed {
                // Under the majority rule: counted from this confirmation on (the connection
                // is not served before it is admitted).
                Some(c) => {
                    info.note_confirmations(c.votes, c.of);
                    info.set_primary_confirmed(&named.addr, c.epoch, c.until);
                    extra = c.extra;
                    epoch = Some(c.epoch);
                }
                None => info.set_primary(&named.addr),
            }
            // Unknown counts as new: a first connect then sits out the whole window.
            primary_for = Some(named.age.unwrap_or_default());
            named.addr
        }
    };
    let quiet = |e: std::io::Error| Refused::Quietly(e.to_string());
    let open = async {
        let stream = TcpStream::connect(&addr).await.map_err(quiet)?;
        stream.set_nodelay(true).map_err(quiet)?;
        let wire: Wire = match &settings.tls {
            None => Box::new(stream),
            Some(tls) => {
                let name = match &settings.sentinel {
                    // The certificate names the node the Sentinels named.
                    Some(s) if s.tls_name_follows_host => {
                        let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
                        let host = host.trim_start_matches('[').trim_end_matches(']');
                        crate::tls::server_name(host).map_err(Refused::Loudly)?
                    }
                    _ => tls.name.clone(),
                };
                Box::new(
                    tls.connector
                        .connect(name, stream)
                        .await
                        .map_err(io_refusal("TLS handshake failed"))?,
                )
            }
        };
        greet(wire, settings).await
    };
    let opened = timeout(settings.connect_timeout, open)
        .await
        .map_err(|_| Refused::Quietly("handshake timed out".into()))
        .and_then(|r| r);
    if let (Err(_), Some(s)) = (&opened, &settings.sentinel) {
        // The node named could not be served (down, or not a master): the next attempt asks
        // another Sentinel first.
        s.rotate();
    }
    let mut hello = opened?;
    hello.addr = addr;
    hello.primary_for = primary_for;
    hello.extra = extra;
    hello.epoch = epoch;
    Ok(hello)
}

/// The role a `ROLE` reply names (`master`, `slave`, `sentinel`), "" when it names none.
pub(super) fn role_of(reply: &Reply) -> String {
    match reply {
        Reply::Array(items) => match items.first() {
            Some(Reply::Bulk(r)) => String::from_utf8_lossy(r).into_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// Sorts an I/O error: a TLS failure (a certificate refused by either side surfaces as
/// `InvalidData`) needs the operator; a reset or refused connection is a master that is down.
fn io_refusal(what: &'static str) -> impl Fn(std::io::Error) -> Refused {
    move |e| match e.kind() {
        std::io::ErrorKind::InvalidData => Refused::Loudly(format!("{what}: {e}")),
        _ => Refused::Quietly(format!("{what}: {e}")),
    }
}

/// Learns who the master is on a fresh connection.
pub(super) async fn greet<S>(stream: S, settings: &Settings) -> Result<Hello<S>, Refused>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // AUTH goes first, pipelined with the rest: if it fails, the other commands fail with
    // NOAUTH and only AUTH's own answer is reported.
    let auth: Option<Vec<&[u8]>> = settings.auth.as_ref().map(|c| {
        let mut a: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(u) = &c.user {
            a.push(u.as_bytes());
        }
        a.push(c.password.as_bytes());
        a
    });
    let mut asks: Vec<&[&[u8]]> = Vec::new();
    if let Some(a) = &auth {
        asks.push(a);
    }
    let base = asks.len();
    asks.extend::<[&[&[u8]]; 3]>([
        &[b"INFO", b"server"],
        &[b"ROLE"],
        &[b"INFO", b"persistence"],
    ]);
    if settings.clock.is_some() {
        asks.push(&[b"TIME"]);
    }
    if settings.masters_persist {
        asks.push(&[b"CONFIG", b"GET", b"appendfsync"]);
    }
    let (stream, answers) = ask_all(stream, &asks).await?;
    if let (1, Reply::Error(e)) = (base, &answers.replies[0]) {
        return Err(Refused::Loudly(format!(
            "authentication failed: {}",
            String::from_utf8_lossy(e)
        )));
    }
    introduce(stream, &answers, base, settings)
}

/// The greeting's replies, in the order asked, with when each arrived and when they were
/// asked.
struct Answers {
    sent: Instant,
    replies: Vec<Reply>,
    times: Vec<Instant>,
}

/// Sends every ask at once and reads their replies. A master busy with a script is asked to
/// kill it, and refused either way.
async fn ask_all<S>(mut stream: S, asks: &[&[&[u8]]]) -> Result<(S, Answers), Refused>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let quiet = |e: std::io::Error| Refused::Quietly(e.to_string());
    let mut hello = BytesMut::new();
    for a in asks {
        hello.extend_from_slice(&command(a));
    }
    let sent = Instant::now();
    stream.write_all(&hello).await.map_err(quiet)?;
    stream.flush().await.map_err(quiet)?;
    let mut buf = BytesMut::with_capacity(8192);
    let mut decoder = ReplyDecoder::default();
    let mut replies = Vec::new();
    let mut times = Vec::new();
    while replies.len() < asks.len() {
        if let Some(reply) = decoder
            .decode(&mut buf)
            .map_err(|e| Refused::Loudly(format!("bad reply: {e}")))?
        {
            replies.push(reply);
            times.push(Instant::now());
            continue;
        }
        if buf.len() > SMALL_REPLY {
            return Err(Refused::Loudly("handshake reply too large".into()));
        }
        read_more(&mut stream, &mut buf).await?;
    }
    if replies.iter().any(is_busy) {
        return Err(kill_script(&mut stream, &mut decoder, &mut buf).await);
    }
    let answers = Answers {
        sent,
        replies,
        times,
    };
    Ok((stream, answers))
}

/// A script is running on the master (it answers every other command with BUSY): this new
/// connection is not the one running it, so it can ask the master to kill it. Redis refuses
/// (UNKILLABLE) once the script has written; then only the operator can help (SHUTDOWN
/// NOSAVE), and the log says so.
async fn kill_script(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    decoder: &mut ReplyDecoder,
    buf: &mut BytesMut,
) -> Refused {
    let quiet = |e: std::io::Error| Refused::Quietly(e.to_string());
    if let Err(e) = stream.write_all(&command(&[b"SCRIPT", b"KILL"])).await {
        return quiet(e);
    }
    if let Err(e) = stream.flush().await {
        return quiet(e);
    }
    let answer = loop {
        match decoder.decode(buf) {
            Ok(Some(reply)) => break reply,
            Ok(None) => {}
            Err(e) => return Refused::Loudly(format!("bad reply: {e}")),
        }
        if let Err(refused) = read_more(stream, buf).await {
            return refused;
        }
    };
    Refused::Loudly(match answer {
        Reply::Simple(_) => "busy running a script (a client's script that does not end): sent \
                             SCRIPT KILL, which stopped it"
            .to_string(),
        other => format!(
            "busy running a script: SCRIPT KILL answered {:?}; a script that has written \
             cannot be killed, only the master's operator can stop it (SHUTDOWN NOSAVE)",
            other
        ),
    })
}

/// Who the master is, from the greeting's replies after AUTH's (`base` of them): it must be a
/// primary done loading; its clock and persistence are read when asked. What `connect` learns
/// from the Sentinels is left for it to fill in.
fn introduce<S>(
    stream: S,
    answers: &Answers,
    base: usize,
    settings: &Settings,
) -> Result<Hello<S>, Refused> {
    let replies = &answers.replies[base..];
    let times = &answers.times[base..];
    let text = |r: &Reply| match r {
        Reply::Bulk(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Reply::Error(e) => Err(Refused::Loudly(format!(
            "INFO failed: {}",
            String::from_utf8_lossy(e)
        ))),
        other => Err(Refused::Loudly(format!("unexpected INFO reply {other:?}"))),
    };
    let server = text(&replies[0])?;
    let role = role_of(&replies[1]);
    if role != "master" {
        return Err(Refused::Loudly(format!(
            "backend reports role '{role}', not master: a replica cannot hold locks safely \
             (point the proxy at independent masters)"
        )));
    }
    // A master still loading its dataset (a restart reading its AOF) answers writes with
    // `-LOADING` and may not report its persistence settings yet: come back when it is done.
    let persistence = text(&replies[2])?;
    if info_field(&persistence, "loading") == Some("1") {
        return Err(Refused::Quietly("still loading its dataset".into()));
    }
    let mut next = 3;
    let time = settings.clock.map(|_| {
        let r = &replies[next];
        let at = times[next];
        next += 1;
        parse_time(r)
            .map(|master_us| Sample {
                sent: answers.sent,
                recv: at,
                master_us,
            })
            .ok_or_else(|| r.clone())
    });
    let persists = settings.masters_persist
        && {
            let fsync = &replies[next];
            info_field(&persistence, "aof_enabled") == Some("1")
                && matches!(fsync, Reply::Array(kv) if kv.get(1) == Some(&Reply::Bulk(Bytes::from_static(b"always"))))
        };
    Ok(Hello {
        stream,
        addr: String::new(),
        primary_for: None,
        extra: Duration::ZERO,
        epoch: None,
        run_id: info_field(&server, "run_id").map(str::to_owned),
        version: info_field(&server, "redis_version").map(str::to_owned),
        uptime_s: info_field(&server, "uptime_in_seconds").and_then(|u| u.parse().ok()),
        persists,
        time,
    })
}

/// Reads more of the greeting's replies.
async fn read_more(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
) -> Result<(), Refused> {
    match stream.read_buf(buf).await {
        Ok(0) => Err(Refused::Quietly(
            "connection closed during handshake".into(),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(io_refusal("handshake read failed")(e)),
    }
}

/// True for a master's `-BUSY ...` error (a Lua script or function is running).
fn is_busy(reply: &Reply) -> bool {
    reply.error_kind() == Some(Kind::Busy)
}

/// Applies what the greeting told: restart quarantine and the clock baseline.
pub(super) fn admit<S>(
    info: &MasterInfo,
    settings: &Settings,
    hello: &Hello<S>,
    clock: Option<&mut ClockWatch>,
) {
    info.set_version(hello.version.as_deref());
    let previous = info.replace_run_id(hello.run_id.clone());
    let previous_served = info.replace_served(hello.addr.clone(), hello.epoch);
    let (previous_addr, previous_epoch) = match previous_served {
        Some((addr, epoch)) => (Some(addr), epoch),
        None => (None, None),
    };
    let first = previous.is_none();
    let restarted = !first && previous != hello.run_id;
    // A Sentinel member whose primary is another node (another address, or another run_id, or
    // under the majority rule the same node at another config epoch): the new primary was a replica, which may lack locks the old one granted, persistence or
    // not.
    let failover = settings.sentinel.is_some()
        && previous_addr.is_some()
        && (restarted
            || previous_addr.as_deref() != Some(hello.addr.as_str())
            // The same node confirmed at another config epoch (failed over and back).
            || (previous_epoch.is_some() && hello.epoch.is_some() && previous_epoch != hello.epoch));
    if failover {
        info.count_failover();
    } else if restarted {
        info.count_restart();
    }
    if let Some(window) = settings.quarantine {
        // A new primary that a majority of the Sentinels confirmed sits out the confirmation
        // bound too: a proxy cut off with the old primary may count it that much longer.
        let failover_window = window + hello.extra;
        if settings.masters_persist && !hello.persists {
            warn!(
                "masters_persist is set, but this master does not persist every write \
                 (needs appendonly yes and appendfsync always): it is quarantined after restarts"
            );
        }
        let persists = settings.masters_persist && hello.persists;
        let old = previous.as_deref().unwrap_or("");
        let new = hello.run_id.as_deref().unwrap_or("?");
        if failover {
            info.quarantine(failover_window, "failover");
            warn!(
                old_primary = previous_addr.as_deref().unwrap_or(""),
                primary = %hello.addr,
                old_run_id = old,
                run_id = new,
                quarantine_ms = failover_window.as_millis() as u64,
                status = "quarantined",
                "the member's primary changed (failover): it may lack locks the old primary granted, so its votes do not count until every such lock has expired"
            );
        } else if hello.run_id.is_none() {
            // Without a run_id a restart cannot be told from a reconnect.
            info.quarantine(window, "restart");
            warn!(
                quarantine_ms = window.as_millis() as u64,
                status = "quarantined",
                "master reports no run_id: quarantined"
            );
        } else if restarted && persists {
            info!(
                old_run_id = old,
                run_id = new,
                "master restarted; it persists every write, so no quarantine"
            );
        } else if restarted {
            info.quarantine(window, "restart");
            warn!(
                old_run_id = old,
                run_id = new,
                quarantine_ms = window.as_millis() as u64,
                status = "quarantined",
                "master restarted (run_id changed) and may have lost locks: its votes do not count until every lock it held has expired"
            );
        } else if let Some(left) = first
            .then_some(hello.primary_for)
            .flatten()
            .filter(|_| settings.quarantine_young)
            .and_then(|age| failover_window.checked_sub(age))
            .filter(|l| !l.is_zero())
        {
            // A Sentinel member whose primary is newer than the window (as the Sentinels know
            // it): a failover this proxy did not see may have lost locks others were granted.
            info.quarantine(left, "failover");
            warn!(
                primary = %hello.addr,
                quarantine_ms = left.as_millis() as u64,
                status = "quarantined",
                "the Sentinels have known this primary for less than the quarantine window: it may be a promoted replica lacking locks the old primary granted"
            );
        }
        if !failover && first && settings.quarantine_young && !persists {
            // Another proxy, or this one before a restart, may have granted locks that this
            // master lost. A master up for at least the window holds everything it was given
            // since; a younger one sits out the rest of the window. Uptime is whole seconds,
            // rounded down, so the rest is never underestimated.
            let up = Duration::from_secs(hello.uptime_s.unwrap_or(0));
            if let Some(left) = window.checked_sub(up).filter(|l| !l.is_zero()) {
                info.quarantine(left, "young");
                warn!(
                    uptime_s = up.as_secs(),
                    quarantine_ms = left.as_millis() as u64,
                    status = "quarantined",
                    "master started {}s ago and may have lost locks granted before it restarted: \
                     its votes do not count for {}s more; if it is brand-new and never held a \
                     lock, set `quarantine = false` to skip this",
                    up.as_secs(),
                    left.as_secs_f64().ceil() as u64
                );
            }
        }
    }
    if let (Some(watch), Some(rules), Some(time)) = (clock, settings.clock, &hello.time) {
        judge(info, watch, rules.span, time.clone());
    }
}

/// Reads `field:value` from an `INFO` reply.
pub fn info_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|rest| rest.strip_prefix(':'))
        })
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::for_tests()
    }

    /// Plays a master: reads until `expect` has arrived, then writes `answer`.
    async fn script(master: &mut tokio::io::DuplexStream, expect: &[u8], answer: &[u8]) {
        let mut got = Vec::new();
        while got.len() < expect.len() {
            let mut chunk = [0u8; 1024];
            let n = master.read(&mut chunk).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(got, expect);
        master.write_all(answer).await.unwrap();
    }

    fn greeting() -> Vec<u8> {
        [
            command(&[b"INFO", b"server"]),
            command(&[b"ROLE"]),
            command(&[b"INFO", b"persistence"]),
        ]
        .concat()
    }

    #[tokio::test]
    async fn a_master_busy_with_a_script_is_sent_script_kill() {
        let (proxy_end, mut master) = tokio::io::duplex(1 << 16);
        let busy = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
        let s = settings();
        let (refused, ()) = tokio::join!(greet(proxy_end, &s), async {
            script(&mut master, &greeting(), &busy.repeat(3)).await;
            script(&mut master, &command(&[b"SCRIPT", b"KILL"]), b"+OK\r\n").await;
        });
        match refused {
            Err(Refused::Loudly(why)) => assert!(why.contains("sent SCRIPT KILL"), "{why}"),
            _ => panic!("a busy master is not admitted"),
        }
    }

    #[tokio::test]
    async fn auth_goes_first_and_a_refusal_is_loud_and_names_no_password() {
        let (proxy_end, mut master) = tokio::io::duplex(1 << 16);
        let mut s = settings();
        s.auth = Some(super::super::target::Credentials {
            user: Some("locker".into()),
            password: "hunter2".into(),
        });
        let expect = [
            command(&[b"AUTH", b"locker", b"hunter2"]).to_vec(),
            greeting(),
        ]
        .concat();
        let noauth = b"-NOAUTH Authentication required.\r\n".repeat(3);
        let answer = [
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n".to_vec(),
            noauth,
        ]
        .concat();
        let (refused, ()) = tokio::join!(greet(proxy_end, &s), async {
            script(&mut master, &expect, &answer).await;
        });
        match refused {
            Err(Refused::Loudly(why)) => assert_eq!(
                why,
                "authentication failed: WRONGPASS invalid username-password pair or user is disabled."
            ),
            _ => panic!("a wrong password is refused loudly"),
        }
    }

    #[tokio::test]
    async fn a_master_is_admitted_with_what_it_says_about_itself() {
        let (proxy_end, mut master) = tokio::io::duplex(1 << 16);
        let server = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n";
        let persistence = "# Persistence\r\nloading:0\r\naof_enabled:0\r\n";
        let answer = format!(
            "${}\r\n{server}\r\n*1\r\n$6\r\nmaster\r\n${}\r\n{persistence}\r\n",
            server.len(),
            persistence.len()
        );
        let s = settings();
        let (hello, ()) = tokio::join!(greet(proxy_end, &s), async {
            script(&mut master, &greeting(), answer.as_bytes()).await;
        });
        let Ok(hello) = hello else {
            panic!("refused");
        };
        assert_eq!(hello.run_id.as_deref(), Some("abc"));
        assert_eq!(hello.uptime_s, Some(42));
        assert_eq!(hello.version.as_deref(), Some("7.0.15"));
    }
}
