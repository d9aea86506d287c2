//! Network partitions on real TCP links: chosen links between the proxies, the masters, the
//! Sentinels and the cluster nodes are cut with iptables (`tests/support/partition.rs`), while
//! every process keeps running. Open connections stall as they would behind a real partition;
//! nothing is reset.
//!
//! Each scenario with a protection runs with it and again with it switched off (the negative
//! control), where the test asserts what the protection prevents: a double grant, or for
//! `quorum_repair` a holder losing its lock to the loss of one master:
//!
//! 1. a Sentinel member split into a minority and a majority side (`sentinel_majority`);
//! 2. a proxy cut off from one master while a leased lock is taken, then healed, then another
//!    master lost (`quorum_repair`); and two proxies with complementary cuts racing for the
//!    same keys under load;
//! 3. a Redis Cluster shard primary cut off from its cluster's majority, its slots failed over
//!    (`quarantine`), with the old primary's last grant and the promotion timed;
//! 4. a member list reloaded on a proxy cut off from part of the old set
//!    (`membership_transition`);
//! 5. random proxy–master link cuts and master restarts under load (the fault suite's
//!    checkers).
//!
//! Needs root and iptables (`scripts/deps.sh test`); without them each test prints why and
//! passes, except in CI (`CI` set), where it fails. Run with
//! `cargo test --test partitions -- --nocapture` (one `PARTITION` line of figures per run).

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::load::{Checker, Load, Spec, Targets, report};
use support::partition::{Net, Peer, give};
use support::sentinel::{Sentinel, Watch};
use support::*;
use tokio::time::{Instant, sleep};

const OK: &str = "+OK\r\n";

/// Every proxy's `max_ttl_ms`: the quarantine window `W` is 1,012 ms.
const MAX_TTL_MS: u64 = 1000;

/// The settings every proxy here shares: quick to see a stalled master, quarantines on.
fn settings(extra: &str) -> String {
    settings_with(MAX_TTL_MS, true, extra)
}

/// [`settings`] with another `max_ttl_ms` and `quarantine`.
fn settings_with(max_ttl_ms: u64, quarantine: bool, extra: &str) -> String {
    format!(
        "max_ttl_ms = {max_ttl_ms}\nquarantine = {quarantine}\nnode_timeout_ms = 200\n\
         stall_timeout_ms = 500\nconnect_timeout_ms = 300\nprobe_interval_ms = 100\n{extra}"
    )
}

/// A `redis-server` running as a user of its own, in a folder of its own.
struct Node {
    m: Master,
    peer: Peer,
    _dir: Scratch,
}

/// Starts a [`Node`] named `name` with extra `redis-server` arguments.
fn node(net: &Net, name: &str, extra: &[&str]) -> Node {
    let user = net.user();
    let dir = Scratch::new("part");
    give(&dir.path(""), user);
    let path = dir.path("");
    let mut args = vec!["--dir", &path];
    args.extend(extra);
    let m = tokio::task::block_in_place(|| Master::start_as(user, &args));
    let peer = Peer::new(name, user, &[m.port]);
    Node { m, peer, _dir: dir }
}

/// The proxy binary running as a user of its own.
struct Proxy {
    p: ProxyProcess,
    peer: Peer,
}

/// Starts a [`Proxy`] named `name` in front of `backends` with `settings` (TOML lines).
fn proxy(net: &Net, name: &str, backends: &[String], settings: &str) -> Proxy {
    let user = net.user();
    let p = ProxyProcess::start_as(user, backends, settings);
    let peer = Peer::new(name, user, &[p.port()]);
    Proxy { p, peer }
}

/// Waits until `f(INFO redlock)` holds at proxy `p`; panics after `within`.
async fn wait_info(p: &ProxyProcess, what: &str, within: Duration, f: impl Fn(&str) -> bool) {
    let until = Instant::now() + within;
    loop {
        let info = p.info().await;
        if f(&info) {
            return;
        }
        assert!(
            Instant::now() < until,
            "{what}: not after {within:?}:\n{info}\n{}",
            p.stderr()
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until proxy `p` trusts `n` masters (out of their first-connect quarantine).
async fn trusted(p: &ProxyProcess, n: usize) {
    wait_info(p, "all masters trusted", Duration::from_secs(20), |i| {
        field(i, "masters_trusted") == n.to_string()
    })
    .await;
}

/// The status of master `i` in an `INFO redlock` text.
fn status(info: &str, i: usize) -> String {
    field(info, &format!("master{i}"))
        .split(',')
        .find_map(|kv| kv.strip_prefix("status="))
        .unwrap_or("")
        .to_string()
}

/// `SET key token NX PX ttl` through `c` every `every` until granted or `until` has passed:
/// when the granted request was sent, if one was.
async fn acquire(
    c: &mut Client,
    key: &str,
    token: &str,
    ttl: u64,
    every: Duration,
    until: Instant,
) -> Option<Instant> {
    let ttl = ttl.to_string();
    loop {
        let sent = Instant::now();
        if c.raw(&["SET", key, token, "NX", "PX", &ttl]).await == OK {
            return Some(sent);
        }
        if Instant::now() + every >= until {
            return None;
        }
        sleep(every).await;
    }
}

/// The Redlock drift allowance of a TTL, as the proxy computes it.
fn drift(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms / 100 + 2)
}

/// Prints one scenario's `PARTITION` line.
fn line(scenario: &str, protection: &str, outcome: &str) {
    println!("PARTITION scenario={scenario} protection={protection} {outcome}");
}

// ---------------------------------------------------------------------------------------------
// The harness itself.

/// A cut stalls an open connection, also in the direction its opener does not send (b opened
/// the replication link to a; a's writes stop reaching b), and new connections never complete
/// (a cannot replicate from b); healing resumes the stalled link; the test process (root) is
/// never cut off; dropping the network removes its chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stalls_a_link_both_ways_and_heals() {
    let Some(net) = Net::new() else { return };
    let a = node(&net, "a", &[]);
    let b = node(&net, "b", &[]);
    // b replicates from a: a connection b opened to a.
    let port = a.m.port.to_string();
    assert_eq!(b.m.cli(("", ""), &["REPLICAOF", "127.0.0.1", &port]), "OK");
    let synced = |want: &str| {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let info = b.m.cli(("", ""), &["INFO", "replication"]);
            if info.contains(want) {
                return;
            }
            assert!(std::time::Instant::now() < until, "never {want}:\n{info}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    tokio::task::block_in_place(|| synced("master_link_status:up"));
    net.cut(&a.peer, &b.peer);
    assert_eq!(net.cut_rules(), 2);
    // Writes on a no longer reach b (the open link stalls); the test still reaches both.
    a.m.cli(("", ""), &["SET", "k", "after-cut"]);
    sleep(Duration::from_millis(500)).await;
    assert_eq!(b.m.cli(("", ""), &["GET", "k"]), "");
    // A process of user a cannot open a connection to b either: a's own replication to b.
    let bport = b.m.port.to_string();
    assert_eq!(a.m.cli(("", ""), &["REPLICAOF", "127.0.0.1", &bport]), "OK");
    sleep(Duration::from_millis(700)).await;
    let info = a.m.cli(("", ""), &["INFO", "replication"]);
    assert!(info.contains("master_link_status:down"), "{info}");
    assert_eq!(a.m.cli(("", ""), &["REPLICAOF", "NO", "ONE"]), "OK");
    net.heal(&a.peer, &b.peer);
    assert_eq!(net.cut_rules(), 0);
    a.m.cli(("", ""), &["SET", "k", "healed"]);
    let until = Instant::now() + Duration::from_secs(15);
    while b.m.cli(("", ""), &["GET", "k"]) != "healed" {
        assert!(Instant::now() < until, "the link never healed");
        sleep(Duration::from_millis(50)).await;
    }
    let chain = net.chain().to_string();
    drop((a, b));
    drop(net);
    let rules = std::process::Command::new("iptables")
        .args(["-w", "-S"])
        .output()
        .expect("iptables");
    assert!(
        !String::from_utf8_lossy(&rules.stdout).contains(&chain),
        "chain {chain} left behind"
    );
}

// ---------------------------------------------------------------------------------------------
// 1. A Sentinel member split into a minority and a majority side.

/// Members: a Sentinel member (primary P1 and a replica, three Sentinels) and two standalone
/// masters M1, M2. Side 1 holds P1, one Sentinel and proxy A; side 2 the replica, two
/// Sentinels and proxy B; A is also cut from M2 and B from M1, so that each side holds a
/// standalone vote. The majority side promotes the replica, and B takes the lock (the replica
/// and M2) once its failover quarantine is over; then A asks for the same lock (P1 and M1).
/// Answers whether A was granted it while B's lock was still valid.
async fn sentinel_split(protect: bool) -> Option<bool> {
    let net = Net::new()?;
    let p1 = node(&net, "P1", &[]);
    let port = p1.m.port.to_string();
    let replica = node(&net, "R", &["--replicaof", "127.0.0.1", &port]);
    let m1 = node(&net, "M1", &[]);
    let m2 = node(&net, "M2", &[]);
    let watch = [Watch {
        name: "m0",
        addr: p1.m.addr(),
        down_after_ms: 1000,
    }];
    let sentinels: Vec<(Sentinel, Peer)> = (0..3)
        .map(|i| {
            let user = net.user();
            let s = tokio::task::block_in_place(|| Sentinel::start_as(user, &watch, ""));
            let peer = Peer::new(&format!("S{i}"), user, &[s.port]);
            (s, peer)
        })
        .collect();
    // Until every Sentinel knows the other two and the replica, and the replica is in sync.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let mut ready = replica
            .m
            .cli(("", ""), &["INFO", "replication"])
            .contains("master_link_status:up");
        for (s, _) in &sentinels {
            let m = s.master("m0").await;
            ready &= m.get("num-other-sentinels").map(String::as_str) == Some("2")
                && m.get("num-slaves").map(String::as_str) == Some("1");
        }
        if ready {
            break;
        }
        assert!(Instant::now() < until, "Sentinels not ready after 30 s");
        sleep(Duration::from_millis(100)).await;
    }
    let all: Vec<String> = sentinels.iter().map(|(s, _)| s.addr()).collect();
    let backends = [
        format!("redis-sentinel://{}#m0", all.join(",")),
        m1.m.addr(),
        m2.m.addr(),
    ];
    let settings = settings(&format!("sentinel_majority = {protect}"));
    let a = proxy(&net, "A", &backends, &settings);
    let b = proxy(&net, "B", &backends, &settings);
    trusted(&a.p, 3).await;
    trusted(&b.p, 3).await;

    let side1 = [&p1.peer, &sentinels[0].1, &a.peer];
    let side2 = [&replica.peer, &sentinels[1].1, &sentinels[2].1, &b.peer];
    net.split(&side1, &side2);
    net.cut(&a.peer, &m2.peer);
    net.cut(&b.peer, &m1.peer);
    let cut_at = Instant::now();

    // The majority promotes the replica; B takes the lock once it trusts the new primary (asked
    // before, B's refused attempts would leave their key on the quarantined primary, as too
    // few masters answered to rule out an earlier grant of the same token).
    let new_primary = format!("primary={},", replica.m.addr());
    wait_info(
        &b.p,
        "B trusts the promoted replica",
        Duration::from_secs(20),
        |i| {
            let m = field(i, "master0");
            m.contains(&new_primary) && m.contains("status=up")
        },
    )
    .await;
    let mut cb = b.p.client().await;
    let b_sent = acquire(
        &mut cb,
        "lock:split",
        "B",
        MAX_TTL_MS,
        Duration::from_millis(50),
        cut_at + Duration::from_secs(20),
    )
    .await;
    let b_sent = b_sent.unwrap_or_else(|| {
        panic!(
            "the majority side never granted the lock:\n{}",
            b.p.stderr()
        )
    });
    let b_after = b_sent.duration_since(cut_at);
    // A asks for the same lock while B's is valid.
    let valid_until = b_sent + Duration::from_millis(MAX_TTL_MS) - drift(MAX_TTL_MS);
    let mut ca = a.p.client().await;
    let a_sent = acquire(
        &mut ca,
        "lock:split",
        "A",
        MAX_TTL_MS,
        Duration::from_millis(20),
        valid_until - Duration::from_millis(100),
    )
    .await;
    let double = a_sent.is_some_and(|t| t < valid_until);
    let promoted = sentinels[1].0.primary("m0").await == replica.m.addr();
    line(
        "sentinel minority/majority split",
        if protect { "on" } else { "off" },
        &format!(
            "replica_promoted={promoted} majority_granted_after_ms={} minority_granted={} double_grant={double}",
            b_after.as_millis(),
            a_sent.is_some()
        ),
    );
    Some(double)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_minority_side_cannot_grant_what_the_majority_side_holds() {
    if let Some(double) = sentinel_split(true).await {
        assert!(
            !double,
            "the minority side granted a lock the majority side holds"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sentinel_majority_the_minority_side_grants_twice() {
    if let Some(double) = sentinel_split(false).await {
        assert!(double, "the negative control: two holders");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Asymmetric cuts.

/// What scenario 2 saw.
#[derive(Debug)]
struct Repaired {
    /// The lock was written back to C, the master the holder's proxy could not reach when it
    /// granted it, once the cut healed.
    on_c: bool,
    /// The holder's lease was lost (`leases_lost`), though only one master was lost.
    lease_lost: bool,
    /// Another client, through a proxy that reaches every master, was granted the lock while
    /// the holder's connection (and so its lease) was still open.
    taken: bool,
    /// A, restarted empty, holds the holder's lock again at the end (written back once its
    /// quarantine was over).
    on_a_again: bool,
}

/// Masters A, B, C; proxy P cut off from C, proxy Q reaching all. A client takes a leased
/// lock through P (it lives on A and B); the cut heals and the lease renews it; then A
/// restarts empty. Q asks for the lock for three quarantine windows.
async fn repair_scenario(protect: bool) -> Option<Repaired> {
    let net = Net::new()?;
    let mut ms: Vec<Node> = ["A", "B", "C"].iter().map(|n| node(&net, n, &[])).collect();
    let backends: Vec<String> = ms.iter().map(|n| n.m.addr()).collect();
    let settings = settings(&format!(
        "lease_keys = [\"lease:*\"]\nlease_max_ms = 60000\nquorum_repair = {protect}"
    ));
    let p = proxy(&net, "P", &backends, &settings);
    let q = proxy(&net, "Q", &backends, &settings);
    trusted(&p.p, 3).await;
    trusted(&q.p, 3).await;

    net.cut(&p.peer, &ms[2].peer);
    wait_info(&p.p, "C down at P", Duration::from_secs(10), |i| {
        status(i, 2) == "down"
    })
    .await;
    let mut holder = p.p.client().await;
    let ttl = 600;
    let granted = acquire(
        &mut holder,
        "lease:job",
        "holder",
        ttl,
        Duration::from_millis(50),
        Instant::now() + Duration::from_secs(5),
    )
    .await;
    assert!(granted.is_some(), "P never granted the lock on A and B");
    assert_eq!(ms[2].m.cli(("", ""), &["GET", "lease:job"]), "");
    net.heal(&p.peer, &ms[2].peer);
    wait_info(&p.p, "C back at P", Duration::from_secs(10), |i| {
        status(i, 2) == "up"
    })
    .await;
    // A few renewals (every third of the TTL) with C reachable.
    sleep(Duration::from_millis(3 * ttl)).await;
    let on_c = ms[2].m.cli(("", ""), &["GET", "lease:job"]) == "holder";

    // A master that holds the lock is lost: restarted empty (each proxy quarantines it for W).
    tokio::task::block_in_place(|| ms[0].m.restart());
    let mut cq = q.p.client().await;
    let taken = acquire(
        &mut cq,
        "lease:job",
        "other",
        ttl,
        Duration::from_millis(50),
        Instant::now() + Duration::from_millis(3 * 1012 + 500),
    )
    .await
    .is_some();
    // The holder's connection is still open.
    assert_eq!(holder.raw(&["PING"]).await, "+PONG\r\n");
    let lease_lost = field(&p.p.info().await, "leases_lost") != "0";
    let on_a_again = ms[0].m.cli(("", ""), &["GET", "lease:job"]) == "holder";
    let r = Repaired {
        on_c,
        lease_lost,
        taken,
        on_a_again,
    };
    line(
        "asymmetric cut, healed, then a master lost",
        if protect { "on" } else { "off" },
        &format!(
            "written_back_to_c={} lease_lost={} taken_by_other={} written_back_to_restarted_a={}",
            r.on_c, r.lease_lost, r.taken, r.on_a_again
        ),
    );
    Some(r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_granted_during_a_cut_is_repaired_and_survives_losing_a_master() {
    if let Some(r) = repair_scenario(true).await {
        assert!(r.on_c, "the lock was not written back to C: {r:?}");
        assert!(!r.lease_lost && !r.taken, "{r:?}");
        assert!(r.on_a_again, "the lock was not written back to A: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quorum_repair_losing_a_master_hands_the_lock_to_another_client() {
    if let Some(r) = repair_scenario(false).await {
        assert!(!r.on_c && !r.on_a_again, "{r:?}");
        assert!(
            r.lease_lost && r.taken,
            "the negative control: the holder loses its lock to one lost master: {r:?}"
        );
    }
}

/// Two proxies with complementary cuts (proxy 1 cut off from m3, proxy 2 from m1) race for the
/// same keys under load, then the cuts move (proxy 1 from m2, proxy 2 from m3), then heal:
/// never two holders, no lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complementary_cuts_never_grant_twice() {
    let Some(net) = Net::new() else { return };
    let ms: Vec<Node> = ["m1", "m2", "m3"]
        .iter()
        .map(|n| node(&net, n, &[]))
        .collect();
    let backends: Vec<String> = ms.iter().map(|n| n.m.addr()).collect();
    let settings = settings("");
    let p1 = proxy(&net, "P1", &backends, &settings);
    let p2 = proxy(&net, "P2", &backends, &settings);
    trusted(&p1.p, 3).await;
    trusted(&p2.p, 3).await;
    let checker = Checker::new("cc", 3);
    let spec = Spec {
        clients: 12,
        ttl_ms: 800,
        hold_ms: (50, 200),
        retry_ms: (5, 20),
    };
    let load = Load::start(
        "cc",
        Arc::clone(&checker),
        Targets::new(&[p1.p.addr.clone(), p2.p.addr.clone()]),
        spec,
    );
    sleep(Duration::from_millis(500)).await;
    net.cut(&p1.peer, &ms[2].peer);
    net.cut(&p2.peer, &ms[0].peer);
    sleep(Duration::from_millis(2500)).await;
    net.heal_all();
    net.cut(&p1.peer, &ms[1].peer);
    net.cut(&p2.peer, &ms[2].peer);
    sleep(Duration::from_millis(2500)).await;
    net.heal_all();
    sleep(Duration::from_millis(1000)).await;
    load.stop().await;
    let v = report("partitions: complementary cuts", "on", 4, &checker);
    assert_eq!(v.overlaps, 0, "double grants: {v:?}");
    assert_eq!(v.lost_updates, 0, "lost updates: {v:?}");
    assert!(v.grants >= 10, "too few grants to judge: {v:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. A Redis Cluster shard primary cut off from its cluster's majority.

/// What scenario 3 saw, in ms from the cut.
#[derive(Debug)]
struct ShardSplit {
    /// When the cut-off primary last granted a probe lock to proxy A.
    old_last_grant: Option<u128>,
    /// When the cut-off primary first refused a write (`CLUSTERDOWN`), seen from the test.
    old_stopped: Option<u128>,
    /// When its replica was seen as a primary.
    promoted: u128,
    /// When proxy B, on the majority side, was granted the lock A took just after the cut.
    b_granted: u128,
    /// B was granted it while A's grant was still valid.
    double: bool,
}

/// A cluster member (three shards, a replica each) and standalone M1, M2. The primary X of
/// the lock's slot and proxy A on one side; the rest of the cluster (X's replica among them)
/// and proxy B on the other; A also cut from M2, B from M1. A takes the lock (X and M1) just
/// after the cut with `max_ttl_ms` as TTL and keeps taking probe locks in the same slot; B asks
/// for the lock until granted.
async fn shard_split(protect: bool) -> Option<ShardSplit> {
    let net = Net::new()?;
    let users: Vec<_> = (0..6).map(|_| net.user()).collect();
    let cl = tokio::task::block_in_place(|| RedisCluster::start_as(&users));
    let peers: Vec<Peer> = (0..6)
        .map(|i| Peer::new(&format!("n{i}"), users[i], &[cl.nodes[i].port, cl.buses[i]]))
        .collect();
    let m1 = node(&net, "M1", &[]);
    let m2 = node(&net, "M2", &[]);
    let key = "{shard}lock";
    let slot: u16 = redis_cli(cl.live_port(), &["CLUSTER", "KEYSLOT", key])
        .parse()
        .expect("slot");
    let x = cl.primary_of(slot);
    let xr = cl.replica_of(x);
    let backends = [cl.url(), m1.m.addr(), m2.m.addr()];
    // Long TTLs here: the failover takes a few seconds, and A's grant must still be valid then.
    let max_ttl = 5000;
    let settings = settings_with(max_ttl, protect, "");
    let a = proxy(&net, "A", &backends, &settings);
    let b = proxy(&net, "B", &backends, &settings);
    trusted(&a.p, 3).await;
    trusted(&b.p, 3).await;

    let others: Vec<&Peer> = (0..6).filter(|&i| i != x).map(|i| &peers[i]).collect();
    let mut side2 = others.clone();
    side2.push(&b.peer);
    net.split(&[&peers[x], &a.peer], &side2);
    net.cut(&a.peer, &m2.peer);
    net.cut(&b.peer, &m1.peer);
    let cut_at = Instant::now();
    let mut ca = a.p.client().await;
    let ttl = max_ttl.to_string();
    let a_sent = Instant::now();
    assert_eq!(
        ca.raw(&["SET", key, "A", "NX", "PX", &ttl]).await,
        OK,
        "A's grant just after the cut"
    );
    let a_valid = a_sent + Duration::from_millis(max_ttl) - drift(max_ttl);

    // A keeps taking probe locks in the lock's slot; the test watches X and its replica.
    let probes = tokio::spawn(async move {
        let mut last = None;
        for n in 0.. {
            let k = format!("{{shard}}probe:{n}");
            let sent = Instant::now();
            if ca.raw(&["SET", &k, "A", "NX", "PX", "500"]).await == OK {
                last = Some(sent);
            }
            if sent.duration_since(cut_at) > Duration::from_secs(6) {
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        last
    });
    let (xport, rport) = (cl.nodes[x].port, cl.nodes[xr].port);
    let watcher = tokio::task::spawn_blocking(move || {
        let (mut stopped, mut promoted) = (None, None);
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while promoted.is_none() || stopped.is_none() {
            if stopped.is_none()
                && redis_cli(xport, &["SET", "{shard}watch", "1"]).starts_with("CLUSTERDOWN")
            {
                stopped = Some(std::time::Instant::now());
            }
            if promoted.is_none() && redis_cli(rport, &["ROLE"]).starts_with("master") {
                promoted = Some(std::time::Instant::now());
            }
            if std::time::Instant::now() > until {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (stopped, promoted)
    });
    // B asks once it trusts the promoted replica. Asked while that shard is quarantined, B's
    // refused attempts would leave their key there (too few masters answered to rule out an
    // earlier grant of the same token), and B would wait out that key's TTL as well.
    let new_primary = format!("primary={}", cl.nodes[xr].addr());
    wait_info(
        &b.p,
        "B trusts the promoted replica",
        Duration::from_secs(20),
        |i| {
            (0..3).any(|j| {
                let shard = field(i, &format!("master0_shard{j}"));
                shard.contains(&new_primary) && shard.contains("status=up")
            })
        },
    )
    .await;
    let mut cb = b.p.client().await;
    let b_sent = acquire(
        &mut cb,
        key,
        "B",
        max_ttl,
        Duration::from_millis(20),
        cut_at + Duration::from_secs(20),
    )
    .await
    .expect("the majority side never granted the lock");
    if std::env::var_os("RLP_DEBUG").is_some() {
        eprintln!("B's log:\n{}", b.p.stderr());
    }
    let old_last = probes.await.expect("probes");
    let (stopped, promoted) = watcher.await.expect("watcher");
    let std_cut = std::time::Instant::now() - cut_at.elapsed();
    let since = |t: std::time::Instant| t.saturating_duration_since(std_cut).as_millis();
    let r = ShardSplit {
        old_last_grant: old_last.map(|t| t.duration_since(cut_at).as_millis()),
        old_stopped: stopped.map(since),
        promoted: promoted.map(since).expect("the replica was never promoted"),
        b_granted: b_sent.duration_since(cut_at).as_millis(),
        double: b_sent < a_valid,
    };
    line(
        "cluster shard primary cut off from its majority",
        if protect { "on" } else { "off" },
        &format!(
            "old_primary_last_grant_ms={:?} old_primary_clusterdown_ms={:?} replica_promoted_ms={} majority_granted_ms={} double_grant={}",
            r.old_last_grant, r.old_stopped, r.promoted, r.b_granted, r.double
        ),
    );
    Some(r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_primary_cut_off_from_its_cluster_grants_nothing_twice() {
    if let Some(r) = shard_split(true).await {
        assert!(!r.double, "{r:?}");
        // The old primary stopped granting before its replica was promoted: the window the
        // failover quarantine relies on is closed (see docs/design.md).
        if let Some(last) = r.old_last_grant {
            assert!(last < r.promoted, "{r:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quarantine_a_shard_split_grants_twice() {
    if let Some(r) = shard_split(false).await {
        assert!(r.double, "the negative control: two holders: {r:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// 4. A member list reloaded during a partition.

/// {A,B,C,D,E} → {A,B,C}. Proxy 2, cut off from A and B, holds the lock on C, D and E. Proxy
/// 1, cut off from D and E (members being removed), is reloaded with the new list and asks for
/// the same lock: with the transition rule it needs a quorum of the old set too (it reaches A,
/// B and C: A and B say yes, C no: 2 of 5), without it A and B are 2 of 3.
async fn reload_split(protect: bool) -> Option<bool> {
    let net = Net::new()?;
    let ms: Vec<Node> = ["A", "B", "C", "D", "E"]
        .iter()
        .map(|n| node(&net, n, &[]))
        .collect();
    let backends: Vec<String> = ms.iter().map(|n| n.m.addr()).collect();
    let settings = settings(&format!("membership_transition = {protect}"));
    let p1 = proxy(&net, "P1", &backends, &settings);
    let p2 = proxy(&net, "P2", &backends, &settings);
    trusted(&p1.p, 5).await;
    trusted(&p2.p, 5).await;
    net.cut(&p2.peer, &ms[0].peer);
    net.cut(&p2.peer, &ms[1].peer);
    net.cut(&p1.peer, &ms[3].peer);
    net.cut(&p1.peer, &ms[4].peer);
    let mut c2 = p2.p.client().await;
    let granted = acquire(
        &mut c2,
        "lock:reload",
        "p2",
        MAX_TTL_MS,
        Duration::from_millis(50),
        Instant::now() + Duration::from_secs(5),
    )
    .await
    .expect("proxy 2 never granted the lock on C, D, E");
    p1.p.rewrite(&backends[..3]);
    p1.p.signal("HUP");
    let until = Instant::now() + Duration::from_secs(5);
    while !p1.p.stderr().contains("member list changed") {
        assert!(Instant::now() < until, "never reloaded:\n{}", p1.p.stderr());
        sleep(Duration::from_millis(20)).await;
    }
    let mut c1 = p1.p.client().await;
    let valid_until = granted + Duration::from_millis(MAX_TTL_MS) - drift(MAX_TTL_MS);
    let second = acquire(
        &mut c1,
        "lock:reload",
        "p1",
        MAX_TTL_MS,
        Duration::from_millis(20),
        valid_until - Duration::from_millis(100),
    )
    .await;
    let double = second.is_some_and(|t| t < valid_until);
    line(
        "member list reloaded during a partition",
        if protect { "on" } else { "off" },
        &format!("double_grant={double}"),
    );
    Some(double)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_during_a_partition_grants_nothing_twice() {
    if let Some(double) = reload_split(true).await {
        assert!(!double, "two holders across the reload");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_transition_rule_a_reload_during_a_partition_grants_twice() {
    if let Some(double) = reload_split(false).await {
        assert!(double, "the negative control: two holders");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Partitions as a nemesis.

/// Three proxies and three masters under lock load while a nemesis cuts and heals random
/// proxy–master links (open connections stall, as behind a real partition) and now and then
/// restarts a master empty; the fault suite's checkers find no overlapping grant and no lost
/// update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_link_cuts_under_load_grant_nothing_twice() {
    let Some(net) = Net::new() else { return };
    let mut ms: Vec<Node> = ["m1", "m2", "m3"]
        .iter()
        .map(|n| node(&net, n, &[]))
        .collect();
    let backends: Vec<String> = ms.iter().map(|n| n.m.addr()).collect();
    let settings = settings("");
    let ps: Vec<Proxy> = ["P1", "P2", "P3"]
        .iter()
        .map(|n| proxy(&net, n, &backends, &settings))
        .collect();
    for p in &ps {
        trusted(&p.p, 3).await;
    }
    let checker = Checker::new("nemesis", 3);
    let spec = Spec {
        clients: 12,
        ttl_ms: 800,
        hold_ms: (50, 250),
        retry_ms: (5, 20),
    };
    let addrs: Vec<String> = ps.iter().map(|p| p.p.addr.clone()).collect();
    let load = Load::start("nemesis", Arc::clone(&checker), Targets::new(&addrs), spec);
    let mut cut: Vec<(usize, usize)> = Vec::new();
    let (mut cuts, mut heals, mut restarts) = (0, 0, 0);
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        sleep(Duration::from_millis(rand::random_range(150..=450))).await;
        // At least one restart per run, past half-time.
        let restart_due =
            restarts == 0 && until.duration_since(Instant::now()) < Duration::from_secs(4);
        match if restart_due {
            99
        } else {
            rand::random_range(0..100)
        } {
            0..55 => {
                let link = (rand::random_range(0..3), rand::random_range(0..3));
                if !cut.contains(&link) {
                    net.cut(&ps[link.0].peer, &ms[link.1].peer);
                    cut.push(link);
                    cuts += 1;
                }
            }
            55..90 if !cut.is_empty() => {
                let (p, m) = cut.swap_remove(rand::random_range(0..cut.len()));
                net.heal(&ps[p].peer, &ms[m].peer);
                heals += 1;
            }
            90.. => {
                let m = rand::random_range(0..3);
                tokio::task::block_in_place(|| ms[m].m.restart());
                restarts += 1;
            }
            _ => {}
        }
    }
    net.heal_all();
    sleep(Duration::from_millis(1500)).await;
    load.stop().await;
    let v = report(
        "partitions: random proxy-master link cuts and restarts",
        "on",
        cuts + heals + restarts,
        &checker,
    );
    line(
        "nemesis",
        "on",
        &format!(
            "cuts={cuts} heals={heals} restarts={restarts} grants={} overlaps={} lost_updates={}",
            v.grants, v.overlaps, v.lost_updates
        ),
    );
    assert_eq!(v.overlaps, 0, "double grants: {v:?}");
    assert_eq!(v.lost_updates, 0, "lost updates: {v:?}");
    assert!(v.grants >= 10, "too few grants to judge: {v:?}");
}
