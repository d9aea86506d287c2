//! Bounded resources: a command naming tens of thousands of keys (or subscribing to as many
//! channels) stays linear and cannot stall other clients' keys; `WATCH` and `MULTI` are capped;
//! the script cache is bounded in bytes and a full cache never breaks a client; `SET ... KEEPTTL` never leaves a key without a TTL; and
//! `--dev` stops the masters it started on every exit path.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Client, Master, UNLOCK, config_for, masters, proxy};
use redlock_proxy::wire::reply::Reply;
use tokio::time::Instant;

async fn proxy_with(
    ms: &[Master],
    edit: impl FnOnce(&mut redlock_proxy::config::Config),
) -> String {
    let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let refs: Vec<&str> = addrs.iter().map(|s| s.as_str()).collect();
    let mut c = config_for(&refs);
    edit(&mut c);
    proxy(c).await.to_string()
}

/// A client that locks and unlocks its own keys in a loop; its slowest round.
fn bystander(p: &str) -> tokio::task::JoinHandle<Duration> {
    let p = p.to_string();
    tokio::spawn(async move {
        let mut c = Client::connect(&p).await;
        let mut worst = Duration::ZERO;
        for i in 0..30 {
            let started = Instant::now();
            let key = format!("by:{i}");
            assert_eq!(
                c.cmd(&["SET", &key, "t", "NX", "PX", "5000"]).await,
                Reply::ok()
            );
            assert_eq!(
                c.cmd(&["EVAL", UNLOCK, "1", &key, "t"]).await,
                Reply::Integer(1)
            );
            worst = worst.max(started.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        worst
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_with_65535_keys_does_not_stall_other_clients() {
    let ms = masters(3);
    let p = proxy_with(&ms, |_| {}).await;
    let keys: Vec<String> = (0..65_535).map(|i| format!("many:{i}")).collect();
    let mut del: Vec<&str> = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    let bystander = bystander(&p);
    let mut c = Client::connect(&p).await;
    let started = Instant::now();
    assert_eq!(c.raw(&del).await, ":0\r\n");
    let mut watch: Vec<&str> = vec!["WATCH"];
    watch.extend(keys.iter().map(String::as_str));
    assert_eq!(
        c.raw(&watch).await,
        "-ERR redlock-proxy: too many watched keys (max_watch_keys = 1024)\r\n"
    );
    watch.truncate(1025);
    assert_eq!(c.raw(&watch).await, "+OK\r\n");
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["DEL", "many:1"]).await, "+QUEUED\r\n");
    assert_eq!(c.raw(&["EXEC"]).await, "*1\r\n:0\r\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let worst = bystander.await.unwrap();
    assert!(
        worst < Duration::from_secs(1),
        "a bystander's lock took {worst:?}"
    );
}

/// One `SUBSCRIBE` of 65,535 channels, then a client that leaves: the masters' confirmations
/// are counted in linear time (comparing every subscription after each read made them
/// quadratic: 15 s of a frozen proxy, masters marked down and locks refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_to_65535_channels_does_not_stall_other_clients() {
    let ms = masters(3);
    let p = proxy_with(&ms, |_| {}).await;
    // Fewer in a debug build, whose every confirmation costs ten times as much: the masters'
    // 3 × 16,000 confirmations still took seconds when each read compared the whole set.
    let n = if cfg!(debug_assertions) {
        16_000
    } else {
        65_535
    };
    let names: Vec<String> = (0..n).map(|i| format!("ch:{i}")).collect();
    let mut subscribe: Vec<&str> = vec!["SUBSCRIBE"];
    subscribe.extend(names.iter().map(String::as_str));
    let bystander = bystander(&p);
    let mut c = Client::connect(&p).await;
    c.send(&subscribe).await;
    for i in 1..=names.len() {
        let got = String::from_utf8(c.read_raw().await).unwrap();
        assert!(got.ends_with(&format!(":{i}\r\n")), "{got}");
    }
    drop(c);
    let worst = bystander.await.unwrap();
    assert!(
        worst < Duration::from_secs(1),
        "a bystander's lock took {worst:?}"
    );
}

#[tokio::test]
async fn multi_is_capped_and_the_cap_aborts_exec() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.max_multi_commands = 3).await;
    let mut c = Client::connect(&p).await;
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    for _ in 0..3 {
        assert_eq!(c.raw(&["GET", "k"]).await, "+QUEUED\r\n");
    }
    assert_eq!(
        c.raw(&["GET", "k"]).await,
        "-ERR redlock-proxy: too many commands in MULTI (max_multi_commands = 3)\r\n"
    );
    assert_eq!(
        c.raw(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // Bytes are capped too: queued commands may not hold more than the query buffer limit
    // (1,000 queued 4 MiB commands held gigabytes).
    let p = proxy_with(&ms, |c| c.client_query_buffer_limit = 64 * 1024).await;
    let mut c = Client::connect(&p).await;
    let big = "x".repeat(40 * 1024);
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["ECHO", &big]).await, "+QUEUED\r\n");
    assert_eq!(
        c.raw(&["ECHO", &big]).await,
        "-ERR redlock-proxy: MULTI would hold more than client_query_buffer_limit (65536 bytes) of queued commands\r\n"
    );
    assert_eq!(
        c.raw(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // Each argument's bookkeeping counts too: thousands of empty ones are no free pass.
    let mut del = vec!["DEL"];
    del.extend(std::iter::repeat_n("", 3_000));
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert!(
        c.raw(&del)
            .await
            .starts_with("-ERR redlock-proxy: MULTI would hold")
    );
    assert!(c.raw(&["EXEC"]).await.starts_with("-EXECABORT"));
}

/// `WATCH` keeps the values it saw (to guard `EXEC`'s deletes): they are capped in bytes like
/// queued commands (75 watched 4 MiB values held 600 MB). Past the cap the `WATCH` is an
/// error, its keys count as changed (`EXEC` aborts), and `UNWATCH` frees the budget.
#[tokio::test]
async fn watched_values_are_capped_in_bytes() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.client_query_buffer_limit = 64 * 1024).await;
    let mut c = Client::connect(&p).await;
    let big = "v".repeat(40 * 1024);
    for k in ["w1", "w2"] {
        assert_eq!(c.raw(&["SET", k, &big, "PX", "60000"]).await, "+OK\r\n");
    }
    assert_eq!(c.raw(&["WATCH", "w1"]).await, "+OK\r\n");
    assert_eq!(
        c.raw(&["WATCH", "w2"]).await,
        "-ERR redlock-proxy: watched values would pass client_query_buffer_limit (65536 bytes)\r\n"
    );
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["GET", "w1"]).await, "+QUEUED\r\n");
    assert_eq!(c.raw(&["EXEC"]).await, "*-1\r\n");
    // EXEC unwatched everything: the budget is whole again.
    assert_eq!(c.raw(&["WATCH", "w2"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["UNWATCH"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["WATCH", "w1"]).await, "+OK\r\n");
}

#[tokio::test]
async fn a_full_script_cache_never_breaks_a_client() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.script_cache_bytes = 16 * 1024).await;
    let mut c = Client::connect(&p).await;
    // redis-py's loading pattern: SCRIPT LOAD, then EVALSHA (NOSCRIPT → load again).
    let sha = c.text(&["SCRIPT", "LOAD", UNLOCK]).await;
    // Another client fills the cache far beyond its budget.
    let mut flood = Client::connect(&p).await;
    for i in 0..300 {
        let body = format!("return {i} --{}", "x".repeat(1000));
        assert!(!flood.cmd(&["SCRIPT", "LOAD", &body]).await.is_error());
    }
    assert_eq!(
        c.raw(&["SCRIPT", "EXISTS", &sha]).await,
        "*1\r\n:0\r\n",
        "forgotten"
    );
    assert_eq!(
        c.cmd(&["SET", "sc", "t", "NX", "PX", "5000"]).await,
        Reply::ok()
    );
    assert_eq!(
        c.raw(&["EVALSHA", &sha, "1", "sc", "t"]).await,
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(c.text(&["SCRIPT", "LOAD", UNLOCK]).await, sha);
    assert_eq!(c.raw(&["EVALSHA", &sha, "1", "sc", "t"]).await, ":1\r\n");
    // EVAL always works, even for a script too big to cache.
    assert_eq!(
        c.cmd(&["SET", "sc", "t", "NX", "PX", "5000"]).await,
        Reply::ok()
    );
    let big = format!("{UNLOCK} --{}", "y".repeat(40 * 1024));
    assert_eq!(c.raw(&["EVAL", &big, "1", "sc", "t"]).await, ":1\r\n");
    assert!(
        c.raw(&["SCRIPT", "LOAD", &big])
            .await
            .starts_with("-ERR redlock-proxy: a script of")
    );
}

#[tokio::test]
async fn set_keepttl_never_leaves_a_key_without_a_ttl() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.legacy_guard_ttl_ms = 60_000).await;
    let reference = Master::start();
    let mut one = reference.client().await;
    let mut c = Client::connect(&p).await;
    // The replies are Redis's, from every starting state.
    for client in [&mut one, &mut c] {
        assert_eq!(client.raw(&["SET", "kt", "a", "KEEPTTL"]).await, "+OK\r\n");
        assert_eq!(
            client.raw(&["SET", "kt", "b", "KEEPTTL", "GET"]).await,
            "$1\r\na\r\n"
        );
        assert_eq!(
            client.raw(&["SET", "nokt", "b", "XX", "KEEPTTL"]).await,
            "$-1\r\n"
        );
        assert_eq!(
            client.raw(&["SET", "held", "x", "PX", "5000"]).await,
            "+OK\r\n"
        );
        assert_eq!(
            client.raw(&["SET", "held", "y", "KEEPTTL"]).await,
            "+OK\r\n"
        );
        assert_eq!(client.raw(&["GET", "kt"]).await, "$1\r\nb\r\n");
    }
    for m in &ms {
        let mut d = m.client().await;
        // A new key gets the deadlock guard's TTL; a key that had one keeps it.
        let t = d.cmd(&["PTTL", "kt"]).await;
        assert!(
            matches!(t, Reply::Integer(t) if t > 50_000 && t <= 60_000),
            "{t:?}"
        );
        let t = d.cmd(&["PTTL", "held"]).await;
        assert!(
            matches!(t, Reply::Integer(t) if t > 0 && t <= 5_000),
            "{t:?}"
        );
        assert_eq!(d.cmd(&["EXISTS", "nokt"]).await, Reply::Integer(0));
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
    let bin = env!("CARGO_BIN_EXE_redlock-proxy");
    // Its port taken: a clear error before anything is started.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(bin)
        .args(["--dev", "3", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on"), "{err}");
    // Masters started, then a bad setting: they are stopped before the process exits.
    let free = redlock_proxy::dev::free_port().unwrap();
    // (A later --listen wins, so scripts/dev.sh's default can be overridden.)
    let child = Command::new(bin)
        .args(["--dev", "3", "--listen", "127.0.0.1:1"])
        .args(["--listen", &format!("127.0.0.1:{free}")])
        .args(["--set", "default_ttl_ms=99999999"])
        .stderr(std::process::Stdio::piped())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_scripts_do_not_freeze_the_proxy() {
    let ms = masters(3);
    let p = proxy_with(&ms, |_| {}).await;
    let bystander = bystander(&p);
    // Two 450 KB scripts of `if(` (they froze the proxy 12–23 s).
    let body = "if(".repeat(150_000);
    let (mut a, mut b) = (Client::connect(&p).await, Client::connect(&p).await);
    let started = Instant::now();
    let args = ["EVAL", body.as_str(), "0"];
    let (ra, rb) = tokio::join!(a.raw(&args), b.raw(&args));
    assert!(
        ra.contains("unknown_scripts") && rb.contains("unknown_scripts"),
        "{ra}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let worst = bystander.await.unwrap();
    assert!(
        worst < Duration::from_secs(1),
        "a bystander's lock took {worst:?}"
    );
}
