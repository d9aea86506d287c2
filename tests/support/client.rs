//! The tests' RESP client, which returns replies as exact wire bytes (or decoded, for tests that
//! compare values), and redis-cli.

use std::process::Command;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Reply, command};

/// A minimal RESP client. The plain methods panic on any failure (the test is over); the
/// `try_` ones report it, for clients of proxies that die during the test.
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

    /// Reads one complete reply (RESP2 or RESP3) and returns its exact bytes; empty when the
    /// peer has closed the connection.
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
        let parts: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd_bytes(&parts).await
    }

    /// [`Client::cmd`] with arguments that may be any bytes.
    pub async fn cmd_bytes(&mut self, args: &[&[u8]]) -> Reply {
        self.send_raw(&command(args)).await;
        let raw = self.read_raw().await;
        decode(&raw)
            .unwrap_or_else(|| panic!("undecodable reply {:?}", String::from_utf8_lossy(&raw)))
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

    /// Sends raw bytes; false when the connection has failed.
    pub async fn try_send_raw(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// One reply's exact bytes; `None` when the connection closes or fails, or no whole reply
    /// comes within `within`.
    pub async fn try_read(&mut self, within: Duration) -> Option<Vec<u8>> {
        tokio::time::timeout(within, async {
            loop {
                if let Some(n) = frame_len(&self.buf) {
                    return Some(self.buf.split_to(n).to_vec());
                }
                if self.stream.read_buf(&mut self.buf).await.ok()? == 0 {
                    return None;
                }
            }
        })
        .await
        .ok()?
    }

    /// One command and its decoded reply; `None` on any failure or when the reply does not come
    /// within `within`.
    pub async fn try_cmd(&mut self, args: &[&str], within: Duration) -> Option<Reply> {
        let parts: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        tokio::time::timeout(within, async {
            if !self.try_send_raw(&command(&parts)).await {
                return None;
            }
            decode(&self.try_read(within).await?)
        })
        .await
        .ok()?
    }
}

/// Decodes one whole RESP2 reply.
fn decode(raw: &[u8]) -> Option<Reply> {
    let mut b = BytesMut::from(raw);
    match redis_protocol::resp2::decode::decode_bytes_mut(&mut b) {
        Ok(Some((f, _, _))) => Some(reply_of(f)),
        _ => None,
    }
}

/// The proxy's reply value for a frame decoded by `redis-protocol`, the independent reference
/// decoder the tests read the proxy's answers with.
pub fn reply_of(frame: redis_protocol::resp2::types::BytesFrame) -> Reply {
    use redis_protocol::resp2::types::BytesFrame;
    match frame {
        BytesFrame::SimpleString(s) => Reply::Simple(s),
        BytesFrame::Error(e) => Reply::Error(e.into_inner()),
        BytesFrame::Integer(i) => Reply::Integer(i),
        BytesFrame::BulkString(b) => Reply::Bulk(b),
        BytesFrame::Array(items) => Reply::Array(items.into_iter().map(reply_of).collect()),
        BytesFrame::Null => Reply::Nil,
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

/// Runs `redis-cli -h 127.0.0.1 -p <port> --no-auth-warning <args>` (options, then the
/// command) and returns what it printed, its output then its errors, trimmed: what a user sees.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--no-auth-warning",
        ])
        .args(args)
        .output()
        .expect("redis-cli must be installed (scripts/deps.sh test installs it)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.trim().to_string()
}

/// A client connected to `addr` and subscribed to `channel`, its confirmation read (panics
/// when none comes within 10 s).
pub async fn subscribed(addr: &str, channel: &str) -> Client {
    let mut sub = Client::connect(addr).await;
    sub.send(&["SUBSCRIBE", channel]).await;
    let confirm = sub
        .try_read(Duration::from_secs(10))
        .await
        .expect("confirmed");
    assert!(String::from_utf8_lossy(&confirm).contains("subscribe"));
    sub
}

/// Publishes `channel payload-<n>` on `node` directly, again every 200 ms, until `sub` (a
/// client subscribed to `channel` through the proxy) receives one of them, or panics after
/// `within`.
pub async fn published_on_reaches(node: &str, sub: &mut Client, channel: &str, within: Duration) {
    let until = tokio::time::Instant::now() + within;
    let mut direct: Option<Client> = None;
    for n in 0.. {
        assert!(
            tokio::time::Instant::now() < until,
            "nothing published on {node} reached the subscriber within {within:?}"
        );
        if direct.is_none() {
            direct = Client::try_connect(node).await;
        }
        if let Some(d) = direct.as_mut() {
            let payload = format!("{node}-{n}");
            if d.try_cmd(&["PUBLISH", channel, &payload], Duration::from_secs(2))
                .await
                .is_none()
            {
                direct = None;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
        while let Some(left) = deadline.checked_duration_since(tokio::time::Instant::now()) {
            match sub.try_read(left).await {
                Some(m) if String::from_utf8_lossy(&m).contains(&format!("{node}-")) => return,
                Some(_) => {}
                None => break,
            }
        }
    }
}
