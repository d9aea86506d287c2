//! Dev mode: start a few throw-away local `redis-server` masters for the proxy to use.
//!
//! Each master listens on a free loopback port, keeps nothing on disk, and is killed when the
//! proxy exits (the child handles are kill-on-drop).

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// Running local masters; dropping this kills them and removes their folder.
pub struct DevMasters {
    /// Their `127.0.0.1:port` addresses.
    pub addrs: Vec<String>,
    /// Their working folder, `redlock-proxy-dev-<pid>` in the temp folder.
    pub dir: std::path::PathBuf,
    _children: Vec<Child>,
}

impl Drop for DevMasters {
    fn drop(&mut self) {
        for c in &mut self._children {
            let _ = c.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts `n` masters and waits until each accepts connections.
pub async fn start(n: usize) -> anyhow::Result<DevMasters> {
    let mut masters = DevMasters {
        addrs: Vec::new(),
        dir: std::env::temp_dir().join(format!("redlock-proxy-dev-{}", std::process::id())),
        _children: Vec::new(),
    };
    std::fs::create_dir_all(&masters.dir).context("cannot create the dev masters' folder")?;
    let dir = masters.dir.to_string_lossy().into_owned();
    for _ in 0..n {
        let port = free_port()?.to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", &dir])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start redis-server (install it: apt-get install redis-server, or run scripts/dev.sh)")?;
        masters._children.push(child);
        masters.addrs.push(format!("127.0.0.1:{port}"));
    }
    for addr in &masters.addrs {
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
    Ok(masters)
}
