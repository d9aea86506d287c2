//! Running it: the command line and configuration errors, `--check-config` and dev mode;
//! masters that require a password, an ACL user or TLS (with and without client certificates),
//! the refusals an operator must see, and secrets that never leak; TLS for clients, reloaded on
//! SIGHUP; the metrics endpoint (and a real Prometheus scraping it); logs; start-up explanations,
//! the open-files limit, and draining on SIGTERM. Most tests run the real binary with its stderr
//! in a file, so its log lines are checked as an operator would read them. Certificates are made
//! by the test with the openssl CLI.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;
use tokio::time::sleep;

// ---------------------------------------------------------------------------------------------
// The command line and configuration.

#[test]
fn invalid_configuration_is_one_line_and_a_nonzero_exit() {
    let dir = std::env::temp_dir().join(format!("rlp-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_key = dir.join("bad.toml");
    std::fs::write(
        &bad_key,
        "backends = [\"127.0.0.1:6379\"]\nnot_a_setting = 1\n",
    )
    .unwrap();
    for (args, needle) in [
        (vec![], "no backends"),
        (
            vec!["--backends", "127.0.0.1:6379,nope"],
            "bad backend address 'nope'",
        ),
        (
            vec!["--backends", "127.0.0.1:6379", "--node-timeout-ms", "0"],
            "node_timeout_ms must be greater than 0",
        ),
        (
            vec!["--config", bad_key.to_str().unwrap()],
            "unknown field `not_a_setting`",
        ),
        (
            vec!["--backends", "127.0.0.1:6379", "--set", "drift_factor=2"],
            "drift_factor",
        ),
    ] {
        let out = binary().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn check_config_exits_0_or_2_with_the_reason() {
    let dir = Scratch::new("check");
    let run = |text: &str| {
        std::fs::write(dir.path("c.toml"), text).expect("config");
        let out = binary()
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

/// Odd values for the settings (0, -1, the largest integers, empty strings, wrong types) are a
/// one-line start-up error or a valid configuration, never a panic. Values that once started a
/// proxy that panicked (`max_clients`, `threads`), refused every lock (`max_ttl_ms`,
/// `max_bulk_len` beyond `i64::MAX`, `min_validity_ms` at `max_ttl_ms`) or asked clients for an
/// empty password are start-up errors that name the setting.
#[test]
fn hostile_setting_values_are_start_up_errors_not_panics() {
    let huge = "18446744073709551615";
    for (setting, needle) in [
        (format!("max_clients={huge}"), "max_clients"),
        (format!("threads={huge}"), "threads"),
        ("threads=100000".to_string(), "threads"),
        (format!("max_ttl_ms={huge}"), "max_ttl_ms"),
        ("max_ttl_ms=1000000000001".to_string(), "max_ttl_ms"),
        (format!("max_bulk_len={huge}"), "max_bulk_len"),
        (
            format!("client_query_buffer_limit={huge}"),
            "client_query_buffer_limit",
        ),
        (format!("min_validity_ms={huge}"), "min_validity_ms"),
        ("min_validity_ms=300000".to_string(), "min_validity_ms"),
        ("password=\"\"".to_string(), "password is empty"),
    ] {
        let out = binary()
            .args(["--backends", "127.0.0.1:1", "--set", &setting])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{setting}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{setting}: {err}");
        assert!(err.contains(needle), "{setting}: {err}");
    }
    // Every numeric and text setting with every odd value: exit 0 or 2, never a panic.
    let dir = Scratch::new("hostile");
    let keys = [
        "node_timeout_ms",
        "drift_factor",
        "min_validity_ms",
        "connect_timeout_ms",
        "stall_timeout_ms",
        "reconnect_min_ms",
        "reconnect_max_ms",
        "max_ttl_ms",
        "max_clients",
        "max_bulk_len",
        "max_pipeline",
        "client_query_buffer_limit",
        "client_output_buffer_limit",
        "client_write_timeout_ms",
        "unknown_scripts",
        "threads",
        "password",
        "membership_transition_ms",
        "clock_jump_ms",
        "probe_interval_ms",
        "default_ttl_ms",
        "max_watch_keys",
        "max_multi_commands",
        "script_cache_bytes",
        "legacy_guard_ttl_ms",
        "legacy_decision",
        "backend_user",
        "backend_tls_server_name",
        "metrics_listen",
        "log_format",
        "tls_listen",
        "shutdown_timeout_ms",
        "lease_max_ms",
        "listen",
    ];
    let values = [
        "0",
        "-1",
        huge,
        "9223372036854775807",
        "\"\"",
        "1e308",
        "nan",
        "-0.5",
        "[]",
    ];
    for key in keys {
        for value in values {
            std::fs::write(
                dir.path("c.toml"),
                format!("backends = [\"127.0.0.1:1\"]\n{key} = {value}\n"),
            )
            .unwrap();
            let out = binary()
                .args(["--check-config", &dir.path("c.toml")])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(out.status.code(), Some(0 | 2)) && !text.contains("panicked"),
                "{key} = {value}: {:?} {text}",
                out.status
            );
        }
    }
}

/// Processes whose working folder is `dir` (the dev masters run in theirs).
fn running_in(dir: &std::path::Path) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter(|p| std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd == dir))
        .count()
}

#[tokio::test]
async fn dev_mode_stops_its_masters_on_every_exit() {
    // Its port taken: a clear error before anything is started.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = binary()
        .args(["--dev", "3", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on"), "{err}");
    // Masters started, then a bad setting: they are stopped before the process exits.
    let free = free_port();
    // (A later --listen wins, so scripts/dev.sh's default can be overridden.)
    let child = binary()
        .args(["--dev", "3", "--listen", "127.0.0.1:1"])
        .args(["--listen", &format!("127.0.0.1:{free}")])
        .args(["--set", "default_ttl_ms=99999999"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("redlock-proxy-dev-{}", child.id()));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("default_ttl_ms"), "{err}");
    assert!(err.contains("dev mode: started"), "{err}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(running_in(&dir), 0, "dev masters left running");
    assert!(!dir.exists(), "dev folder left behind");
}

// ---------------------------------------------------------------------------------------------
// Masters that require a password, an ACL user or TLS.

/// A lock is granted, refused to another holder, and released, with Redis's exact replies.
async fn locks_work(proxy: &ProxyProcess, key: &str) {
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

/// Asserts that none of `secrets` shows in the proxy's logs or `INFO` (every section).
async fn nothing_leaks(proxy: &ProxyProcess, secrets: &[&str]) {
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
    let ms: Vec<Master> = (0..3)
        .map(|_| Master::start_with(&["--requirepass", "file-secret-41"]))
        .collect();
    let scratch = Scratch::new("pw");
    std::fs::write(scratch.path("pw"), "file-secret-41\n").expect("password file");
    let proxy = ProxyProcess::start(
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
    let ms: Vec<Master> = (0..3).map(|_| Master::start_with(&acl)).collect();
    let urls: Vec<String> = ms
        .iter()
        .map(|m| format!("redis://locker:acl-secret-42@{}", m.addr()))
        .collect();
    let by_url = ProxyProcess::start(&urls, "", &[]);
    let by_env = ProxyProcess::start(
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
    let good = Master::start_with(&["--requirepass", "right-secret-43"]);
    let good2 = Master::start_with(&["--requirepass", "right-secret-43"]);
    let wrong = Master::start_with(&["--requirepass", "right-secret-43"]);
    // An ACL user that may not run INFO (which the handshake needs).
    let limited = Master::start_with(&[
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
    let proxy = ProxyProcess::start(&backends, "backend_password = \"right-secret-43\"", &[]);
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
    let plain_tls: Vec<Master> = (0..3).map(|_| Master::tls(false, &[])).collect();
    let ca = format!("backend_tls_ca_cert_file = {:?}", c.file("ca.crt"));
    let proxy = ProxyProcess::start(
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
    let mutual: Vec<Master> = (0..3)
        .map(|_| Master::tls(true, &["--requirepass", "tls-secret-45"]))
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
    let proxy = ProxyProcess::start(&urls, &client_cert, &[]);
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
    let m = Master::tls(true, &[]);
    // No client certificate for a master that requires one.
    let none = ProxyProcess::start(
        &[m.addr()],
        &format!(
            "backend_tls = true\nbackend_tls_ca_cert_file = {:?}",
            c.file("ca.crt")
        ),
        &[],
    );
    // A client certificate from an authority the master does not trust.
    let stranger = ProxyProcess::start(
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
    let distrust = ProxyProcess::start(
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
    let right = ProxyProcess::start(
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

// ---------------------------------------------------------------------------------------------
// Clients over TLS.

/// A TLS client of the proxy: redis-cli over TLS, with `extra` options.
fn tls_cli(port: u16, extra: &[&str], command: &[&str]) -> String {
    let ca = Certs::get().file("ca.crt");
    let mut args = vec!["--tls", "--cacert", &ca];
    args.extend(extra);
    args.extend(command);
    redis_cli(port, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_with_and_without_mutual_tls() {
    let c = Certs::get();
    let ms = masters(3);
    let tls_port = free_port();
    let files = format!(
        "tls_cert_file = {:?}\ntls_key_file = {:?}\n",
        c.file("server.crt"),
        c.file("server.key")
    );
    let proxy = ProxyProcess::start(
        &addrs(&ms),
        &format!("tls_listen = \"127.0.0.1:{tls_port}\"\n{files}"),
        &[],
    );
    proxy.info_when_up(3).await;
    // redis-cli over TLS.
    assert_eq!(
        tls_cli(
            tls_port,
            &[],
            &["SET", "lock:tls", "t1", "NX", "PX", "10000"]
        ),
        "OK"
    );
    assert_eq!(
        tls_cli(
            tls_port,
            &[],
            &["SET", "lock:tls", "t2", "NX", "PX", "10000"]
        ),
        ""
    );
    assert_eq!(
        tls_cli(tls_port, &[], &["EVAL", UNLOCK, "1", "lock:tls", "t1"]),
        "1"
    );
    // redis-py with ssl=True.
    let script = format!(
        "import redis\nr = redis.Redis(host='127.0.0.1', port={tls_port}, ssl=True, ssl_ca_certs={:?})\n\
         lock = r.lock('lock:pytls', timeout=10)\nassert lock.acquire(blocking=False)\n\
         assert not r.lock('lock:pytls', timeout=10).acquire(blocking=False)\nlock.release()\nprint('ok')\n",
        c.file("ca.crt")
    );
    let out = Command::new(python())
        .args(["-c", &script])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // node-redlock with ioredis over TLS.
    let js = clients_dir().join("tls_clients.js");
    let out = Command::new("node")
        .arg(&js)
        .args([tls_port.to_string(), c.file("ca.crt")])
        .output()
        .expect("node");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A plaintext client on the TLS port gets no answer: the connection is closed.
    let mut plain = Client::connect(&format!("127.0.0.1:{tls_port}")).await;
    plain.send(&["PING"]).await;
    assert!(
        plain.closed().await,
        "a plaintext client on the TLS port must be refused"
    );
    // The plaintext listener still works.
    locks_work(&proxy, "lock:plain").await;

    // Mutual TLS, TLS only: no plaintext listener. The client CA file is the test's own copy,
    // so that SIGHUP can be shown to re-read it.
    let tls_port = free_port();
    let scratch = Scratch::new("client-ca");
    let client_ca = scratch.path("clients-ca.crt");
    std::fs::copy(c.file("ca.crt"), &client_ca).expect("copy CA");
    let mutual = ProxyProcess::start(
        &addrs(&ms),
        &format!(
            "listen = \"\"\ntls_listen = \"127.0.0.1:{tls_port}\"\n{files}tls_ca_cert_file = {client_ca:?}\n"
        ),
        &[],
    );
    let mine = [
        "--cert",
        &c.file("client.crt"),
        "--key",
        &c.file("client.key"),
    ];
    let mut answer = String::new();
    for _ in 0..100 {
        answer = tls_cli(
            tls_port,
            &mine,
            &["SET", "lock:mtls", "t1", "NX", "PX", "10000"],
        );
        if answer == "OK" {
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answer, "OK", "{}", mutual.stderr());
    let stranger = [
        "--cert",
        &c.file("stranger.crt"),
        "--key",
        &c.file("stranger.key"),
    ];
    let refused = tls_cli(tls_port, &stranger, &["PING"]);
    assert_ne!(refused, "PONG");
    let refused = tls_cli(tls_port, &[], &["PING"]);
    assert_ne!(refused, "PONG");
    assert!(
        mutual.stderr().contains("TLS client refused"),
        "{}",
        mutual.stderr()
    );
    assert!(
        mutual.stderr().contains("listen=\"off\""),
        "{}",
        mutual.stderr()
    );
    // A connection held open across the reload.
    let held_script = "import socket, ssl, sys\n\
        ctx = ssl.create_default_context(cafile=sys.argv[2])\n\
        ctx.load_cert_chain(sys.argv[3], sys.argv[4])\n\
        s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[1]))), server_hostname='localhost')\n\
        for line in sys.stdin:\n    s.sendall(b'PING\\r\\n')\n    print(s.recv(100).decode().strip(), flush=True)\n";
    let mut held = Command::new(python())
        .args(["-c", held_script, &tls_port.to_string(), &c.file("ca.crt")])
        .args([c.file("client.crt"), c.file("client.key")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut held_in = held.stdin.take().expect("stdin");
    let mut held_out = std::io::BufReader::new(held.stdout.take().expect("stdout"));
    let mut ping = move || {
        use std::io::{BufRead, Write};
        writeln!(held_in).expect("to python");
        let mut line = String::new();
        held_out.read_line(&mut line).expect("from python");
        line.trim().to_string()
    };
    assert_eq!(ping(), "+PONG");
    // SIGHUP re-reads the files: now only the other authority's clients are let in, and the
    // connection already open stays open.
    std::fs::copy(c.file("other.crt"), &client_ca).expect("copy CA");
    mutual.signal("HUP");
    for _ in 0..50 {
        if mutual.stderr().contains("TLS certificate files reloaded") {
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    assert!(
        mutual.stderr().contains("TLS certificate files reloaded"),
        "{}",
        mutual.stderr()
    );
    assert_eq!(ping(), "+PONG");
    assert_ne!(tls_cli(tls_port, &mine, &["PING"]), "PONG");
    assert_eq!(tls_cli(tls_port, &stranger, &["PING"]), "PONG");
    assert_eq!(
        tls_cli(
            tls_port,
            &stranger,
            &["EVAL", UNLOCK, "1", "lock:mtls", "t1"]
        ),
        "1"
    );
    let _ = held.kill();
    let _ = held.wait();
}

// ---------------------------------------------------------------------------------------------
// Metrics and logs.

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
    let ms = masters(3);
    let port = free_port();
    let metrics = format!("127.0.0.1:{port}");
    let proxy = ProxyProcess::start(&addrs(&ms), &format!("metrics_listen = {metrics:?}"), &[]);
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
    // Commands by name, acquisition latency, errors by kind, connections open.
    let by_name = |c: &str| format!("redlock_commands_by_name_total{{command=\"{c}\"}}");
    assert_eq!(sample(&after, &by_name("set")), "2", "{after}");
    assert_eq!(sample(&after, &by_name("eval")), "1", "{after}");
    assert_eq!(
        sample(&after, "redlock_acquire_seconds_count"),
        "2",
        "{after}"
    );
    assert!(
        after.contains("redlock_acquire_seconds_bucket{le=\"0.1\"} "),
        "{after}"
    );
    let errors = |k: &str| format!("redlock_errors_total{{kind=\"{k}\"}}");
    assert_eq!(sample(&after, &errors("ERR")), "0", "{after}");
    assert!(
        c.raw(&["NOSUCHCOMMAND"])
            .await
            .starts_with("-ERR unknown command")
    );
    assert!(
        c.raw(&["EVALSHA", &"0".repeat(40), "0"])
            .await
            .starts_with("-NOSCRIPT")
    );
    let (_, after) = http_get(&metrics, "/metrics", "").await;
    assert_eq!(sample(&after, &errors("ERR")), "1", "{after}");
    assert_eq!(sample(&after, &errors("NOSCRIPT")), "1", "{after}");
    assert_eq!(sample(&after, "redlock_client_connections"), "1", "{after}");
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
async fn readyz_turns_unready_when_fewer_than_a_quorum_can_vote_and_ready_again_after() {
    let ms = masters(3);
    let metrics = format!("127.0.0.1:{}", free_port());
    let proxy = ProxyProcess::start(&addrs(&ms), &format!("metrics_listen = {metrics:?}"), &[]);
    proxy.info_when_up(3).await;
    // Polls /readyz until its status line is `want`, within 10 s.
    let until = |want: &'static str| {
        let metrics = metrics.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let (status, body) = http_get(&metrics, "/readyz", "").await;
                if status == want {
                    return body;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "/readyz stayed {status} ({body}), waiting for {want}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(until("HTTP/1.1 200 OK").await, "ready\n");
    assert_eq!(
        http_get(&metrics, "/healthz", "").await,
        ("HTTP/1.1 200 OK".to_string(), "ok\n".to_string())
    );
    // One master stopped: a quorum (2 of 3) still votes.
    ms[0].pause();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(until("HTTP/1.1 200 OK").await, "ready\n");
    // Two stopped: marked down after the stall timeout; no lock can be granted.
    ms[1].pause();
    let body = until("HTTP/1.1 503 Service Unavailable").await;
    assert!(body.starts_with("not ready: "), "{body}");
    assert!(body.contains("2 needed"), "{body}");
    // The process still serves.
    assert_eq!(
        http_get(&metrics, "/healthz", "").await.0,
        "HTTP/1.1 200 OK"
    );
    ms[0].resume();
    ms[1].resume();
    assert_eq!(until("HTTP/1.1 200 OK").await, "ready\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_server_scrapes_the_proxy() {
    let ms = masters(3);
    let metrics = format!("127.0.0.1:{}", free_port());
    let proxy = ProxyProcess::start(&addrs(&ms), &format!("metrics_listen = {metrics:?}"), &[]);
    proxy.info_when_up(3).await;
    let mut c = proxy.client().await;
    assert_eq!(
        c.raw(&["SET", "lock:p", "t1", "NX", "PX", "10000"]).await,
        "+OK\r\n"
    );

    let dir = Scratch::new("prometheus");
    std::fs::write(
        dir.path("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: redlock\n    \
             static_configs:\n      - targets: [{metrics:?}]\n"
        ),
    )
    .expect("prometheus.yml");
    let web = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.path("prometheus.log")).expect("log");
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
    let m = Master::start();
    let down = free_port();
    let backends = [m.addr(), format!("127.0.0.1:{down}")];
    let text = ProxyProcess::start(&backends, "", &[("RUST_LOG", "debug")]);
    let json = ProxyProcess::start(&backends, "log_format = \"json\"", &[("RUST_LOG", "debug")]);
    let quiet = ProxyProcess::start(&backends, "", &[("RUST_LOG", "warn")]);
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

// ---------------------------------------------------------------------------------------------
// Start-up and shutdown.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_quarantined_on_first_connect_are_explained_at_start_up() {
    let ms = masters(3);
    let proxy = ProxyProcess::start(&addrs(&ms), "quarantine = true\nmax_ttl_ms = 60000", &[]);
    let info = proxy.info_when_up(3).await;
    assert_eq!(field(&info, "quorum_available"), "0", "{info}");
    let wait: i64 = field(&info, "quorum_available_in_ms")
        .parse()
        .expect("a number");
    assert!((50_000..=61_000).contains(&wait), "{info}");
    let log = proxy.stderr();
    assert!(log.contains("WARN"), "{log}");
    assert!(
        log.contains("set `quarantine = false` to skip this"),
        "{log}"
    );
    assert!(log.contains("s more"), "{log}");
    let mut c = proxy.client().await;
    assert_eq!(
        c.raw(&["SET", "lock:q", "t", "NX", "PX", "1000"]).await,
        "$-1\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_open_files_limit_is_raised_or_reported() {
    let ms = masters(3);
    // Soft 256, hard 4096: the proxy raises its own limit to 4096, enough for 2000 clients.
    let proxy = ProxyProcess::launch(
        &addrs(&ms),
        "max_clients = 2000",
        &[],
        &["prlimit", "--nofile=256:4096", "--"],
    );
    proxy.info_when_up(3).await;
    let mut clients = Vec::new();
    for _ in 0..600 {
        let mut c = Client::connect(&proxy.addr).await;
        c.send(&["PING"]).await;
        clients.push(c);
    }
    for c in &mut clients {
        assert_eq!(c.read_raw().await, b"+PONG\r\n", "{}", proxy.stderr());
    }
    assert!(
        proxy.stderr().contains("raised the open-files limit"),
        "{}",
        proxy.stderr()
    );
    assert!(!proxy.stderr().contains("max_clients cannot be reached"));
    drop(clients);
    // A hard limit below max_clients is reported.
    let mut low =
        ProxyProcess::launch(&addrs(&ms), "", &[], &["prlimit", "--nofile=256:256", "--"]);
    low.info_when_up(3).await;
    assert!(
        low.stderr().contains("max_clients cannot be reached"),
        "{}",
        low.stderr()
    );
    // SIGINT (Ctrl-C) shuts down as SIGTERM does.
    low.signal("INT");
    assert_eq!(low.exit_code(Duration::from_secs(8)).await, Some(0));
    assert!(
        low.stderr().contains("shut down cleanly"),
        "{}",
        low.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_lock_load_leaves_only_granted_keys_and_exits_0() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    let ms = masters(3);
    let mut proxy = ProxyProcess::start(&addrs(&ms), "shutdown_timeout_ms = 5000", &[]);
    proxy.info_when_up(3).await;
    let grants: Arc<Mutex<HashSet<(String, String)>>> = Arc::default();
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..16 {
        let (addr, grants, attempts) = (proxy.addr.clone(), grants.clone(), attempts.clone());
        workers.push(tokio::spawn(async move {
            let Some(mut c) = Client::try_connect(&addr).await else {
                return;
            };
            for n in 0.. {
                // Four contended keys; each round pipelines the acquisition and its release.
                let key = format!("lock:sig{}", (w + n) % 4);
                let token = format!("w{w}-{n}");
                let (k, t) = (key.as_bytes(), token.as_bytes());
                let mut req = command(&[b"SET", k, t, b"NX", b"PX", b"5000"]).to_vec();
                req.extend_from_slice(&command(&[b"EVAL", UNLOCK.as_bytes(), b"1", k, t]));
                if !c.try_send_raw(&req).await {
                    return;
                }
                attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // The acquisition's reply counts even when the release's never comes.
                let acquired = c.try_read(Duration::from_secs(10)).await;
                if acquired.as_deref() == Some(&b"+OK\r\n"[..]) {
                    grants.lock().unwrap().insert((key, token));
                }
                if acquired.is_none() || c.try_read(Duration::from_secs(10)).await.is_none() {
                    return;
                }
            }
        }));
    }
    sleep(Duration::from_millis(700)).await;
    proxy.signal("TERM");
    let code = proxy.exit_code(Duration::from_secs(8)).await;
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
    }
    assert_eq!(code, Some(0), "{}", proxy.stderr());
    let grants = grants.lock().unwrap().clone();
    let attempts = attempts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(attempts > 50, "too little load: {attempts} attempts");
    assert!(!grants.is_empty());
    let mut left = 0;
    for m in &ms {
        let keys = m.cli(("", ""), &["KEYS", "lock:sig*"]);
        for key in keys.lines().filter(|k| !k.is_empty()) {
            let value = m.cli(("", ""), &["GET", key]);
            if value.is_empty() {
                continue; // expired meanwhile
            }
            left += 1;
            assert!(
                grants.contains(&(key.to_string(), value.clone())),
                "{key}={value} on {} was never granted to a client",
                m.addr()
            );
        }
    }
    assert!(
        proxy.stderr().contains("shut down cleanly"),
        "{}",
        proxy.stderr()
    );
    eprintln!(
        "SIGTERM: {attempts} attempts, {} grants, {left} granted keys left",
        grants.len()
    );
}
