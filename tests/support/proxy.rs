//! The proxy under test: in this test's runtime on port 0 (most tests), or the real binary as a
//! child process (for what only a process shows: exit codes, signals, logs, the command line,
//! a crash); and reading its view of the masters from `INFO`.

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::sleep;

use super::partition::User;
use super::{Client, Config, Master, Scratch, free_port, serve};

/// The masters' addresses.
pub fn addrs(ms: &[Master]) -> Vec<String> {
    ms.iter().map(Master::addr).collect()
}

/// Proxy configuration for tests: generous node timeout (CI machines are noisy) and fast
/// reconnects. Restart quarantine is off: these masters start empty a moment before the proxy,
/// and with it on they would sit out `max_ttl_ms` first (tests/faults.rs switches it on).
pub fn config_for<S: AsRef<str>>(backends: &[S]) -> Config {
    let mut c = Config {
        backends: backends.iter().map(|s| s.as_ref().to_string()).collect(),
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
    tokio::spawn(serve(listener, config));
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
    proxy(config_for(&addrs(masters))).await
}

/// A proxy in front of `masters` with the test defaults changed by `edit`; its address.
pub async fn proxy_with(masters: &[Master], edit: impl FnOnce(&mut Config)) -> String {
    let mut c = config_for(&addrs(masters));
    edit(&mut c);
    proxy(c).await.to_string()
}

/// Reads `field:value` from INFO text.
pub fn field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or("")
        .trim()
        .to_string()
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

/// The `redlock-proxy` binary, to run with arguments.
pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_redlock-proxy"))
}

/// The settings every [`ProxyProcess`] gets unless its own settings give them: those of
/// [`config_for`], with slower reconnects.
const PROCESS_DEFAULTS: [(&str, &str); 4] = [
    ("quarantine", "false"),
    ("reconnect_min_ms", "20"),
    ("reconnect_max_ms", "200"),
    ("node_timeout_ms", "200"),
];

/// The configuration file of a [`ProxyProcess`] listening on `addr`.
fn config_file(addr: &str, backends: &[String], settings: &str) -> String {
    let list: Vec<String> = backends.iter().map(|b| format!("{b:?}")).collect();
    // A default gives way to the same key in `settings`.
    let given = |key: &str| {
        settings
            .lines()
            .any(|l| l.split_once('=').is_some_and(|(k, _)| k.trim() == key))
    };
    let mut config = String::new();
    if !given("listen") {
        config += &format!("listen = {addr:?}\n");
    }
    config += &format!("backends = [{}]\n", list.join(", "));
    for (key, value) in PROCESS_DEFAULTS {
        if !given(key) {
            config += &format!("{key} = {value}\n");
        }
    }
    config += settings;
    config += "\n";
    config
}

/// The real binary with a config file, its stdout and stderr in files; killed on drop.
pub struct ProxyProcess {
    pub addr: String,
    child: Child,
    dir: Scratch,
    /// The settings it was started with, kept when its file is rewritten.
    settings: String,
}

impl ProxyProcess {
    /// Starts the proxy in front of `backends` with `settings` (TOML lines) and environment
    /// `env`.
    pub fn start(backends: &[String], settings: &str, env: &[(&str, &str)]) -> ProxyProcess {
        ProxyProcess::launch(backends, settings, env, &[])
    }

    /// Like [`ProxyProcess::start`], run through `wrapper` (such as `prlimit --nofile=...`).
    /// Settings may set `listen` themselves (`listen = ""` for TLS only) and replace any of the
    /// test defaults; `[[users]]` tables go last.
    pub fn launch(
        backends: &[String],
        settings: &str,
        env: &[(&str, &str)],
        wrapper: &[&str],
    ) -> ProxyProcess {
        ProxyProcess::launch_as(backends, settings, env, wrapper, None)
    }

    /// [`ProxyProcess::start`], the process running as `user` (see [`super::partition`]).
    pub fn start_as(user: User, backends: &[String], settings: &str) -> ProxyProcess {
        ProxyProcess::launch_as(backends, settings, &[], &[], Some(user))
    }

    fn launch_as(
        backends: &[String],
        settings: &str,
        env: &[(&str, &str)],
        wrapper: &[&str],
        user: Option<User>,
    ) -> ProxyProcess {
        let dir = Scratch::new("proxy");
        let addr = format!("127.0.0.1:{}", free_port());
        let config = config_file(&addr, backends, settings);
        std::fs::write(dir.path("proxy.toml"), config).expect("config");
        let stderr = std::fs::File::create(dir.path("stderr.log")).expect("log file");
        let stdout = std::fs::File::create(dir.path("stdout.log")).expect("log file");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(env!("CARGO_BIN_EXE_redlock-proxy"));
                c
            }
            None => binary(),
        };
        if let Some(u) = user {
            use std::os::unix::process::CommandExt;
            cmd.uid(u.uid).gid(u.gid);
        }
        let child = cmd
            .args(["--config", &dir.path("proxy.toml")])
            .env_remove("RUST_LOG")
            .env_remove("REDLOCK_BACKEND_PASSWORD")
            .envs(env.iter().copied())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start redlock-proxy");
        ProxyProcess {
            addr,
            child,
            dir,
            settings: settings.to_string(),
        }
    }

    /// Rewrites its configuration file with `backends` in place of the masters it had (the
    /// same settings otherwise), for a `SIGHUP` to pick up.
    pub fn rewrite(&self, backends: &[String]) {
        let config = config_file(&self.addr, backends, &self.settings);
        self.write_config(&config);
    }

    /// Replaces its configuration file with `text`.
    pub fn write_config(&self, text: &str) {
        std::fs::write(self.dir.path("proxy.toml"), text).expect("config");
    }

    /// A client, once the proxy listens (at most 5 s).
    pub async fn client(&self) -> Client {
        for _ in 0..250 {
            if let Some(c) = Client::try_connect(&self.addr).await {
                return c;
            }
            sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "redlock-proxy did not start on {}: {}",
            self.addr,
            self.stderr()
        );
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    }

    /// Waits until the proxy listens (at most 5 s).
    pub async fn wait_listening(&self) {
        self.client().await;
    }

    /// `INFO redlock` once `masters_up` reaches `up` (or after 5 s, for the caller to judge).
    pub async fn info_when_up(&self, up: usize) -> String {
        let mut c = self.client().await;
        let mut info = String::new();
        for _ in 0..250 {
            info = c.text(&["INFO", "redlock"]).await;
            if field(&info, "masters_up") == up.to_string() {
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        info
    }

    /// `INFO redlock` now.
    pub async fn info(&self) -> String {
        self.client().await.text(&["INFO", "redlock"]).await
    }

    /// What the proxy has logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path("stderr.log")).unwrap_or_default()
    }

    /// What the proxy has printed to stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path("stdout.log")).unwrap_or_default()
    }

    /// Sends the proxy a signal, by name (`TERM`, `HUP`...).
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok);
    }

    /// Waits for the proxy to exit, at most `within`; its exit code.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let until = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process's resident memory, in kB (0 once it has gone).
    pub fn rss_kb(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// SIGKILL, and waits for the process to go.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
