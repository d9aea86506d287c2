//! Real Redis Clusters: six `redis-server --cluster-enabled yes` nodes on free ports, joined
//! with `redis-cli --cluster create … --cluster-replicas 1` (three primaries, a replica each),
//! and the faults the cluster tests play: a primary killed and its replica promoted, a slot
//! range resharded.

use std::time::Duration;

use super::partition::{User, give};
use super::{Master, free_port, redis_cli};

/// A running cluster; its nodes are killed on drop.
pub struct RedisCluster {
    /// Every node, primaries first as created (`nodes[0..3]` own slots 0-5460, 5461-10922,
    /// 10923-16383 at the start).
    pub nodes: Vec<Master>,
    /// Each node's cluster bus port.
    pub buses: Vec<u16>,
    dirs: Vec<std::path::PathBuf>,
}

/// The cluster's node timeout: a primary that stops answering is failed over after about this.
pub const NODE_TIMEOUT_MS: u64 = 1000;

impl RedisCluster {
    /// Starts six nodes and joins them into a cluster with three primaries and a replica each;
    /// returns once every node reports `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        RedisCluster::start_as(&[])
    }

    /// [`RedisCluster::start`] with node `i` running as `users[i]` (see [`super::partition`]),
    /// when given.
    pub fn start_as(users: &[User]) -> RedisCluster {
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        let mut buses = Vec::new();
        for i in 0..6 {
            let dir = std::env::temp_dir().join(format!(
                "rlp-cluster-{}-{}",
                std::process::id(),
                rand::random::<u64>()
            ));
            std::fs::create_dir_all(&dir).expect("scratch dir");
            let d = dir.to_string_lossy().into_owned();
            let timeout = NODE_TIMEOUT_MS.to_string();
            // The bus port chosen as the client port is: Redis's default, the client port plus
            // 10,000, lands in the kernel's ephemeral range, where an outgoing connection may
            // hold it and the node then exits.
            let bus_port = free_port();
            let bus = bus_port.to_string();
            buses.push(bus_port);
            let user = users.get(i).copied();
            if let Some(u) = user {
                give(&d, u);
            }
            let args = [
                "--cluster-port",
                &bus,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &timeout,
                // A replica syncs at once (not after the default 5 s wait for others), and is
                // promoted however long its link was down: the tests decide what it lacks.
                "--repl-diskless-sync-delay",
                "0",
                "--cluster-replica-validity-factor",
                "0",
                "--dir",
                &d,
            ];
            nodes.push(match user {
                Some(u) => Master::start_as(u, &args),
                None => Master::start_with(&args),
            });
            dirs.push(dir);
        }
        let addrs: Vec<String> = nodes.iter().map(Master::addr).collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = redis_cli(nodes[0].port, &args);
        assert!(out.contains("[OK] All 16384 slots covered"), "{out}");
        let c = RedisCluster { nodes, buses, dirs };
        c.wait_ok(Duration::from_secs(30));
        c
    }

    /// `redis-cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(Master::addr).collect();
        format!("redis-cluster://{}", addrs.join(","))
    }

    /// Waits until every live node says `cluster_state:ok` and agrees on the slot owners.
    pub fn wait_ok(&self, within: Duration) {
        let until = std::time::Instant::now() + within;
        loop {
            let live = self.live();
            let ok = live.iter().all(|&i| {
                redis_cli(self.nodes[i].port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
            });
            let views: Vec<Vec<(u16, u16, String)>> =
                live.iter().map(|&i| self.slots_seen_by(i)).collect();
            let synced = live.iter().all(|&i| {
                let r = redis_cli(self.nodes[i].port, &["INFO", "replication"]);
                r.contains("role:master") || r.contains("master_link_status:up")
            });
            if ok && synced && views.windows(2).all(|w| w[0] == w[1]) {
                return;
            }
            assert!(
                std::time::Instant::now() < until,
                "cluster not ok after {within:?}: {}",
                redis_cli(self.nodes[live[0]].port, &["CLUSTER", "NODES"])
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The port of a node that is up.
    pub fn live_port(&self) -> u16 {
        self.nodes[self.live()[0]].port
    }

    fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| std::net::TcpStream::connect(self.nodes[i].addr()).is_ok())
            .collect()
    }

    /// The slot ranges and their primary's port, as node `i` sees them.
    fn slots_seen_by(&self, i: usize) -> Vec<(u16, u16, String)> {
        let text = redis_cli(self.nodes[i].port, &["CLUSTER", "NODES"]);
        let mut out = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 8 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let port = f[1].split('@').next().unwrap_or("").to_string();
            for r in &f[8..] {
                if r.starts_with('[') {
                    continue;
                }
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                    out.push((a, b, port.clone()));
                }
            }
        }
        out.sort();
        out
    }

    /// The node (index) that is the primary of `slot` now.
    pub fn primary_of(&self, slot: u16) -> usize {
        let live = self.live();
        let view = self.slots_seen_by(live[0]);
        let (_, _, addr) = view
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .expect("slot covered");
        self.index_of(addr)
    }

    fn index_of(&self, addr: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| addr.ends_with(&format!(":{}", n.port)))
            .unwrap_or_else(|| panic!("no node {addr}"))
    }

    /// The node id of node `i`.
    pub fn id(&self, i: usize) -> String {
        redis_cli(self.nodes[i].port, &["CLUSTER", "MYID"])
    }

    /// The replica (index) of primary `p`.
    pub fn replica_of(&self, p: usize) -> usize {
        let id = self.id(p);
        let text = redis_cli(self.nodes[p].port, &["CLUSTER", "REPLICAS", &id]);
        let line = text
            .lines()
            .next()
            .unwrap_or_else(|| panic!("no replica of {p}"));
        let addr = line
            .split(' ')
            .nth(1)
            .unwrap_or("")
            .split('@')
            .next()
            .unwrap_or("");
        self.index_of(addr)
    }

    /// Kills primary `p` with SIGKILL and waits until its replica is the primary of its slots.
    /// Returns the replica's index.
    pub fn fail_over(&mut self, p: usize) -> usize {
        let r = self.replica_of(p);
        self.nodes[p].kill();
        self.wait_promoted(r);
        r
    }

    /// Waits until node `r` is a primary with slots and the cluster is ok again.
    pub fn wait_promoted(&self, r: usize) {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let role = redis_cli(self.nodes[r].port, &["ROLE"]);
            if role.starts_with("master") {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "node {r} not promoted: {role}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_ok(Duration::from_secs(30));
    }

    /// Moves `slots` slots from primary `from` to primary `to` with `redis-cli --cluster
    /// reshard` (keys move with `MIGRATE`, their TTLs with them).
    pub fn reshard(&self, from: usize, to: usize, slots: usize) -> String {
        let (from_id, to_id) = (self.id(from), self.id(to));
        let n = slots.to_string();
        let addr = self.nodes[from].addr();
        let out = redis_cli(
            self.nodes[from].port,
            &[
                "--cluster",
                "reshard",
                &addr,
                "--cluster-from",
                &from_id,
                "--cluster-to",
                &to_id,
                "--cluster-slots",
                &n,
                "--cluster-yes",
                "--cluster-pipeline",
                "10",
            ],
        );
        self.wait_ok(Duration::from_secs(30));
        out
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
