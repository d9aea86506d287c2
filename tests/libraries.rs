//! Real lock libraries pointed at the proxy backed by real masters (N = 3 and 5). Unmodified
//! from their registries (installed by `scripts/deps.sh test` into tests/clients): redis-py's
//! `Lock`, node-redlock v5 with ioredis, npm `redis-lock` and `node-redis-warlock`. Reproduced
//! by our own drivers where the library is in no registry reached here (each driver's header
//! says what it sends and in which order): redlock-php on Debian's php-redis, Redis::DistLock on
//! libredis-perl, redlock-rb on ruby-redis, redsync on Go + redigo (and with a raw client);
//! Redisson, Spring Integration's `RedisLockRegistry`, ShedLock's Redis provider and
//! StackExchange.Redis's lock API on redis-py; Laravel's `Cache::lock` on php-redis. Plus
//! redis-cli.
//!
//! Every library also runs as contending worker processes (one CLI contract, see [`Worker`]):
//! read–sleep–write on a counter kept in a Redis the proxy does not use, under the lock. No
//! update may be lost; the same run with the lock bypassed must lose some (so the test can
//! fail); and none may be lost while a master is SIGKILLed mid-run and restarted empty. The
//! long kill run drives twelve libraries at once while the masters are killed in turn. Some of
//! them also run with Redis Cluster members and with Sentinel members, across `SENTINEL
//! FAILOVER` and a `kill -9` of a primary.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use support::*;
use tokio::process::Command;

/// The contention runs start many worker processes each; run concurrently on two cores they
/// would measure the machine's stalls rather than the locks, so they take turns.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn node() -> Command {
    node_script("node_redlock.js")
}

/// Runs a driver to completion and returns its stdout; fails the test with its stderr when it
/// exits non-zero. The limit (180 s) only catches a hang: a run takes 10 to 50 s, and test
/// binaries run two at a time beside the library suite on a 2-core machine.
async fn drive(cmd: Command) -> String {
    drive_for(cmd, Duration::from_secs(180)).await
}

/// [`drive`] with a time limit of `limit`.
async fn drive_for(mut cmd: Command, limit: Duration) -> String {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("driver finished within {limit:?}"))
        .expect("driver started");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "driver failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn py(args: &[String]) -> Command {
    let mut c = Command::new(python());
    c.arg(clients_dir().join("redis_py.py")).args(args);
    c
}

fn ports(ms: &[Master]) -> Vec<String> {
    ms.iter().map(|m| m.port.to_string()).collect()
}

/// `DRIVER api PROXY_PORT MASTER_PORT...` (a driver's own checks of the library through the
/// proxy, with each master read behind it) at N = 3 and 5: the driver prints `ok`. `mode` is
/// `api` or another of the driver's check modes. The two runs share nothing (masters, proxy,
/// driver) and mostly wait (leases running out, watchdogs renewing), so they run at once.
async fn api_at_3_and_5(driver: Worker, mode: &str) {
    let at = |n: usize| async move {
        let ms = masters(n);
        let proxy = proxy_for(&ms).await;
        let mut cmd = driver();
        cmd.arg(mode).arg(proxy.port().to_string()).args(ports(&ms));
        assert_eq!(drive(cmd).await.trim(), "ok", "{mode}, N = {n}");
    };
    tokio::join!(at(3), at(5));
}

/// `{"expected": E, "got": G, "errors": [...]}` from a contention driver, as (E, G, line).
fn tally(out: &str) -> (u64, u64, String) {
    let line = out.lines().last().unwrap_or_default().replace(' ', "");
    let num = |field: &str| -> u64 {
        let key = format!("\"{field}\":");
        let at = line
            .find(&key)
            .unwrap_or_else(|| panic!("no {field} in {line}"));
        line[at + key.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .expect("number")
    };
    (num("expected"), num("got"), line.clone())
}

/// Runs one contention scenario with and without the lock: with it no update is lost, without
/// it some are (the negative control that shows the test can fail).
async fn contention(make: impl Fn(&str, &str, &str) -> Command) {
    let _one_at_a_time = HEAVY.lock().await;
    let ms = masters(3);
    let proxy = proxy_for(&ms).await;
    let counter = Master::start();
    let p = proxy.port().to_string();
    let c = counter.port.to_string();

    let (expected, got, line) = tally(&drive(make(&p, &c, "lock")).await);
    assert!(line.contains("\"errors\":[]"), "{line}");
    assert_eq!(got, expected, "updates lost under the lock: {line}");
    eprintln!("with the lock: {line}");

    let (expected, got, line) = tally(&drive(make(&p, &c, "nolock")).await);
    eprintln!("without the lock: {line}");
    assert!(
        got < expected,
        "without the lock updates should be lost, or the test proves nothing: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_lock_works_unmodified() {
    for n in [3, 5] {
        let ms = masters(n);
        let proxy = proxy_for(&ms).await;
        let mut args = vec!["api".to_string(), proxy.port().to_string()];
        args.extend(ports(&ms));
        assert_eq!(drive(py(&args)).await.trim(), "ok", "N = {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_contention_loses_no_update() {
    contention(|proxy, counter, mode| {
        py(&[
            "contention".into(),
            proxy.into(),
            counter.into(),
            mode.into(),
        ])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redlock_works_unmodified() {
    api_at_3_and_5(node, "api").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redlock_contention_loses_no_update() {
    contention(|proxy, counter, mode| {
        let mut cmd = node();
        cmd.args(["contention", proxy, counter, mode]);
        cmd
    })
    .await;
}

/// redsync's scripts, byte for byte.
const REDSYNC_DELETE: &str = include_str!("clients/lua/redsync_deleteScript.lua");
const REDSYNC_TOUCH: &str = include_str!("clients/lua/redsync_touchScript.lua");
const REDSYNC_DELETE_SHA: &str = "e950836ed1e694540c503ef9972b8de518044d3b";
const REDSYNC_TOUCH_SHA: &str = "d75bb8b5bd13532ddedd17762e772346e39b321e";

/// What redsync's go-redis adapter does to run a script: `EVALSHA`, and `EVAL` when the
/// error contains "NOSCRIPT ".
async fn redsync_eval(c: &mut Client, sha: &str, src: &str, args: &[&str]) -> Reply {
    let mut cmd = vec!["evalsha", sha, "1"];
    cmd.extend(args);
    match c.cmd(&cmd).await {
        Reply::Error(e) if String::from_utf8_lossy(&e).contains("NOSCRIPT ") => {
            let mut cmd = vec!["eval", src, "1"];
            cmd.extend(args);
            c.cmd(&cmd).await
        }
        other => other,
    }
}

#[tokio::test]
async fn redsync_behaviour_through_a_raw_client() {
    for n in [3, 5] {
        let ms = masters(n);
        let proxy = proxy_for(&ms).await.to_string();
        let mut c = Client::connect(&proxy).await;
        // Acquire as go-redis sends it for the default 8 s expiry: lowercase, EX seconds.
        let value = "q7GmBQ+Hk/2mYv4e9Ib1Ww==";
        assert_eq!(
            c.cmd(&["set", "rs:mutex", value, "ex", "8", "nx"]).await,
            Reply::ok()
        );
        assert_eq!(
            c.cmd(&["set", "rs:mutex", "other", "ex", "8", "nx"]).await,
            Reply::Nil
        );
        let held = values_on(&ms, "rs:mutex").await;
        assert!(held.iter().flatten().filter(|v| *v == value).count() > n / 2);
        // The first EVALSHA meets NOSCRIPT (exact prefix with the space) and falls back to EVAL.
        assert_eq!(
            c.raw(&["evalsha", REDSYNC_TOUCH_SHA, "1", "rs:mutex", value, "8000"])
                .await,
            "-NOSCRIPT No matching script. Please use EVAL.\r\n"
        );
        assert_eq!(
            redsync_eval(
                &mut c,
                REDSYNC_TOUCH_SHA,
                REDSYNC_TOUCH,
                &["rs:mutex", value, "8000"]
            )
            .await,
            Reply::Integer(1)
        );
        // Now cached: EVALSHA alone works.
        assert_eq!(
            c.cmd(&[
                "evalsha",
                REDSYNC_TOUCH_SHA,
                "1",
                "rs:mutex",
                "other",
                "8000"
            ])
            .await,
            Reply::Integer(0),
            "touch by another value"
        );
        assert_eq!(
            redsync_eval(
                &mut c,
                REDSYNC_DELETE_SHA,
                REDSYNC_DELETE,
                &["rs:mutex", "other"]
            )
            .await,
            Reply::Integer(0),
            "delete by another value: taken"
        );
        assert_eq!(
            redsync_eval(
                &mut c,
                REDSYNC_DELETE_SHA,
                REDSYNC_DELETE,
                &["rs:mutex", value]
            )
            .await,
            Reply::Integer(1)
        );
        // Releasing an expired lock answers -1 (ErrLockAlreadyExpired in redsync).
        assert_eq!(
            c.cmd(&["set", "rs:short", value, "px", "150", "nx"]).await,
            Reply::ok()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(
            redsync_eval(
                &mut c,
                REDSYNC_DELETE_SHA,
                REDSYNC_DELETE,
                &["rs:short", value]
            )
            .await,
            Reply::Integer(-1)
        );
        assert_eq!(
            redsync_eval(
                &mut c,
                REDSYNC_TOUCH_SHA,
                REDSYNC_TOUCH,
                &["rs:short", value, "8000"]
            )
            .await,
            Reply::Integer(0),
            "extend of an expired lock"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_scripts_and_locks() {
    let ms = masters(3);
    let port = proxy_for(&ms).await.port();
    let unlock = include_str!("clients/lua/redsync_old_deleteScript.lua");
    let sha = redis_cli(port, &["SCRIPT", "LOAD", unlock]);
    assert_eq!(sha, "00583931c4e4d483f6233879c133c71ed5393f9d");
    assert_eq!(redis_cli(port, &["SCRIPT", "EXISTS", &sha, "ffff"]), "1\n0");
    assert_eq!(
        redis_cli(port, &["SET", "cli:l", "me", "EX", "10", "NX"]),
        "OK"
    );
    assert_eq!(
        redis_cli(port, &["SET", "cli:l", "you", "NX", "PX", "10000"]),
        ""
    );
    assert_eq!(redis_cli(port, &["GET", "cli:l"]), "me");
    assert_eq!(
        redis_cli(port, &["EVALSHA", &sha, "1", "cli:l", "you"]),
        "0"
    );
    assert_eq!(redis_cli(port, &["EVALSHA", &sha, "1", "cli:l", "me"]), "1");
    assert_eq!(redis_cli(port, &["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(
        redis_cli(port, &["EVALSHA", &sha, "1", "cli:l", "me"]),
        "NOSCRIPT No matching script. Please use EVAL."
    );
    // redis-cli --eval: keys and arguments separated by a comma.
    let file = std::env::temp_dir().join(format!("redlock-proxy-unlock-{port}.lua"));
    std::fs::write(&file, unlock).unwrap();
    assert_eq!(
        redis_cli(port, &["SET", "cli:e", "tok", "PX", "5000", "NX"]),
        "OK"
    );
    let out = redis_cli(
        port,
        &["--eval", file.to_str().unwrap(), "cli:e", ",", "tok"],
    );
    let _ = std::fs::remove_file(&file);
    assert_eq!(out, "1");
}

/// npm `redis-lock`, whose value is a timestamp, so two workers that try in the same millisecond
/// write the same value: with `SET NX` answered as Redis answers it, no update is lost; with the
/// unsafe `set_nx_reentrant` (the old behaviour, a same-value `SET NX` granted) and without the
/// lock, updates are lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_redis_lock_contention_loses_no_update() {
    let _one_at_a_time = HEAVY.lock().await;
    let ms = masters(3);
    let counter = Master::start();
    let c = counter.port.to_string();
    let run = |proxy: String, mode: &'static str| {
        let mut cmd = Command::new("node");
        cmd.arg(clients_dir().join("redis_lock.js"))
            .args(["contention", &proxy, &c, mode]);
        cmd
    };
    let p = proxy_for(&ms).await.port().to_string();
    let (expected, got, line) = tally(&drive(run(p.clone(), "lock")).await);
    eprintln!("redis-lock through the proxy: {line}");
    assert!(line.contains("\"errors\":[]"), "{line}");
    assert_eq!(got, expected, "updates lost under the lock: {line}");
    let (expected, got, line) = tally(&drive(run(p, "nolock")).await);
    eprintln!("redis-lock, lock bypassed: {line}");
    assert!(got < expected, "the control should lose updates: {line}");
    let mut config = config_for(&addrs(&ms));
    config.set_nx_reentrant = true;
    let unsafe_proxy = proxy(config).await.port().to_string();
    let (expected, got, line) = tally(&drive(run(unsafe_proxy, "lock")).await);
    eprintln!("redis-lock with set_nx_reentrant (unsafe): {line}");
    assert!(
        got < expected,
        "a same-value SET NX granted twice should lose updates: {line}"
    );
}

/// A worker program that follows the contract `W --redis HOST:PORT --counter HOST:PORT
/// --resource NAME --iterations N --hold-ms MS [--no-lock]` and prints `done <successes>` last.
/// It may also print `tokens a,b,...` (the lock values it was granted) and `check NAME OK BAD`
/// (replies to its library's other calls — touch, extend, unlock — that were / were not what the
/// library expects while it holds the lock).
type Worker = fn() -> Command;

fn redlock_php() -> Command {
    let mut c = Command::new("php");
    c.arg(clients_dir().join("redlock_php.php"));
    c
}

fn redis_py_worker() -> Command {
    py(&["worker".to_string()])
}

fn node_redlock_worker() -> Command {
    let mut c = node();
    c.arg("worker");
    c
}

fn npm_redis_lock_worker() -> Command {
    let mut c = Command::new("node");
    c.arg(clients_dir().join("redis_lock.js")).arg("worker");
    c
}

fn warlock() -> Command {
    let modules = clients_dir().join("node_modules/node-redis-warlock");
    assert!(
        modules.exists(),
        "{} is missing: run scripts/deps.sh test (it runs npm ci)",
        modules.display()
    );
    let mut c = Command::new("node");
    c.arg(clients_dir().join("warlock.js"));
    c
}

fn distlock() -> Command {
    let mut c = Command::new("perl");
    c.arg(clients_dir().join("distlock.pl"));
    c
}

/// Redis::DistLock's documented `lock($resource, $ttl, $value)` form, every worker passing the
/// host name as value.
fn distlock_host_value() -> Command {
    let mut c = distlock();
    c.arg("--host-value");
    c
}

fn redlock_rb() -> Command {
    let mut c = Command::new("ruby");
    c.arg(clients_dir().join("redlock_rb.rb"));
    c
}

/// The redsync driver, built once per test binary, offline, in GOPATH mode against Debian's
/// redigo source (`golang-github-gomodule-redigo-dev`).
fn redsync() -> Command {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let bin = tmp.join("redsync-driver");
        let out = std::process::Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(clients_dir().join("redsync.go"))
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOFLAGS", "")
            .env("GOCACHE", tmp.join("gocache"))
            .output()
            .expect("go must be installed (scripts/deps.sh test installs golang-go)");
        assert!(
            out.status.success(),
            "building tests/clients/redsync.go failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    });
    let mut c = Command::new(bin);
    c.arg("--lua").arg(clients_dir().join("lua"));
    c
}

/// redsync with a 2.5 s expiry, which go-redis sends as `set k v px 2500 nx`.
fn redsync_px() -> Command {
    let mut c = redsync();
    c.args(["--expiry-ms", "2500"]);
    c
}

/// What a set of workers did on one resource.
#[derive(Default)]
struct Run {
    /// Critical sections the workers completed.
    ok: u64,
    /// The counter they incremented: `ok - got` updates were lost.
    got: u64,
    /// Lock values granted to more than one worker.
    shared: usize,
    /// `check` lines summed over the workers: name → (as expected, not).
    checks: std::collections::BTreeMap<String, (u64, u64)>,
    /// `cs` lines (workers that trace their critical sections).
    sections: Vec<Section>,
}

/// One critical section as a worker traced it: `cs TOKEN READ BEGAN ENTERED LEFT VALIDITY`
/// (the counter value read; wall-clock µs when the winning attempt began, the section was
/// entered and left; the validity in ms the library computed).
#[derive(Debug, Clone)]
struct Section {
    worker: usize,
    token: String,
    read: u64,
    began: u64,
    entered: u64,
    left: u64,
    validity_ms: f64,
}

impl Section {
    fn parse(worker: usize, line: &str) -> Option<Section> {
        let f: Vec<&str> = line.strip_prefix("cs ")?.split_whitespace().collect();
        Some(Section {
            worker,
            token: f.first()?.to_string(),
            read: f.get(1)?.parse().ok()?,
            began: f.get(2)?.parse().ok()?,
            entered: f.get(3)?.parse().ok()?,
            left: f.get(4)?.parse().ok()?,
            validity_ms: f.get(5)?.parse().ok()?,
        })
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("ok", &self.ok)
            .field("got", &self.got)
            .field("shared", &self.shared)
            .field("checks", &self.checks)
            .field("traced", &self.sections.len())
            .finish()
    }
}

impl Run {
    fn lost(&self) -> u64 {
        self.ok.saturating_sub(self.got)
    }

    /// No update lost, unless a lock value two workers shared explains it (the library's own
    /// collision, which loses updates on one plain Redis too).
    fn assert_no_loss(&self, what: &str) {
        assert!(
            self.lost() == 0 || self.shared > 0,
            "{what}: {} of {} updates lost\n{}",
            self.lost(),
            self.ok,
            self.explain()
        );
    }

    /// For traced runs, the critical sections that read the same counter value (each such pair
    /// lost an update), with what explains it: a token two workers shared, a grant whose
    /// validity ran out inside the section, or neither (two holders at once: a double grant).
    fn explain(&self) -> String {
        let mut by_read: std::collections::BTreeMap<u64, Vec<&Section>> = Default::default();
        for s in &self.sections {
            by_read.entry(s.read).or_default().push(s);
        }
        let mut out = String::new();
        for (read, group) in by_read.iter().filter(|(_, g)| g.len() > 1) {
            out += &format!("counter value {read} read by {} sections:\n", group.len());
            for s in group {
                let held_ms = (s.left.saturating_sub(s.began)) as f64 / 1000.0;
                out += &format!(
                    "  worker {} token {} entered {} left {} held {held_ms:.1} ms of {:.1} ms{}\n",
                    s.worker,
                    s.token,
                    s.entered,
                    s.left,
                    s.validity_ms,
                    if held_ms > s.validity_ms {
                        " (validity ran out inside)"
                    } else {
                        ""
                    }
                );
            }
            let tokens: std::collections::HashSet<&str> =
                group.iter().map(|s| s.token.as_str()).collect();
            out += if tokens.len() < group.len() {
                "  => a token shared between workers (the library's own collision)\n"
            } else {
                "  => distinct tokens held at once\n"
            };
        }
        out
    }

    /// Every `check` the library made while holding the lock answered as it expects.
    fn assert_checks_clean(&self, what: &str) {
        for (name, (good, bad)) in &self.checks {
            assert!(
                *good > 0 && *bad == 0,
                "{what}: check {name}: {good} ok, {bad} not"
            );
        }
    }
}

/// Runs `workers` worker processes at once against `redis` on one resource, each for at most
/// `limit`.
#[allow(clippy::too_many_arguments)]
async fn run_n_for(
    limit: Duration,
    worker: Worker,
    workers: usize,
    redis: &str,
    counter: &Master,
    resource: &str,
    iterations: u32,
    no_lock: bool,
) -> Run {
    let counter_addr = counter.addr();
    let mut runs = Vec::new();
    for _ in 0..workers {
        let mut cmd = worker();
        cmd.args(["--redis", redis, "--counter", &counter_addr])
            .args([
                "--resource",
                resource,
                "--iterations",
                &iterations.to_string(),
            ])
            .args(["--hold-ms", "2"]);
        if no_lock {
            cmd.arg("--no-lock");
        }
        runs.push(tokio::spawn(drive_for(cmd, limit)));
    }
    let mut run = Run::default();
    let mut owners: std::collections::HashMap<String, usize> = Default::default();
    for (w, handle) in runs.into_iter().enumerate() {
        let out = handle.await.expect("worker task");
        for line in out.lines() {
            if let Some(list) = line.strip_prefix("tokens ") {
                for t in list.split(',').filter(|t| !t.is_empty()) {
                    let first = *owners.entry(t.to_string()).or_insert(w);
                    if first != w {
                        owners.insert(t.to_string(), usize::MAX);
                    }
                }
            }
            if let Some(section) = Section::parse(w, line) {
                run.sections.push(section);
            }
            if let Some(check) = line.strip_prefix("check ") {
                let f: Vec<&str> = check.split_whitespace().collect();
                let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                let e = run.checks.entry(f[0].to_string()).or_default();
                e.0 += n(1);
                e.1 += n(2);
            }
        }
        let last = out.lines().last().unwrap_or_default();
        run.ok += last
            .strip_prefix("done ")
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("worker's last line is not `done N`: {out}"));
    }
    run.got = counter_value(counter, resource).await;
    run.shared = owners.values().filter(|w| **w == usize::MAX).count();
    run
}

/// [`run_n_for`] with the 60 s limit of one driver.
async fn run_n(
    worker: Worker,
    workers: usize,
    redis: &str,
    counter: &Master,
    resource: &str,
    iterations: u32,
    no_lock: bool,
) -> Run {
    let limit = Duration::from_secs(60);
    run_n_for(
        limit, worker, workers, redis, counter, resource, iterations, no_lock,
    )
    .await
}

async fn counter_value(counter: &Master, resource: &str) -> u64 {
    let key = format!("count:{resource}");
    match counter.client().await.cmd(&["GET", &key]).await {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
        _ => 0,
    }
}

/// Runs 8 workers at once against `redis` and returns (successful critical sections, counter,
/// tokens that more than one worker used).
async fn run_workers(
    worker: Worker,
    redis: &str,
    counter: &Master,
    resource: &str,
    iterations: u32,
    no_lock: bool,
) -> (u64, u64, usize) {
    let r = run_n(worker, 8, redis, counter, resource, iterations, no_lock).await;
    (r.ok, r.got, r.shared)
}

/// Kills master `victim` with SIGKILL once `count:<resource>` on the counter has reached
/// `at`, restarts it empty 300 ms later, and returns the counter seen at the kill (so the test
/// can show the kill fell mid-run).
async fn kill_when(
    ms: &mut [Master],
    victim: usize,
    counter: &Master,
    resource: &str,
    at: u64,
) -> u64 {
    let started = std::time::Instant::now();
    loop {
        let seen = counter_value(counter, resource).await;
        if seen >= at || started.elapsed() > Duration::from_secs(50) {
            ms[victim].kill();
            tokio::time::sleep(Duration::from_millis(300)).await;
            ms[victim].restart();
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One round: 8 workers of `worker` through a new proxy in front of 3 new masters, master 1
/// SIGKILLed once a quarter of the updates are in and restarted empty 300 ms later. Returns the
/// run and the counter at the kill.
async fn kill_round(worker: Worker, resource: &str, iterations: u32) -> (Run, u64) {
    let mut ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let total = 8 * u64::from(iterations);
    tokio::join!(
        run_n(worker, 8, &p, &counter, resource, iterations, false),
        kill_when(&mut ms, 1, &counter, resource, total / 4)
    )
}

/// A library's worker under contention through the proxy (3 masters): no update lost and every
/// `check` as the library expects; with the lock bypassed, updates are lost (the negative
/// control); with a master SIGKILLed mid-run and restarted empty, no update lost.
async fn library_contention(name: &str, worker: Worker, iterations: u32) {
    let _one_at_a_time = HEAVY.lock().await;
    let ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());

    let run = run_n(
        worker,
        8,
        &p,
        &counter,
        &format!("{name}-a"),
        iterations,
        false,
    )
    .await;
    eprintln!("{name} through the proxy: {run:?}");
    assert!(run.ok > 0);
    run.assert_no_loss(&format!("{name} through the proxy"));
    run.assert_checks_clean(name);

    // The same driver against one plain redis-server: the library's own behaviour.
    let plain = Master::start();
    let run = run_n(
        worker,
        8,
        &plain.addr(),
        &counter,
        &format!("{name}-d"),
        iterations,
        false,
    )
    .await;
    eprintln!("{name} on one plain Redis: {run:?}");
    run.assert_no_loss(&format!("{name} on one plain Redis"));
    run.assert_checks_clean(name);

    let run = run_n(
        worker,
        8,
        &p,
        &counter,
        &format!("{name}-c"),
        iterations,
        true,
    )
    .await;
    eprintln!("{name}, lock bypassed: {run:?}");
    assert!(
        run.lost() > 0,
        "{name}: the control should lose updates, or the test proves nothing: {run:?}"
    );

    let (run, seen) = kill_round(worker, &format!("{name}-b"), iterations).await;
    eprintln!("{name}, master 1 SIGKILLed at counter {seen}, restarted empty: {run:?}");
    assert!(seen < run.ok, "{name}: the kill should fall mid-run");
    run.assert_no_loss(&format!("{name} across the master's kill"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warlock_contention_and_master_kill() {
    library_contention("warlock", warlock, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_distlock_contention_and_master_kill() {
    library_contention("distlock", distlock, 20).await;
}

/// Redis::DistLock with a host name as value: every worker writes the same value, so only a
/// `SET NX` answered nil whenever the key exists keeps them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_distlock_host_name_value_contention_and_master_kill() {
    library_contention("distlock-host", distlock_host_value, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_rb_contention_and_master_kill() {
    library_contention("redlock-rb", redlock_rb, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redsync_contention_and_master_kill() {
    library_contention("redsync", redsync, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_worker_contention_and_master_kill() {
    library_contention("redis-py", redis_py_worker, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redlock_worker_contention_and_master_kill() {
    library_contention("node-redlock", node_redlock_worker, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_redis_lock_worker_contention_and_master_kill() {
    library_contention("redis-lock", npm_redis_lock_worker, 15).await;
}

/// redlock-php (reproduced on Debian's php-redis; tokens from `uniqid()`, which repeat across
/// processes): (a) through the proxy no update is lost; (d) the same against one plain Redis;
/// (c) with the lock bypassed updates are lost. The unsafe `set_nx_reentrant` is measured only:
/// a repeated uniqid() must meet a contended retry in the same window to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_php_contention_loses_no_update() {
    let _one_at_a_time = HEAVY.lock().await;
    let ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let (ok, got, shared) = run_workers(redlock_php, &p, &counter, "php-a", 25, false).await;
    eprintln!(
        "redlock-php through the proxy: {ok} critical sections, counter {got}, {shared} tokens shared"
    );
    // redlock-php's tokens come from uniqid(), which two processes can draw alike; a worker
    // whose attempt fails then runs its unlock script on every server, deleting the holder's
    // lock that bears the same token. That loses updates on one plain Redis as well: it is the
    // library's, and only excused when a token was shared.
    assert!(got == ok || shared > 0, "updates lost through the proxy");
    assert!(ok > 0);

    let plain = Master::start();
    let (ok, got, shared) =
        run_workers(redlock_php, &plain.addr(), &counter, "php-d", 25, false).await;
    eprintln!(
        "redlock-php on one plain Redis: {ok} critical sections, counter {got}, {shared} tokens shared"
    );
    assert!(got == ok || shared > 0, "updates lost on one plain Redis");

    let (ok, got, _) = run_workers(redlock_php, &p, &counter, "php-c", 25, true).await;
    eprintln!("redlock-php, lock bypassed: {ok} critical sections, counter {got}");
    assert!(got < ok, "the control should lose updates ({got} of {ok})");

    let unsafe_p = proxy_with(&ms, |c| c.set_nx_reentrant = true).await;
    let (ok, got, _) = run_workers(redlock_php, &unsafe_p, &counter, "php-u", 25, false).await;
    eprintln!("redlock-php with set_nx_reentrant (unsafe): {ok} critical sections, counter {got}");
}

/// (b) redlock-php through the proxy while one master is SIGKILLed mid-run and restarted empty:
/// no update is lost. Its workers trace every critical section, so a loss names its cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_php_loses_no_update_when_a_master_is_killed() {
    let _one_at_a_time = HEAVY.lock().await;
    let (run, seen) = kill_round(redlock_php, "php-b", 80).await;
    eprintln!("redlock-php, master killed at counter {seen}, restarted empty: {run:?}");
    assert!(run.ok > 0 && seen < run.ok, "the kill should fall mid-run");
    run.assert_no_loss("redlock-php across the master's kill");
}

/// The hunt for the redlock-php loss seen once in a kill run (issue 9): `REDLOCK_PHP_HUNT=N`
/// repeats the kill round N times and prints every loss with its traced explanation; it fails
/// on a loss that no shared token explains. Without the variable it does nothing.
/// `REDLOCK_PHP_HUNT=40 cargo test --test libraries redlock_php_kill_hunt -- --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_php_kill_hunt() {
    let rounds: u32 = std::env::var("REDLOCK_PHP_HUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let _one_at_a_time = HEAVY.lock().await;
    let (mut sections, mut lost, mut shared_rounds) = (0, 0, 0);
    for round in 0..rounds {
        let (run, seen) = kill_round(redlock_php, &format!("php-h{round}"), 80).await;
        sections += run.ok;
        lost += run.lost();
        if run.shared > 0 {
            shared_rounds += 1;
        }
        if run.lost() > 0 {
            eprintln!(
                "round {round}: {} lost (kill at {seen}), {} tokens shared\n{}",
                run.lost(),
                run.shared,
                run.explain()
            );
            assert!(run.shared > 0, "a loss no shared token explains");
        }
    }
    if rounds > 0 {
        eprintln!(
            "redlock-php hunt: {rounds} kill rounds, {sections} critical sections, {lost} lost, \
             {shared_rounds} rounds with a shared token"
        );
    }
}

/// Redis::DistLock's extend (`lock($resource, $ttl, $value, 1)`, its EXTEND_SCRIPT by EVALSHA)
/// works through the proxy as on one Redis: every path of the script ends in what `SET key
/// value PX ttl` does (`SET ... XX PX`, else `SET ... NX PX`) and answers `OK`, so the proxy
/// runs it as that plain write, by the majority rule. The lock is then released normally. Also
/// its documented same-value form: a second caller with the same host name is refused.
/// (87608090… is the SHA1 of tests/clients/lua/distlock_EXTEND_SCRIPT.lua.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_distlock_extend_is_granted_and_a_same_value_caller_refused() {
    let ms = masters(3);
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let probe = |redis: &str| {
        let mut c = distlock();
        c.args(["--probe", "--redis", redis, "--resource", "dl:probe"]);
        c
    };
    let out = drive(probe(&p)).await;
    eprintln!("{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "lock granted");
    assert_eq!(lines[1], "extend granted logged: ", "{out}");
    assert_eq!(
        lines[2], "release 1",
        "the extended lock is still the caller's"
    );
    assert_eq!(lines[3], "same value: first granted, second refused");
    assert_eq!(lines[4], "release 1");

    let plain = Master::start();
    let out = drive(probe(&plain.addr())).await;
    assert!(out.contains("extend granted"), "one plain Redis: {out}");
}

/// The long kill run: several libraries at once against one proxy (3 masters), each on its own
/// resource with 3 contending workers, while the masters are SIGKILLed and restarted empty in
/// turn (one down at a time, every 1.5 s) until the run ends; no update may be lost. By default
/// a short run of about 3,200 grants; with `REDLOCK_LONG_RUN=1` about 24,300:
/// `REDLOCK_LONG_RUN=1 cargo test --test libraries long_kill_run -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_kill_run_loses_no_update() {
    let _one_at_a_time = HEAVY.lock().await;
    let long = std::env::var_os("REDLOCK_LONG_RUN").is_some_and(|v| v == "1");
    let iterations: u32 = if long { 900 } else { 120 };
    let libraries: [(&str, Worker); 12] = [
        ("redis-py", redis_py_worker),
        ("redisson", redisson),
        ("redisson-rw", redisson_rw_mode),
        ("redisson-fair", redisson_fair_mode),
        ("python-redis-lock", python_redis_lock),
        ("node-redlock", node_redlock_worker),
        ("redis-lock", npm_redis_lock_worker),
        ("redlock-php", redlock_php),
        ("warlock", warlock),
        ("redsync-px", redsync_px),
        ("redlock-rb", redlock_rb),
        ("distlock-host", distlock_host_value),
    ];
    // `REDLOCK_LONG_ONLY=name,name` runs those libraries alone (to look into one).
    let only = std::env::var("REDLOCK_LONG_ONLY").unwrap_or_default();
    let libraries: Vec<(&str, Worker)> = libraries
        .into_iter()
        .filter(|(n, _)| only.is_empty() || only.split(',').any(|o| o == *n))
        .collect();
    let mut ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let resources: Vec<String> = libraries.iter().map(|(n, _)| format!("long-{n}")).collect();
    let began = std::time::Instant::now();
    // A hang shows as a library whose counter stands still for `STUCK` before its workers are
    // done (checked while the masters are killed); the limit on each worker only ends a run
    // that still creeps along, however loaded the machine.
    const STUCK: Duration = Duration::from_secs(60);
    let limit = Duration::from_secs(if long { 3600 } else { 900 });
    let done = std::sync::atomic::AtomicBool::new(false);
    let finished: Vec<std::sync::atomic::AtomicBool> = resources
        .iter()
        .map(|_| std::sync::atomic::AtomicBool::new(false))
        .collect();
    let (p, counter) = (&p, &counter);
    let runs = async {
        let all =
            futures_util::future::join_all(libraries.iter().zip(&resources).zip(&finished).map(
                |(((_, worker), resource), finished)| async move {
                    let run =
                        run_n_for(limit, *worker, 3, p, counter, resource, iterations, false).await;
                    finished.store(true, std::sync::atomic::Ordering::SeqCst);
                    run
                },
            ))
            .await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        all
    };
    let faults = async {
        let mut kills = 0usize;
        let mut seen = vec![(0, std::time::Instant::now()); resources.len()];
        tokio::time::sleep(Duration::from_millis(700)).await;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            ms[kills % 3].kill();
            tokio::time::sleep(Duration::from_millis(300)).await;
            ms[kills % 3].restart();
            kills += 1;
            tokio::time::sleep(Duration::from_millis(1200)).await;
            for (i, resource) in resources.iter().enumerate() {
                let now = counter_value(counter, resource).await;
                if now != seen[i].0 {
                    seen[i] = (now, std::time::Instant::now());
                }
                assert!(
                    seen[i].1.elapsed() < STUCK
                        || finished[i].load(std::sync::atomic::Ordering::SeqCst),
                    "{}: no update in {STUCK:?} (counter {now}), its workers not done: stuck",
                    libraries[i].0
                );
            }
        }
        kills
    };
    let (all, kills) = tokio::join!(runs, faults);
    let secs = began.elapsed().as_secs_f64();
    let (mut grants, mut lost) = (0, 0);
    for ((name, _), run) in libraries.iter().zip(&all) {
        eprintln!("  {name}: {run:?}");
        run.assert_no_loss(&format!("{name} in the kill run"));
        // Redisson's read-write lock: no writer overlapped a reader or another writer.
        if let Some((_, overlaps)) = run.checks.get("exclusive") {
            assert_eq!(*overlaps, 0, "{name}: sections overlapped in the kill run");
        }
        grants += run.ok;
        lost += run.lost();
    }
    eprintln!(
        "long kill run: {grants} grants by {} libraries, {kills} master kills, {lost} updates lost, {secs:.1} s",
        libraries.len()
    );
    assert!(
        kills >= 2,
        "the masters should be killed more than once ({kills})"
    );
    assert_eq!(grants, libraries.len() as u64 * 3 * u64::from(iterations));
}

/// `Run::explain` tells a shared token from two distinct holders and flags a validity that ran
/// out inside the section (the analysis a lost update in a traced run is reported with).
#[test]
fn explain_names_the_cause_of_a_lost_update() {
    let cs = |worker, token: &str, read, began, left| Section {
        worker,
        token: token.into(),
        read,
        began,
        entered: began + 100,
        left,
        validity_ms: 1.0,
    };
    let run = Run {
        sections: vec![
            cs(0, "a", 7, 0, 500),
            cs(1, "a", 7, 200, 700),
            cs(2, "b", 9, 0, 500),
            cs(3, "c", 9, 0, 3000),
            cs(4, "d", 10, 0, 500),
        ],
        ..Run::default()
    };
    let text = run.explain();
    assert!(
        text.contains("counter value 7 read by 2 sections:"),
        "{text}"
    );
    assert!(text.contains("a token shared between workers"), "{text}");
    assert!(
        text.contains("counter value 9 read by 2 sections:"),
        "{text}"
    );
    assert!(text.contains("distinct tokens held at once"), "{text}");
    assert!(
        text.contains(
            "worker 3 token c entered 100 left 3000 held 3.0 ms of 1.0 ms (validity ran out inside)"
        ),
        "{text}"
    );
    assert!(!text.contains("value 10"), "{text}");
}

fn python_redis_lock() -> Command {
    python_driver("python_redis_lock.py")
}

/// python-redis-lock 4.0 (PyPI, unmodified): non-blocking and blocking acquire, a waiter in
/// `BLPOP` woken by the release's signal list, `with`, extend, reset and its errors, at N = 3
/// and 5, with each master checked behind the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_lock_works_unmodified() {
    let _one_at_a_time = HEAVY.lock().await;
    api_at_3_and_5(python_redis_lock, "api").await;
}

/// python-redis-lock workers (`with Lock`, waiting in `BLPOP`) under contention lose no update
/// through the proxy, nor while a master is SIGKILLed and restarted empty; with the lock
/// bypassed they do (the control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_lock_contention_loses_no_update() {
    let _one_at_a_time = HEAVY.lock().await;
    let mut ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let (ok, got, _) = run_workers(python_redis_lock, &p, &counter, "prl-a", 20, false).await;
    eprintln!("python-redis-lock through the proxy: {ok} critical sections, counter {got}");
    assert_eq!(got, ok, "updates lost through the proxy");
    assert!(ok > 0);

    let (ok, got, _) = run_workers(python_redis_lock, &p, &counter, "prl-c", 20, true).await;
    eprintln!("python-redis-lock, lock bypassed: {ok} critical sections, counter {got}");
    assert!(got < ok, "the control should lose updates ({got} of {ok})");

    let run = run_workers(python_redis_lock, &p, &counter, "prl-b", 40, false);
    let fault = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        ms[2].kill();
        tokio::time::sleep(Duration::from_millis(300)).await;
        ms[2].restart();
    };
    let ((ok, got, _), ()) = tokio::join!(run, fault);
    eprintln!(
        "python-redis-lock, master killed and restarted: {ok} critical sections, counter {got}"
    );
    assert_eq!(got, ok, "updates lost across the master's kill");
    assert!(ok > 0);
}

fn redisson() -> Command {
    python_driver("redisson.py")
}

/// Redisson's `RLock` protocol (its exact scripts, EVALSHA then EVAL, `<uuid>:<threadId>`
/// fields, waiters subscribed to `redisson_lock__channel:{name}`, the watchdog, the unlock
/// latch): re-entrancy and hold counts by `HGET`/`HEXISTS`, a waiter woken once and quickly by
/// the release, renewal past the lease, `forceUnlock`, a dead holder's lock expiring, and a
/// publish command other than `publish`/`spublish` refused, at N = 3 and 5, with each master
/// checked behind the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_rlock_works_through_the_proxy() {
    let _one_at_a_time = HEAVY.lock().await;
    api_at_3_and_5(redisson, "api").await;
}

/// Redisson `RLock` workers (two threads per process, waiting on the release channel, the
/// watchdog renewing) under contention: no update lost through the proxy, updates lost with
/// the lock bypassed (the control), no update lost across a master's SIGKILL and empty restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_contention_and_master_kill() {
    library_contention("redisson", redisson, 20).await;
}

fn redisson_fenced() -> Command {
    let mut c = redisson();
    c.arg("--fenced");
    c
}

/// Redisson `RFencedLock` workers (lockAndGetToken, two threads per process) under contention
/// while master 1 is SIGKILLed and restarted empty: no update lost, and ordered by the counter
/// value each critical section read, the tokens strictly grow (every later grant a larger token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_fenced_tokens_grow_across_a_master_kill() {
    let _one_at_a_time = HEAVY.lock().await;
    let mut ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let (workers, iterations) = (6, 20u32);
    let resource = "fenced-a";
    let counter_addr = counter.addr();
    let runs = async {
        let mut handles = Vec::new();
        for _ in 0..workers {
            let mut cmd = redisson_fenced();
            cmd.args(["--redis", &p, "--counter", &counter_addr])
                .args([
                    "--resource",
                    resource,
                    "--iterations",
                    &iterations.to_string(),
                ])
                .args(["--hold-ms", "2"]);
            handles.push(tokio::spawn(drive(cmd)));
        }
        let mut outs = Vec::new();
        for h in handles {
            outs.push(h.await.expect("worker task"));
        }
        outs
    };
    let total = workers as u64 * u64::from(iterations);
    let (outs, seen) = tokio::join!(runs, kill_when(&mut ms, 1, &counter, resource, total / 4));
    let mut sections: Vec<(u64, i64)> = Vec::new();
    let mut done = 0;
    for out in &outs {
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("fence ") {
                let f: Vec<&str> = rest.split_whitespace().collect();
                sections.push((f[0].parse().unwrap(), f[1].parse().unwrap()));
            }
            if let Some(n) = line.strip_prefix("done ") {
                done += n.trim().parse::<u64>().unwrap();
            }
        }
    }
    let got = counter_value(&counter, resource).await;
    eprintln!(
        "redisson fenced: {done} grants, counter {got}, master killed at {seen}, {} tokens",
        sections.len()
    );
    assert_eq!(done, total);
    assert_eq!(got, done, "updates lost");
    assert!(seen < done, "the kill should fall mid-run");
    sections.sort();
    let reads: Vec<u64> = sections.iter().map(|s| s.0).collect();
    assert_eq!(
        reads,
        (0..total).collect::<Vec<u64>>(),
        "each value read once"
    );
    for pair in sections.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "token {} after {} (counter {} then {})",
            pair[1].1,
            pair[0].1,
            pair[0].0,
            pair[1].0
        );
    }
}

/// A Python driver in tests/clients that reproduces a library's wire behaviour.
fn python_driver(file: &str) -> Command {
    let mut c = Command::new(python());
    c.arg(clients_dir().join(file));
    c
}

fn spring() -> Command {
    python_driver("spring_lock.py")
}

fn spring_pubsub() -> Command {
    let mut c = spring();
    c.arg("--pubsub");
    c
}

/// Spring Integration's `RedisLockRegistry` (its wire behaviour, by our driver; Spring is Java):
/// the spin lock's obtain (acquire-or-refresh) and unlock scripts, re-entrancy, a waiter in the
/// spin loop, the ConcurrentModificationException of a lock that expired while held, renewal
/// keeping a lock past its expiry, `renewLock`, and `expireUnusedOlderThan` evicting only
/// unused locks; at N = 3 and 5 with each master checked behind the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_lock_registry_works_through_the_proxy() {
    let _one_at_a_time = HEAVY.lock().await;
    api_at_3_and_5(spring, "api").await;
}

/// `RedisLockRegistry` spin-lock workers (two threads per registry) under contention: no update
/// lost through the proxy nor on one Redis, every unlock answered true; with the lock bypassed
/// updates are lost; none lost across a master's SIGKILL and empty restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_spin_lock_contention_and_master_kill() {
    library_contention("spring-spin", spring, 20).await;
}

/// The pub/sub lock: a waiter (PSUBSCRIBE `<registry>-channel:*`) woken by the unlock's message,
/// one message per release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_pubsub_lock_wakes_waiters() {
    let _one_at_a_time = HEAVY.lock().await;
    api_at_3_and_5(spring, "pubsub").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_pubsub_lock_contention_and_master_kill() {
    library_contention("spring-pubsub", spring_pubsub, 20).await;
}

fn shedlock() -> Command {
    python_driver("shedlock.py")
}

fn shedlock_safe_update() -> Command {
    let mut c = shedlock();
    c.arg("--safe-update");
    c
}

/// ShedLock's Redis provider (its wire behaviour, by our driver; ShedLock is Java), plain and
/// with `safeUpdate`: a held lock skips other runs, unlock by `DEL`, unlock within
/// lock-at-least-for by `SET … XX PX` keeping the lock (same value) until then, extend by
/// `SET … XX PX`, an expired lock not recreated by extend, and (safeUpdate) a late unlock that
/// leaves the next holder's lock alone; at N = 3 and 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shedlock_works_through_the_proxy() {
    let _one_at_a_time = HEAVY.lock().await;
    api_at_3_and_5(shedlock, "api").await;
}

/// ShedLock workers (every other run kept for lock-at-least-for, so released by `SET XX PX`;
/// every third extended first) under contention and a master's kill; the control loses updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shedlock_contention_and_master_kill() {
    library_contention("shedlock", shedlock, 20).await;
}

/// The same with `safeUpdate` (its compare-and-delete and compare-and-pexpire scripts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shedlock_safe_update_contention_and_master_kill() {
    library_contention("shedlock-safe", shedlock_safe_update, 20).await;
}

fn laravel() -> Command {
    let mut c = Command::new("php");
    c.arg(clients_dir().join("laravel_lock.php"));
    c
}

/// Laravel's `Cache::lock` on phpredis (its wire behaviour, by our driver on Debian's php-redis):
/// `get()` with a callback, release only by the owner (and by a lock restored with the owner),
/// `block()` waiting out a dead holder's lock and timing out on a live one, `forceRelease()`, and
/// a lock without seconds (`SETNX`, no expiry) given the deadlock guard's TTL; N = 3 and 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_cache_lock_works_through_the_proxy() {
    api_at_3_and_5(laravel, "api").await;
}

/// `Lock::refresh()` (Laravel 12/13), its refresh script extending in seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_lock_refresh_extends_the_lock() {
    api_at_3_and_5(laravel, "refresh").await;
}

/// Laravel workers (`block(10, callback)`, owner checked inside) under contention and a
/// master's kill; the control loses updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_contention_and_master_kill() {
    library_contention("laravel", laravel, 20).await;
}

fn stackexchange() -> Command {
    python_driver("stackexchange.py")
}

/// StackExchange.Redis's `LockTake` (`SET NX` with `PX` or `EX`), `LockQuery` (`GET`),
/// `LockExtend` and `LockRelease` (its `WATCH`, `GET`, `MULTI`, `PEXPIRE`/`EXPIRE`/`DEL`, `EXEC`
/// transactions; `UNWATCH` when the value differs), an `EXEC` aborted when the lock changed hands
/// after `WATCH`, and the forms it sends to Redis 8.4 (`SET … IFEQ … PX` to extend, `DELEX … IFEQ`
/// to release) answered as Redis 8.4 answers them; N = 3 and 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stackexchange_lock_api_works_through_the_proxy() {
    api_at_3_and_5(stackexchange, "api").await;
}

/// StackExchange.Redis workers (take, query, extend and release by transaction) under
/// contention and a master's kill; the control loses updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stackexchange_contention_and_master_kill() {
    library_contention("stackexchange", stackexchange, 20).await;
}

/// The libraries with Redis Cluster members: three members, each a real cluster (three
/// primaries with a replica each). Every library's worker, among them Redisson's `RLock` and
/// read-write and fair locks (hash locks, their channels and queues `{name}`-tagged) and
/// python-redis-lock (its lock and its signal list in different slots: the release is split per
/// slot, the signal pushed after), runs under contention through the proxy: no update lost, every `check` as the library
/// expects; with the lock bypassed, updates are lost (the negative control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_work_with_cluster_members() {
    let _one_at_a_time = HEAVY.lock().await;
    let cs: Vec<RedisCluster> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3).map(|_| s.spawn(RedisCluster::start)).collect();
        hs.into_iter().map(|h| h.join().expect("cluster")).collect()
    });
    let urls: Vec<String> = cs.iter().map(RedisCluster::url).collect();
    let p = format!("127.0.0.1:{}", proxy(config_for(&urls)).await.port());
    let counter = Master::start();
    let workers: Vec<(&str, Worker)> = vec![
        ("redis-py", redis_py_worker),
        ("node-redlock", node_redlock_worker),
        ("redisson", redisson),
        ("python-redis-lock", python_redis_lock),
        ("redlock-php", redlock_php),
        ("npm-redis-lock", npm_redis_lock_worker),
        ("warlock", warlock),
        ("distlock", distlock),
        ("redlock-rb", redlock_rb),
        ("redsync", redsync),
        ("redisson-fenced", redisson_fenced),
        ("spring", spring),
        ("spring-pubsub", spring_pubsub),
        ("shedlock", shedlock),
        ("laravel", laravel),
        ("stackexchange", stackexchange),
        ("redisson-rw", redisson_rw_mode),
        ("redisson-fair", redisson_fair_mode),
    ];
    for (name, worker) in workers {
        let run = run_n(worker, 6, &p, &counter, &format!("cl-{name}"), 15, false).await;
        eprintln!("{name} with cluster members: {run:?}");
        assert!(run.ok > 0, "{name}: {run:?}");
        run.assert_no_loss(&format!("{name} with cluster members"));
        run.assert_checks_clean(name);
    }
    bypassed_loses(&p, &counter, "cl-control").await;
}

/// The negative control of a run through `p`: redis-py's workers with the lock bypassed, six
/// of them, must lose updates. Workers that a loaded machine starts one after the other may not
/// overlap at all, so it is run up to three times, until one run loses; panics if none does.
async fn bypassed_loses(p: &str, counter: &Master, prefix: &str) {
    let mut runs = Vec::new();
    for i in 0..3 {
        let run = run_n(
            redis_py_worker,
            6,
            p,
            counter,
            &format!("{prefix}{i}"),
            15,
            true,
        )
        .await;
        eprintln!("{prefix}, the lock bypassed: {run:?}");
        if run.lost() > 0 {
            return;
        }
        runs.push(run);
    }
    panic!("the control should lose updates, or the test proves nothing: {runs:?}");
}

fn redisson_rw(mode: &str) -> Command {
    let mut c = Command::new(python());
    c.arg(clients_dir().join("redisson_rw.py"))
        .args(["--mode", mode]);
    c
}

fn redisson_rw_mode() -> Command {
    redisson_rw("rw")
}

fn redisson_fair_mode() -> Command {
    redisson_rw("fair")
}

/// The fair-lock worker with Redisson's plain `RLock` instead: the control of the order.
fn redisson_unfair_mode() -> Command {
    let mut c = redisson_rw("fair");
    c.arg("--unfair");
    c
}

/// redisson_rw.py's behaviour checks (`rw-api`, `fair-api`).
fn redisson_rw_checks() -> Command {
    python_driver("redisson_rw.py")
}

/// Runs one of redisson_rw.py's behaviour checks (`rw-api`, `fair-api`) at N = 3 and 5.
async fn redisson_rw_api(which: &str) {
    let _one_at_a_time = HEAVY.lock().await;
    api_at_3_and_5(redisson_rw_checks, which).await;
}

/// Redisson's `RReadWriteLock` (its exact scripts, run as sent on every master and decided by
/// the quorum): readers hold together and a writer is refused with the PTTL; re-entrant reads
/// with one timeout key per hold; a writer excludes readers and writers, re-enters, may read
/// while it writes, and unlocking down to read mode lets readers in; no writer preference (as
/// Redisson); each unlock's message wakes the waiter at once; both watchdogs renew past the
/// lease; `forceUnlock` by mode; a grant over one disagreeing master, a refusal with the PTTL
/// of a majority that disagree and the partial grant rolled back; a publish command other than
/// `publish`/`spublish` refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_read_write_lock_works_through_the_proxy() {
    redisson_rw_api("rw-api").await;
}

/// Redisson's `RFairLock`: re-entrancy, `tryLock()` without a wait answers 1, a waiter queued
/// alike on every master, a wait that runs out leaves the queue (`acquireFailed`), the first
/// waiter woken on its own channel at once, `forceUnlock`, and five waiters served in their
/// arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_fair_lock_works_through_the_proxy() {
    redisson_rw_api("fair-api").await;
}

/// The one-holder rule of `RReadWriteLock` under contention (8 processes, two threads each,
/// alternating writer and reader): through the proxy no writer overlaps a reader or another
/// writer, readers' snapshots hold, no update is lost, and readers do hold together; the same
/// on one plain Redis; with the lock bypassed, overlaps and lost updates (the control); and
/// with master 1 SIGKILLed mid-run and restarted empty, still no overlap and no loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_read_write_contention_and_master_kill() {
    let _one_at_a_time = HEAVY.lock().await;
    let name = "redisson-rw";
    let iterations = 20;
    let ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let worker = redisson_rw_mode as Worker;

    let run = run_n(worker, 8, &p, &counter, "rw-a", iterations, false).await;
    eprintln!("{name} through the proxy: {run:?}");
    assert!(run.ok > 0);
    run.assert_no_loss(name);
    run.assert_checks_clean(name);

    let plain = Master::start();
    let run = run_n(
        worker,
        8,
        &plain.addr(),
        &counter,
        "rw-d",
        iterations,
        false,
    )
    .await;
    eprintln!("{name} on one plain Redis: {run:?}");
    run.assert_no_loss(&format!("{name} on one plain Redis"));
    run.assert_checks_clean(name);

    let run = run_n(worker, 8, &p, &counter, "rw-c", iterations, true).await;
    eprintln!("{name}, lock bypassed: {run:?}");
    let overlaps = run.checks.get("exclusive").map_or(0, |c| c.1);
    assert!(
        run.lost() > 0 && overlaps > 0,
        "{name}: the control should lose updates and overlap, or the test proves nothing"
    );

    let (run, seen) = kill_round(worker, "rw-b", iterations).await;
    eprintln!("{name}, master 1 SIGKILLed at counter {seen}, restarted empty: {run:?}");
    assert!(seen < run.ok, "{name}: the kill should fall mid-run");
    run.assert_no_loss(&format!("{name} across the master's kill"));
    run.assert_checks_clean(&format!("{name} across the master's kill"));
}

/// `fair SENT REPLIED GRANTED` lines of a fair-lock run: how many grants had queued, and the
/// pairs served out of arrival order (a waiter whose queueing call was answered before another
/// sent its own, yet granted after it).
fn fair_overtakes(run_outputs: &[(u64, u64, u64)]) -> usize {
    let mut overtaken = 0;
    for a in run_outputs {
        for b in run_outputs {
            if a.1 < b.0 && b.2 < a.2 {
                overtaken += 1;
            }
        }
    }
    overtaken
}

/// The fair lock under contention (8 processes, two threads each, read–sleep–write): through the
/// proxy, with all masters up, no update lost and no waiter served before one that queued ahead
/// of it; on one plain Redis the same; the same run with `RLock` (not fair) serves waiters out
/// of order, so the order check can fail (its control); with the lock bypassed, updates lost
/// (the control of the counter); with master 1 SIGKILLed mid-run and restarted empty, no update
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_fair_contention_order_and_master_kill() {
    let _one_at_a_time = HEAVY.lock().await;
    let name = "redisson-fair";
    let iterations = 20;
    let ms = masters(3);
    let counter = Master::start();
    let p = format!("127.0.0.1:{}", proxy_for(&ms).await.port());
    let worker = redisson_fair_mode as Worker;
    for (what, redis, resource) in [
        ("through the proxy", p.clone(), "fair-a"),
        ("on one plain Redis", Master::start().addr(), "fair-d"),
    ] {
        let (run, queued) = fair_run(worker, &redis, &counter, resource, iterations).await;
        let overtakes = fair_overtakes(&queued);
        eprintln!(
            "{name} {what}: {run:?}, {} grants queued first, {overtakes} out of order",
            queued.len()
        );
        assert!(run.ok > 0);
        run.assert_no_loss(&format!("{name} {what}"));
        assert!(
            queued.len() > 10,
            "{name} {what}: contention queued waiters"
        );
        assert_eq!(
            overtakes, 0,
            "{name} {what}: waiters served out of arrival order"
        );
    }
    let (_, queued) = fair_run(redisson_unfair_mode, &p, &counter, "fair-e", iterations).await;
    let overtakes = fair_overtakes(&queued);
    eprintln!("{name} with RLock instead: {overtakes} out of order");
    assert!(
        overtakes > 0,
        "{name}: RLock should serve waiters out of order"
    );
    let run = run_n(worker, 8, &p, &counter, "fair-c", iterations, true).await;
    eprintln!("{name}, lock bypassed: {run:?}");
    assert!(run.lost() > 0, "{name}: the control should lose updates");
    let (run, seen) = kill_round(worker, "fair-b", iterations).await;
    eprintln!("{name}, master 1 SIGKILLed at counter {seen}, restarted empty: {run:?}");
    assert!(seen < run.ok, "{name}: the kill should fall mid-run");
    run.assert_no_loss(&format!("{name} across the master's kill"));
}

/// A fair-lock contention run that also returns each queued grant's `fair` line.
async fn fair_run(
    worker: Worker,
    redis: &str,
    counter: &Master,
    resource: &str,
    iterations: u32,
) -> (Run, Vec<(u64, u64, u64)>) {
    let counter_addr = counter.addr();
    let mut handles = Vec::new();
    for _ in 0..8 {
        let mut cmd = worker();
        cmd.args(["--redis", redis, "--counter", &counter_addr])
            .args([
                "--resource",
                resource,
                "--iterations",
                &iterations.to_string(),
            ])
            .args(["--hold-ms", "2"]);
        handles.push(tokio::spawn(drive(cmd)));
    }
    let mut run = Run::default();
    let mut queued = Vec::new();
    for h in handles {
        let out = h.await.expect("worker task");
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("fair ") {
                let f: Vec<u64> = rest
                    .split_whitespace()
                    .map(|v| v.parse().unwrap())
                    .collect();
                queued.push((f[0], f[1], f[2]));
            }
            if let Some(n) = line.strip_prefix("done ") {
                run.ok += n.trim().parse::<u64>().unwrap();
            }
        }
    }
    run.got = counter_value(counter, resource).await;
    (run, queued)
}

/// Fair order across a master's loss: a holder and five waiters queued on every master; master
/// 1 is SIGKILLed and restarted empty (its lock and queue gone); the holder unlocks; the waiters
/// are still served in arrival order, since every grant needs the two masters that kept the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_fair_order_is_kept_when_a_master_restarts_empty() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let _one_at_a_time = HEAVY.lock().await;
    let mut ms = masters(3);
    let proxy = proxy_for(&ms).await;
    let mut cmd = Command::new(python());
    cmd.arg(clients_dir().join("redisson_rw.py"))
        .args(["fair-order", &proxy.port().to_string(), "5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("driver started");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let next = |l: Option<String>| l.unwrap_or_default();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("queued in time")
        .unwrap();
    assert_eq!(next(first), "queued");
    let queue = "redisson_lock_queue:{order}";
    for m in &ms {
        match m.client().await.cmd(&["LLEN", queue]).await {
            Reply::Integer(n) => assert_eq!(n, 5, "five waiters queued on every master"),
            other => panic!("LLEN: {other:?}"),
        }
    }
    ms[1].kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    ms[1].restart();
    stdin.write_all(b"go\n").await.unwrap();
    let order = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("served in time")
        .unwrap();
    assert_eq!(next(order), "order 0 1 2 3 4");
    assert!(child.wait().await.unwrap().success());
}

/// The libraries run with Sentinel members: redis-py's and node-redlock's workers, Redisson's
/// `RLock` scripts (waiters subscribed to the unlock channel), python-redis-lock (waiters in
/// `BLPOP` on its signal list), Spring's pub/sub lock (waiters on `PSUBSCRIBE`) and ShedLock.
const SENTINEL_LIBRARIES: [(&str, Worker); 6] = [
    ("redis-py", redis_py_worker),
    ("node-redlock", node_redlock_worker),
    ("redisson", redisson),
    ("python-redis-lock", python_redis_lock),
    ("spring-pubsub", spring_pubsub),
    ("shedlock", shedlock),
];

/// A proxy for the Sentinel members of `rig`, with failover quarantine on and `max_ttl_ms`
/// 5000: the largest TTL these workers ask for (python-redis-lock's, Spring's and ShedLock's
/// 5 s; Redisson's lease is 3 s and its unlock latch 5 s), which keeps the quarantine windows
/// short. Patient timeouts (a loaded machine runs two dozen worker processes). Returns once the
/// fresh primaries have sat out the young-primary rule.
async fn sentinel_proxy(rig: &support::sentinel::Rig) -> String {
    let mut config = support::sentinel::sentinel_config(&rig.backends(), true);
    config.max_ttl_ms = 5000;
    config.node_timeout_ms = 250;
    config.stall_timeout_ms = 2000;
    config.connect_timeout_ms = 1000;
    let p = proxy(config).await.to_string();
    wait_trusted(&p, 3, Duration::from_secs(30)).await;
    p
}

/// Every library of `libs` at once, `workers` workers each on its own resource
/// `<prefix>-<name>`, the lock bypassed where the entry says so.
async fn run_libraries(
    libs: &[(&str, Worker, bool)],
    workers: usize,
    redis: &str,
    counter: &Master,
    prefix: &str,
    iterations: u32,
) -> Vec<Run> {
    let limit = Duration::from_secs(120);
    let resources: Vec<String> = libs
        .iter()
        .map(|(name, _, _)| format!("{prefix}-{name}"))
        .collect();
    futures_util::future::join_all(libs.iter().zip(&resources).map(
        |((_, worker, no_lock), resource)| {
            run_n_for(
                limit, *worker, workers, redis, counter, resource, iterations, *no_lock,
            )
        },
    ))
    .await
}

/// The sum of the counters of `libs`' resources under `prefix`.
async fn counters_sum(libs: &[(&str, Worker, bool)], counter: &Master, prefix: &str) -> u64 {
    let mut sum = 0;
    for (name, _, _) in libs {
        sum += counter_value(counter, &format!("{prefix}-{name}")).await;
    }
    sum
}

/// Waits until the counters of `libs` under `prefix` sum to `at` at least (at most 60 s), and
/// returns the sum seen.
async fn when_counters_reach(
    libs: &[(&str, Worker, bool)],
    counter: &Master,
    prefix: &str,
    at: u64,
) -> u64 {
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen = counters_sum(libs, counter, prefix).await;
        if seen >= at || std::time::Instant::now() > until {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until proxy `p` is connected to `primary` as member `i` and trusts all three members
/// again (the failover quarantine over).
async fn wait_followed(p: &str, i: usize, primary: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while support::sentinel::master_field(p, i, "primary").await != primary {
        assert!(
            std::time::Instant::now() < until,
            "the proxy did not follow member {i} to {primary}: {}",
            redlock_info(p).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_trusted(p, 3, Duration::from_secs(60)).await;
}

/// The libraries with Sentinel members: three members, each a primary and a replica watched by
/// three real `redis-sentinel`s, the proxy resolving each member's primary through them. The
/// libraries of [`SENTINEL_LIBRARIES`] run at once under contention (four workers each, on a
/// resource each): no update lost, every `check` as the library expects (Spring's unlocks,
/// ShedLock's extends); then redis-py's workers with the lock bypassed lose updates (the
/// negative control, [`bypassed_loses`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_work_with_sentinel_members() {
    let _one_at_a_time = HEAVY.lock().await;
    let rig = support::sentinel::Rig::start().await;
    let p = sentinel_proxy(&rig).await;
    let counter = Master::start();
    let libs: Vec<(&str, Worker, bool)> = SENTINEL_LIBRARIES
        .iter()
        .map(|(n, w)| (*n, *w, false))
        .collect();
    let runs = run_libraries(&libs, 4, &p, &counter, "sen", 12).await;
    for ((name, _, _), run) in libs.iter().zip(&runs) {
        eprintln!("{name} with Sentinel members: {run:?}");
        assert_eq!(run.ok, 4 * 12, "{name}: every worker finished");
        run.assert_no_loss(&format!("{name} with Sentinel members"));
        run.assert_checks_clean(name);
    }
    bypassed_loses(&p, &counter, "sen-control").await;
}

/// Runs `libs` (three workers each) in batches on fresh resources `<prefix><batch>-<name>`,
/// one after another, while `fault` runs and for one more batch begun after it ended, so
/// workers run across the fault however fast the machine is. In every batch every worker
/// finishes and, where the lock is used, no update is lost. Returns the batches, and the
/// updates the bypassed entries lost in all.
async fn batches_across(
    libs: &[(&str, Worker, bool)],
    p: &str,
    counter: &Master,
    prefix: &str,
    what: &str,
    fault: impl std::future::Future<Output = ()>,
) -> (usize, u64) {
    let (workers, iterations) = (3, 10u32);
    let done = std::sync::atomic::AtomicBool::new(false);
    let batches = async {
        let (mut batches, mut lost) = (0, 0);
        loop {
            let ended = done.load(std::sync::atomic::Ordering::SeqCst);
            let name = format!("{prefix}{batches}");
            let runs = run_libraries(libs, workers, p, counter, &name, iterations).await;
            for ((lib, _, no_lock), run) in libs.iter().zip(&runs) {
                eprintln!("{lib}, {what}, batch {batches}: {run:?}");
                assert_eq!(
                    run.ok,
                    workers as u64 * u64::from(iterations),
                    "{lib}, {what}: every worker finished"
                );
                if *no_lock {
                    lost += run.lost();
                } else {
                    run.assert_no_loss(&format!("{lib}, {what}"));
                }
            }
            batches += 1;
            if ended {
                return (batches, lost);
            }
        }
    };
    let faults = async {
        fault.await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    tokio::join!(batches, faults).0
}

/// The libraries of [`SENTINEL_LIBRARIES`] across Sentinel failovers, run in batches of three
/// workers each on a resource each (see [`batches_across`]). Round 1: `SENTINEL FAILOVER` of
/// member 0 (its replica promoted, the old primary demoted). Round 2, once the proxy trusts
/// member 0's new primary: `kill -9` of member 1's primary, which the Sentinels then replace
/// with its replica. Every worker finishes (none stuck on a lock or a wait) and no update is
/// lost; redis-py with the lock bypassed, alongside in round 1 (or after it, where those
/// workers never overlapped), loses updates (the negative control). Then, after the failover quarantine, the libraries run again: they make progress,
/// lose nothing, and every `check` is as the library expects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_keep_working_across_sentinel_failovers() {
    let _one_at_a_time = HEAVY.lock().await;
    let mut rig = support::sentinel::Rig::start().await;
    let p = sentinel_proxy(&rig).await;
    let counter = Master::start();
    let libs: Vec<(&str, Worker, bool)> = SENTINEL_LIBRARIES
        .iter()
        .map(|(n, w)| (*n, *w, false))
        .collect();

    // Round 1: SENTINEL FAILOVER of member 0; a bypassed run alongside.
    let mut with_control = libs.clone();
    with_control.push(("control", redis_py_worker, true));
    let new0 = rig.replicas[0].addr();
    let what = "across SENTINEL FAILOVER";
    let (batches, lost) = batches_across(&with_control, &p, &counter, "fo", what, async {
        when_counters_reach(&libs, &counter, "fo0", 20).await;
        rig.fail_over(0).await;
        rig.wait_primary(0, &new0, Duration::from_secs(30)).await;
    })
    .await;
    eprintln!("{what}: {batches} batches, {lost} updates lost with the lock bypassed");
    // Three bypassed workers that a loaded machine starts one after the other may not overlap:
    // then the control runs once more, with six workers, as the other libraries' controls do.
    if lost == 0 {
        bypassed_loses(&p, &counter, "fo-control").await;
    }
    wait_followed(&p, 0, &new0).await;

    // Round 2: kill -9 of member 1's primary.
    let new1 = rig.replicas[1].addr();
    let what = "across a kill -9 of a primary";
    let (batches, _) = batches_across(&libs, &p, &counter, "kill", what, async {
        when_counters_reach(&libs, &counter, "kill0", 20).await;
        tokio::task::block_in_place(|| rig.primaries[1].kill());
        rig.wait_primary(1, &new1, Duration::from_secs(30)).await;
    })
    .await;
    eprintln!("{what}: {batches} batches");
    wait_followed(&p, 1, &new1).await;

    // After the quarantine: progress, and the libraries' checks clean.
    let workers = 3;
    let runs = run_libraries(&libs, workers, &p, &counter, "after", 8).await;
    for ((name, _, _), run) in libs.iter().zip(&runs) {
        eprintln!("{name}, after the failovers: {run:?}");
        assert_eq!(run.ok, workers as u64 * 8, "{name}: every worker finished");
        run.assert_no_loss(&format!("{name} after the failovers"));
        run.assert_checks_clean(&format!("{name} after the failovers"));
    }
}
