//! A structure-aware fuzzer against a live proxy: the proxy binary in front of 3 real masters,
//! driven from several connections with random commands from its table (random, binary, huge and
//! negative arguments), framing corruption, and the abuse probes of the hardening work, while one
//! background client locks and unlocks its own key. The proxy must never exit or panic, a fresh
//! client's `PING` must be answered quickly at every check, its RSS must stay bounded, and the
//! background client must see no error reply, no hang, and every round done within 5 s.
//!
//! `FUZZ_LIVE_SECONDS` sets the length (default 30); the seed is printed, and `FUZZ_LIVE_SEED`
//! replays a run.

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Client, UNLOCK, masters};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redlock_proxy::wire::{master::command, reply::Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

/// The proxy binary as a child process, so a crash or abort is seen as an exit.
struct Proxy {
    child: Child,
    addr: String,
}

impl Proxy {
    fn start(backends: &str) -> Proxy {
        let port = redlock_proxy::dev::free_port().unwrap();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_redlock-proxy"))
            .args(["--listen", &addr, "--backends", backends])
            .args(["--set", "quarantine=false", "--set", "node_timeout_ms=500"])
            .args(["--set", "threads=2"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Proxy { child, addr }
    }

    fn rss_kb(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Command names the fuzzer draws from (the proxy's table, some unknown ones, and mixed case).
const NAMES: &[&str] = &[
    "SET",
    "set",
    "GET",
    "EXISTS",
    "SETNX",
    "GETSET",
    "DEL",
    "EXPIRE",
    "PEXPIRE",
    "PEXPIREAT",
    "EXPIREAT",
    "TTL",
    "PTTL",
    "HGET",
    "HEXISTS",
    "HGETALL",
    "LLEN",
    "BLPOP",
    "WATCH",
    "UNWATCH",
    "MULTI",
    "EXEC",
    "DISCARD",
    "EVAL",
    "EVALSHA",
    "SCRIPT",
    "PING",
    "ECHO",
    "HELLO",
    "AUTH",
    "SELECT",
    "CLIENT",
    "COMMAND",
    "INFO",
    "CONFIG",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUBLISH",
    "REDLOCK.FENCE",
    "INCR",
    "FLUSHALL",
    "KEYS",
    "DEBUG",
    "SHUTDOWN",
];

const WORDS: &[&str] = &[
    "NX",
    "XX",
    "PX",
    "EX",
    "PXAT",
    "EXAT",
    "KEEPTTL",
    "GET",
    "LOAD",
    "EXISTS",
    "FLUSH",
    "KILL",
    "3",
    "2",
    "0",
    "-1",
    "1000",
    "99999999999999999999",
    "0.01",
    "nan",
    "lock:a",
    "lock:b",
    "fz:k",
    "",
];

fn arg(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..6) {
        0 => WORDS[rng.random_range(0..WORDS.len())].as_bytes().to_vec(),
        1 => (0..rng.random_range(0..40)).map(|_| rng.random()).collect(),
        2 => rng.random_range(-5i64..100_000).to_string().into_bytes(),
        3 => UNLOCK.as_bytes().to_vec(),
        4 => format!("fz:{}", rng.random_range(0..8)).into_bytes(),
        _ => vec![b'x'; rng.random_range(0..3000)],
    }
}

/// One random request, sometimes with its framing broken.
fn request(rng: &mut StdRng) -> Vec<u8> {
    let mut args: Vec<Vec<u8>> = vec![NAMES[rng.random_range(0..NAMES.len())].as_bytes().to_vec()];
    for _ in 0..rng.random_range(0..7) {
        args.push(arg(rng));
    }
    let parts: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    let mut wire = command(&parts).to_vec();
    match rng.random_range(0..12) {
        0 => wire.truncate(rng.random_range(0..wire.len())),
        1 => {
            let at = rng.random_range(0..wire.len());
            wire[at] = rng.random();
        }
        2 => wire = b"*1\r\n*1\r\n$1\r\na\r\n".to_vec(),
        3 => wire = b"*99999999999\r\n".to_vec(),
        4 => wire = format!("PING \"unbalanced {}\r\n", rng.random::<u32>()).into_bytes(),
        5 => wire = b"\x00\xff\r\n$-7\r\n".to_vec(),
        _ => {}
    }
    wire
}

/// The abuse probes of the hardening work, one per call, each on its own connection.
async fn probe(addr: &str, which: usize) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return;
    };
    let send = |parts: Vec<Vec<u8>>| {
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        command(&refs).to_vec()
    };
    let b = |s: &str| s.as_bytes().to_vec();
    let wire = match which % 10 {
        0 => send(vec![
            b("EVAL"),
            b("local t={} local c=t for i=1,7000 do local n={} c[1]=n c=n end c[1]=1 return t"),
            b("0"),
        ]),
        1 => send(vec![b("EVAL"), b("while true do end"), b("0")]),
        2 => send(vec![b("EVAL"), b("return redis.call('flushall')"), b("0")]),
        3 => {
            // A slow reader: a big ECHO, then a lock, never reading.
            let mut w = send(vec![b("ECHO"), vec![b'e'; 4 << 20]]);
            w.extend(send(vec![
                b("SET"),
                b("fz:victim"),
                b("t"),
                b("NX"),
                b("PX"),
                b("3000"),
            ]));
            w
        }
        4 => send(vec![b("EVAL"), "if(".repeat(150_000).into_bytes(), b("0")]),
        5 => {
            let mut parts = vec![b("DEL")];
            parts.extend((0..65_535).map(|i| format!("fz:many:{i}").into_bytes()));
            send(parts)
        }
        6 => b"POST / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        7 => send(vec![b("SET"), b("fz:kt"), b("v"), b("KEEPTTL")]),
        8 => {
            // Slowloris: a request trickled a byte at a time.
            let w = send(vec![
                b("SET"),
                b("fz:slow"),
                b("t"),
                b("NX"),
                b("PX"),
                b("1000"),
            ]);
            for byte in w {
                if s.write_all(&[byte]).await.is_err() {
                    return;
                }
                sleep(Duration::from_millis(2)).await;
            }
            Vec::new()
        }
        _ => {
            let mut w = Vec::new();
            for i in 0..300 {
                let body = format!("return {i} --{}", "s".repeat(2000));
                w.extend(send(vec![b("SCRIPT"), b("LOAD"), body.into_bytes()]));
            }
            w
        }
    };
    let _ = s.write_all(&wire).await;
    // Read a little (or not at all), then hang up.
    let mut buf = vec![0u8; 4096];
    let _ = timeout(Duration::from_millis(300), s.read(&mut buf)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_commands_broken_framing_and_abuse_never_hurt_the_proxy_or_a_locker() {
    let ms = masters(3);
    let backends: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let mut proxy = Proxy::start(&backends.join(","));
    let addr = proxy.addr.clone();
    for _ in 0..100 {
        if Client::try_connect(&addr).await.is_some() {
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    sleep(Duration::from_millis(300)).await;
    let seconds: u64 = std::env::var("FUZZ_LIVE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("FUZZ_LIVE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("FUZZ_LIVE_SEED={seed} FUZZ_LIVE_SECONDS={seconds}");
    let until = Instant::now() + Duration::from_secs(seconds);
    let stop = Arc::new(AtomicBool::new(false));

    // The background locker: its own key, every round within 2 s, no error.
    let rounds = Arc::new(AtomicU64::new(0));
    let refusals = Arc::new(AtomicU64::new(0));
    let locker = tokio::spawn({
        let (addr, stop, rounds, refusals) =
            (addr.clone(), stop.clone(), rounds.clone(), refusals.clone());
        async move {
            let mut c = Client::connect(&addr).await;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let token = format!("bg-{n}");
                let started = Instant::now();
                // Granted within 3 s: a refusal (a master too slow under this load) is retried
                // like any client would; an error reply or a hang fails the test.
                loop {
                    let got = timeout(
                        Duration::from_secs(2),
                        c.cmd(&["SET", "bg:lock", &token, "NX", "PX", "5000"]),
                    )
                    .await;
                    match got {
                        Ok(r) if r == Reply::ok() => break,
                        Ok(Reply::Nil) if started.elapsed() < Duration::from_secs(3) => {
                            refusals.fetch_add(1, Ordering::Relaxed);
                            sleep(Duration::from_millis(20)).await;
                        }
                        other => panic!("background lock round {n}: {other:?}"),
                    }
                }
                let got = timeout(
                    Duration::from_secs(2),
                    c.cmd(&["EVAL", UNLOCK, "1", "bg:lock", &token]),
                )
                .await;
                assert_eq!(got, Ok(Reply::Integer(1)), "background unlock round {n}");
                assert!(started.elapsed() < Duration::from_secs(5));
                rounds.fetch_add(1, Ordering::Relaxed);
                sleep(Duration::from_millis(10)).await;
            }
        }
    });

    // Random traffic from four connections.
    let mut drivers = Vec::new();
    for d in 0..4u64 {
        let addr = addr.clone();
        drivers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(d));
            let mut sent = 0u64;
            while Instant::now() < until {
                let Ok(mut s) = TcpStream::connect(&addr).await else {
                    sleep(Duration::from_millis(20)).await;
                    continue;
                };
                for _ in 0..rng.random_range(1..50) {
                    sent += 1;
                    if s.write_all(&request(&mut rng)).await.is_err() {
                        break;
                    }
                    if rng.random_range(0..4) == 0 {
                        let mut buf = vec![0u8; 65536];
                        let _ = timeout(Duration::from_millis(50), s.read(&mut buf)).await;
                    }
                }
            }
            sent
        }));
    }
    // The probes, in turn, with checks between them.
    let mut which = 0usize;
    let mut peak_kb = 0;
    while Instant::now() < until {
        probe(&addr, which).await;
        which += 1;
        assert!(proxy.alive(), "the proxy exited (probe {})", which - 1);
        let mut fresh = timeout(Duration::from_secs(1), Client::connect(&addr))
            .await
            .expect("a new client connects within 1 s");
        let pong = timeout(Duration::from_secs(1), fresh.raw(&["PING"])).await;
        assert_eq!(
            pong.as_deref(),
            Ok("+PONG\r\n"),
            "PING after probe {}",
            which - 1
        );
        peak_kb = peak_kb.max(proxy.rss_kb());
        assert!(
            peak_kb < 512 * 1024,
            "RSS {peak_kb} kB after probe {}",
            which - 1
        );
        sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for d in drivers {
        sent += d.await.unwrap();
    }
    locker.await.expect("the background locker saw no error");
    assert!(proxy.alive(), "the proxy exited");
    let _ = proxy.child.kill();
    let mut stderr = String::new();
    if let Some(mut e) = proxy.child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let _ = proxy.child.wait();
    assert!(!stderr.contains("panicked"), "{stderr}");
    println!(
        "FUZZ_LIVE: {sent} random requests, {which} probes, {} background lock rounds ({} refusals retried), peak RSS {peak_kb} kB",
        rounds.load(Ordering::Relaxed),
        refusals.load(Ordering::Relaxed)
    );
    assert!(rounds.load(Ordering::Relaxed) > 0);
}
