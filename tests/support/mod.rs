//! The fixture every integration test uses: real `redis-server` masters on free ports, the proxy
//! in this test's runtime on port 0 (or the real binary, for the tests that need a process), one
//! small RESP client that returns exact wire replies, redis-cli, and for the fault suite a TCP
//! fault proxy and a lock load with its checkers.
//!
//! Every path into the library goes through this module (the re-exports below and the few
//! helpers under them), so a change to the library's module layout is this file's business.
//!
//! # Layout
//! - [`master`]: `redis-server` processes (plain, with a password or ACL users, TLS) and a master
//!   whose wall clock the test can move; values read straight from the masters.
//! - [`client`]: the RESP client (the only one), and redis-cli.
//! - [`proxy`]: the proxy in-process ([`proxy`], [`proxy_for`], [`proxy_with`]) or as the binary
//!   ([`ProxyProcess`], [`binary`]); reading its `INFO`.
//! - [`differential`]: the same steps on one redis-server and through the proxy.
//! - [`cluster`]: real Redis Clusters (six nodes, three primaries with a replica each) and
//!   their faults: a primary killed and its replica promoted, a slot range resharded.
//! - [`sentinel`]: real `redis-sentinel` processes and a rig of three Sentinel members (a
//!   primary and a replica each), the proxy settings the Sentinel tests share.
//! - [`tls`]: scratch folders, and the certificates the TLS tests use.
//! - [`fault`]: a TCP fault proxy to put between the proxy and a master.
//! - [`partition`]: real loopback TCP links between chosen processes cut and healed with
//!   iptables, each process running as a Unix user of its own.
//! - [`load`]: many lock clients on a few contended resources, two checkers of mutual exclusion,
//!   and the fault suite's figures.
// Each test binary uses a part of the fixture, so the rest of it is dead code there (and the
// re-exports below are marked as allowed to go unused).
#![allow(dead_code)]

pub mod client;
pub mod cluster;
pub mod differential;
pub mod fault;
pub mod load;
pub mod master;
pub mod partition;
pub mod proxy;
pub mod sentinel;
pub mod tls;

use std::path::PathBuf;

#[allow(unused_imports)]
pub use client::{Client, published_on_reaches, redis_cli, subscribed};
#[allow(unused_imports)]
pub use cluster::RedisCluster;
#[allow(unused_imports)]
pub use differential::{differential, differential_on, now_ms, step_args};
#[allow(unused_imports)]
pub use master::{ClockMaster, Master, masters, server_binary, valkey_server, values_on};
#[allow(unused_imports)]
pub use proxy::{
    ProxyProcess, addrs, binary, config_for, field, master_status, proxy, proxy_for, proxy_with,
    redlock_info, wait_status, wait_trusted,
};
#[allow(unused_imports)]
pub use tls::{Certs, Scratch};

// The library, as the tests see it.
#[allow(unused_imports)]
pub use redlock_proxy::config::{Config, LegacyDecision, ScriptDecl, UnknownScripts};
#[allow(unused_imports)]
pub use redlock_proxy::lockop::{Answer, Op};
#[allow(unused_imports)]
pub use redlock_proxy::quorum::quorum;
#[allow(unused_imports)]
pub use redlock_proxy::wire::{master::command, reply::Reply};
// The in-process proxy's entry point, for [`proxy`].
use redlock_proxy::server::serve;

/// A free loopback port.
///
/// Taken below the kernel's ephemeral range (32768 and up on Linux), in turn from an offset
/// that depends on the process: a port that the kernel hands to a `bind(0)` meanwhile (a proxy
/// listening on port 0, any client socket) can then never be the one given here too, which
/// once made a proxy's metrics listener fail to bind and the proxy close.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id().wrapping_mul(7_919)) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    redlock_proxy::dev::free_port().expect("free port")
}

/// Whether process `pid` itself listens on TCP `port` (any local address).
///
/// A connect alone can reach another process: two test processes may pick the same free port
/// at once, and the server started second then exits on its failed bind while a connect
/// still succeeds, to the first one's server, which later goes away. So a fixture waits for
/// its own child's listening socket: the socket inodes listening on `port` in
/// `/proc/net/tcp{,6}` against the inodes of `/proc/<pid>/fd`.
pub fn listens(pid: u32, port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() > 9 && f[1].ends_with(&suffix) && f[3] == "0A" {
                inodes.push(format!("socket:[{}]", f[9]));
            }
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

/// `GET path` over HTTP/1.1 to the metrics listener at `addr`, one request on the connection,
/// with optional extra header lines (each ending in `\r\n`); returns (status line, body).
pub async fn http_get(addr: &str, path: &str, headers: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("metrics listener");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}\r\n")
            .as_bytes(),
    )
    .await
    .expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("answer within 10 s")
        .expect("read");
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The SHA1 of a script's text, as `SCRIPT LOAD` answers it.
pub fn sha1(text: &str) -> String {
    redlock_proxy::scripts::sha1_hex(text.as_bytes())
}

/// The compare-and-delete unlock script as hand-written code sends it.
pub const UNLOCK: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// A lock library's script, byte for byte, from `tests/clients/lua/<name>.lua`.
pub fn lua(name: &str) -> String {
    let path = clients_dir().join(format!("lua/{name}.lua"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `tests/clients`: the real client libraries and our drivers for them.
pub fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The Python that has redis-py and the other Python libraries (`tests/clients/.venv`).
pub fn python() -> PathBuf {
    let p = clients_dir().join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/deps.sh test (it installs redis-py)",
        p.display()
    );
    p
}

/// `node tests/clients/<script>`, once the npm packages are there (`tests/clients/node_modules`).
pub fn node_script(script: &str) -> tokio::process::Command {
    let modules = clients_dir().join("node_modules/redlock");
    assert!(
        modules.exists(),
        "{} is missing: run scripts/deps.sh test (it runs npm ci)",
        modules.display()
    );
    let mut c = tokio::process::Command::new("node");
    c.arg(clients_dir().join(script));
    c
}

/// Shows the in-process proxies' logs when `RLP_LOG` holds a tracing filter (e.g.
/// `RLP_LOG=info`).
pub fn init_logs() {
    if let Ok(filter) = std::env::var("RLP_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}
