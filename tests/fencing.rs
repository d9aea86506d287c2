//! Fencing tokens (`REDLOCK.FENCE key token`): one number per grant, strictly larger for every
//! later grant of the key, whichever proxy granted it, while masters are killed and restarted
//! empty, paused, and proxies come and go; the same number every time for one grant; and a
//! fenced store that refuses a paused holder's stale write. Negative controls: a token taken
//! from one master alone goes back after that master restarts empty, and a store that ignores
//! tokens accepts the stale write.

mod support;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::{Instant, sleep};

fn config(ms: &[Master]) -> Config {
    config_at(&addrs(ms))
}

fn config_at(addrs: &[String]) -> Config {
    init_logs();
    let mut c = config_for(addrs);
    c.max_ttl_ms = 1000;
    c.node_timeout_ms = 100;
    c.stall_timeout_ms = 400;
    c.connect_timeout_ms = 300;
    c.probe_interval_ms = 100;
    c
}

async fn fence(c: &mut Client, key: &str, token: &str) -> Option<i64> {
    match c.cmd(&["REDLOCK.FENCE", key, token]).await {
        Reply::Integer(t) => Some(t),
        Reply::Nil => None,
        other => panic!("REDLOCK.FENCE answered {other:?}"),
    }
}

#[tokio::test]
async fn one_token_per_grant_larger_for_every_later_grant() {
    let ms = masters(3);
    let a = proxy(config(&ms)).await.to_string();
    let b = proxy(config(&ms)).await.to_string();
    let (mut ca, mut cb) = (Client::connect(&a).await, Client::connect(&b).await);
    assert_eq!(fence(&mut ca, "f", "t1").await, None, "not held: nil");
    assert_eq!(
        ca.cmd(&["SET", "f", "t1", "NX", "PX", "900"]).await,
        Reply::ok()
    );
    assert_eq!(fence(&mut ca, "f", "other").await, None, "not the holder");
    let t1 = fence(&mut ca, "f", "t1").await.expect("a token");
    // The same grant, asked again, through either proxy: the same token.
    assert_eq!(fence(&mut ca, "f", "t1").await, Some(t1));
    assert_eq!(fence(&mut cb, "f", "t1").await, Some(t1));
    // Extended through the proxy: still the same grant.
    let extend = r#"if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end"#;
    assert_eq!(
        ca.cmd(&["EVAL", extend, "1", "f", "t1", "900"]).await,
        Reply::Integer(1)
    );
    assert_eq!(fence(&mut cb, "f", "t1").await, Some(t1));
    // Released, then taken again with the same value through the other proxy: a new grant.
    assert_eq!(
        ca.cmd(&["EVAL", UNLOCK, "1", "f", "t1"]).await,
        Reply::Integer(1)
    );
    sleep(Duration::from_millis(5)).await;
    assert_eq!(
        cb.cmd(&["SET", "f", "t1", "NX", "PX", "700"]).await,
        Reply::ok()
    );
    let t2 = fence(&mut cb, "f", "t1").await.expect("a token");
    assert!(t2 > t1, "{t2} after {t1}");
    // Left to expire; the next holder's token is larger still.
    sleep(Duration::from_millis(800)).await;
    assert_eq!(
        ca.cmd(&["SET", "f", "t3", "NX", "PX", "900"]).await,
        Reply::ok()
    );
    let t3 = fence(&mut ca, "f", "t3").await.expect("a token");
    assert!(t3 > t2, "{t3} after {t2}");
    // The command reads like Redis's own.
    assert_eq!(
        ca.raw(&["REDLOCK.FENCE", "f"]).await,
        "-ERR wrong number of arguments for 'redlock.fence' command\r\n"
    );
    let info = ca.raw(&["COMMAND", "INFO", "redlock.fence"]).await;
    assert!(info.contains("redlock.fence"), "{info}");
}

/// Every (grant, token) pair, in the order the grants were read.
type Ledger = Arc<Mutex<Vec<(Instant, String, i64)>>>;

/// Grants that were given two different tokens.
type Changed = Arc<std::sync::atomic::AtomicUsize>;

/// Lock clients through `proxies` (picked in turn) on `keys` contended keys: each grant asks
/// for its token and records it, holds a moment, releases.
fn workers(
    proxies: Arc<Mutex<Vec<String>>>,
    keys: usize,
    ledger: Ledger,
    changed: Changed,
    until: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..8)
        .map(|w| {
            let (proxies, ledger, changed) = (proxies.clone(), ledger.clone(), changed.clone());
            tokio::spawn(async move {
                let mut n = 0usize;
                while Instant::now() < until {
                    n += 1;
                    let addr = {
                        let p = proxies.lock().unwrap();
                        p[(w + n) % p.len()].clone()
                    };
                    let Some(mut c) = Client::try_connect(&addr).await else {
                        sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    let key = format!("res:{}", (w + n) % keys);
                    let token = format!("w{w}-{n}");
                    let granted = tokio::time::timeout(
                        Duration::from_secs(2),
                        c.cmd(&["SET", &key, &token, "NX", "PX", "600"]),
                    )
                    .await;
                    if granted != Ok(Reply::ok()) {
                        sleep(Duration::from_millis(2 + (n % 4) as u64)).await;
                        continue;
                    }
                    let at = Instant::now();
                    if let Ok(Reply::Integer(t)) = tokio::time::timeout(
                        Duration::from_secs(2),
                        c.cmd(&["REDLOCK.FENCE", &key, &token]),
                    )
                    .await
                    {
                        ledger.lock().unwrap().push((at, key.clone(), t));
                        sleep(Duration::from_millis(3)).await;
                        // Asked again (through whichever proxy), the grant's token is the same.
                        if let Ok(Reply::Integer(again)) = tokio::time::timeout(
                            Duration::from_secs(2),
                            c.cmd(&["REDLOCK.FENCE", &key, &token]),
                        )
                        .await
                            && again != t
                        {
                            changed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    let _ = tokio::time::timeout(
                        Duration::from_secs(2),
                        c.cmd(&["EVAL", UNLOCK, "1", &key, &token]),
                    )
                    .await;
                }
            })
        })
        .collect()
}

/// Grants whose token is not larger than the one before, per key, in grant order.
fn decreases(ledger: &Ledger) -> (usize, usize) {
    let mut all = ledger.lock().unwrap().clone();
    all.sort_by_key(|(at, _, _)| *at);
    let mut last: std::collections::HashMap<String, i64> = Default::default();
    let mut bad = 0;
    for (_, key, t) in &all {
        if let Some(prev) = last.insert(key.clone(), *t)
            && *t <= prev
        {
            bad += 1;
        }
    }
    (all.len(), bad)
}

/// Kill and restart masters empty, pause one, jump another's clock, add a proxy and replace
/// another, under load.
async fn fenced_under_faults(single_master: bool) -> (usize, usize, usize) {
    let mut ms = masters(2);
    let clock = ClockMaster::start();
    let mut cfg = config_at(&[ms[0].addr(), ms[1].addr(), clock.addr()]);
    cfg.fence_single_master = single_master;
    // Restart quarantine on; the masters were started empty just now, so the first-connect
    // rule (which would make them sit out the window first) is off.
    cfg.quarantine = true;
    cfg.masters_started_here = true;
    let a = proxy(cfg.clone()).await.to_string();
    let b = proxy(cfg.clone()).await.to_string();
    wait_trusted(&a, 3, Duration::from_secs(5)).await;
    let proxies = Arc::new(Mutex::new(vec![a.clone(), b.clone()]));
    let ledger: Ledger = Arc::default();
    let changed: Changed = Arc::default();
    let run = Duration::from_secs(12);
    let start = Instant::now();
    let tasks = workers(
        proxies.clone(),
        3,
        ledger.clone(),
        changed.clone(),
        start + run,
    );
    sleep(Duration::from_millis(1500)).await;
    // Master 0 holding live locks and counters dies and comes back empty.
    ms[0].restart();
    sleep(Duration::from_millis(2500)).await;
    // Master 1 pauses for longer than the node and stall timeouts.
    ms[1].pause();
    sleep(Duration::from_millis(600)).await;
    ms[1].resume();
    sleep(Duration::from_millis(1000)).await;
    // Master 2's clock leaps an hour ahead (it expires its keys early); the clock watch
    // excludes it.
    clock.set_offset("+3600");
    // A third proxy joins (its first connect), and replaces the first.
    let c = proxy(cfg.clone()).await.to_string();
    proxies.lock().unwrap().push(c);
    proxies.lock().unwrap().retain(|p| *p != a);
    sleep(Duration::from_millis(1000)).await;
    // Master 0 again, after its quarantine.
    ms[0].restart();
    for t in tasks {
        let _ = t.await;
    }
    let (grants, bad) = decreases(&ledger);
    (
        grants,
        bad,
        changed.load(std::sync::atomic::Ordering::Relaxed),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_only_grow_under_faults_and_a_single_master_counter_goes_back() {
    let (grants, bad, changed) = fenced_under_faults(false).await;
    println!(
        "FENCE quorum counter: {grants} grants with tokens, {bad} not larger, {changed} changed"
    );
    // About 1,600 grants on an idle machine; the bar only makes sure every fault saw traffic
    // (a loaded CI machine once gave fewer than 1,000 in the run's 12 s).
    assert!(grants >= 300, "only {grants} grants");
    assert_eq!(bad, 0, "a later grant got a token that was not larger");
    assert_eq!(changed, 0, "a grant was given two different tokens");
    // Negative control: master 0's own counter starts again from 1 after its restart.
    let (grants, bad, _) = fenced_under_faults(true).await;
    println!("FENCE single master (control): {grants} grants, {bad} not larger");
    assert!(bad > 0, "the single-master counter should have gone back");
}

/// A store that keeps the highest token it has seen and refuses lower ones (or, `fenced` off,
/// takes every write: the negative control).
const STORE: &str = "local hi = tonumber(redis.call('get', KEYS[1] .. ':fence') or '0') \
    if ARGV[3] == '1' and tonumber(ARGV[1]) < hi then return 0 end \
    if tonumber(ARGV[1]) > hi then redis.call('set', KEYS[1] .. ':fence', ARGV[1]) end \
    redis.call('set', KEYS[1], ARGV[2]) return 1";

/// A holder in its own process: takes the lock and its token, says so, waits for a line on
/// stdin (it is paused meanwhile), then writes to the store with its token.
fn holder_script(proxy: &str, store: &str, fenced: bool) -> String {
    let (ph, pp) = proxy.split_once(':').unwrap();
    let (sh, sp) = store.split_once(':').unwrap();
    format!(
        "set -e\n\
         [ \"$(redis-cli -h {ph} -p {pp} SET res old NX PX 800)\" = OK ]\n\
         t=$(redis-cli -h {ph} -p {pp} REDLOCK.FENCE res old)\n\
         echo \"ready $t\"\n\
         read go\n\
         redis-cli -h {sh} -p {sp} EVAL \"{STORE}\" 1 res \"$t\" stale {}\n",
        if fenced { 1 } else { 0 }
    )
}

async fn stale_write_after_a_pause(fenced: bool) -> (String, String) {
    let ms = masters(3);
    let store = Master::start();
    let p = proxy(config(&ms)).await.to_string();
    let mut child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(holder_script(&p, &store.addr(), fenced))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("bash");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = out.next_line().await.unwrap().unwrap();
    assert!(ready.starts_with("ready "), "{ready}");
    let pid = child.id().unwrap().to_string();
    // The holder pauses past its validity (a GC pause, a stopped VM).
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    sleep(Duration::from_millis(1000)).await;
    // Meanwhile a new holder takes the lock and writes with its token.
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.cmd(&["SET", "res", "new", "NX", "PX", "800"]).await,
        Reply::ok()
    );
    let t = fence(&mut c, "res", "new")
        .await
        .expect("a token")
        .to_string();
    let flag = if fenced { "1" } else { "0" };
    let mut s = store.client().await;
    assert_eq!(
        s.cmd(&["EVAL", STORE, "1", "res", &t, "new", flag]).await,
        Reply::Integer(1)
    );
    // The old holder wakes up and writes with its stale token.
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    let answer = out.next_line().await.unwrap().unwrap_or_default();
    let _ = child.wait().await;
    (answer, s.text(&["GET", "res"]).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_s_stale_write_is_refused_by_a_fenced_store() {
    let (answer, value) = stale_write_after_a_pause(true).await;
    assert_eq!(answer.trim(), "0", "the stale write is refused");
    assert_eq!(value, "new");
    // Negative control: without tokens the stale write lands over the new holder's.
    let (answer, value) = stale_write_after_a_pause(false).await;
    assert_eq!(answer.trim(), "1");
    assert_eq!(value, "stale");
}
