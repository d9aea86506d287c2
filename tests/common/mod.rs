//! Test harness shared by the integration tests: real `redis-server` masters on free ports, the
//! proxy in-process on port 0, and a small RESP client that returns exact wire replies.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::BytesMut;
use redlock_proxy::config::Config;
use redlock_proxy::wire::{master::command, reply::Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A real `redis-server` on a free loopback port, killed on drop.
pub struct Master {
    pub port: u16,
    child: Option<Child>,
    extra: Vec<String>,
}

impl Master {
    /// Starts a master with no persistence.
    pub fn start() -> Master {
        Master::start_with(&[])
    }

    /// Starts a master with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Master {
        for _ in 0..10 {
            let port = redlock_proxy::dev::free_port().expect("free port");
            let mut m = Master {
                port,
                child: None,
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            if m.spawn() {
                return m;
            }
        }
        panic!("could not start redis-server");
    }

    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    /// SIGKILL: the master dies without a word.
    pub fn kill(&mut self) {
        self.signal("-KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    /// Starts again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.spawn(), "restart on port {} failed", self.port);
    }

    /// SIGSTOP: the master stops answering but keeps its connections.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// A direct client to this master (bypassing the proxy).
    pub async fn client(&self) -> Client {
        Client::connect(&self.addr()).await
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

/// Starts `n` masters.
pub fn masters(n: usize) -> Vec<Master> {
    (0..n).map(|_| Master::start()).collect()
}

/// Proxy configuration for tests: generous node timeout (CI machines are noisy) and fast
/// reconnects. Restart quarantine is off: these masters start empty a moment before the proxy,
/// and with it on they would sit out `max_ttl_ms` first (tests/faults.rs switches it on).
pub fn config_for(masters: &[&str]) -> Config {
    let mut c = Config {
        backends: masters.iter().map(|s| s.to_string()).collect(),
        ..Config::default()
    };
    c.node_timeout_ms = 200;
    c.reconnect_min_ms = 10;
    c.reconnect_max_ms = 100;
    c.quarantine = false;
    c
}

/// Runs the proxy in this test's runtime on a free port; returns its address once every
/// reachable master is connected.
pub async fn proxy(config: Config) -> SocketAddr {
    config.validate().expect("valid test config");
    let password = config.password.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(redlock_proxy::server::serve(listener, config));
    // Wait until the proxy reports its masters up (or give up after a while; some tests start
    // it with masters down on purpose).
    let mut c = Client::connect(&addr.to_string()).await;
    if let Some(p) = password {
        c.cmd(&["AUTH", &p]).await;
    }
    for _ in 0..100 {
        let info = c.text(&["INFO", "redlock"]).await;
        let up = field(&info, "masters_up");
        let all = field(&info, "masters");
        if up == all {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    addr
}

/// A proxy in front of `masters` with the test defaults.
pub async fn proxy_for(masters: &[Master]) -> SocketAddr {
    let addrs: Vec<String> = masters.iter().map(|m| m.addr()).collect();
    let refs: Vec<&str> = addrs.iter().map(|s| s.as_str()).collect();
    proxy(config_for(&refs)).await
}

/// Reads `field:value` from INFO text.
pub fn field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// A minimal RESP client that returns replies as exact wire bytes.
pub struct Client {
    stream: TcpStream,
    buf: BytesMut,
}

impl Client {
    /// Connects to `addr`.
    pub async fn connect(addr: &str) -> Client {
        Client::try_connect(addr).await.expect("connect")
    }

    /// Connects to `addr`, or `None` when nothing listens there.
    pub async fn try_connect(addr: &str) -> Option<Client> {
        let stream = TcpStream::connect(addr).await.ok()?;
        stream.set_nodelay(true).ok()?;
        Some(Client {
            stream,
            buf: BytesMut::new(),
        })
    }

    /// Sends raw bytes.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Sends one command without waiting for the reply.
    pub async fn send(&mut self, args: &[&str]) {
        let parts: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send_raw(&command(&parts)).await;
    }

    /// Reads one complete reply (RESP2 or RESP3) and returns its exact bytes.
    pub async fn read_raw(&mut self) -> Vec<u8> {
        loop {
            if let Some(n) = frame_len(&self.buf) {
                return self.buf.split_to(n).to_vec();
            }
            let read =
                tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("reply within 10 s")
                    .expect("read");
            if read == 0 {
                return Vec::new();
            }
        }
    }

    /// Sends a command and returns the exact reply bytes as a string (lossy).
    pub async fn raw(&mut self, args: &[&str]) -> String {
        self.send(args).await;
        String::from_utf8_lossy(&self.read_raw().await).into_owned()
    }

    /// Sends a RESP2 command and decodes the reply.
    pub async fn cmd(&mut self, args: &[&str]) -> Reply {
        self.send(args).await;
        let raw = self.read_raw().await;
        let mut b = BytesMut::from(&raw[..]);
        match redis_protocol::resp2::decode::decode_bytes_mut(&mut b) {
            Ok(Some((f, _, _))) => Reply::from_resp2(f),
            other => panic!(
                "undecodable reply {:?}: {other:?}",
                String::from_utf8_lossy(&raw)
            ),
        }
    }

    /// A command whose reply is a bulk string, as text.
    pub async fn text(&mut self, args: &[&str]) -> String {
        match self.cmd(args).await {
            Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("expected bulk reply to {args:?}, got {other:?}"),
        }
    }

    /// True when the peer has closed the connection.
    pub async fn closed(&mut self) -> bool {
        self.read_raw().await.is_empty()
    }

    /// Tells the server that nothing more will be sent (a half-close), and keeps reading.
    pub async fn shutdown_write(&mut self) {
        self.stream.shutdown().await.expect("shutdown");
    }
}

/// Length of the first complete RESP2/RESP3 frame in `buf`, if complete.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let nl = buf.iter().position(|&c| c == b'\n')?;
    let head = std::str::from_utf8(&buf[1..nl.saturating_sub(1)]).ok()?;
    match buf[0] {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Some(nl + 1),
        b'$' | b'=' | b'!' => {
            let n: i64 = head.parse().ok()?;
            if n < 0 {
                return Some(nl + 1);
            }
            let end = nl + 1 + n as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let n: i64 = head.parse().ok()?;
            let items = if buf[0] == b'%' || buf[0] == b'|' {
                2 * n
            } else {
                n
            };
            let mut pos = nl + 1;
            for _ in 0..items.max(0) {
                pos += frame_len(&buf[pos..])?;
            }
            Some(pos)
        }
        _ => Some(nl + 1),
    }
}

/// The compare-and-delete unlock script as hand-written code sends it.
pub const UNLOCK: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// Values of `key` on each master (None = missing or unreachable).
pub async fn values_on(masters: &[Master], key: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for m in masters {
        let v = match tokio::time::timeout(Duration::from_secs(1), async {
            let mut c = Client::try_connect(&m.addr()).await?;
            Some(c.cmd(&["GET", key]).await)
        })
        .await
        {
            Ok(Some(Reply::Bulk(b))) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        };
        out.push(v);
    }
    out
}
