//! Redis Cluster members: each member a real cluster (six `redis-server --cluster-enabled yes`
//! nodes, three primaries with a replica each). Keys go to the primary of their slot; a
//! command whose keys span slots is split where that answers as one Redis would, and refused
//! with `CROSSSLOT` otherwise; a shard primary killed (its replica promoted) and a slot range
//! resharded under load grant nothing twice and lose no update; and the failover scenario run
//! with quarantine off shows the double grant that per-shard quarantine prevents.
//!
//! Run with `cargo test --test cluster` (after `scripts/deps.sh test`); `-- --nocapture` prints
//! one `FAULTS` line per load scenario.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::load::{Checker, Load, Spec, Targets, Verdict, report};
use support::*;
use tokio::time::{Instant, sleep};

/// The proxy's `max_ttl_ms` (the quarantine window is this plus drift).
const TTL: Duration = Duration::from_millis(2000);

/// Three clusters, started side by side.
fn clusters() -> Vec<RedisCluster> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..3).map(|_| s.spawn(RedisCluster::start)).collect();
        hs.into_iter().map(|h| h.join().expect("cluster")).collect()
    })
}

/// The proxy settings of the load scenarios, with every cluster as one member.
fn cluster_config(cs: &[RedisCluster], quarantine: bool) -> Config {
    init_logs();
    let urls: Vec<String> = cs.iter().map(RedisCluster::url).collect();
    let mut c = config_for(&urls);
    c.max_ttl_ms = TTL.as_millis() as u64;
    c.node_timeout_ms = 200;
    c.stall_timeout_ms = 500;
    c.connect_timeout_ms = 500;
    c.probe_interval_ms = 100;
    c.quarantine = quarantine;
    c
}

/// The test defaults, with every cluster as one member.
fn plain_config(cs: &[RedisCluster]) -> Config {
    let urls: Vec<String> = cs.iter().map(RedisCluster::url).collect();
    config_for(&urls)
}

/// Waits until every member knows its three shards and trusts them all.
async fn wait_shards(p: &str, members: usize, within: Duration) {
    let until = Instant::now() + within;
    loop {
        let info = redlock_info(p).await;
        let ready = (0..members).all(|i| {
            (0..3).all(|j| {
                let line = field(&info, &format!("master{i}_shard{j}"));
                line.contains("status=up")
            }) && field(&info, &format!("master{i}_shard3")).is_empty()
        });
        if ready && field(&info, "masters_trusted") == members.to_string() {
            return;
        }
        assert!(Instant::now() < until, "shards not ready:\n{info}");
        sleep(Duration::from_millis(50)).await;
    }
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn assert_safe(v: &Verdict, min_grants: usize) {
    assert_eq!(v.overlaps, 0, "double grants: {v:?}");
    assert_eq!(v.lost_updates, 0, "lost updates: {v:?}");
    assert!(v.grants >= min_grants, "too few grants to judge: {v:?}");
}

/// What a cluster itself holds at `key` (following redirections).
fn value_in(c: &RedisCluster, key: &str) -> String {
    redis_cli(c.live_port(), &["-c", "GET", key])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_go_to_their_slots_and_cross_slot_commands_answer_as_one_redis() {
    let cs = clusters();
    let p = proxy(plain_config(&cs)).await.to_string();
    wait_shards(&p, 3, Duration::from_secs(20)).await;
    let mut c = Client::connect(&p).await;

    // Many keys, over every shard: each is written on the primary of its slot, in every member.
    for i in 0..40 {
        let key = format!("res:{i}");
        let token = format!("t{i}");
        assert_eq!(
            c.cmd(&["SET", &key, &token, "NX", "PX", "60000"]).await,
            Reply::ok(),
            "{key}"
        );
        assert_eq!(
            c.cmd(&["SET", &key, "other", "NX", "PX", "60000"]).await,
            Reply::Nil
        );
        for cl in &cs {
            assert_eq!(value_in(cl, &key), token);
        }
    }
    // Hash tags keep keys together: a two-key release script runs in one piece.
    assert_eq!(
        c.cmd(&["SET", "{acct}:a", "tok", "NX", "PX", "60000"])
            .await,
        Reply::ok()
    );
    assert_eq!(
        c.cmd(&["EVAL", UNLOCK, "1", "{acct}:a", "tok"]).await,
        Reply::Integer(1)
    );
    // DEL over keys in three slots adds up, as one Redis counts.
    assert_eq!(
        c.cmd(&["DEL", "res:0", "res:1", "res:2", "missing"]).await,
        Reply::Integer(3)
    );
    for cl in &cs {
        assert_eq!(value_in(cl, "res:1"), "");
    }

    // INFO names the member's kind and its shards.
    let info = redlock_info(&p).await;
    assert_eq!(field(&info, "master0_kind"), "cluster", "{info}");
    let shard = field(&info, "master1_shard0");
    assert!(shard.contains("slots=0-5460"), "{info}");
    assert!(shard.contains("status=up"), "{info}");
    assert!(
        field(&info, "master0").contains("addr=redis-cluster://"),
        "{info}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_lock_releases_signal_across_slots() {
    // The lock and its wake-up list hash to different slots: the release runs per slot, and
    // the signal is pushed only when the lock was released.
    let cs = clusters();
    let p = proxy(plain_config(&cs)).await.to_string();
    wait_shards(&p, 3, Duration::from_secs(20)).await;
    let release = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end \
         redis.call('del', KEYS[2]) redis.call('lpush', KEYS[2], 1) \
         redis.call('pexpire', KEYS[2], ARGV[2]) redis.call('del', KEYS[1]) return 0";
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.cmd(&["SET", "lock:x", "me", "NX", "EX", "60"]).await,
        Reply::ok()
    );
    assert_eq!(
        c.cmd(&[
            "EVAL",
            release,
            "2",
            "lock:x",
            "lock-signal:x",
            "other",
            "100000"
        ])
        .await,
        Reply::Integer(1),
        "not the owner"
    );
    for cl in &cs {
        assert_eq!(
            redis_cli(cl.nodes[0].port, &["-c", "LLEN", "lock-signal:x"]),
            "0"
        );
    }
    assert_eq!(
        c.cmd(&[
            "EVAL",
            release,
            "2",
            "lock:x",
            "lock-signal:x",
            "me",
            "100000"
        ])
        .await,
        Reply::Integer(0)
    );
    for cl in &cs {
        assert_eq!(value_in(cl, "lock:x"), "");
        assert_eq!(
            redis_cli(cl.nodes[0].port, &["-c", "LLEN", "lock-signal:x"]),
            "1"
        );
    }
}

/// A multi-key acquisition whose keys span slots runs per slot: granted, all keys are written
/// in every member; refused in a member (one key held by another), that member keeps nothing
/// of it, and with the key held in two members the quorum refuses it and nothing stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_key_acquisition_across_slots_is_all_or_nothing_per_member() {
    let cs = clusters();
    let p = proxy(plain_config(&cs)).await.to_string();
    wait_shards(&p, 3, Duration::from_secs(20)).await;
    let mut c = Client::connect(&p).await;
    let acquire = lua("redlock5_ACQUIRE_SCRIPT");
    let keys = ["mk:a", "mk:b", "mk:c"];
    // Three different slots (and shards).
    let slots: std::collections::HashSet<u16> =
        keys.iter().map(|k| key_slot_of(&cs[0], k)).collect();
    assert_eq!(slots.len(), 3);
    // `b` held by another in members 0 and 1: a quorum refuses, and nothing of it stays.
    for cl in &cs[..2] {
        redis_cli(
            cl.live_port(),
            &["-c", "SET", "mk:b", "other", "PX", "10000"],
        );
    }
    let eval = |tok: &'static str| {
        let mut args = vec!["EVAL", acquire.as_str(), "3"];
        args.extend(keys);
        args.extend([tok, "10000"]);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let args = eval("tok");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(c.raw(&args).await, ":0\r\n");
    sleep(Duration::from_millis(200)).await;
    for cl in &cs {
        assert_eq!(value_in(cl, "mk:a"), "");
        assert_eq!(value_in(cl, "mk:c"), "");
    }
    assert_eq!(
        value_in(&cs[0], "mk:b"),
        "other",
        "the other holder's key stays"
    );
    // Held in member 0 only: granted by members 1 and 2 (member 1 after the other's key goes).
    redis_cli(cs[1].live_port(), &["-c", "DEL", "mk:b"]);
    assert_eq!(c.raw(&args).await, ":3\r\n");
    sleep(Duration::from_millis(200)).await;
    for (i, cl) in cs.iter().enumerate() {
        let want = if i == 0 {
            ["", "other", ""]
        } else {
            ["tok", "tok", "tok"]
        };
        for (k, w) in keys.iter().zip(want) {
            assert_eq!(value_in(cl, k), w, "member {i} {k}");
        }
    }
    // Extending keys in several slots cannot be split so that it answers as one Redis would:
    // every member refuses it with Redis's own cluster error, and so does the proxy.
    let extend = lua("redlock5_EXTEND_SCRIPT");
    let mut ext = vec!["EVAL", extend.as_str(), "3"];
    ext.extend(keys);
    ext.extend(["tok", "20000"]);
    assert_eq!(
        c.raw(&ext).await,
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
}

/// A slot migrated by hand, one key at a time (`CLUSTER SETSLOT … MIGRATING/IMPORTING`,
/// `MIGRATE`): a lock already moved is still held (the proxy follows `ASK`), a new lock in the
/// migrating slot is created on the importing node, and once the slot is moved (`MOVED`) the
/// locks are where they were, with their TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_in_a_migrating_slot_is_neither_lost_nor_granted_twice() {
    let cl = RedisCluster::start();
    let p = proxy(config_for(&[cl.url()])).await.to_string();
    wait_shards(&p, 1, Duration::from_secs(20)).await;
    let mut c = Client::connect(&p).await;
    let slot = key_slot_of(&cl, "{mig}a");
    let src = cl.primary_of(slot);
    // The primary of a slot in another range.
    let dst = cl.primary_of(if slot < 5461 { 6000 } else { 0 });
    let (src_id, dst_id) = (cl.id(src), cl.id(dst));
    let s = slot.to_string();
    assert_eq!(
        c.cmd(&["SET", "{mig}a", "tok", "NX", "PX", "30000"]).await,
        Reply::ok()
    );
    assert_eq!(
        cl.nodes[dst].cli(("", ""), &["CLUSTER", "SETSLOT", &s, "IMPORTING", &src_id]),
        "OK"
    );
    assert_eq!(
        cl.nodes[src].cli(("", ""), &["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst_id]),
        "OK"
    );
    let port = cl.nodes[dst].port.to_string();
    assert_eq!(
        cl.nodes[src].cli(
            ("", ""),
            &[
                "MIGRATE",
                "127.0.0.1",
                &port,
                "",
                "0",
                "5000",
                "KEYS",
                "{mig}a"
            ]
        ),
        "OK"
    );
    // The moved lock is still held: the source answers ASK, the proxy asks the target.
    assert_eq!(
        c.cmd(&["SET", "{mig}a", "other", "NX", "PX", "30000"])
            .await,
        Reply::Nil
    );
    assert_eq!(c.cmd(&["GET", "{mig}a"]).await, Reply::bulk("tok"));
    // A new lock in the migrating slot is created on the importing node.
    assert_eq!(
        c.cmd(&["SET", "{mig}b", "tok2", "NX", "PX", "30000"]).await,
        Reply::ok()
    );
    assert_eq!(
        cl.nodes[dst].cli(("", ""), &["-c", "GET", "{mig}b"]),
        "tok2"
    );
    // The slot is moved: MOVED, followed; the locks are held, with their TTLs.
    for n in 0..3 {
        cl.nodes[n].cli(("", ""), &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
    }
    assert_eq!(
        c.cmd(&["SET", "{mig}a", "other", "NX", "PX", "30000"])
            .await,
        Reply::Nil
    );
    let Reply::Integer(left) = c.cmd(&["PTTL", "{mig}a"]).await else {
        panic!("PTTL")
    };
    assert!(left > 20_000 && left <= 30_000, "{left}");
    assert_eq!(
        c.cmd(&["EVAL", UNLOCK, "1", "{mig}a", "tok"]).await,
        Reply::Integer(1)
    );
    assert_eq!(
        c.cmd(&["SET", "{mig}a", "other", "NX", "PX", "30000"])
            .await,
        Reply::ok()
    );
}

/// Many clients on many keys over every slot range; a shard primary of member 0 is killed and
/// its replica promoted, then a slot range of member 1 is resharded, all under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_and_a_reshard_under_load_grant_nothing_twice() {
    let mut cs = clusters();
    let p = proxy(cluster_config(&cs, true)).await.to_string();
    wait_shards(&p, 3, Duration::from_secs(20)).await;
    let checker = Checker::new("res", 48);
    let load = Load::start(
        "c",
        checker.clone(),
        Targets::new(std::slice::from_ref(&p)),
        Spec {
            clients: 24,
            ttl_ms: 1000,
            hold_ms: (30, 120),
            retry_ms: (5, 20),
        },
    );
    sleep(Duration::from_millis(1500)).await;

    // Member 0: the primary of the first slot range dies; its replica takes over.
    let promoted = blocking(|| cs[0].fail_over(0));
    let promoted_addr = cs[0].nodes[promoted].addr();
    // The proxy quarantines the promoted primary (its slots only) and says why.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let info = redlock_info(&p).await;
        let quarantined = (0..3)
            .map(|j| field(&info, &format!("master0_shard{j}")))
            .find(|l| l.contains(&format!("primary={promoted_addr}")))
            .filter(|l| {
                l.contains("status=quarantined") && l.contains("quarantine_reason=promoted")
            });
        if quarantined.is_some() {
            break;
        }
        assert!(
            Instant::now() < until,
            "no quarantined shard {promoted_addr}:\n{info}"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let during = Instant::now();
    sleep(Duration::from_millis(1000)).await;
    assert!(
        checker.grants_between(during, Instant::now()) > 0,
        "one shard's quarantine must not stop the other shards' grants"
    );

    // Member 1: 1,000 slots move from its first primary to its second, keys and TTLs with them.
    let out = blocking(|| cs[1].reshard(0, 1, 1000));
    assert!(out.contains("Moving slot"), "{out}");
    sleep(Duration::from_millis(2500)).await;
    load.stop().await;
    let v = report("cluster: failover and reshard", "on", 2, &checker);
    assert_safe(&v, 50);
}

/// The failover that loses locks: in members 1 and 2, the replica of the shard that holds
/// every resource is cut off from its primary before the load starts (stopped, its replication
/// link killed), so it never hears of the grants; then both primaries are killed and the stale
/// replicas take over. Those two new primaries together would grant the held locks again
/// (member 0 alone still has them), unless they sit out the quarantine window.
async fn lost_failover_scenario(quarantine: bool) -> (Arc<Checker>, usize) {
    let mut cs = clusters();
    let mut config = cluster_config(&cs, quarantine);
    config.max_ttl_ms = 6000;
    let p = proxy(config).await.to_string();
    wait_shards(&p, 3, Duration::from_secs(20)).await;
    // Every resource in one slot, so in one shard of each member.
    let checker = Checker::new("{held}", 4);
    let mut cut = Vec::new();
    for (m, cl) in cs.iter().enumerate().skip(1) {
        let owner = cl.primary_of(key_slot_of(cl, &checker.key(0)));
        let replica = cl.replica_of(owner);
        blocking(|| {
            cl.nodes[replica].pause();
            cl.nodes[owner].cli(("", ""), &["CLIENT", "KILL", "TYPE", "replica"]);
        });
        cut.push((m, owner, replica));
    }
    let load = Load::start(
        "c",
        checker.clone(),
        Targets::new(std::slice::from_ref(&p)),
        Spec {
            clients: 16,
            ttl_ms: 5000,
            hold_ms: (4000, 4800),
            retry_ms: (20, 50),
        },
    );
    sleep(Duration::from_millis(1500)).await;
    for &(m, owner, replica) in &cut {
        blocking(|| {
            cs[m].nodes[owner].kill();
            cs[m].nodes[replica].resume();
        });
    }
    // The stale replicas take over at once (their primaries are gone).
    for &(m, _, replica) in &cut {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let out = cs[m].nodes[replica].cli(("", ""), &["CLUSTER", "FAILOVER", "TAKEOVER"]);
            if out == "OK" {
                break;
            }
            assert!(std::time::Instant::now() < until, "takeover: {out}");
            sleep(Duration::from_millis(100)).await;
        }
    }
    for &(m, _, replica) in &cut {
        blocking(|| cs[m].wait_promoted(replica));
    }
    if quarantine {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let info = redlock_info(&p).await;
            let promoted = info.matches("quarantine_reason=promoted").count();
            if promoted == 2 {
                break;
            }
            assert!(Instant::now() < until, "{info}");
            sleep(Duration::from_millis(50)).await;
        }
    }
    // Past the quarantine window (6 s), so grants resume with the protection on.
    sleep(Duration::from_millis(7500)).await;
    load.stop().await;
    (checker, 2)
}

fn key_slot_of(c: &RedisCluster, key: &str) -> u16 {
    let slot = redis_cli(c.live_port(), &["CLUSTER", "KEYSLOT", key]);
    slot.parse().expect("CLUSTER KEYSLOT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_stale_replica_is_quarantined_and_grants_nothing_twice() {
    let (checker, faults) = lost_failover_scenario(true).await;
    let v = report("cluster: stale replica promoted", "on", faults, &checker);
    // The first holders' grants; the next come once the window is over and the keys that
    // attempts during it left on the excluded shards have expired (as for any quarantine).
    assert_safe(&v, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quarantine_the_same_promotion_double_grants() {
    let (checker, faults) = lost_failover_scenario(false).await;
    let v = report("cluster: stale replica promoted", "off", faults, &checker);
    assert!(
        v.violations() > 0,
        "with quarantine off the checkers must see a double grant: {v:?}"
    );
}

/// A cluster member and two standalone masters in one configuration, given to the binary on
/// the command line (`;` between members, since the cluster lists several seeds): locks work,
/// and `INFO` and `/metrics` show each member's kind and the cluster's shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_and_standalone_members_mix_on_the_command_line() {
    let cl = RedisCluster::start();
    let ms = masters(2);
    let listen = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let backends = format!("{};{};{}", cl.url(), ms[0].addr(), ms[1].addr());
    let mut child = binary()
        .args(["--listen", &listen, "--backends", &backends])
        .args(["--set", "quarantine=false"])
        .args(["--set", &format!("metrics_listen={metrics:?}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start redlock-proxy");
    let until = Instant::now() + Duration::from_secs(20);
    let info = loop {
        if let Some(mut c) = Client::try_connect(&listen).await {
            let info = c.text(&["INFO", "redlock"]).await;
            if field(&info, "masters_trusted") == "3" && info.contains("master0_shard2:") {
                break info;
            }
        }
        assert!(Instant::now() < until, "proxy not ready");
        sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(field(&info, "master0_kind"), "cluster", "{info}");
    assert_eq!(field(&info, "master1_kind"), "standalone", "{info}");
    let mut c = Client::connect(&listen).await;
    assert_eq!(
        c.cmd(&["SET", "mixed", "t", "NX", "PX", "10000"]).await,
        Reply::ok()
    );
    assert_eq!(value_in(&cl, "mixed"), "t");
    assert_eq!(
        values_on(&ms, "mixed").await,
        vec![Some("t".into()), Some("t".into())]
    );

    let (_, text) = http_get(&metrics, "/metrics", "").await;
    assert!(
        text.contains("redlock_master_kind{master=\"redis-cluster://"),
        "{text}"
    );
    assert!(text.contains("kind=\"cluster\"} 1"), "{text}");
    assert!(text.contains("kind=\"standalone\"} 1"), "{text}");
    assert!(text.contains("slots=\"0-5460\"} 1"), "{text}");
    assert_eq!(text.matches("redlock_shard_trusted{").count(), 3, "{text}");
    // The shards' families pass Prometheus's own lint.
    let mut lint = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (scripts/deps.sh installs it)");
    {
        use std::io::Write;
        let mut stdin = lint.stdin.take().expect("stdin");
        stdin.write_all(text.as_bytes()).expect("write");
    }
    let out = lint.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Trust is per shard: with one cluster member (N = 1), a failover of one shard refuses the
/// locks of that shard's slots for the quarantine window, while keys of the other shards are
/// granted all along; after the window the shard votes again. The failover kills the member's
/// first seed: a client subscribed through the proxy still gets what is published afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_quarantines_only_that_shards_slots() {
    let mut cl = RedisCluster::start();
    let mut config = cluster_config(std::slice::from_ref(&cl), true);
    config.masters_started_here = true;
    let p = proxy(config).await.to_string();
    wait_shards(&p, 1, Duration::from_secs(20)).await;
    // A key in each shard's first range.
    let key_in = |range_start: u16| {
        (0..10_000)
            .map(|i| format!("k{i}"))
            .find(|k| {
                let s = key_slot_of(&cl, k);
                s >= range_start && s < range_start + 5000
            })
            .expect("a key")
    };
    let (k0, k1) = (key_in(0), key_in(5461));
    let mut c = Client::connect(&p).await;
    // A subscriber through the proxy, whose link to the member starts on its first seed.
    let mut sub = subscribed(&p, "probe").await;
    let promoted = blocking(|| cl.fail_over(0));
    let addr = cl.nodes[promoted].addr();
    let until = Instant::now() + Duration::from_secs(10);
    while !redlock_info(&p)
        .await
        .contains(&format!("primary={addr},slots=0-5460"))
    {
        assert!(Instant::now() < until, "{}", redlock_info(&p).await);
        sleep(Duration::from_millis(50)).await;
    }
    let info = redlock_info(&p).await;
    assert!(
        info.contains("quarantine_reason=promoted_to_primary_of_slots_0-5460"),
        "{info}"
    );
    assert_eq!(
        c.cmd(&["SET", &k0, "t", "NX", "PX", "1000"]).await,
        Reply::Nil,
        "{info}"
    );
    assert_eq!(
        c.cmd(&["SET", &k1, "t", "NX", "PX", "1000"]).await,
        Reply::ok()
    );
    // The window (2 s + drift) passes; the refused attempt's key (1 s) has expired.
    sleep(TTL + Duration::from_millis(300)).await;
    assert_eq!(
        c.cmd(&["SET", &k0, "t2", "NX", "PX", "1000"]).await,
        Reply::ok()
    );
    // The first seed is gone: the subscriber link finds another seed, and what is published
    // in the cluster reaches the subscriber again.
    published_on_reaches(&addr, &mut sub, "probe", Duration::from_secs(30)).await;
}

/// Two cluster members named by different seeds of one cluster (which the start-up check,
/// going by the seeds written, cannot match) are one set of servers: the member listed second
/// is a duplicate as a whole, so the cluster votes once, and with the third member stopped a
/// lock is not extended by that one cluster (the mechanism's negative control is in
/// tests/faults.rs, `one_master_under_two_names_votes_once`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_that_are_one_cluster_vote_once() {
    init_logs();
    let c = RedisCluster::start();
    let mut standalone = Master::start();
    let first = format!("redis-cluster://{}", c.nodes[0].addr());
    let second = format!("redis-cluster://{}", c.nodes[1].addr());
    let p = proxy(config_for(&[first.clone(), second, standalone.addr()]))
        .await
        .to_string();
    wait_status(&p, 1, "duplicate", Duration::from_secs(15)).await;
    let info = redlock_info(&p).await;
    assert!(
        field(&info, "master1").contains(&format!("quarantine_reason=duplicate of member {first}")),
        "{info}"
    );
    let mut client = Client::connect(&p).await;
    let trusted = Instant::now() + Duration::from_secs(15);
    while field(&redlock_info(&p).await, "masters_trusted") != "2" {
        assert!(Instant::now() < trusted, "{}", redlock_info(&p).await);
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        client.cmd(&["SET", "k", "tok", "NX", "PX", "10000"]).await,
        Reply::ok()
    );
    blocking(|| standalone.kill());
    wait_status(&p, 2, "down", Duration::from_secs(5)).await;
    let extend = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end"#;
    assert_eq!(
        client
            .cmd(&["EVAL", extend, "1", "k", "tok", "20000"])
            .await,
        Reply::Integer(0),
        "one cluster extended alone:\n{}",
        redlock_info(&p).await
    );
}
