//! Redis Sentinel set-ups for the tests: real `redis-sentinel` processes ([`Sentinel`]) and the
//! [`Rig`] of three Sentinel members (each a primary and a replica, the replica replicating
//! through a fault proxy so a test can make it lag; member 2's primary behind a fault proxy of
//! its own so a test can cut it off) watched by the same three Sentinels, plus the proxy
//! settings the Sentinel tests share; and the [`Split`] that models a partition's two views of
//! one master name without cutting a link.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::fault::FaultProxy;
use super::partition::{User, give};
use super::*;

/// The proxies' `max_ttl_ms` in [`sentinel_config`]: the quarantine window is 2000 ms + 22 ms
/// of drift.
pub const MAX_TTL_MS: u64 = 2000;

/// A real `redis-sentinel` on a free port, killed on drop.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    _dir: Scratch,
}

/// One monitored master: name, address, `down-after-milliseconds`.
pub struct Watch<'a> {
    pub name: &'a str,
    pub addr: String,
    pub down_after_ms: u64,
}

impl Sentinel {
    pub fn start(watches: &[Watch<'_>]) -> Sentinel {
        Sentinel::start_with(watches, "")
    }

    /// A Sentinel with `extra` configuration lines; when they hold `tls-cert-file` it listens
    /// for TLS only.
    pub fn start_with(watches: &[Watch<'_>], extra: &str) -> Sentinel {
        Sentinel::launch(watches, extra, None)
    }

    /// A Sentinel running as `user` (see [`super::partition`]), with `extra` configuration
    /// lines.
    pub fn start_as(user: User, watches: &[Watch<'_>], extra: &str) -> Sentinel {
        Sentinel::launch(watches, extra, Some(user))
    }

    fn launch(watches: &[Watch<'_>], extra: &str, user: Option<User>) -> Sentinel {
        for _ in 0..10 {
            let port = free_port();
            let dir = Scratch::new("sentinel");
            let listen = if extra.contains("tls-cert-file") {
                format!("port 0\ntls-port {port}")
            } else {
                format!("port {port}")
            };
            let mut conf = format!(
                "{listen}\nbind 127.0.0.1\ndaemonize no\ndir {}\nlogfile {}\n{extra}\n",
                dir.path(""),
                dir.path("sentinel.log")
            );
            for w in watches {
                let (host, p) = w.addr.rsplit_once(':').expect("host:port");
                // A long failover-timeout: Sentinel leaves a replica that replicates through
                // the fault proxy (another address than the primary's) alone for that long.
                conf.push_str(&format!(
                    "sentinel monitor {n} {host} {p} 2\n\
                     sentinel down-after-milliseconds {n} {d}\n\
                     sentinel failover-timeout {n} 120000\n\
                     sentinel parallel-syncs {n} 1\n",
                    n = w.name,
                    d = w.down_after_ms
                ));
            }
            let path = dir.path("sentinel.conf");
            std::fs::write(&path, conf).expect("sentinel.conf");
            let mut cmd = Command::new("redis-sentinel");
            if let Some(u) = user {
                // It rewrites its configuration file, and writes its log, in its folder.
                give(&dir.path(""), u);
                use std::os::unix::process::CommandExt;
                cmd.uid(u.uid).gid(u.gid);
            }
            let mut child = cmd
                .arg(&path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-sentinel must be installed (scripts/deps.sh test installs it)");
            for _ in 0..200 {
                if super::listens(child.id(), port) {
                    return Sentinel {
                        port,
                        child,
                        _dir: dir,
                    };
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start redis-sentinel");
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub async fn cmd(&self, args: &[&str]) -> Reply {
        Client::connect(&self.addr()).await.cmd(args).await
    }

    /// `SENTINEL MASTER name` as field → value.
    pub async fn master(&self, name: &str) -> std::collections::HashMap<String, String> {
        let Reply::Array(items) = self.cmd(&["SENTINEL", "MASTER", name]).await else {
            return Default::default();
        };
        let text = |r: &Reply| match r {
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        items
            .chunks(2)
            .filter(|kv| kv.len() == 2)
            .map(|kv| (text(&kv[0]), text(&kv[1])))
            .collect()
    }

    /// The primary this Sentinel names for `name`.
    pub async fn primary(&self, name: &str) -> String {
        match self
            .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])
            .await
        {
            Reply::Array(hp) => match hp.as_slice() {
                [Reply::Bulk(h), Reply::Bulk(p)] => format!(
                    "{}:{}",
                    String::from_utf8_lossy(h),
                    String::from_utf8_lossy(p)
                ),
                _ => String::new(),
            },
            _ => String::new(),
        }
    }
}

impl Sentinel {
    /// SIGSTOP: the Sentinel accepts connections (the kernel does) but answers nothing.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status();
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three members (primary + replica, the replica replicating through a fault proxy), member 2's
/// primary behind a fault proxy that the Sentinels and the proxies use, three Sentinels.
pub struct Rig {
    pub primaries: Vec<Master>,
    pub replicas: Vec<Master>,
    /// Between each replica and its primary.
    pub repl: Vec<FaultProxy>,
    /// In front of member 2's primary.
    pub cut: FaultProxy,
    pub sentinels: Vec<Sentinel>,
    /// The data nodes' working folders.
    pub _dirs: Vec<Scratch>,
}

/// A `redis-server` working in a scratch folder of its own (kept in `dirs`): a full
/// resynchronisation writes an RDB file there, not into the tests' working folder, where a
/// `redis-server` started later would load it.
pub fn data_node(dirs: &mut Vec<Scratch>, extra: &[&str]) -> Master {
    let dir = Scratch::new("data");
    let path = dir.path("");
    let mut args = vec!["--dir", &path];
    args.extend(extra);
    let m = Master::start_with(&args);
    dirs.push(dir);
    m
}

pub const NAMES: [&str; 3] = ["m0", "m1", "m2"];

impl Rig {
    pub async fn start() -> Rig {
        Rig::start_with(&[]).await
    }

    /// [`Rig::start`] with `extra` `redis-server` arguments for the three primaries.
    pub async fn start_with(extra: &[&str]) -> Rig {
        let mut dirs = Vec::new();
        let primaries: Vec<Master> = (0..3)
            .map(|_| tokio::task::block_in_place(|| data_node(&mut dirs, extra)))
            .collect();
        let mut repl = Vec::new();
        let mut replicas = Vec::new();
        for p in &primaries {
            let f = FaultProxy::start(p.addr()).await;
            let port = f.addr.rsplit_once(':').expect("port").1.to_string();
            replicas.push(tokio::task::block_in_place(|| {
                data_node(&mut dirs, &["--replicaof", "127.0.0.1", &port])
            }));
            repl.push(f);
        }
        let cut = FaultProxy::start(primaries[2].addr()).await;
        let watches = [
            Watch {
                name: NAMES[0],
                addr: primaries[0].addr(),
                down_after_ms: 1000,
            },
            Watch {
                name: NAMES[1],
                addr: primaries[1].addr(),
                down_after_ms: 1000,
            },
            // Cut off on purpose for a few seconds: not a failure to fail over.
            Watch {
                name: NAMES[2],
                addr: cut.addr.clone(),
                down_after_ms: 30_000,
            },
        ];
        let sentinels = tokio::task::block_in_place(|| {
            (0..3)
                .map(|_| Sentinel::start(&watches))
                .collect::<Vec<_>>()
        });
        let rig = Rig {
            primaries,
            replicas,
            repl,
            cut,
            sentinels,
            _dirs: dirs,
        };
        rig.wait_ready().await;
        rig
    }

    /// Until every Sentinel knows the other two and each member's replica, and every replica
    /// is in sync.
    pub async fn wait_ready(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let mut ready = true;
            for s in &self.sentinels {
                for n in NAMES {
                    let m = s.master(n).await;
                    ready &= m.get("num-other-sentinels").map(String::as_str) == Some("2")
                        && m.get("num-slaves").map(String::as_str) == Some("1");
                }
            }
            for r in &self.replicas {
                let info = r.cli(("", ""), &["INFO", "replication"]);
                ready &= info.contains("master_link_status:up");
            }
            if ready {
                return;
            }
            assert!(Instant::now() < until, "Sentinels not ready after 30 s");
            sleep(Duration::from_millis(200)).await;
        }
    }

    /// The members as the proxies' `backends`.
    pub fn backends(&self) -> Vec<String> {
        let sentinels: Vec<String> = self.sentinels.iter().map(Sentinel::addr).collect();
        NAMES
            .iter()
            .map(|n| format!("redis-sentinel://{}#{n}", sentinels.join(",")))
            .collect()
    }

    /// `SENTINEL FAILOVER` of member `i`, asked again for a while when refused (a Sentinel may
    /// not count the replica as promotable yet: `NOGOODSLAVE` until it has read its `INFO`).
    pub async fn fail_over(&self, i: usize) {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let reply = self.sentinels[0]
                .cmd(&["SENTINEL", "FAILOVER", NAMES[i]])
                .await;
            if reply == Reply::ok() {
                return;
            }
            assert!(Instant::now() < until, "SENTINEL FAILOVER: {reply:?}");
            sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until a Sentinel names `want` as member `i`'s primary (the one that led the
    /// failover knows first, and announces it with `+switch-master`).
    pub async fn wait_primary(&self, i: usize, want: &str, within: Duration) {
        let until = Instant::now() + within;
        loop {
            for s in &self.sentinels {
                if s.primary(NAMES[i]).await == want {
                    return;
                }
            }
            assert!(
                Instant::now() < until,
                "member {i}: the Sentinels do not name {want} after {within:?}"
            );
            sleep(Duration::from_millis(20)).await;
        }
    }
}

pub fn sentinel_config(backends: &[String], quarantine: bool) -> Config {
    init_logs();
    let mut c = config_for(backends);
    c.max_ttl_ms = MAX_TTL_MS;
    c.node_timeout_ms = 100;
    c.stall_timeout_ms = 500;
    c.connect_timeout_ms = 300;
    c.probe_interval_ms = 100;
    c.quarantine = quarantine;
    c.clock_watch = true;
    c
}

/// Field `name` of proxy `p`'s `INFO` line for master `i`.
pub async fn master_field(p: &str, i: usize, name: &str) -> String {
    let info = redlock_info(p).await;
    field(&info, &format!("master{i}"))
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or("")
        .to_string()
}

/// Two views of one master name, as a network partition leaves them, modelled without cutting
/// any link: the lone Sentinel monitors the old primary `p1` as `locks`, while the other two
/// monitor `p2` (the replica the majority side promoted) under the same name; two standalone
/// masters complete N = 3. A proxy "on the minority side" lists all three Sentinels but reaches
/// only the lone one (the other two are dead ports in its configuration); "on the majority side"
/// the lone one is the dead port.
pub struct Split {
    pub p1: Master,
    pub p2: Master,
    pub m1: Master,
    pub m2: Master,
    /// Names `p1`.
    pub lone: Sentinel,
    /// Name `p2`.
    pub pair: [Sentinel; 2],
}

/// The master name the [`Split`]'s Sentinels monitor.
pub const SPLIT_NAME: &str = "locks";

impl Split {
    pub fn start() -> Split {
        let [p1, p2, m1, m2] = [(); 4].map(|_| Master::start());
        // Nothing fails over here. With the proxies' max TTL of 2000 ms a confirmation lasts
        // 1958 ms (min(down-after, max TTL) × 0.98 − 2 ms): a margin for a loaded machine.
        let watch = |m: &Master| Watch {
            name: SPLIT_NAME,
            addr: m.addr(),
            down_after_ms: 5000,
        };
        let lone = Sentinel::start(&[watch(&p1)]);
        let pair = [
            Sentinel::start(&[watch(&p2)]),
            Sentinel::start(&[watch(&p2)]),
        ];
        Split {
            p1,
            p2,
            m1,
            m2,
            lone,
            pair,
        }
    }

    /// A Sentinel member listing `sentinels`, in that order.
    pub fn member(sentinels: &[String]) -> String {
        format!("redis-sentinel://{}#{SPLIT_NAME}", sentinels.join(","))
    }

    /// The member as a proxy that reaches every Sentinel lists it, the lone one first (so the
    /// first answer names `p1`).
    pub fn member_reaching_all(&self) -> String {
        Split::member(&[self.lone.addr(), self.pair[0].addr(), self.pair[1].addr()])
    }
}

/// An address nothing listens on (a node on the far side of a partition).
pub fn dead_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}
