//! Leases (issue 26): a lock acquired through the proxy on keys that match `lease_keys` is
//! renewed by the proxy while the connection that acquired it stays open, up to `lease_max_ms`;
//! it ends quietly when released (through any proxy), at the maximum, or when the connection
//! closes (and is then released at once with `lease_release_on_disconnect`); a renewal that
//! cannot reach a quorum loses it, and the loss is counted, logged, and told on
//! `redlock-proxy:lease-lost` and, to a RESP3 holder, as a push.
//!
//! Every positive result has its negative control, asserted: the same run with leases off loses
//! the lock; keys outside the patterns, a user's own patterns and `lease_max_ms` show where
//! renewal stops. Real clients (redis-py's `Lock`, node-redlock, the Redisson `RLock` protocol of
//! tests/clients/redisson.py) are driven by tests/clients/leases.py and tests/clients/leases.js.
//! Leases are configured only as TOML text, as an operator writes them.
//!
//! TTLs are short (0.6–2 s) so each test takes a few seconds; every timing bound leaves a
//! factor of about two, as the machine is small and shared.

mod support;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::fault::{Fault, FaultProxy};
use support::load::{Checker, Load, Spec, Targets};
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

/// The lease patterns most tests use.
const LEASED: &str = r#"lease_keys = ["lease:*"]"#;

/// The channel a lost lease is told on.
const LOST_CHANNEL: &str = "redlock-proxy:lease-lost";

/// A proxy in this test's runtime, and its metrics endpoint.
struct Leasing {
    addr: String,
    metrics: String,
    /// The default user's password, when the settings give one.
    password: Option<String>,
}

impl Leasing {
    fn port(&self) -> String {
        self.addr.rsplit(':').next().expect("a port").to_string()
    }

    /// A field of `INFO redlock`, as a number.
    async fn count(&self, name: &str) -> u64 {
        let info = self.info().await;
        field(&info, name)
            .parse()
            .unwrap_or_else(|_| panic!("INFO redlock has no number {name}:\n{info}"))
    }

    async fn info(&self) -> String {
        let mut c = Client::connect(&self.addr).await;
        if let Some(p) = &self.password {
            assert_eq!(c.cmd(&["AUTH", p]).await, Reply::ok());
        }
        c.text(&["INFO", "redlock"]).await
    }

    /// Waits (at most `within`) until `INFO redlock` field `name` is at least `least`.
    async fn wait_at_least(&self, name: &str, least: u64, within: Duration) {
        let until = Instant::now() + within;
        while self.count(name).await < least {
            assert!(
                Instant::now() < until,
                "INFO {name} stays below {least} for {within:?}:\n{}",
                self.info().await
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (at most `within`) until `INFO redlock` field `name` is `want`; panics otherwise.
    async fn wait_count(&self, name: &str, want: u64, within: Duration) {
        let until = Instant::now() + within;
        loop {
            let now = self.count(name).await;
            if now == want {
                return;
            }
            assert!(
                Instant::now() < until,
                "INFO {name} is {now}, not {want}, after {within:?}:\n{}",
                self.info().await
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// One sample of `/metrics` (`name` with its labels, as written there), as a number.
    async fn metric(&self, name: &str) -> f64 {
        let (_, text) = http_get(&self.metrics, "/metrics", "").await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("/metrics has no sample {name}:\n{text}"))
    }
}

/// Starts a proxy in front of `backends` with the test defaults and `settings`: TOML text as in
/// the configuration file (top-level keys first, `[[users]]` tables last). The lease settings
/// are only ever given this way.
async fn start(backends: &[String], settings: &str) -> Leasing {
    init_logs();
    let metrics = format!("127.0.0.1:{}", free_port());
    let list: Vec<String> = backends.iter().map(|b| format!("{b:?}")).collect();
    let text = format!(
        "backends = [{}]\nmetrics_listen = {metrics:?}\nquarantine = false\n\
         node_timeout_ms = 100\nstall_timeout_ms = 400\nconnect_timeout_ms = 300\n\
         probe_interval_ms = 100\nreconnect_min_ms = 10\nreconnect_max_ms = 100\n{settings}\n",
        list.join(", ")
    );
    let config = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let password = config.password.clone();
    let addr = proxy(config).await.to_string();
    Leasing {
        addr,
        metrics,
        password,
    }
}

/// `n` proxies in front of `ms`, each with `settings`.
async fn start_n(n: usize, ms: &[Master], settings: &str) -> Vec<Leasing> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(start(&addrs(ms), settings).await);
    }
    out
}

/// The wall clock in ms since 1970, with fractions (MONITOR's timestamps have microseconds).
fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
        * 1000.0
}

/// The drift allowance Redlock gives a TTL (`ttl × 0.01 + 2 ms`), in ms.
fn drift_ms(ttl_ms: u64) -> f64 {
    ttl_ms as f64 * 0.01 + 2.0
}

/// Runs a blocking master operation (kill: it waits for the process) off the async path.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A client on `addr` that has said `HELLO 3`.
async fn resp3(addr: &str) -> Client {
    let mut c = Client::connect(addr).await;
    let hello = c.raw(&["HELLO", "3"]).await;
    assert!(hello.starts_with('%'), "{hello}");
    c
}

/// `SET key token NX PX ttl` until granted (every 20 ms, for at most `within`): when the `OK`
/// was read, and the connection that holds the lock (kept open: closing it would end its own
/// lease), or `None`.
async fn grab(
    addr: &str,
    key: &str,
    token: &str,
    ttl_ms: u64,
    within: Duration,
) -> Option<(Instant, Client)> {
    let until = Instant::now() + within;
    let mut c = Client::connect(addr).await;
    let ttl = ttl_ms.to_string();
    while Instant::now() < until {
        match c
            .try_cmd(
                &["SET", key, token, "NX", "PX", &ttl],
                Duration::from_secs(2),
            )
            .await
        {
            Some(r) if r.is_ok() => return Some((Instant::now(), c)),
            Some(_) => {}
            None => c = Client::connect(addr).await,
        }
        sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Asserts that `key`, asked for at `sent` with `ttl` ms and granted by `granted`, was `gone` at
/// its TTL: not
/// before the TTL counted from the request (less Redis's millisecond of expiry precision and a
/// little), and not renewed past it (the slack covers the polling and a loaded machine).
fn expired_at_its_ttl(key: &str, ttl: u64, gone: Instant, sent: Instant, granted: Instant) {
    assert!(
        gone - sent >= Duration::from_millis(ttl - 50),
        "{key} gone after {:?}",
        gone - sent
    );
    assert!(
        gone - granted <= Duration::from_millis(ttl + 450),
        "{key} lived {:?}: renewed",
        gone - granted
    );
}

/// When `GET key` through `addr` first answers nil (polled every 20 ms for at most `within`).
async fn gone_at(addr: &str, key: &str, within: Duration) -> Option<Instant> {
    let until = Instant::now() + within;
    let mut c = Client::connect(addr).await;
    while Instant::now() < until {
        if c.cmd(&["GET", key]).await == Reply::Nil {
            return Some(Instant::now());
        }
        sleep(Duration::from_millis(20)).await;
    }
    None
}

/// How many masters hold `key` (read directly).
async fn holders(ms: &[Master], key: &str) -> usize {
    values_on(ms, key).await.iter().flatten().count()
}

/// A driver process under tests/clients, read line by line; killed on drop.
struct Driver {
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
    what: String,
}

impl Driver {
    /// `tests/clients/leases.py` with `args`.
    fn python(args: &[&str]) -> Driver {
        let mut c = Command::new(python());
        c.arg(clients_dir().join("leases.py")).args(args);
        Driver::spawn(c, format!("leases.py {}", args.join(" ")))
    }

    /// `tests/clients/leases.js` with `args`.
    fn node(args: &[&str]) -> Driver {
        let mut c = node_script("leases.js");
        c.args(args);
        Driver::spawn(c, format!("leases.js {}", args.join(" ")))
    }

    fn spawn(mut cmd: Command, what: String) -> Driver {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Driver { child, out, what }
    }

    /// The next line it prints (within 30 s); fails the test with its errors otherwise.
    async fn line(&mut self) -> String {
        match timeout(Duration::from_secs(30), self.out.next_line()).await {
            Ok(Ok(Some(line))) => line,
            _ => self.fail("no line within 30 s").await,
        }
    }

    /// Every line left, once it has exited 0 (within `within`).
    async fn finish(mut self, within: Duration) -> Vec<String> {
        let mut lines = Vec::new();
        let ended = timeout(within, async {
            while let Ok(Some(l)) = self.out.next_line().await {
                lines.push(l);
            }
            self.child.wait().await
        })
        .await;
        match ended {
            Ok(Ok(status)) if status.success() => lines,
            _ => {
                let why = format!("did not exit 0 within {within:?}; printed {lines:?}");
                self.fail(&why).await
            }
        }
    }

    /// SIGKILL (kill -9), and waits for it to go.
    async fn kill(&mut self) {
        self.child.start_kill().expect("kill");
        let _ = self.child.wait().await;
    }

    async fn fail<T>(&mut self, why: &str) -> T {
        let _ = self.child.start_kill();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = timeout(Duration::from_secs(2), e.read_to_string(&mut err)).await;
        }
        panic!("{}: {why}\nstderr:\n{err}", self.what);
    }
}

/// Every command one master runs (`MONITOR`), with the master's wall-clock time, collected in
/// the background.
struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Monitor {
    async fn start(m: &Master) -> Monitor {
        let mut c = m.client().await;
        c.send(&["MONITOR"]).await;
        assert_eq!(c.read_raw().await, b"+OK\r\n");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let task = tokio::spawn(async move {
            while let Some(raw) = c.try_read(Duration::from_secs(60)).await {
                l.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&raw).into_owned());
            }
        });
        Monitor { lines, task }
    }

    /// Wall-clock ms at which the master ran a command naming both `key` and `token` other
    /// than a `SET` (the acquisition): the renewals of that grant.
    fn renewals(&self, key: &str, token: &str) -> Vec<f64> {
        let (key, token) = (format!("\"{key}\""), format!("\"{token}\""));
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&key) && l.contains(&token))
            .filter(|l| {
                let command = l.split("] ").nth(1).unwrap_or("");
                !command.to_ascii_lowercase().starts_with("\"set\"")
            })
            .filter_map(|l| l.strip_prefix('+')?.split(' ').next()?.parse::<f64>().ok())
            .map(|s| s * 1000.0)
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The exact RESP2 message a subscriber to [`LOST_CHANNEL`] receives for `key`.
fn lost_message(key: &str) -> String {
    format!(
        "*3\r\n$7\r\nmessage\r\n${}\r\n{LOST_CHANNEL}\r\n${}\r\n{key}\r\n",
        LOST_CHANNEL.len(),
        key.len()
    )
}

/// The exact RESP3 push the holder of `key` receives.
fn lost_push(key: &str) -> String {
    format!(
        ">3\r\n$7\r\nmessage\r\n${}\r\n{LOST_CHANNEL}\r\n${}\r\n{key}\r\n",
        LOST_CHANNEL.len(),
        key.len()
    )
}

// ---------------------------------------------------------------------------------------------
// A long critical section under contention.

/// What one five-TTL hold saw.
#[derive(Debug)]
struct Hold {
    /// Contenders' grants (tasks and processes) that began while the holder held the lock.
    overlaps: usize,
    /// The holder's own `GET`s that did not answer its token.
    not_mine: usize,
    /// The holder's compare-and-delete reply at the end.
    release: Reply,
    /// Contenders' grants once the holder had released (they were live all along).
    after: usize,
}

const HOLD_TTL: u64 = 1000;

/// Three proxies in front of three masters, all with `settings`; a holder on the first takes
/// `lease:hold:0` and keeps it five TTLs, checking it with `GET` every 250 ms; meanwhile six
/// contending tasks (the load of tests/support/load.rs, over the three proxies) and two
/// contending processes (redis-py, through the second and third proxy) try to take it.
async fn hold_five_ttls(settings: &str) -> Hold {
    let ms = masters(3);
    let ps = start_n(3, &ms, settings).await;
    let checker = Checker::new("lease:hold", 1);
    let key = checker.key(0);
    let mut holder = Client::connect(&ps[0].addr).await;
    let ttl = HOLD_TTL.to_string();
    assert_eq!(
        holder.cmd(&["SET", &key, "holder", "NX", "PX", &ttl]).await,
        Reply::ok()
    );
    let began = Instant::now();
    let began_ms = now_ms();
    let hold = Duration::from_millis(5 * HOLD_TTL);
    let load = Load::start(
        "c",
        checker.clone(),
        Targets::new(&[ps[1].addr.clone(), ps[2].addr.clone(), ps[0].addr.clone()]),
        Spec {
            clients: 6,
            ttl_ms: HOLD_TTL,
            hold_ms: (50, 150),
            retry_ms: (20, 50),
        },
    );
    // The processes stop trying a little before the holder releases.
    let until = (began_ms + 5 * HOLD_TTL - 300).to_string();
    let procs: Vec<Driver> = ps[1..]
        .iter()
        .map(|p| Driver::python(&["contend", &p.port(), &key, &ttl, &until]))
        .collect();
    let mut not_mine = 0;
    for _ in 0..100 {
        if began.elapsed() >= hold {
            break;
        }
        sleep(Duration::from_millis(250)).await;
        if holder.cmd(&["GET", &key]).await != Reply::Bulk("holder".into()) {
            not_mine += 1;
        }
    }
    let mut proc_grants = 0;
    for p in procs {
        let lines = p.finish(Duration::from_secs(20)).await;
        assert!(
            lines.last().is_some_and(|l| l.starts_with("done ")),
            "{lines:?}"
        );
        proc_grants += lines.iter().filter(|l| l.starts_with("grant ")).count();
    }
    let released = Instant::now();
    let release = holder.cmd(&["EVAL", UNLOCK, "1", &key, "holder"]).await;
    let tasks_during = checker.grants_between(began, released);
    sleep(Duration::from_millis(600)).await;
    load.stop().await;
    let after = checker.grants_between(released, Instant::now());
    let v = checker.verdict();
    assert_eq!(
        v.overlaps + v.lost_updates as usize,
        0,
        "the contenders among themselves: {v:?}"
    );
    Hold {
        overlaps: tasks_during + proc_grants,
        not_mine,
        release,
        after,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_lock_for_five_ttls_against_contenders_on_three_proxies_and_loses_it_without_leases()
 {
    let with = hold_five_ttls(LEASED).await;
    eprintln!("with leases: {with:?}");
    assert_eq!(with.overlaps, 0, "{with:?}");
    assert_eq!(with.not_mine, 0, "{with:?}");
    assert_eq!(with.release, Reply::Integer(1), "{with:?}");
    assert!(with.after > 0, "the contenders were live: {with:?}");

    let without = hold_five_ttls("").await;
    eprintln!("without leases: {without:?}");
    assert!(
        without.overlaps > 0,
        "without leases the contenders must take the lock inside the holder's five TTLs: {without:?}"
    );
    assert!(without.not_mine > 0, "{without:?}");
    assert_eq!(without.release, Reply::Integer(0), "{without:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lock_keeps_its_token_and_its_fencing_token() {
    let ms = masters(3);
    let ps = start_n(2, &ms, LEASED).await;
    let mut c = Client::connect(&ps[0].addr).await;
    assert_eq!(
        c.cmd(&["SET", "lease:fence", "tok", "NX", "PX", "600"])
            .await,
        Reply::ok()
    );
    let Reply::Integer(fence) = c.cmd(&["REDLOCK.FENCE", "lease:fence", "tok"]).await else {
        panic!("no fencing token");
    };
    sleep(Duration::from_millis(1800)).await;
    assert_eq!(
        c.cmd(&["GET", "lease:fence"]).await,
        Reply::Bulk("tok".into())
    );
    assert_eq!(
        c.cmd(&["REDLOCK.FENCE", "lease:fence", "tok"]).await,
        Reply::Integer(fence)
    );
    let mut other = Client::connect(&ps[1].addr).await;
    assert_eq!(
        other.cmd(&["REDLOCK.FENCE", "lease:fence", "tok"]).await,
        Reply::Integer(fence),
        "the same grant through another proxy"
    );
    assert!(ps[0].count("leases_renewed").await >= 3);
}

// ---------------------------------------------------------------------------------------------
// Renewal under faults.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_holds_while_a_minority_of_masters_is_killed_and_stopped() {
    const TTL: u64 = 1000;
    let mut ms = masters(5);
    let ps = start_n(2, &ms, LEASED).await;
    // RESP3, so that a lost-lease push would show in the exact replies below.
    let mut holder = resp3(&ps[0].addr).await;
    assert_eq!(
        holder
            .raw(&["SET", "lease:minority", "tok", "NX", "PX", &TTL.to_string()])
            .await,
        "+OK\r\n"
    );
    let began = Instant::now();
    let hold = Duration::from_millis(5 * TTL);
    let other = ps[1].addr.clone();
    let contender = tokio::spawn(async move {
        let mut c = Client::connect(&other).await;
        let (mut tries, mut grants) = (0, 0);
        while began.elapsed() < hold {
            tries += 1;
            let token = format!("c{tries}");
            let r = c
                .try_cmd(
                    &["SET", "lease:minority", &token, "NX", "PX", "1000"],
                    Duration::from_secs(2),
                )
                .await;
            if r.as_ref().is_some_and(Reply::is_ok) {
                grants += 1;
            }
            sleep(Duration::from_millis(50)).await;
        }
        (tries, grants)
    });
    sleep(Duration::from_millis(300)).await;
    blocking(|| ms[4].kill());
    sleep(Duration::from_millis(300)).await;
    ms[3].pause();
    for _ in 0..100 {
        if began.elapsed() >= hold {
            break;
        }
        sleep(Duration::from_millis(250)).await;
        assert_eq!(
            holder.raw(&["GET", "lease:minority"]).await,
            "$3\r\ntok\r\n",
            "at {:?}",
            began.elapsed()
        );
    }
    let (tries, grants) = contender.await.expect("contender");
    assert!(tries > 10, "the contender tried: {tries}");
    assert_eq!(
        grants, 0,
        "another client got the lock while the lease held"
    );
    assert_eq!(
        holder
            .raw(&["EVAL", UNLOCK, "1", "lease:minority", "tok"])
            .await,
        ":1\r\n",
        "still the holder's after five TTLs"
    );
    assert_eq!(ps[0].count("leases_lost").await, 0);
    assert!(ps[0].count("leases_renewed").await >= 6);
    ms[3].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_stopped_loses_the_lease_within_a_ttl_tells_the_holder_and_subscribers_and_no_one_gets_it_early()
 {
    const TTL: u64 = 1200;
    let ttl = TTL.to_string();
    let (py_key, raw_key) = ("lease:lost:py", "lease:lost:raw");
    let ms = masters(3);
    let ps = start_n(2, &ms, LEASED).await;
    let (a, b) = (&ps[0], &ps[1]);

    // Told through a: a redis-py subscriber, a raw subscriber, a redis-py RESP3 holder with a
    // push handler, a raw RESP3 holder.
    let mut listener = Driver::python(&["listen", &a.port(), "2", "20"]);
    assert_eq!(listener.line().await, "subscribed");
    let mut sub = Client::connect(&a.addr).await;
    sub.send(&["SUBSCRIBE", LOST_CHANNEL]).await;
    assert_eq!(
        String::from_utf8_lossy(&sub.read_raw().await),
        format!("*3\r\n$9\r\nsubscribe\r\n$24\r\n{LOST_CHANNEL}\r\n:1\r\n")
    );
    let mut py = Driver::python(&["lost", &a.port(), py_key, &ttl, "20"]);
    assert_eq!(py.line().await, "acquired");
    let mut holder = resp3(&a.addr).await;
    assert_eq!(
        holder
            .raw(&["SET", raw_key, "rawtok", "NX", "PX", &ttl])
            .await,
        "+OK\r\n"
    );
    let monitor = Monitor::start(&ms[2]).await;
    sleep(Duration::from_millis(1000)).await;
    assert_eq!(a.count("leases_active").await, 2);
    assert!(a.count("leases_renewed").await >= 2);
    assert_eq!(a.count("leases_lost").await, 0);

    let pause_began_ms = wall_ms();
    ms[0].pause();
    ms[1].pause();
    let paused = Instant::now();
    let contender = {
        let b = b.addr.clone();
        tokio::spawn(async move {
            grab(&b, raw_key, "contender", TTL, Duration::from_secs(10))
                .await
                .map(|_| wall_ms())
        })
    };

    // The raw holder's own connection: the push, byte for byte, within one TTL of the stop.
    let push = holder
        .try_read(Duration::from_millis(3 * TTL))
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let told = paused.elapsed();
    let told_ms = wall_ms();
    assert_eq!(push.as_deref(), Some(lost_push(raw_key).as_str()));
    assert!(told < Duration::from_millis(TTL), "told after {told:?}");
    // The raw subscriber: one message per lost key.
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = sub
            .try_read(Duration::from_millis(3 * TTL))
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .expect("a lease-lost message");
        got.push(m);
    }
    got.sort();
    assert_eq!(got, [lost_message(py_key), lost_message(raw_key)]);
    assert_eq!(
        sub.try_read(Duration::from_millis(300)).await,
        None,
        "one message per lost lease"
    );
    sleep(Duration::from_millis(200)).await;
    ms[0].resume();
    ms[1].resume();

    // The real clients were told too.
    let lines = py.finish(Duration::from_secs(30)).await;
    let push_line = lines
        .iter()
        .find(|l| l.starts_with("push "))
        .unwrap_or_else(|| panic!("redis-py got no push: {lines:?}"));
    let words: Vec<&str> = push_line.split(' ').collect();
    assert_eq!(
        words[..4],
        ["push", "message", LOST_CHANNEL, py_key],
        "{lines:?}"
    );
    let lines = listener.finish(Duration::from_secs(30)).await;
    let mut heard: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("message {LOST_CHANNEL} ")))
        .filter_map(|l| l.split(' ').next())
        .collect();
    heard.sort();
    assert_eq!(heard, [py_key, raw_key], "{lines:?}");

    // Counted.
    assert_eq!(a.count("leases_lost").await, 2);
    assert_eq!(a.count("leases_active").await, 0);
    assert_eq!(a.metric("redlock_leases_lost_total").await, 2.0);

    // Nobody got the lock before the holder's last valid renewal ran out, and nothing renewed
    // it after the loss.
    let granted_ms = contender
        .await
        .expect("contender")
        .expect("the contender gets the lock once the masters are back");
    let renewals = monitor.renewals(raw_key, "rawtok");
    eprintln!(
        "renewals of {raw_key} on master 2, ms after the stop began: {:?}",
        renewals
            .iter()
            .map(|t| (t - pause_began_ms).round())
            .collect::<Vec<_>>()
    );
    // One every TTL/3 (400 ms) while the lease held.
    let before: Vec<f64> = renewals
        .iter()
        .copied()
        .filter(|&t| t < pause_began_ms)
        .collect();
    for gap in before.windows(2).map(|w| w[1] - w[0]) {
        assert!(
            (TTL as f64 / 6.0..=TTL as f64 * 2.0 / 3.0).contains(&gap),
            "renewals {gap:.0} ms apart, not about TTL/3: {before:?}"
        );
    }
    let last_valid = renewals
        .iter()
        .copied()
        .filter(|&t| t < pause_began_ms)
        .fold(f64::NAN, f64::max);
    assert!(
        !last_valid.is_nan(),
        "no renewal of {raw_key} seen on a master before the stop: {renewals:?}"
    );
    assert!(
        granted_ms >= last_valid + TTL as f64 - drift_ms(TTL),
        "granted {:.0} ms after the last valid renewal began (TTL {TTL})",
        granted_ms - last_valid
    );
    let late: Vec<f64> = renewals
        .iter()
        .copied()
        .filter(|&t| t > told_ms + 100.0)
        .collect();
    assert!(late.is_empty(), "renewals after the loss: {late:?}");
}

/// A client on `addr` subscribed to [`LOST_CHANNEL`].
async fn lost_subscriber(addr: &str) -> Client {
    let mut sub = Client::connect(addr).await;
    sub.send(&["SUBSCRIBE", LOST_CHANNEL]).await;
    assert_eq!(
        String::from_utf8_lossy(&sub.read_raw().await),
        format!("*3\r\n$9\r\nsubscribe\r\n$24\r\n{LOST_CHANNEL}\r\n:1\r\n")
    );
    sub
}

/// The next reply or message on `c` within `within`, as text.
async fn next_text(c: &mut Client, within: Duration) -> Option<String> {
    c.try_read(within)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_to_slow_masters_is_told_to_another_proxys_subscribers_and_pushed_to_resp3_holders_only()
 {
    const TTL: u64 = 900;
    let ttl = TTL.to_string();
    let ms = masters(3);
    let mut fx = Vec::new();
    for m in &ms {
        fx.push(FaultProxy::start(m.addr()).await);
    }
    let slow: Vec<String> = fx.iter().map(|f| f.addr.clone()).collect();
    let a = start(&slow, LEASED).await;
    // b reaches the masters directly, and has no leases of its own.
    let b = start(&addrs(&ms), "").await;
    let mut sub = lost_subscriber(&b.addr).await;
    let mut holder3 = resp3(&a.addr).await;
    assert_eq!(
        holder3
            .raw(&["SET", "lease:slow:3", "t", "NX", "PX", &ttl])
            .await,
        "+OK\r\n"
    );
    let mut holder2 = Client::connect(&a.addr).await;
    assert_eq!(
        holder2
            .raw(&["SET", "lease:slow:2", "t", "NX", "PX", &ttl])
            .await,
        "+OK\r\n"
    );
    a.wait_at_least("leases_renewed", 2, Duration::from_millis(2 * TTL))
        .await;
    // Two masters' replies now come later than the node timeout: no renewal reaches a quorum,
    // but every master still runs what it is sent.
    fx[0].set(Fault::Delay(Duration::from_millis(300)));
    fx[1].set(Fault::Delay(Duration::from_millis(300)));
    let slowed = Instant::now();
    let push = next_text(&mut holder3, Duration::from_millis(3 * TTL)).await;
    assert_eq!(push.as_deref(), Some(lost_push("lease:slow:3").as_str()));
    assert!(
        slowed.elapsed() < Duration::from_millis(TTL),
        "told after {:?}",
        slowed.elapsed()
    );
    // Through the masters, to the other proxy's subscriber: each key once.
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(
            next_text(&mut sub, Duration::from_millis(3 * TTL))
                .await
                .expect("a lease-lost message through the other proxy"),
        );
    }
    got.sort();
    assert_eq!(
        got,
        [lost_message("lease:slow:2"), lost_message("lease:slow:3")]
    );
    assert_eq!(next_text(&mut sub, Duration::from_millis(500)).await, None);
    // A RESP2 holder is told nothing on its own connection: its replies stay in order.
    assert_eq!(
        next_text(&mut holder2, Duration::from_millis(300)).await,
        None
    );
    assert_eq!(holder2.raw(&["PING"]).await, "+PONG\r\n");
    assert_eq!(holder3.raw(&["PING"]).await, "+PONG\r\n");
    assert_eq!(a.count("leases_lost").await, 2);
    assert_eq!(a.count("leases_active").await, 0);
}

/// The loss is published on every master, the stopped ones too: their copies wait in the
/// socket and are run when they resume. Subscribers must not hear of the one loss again then (a
/// holder that has taken the key again since would read it as the loss of its new lock), however
/// long the masters were stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_told_once_even_when_the_stopped_masters_come_back_late() {
    const TTL: u64 = 900;
    let ms = masters(3);
    let a = start(&addrs(&ms), LEASED).await;
    let b = start(&addrs(&ms), "").await;
    let mut sub_a = lost_subscriber(&a.addr).await;
    let mut sub_b = lost_subscriber(&b.addr).await;
    let mut holder = resp3(&a.addr).await;
    assert_eq!(
        holder
            .raw(&["SET", "lease:late", "t", "NX", "PX", &TTL.to_string()])
            .await,
        "+OK\r\n"
    );
    a.wait_at_least("leases_renewed", 1, Duration::from_millis(2 * TTL))
        .await;
    ms[0].pause();
    ms[1].pause();
    assert_eq!(
        next_text(&mut holder, Duration::from_millis(3 * TTL))
            .await
            .as_deref(),
        Some(lost_push("lease:late").as_str())
    );
    assert_eq!(
        next_text(&mut sub_a, Duration::from_millis(3 * TTL))
            .await
            .as_deref(),
        Some(lost_message("lease:late").as_str())
    );
    // The masters stay stopped for longer than a few seconds, then come back.
    sleep(Duration::from_millis(3000)).await;
    ms[0].resume();
    ms[1].resume();
    let mut again_a = Vec::new();
    while let Some(m) = next_text(&mut sub_a, Duration::from_millis(1500)).await {
        again_a.push(m);
    }
    let mut heard_b = Vec::new();
    while let Some(m) = next_text(&mut sub_b, Duration::from_millis(500)).await {
        heard_b.push(m);
    }
    assert!(
        again_a.is_empty() && heard_b.len() <= 1,
        "one lost lease told again to the losing proxy's subscriber once the masters were \
         back: {again_a:?}; told {} times through the other proxy: {heard_b:?}",
        heard_b.len()
    );
    assert_eq!(a.count("leases_lost").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_with_every_master_stopped_is_still_told_by_the_proxy_and_logged_at_warn() {
    let ms = masters(3);
    let proxy = ProxyProcess::start(
        &addrs(&ms),
        &format!("{LEASED}\nnode_timeout_ms = 100\nstall_timeout_ms = 400"),
        &[],
    );
    proxy.info_when_up(3).await;
    let mut sub = lost_subscriber(&proxy.addr).await;
    let mut holder = resp3(&proxy.addr).await;
    assert_eq!(
        holder
            .raw(&["SET", "lease:log", "t", "NX", "PX", "900"])
            .await,
        "+OK\r\n"
    );
    sleep(Duration::from_millis(500)).await;
    for m in &ms {
        m.pause();
    }
    let push = next_text(&mut holder, Duration::from_millis(2700)).await;
    let message = next_text(&mut sub, Duration::from_millis(2700)).await;
    for m in &ms {
        m.resume();
    }
    assert_eq!(push.as_deref(), Some(lost_push("lease:log").as_str()));
    assert_eq!(message.as_deref(), Some(lost_message("lease:log").as_str()));
    let log = proxy.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("lease lost"))
        .unwrap_or_else(|| panic!("no `lease lost` line:\n{log}"));
    assert!(
        line.contains("WARN") && line.contains("key=lease:log") && line.contains("reason="),
        "{line}"
    );
    assert_eq!(field(&proxy.info().await, "leases_lost"), "1");
}

// ---------------------------------------------------------------------------------------------
// The holder's connection closes.

/// A redis-py process on `p` that acquires `key` (TTL `ttl` ms), holds it past one renewal and
/// is then killed with SIGKILL; when it died.
async fn holder_killed(p: &Leasing, key: &str, ttl: u64) -> Instant {
    let mut holder = Driver::python(&["hold", &p.port(), key, &ttl.to_string()]);
    let line = holder.line().await;
    assert!(line.starts_with("acquired "), "{line}");
    sleep(Duration::from_millis(ttl / 2)).await;
    assert_eq!(p.count("leases_active").await, 1);
    assert!(p.count("leases_renewed").await >= 1);
    holder.kill().await;
    Instant::now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_with_release_on_disconnect_frees_its_lock_within_a_second() {
    const TTL: u64 = 2000;
    let ms = masters(3);
    let p = start(
        &addrs(&ms),
        &format!("{LEASED}\nlease_release_on_disconnect = true"),
    )
    .await;
    let killed = holder_killed(&p, "lease:dc", TTL).await;
    let (got, _next) = grab(&p.addr, "lease:dc", "next", TTL, Duration::from_secs(5))
        .await
        .expect("the next client gets the lock");
    assert!(
        got - killed < Duration::from_secs(1),
        "the next client waited {:?}",
        got - killed
    );
    // The killed holder's lease ended; the next holder's is the one active now.
    p.wait_count("leases_ended", 1, Duration::from_secs(1))
        .await;
    assert_eq!(p.count("leases_active").await, 1);
    assert_eq!(
        p.metric(r#"redlock_leases_ended_total{reason="disconnected"}"#)
            .await,
        1.0
    );
    assert_eq!(p.count("leases_lost").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_without_release_on_disconnect_keeps_its_lock_until_its_ttl_and_no_longer()
{
    const TTL: u64 = 2000;
    let ms = masters(3);
    let p = start(&addrs(&ms), LEASED).await;
    let killed = holder_killed(&p, "lease:dc", TTL).await;
    // When the lock will expire on a majority, from the masters' own TTLs read now.
    let read_ms = wall_ms();
    let mut pttls = Vec::new();
    for m in &ms {
        match m.client().await.cmd(&["PTTL", "lease:dc"]).await {
            Reply::Integer(t) => pttls.push(t),
            other => panic!("PTTL answered {other:?}"),
        }
    }
    pttls.sort();
    let expires_ms = read_ms + pttls[1] as f64;
    let (got, _next) = grab(&p.addr, "lease:dc", "next", TTL, Duration::from_secs(6))
        .await
        .expect("the next client gets the lock once its TTL ran out");
    let got_ms = wall_ms();
    let waited = got - killed;
    assert!(
        waited >= Duration::from_secs(1),
        "the lock was free after {waited:?}"
    );
    assert!(
        got_ms >= expires_ms - drift_ms(TTL),
        "granted {:.0} ms before the TTL the masters held ran out ({pttls:?})",
        expires_ms - got_ms
    );
    assert!(
        waited <= Duration::from_millis(TTL + 1000),
        "renewed after the holder died: free only after {waited:?}"
    );
    // The killed holder's lease ended; the next holder's is the one active now.
    p.wait_count("leases_ended", 1, Duration::from_secs(1))
        .await;
    assert_eq!(p.count("leases_active").await, 1);
    assert_eq!(
        p.metric(r#"redlock_leases_ended_total{reason="disconnected"}"#)
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_released_through_another_proxy_is_no_longer_renewed() {
    const TTL: u64 = 900;
    let ttl = TTL.to_string();
    let ms = masters(3);
    let a = start(&addrs(&ms), LEASED).await;
    let b = start(&addrs(&ms), "").await;
    let mut holder = resp3(&a.addr).await;
    for key in ["lease:rel:gone", "lease:rel:taken"] {
        assert_eq!(
            holder.raw(&["SET", key, "tok", "NX", "PX", &ttl]).await,
            "+OK\r\n"
        );
    }
    a.wait_at_least("leases_renewed", 2, Duration::from_millis(2 * TTL))
        .await;
    // Released through b; one of them taken at once by another client there.
    let mut other = Client::connect(&b.addr).await;
    for key in ["lease:rel:gone", "lease:rel:taken"] {
        assert_eq!(
            other.cmd(&["EVAL", UNLOCK, "1", key, "tok"]).await,
            Reply::Integer(1)
        );
    }
    let sent = Instant::now();
    assert_eq!(
        other
            .cmd(&["SET", "lease:rel:taken", "tok2", "NX", "PX", &ttl])
            .await,
        Reply::ok()
    );
    let taken = Instant::now();
    // The taker's lock lives its own TTL: a did not renew it.
    let gone = gone_at(&b.addr, "lease:rel:taken", Duration::from_millis(4 * TTL))
        .await
        .expect("the taker's lock expires");
    expired_at_its_ttl("lease:rel:taken", TTL, gone, sent, taken);
    // The released one stays gone, everywhere.
    for _ in 0..10 {
        assert_eq!(holders(&ms, "lease:rel:gone").await, 0);
        assert_eq!(holders(&ms, "lease:rel:taken").await, 0);
        sleep(Duration::from_millis(100)).await;
    }
    // Ended quietly: counted as released, no loss, nothing told to the holder.
    a.wait_count("leases_active", 0, Duration::from_secs(1))
        .await;
    assert_eq!(a.count("leases_ended").await, 2);
    assert_eq!(a.count("leases_released").await, 2);
    assert_eq!(a.count("leases_lost").await, 0);
    assert_eq!(
        a.metric(r#"redlock_leases_ended_total{reason="released"}"#)
            .await,
        2.0
    );
    assert_eq!(holder.try_read(Duration::from_millis(200)).await, None);
    assert_eq!(holder.raw(&["PING"]).await, "+PONG\r\n");
}

// ---------------------------------------------------------------------------------------------
// Which locks get a lease, and for how long.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_max_ms_ends_renewal_and_the_lock_expires_at_grant_plus_lease_max() {
    const TTL: u64 = 900;
    const MAX: u64 = 2000;
    let ms = masters(3);
    let p = start(&addrs(&ms), &format!("{LEASED}\nlease_max_ms = {MAX}")).await;
    let mut holder = resp3(&p.addr).await;
    let sent = Instant::now();
    assert_eq!(
        holder
            .raw(&["SET", "lease:max", "tok", "NX", "PX", &TTL.to_string()])
            .await,
        "+OK\r\n"
    );
    let granted = Instant::now();
    let gone = gone_at(&p.addr, "lease:max", Duration::from_millis(MAX + 2 * TTL))
        .await
        .expect("the lock expires after lease_max_ms");
    // Renewed past its TTL, up to about the maximum...
    assert!(
        gone - sent >= Duration::from_millis(MAX - TTL / 3),
        "expired {:?} after the grant",
        gone - sent
    );
    // ...and never held past it.
    assert!(
        gone - granted <= Duration::from_millis(MAX + 300),
        "held {:?} after the grant, past lease_max_ms",
        gone - granted
    );
    // The end is not a loss: counted as `max`, nothing told, the connection still open.
    p.wait_count("leases_ended", 1, Duration::from_secs(1))
        .await;
    assert_eq!(p.count("leases_active").await, 0);
    assert_eq!(p.count("leases_lost").await, 0);
    assert_eq!(
        p.metric(r#"redlock_leases_ended_total{reason="max"}"#)
            .await,
        1.0
    );
    assert_eq!(holder.try_read(Duration::from_millis(200)).await, None);
    assert_eq!(holder.raw(&["PING"]).await, "+PONG\r\n");
}

#[test]
fn the_lease_settings_are_read_and_checked_like_the_others() {
    let base = "backends = [\"127.0.0.1:1\"]\n";
    let good = format!(
        "{base}lease_keys = [\"lock:*\", \"jobs:[0-9]\"]\nlease_max_ms = 5000\n\
         lease_release_on_disconnect = true\n\
         [[users]]\nname = \"u\"\npassword = \"p\"\nkeys = [\"*\"]\nlease_keys = [\"u:*\"]\n"
    );
    let config = Config::from_toml(&good).expect("lease settings parse");
    config.validate().expect("and are valid");
    let mut set = Config::from_toml(base).expect("base");
    set.set(r#"lease_keys=["lock:*"]"#)
        .expect("--set lease_keys");
    set.set("lease_max_ms=1000").expect("--set lease_max_ms");
    set.set("lease_release_on_disconnect=true")
        .expect("--set lease_release_on_disconnect");
    set.validate().expect("valid");
    let zero = Config::from_toml(&format!("{base}lease_max_ms = 0\n")).expect("parses");
    let err = zero
        .validate()
        .expect_err("lease_max_ms = 0 is refused")
        .to_string();
    assert!(err.contains("lease_max_ms"), "{err}");
    assert!(
        Config::from_toml(&format!("{base}lease_keys = \"lock:*\"\n")).is_err(),
        "lease_keys is a list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acquisition_form_on_leased_keys_is_renewed_back_to_its_own_ttl() {
    let ms = masters(3);
    let p = start(&addrs(&ms), &format!("{LEASED}\ndefault_ttl_ms = 900")).await;
    let mut c = Client::connect(&p.addr).await;
    // (key, TTL it asked for)
    let forms = [
        ("lease:f:px", 900),
        ("lease:f:ex", 1000),
        ("lease:f:default", 900),
        ("lease:f:m1", 900),
        ("lease:f:m2", 900),
    ];
    assert_eq!(
        c.cmd(&["SET", "lease:f:px", "t", "NX", "PX", "900"]).await,
        Reply::ok()
    );
    // As go-redis sends it (redsync).
    assert_eq!(
        c.cmd(&["set", "lease:f:ex", "t", "nx", "ex", "1"]).await,
        Reply::ok()
    );
    // No TTL: default_ttl_ms gives it one (redis-py's Lock with timeout=None).
    assert_eq!(
        c.cmd(&["SET", "lease:f:default", "t", "NX"]).await,
        Reply::ok()
    );
    // node-redlock's acquisition script, two keys at once: one lock, one lease.
    assert_eq!(
        c.cmd(&[
            "EVAL",
            &lua("redlock5_ACQUIRE_SCRIPT"),
            "2",
            "lease:f:m1",
            "lease:f:m2",
            "t",
            "900"
        ])
        .await,
        Reply::Integer(2)
    );
    assert_eq!(p.count("leases_active").await, 4);
    sleep(Duration::from_millis(2500)).await;
    for (key, ttl) in forms {
        let mut held = 0;
        for m in &ms {
            match m.client().await.cmd(&["PTTL", key]).await {
                Reply::Integer(t) if t > 0 && t <= ttl => held += 1,
                Reply::Integer(t) if t > ttl => panic!("{key} renewed past its TTL: {t} ms"),
                _ => {}
            }
        }
        assert!(held >= 2, "{key} not renewed: held on {held} masters");
    }
    assert_eq!(p.count("leases_active").await, 4);
    assert_eq!(p.count("leases_lost").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_released_and_taken_again_on_the_same_connection_gets_a_lease_again() {
    const TTL: u64 = 900;
    let ttl = TTL.to_string();
    let ms = masters(3);
    let p = start(&addrs(&ms), LEASED).await;
    let mut c = Client::connect(&p.addr).await;
    let set = ["SET", "lease:again", "tok", "NX", "PX", ttl.as_str()];
    assert_eq!(c.cmd(&set).await, Reply::ok());
    assert_eq!(
        c.cmd(&["EVAL", UNLOCK, "1", "lease:again", "tok"]).await,
        Reply::Integer(1)
    );
    // The lease finds the lock released at its next renewal and ends.
    let deadline = Instant::now() + Duration::from_millis(4 * TTL);
    while p.count("leases_released").await < 1 {
        assert!(
            Instant::now() < deadline,
            "the released lock's lease never ended"
        );
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(p.count("leases_active").await, 0);
    // Taken again, with the same token, on the same connection: a new lease keeps it.
    assert_eq!(c.cmd(&set).await, Reply::ok());
    sleep(Duration::from_millis(3 * TTL)).await;
    assert_eq!(
        c.cmd(&["GET", "lease:again"]).await,
        Reply::bulk(&b"tok"[..]),
        "the lock taken again was not renewed"
    );
    assert_eq!(p.count("leases_active").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_outside_the_patterns_are_never_renewed() {
    const TTL: u64 = 900;
    let ttl = TTL.to_string();
    let ms = masters(3);
    let p = start(&addrs(&ms), LEASED).await;
    let mut c = Client::connect(&p.addr).await;
    let sent = Instant::now();
    // Inside the patterns: the control that shows leases are on here.
    assert_eq!(
        c.cmd(&["SET", "lease:in", "tok", "NX", "PX", &ttl]).await,
        Reply::ok()
    );
    for key in ["other:k", "Lease:k", "leasex:k"] {
        assert_eq!(
            c.cmd(&["SET", key, "tok", "NX", "PX", &ttl]).await,
            Reply::ok(),
            "{key}"
        );
    }
    // A multi-key acquisition (node-redlock's script) with one key outside: no lease.
    assert_eq!(
        c.cmd(&[
            "EVAL",
            &lua("redlock5_ACQUIRE_SCRIPT"),
            "2",
            "lease:m1",
            "other:m2",
            "tok",
            &ttl
        ])
        .await,
        Reply::Integer(2)
    );
    let acquired = Instant::now();
    assert_eq!(p.count("leases_active").await, 1);
    for key in ["other:k", "Lease:k", "leasex:k", "lease:m1", "other:m2"] {
        let gone = gone_at(&p.addr, key, Duration::from_millis(3 * TTL))
            .await
            .unwrap_or_else(|| panic!("{key} was renewed"));
        expired_at_its_ttl(key, TTL, gone, sent, acquired);
    }
    sleep(Duration::from_millis(TTL)).await;
    assert_eq!(
        c.cmd(&["GET", "lease:in"]).await,
        Reply::Bulk("tok".into()),
        "the key inside the patterns is renewed"
    );
    assert_eq!(p.count("leases_active").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_own_lease_keys_replace_the_global_list_for_that_user() {
    const TTL: u64 = 900;
    let ttl = TTL.to_string();
    let ms = masters(3);
    let p = start(
        &addrs(&ms),
        &format!(
            "{LEASED}\npassword = \"rootpw\"\n\
             [[users]]\nname = \"alice\"\npassword = \"alicepw\"\nkeys = [\"*\"]\nlease_keys = [\"alice:*\"]\n\
             [[users]]\nname = \"bob\"\npassword = \"bobpw\"\nkeys = [\"*\"]\n"
        ),
    )
    .await;
    // (user, password, key, leased?)
    let cases = [
        ("alice", "alicepw", "alice:a", true),
        ("alice", "alicepw", "lease:a", false),
        ("bob", "bobpw", "lease:b", true),
        ("bob", "bobpw", "alice:b", false),
        ("default", "rootpw", "lease:d", true),
        ("default", "rootpw", "alice:d", false),
    ];
    let mut conns = Vec::new();
    for (user, pass, key, _) in cases {
        let mut c = Client::connect(&p.addr).await;
        assert_eq!(c.cmd(&["AUTH", user, pass]).await, Reply::ok());
        assert_eq!(
            c.cmd(&["SET", key, "tok", "NX", "PX", &ttl]).await,
            Reply::ok(),
            "{user} {key}"
        );
        conns.push(c);
    }
    assert_eq!(p.count("leases_active").await, 3);
    sleep(Duration::from_millis(2 * TTL)).await;
    for (user, _, key, leased) in cases {
        let held = holders(&ms, key).await;
        if leased {
            assert!(
                held >= 2,
                "{user}'s {key} should be renewed: on {held} masters"
            );
        } else {
            assert_eq!(held, 0, "{user}'s {key} should have expired");
        }
    }
    drop(conns);
}

// ---------------------------------------------------------------------------------------------
// Real clients, unmodified: held past their TTL with leases, lost without.

/// The JSON line a driver prints last.
fn json_of(lines: &[String]) -> serde_json::Value {
    let last = lines.last().map(String::as_str).unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {lines:?}"))
}

/// Runs `driver(first proxy port, second proxy port)` against two proxies with `settings`;
/// its JSON, and the first proxy.
async fn drive_pair(
    settings: &str,
    driver: impl Fn(&str, &str) -> Driver,
) -> (serde_json::Value, Leasing, Vec<Master>) {
    let ms = masters(3);
    let mut ps = start_n(2, &ms, settings).await;
    let d = driver(&ps[0].port(), &ps[1].port());
    let out = json_of(&d.finish(Duration::from_secs(60)).await);
    let first = ps.swap_remove(0);
    (out, first, ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_lock_is_held_past_its_timeout_with_leases_and_lost_without() {
    let run = |a: &str, b: &str| Driver::python(&["redis-py", a, b, "1000", "4000"]);
    let (with, p, _ms) = drive_pair(LEASED, run).await;
    assert_eq!(
        with,
        serde_json::json!({"owned_throughout": true, "taken_by_other": 0, "release": "ok"})
    );
    assert!(p.count("leases_renewed").await >= 5);
    p.wait_count("leases_active", 0, Duration::from_secs(1))
        .await;

    let (without, _, _ms) = drive_pair("", run).await;
    assert_eq!(without["owned_throughout"], false, "{without}");
    assert!(without["taken_by_other"].as_u64() >= Some(1), "{without}");
    assert_eq!(without["release"], "LockNotOwnedError", "{without}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redlock_lock_is_held_past_its_duration_with_leases_and_lost_without() {
    let run = |a: &str, b: &str| Driver::node(&["redlock", a, b, "1000", "3000"]);
    let (with, p, _ms) = drive_pair(LEASED, run).await;
    assert_eq!(
        with,
        serde_json::json!({"taken_by_other": 0, "release": "ok"})
    );
    assert!(p.count("leases_renewed").await >= 4);
    p.wait_count("leases_active", 0, Duration::from_secs(1))
        .await;

    let (without, _, _ms) = drive_pair("", run).await;
    assert!(without["taken_by_other"].as_u64() >= Some(1), "{without}");
    assert_eq!(without["release"], "ExecutionError", "{without}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_rlock_without_its_watchdog_is_held_past_its_lease_time_with_leases_and_lost_without()
 {
    let run = |a: &str, b: &str| Driver::python(&["redisson", a, b, "1000", "3000"]);
    let (with, p, _ms) = drive_pair(LEASED, run).await;
    assert_eq!(
        with,
        serde_json::json!({"held_throughout": true, "taken_by_other": 0, "unlock": 1})
    );
    assert!(p.count("leases_renewed").await >= 4);
    p.wait_count("leases_active", 0, Duration::from_secs(1))
        .await;

    let (without, _, _ms) = drive_pair("", run).await;
    assert_eq!(without["held_throughout"], false, "{without}");
    assert!(without["taken_by_other"].as_u64() >= Some(1), "{without}");
    assert_eq!(without["unlock"], serde_json::Value::Null, "{without}");
}

/// Quorum repair (issue 30), the lease's side: a leased lock granted while master C was cut off
/// rests on A and B; C comes back (reachable again, the same server, so trusted at once), a
/// renewal writes the lock back there, and then A is cut off. With repair the lock still rests
/// on a quorum (B, C): the lease holds and another client is refused for three TTLs. The
/// negative control (`quorum_repair = false`) leaves C empty, so A's loss loses the lease and
/// the other client takes the lock while its holder's connection is still open; asserted.
/// `hash`: the lock is a Redisson hash lock (its lock script), renewed as its watchdog would.
async fn lease_granted_on_a_bare_majority(repair: bool, hash: bool) {
    const TTL: u64 = 900;
    const KEY: &str = "lease:bare-majority";
    let ttl = TTL.to_string();
    let lock_script = lua("redisson_lock");
    // Takes the lock for `who`: whether it was granted.
    let take = async |c: &mut Client, who: &str| {
        if hash {
            c.cmd(&["EVAL", &lock_script, "1", KEY, &ttl, &format!("{who}:1")])
                .await
                == Reply::Nil
        } else {
            c.cmd(&["SET", KEY, who, "NX", "PX", &ttl]).await.is_ok()
        }
    };
    // What master `m` holds for the holder: its token, or its field's hold count.
    let held_on = async |m: &Master| match m.client().await.cmd(&["TYPE", KEY]).await {
        Reply::Simple(t) if t == "none" => None,
        _ if hash => match m.client().await.cmd(&["HGET", KEY, "tok:1"]).await {
            Reply::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        },
        _ => values_on(std::slice::from_ref(m), KEY).await.remove(0),
    };
    let ms = masters(3);
    let a = FaultProxy::start(ms[0].addr()).await;
    let c = FaultProxy::start(ms[2].addr()).await;
    let backends = [a.addr.clone(), ms[1].addr(), c.addr.clone()];
    let settings = format!("{LEASED}\nquorum_repair = {repair}");
    let p = start(&backends, &settings).await;
    c.set(Fault::Reset);
    wait_status(&p.addr, 2, "down", Duration::from_secs(3)).await;
    let mut holder = Client::connect(&p.addr).await;
    assert!(take(&mut holder, "tok").await, "granted on A and B");
    assert_eq!(held_on(&ms[2]).await, None);
    c.heal();
    wait_status(&p.addr, 2, "up", Duration::from_secs(3)).await;
    // Two renewals once C is back: the first finds the key missing there.
    let renewed = p.count("leases_renewed").await;
    p.wait_at_least("leases_renewed", renewed + 2, Duration::from_secs(3))
        .await;
    let on_c = held_on(&ms[2]).await;
    a.set(Fault::Reset);
    let began = Instant::now();
    let mut other = Client::connect(&p.addr).await;
    let mut taken = None;
    while began.elapsed() < Duration::from_millis(3 * TTL) {
        if take(&mut other, "other").await {
            taken = Some(began.elapsed());
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    let want = if hash { "1" } else { "tok" };
    if repair {
        assert_eq!(on_c.as_deref(), Some(want), "written back on C");
        assert_eq!(taken, None, "another client got the lock after one loss");
        assert_eq!(held_on(&ms[1]).await.as_deref(), Some(want));
        assert_eq!(held_on(&ms[2]).await.as_deref(), Some(want));
        assert_eq!(p.count("leases_lost").await, 0);
        assert!(p.count("locks_repaired").await >= 1);
        assert!(p.metric("redlock_locks_repaired_total").await >= 1.0);
    } else {
        assert_eq!(on_c, None, "without repair C never gets the lock");
        assert!(
            taken.is_some(),
            "without repair, one loss should let another client take the lock"
        );
        assert!(p.count("leases_lost").await >= 1);
        assert_eq!(p.count("locks_repaired").await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_granted_on_a_bare_majority_is_written_back_and_survives_the_next_loss() {
    lease_granted_on_a_bare_majority(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quorum_repair_a_lease_granted_on_a_bare_majority_is_lost_to_the_next_loss() {
    lease_granted_on_a_bare_majority(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_hash_lock_granted_on_a_bare_majority_is_written_back_and_survives_the_next_loss()
{
    lease_granted_on_a_bare_majority(true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quorum_repair_a_leased_hash_lock_on_a_bare_majority_is_lost_to_the_next_loss() {
    lease_granted_on_a_bare_majority(false, true).await;
}
