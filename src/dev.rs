//! Dev mode: start a few throw-away local `redis-server` masters for the proxy to use.
//!
//! Each master listens on a free loopback port, keeps nothing on disk, and is killed when the
//! proxy exits (the child handles are kill-on-drop).

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// Running local masters; dropping this kills them.
pub struct DevMasters {
    /// Their `127.0.0.1:port` addresses.
    pub addrs: Vec<String>,
    _children: Vec<Child>,
}

/// A port that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts `n` masters and waits until each accepts connections.
pub async fn start(n: usize) -> anyhow::Result<DevMasters> {
    let mut addrs = Vec::new();
    let mut children = Vec::new();
    for _ in 0..n {
        let port = free_port()?.to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start redis-server (install it: apt-get install redis-server, or run scripts/dev.sh)")?;
        children.push(child);
        addrs.push(format!("127.0.0.1:{port}"));
    }
    for addr in &addrs {
        let mut ready = false;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !ready {
            bail!("local master {addr} did not start");
        }
    }
    Ok(DevMasters {
        addrs,
        _children: children,
    })
}
