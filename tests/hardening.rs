//! Hostile and buggy clients (issue 10): a client that never reads its replies, oversized and
//! unauthenticated requests, HTTP sent to the proxy, and `AUTH` as Redis 7 does it. Every probe
//! runs while a background client keeps locking and unlocking, which must see no error.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use redlock_proxy::config::Config;
use redlock_proxy::wire::{master::command, reply::Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const PASSWORD: &str = "s3cret";

/// A well-behaved client that keeps taking and releasing its own lock while a probe runs.
struct Background {
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicUsize>,
    task: JoinHandle<usize>,
}

impl Background {
    fn start(addr: &str, password: Option<&str>) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(AtomicUsize::new(0));
        let (addr, password) = (addr.to_string(), password.map(str::to_string));
        let (s, e) = (stop.clone(), errors.clone());
        let task = tokio::spawn(async move {
            let mut c = Client::connect(&addr).await;
            if let Some(p) = password {
                assert_eq!(c.cmd(&["AUTH", &p]).await, Reply::ok());
            }
            let mut rounds = 0;
            while !s.load(Ordering::Relaxed) {
                let start = Instant::now();
                let got = c.cmd(&["SET", "bg:lock", "bg", "NX", "PX", "5000"]).await;
                let freed = c.cmd(&["EVAL", UNLOCK, "1", "bg:lock", "bg"]).await;
                // A round that takes seconds means some other client's trouble reached this one.
                if got != Reply::ok()
                    || freed != Reply::Integer(1)
                    || start.elapsed() > Duration::from_secs(1)
                {
                    e.fetch_add(1, Ordering::Relaxed);
                }
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            rounds
        });
        Background { stop, errors, task }
    }

    /// Stops the client and checks that it saw no error and kept working.
    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let rounds = self.task.await.expect("background client panicked");
        assert_eq!(self.errors.load(Ordering::Relaxed), 0, "background errors");
        assert!(rounds > 0, "the background client never completed a round");
    }
}

/// Three masters and a proxy with `tweak` applied to the test configuration.
async fn setup(tweak: impl FnOnce(&mut Config)) -> (Vec<Master>, String) {
    let ms = masters(3);
    let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let refs: Vec<&str> = addrs.iter().map(|s| s.as_str()).collect();
    let mut config = config_for(&refs);
    tweak(&mut config);
    let addr = proxy(config).await.to_string();
    (ms, addr)
}

async fn connected_clients(addr: &str, password: Option<&str>) -> usize {
    let mut c = Client::connect(addr).await;
    if let Some(p) = password {
        c.cmd(&["AUTH", p]).await;
    }
    // This connection counts itself.
    field(&c.text(&["INFO", "clients"]).await, "connected_clients")
        .parse::<usize>()
        .expect("connected_clients")
        - 1
}

/// Waits until the proxy serves exactly `n` other clients; false after `within`.
async fn clients_become(addr: &str, password: Option<&str>, n: usize, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if connected_clients(addr, password).await == n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Reads whatever the proxy still sends until it closes the connection (None if it does not
/// within `within`).
async fn read_to_close(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let deadline = Instant::now() + within;
    loop {
        let mut buf = [0u8; 64 * 1024];
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(out),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

async fn raw_connect(addr: &str) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

// Row 4: a client that never reads its replies keeps no key's turn, and is disconnected after
// `client_write_timeout_ms`; its in-flight lock still lands on the masters without it.
#[tokio::test]
async fn a_client_that_never_reads_does_not_freeze_a_key() {
    let (ms, addr) = setup(|c| c.client_write_timeout_ms = 1500).await;
    let bg = Background::start(&addr, None);
    let mut attacker = raw_connect(&addr).await;
    let big = vec![b'x'; 4 * 1024 * 1024];
    let mut probe = command(&[b"ECHO", &big]).to_vec();
    probe.extend_from_slice(&command(&[
        b"SET",
        b"victim:lock",
        b"t",
        b"NX",
        b"PX",
        b"3000",
    ]));
    attacker.write_all(&probe).await.expect("send probe");

    // The attacker's SET completes although its ECHO reply is still unread.
    let mut other = Client::connect(&addr).await;
    let start = Instant::now();
    loop {
        let got = tokio::time::timeout(Duration::from_secs(2), other.cmd(&["GET", "victim:lock"]))
            .await
            .expect("GET victim:lock must not hang behind a client that does not read");
        if got == Reply::bulk("t") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the SET never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = Instant::now();
    assert_eq!(
        other
            .raw(&["SET", "victim:lock", "u", "NX", "PX", "3000"])
            .await,
        "$-1\r\n"
    );
    assert!(t.elapsed() < Duration::from_millis(500));
    assert_eq!(
        values_on(&ms, "victim:lock").await,
        vec![Some("t".into()); 3]
    );

    // Nothing read for 1.5 s: the attacker is disconnected.
    assert!(clients_become(&addr, None, 2, Duration::from_secs(5)).await);
    bg.finish().await;
    drop(attacker);
}

// Row 4: a client disconnected for not reading still has its in-flight lock finished on the
// masters: here two paused masters keep the SET undecided until node_timeout_ms (200), long after
// the client is gone, and the refused acquisition must then be rolled back on the master that
// granted it. (A majority is paused, so the background client runs only once it is back.)
#[tokio::test]
async fn a_disconnected_clients_in_flight_lock_is_finished_without_it() {
    let (ms, addr) = setup(|c| c.client_write_timeout_ms = 50).await;
    ms[1].pause();
    ms[2].pause();
    let mut attacker = raw_connect(&addr).await;
    let big = vec![b'x'; 4 * 1024 * 1024];
    let mut probe = command(&[b"ECHO", &big]).to_vec();
    probe.extend_from_slice(&command(&[
        b"SET",
        b"late:lock",
        b"t",
        b"NX",
        b"PX",
        b"10000",
    ]));
    attacker.write_all(&probe).await.expect("send probe");
    assert!(clients_become(&addr, None, 0, Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(values_on(&ms[..1], "late:lock").await, vec![None]);
    ms[1].resume();
    ms[2].resume();
    let bg = Background::start(&addr, None);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    bg.finish().await;
    drop(attacker);
}

/// The `LPOP`s a master has run so far.
async fn lpops(m: &Master) -> u64 {
    let info = m.client().await.text(&["INFO", "commandstats"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_lpop:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

// Row 4: a client that queues blocking pops and leaves stops them. Each `BLPOP` polls the
// masters until it pops or times out; they used to keep polling (up to 300 s each, 64 at a
// time) after their client had gone, so clients that connect, queue and leave piled up work on
// the masters without bound. As Redis drops a blocked client that disconnects, the proxy stops
// its pops once the client has sent all it will: here, with FIN and with RST.
#[tokio::test]
async fn blocking_pops_stop_when_their_client_leaves() {
    let (ms, addr) = setup(|_| {}).await;
    for abort in [false, true] {
        let mut s = raw_connect(&addr).await;
        let mut wire = Vec::new();
        for i in 0..200 {
            wire.extend_from_slice(&command(&[b"BLPOP", format!("bl:{i}").as_bytes(), b"0"]));
        }
        s.write_all(&wire).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let polling = lpops(&ms[0]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let still = lpops(&ms[0]).await;
        assert!(
            still > polling,
            "the pops were not running ({polling} then {still})"
        );
        if abort {
            s.set_zero_linger().unwrap();
        }
        drop(s);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = lpops(&ms[0]).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let after = lpops(&ms[0]).await;
        assert!(
            after - before < 10,
            "a gone client's BLPOPs still poll: {} LPOPs in 1 s",
            after - before
        );
    }
}

// Row 4: unread replies beyond `client_output_buffer_limit` disconnect the client.
#[tokio::test]
async fn unread_replies_beyond_the_output_limit_disconnect() {
    let (_ms, addr) = setup(|c| c.client_output_buffer_limit = 1024 * 1024).await;
    let bg = Background::start(&addr, None);
    let mut attacker = raw_connect(&addr).await;
    let big = vec![b'y'; 1024 * 1024];
    let one = command(&[b"ECHO", &big]);
    // 32 MB of replies: far more than the socket buffers hold. The proxy may close before it
    // has read them all, so the writes run in their own task.
    let (mut rd, mut wr) = attacker.split();
    let writer = async {
        for _ in 0..32 {
            if wr.write_all(&one).await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), writer).await;
    // Only the background client is left.
    assert!(clients_become(&addr, None, 1, Duration::from_secs(5)).await);
    // What arrives before the close is whole replies, then nothing.
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), rd.read_to_end(&mut sink)).await;
    bg.finish().await;
}

// Row 5: Redis 7's limits before AUTH: 10 arguments, 16384-byte bulks.
#[tokio::test]
async fn unauthenticated_clients_get_redis_limits() {
    let (_ms, addr) = setup(|c| c.password = Some(PASSWORD.into())).await;
    let bg = Background::start(&addr, Some(PASSWORD));

    let mut s = raw_connect(&addr).await;
    s.write_all(b"*11\r\n").await.unwrap();
    assert_eq!(
        read_to_close(&mut s, Duration::from_secs(5))
            .await
            .as_deref(),
        Some(&b"-ERR Protocol error: unauthenticated multibulk length\r\n"[..])
    );
    let mut s = raw_connect(&addr).await;
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$16385\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_to_close(&mut s, Duration::from_secs(5))
            .await
            .as_deref(),
        Some(&b"-ERR Protocol error: unauthenticated bulk length\r\n"[..])
    );
    // At the limits, and after AUTH beyond them, requests are served.
    let mut c = Client::connect(&addr).await;
    let keys: Vec<String> = (0..9).map(|i| format!("k{i}")).collect();
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(|s| s.as_str()));
    assert_eq!(c.raw(&del).await, "-NOAUTH Authentication required.\r\n");
    let bulk = "z".repeat(16384);
    assert_eq!(
        c.raw(&["ECHO", &bulk]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.raw(&["AUTH", PASSWORD]).await, "+OK\r\n");
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(|s| s.as_str()));
    assert_eq!(c.raw(&del).await, ":0\r\n");
    let bulk = "z".repeat(100_000);
    assert_eq!(
        c.raw(&["ECHO", &bulk]).await,
        format!("$100000\r\n{bulk}\r\n")
    );
    bg.finish().await;
}

// Row 5: one request, all arguments together, may not exceed `client_query_buffer_limit`; the
// limit is checked on the length headers, before the bytes are buffered.
#[tokio::test]
async fn requests_beyond_the_query_buffer_limit_are_refused_before_buffering() {
    let (_ms, addr) = setup(|c| c.client_query_buffer_limit = 1024 * 1024).await;
    let bg = Background::start(&addr, None);

    // Two bulks of 600 KB: each under max_bulk_len, together over the limit.
    let mut s = raw_connect(&addr).await;
    let part = vec![b'q'; 600 * 1024];
    let req = command(&[b"ECHO", &part, &part]);
    let (mut rd, mut wr) = s.split();
    let _ = tokio::time::timeout(Duration::from_secs(5), wr.write_all(&req)).await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), rd.read_to_end(&mut got)).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        "",
        "closed without running it"
    );

    // A header claiming 2 MB closes the connection before any of it is sent.
    let mut s = raw_connect(&addr).await;
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$2000000\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_to_close(&mut s, Duration::from_secs(5))
            .await
            .as_deref(),
        Some(&b""[..])
    );
    // Under the limit, the same request is served.
    let mut c = Client::connect(&addr).await;
    let ok = "q".repeat(900 * 1024);
    assert_eq!(
        c.raw(&["ECHO", &ok]).await,
        format!("${}\r\n{ok}\r\n", ok.len())
    );
    bg.finish().await;
}

// Row 10: an HTTP request closes the connection; nothing from `POST` or `Host:` on runs.
#[tokio::test]
async fn http_requests_close_the_connection_before_anything_runs() {
    let (ms, addr) = setup(|_| {}).await;
    let bg = Background::start(&addr, None);

    let mut s = raw_connect(&addr).await;
    s.write_all(
        b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 30\r\n\r\nSET posted:lock t NX PX 10000\r\n",
    )
    .await
    .unwrap();
    assert_eq!(
        read_to_close(&mut s, Duration::from_secs(5))
            .await
            .as_deref(),
        Some(&b""[..])
    );
    // `Host:` as a multibulk command, lower case, closes too; what follows never runs.
    let mut s = raw_connect(&addr).await;
    let mut req = command(&[b"host:", b"evil"]).to_vec();
    req.extend_from_slice(&command(&[
        b"SET",
        b"posted:lock",
        b"t",
        b"NX",
        b"PX",
        b"10000",
    ]));
    s.write_all(&req).await.unwrap();
    assert_eq!(
        read_to_close(&mut s, Duration::from_secs(5))
            .await
            .as_deref(),
        Some(&b""[..])
    );
    // As on Redis, a command before it in the same read has run.
    let mut s = raw_connect(&addr).await;
    s.write_all(b"SET before:lock t NX PX 10000\r\npost /x HTTP/1.0\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut s, Duration::from_secs(5)).await;
    assert!(matches!(got.as_deref(), Some(b"" | b"+OK\r\n")), "{got:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(values_on(&ms, "posted:lock").await, vec![None; 3]);
    assert_eq!(
        values_on(&ms, "before:lock").await,
        vec![Some("t".into()); 3]
    );
    bg.finish().await;
}

// Row 12: with a password, PING needs AUTH and only the user `default` exists.
#[tokio::test]
async fn auth_is_redis_7s() {
    let (_ms, addr) = setup(|c| c.password = Some(PASSWORD.into())).await;
    let bg = Background::start(&addr, Some(PASSWORD));
    let mut c = Client::connect(&addr).await;
    assert_eq!(
        c.raw(&["PING"]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    assert_eq!(c.raw(&["AUTH", "bob", PASSWORD]).await, wrongpass);
    assert_eq!(c.raw(&["AUTH", "wrong"]).await, wrongpass);
    assert_eq!(c.raw(&["AUTH", "default", "wrong"]).await, wrongpass);
    assert_eq!(
        c.raw(&["HELLO", "3", "AUTH", "bob", PASSWORD]).await,
        wrongpass
    );
    assert_eq!(
        c.raw(&["PING"]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.raw(&["AUTH", "default", PASSWORD]).await, "+OK\r\n");
    assert_eq!(c.raw(&["PING"]).await, "+PONG\r\n");

    let mut c = Client::connect(&addr).await;
    let hello = c.raw(&["HELLO", "3", "AUTH", "default", PASSWORD]).await;
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert_eq!(c.raw(&["PING"]).await, "+PONG\r\n");
    let mut c = Client::connect(&addr).await;
    assert_eq!(c.raw(&["AUTH", PASSWORD]).await, "+OK\r\n");
    bg.finish().await;
}

// Also: a client that sends garbage or disconnects mid-request leaves the proxy serving.
#[tokio::test]
async fn the_proxy_survives_abrupt_clients() {
    let (_ms, addr) = setup(|_| {}).await;
    let bg = Background::start(&addr, None);
    for junk in [
        &b"*2\r\n$3\r\nGET\r\n$10\r\nabc"[..],
        b"*-5\r\n*1\r\n$-1\r\n",
        b"\x00\x01\x02\xff\r\n",
        b"*1\r\n*1\r\n*1\r\n",
        b"\"unbalanced\r\n",
    ] {
        let mut s = raw_connect(&addr).await;
        s.write_all(junk).await.unwrap();
        drop(s);
    }
    assert!(clients_become(&addr, None, 1, Duration::from_secs(5)).await);
    bg.finish().await;
}
