//! Sentinel members: three members, each a primary and a replica watched by the same three real
//! `redis-sentinel` processes, under lock contention through two proxies while primaries fail
//! over (`SENTINEL FAILOVER`, and `kill -9` of a primary) to replicas made to lag, so that the
//! promoted replica lacks locks the old primary granted.
//!
//! The checkers are the fault suite's (`support::load`): overlapping grant intervals, and lost
//! updates to a counter kept outside the masters. With failover quarantine on there must be
//! none; with it off (`quarantine = false`, the negative control) the same run must show a
//! double grant, which shows the scenario can catch one.
//!
//! How the replica lags: it replicates through the test's TCP fault proxy, which is switched to
//! blackhole (nothing moves, the link stays open) before the locks it must lack are granted. The
//! Sentinels still see a healthy replica (its link is up, it answers them directly), so they
//! promote it. How a lock comes to live on one member only: member 2 is cut off from the proxies
//! (a fault proxy in front of its primary, which the Sentinels monitor through it with a long
//! `down-after-milliseconds`, so they do not fail it over) for longer than the clients' TTL, as in
//! the fault suite's restart scenario; locks granted meanwhile live on members 0 and 1, and member
//! 0's promoted replica lacks them.
//!
//! The majority rule (`sentinel_majority`) is tested on a [`Split`]: one Sentinel names the old
//! primary, two others the promoted one, under one master name, which is what a partition
//! leaves; proxies whose configuration lists dead ports for what lies across the partition. A
//! proxy follows the majority; one cut off with the old primary and one Sentinel grants
//! nothing there (the negative control, `sentinel_majority = false`, shows two holders of one
//! lock); a member whose Sentinels stop answering goes down within the confirmation bound and
//! comes back.
//!
//! Run it with `cargo test --test sentinel` (after `scripts/deps.sh test`, which installs
//! `redis-sentinel`); `-- --nocapture` prints the `FAULTS` figures.

mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use support::fault::Fault;
use support::load::{Checker, Load, Spec, Targets, Verdict, report};
use support::sentinel::*;
use support::*;
use tokio::time::{Instant, sleep};

/// Longer than the quarantine window, with a margin.
const WINDOW_AND_MARGIN: Duration = Duration::from_millis(2600);

/// Contended resources.
const RESOURCES: usize = 4;

/// The scenario, with failover quarantine on or off. Returns the checker and how many faults
/// were injected.
async fn failover_scenario(quarantine: bool) -> (Arc<Checker>, usize) {
    let mut rig = Rig::start().await;
    let backends = rig.backends();
    let proxies = [
        proxy(sentinel_config(&backends, quarantine))
            .await
            .to_string(),
        proxy(sentinel_config(&backends, quarantine))
            .await
            .to_string(),
    ];
    for p in &proxies {
        // Fresh masters sit out the young-master rule first (quarantine on).
        wait_trusted(p, 3, Duration::from_secs(10)).await;
        for i in 0..3 {
            assert_eq!(master_field(p, i, "kind").await, "sentinel");
        }
        assert_eq!(master_field(p, 0, "primary").await, rig.primaries[0].addr());
        assert_eq!(master_field(p, 2, "primary").await, rig.cut.addr);
    }
    let checker = Checker::new(if quarantine { "fq-on" } else { "fq-off" }, RESOURCES);
    // Holds long enough that a lock granted just before a switch is still held when the
    // promoted replica (and the member that was cut off) could grant it again.
    let spec = Spec {
        ttl_ms: 1500,
        hold_ms: (500, 1000),
        ..Spec::default()
    };
    let ttl = Duration::from_millis(spec.ttl_ms);
    let load = Load::start("c", checker.clone(), Targets::new(&proxies), spec);
    sleep(Duration::from_millis(700)).await;
    let mut faults = 0;

    // Round 1: member 0's replica stops receiving; member 2 is cut off for longer than the
    // TTL; then `SENTINEL FAILOVER` promotes member 0's replica, and member 2 comes back as
    // soon as the switch is done. Locks granted meanwhile are on member 1 (and the old
    // primary 0) only.
    rig.repl[0].set(Fault::Blackhole);
    rig.cut.set(Fault::Reset);
    sleep(ttl + Duration::from_millis(200)).await;
    let reply = rig.sentinels[0]
        .cmd(&["SENTINEL", "FAILOVER", NAMES[0]])
        .await;
    assert_eq!(reply, Reply::ok(), "SENTINEL FAILOVER");
    let new0 = rig.replicas[0].addr();
    rig.wait_primary(0, &new0, Duration::from_secs(20)).await;
    rig.cut.heal();
    faults += 3;
    if quarantine {
        for p in &proxies {
            wait_status(p, 0, "quarantined", Duration::from_secs(3)).await;
            assert_eq!(master_field(p, 0, "quarantine_reason").await, "failover");
            assert_eq!(master_field(p, 0, "primary").await, new0);
        }
    }
    sleep(WINDOW_AND_MARGIN).await;
    for p in &proxies {
        wait_trusted(p, 3, Duration::from_secs(10)).await;
        assert_eq!(master_field(p, 0, "primary").await, new0);
        assert_eq!(master_field(p, 0, "failovers").await, "1");
    }
    wait_grant(&checker, "locks resume after the failover quarantine").await;

    // Round 2: member 1's replica stops receiving, then its primary is killed with SIGKILL;
    // the Sentinels agree it is down and promote the replica, which lacks the last locks.
    rig.repl[1].set(Fault::Blackhole);
    sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| rig.primaries[1].kill());
    faults += 2;
    let new1 = rig.replicas[1].addr();
    rig.wait_primary(1, &new1, Duration::from_secs(30)).await;
    if quarantine {
        for p in &proxies {
            wait_status(p, 1, "quarantined", Duration::from_secs(5)).await;
            assert_eq!(master_field(p, 1, "quarantine_reason").await, "failover");
        }
    }
    sleep(WINDOW_AND_MARGIN).await;
    for p in &proxies {
        wait_trusted(p, 3, Duration::from_secs(10)).await;
        assert_eq!(master_field(p, 1, "primary").await, new1);
    }
    wait_grant(&checker, "locks resume after the second failover").await;
    load.stop().await;

    // A lock taken now lands on the new primaries.
    let mut c = Client::connect(&proxies[0]).await;
    assert_eq!(
        c.cmd(&["SET", "after-failover", "tok", "NX", "PX", "2000"])
            .await,
        Reply::ok()
    );
    for r in &rig.replicas[..2] {
        let mut direct = r.client().await;
        assert_eq!(
            direct.cmd(&["GET", "after-failover"]).await,
            Reply::Bulk("tok".into()),
            "the lock is on the new primary {}",
            r.addr()
        );
    }
    (checker, faults)
}

/// Waits (generously) for a grant that begins from now on.
async fn wait_grant(checker: &Checker, what: &str) {
    let from = Instant::now();
    let until = from + Duration::from_secs(15);
    while checker.grants_between(from, Instant::now()) == 0 {
        assert!(Instant::now() < until, "{what}: no grant within 15 s");
        sleep(Duration::from_millis(50)).await;
    }
}

fn assert_safe(v: &Verdict) {
    assert_eq!(v.overlaps, 0, "double grants: {v:?}");
    assert_eq!(v.lost_updates, 0, "lost updates: {v:?}");
    assert!(v.grants >= 10, "too few grants to judge: {v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_quarantine_prevents_a_double_grant_when_a_lagging_replica_is_promoted() {
    let (checker, faults) = failover_scenario(true).await;
    let v = report(
        "sentinel failover to a lagging replica",
        "on",
        faults,
        &checker,
    );
    assert_safe(&v);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_failover_quarantine_the_same_failover_double_grants() {
    let (checker, faults) = failover_scenario(false).await;
    let v = report(
        "sentinel failover to a lagging replica",
        "off",
        faults,
        &checker,
    );
    assert!(
        v.violations() > 0,
        "with failover quarantine off the checkers must see a double grant: {v:?}"
    );
}

/// `--backends` splits at commas, but a `redis-sentinel://` URL keeps its own commas up to its
/// `#master-name`; one without it is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_keeps_a_sentinel_urls_commas() {
    let port = free_port();
    let mut child = binary()
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--backends",
            "redis-sentinel://127.0.0.1:1,127.0.0.1:2#locks-a, 127.0.0.1:3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the proxy binary");
    let addr = format!("127.0.0.1:{port}");
    let mut info = String::new();
    for _ in 0..100 {
        if let Some(mut c) = Client::try_connect(&addr).await {
            info = c.text(&["INFO", "redlock"]).await;
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(field(&info, "masters"), "2", "{info}");
    assert!(
        field(&info, "master0")
            .starts_with("addr=redis-sentinel://127.0.0.1:1,127.0.0.1:2#locks-a,status=down,"),
        "{info}"
    );
    assert!(
        field(&info, "master0").contains(",kind=sentinel,primary=,"),
        "{info}"
    );
    assert!(
        field(&info, "master1").starts_with("addr=127.0.0.1:3,status=down,"),
        "{info}"
    );

    let out = binary()
        .args(["--backends", "redis-sentinel://127.0.0.1:1,127.0.0.1:3"])
        .output()
        .expect("the proxy binary");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ends with #master-name"), "{err}");
}

/// Standalone and Sentinel members in one list: each is one vote, and a lock lands on every
/// member's primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_and_sentinel_members_mix_in_one_configuration() {
    let rig = Rig::start().await;
    let mut dirs = Vec::new();
    let standalone = data_node(&mut dirs, &[]);
    let mut backends = rig.backends()[..2].to_vec();
    backends.push(standalone.addr());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut config = sentinel_config(&backends, false);
    config.metrics_listen = Some(metrics.clone());
    let p = proxy(config).await.to_string();
    wait_trusted(&p, 3, Duration::from_secs(10)).await;
    // `/metrics` names each member's kind and primary too.
    let (_, text) = http_get(&metrics, "/metrics", "").await;
    for (i, kind, primary) in [
        (0, "sentinel", rig.primaries[0].addr()),
        (2, "standalone", standalone.addr()),
    ] {
        let want = format!(
            "redlock_master_info{{master=\"{}\",kind=\"{kind}\",primary=\"{primary}\",quarantine_reason=\"\"}} 1",
            backends[i]
        );
        assert!(text.contains(&want), "{want} in:\n{text}");
    }
    let kinds = [
        master_field(&p, 0, "kind").await,
        master_field(&p, 1, "kind").await,
        master_field(&p, 2, "kind").await,
    ];
    assert_eq!(kinds, ["sentinel", "sentinel", "standalone"]);
    assert_eq!(master_field(&p, 2, "primary").await, standalone.addr());
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.cmd(&["SET", "mixed", "tok", "NX", "PX", "2000"]).await,
        Reply::ok()
    );
    for m in [&rig.primaries[0], &rig.primaries[1], &standalone] {
        let mut direct = m.client().await;
        assert_eq!(
            direct.cmd(&["GET", "mixed"]).await,
            Reply::Bulk("tok".into()),
            "{}",
            m.addr()
        );
    }
}

/// `rediss-sentinel://`: TLS to the data nodes and to the Sentinels, the data nodes' password in
/// the URL and the Sentinels' own in `backend_sentinel_password`; a failover is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_sentinel_speaks_tls_to_the_sentinels_and_the_data_nodes() {
    let c = Certs::get();
    let (cert, key, ca) = (c.file("server.crt"), c.file("server.key"), c.file("ca.crt"));
    // Working folders of their own (see `data_node`).
    let (dir0, dir1) = (Scratch::new("data"), Scratch::new("data"));
    let (path0, path1) = (dir0.path(""), dir1.path(""));
    let auth = ["--requirepass", "data-pw", "--masterauth", "data-pw"];
    let mut primary_args = vec!["--dir", &path0];
    primary_args.extend(auth);
    let primary = tokio::task::block_in_place(|| Master::tls(false, &primary_args));
    let port = primary.port.to_string();
    let mut replica_args = vec![
        "--dir",
        &path1,
        "--replicaof",
        "127.0.0.1",
        &port,
        "--tls-replication",
        "yes",
    ];
    replica_args.extend(auth);
    let replica = tokio::task::block_in_place(|| Master::tls(false, &replica_args));
    let extra = format!(
        "tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
         tls-auth-clients no\ntls-replication yes\nrequirepass sentinel-pw"
    );
    let sentinel = tokio::task::block_in_place(|| {
        Sentinel::start_with(
            &[Watch {
                name: "locks",
                addr: primary.addr(),
                down_after_ms: 1000,
            }],
            &format!("{extra}\nsentinel auth-pass locks data-pw"),
        )
    });
    // The Sentinel speaks TLS only, with a password.
    let ask = |args: &[&str]| {
        let mut all = vec!["--tls", "--cacert", &ca, "--pass", "sentinel-pw"];
        all.extend(args);
        redis_cli(sentinel.port, &all)
    };
    let until = Instant::now() + Duration::from_secs(20);
    while !ask(&["SENTINEL", "MASTER", "locks"]).contains("num-slaves\n1") {
        assert!(Instant::now() < until, "the Sentinel never saw the replica");
        sleep(Duration::from_millis(200)).await;
    }
    let mut config = sentinel_config(
        &[format!(
            "rediss-sentinel://data-pw@{}#locks",
            sentinel.addr()
        )],
        false,
    );
    config.backend_tls_ca_cert_file = Some(ca.clone());
    config.backend_sentinel_password = Some("sentinel-pw".into());
    let p = proxy(config).await.to_string();
    wait_trusted(&p, 1, Duration::from_secs(10)).await;
    assert_eq!(master_field(&p, 0, "primary").await, primary.addr());
    let mut cl = Client::connect(&p).await;
    assert_eq!(
        cl.cmd(&["SET", "tls-lock", "tok", "NX", "PX", "2000"])
            .await,
        Reply::ok()
    );
    assert_eq!(primary.cli(("", "data-pw"), &["GET", "tls-lock"]), "tok");

    // The Sentinel may not yet count the replica as promotable (NOGOODSLAVE until it has
    // read the replica's INFO): ask again for a while.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = ask(&["SENTINEL", "FAILOVER", "locks"]);
        if reply == "OK" {
            break;
        }
        assert!(Instant::now() < until, "SENTINEL FAILOVER: {reply}");
        sleep(Duration::from_millis(200)).await;
    }
    let until = Instant::now() + Duration::from_secs(20);
    while master_field(&p, 0, "primary").await != replica.addr()
        || master_field(&p, 0, "status").await != "up"
    {
        assert!(
            Instant::now() < until,
            "the proxy did not follow the failover: {}",
            redlock_info(&p).await
        );
        sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cl.cmd(&["SET", "tls-lock-2", "tok", "NX", "PX", "2000"])
            .await,
        Reply::ok()
    );
    assert_eq!(replica.cli(("", "data-pw"), &["GET", "tls-lock-2"]), "tok");
}

/// How many pub/sub connections `node` serves (`CLIENT LIST` lines with a subscription).
fn subscribers_on(node: &Master) -> usize {
    node.cli(("", ""), &["CLIENT", "LIST"])
        .lines()
        .filter(|l| !l.contains(" sub=0 psub=0 ") && !l.contains("name=sentinel-"))
        .count()
}

/// A client subscribed through the proxy keeps getting what is published on each member's
/// primary across failovers, because the proxy's subscriber link for a Sentinel member follows
/// the primary the Sentinels name, as its data connection does.
///
/// `SENTINEL FAILOVER` of member 0, whose old primary the Sentinels then cannot demote (its
/// `CLIENT` command is renamed away, so their `MULTI … SLAVEOF … CLIENT KILL … EXEC` aborts: as
/// when the Sentinels cannot reach it but the proxy can). It stays a primary that replicates
/// nothing and keeps its clients, so a link left on it would never hear what is published on
/// the new primary: the link must move on `+switch-master`. Then a `kill -9` of member 1's
/// primary: its link breaks, and must find the promoted replica through the Sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_subscribers_follow_a_sentinel_failover() {
    let mut rig = Rig::start_with(&["--rename-command", "CLIENT", ""]).await;
    let p = proxy(sentinel_config(&rig.backends(), true))
        .await
        .to_string();
    wait_trusted(&p, 3, Duration::from_secs(10)).await;
    let mut sub = subscribed(&p, "probe").await;
    let within = Duration::from_secs(30);
    published_on_reaches(&rig.primaries[0].addr(), &mut sub, "probe", within).await;

    // SENTINEL FAILOVER: member 0's replica promoted, the old primary left a primary.
    rig.fail_over(0).await;
    let new0 = rig.replicas[0].addr();
    rig.wait_primary(0, &new0, Duration::from_secs(20)).await;
    published_on_reaches(&new0, &mut sub, "probe", within).await;
    let until = Instant::now() + within;
    while subscribers_on(&rig.replicas[0]) == 0 {
        assert!(
            Instant::now() < until,
            "the subscriber link did not move to member 0's new primary"
        );
        sleep(Duration::from_millis(100)).await;
    }

    // kill -9 of member 1's primary: the link breaks and must find the promoted replica.
    tokio::task::block_in_place(|| rig.primaries[1].kill());
    let new1 = rig.replicas[1].addr();
    rig.wait_primary(1, &new1, Duration::from_secs(30)).await;
    published_on_reaches(&new1, &mut sub, "probe", within).await;
}

/// Replies a fake Sentinel or cluster node sends, one per connection in turn, whatever it is
/// asked: huge and negative lengths, wrong types, bad ports and slots, deep nesting, binary
/// junk, and a reply larger than any the proxy reads.
fn garbage() -> Vec<Vec<u8>> {
    let node = |slots: &str, port: &str| {
        format!("*1\r\n*3\r\n{slots}*2\r\n$9\r\n127.0.0.1\r\n{port}\r\n").into_bytes()
    };
    let mut big = b"*100000000\r\n".to_vec();
    big.extend(b":1\r\n".repeat(600_000));
    vec![
        b"*4294967295\r\n".to_vec(),
        b"*9223372036854775807\r\n:1\r\n".to_vec(),
        b"*2\r\n:1\r\n:2\r\n".to_vec(),
        b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\n99999\r\n".to_vec(),
        b"*2\r\n$0\r\n\r\n$1\r\n0\r\n".to_vec(),
        node(":-1\r\n:5\r\n", ":7000"),
        node(":0\r\n:16384\r\n", ":7000"),
        node(":0\r\n:16383\r\n", ":0"),
        node(":0\r\n:16383\r\n", ":-7000"),
        node(":9223372036854775807\r\n:0\r\n", ":7000"),
        b"*1\r\n*3\r\n:0\r\n:16383\r\n:5\r\n".to_vec(),
        b"*1\r\n:5\r\n".to_vec(),
        b"$99999999999\r\n".to_vec(),
        b"$-5\r\n".to_vec(),
        b"*-1\r\n".to_vec(),
        b"*1\r\n".repeat(200_000),
        b"\x00\xff\xfe garbage\r\n".to_vec(),
        b"-MOVED 1 not-an-address\r\n".to_vec(),
        b"+OK\r\n".to_vec(),
        big,
    ]
}

/// A fake server answering every read with the next connection's garbage (see [`garbage`]).
async fn garbage_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let replies = Arc::new(garbage());
        let mut n = 0usize;
        while let Ok((mut s, _)) = listener.accept().await {
            let reply = replies.clone();
            let i = n % reply.len();
            n += 1;
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 4096];
                while let Ok(k) = s.read(&mut buf).await {
                    if k == 0 || s.write_all(&reply[i]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_or_cluster_node_answering_garbage_is_only_a_member_down() {
    let ms = masters(3);
    let sentinel = garbage_server().await;
    let cluster = garbage_server().await;
    let mut backends = addrs(&ms);
    backends.push(format!("redis-sentinel://{sentinel}#mymaster"));
    backends.push(format!("redis-cluster://{cluster}"));
    let proxy = ProxyProcess::start(&backends, "", &[]);
    let info = proxy.info_when_up(3).await;
    assert_eq!(field(&info, "masters_up"), "3", "{info}");
    // Every garbage reply is met more than once while the members keep retrying.
    sleep(Duration::from_millis(4000)).await;
    let mut c = proxy.client().await;
    let info = c.text(&["INFO", "redlock"]).await;
    for m in ["master3", "master4"] {
        let line = field(&info, m);
        assert!(line.contains("status=down,last_error="), "{m}: {info}");
        assert!(
            !line.contains("last_error=,"),
            "{m} without its reason: {info}"
        );
    }
    // The three real masters are a quorum of five: locks are granted and released as usual.
    assert!(
        c.cmd(&["SET", "lock", "t", "NX", "PX", "10000"])
            .await
            .is_ok()
    );
    assert_eq!(
        c.cmd(&["SET", "lock", "u", "NX", "PX", "10000"]).await,
        Reply::Nil
    );
    assert_eq!(c.cmd(&["DELIFEQ", "lock", "t"]).await, Reply::Integer(1));
    let log = proxy.stderr();
    assert!(!log.contains("panicked"), "{log}");
}

/// A Sentinel member's primary listed again on its own (a name the start-up check cannot
/// match with the Sentinel URL) is the same Redis server: the member listed later is a
/// duplicate, sent nothing, and its votes do not count (the mechanism's negative control is in
/// tests/faults.rs, `one_master_under_two_names_votes_once`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_members_primary_listed_on_its_own_votes_once() {
    let rig = Rig::start().await;
    let mut backends = rig.backends()[..2].to_vec();
    backends.push(rig.primaries[0].addr());
    let p = proxy(sentinel_config(&backends, false)).await.to_string();
    wait_status(&p, 2, "duplicate", Duration::from_secs(10)).await;
    let info = redlock_info(&p).await;
    assert!(
        field(&info, "master2").contains(&format!(
            "quarantine_reason=duplicate of member {}",
            backends[0].replace(',', ";")
        )),
        "{info}"
    );
    assert_eq!(field(&info, "masters_trusted"), "2", "{info}");
    // Two real servers still grant; the duplicate was sent nothing, so the key is there once.
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.cmd(&["SET", "twice", "tok", "NX", "PX", "2000"]).await,
        Reply::ok()
    );
}

/// With `sentinel_majority` a member follows the node a majority of its configured Sentinels
/// name: here two of three name `p2`, and the lone one, listed first, names `p1`. The negative
/// control (`sentinel_majority = false`) takes the first answer and follows `p1`, as every proxy
/// did before, whatever the other two say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_follows_the_primary_a_majority_of_its_sentinels_name() {
    let split = tokio::task::block_in_place(Split::start);
    let backends = [
        split.member_reaching_all(),
        split.m1.addr(),
        split.m2.addr(),
    ];
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut on = sentinel_config(&backends, false);
    on.metrics_listen = Some(metrics.clone());
    let on = proxy(on).await.to_string();
    let mut off = sentinel_config(&backends, false);
    off.sentinel_majority = false;
    let off = proxy(off).await.to_string();
    wait_trusted(&on, 3, Duration::from_secs(10)).await;
    wait_trusted(&off, 3, Duration::from_secs(10)).await;
    assert_eq!(master_field(&on, 0, "primary").await, split.p2.addr());
    assert_eq!(master_field(&on, 0, "sentinels_confirming").await, "2");
    assert_eq!(master_field(&on, 0, "sentinels").await, "3");
    assert_eq!(
        master_field(&off, 0, "primary").await,
        split.p1.addr(),
        "the negative control follows the first answer"
    );
    let (_, text) = http_get(&metrics, "/metrics", "").await;
    for want in [
        format!(
            "redlock_sentinel_confirmations{{master=\"{}\"}} 2",
            backends[0]
        ),
        format!("redlock_sentinels{{master=\"{}\"}} 3", backends[0]),
        format!("redlock_sentinel_confirmed{{master=\"{}\"}} 1", backends[0]),
    ] {
        assert!(text.contains(&want), "{want} in:\n{text}");
    }
    // A lock lands on the majority's primary, never on the node the lone Sentinel names.
    let mut c = Client::connect(&on).await;
    assert_eq!(
        c.cmd(&["SET", "followed", "tok", "NX", "PX", "2000"]).await,
        Reply::ok()
    );
    assert_eq!(
        split.p2.client().await.cmd(&["GET", "followed"]).await,
        Reply::Bulk("tok".into())
    );
    assert_eq!(
        split.p1.client().await.cmd(&["GET", "followed"]).await,
        Reply::Nil
    );
}

/// The partition: proxy A is cut off with the old primary `p1`, the lone Sentinel and master
/// `m1` (the other two Sentinels and `m2` are dead ports in its configuration); proxy B sits
/// with `p2`, the two Sentinels that promoted it, and `m2`. Both try to take one lock. Returns
/// how many were granted it.
async fn partition_scenario(majority: bool) -> usize {
    let split = tokio::task::block_in_place(Split::start);
    let minority = [
        Split::member(&[split.lone.addr(), dead_addr(), dead_addr()]),
        split.m1.addr(),
        dead_addr(),
    ];
    let majority_side = [
        Split::member(&[dead_addr(), split.pair[0].addr(), split.pair[1].addr()]),
        dead_addr(),
        split.m2.addr(),
    ];
    let config = |backends: &[String]| {
        let mut c = sentinel_config(backends, false);
        c.sentinel_majority = majority;
        c
    };
    let a = proxy(config(&minority)).await.to_string();
    let b = proxy(config(&majority_side)).await.to_string();
    wait_trusted(&b, 2, Duration::from_secs(10)).await;
    assert_eq!(master_field(&b, 0, "primary").await, split.p2.addr());
    if majority {
        // One of three configured Sentinels answers: no majority, so the member is down and
        // says why; it never counts p1.
        let until = Instant::now() + Duration::from_secs(10);
        let want = "no majority of sentinels (1 of 3) confirmed the primary";
        while master_field(&a, 0, "quarantine_reason").await != want {
            assert!(Instant::now() < until, "{}", redlock_info(&a).await);
            sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(master_field(&a, 0, "status").await, "down");
        assert_eq!(master_field(&a, 0, "sentinels_confirming").await, "1");
        assert_eq!(field(&redlock_info(&a).await, "masters_trusted"), "1");
    } else {
        wait_trusted(&a, 2, Duration::from_secs(10)).await;
        assert_eq!(master_field(&a, 0, "primary").await, split.p1.addr());
    }
    let mut holders = 0;
    for (p, token) in [(&a, "a"), (&b, "b")] {
        let mut c = Client::connect(p).await;
        let reply = c.cmd(&["SET", "split", token, "NX", "PX", "2000"]).await;
        if reply == Reply::ok() {
            holders += 1;
        }
    }
    holders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_cut_off_with_the_old_primary_and_one_sentinel_grants_nothing_there() {
    assert_eq!(partition_scenario(true).await, 1, "one holder: proxy B's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sentinel_majority_the_two_sides_of_a_partition_double_grant() {
    assert_eq!(
        partition_scenario(false).await,
        2,
        "the negative control must show two holders of one lock"
    );
}

/// Two of three Sentinels stop answering (SIGSTOP): the member's last confirmation lapses and
/// it is down (sent nothing: a lock taken meanwhile on the other two members is not on its
/// primary), and `INFO` and `/metrics` say why. When they answer again it is up again, on the
/// same primary, without reconnecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_down_while_no_majority_of_its_sentinels_confirms_and_back_after() {
    let split = tokio::task::block_in_place(Split::start);
    let backends = [
        Split::member(&[
            split.pair[0].addr(),
            split.pair[1].addr(),
            split.lone.addr(),
        ]),
        split.m1.addr(),
        split.m2.addr(),
    ];
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut config = sentinel_config(&backends, false);
    config.metrics_listen = Some(metrics.clone());
    let p = proxy(config).await.to_string();
    wait_trusted(&p, 3, Duration::from_secs(10)).await;
    assert_eq!(master_field(&p, 0, "primary").await, split.p2.addr());

    for s in &split.pair {
        s.pause();
    }
    wait_status(&p, 0, "down", Duration::from_secs(5)).await;
    let info = redlock_info(&p).await;
    let line = field(&info, "master0");
    assert!(
        line.contains(
            ",quarantine_reason=no majority of sentinels (1 of 3) confirmed the primary,"
        ),
        "{info}"
    );
    assert!(
        line.contains(",sentinels_confirming=1,sentinels=3"),
        "{info}"
    );
    assert_eq!(field(&info, "masters_up"), "2", "{info}");
    // What each Sentinel said: the lone one names p1, the paused ones time out.
    assert!(
        line.contains(&format!(
            ",last_error=no majority of sentinels (1 of 3) confirmed the primary for '{SPLIT_NAME}' ("
        )) && line.contains(&format!("names {} at epoch 0", split.p1.addr()))
            && line.contains(&format!("{}: timed out", split.pair[0].addr())),
        "{info}"
    );
    let (_, text) = http_get(&metrics, "/metrics", "").await;
    for want in [
        format!("redlock_master_up{{master=\"{}\"}} 0", backends[0]),
        format!("redlock_sentinel_confirmed{{master=\"{}\"}} 0", backends[0]),
        format!(
            "redlock_sentinel_confirmations{{master=\"{}\"}} 1",
            backends[0]
        ),
    ] {
        assert!(text.contains(&want), "{want} in:\n{text}");
    }
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.cmd(&["SET", "unconfirmed", "tok", "NX", "PX", "2000"])
            .await,
        Reply::ok(),
        "m1 and m2 are a quorum"
    );
    assert_eq!(
        split.p2.client().await.cmd(&["GET", "unconfirmed"]).await,
        Reply::Nil,
        "the unconfirmed member was sent nothing"
    );

    for s in &split.pair {
        s.resume();
    }
    wait_status(&p, 0, "up", Duration::from_secs(5)).await;
    assert_eq!(master_field(&p, 0, "primary").await, split.p2.addr());
    assert_eq!(master_field(&p, 0, "sentinels_confirming").await, "2");
    assert_eq!(master_field(&p, 0, "quarantine_reason").await, "");
    assert_eq!(master_field(&p, 0, "last_error").await, "");
}
