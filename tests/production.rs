//! Running it in production: masters that require a password, an ACL user or TLS (with and
//! without client certificates), the refusals an operator must see, and secrets that never
//! leak. The real binary runs with its stderr in a file, so its log lines are checked as an
//! operator would read them. Certificates are made by the test with the openssl CLI.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::{Client, field};
use tokio::time::sleep;

const UNLOCK: &str = common::UNLOCK;

/// A scratch directory under the system's temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "redlock-production-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl CLI (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two authorities: `ca` signs the masters' certificate (for 127.0.0.1 and localhost) and the
/// proxy's client certificate; `other` signs a client certificate no master trusts.
struct Certs {
    dir: Scratch,
}

impl Certs {
    fn get() -> &'static Certs {
        static CERTS: OnceLock<Certs> = OnceLock::new();
        CERTS.get_or_init(|| {
            let dir = Scratch::new("certs");
            let d = &dir.0;
            let ec = [
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
            ];
            for ca in ["ca", "other"] {
                let key = format!("{ca}.key");
                let crt = format!("{ca}.crt");
                let subj = format!("/CN=redlock test {ca}");
                let mut a = vec!["req", "-x509"];
                a.extend(ec);
                a.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]);
                openssl(d, &a);
            }
            std::fs::write(
                d.join("server.ext"),
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
            )
            .expect("ext");
            std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
            for (name, ca, ext) in [
                ("server", "ca", "server.ext"),
                ("client", "ca", "client.ext"),
                ("stranger", "other", "client.ext"),
            ] {
                let key = format!("{name}.key");
                let csr = format!("{name}.csr");
                let crt = format!("{name}.crt");
                let subj = format!("/CN={name}");
                let mut a = vec!["req"];
                a.extend(ec);
                a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
                openssl(d, &a);
                let ca_crt = format!("{ca}.crt");
                let ca_key = format!("{ca}.key");
                openssl(
                    d,
                    &[
                        "x509",
                        "-req",
                        "-in",
                        &csr,
                        "-CA",
                        &ca_crt,
                        "-CAkey",
                        &ca_key,
                        "-CAcreateserial",
                        "-out",
                        &crt,
                        "-days",
                        "2",
                        "-extfile",
                        ext,
                    ],
                );
            }
            Certs { dir }
        })
    }

    fn file(&self, name: &str) -> String {
        self.dir.path(name)
    }
}

/// A `redis-server` with its own arguments (password, ACL user, TLS), killed on drop.
struct Redis {
    port: u16,
    tls: bool,
    child: Child,
}

impl Redis {
    fn plain(extra: &[&str]) -> Redis {
        Redis::start(false, extra)
    }

    /// TLS only (`--port 0`); `--tls-auth-clients` as given.
    fn tls(auth_clients: bool, extra: &[&str]) -> Redis {
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
        Redis::start(true, &args)
    }

    fn start(tls: bool, extra: &[&str]) -> Redis {
        for _ in 0..10 {
            let port = redlock_proxy::dev::free_port().expect("free port");
            let p = port.to_string();
            let ports: [&str; 4] = if tls {
                ["--port", "0", "--tls-port", &p]
            } else {
                ["--port", &p, "--tls-port", "0"]
            };
            let mut child = Command::new("redis-server")
                .args(ports)
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (scripts/test.sh installs it)");
            for _ in 0..200 {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    // Redis listens before it loads its ACL users, and exits if they are bad.
                    std::thread::sleep(Duration::from_millis(50));
                    if let Ok(None) = child.try_wait() {
                        return Redis { port, tls, child };
                    }
                    break;
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start redis-server {extra:?}");
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this master as `auth` (user, password), over TLS with the
    /// proxy's client certificate when the master is TLS.
    fn cli(&self, auth: (&str, &str), args: &[&str]) -> String {
        let c = Certs::get();
        let mut cmd = Command::new("redis-cli");
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "--no-auth-warning",
        ]);
        if !auth.0.is_empty() {
            cmd.args(["--user", auth.0]);
        }
        if !auth.1.is_empty() {
            cmd.args(["--pass", auth.1]);
        }
        if self.tls {
            cmd.args(["--tls", "--cacert", &c.file("ca.crt")]);
            cmd.args([
                "--cert",
                &c.file("client.crt"),
                "--key",
                &c.file("client.key"),
            ]);
        }
        let out = cmd.args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real binary with a config file, its stderr in a file; killed on drop.
struct Proxy {
    addr: String,
    child: Child,
    dir: Scratch,
}

impl Proxy {
    /// Starts the proxy with `settings` (TOML lines) and environment `env`.
    fn start(backends: &[String], settings: &str, env: &[(&str, &str)]) -> Proxy {
        let dir = Scratch::new("proxy");
        let port = redlock_proxy::dev::free_port().expect("free port");
        let addr = format!("127.0.0.1:{port}");
        let list: Vec<String> = backends.iter().map(|b| format!("{b:?}")).collect();
        let config = format!(
            "listen = {addr:?}\nbackends = [{}]\nquarantine = false\nreconnect_min_ms = 20\n\
             reconnect_max_ms = 200\nnode_timeout_ms = 200\n{settings}\n",
            list.join(", ")
        );
        std::fs::write(dir.0.join("proxy.toml"), config).expect("config");
        let stderr = std::fs::File::create(dir.0.join("stderr.log")).expect("log file");
        let stdout = std::fs::File::create(dir.0.join("stdout.log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_redlock-proxy"))
            .args(["--config", &dir.path("proxy.toml")])
            .env_remove("RUST_LOG")
            .env_remove("REDLOCK_BACKEND_PASSWORD")
            .envs(env.iter().copied())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start redlock-proxy");
        Proxy { addr, child, dir }
    }

    async fn client(&self) -> Client {
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

    /// `INFO redlock` once `masters_up` reaches `up` (or after 5 s, for the caller to judge).
    async fn info_when_up(&self, up: usize) -> String {
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
    async fn info(&self) -> String {
        self.client().await.text(&["INFO", "redlock"]).await
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("stderr.log")).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("stdout.log")).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A lock is granted, refused to another holder, and released, with Redis's exact replies.
async fn locks_work(proxy: &Proxy, key: &str) {
    let mut c = proxy.client().await;
    assert_eq!(
        c.raw(&["SET", key, "tok-1", "NX", "PX", "10000"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        c.raw(&["SET", key, "tok-2", "NX", "PX", "10000"]).await,
        "$-1\r\n"
    );
    assert_eq!(c.raw(&["EVAL", UNLOCK, "1", key, "tok-1"]).await, ":1\r\n");
}

fn addrs(ms: &[Redis]) -> Vec<String> {
    ms.iter().map(Redis::addr).collect()
}

/// Asserts that none of `secrets` shows in the proxy's logs or `INFO` (every section).
async fn nothing_leaks(proxy: &Proxy, secrets: &[&str]) {
    let mut c = proxy.client().await;
    let info = c.text(&["INFO", "everything"]).await;
    let config = c.raw(&["CONFIG", "GET", "*"]).await;
    let logs = proxy.stderr() + &proxy.stdout();
    for s in secrets {
        assert!(!info.contains(s), "{s} in INFO:\n{info}");
        assert!(!config.contains(s), "{s} in CONFIG GET:\n{config}");
        assert!(!logs.contains(s), "{s} in the logs:\n{logs}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_with_requirepass_grant_locks_with_the_password_from_a_file() {
    let ms: Vec<Redis> = (0..3)
        .map(|_| Redis::plain(&["--requirepass", "file-secret-41"]))
        .collect();
    let scratch = Scratch::new("pw");
    std::fs::write(scratch.0.join("pw"), "file-secret-41\n").expect("password file");
    let proxy = Proxy::start(
        &addrs(&ms),
        &format!("backend_password_file = {:?}", scratch.path("pw")),
        &[],
    );
    let info = proxy.info_when_up(3).await;
    assert_eq!(
        field(&info, "masters_up"),
        "3",
        "{info}\n{}",
        proxy.stderr()
    );
    locks_work(&proxy, "lock:pw").await;
    let mut c = proxy.client().await;
    assert_eq!(
        c.raw(&["SET", "lock:held", "v1", "NX", "PX", "10000"])
            .await,
        "+OK\r\n"
    );
    for m in &ms {
        assert_eq!(m.cli(("", "file-secret-41"), &["GET", "lock:held"]), "v1");
        // Negative control: the master does require the password.
        assert!(m.cli(("", ""), &["GET", "lock:held"]).contains("NOAUTH"));
    }
    nothing_leaks(&proxy, &["file-secret-41"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_from_a_url_or_from_settings_and_the_environment() {
    // The default user is off: only `locker` can do anything.
    let acl = [
        "--user",
        "default",
        "off",
        "--user",
        "locker",
        "on",
        ">acl-secret-42",
        "~*",
        "+@all",
    ];
    let ms: Vec<Redis> = (0..3).map(|_| Redis::plain(&acl)).collect();
    let urls: Vec<String> = ms
        .iter()
        .map(|m| format!("redis://locker:acl-secret-42@{}", m.addr()))
        .collect();
    let by_url = Proxy::start(&urls, "", &[]);
    let by_env = Proxy::start(
        &addrs(&ms),
        "backend_user = \"locker\"",
        &[("REDLOCK_BACKEND_PASSWORD", "acl-secret-42")],
    );
    for (proxy, key) in [(&by_url, "lock:url"), (&by_env, "lock:env")] {
        let info = proxy.info_when_up(3).await;
        assert_eq!(
            field(&info, "masters_up"),
            "3",
            "{info}\n{}",
            proxy.stderr()
        );
        locks_work(proxy, key).await;
        nothing_leaks(proxy, &["acl-secret-42"]).await;
    }
    // The URL is shown in the start-up line without its password.
    assert!(
        by_url.stderr().contains(&ms[0].addr()),
        "{}",
        by_url.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_or_a_user_without_rights_keeps_the_master_down_and_says_why() {
    let good = Redis::plain(&["--requirepass", "right-secret-43"]);
    let good2 = Redis::plain(&["--requirepass", "right-secret-43"]);
    let wrong = Redis::plain(&["--requirepass", "right-secret-43"]);
    // An ACL user that may not run INFO (which the handshake needs).
    let limited = Redis::plain(&[
        "--user",
        "limited",
        "on",
        ">right-secret-43",
        "~*",
        "+@all",
        "-info",
    ]);
    let backends = vec![
        good.addr(),
        good2.addr(),
        format!("redis://:wrong-secret-44@{}", wrong.addr()),
        format!("redis://limited:right-secret-43@{}", limited.addr()),
    ];
    let proxy = Proxy::start(&backends, "backend_password = \"right-secret-43\"", &[]);
    let info = proxy.info_when_up(2).await;
    assert_eq!(
        field(&info, "masters_up"),
        "2",
        "{info}\n{}",
        proxy.stderr()
    );
    // Several reconnect rounds, so the WARN is seen to be logged once.
    sleep(Duration::from_millis(1500)).await;
    let mut c = proxy.client().await;
    let info = c.text(&["INFO", "redlock"]).await;
    assert!(
        field(&info, "master2").contains(
            "status=down,last_error=authentication failed: WRONGPASS invalid username-password \
             pair or user is disabled.,run_id="
        ),
        "{info}"
    );
    assert!(
        field(&info, "master3")
            .contains("status=down,last_error=INFO failed: NOPERM this user has no permissions"),
        "{info}"
    );
    assert!(
        field(&info, "master0").contains("status=up,last_error=,"),
        "{info}"
    );
    let log = proxy.stderr();
    let warns: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("master refused"))
        .collect();
    let about = |addr: &str, why: &str| {
        warns
            .iter()
            .filter(|l| l.contains(addr) && l.contains(why))
            .count()
    };
    assert_eq!(about(&wrong.addr(), "WRONGPASS"), 1, "{log}");
    assert_eq!(about(&limited.addr(), "NOPERM"), 1, "{log}");
    // Two of four masters are not a quorum of four.
    assert_eq!(
        c.raw(&["SET", "lock:q", "t", "NX", "PX", "10000"]).await,
        "$-1\r\n"
    );
    nothing_leaks(&proxy, &["right-secret-43", "wrong-secret-44"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_masters_with_and_without_client_certificates() {
    let c = Certs::get();
    let plain_tls: Vec<Redis> = (0..3).map(|_| Redis::tls(false, &[])).collect();
    let ca = format!("backend_tls_ca_cert_file = {:?}", c.file("ca.crt"));
    let proxy = Proxy::start(
        &addrs(&plain_tls),
        &format!("backend_tls = true\n{ca}"),
        &[],
    );
    let info = proxy.info_when_up(3).await;
    assert_eq!(
        field(&info, "masters_up"),
        "3",
        "{info}\n{}",
        proxy.stderr()
    );
    locks_work(&proxy, "lock:tls").await;

    // Client certificates required, a password too, the masters written as rediss:// URLs and
    // checked under the name `localhost`.
    let mutual: Vec<Redis> = (0..3)
        .map(|_| Redis::tls(true, &["--requirepass", "tls-secret-45"]))
        .collect();
    let urls: Vec<String> = mutual
        .iter()
        .map(|m| format!("rediss://:tls-secret-45@{}", m.addr()))
        .collect();
    let client_cert = format!(
        "{ca}\nbackend_tls_cert_file = {:?}\nbackend_tls_key_file = {:?}\n\
         backend_tls_server_name = \"localhost\"",
        c.file("client.crt"),
        c.file("client.key")
    );
    let proxy = Proxy::start(&urls, &client_cert, &[]);
    let info = proxy.info_when_up(3).await;
    assert_eq!(
        field(&info, "masters_up"),
        "3",
        "{info}\n{}",
        proxy.stderr()
    );
    locks_work(&proxy, "lock:mtls").await;
    let mut cl = proxy.client().await;
    assert_eq!(
        cl.raw(&["SET", "lock:kept", "v2", "NX", "PX", "10000"])
            .await,
        "+OK\r\n"
    );
    for m in &mutual {
        assert_eq!(m.cli(("", "tls-secret-45"), &["GET", "lock:kept"]), "v2");
    }
    nothing_leaks(&proxy, &["tls-secret-45"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_refused_by_either_side_keeps_the_master_down_and_says_why() {
    let c = Certs::get();
    let m = Redis::tls(true, &[]);
    // No client certificate for a master that requires one.
    let none = Proxy::start(
        &[m.addr()],
        &format!(
            "backend_tls = true\nbackend_tls_ca_cert_file = {:?}",
            c.file("ca.crt")
        ),
        &[],
    );
    // A client certificate from an authority the master does not trust.
    let stranger = Proxy::start(
        &[m.addr()],
        &format!(
            "backend_tls = true\nbackend_tls_ca_cert_file = {:?}\nbackend_tls_cert_file = {:?}\n\
             backend_tls_key_file = {:?}",
            c.file("ca.crt"),
            c.file("stranger.crt"),
            c.file("stranger.key")
        ),
        &[],
    );
    // The proxy does not trust the master's authority.
    let distrust = Proxy::start(
        &[m.addr()],
        &format!(
            "backend_tls = true\nbackend_tls_ca_cert_file = {:?}\nbackend_tls_cert_file = {:?}\n\
             backend_tls_key_file = {:?}",
            c.file("other.crt"),
            c.file("client.crt"),
            c.file("client.key")
        ),
        &[],
    );
    // Negative control: the right certificates connect.
    let right = Proxy::start(
        &[format!("rediss://{}", m.addr())],
        &format!(
            "backend_tls_ca_cert_file = {:?}\nbackend_tls_cert_file = {:?}\n\
             backend_tls_key_file = {:?}",
            c.file("ca.crt"),
            c.file("client.crt"),
            c.file("client.key")
        ),
        &[],
    );
    assert_eq!(field(&right.info_when_up(1).await, "masters_up"), "1");
    sleep(Duration::from_millis(500)).await;
    for (proxy, why) in [
        (&none, "CertificateRequired"),
        (&stranger, "alert"),
        (&distrust, "invalid peer certificate: UnknownIssuer"),
    ] {
        let info = proxy.info().await;
        let line = field(&info, "master0");
        assert!(line.contains("status=down,last_error="), "{info}");
        assert!(line.contains(why), "{why}: {info}");
        let log = proxy.stderr();
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && l.contains(&m.addr()) && l.contains(why)),
            "{why}: {log}"
        );
    }
}

/// `GET path` over HTTP/1.0 with optional extra header lines; returns (status line, body).
async fn http_get(addr: &str, path: &str, headers: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
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

/// `promtool check metrics` on `text`: (exit code, output).
fn promtool(text: &str) -> (i32, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/deps.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn sample(metrics: &str, name: &str) -> String {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_a_grant_a_denial_and_a_release_and_promtool_accepts_them() {
    let ms: Vec<Redis> = (0..3).map(|_| Redis::plain(&[])).collect();
    let port = redlock_proxy::dev::free_port().expect("free port");
    let metrics = format!("127.0.0.1:{port}");
    let proxy = Proxy::start(&addrs(&ms), &format!("metrics_listen = {metrics:?}"), &[]);
    proxy.info_when_up(3).await;
    let outcome = |o: &str| format!("redlock_locks_total{{outcome=\"{o}\"}}");
    let (status, before) = http_get(&metrics, "/metrics", "").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    for o in ["granted", "denied", "released"] {
        assert_eq!(sample(&before, &outcome(o)), "0", "{before}");
    }
    let mut c = proxy.client().await;
    assert_eq!(
        c.raw(&["SET", "lock:m", "t1", "NX", "PX", "10000"]).await,
        "+OK\r\n"
    );
    let (_, after_grant) = http_get(&metrics, "/metrics", "").await;
    assert_eq!(sample(&after_grant, &outcome("granted")), "1");
    assert_eq!(sample(&after_grant, &outcome("denied")), "0");
    assert_eq!(
        c.raw(&["SET", "lock:m", "t2", "NX", "PX", "10000"]).await,
        "$-1\r\n"
    );
    assert_eq!(
        c.raw(&["EVAL", UNLOCK, "1", "lock:m", "t1"]).await,
        ":1\r\n"
    );
    let (_, after) = http_get(&metrics, "/metrics", "").await;
    for o in ["granted", "denied", "released"] {
        assert_eq!(sample(&after, &outcome(o)), "1", "{o}: {after}");
    }
    // One connection waited for the masters, one sent the locks.
    assert_eq!(
        sample(&after, "redlock_client_connections_accepted_total"),
        "2"
    );
    for m in &ms {
        let up = format!("redlock_master_up{{master=\"{}\"}}", m.addr());
        assert_eq!(sample(&after, &up), "1", "{after}");
    }
    assert!(
        after.contains("redlock_master_reply_seconds_bucket{"),
        "{after}"
    );
    let (code, lint) = promtool(&after);
    assert_eq!(code, 0, "promtool: {lint}\n{after}");
    // Prometheus itself asks for OpenMetrics, which promtool cannot lint: the classic format
    // served to everyone else is what makes promtool pass.
    let (_, om) = http_get(
        &metrics,
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0\r\n",
    )
    .await;
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert_ne!(promtool(&om).0, 0);
    assert_eq!(
        http_get(&metrics, "/other", "").await.0,
        "HTTP/1.1 404 Not Found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_server_scrapes_the_proxy() {
    let ms: Vec<Redis> = (0..3).map(|_| Redis::plain(&[])).collect();
    let metrics = format!(
        "127.0.0.1:{}",
        redlock_proxy::dev::free_port().expect("free port")
    );
    let proxy = Proxy::start(&addrs(&ms), &format!("metrics_listen = {metrics:?}"), &[]);
    proxy.info_when_up(3).await;
    let mut c = proxy.client().await;
    assert_eq!(
        c.raw(&["SET", "lock:p", "t1", "NX", "PX", "10000"]).await,
        "+OK\r\n"
    );

    let dir = Scratch::new("prometheus");
    std::fs::write(
        dir.0.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: redlock\n    \
             static_configs:\n      - targets: [{metrics:?}]\n"
        ),
    )
    .expect("prometheus.yml");
    let web = format!(
        "127.0.0.1:{}",
        redlock_proxy::dev::free_port().expect("free port")
    );
    let log = std::fs::File::create(dir.0.join("prometheus.log")).expect("log");
    let mut server = Command::new("prometheus")
        .arg(format!("--config.file={}", dir.path("prometheus.yml")))
        .arg(format!("--storage.tsdb.path={}", dir.path("data")))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("prometheus (Debian's package; scripts/deps.sh installs it)");
    let query = "/api/v1/query?query=redlock_locks_total%7Boutcome%3D%22granted%22%7D";
    let mut last = String::new();
    for _ in 0..150 {
        if tokio::net::TcpStream::connect(&web).await.is_ok() {
            let (_, body) = http_get(&web, query, "").await;
            last = body;
            if last.contains("\"value\":[") {
                break;
            }
        }
        sleep(Duration::from_millis(200)).await;
    }
    let _ = server.kill();
    let _ = server.wait();
    let answer: serde_json::Value = serde_json::from_str(&last).expect("JSON from the API");
    let result = &answer["data"]["result"][0];
    assert_eq!(result["metric"]["job"], "redlock", "{last}");
    assert_eq!(result["metric"]["outcome"], "granted", "{last}");
    assert_eq!(result["value"][1], "1", "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_go_to_stderr_without_escapes_and_json_lines_parse() {
    let m = Redis::plain(&[]);
    let down = redlock_proxy::dev::free_port().expect("free port");
    let backends = [m.addr(), format!("127.0.0.1:{down}")];
    let text = Proxy::start(&backends, "", &[("RUST_LOG", "debug")]);
    let json = Proxy::start(&backends, "log_format = \"json\"", &[("RUST_LOG", "debug")]);
    let quiet = Proxy::start(&backends, "", &[("RUST_LOG", "warn")]);
    for p in [&text, &json, &quiet] {
        p.info_when_up(1).await;
    }
    // A few reconnect rounds to the master that is down (logged at debug).
    sleep(Duration::from_millis(300)).await;
    let log = text.stderr();
    assert!(log.contains("redlock-proxy listening"), "{log}");
    assert!(log.contains("DEBUG"), "RUST_LOG=debug is obeyed: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "no ANSI escapes when stderr is a file: {log:?}"
    );
    let lines: Vec<serde_json::Value> = json
        .stderr()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 3, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "master up" && l["span"]["backend.addr"] == m.addr()),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l["level"] == "DEBUG"), "{lines:?}");
    assert!(!json.stderr().contains('\u{1b}'));
    let q = quiet.stderr();
    assert!(
        !q.contains("INFO") && !q.contains("DEBUG"),
        "RUST_LOG=warn: {q}"
    );
    for p in [&text, &json, &quiet] {
        assert_eq!(p.stdout(), "", "stdout stays empty");
    }
}

#[test]
fn check_config_exits_0_or_2_with_the_reason() {
    let dir = Scratch::new("check");
    let run = |text: &str| {
        std::fs::write(dir.0.join("c.toml"), text).expect("config");
        let out = Command::new(env!("CARGO_BIN_EXE_redlock-proxy"))
            .args(["--check-config", &dir.path("c.toml")])
            .env_remove("REDLOCK_BACKEND_PASSWORD")
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, out) = run("backends = [\"127.0.0.1:1\", \"redis://u:p@127.0.0.1:2\"]\n");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("configuration OK"), "{out}");
    let (code, out) =
        run("backends = [\"127.0.0.1:1\"]\nbackend_password_file = \"/nonexistent/pw\"\n");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("backend_password_file /nonexistent/pw"),
        "{out}"
    );
    let (code, out) = run("backends = [\"redis://u:hunter2@127.0.0.1:bad\"]\n");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("bad backend address") && !out.contains("hunter2"),
        "{out}"
    );
    let (code, out) = run(&format!(
        "backends = [\"rediss://127.0.0.1:1\"]\nbackend_tls_ca_cert_file = {:?}\n",
        dir.path("missing-ca.crt")
    ));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("missing-ca.crt"), "{out}");
    let (code, out) = run("backends = []\n");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("no backends"), "{out}");
}
