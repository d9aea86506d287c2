//! Network partitions on real loopback TCP links, cut and healed with iptables.
//!
//! Every process under test (each `redis-server`, `redis-sentinel` and proxy binary) runs as a
//! Unix user of its own (`rlp-test-0`, `rlp-test-1`…, made here when missing), so the kernel
//! knows which process opened which connection. One iptables chain per [`Net`]
//! (`RLP-<pid>-<n>`, jumped to from `OUTPUT`) holds two kinds of rules:
//!
//! - **marks**: the first packet (conntrack state `NEW`) of every TCP connection a test user
//!   opens on `lo` marks the connection with that user's uid (`CONNMARK`). The mark lives on the
//!   conntrack entry, so the packets of both directions carry it;
//! - **cuts**: a link between processes A and B is cut by dropping every packet of the
//!   connections marked A whose original destination port is one of B's listening ports, and
//!   the same with A and B swapped. On loopback both directions of a connection pass `OUTPUT`,
//!   so one rule drops both: open connections stall (nothing is reset, as in a real
//!   partition, where packets are lost), and new ones never complete their handshake.
//!
//! The test process itself runs as root, which is never marked: the test reaches every process
//! whatever is cut, as an observer outside the network. Dropping the [`Net`] removes its chain
//! (also on a panic, by unwinding); a chain left by a run that was killed is removed by the next
//! run (its pid is gone).
//!
//! The users are the machine's, so one test process at a time uses them: a second one waits
//! for the first to exit (a lock file in the temp folder).
//!
//! Needs root and iptables (`scripts/deps.sh test` installs Debian's `iptables`, which drives
//! nftables here). Without them [`Net::new`] answers `None` with the reason printed, and in CI
//! (`CI` set) panics: the partition tests must never pass by skipping there.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The Unix user a process under test runs as: its own, so that its connections can be told
/// apart from every other process's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

/// A process on the test network: the user it runs as, and the ports it listens on (a
/// cluster node's client and bus ports, say).
#[derive(Clone, Debug)]
pub struct Peer {
    pub name: String,
    pub user: User,
    pub ports: Vec<u16>,
}

impl Peer {
    /// A process named `name` (in messages) running as `user`, listening on `ports`.
    pub fn new(name: &str, user: User, ports: &[u16]) -> Peer {
        Peer {
            name: name.to_string(),
            user,
            ports: ports.to_vec(),
        }
    }
}

/// One test's network: its iptables chain, and the links cut in it.
pub struct Net {
    chain: String,
    /// The DROP rules in force, each as its iptables arguments after the chain name.
    cuts: Mutex<BTreeSet<Vec<String>>>,
    /// The numbers of the users it took, given back when it is dropped.
    users: Mutex<Vec<usize>>,
}

/// How many users the tests of one binary may hold at once: tests running at the same time
/// never share a user; a test's users go back to the pool when its [`Net`] is dropped, after
/// its processes (declared after it, so dropped before it).
const USERS: usize = 64;

/// Users given back, to be taken again before new ones are made.
static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn iptables(args: &[&str]) -> Result<(), String> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| format!("iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(args: &[&str]) {
    if let Err(e) = iptables(args) {
        panic!("{e}");
    }
}

/// Whether process `pid` still runs.
fn alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes the chains earlier runs of the tests left behind (their process is gone).
fn remove_stale_chains() {
    let Ok(out) = Command::new("iptables").args(["-w", "-S"]).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let Some(chain) = line.strip_prefix("-N ") else {
            continue;
        };
        let Some(rest) = chain.strip_prefix("RLP-") else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty() && !alive(pid) {
            remove_chain(chain);
        }
    }
}

fn remove_chain(chain: &str) {
    while iptables(&["-D", "OUTPUT", "-j", chain]).is_ok() {}
    let _ = iptables(&["-F", chain]);
    let _ = iptables(&["-X", chain]);
}

/// Why this machine cannot cut links, if it cannot.
fn unavailable() -> Option<String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if uid != "0" {
        return Some(format!(
            "the partition tests need root (iptables, and processes run as other users); uid is {uid}"
        ));
    }
    if let Err(e) = iptables(&["-S", "OUTPUT"]) {
        return Some(format!(
            "{e} (scripts/deps.sh test installs Debian's iptables)"
        ));
    }
    None
}

impl Net {
    /// A new chain for one test, or `None` (reason printed) when this machine cannot cut
    /// links; in CI (`CI` set), a panic instead.
    pub fn new() -> Option<Net> {
        if let Some(why) = unavailable() {
            if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") {
                panic!("partition tests cannot run in CI: {why}");
            }
            eprintln!("SKIPPED: {why}");
            return None;
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        // The test users are the machine's, not this process's: two test processes at once
        // would mark each other's connections. So one process at a time holds this lock, until
        // it exits; the first to take it removes what killed runs left.
        static MACHINE: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
        MACHINE.get_or_init(|| {
            let path = std::env::temp_dir().join("redlock-tests-partitions.lock");
            let file =
                std::fs::File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            file.lock()
                .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
            remove_stale_chains();
            file
        });
        let chain = format!(
            "RLP-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        remove_chain(&chain);
        must(&["-N", &chain]);
        must(&["-I", "OUTPUT", "-j", &chain]);
        Some(Net {
            chain,
            cuts: Mutex::new(BTreeSet::new()),
            users: Mutex::new(Vec::new()),
        })
    }

    /// A Unix user no other running process of this test binary runs as, made when missing,
    /// whose connections this network marks from now on.
    pub fn user(&self) -> User {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = FREE
            .lock()
            .expect("free users")
            .pop()
            .unwrap_or_else(|| NEXT.fetch_add(1, Ordering::Relaxed));
        assert!(n < USERS, "more than {USERS} test users at once");
        self.users.lock().expect("users").push(n);
        let name = format!("rlp-test-{n}");
        let user = lookup(&name).unwrap_or_else(|| {
            // Two binaries may make the same user at once; whoever loses finds it made.
            let _ = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                ])
                .arg(&name)
                .output();
            lookup(&name).unwrap_or_else(|| panic!("useradd {name} failed"))
        });
        let uid = user.uid.to_string();
        must(&[
            "-I",
            &self.chain,
            "-o",
            "lo",
            "-p",
            "tcp",
            "-m",
            "owner",
            "--uid-owner",
            &uid,
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-j",
            "CONNMARK",
            "--set-mark",
            &uid,
        ]);
        user
    }

    /// The DROP rules for the connections `from` opens to `to`'s ports.
    fn rules(from: &Peer, to: &Peer) -> Vec<Vec<String>> {
        to.ports
            .iter()
            .map(|port| {
                [
                    "-o",
                    "lo",
                    "-p",
                    "tcp",
                    "-m",
                    "connmark",
                    "--mark",
                    &from.user.uid.to_string(),
                    "-m",
                    "conntrack",
                    "--ctorigdstport",
                    &port.to_string(),
                    "-j",
                    "DROP",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect()
            })
            .collect()
    }

    /// Cuts the link between `a` and `b`, both ways: every connection either opened to the
    /// other stalls from now on, open or new.
    pub fn cut(&self, a: &Peer, b: &Peer) {
        assert_ne!(a.user, b.user, "{} and {} are one user", a.name, b.name);
        let mut cuts = self.cuts.lock().expect("cuts");
        for rule in Self::rules(a, b).into_iter().chain(Self::rules(b, a)) {
            if cuts.insert(rule.clone()) {
                let mut args = vec!["-A", self.chain.as_str()];
                args.extend(rule.iter().map(String::as_str));
                must(&args);
            }
        }
    }

    /// Cuts every link between a process of `side` and one of `other`.
    pub fn split(&self, side: &[&Peer], other: &[&Peer]) {
        for a in side {
            for b in other {
                self.cut(a, b);
            }
        }
    }

    /// Heals the link between `a` and `b` (a stalled connection resumes: TCP retransmits).
    pub fn heal(&self, a: &Peer, b: &Peer) {
        let mut cuts = self.cuts.lock().expect("cuts");
        for rule in Self::rules(a, b).into_iter().chain(Self::rules(b, a)) {
            if cuts.remove(&rule) {
                let mut args = vec!["-D", self.chain.as_str()];
                args.extend(rule.iter().map(String::as_str));
                must(&args);
            }
        }
    }

    /// Heals every cut link.
    pub fn heal_all(&self) {
        let mut cuts = self.cuts.lock().expect("cuts");
        for rule in std::mem::take(&mut *cuts) {
            let mut args = vec!["-D", self.chain.as_str()];
            args.extend(rule.iter().map(String::as_str));
            must(&args);
        }
    }

    /// How many DROP rules are in force.
    pub fn cut_rules(&self) -> usize {
        self.cuts.lock().expect("cuts").len()
    }

    /// The chain's name.
    pub fn chain(&self) -> &str {
        &self.chain
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        remove_chain(&self.chain);
        let mine = std::mem::take(&mut *self.users.lock().unwrap_or_else(|e| e.into_inner()));
        FREE.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
    }
}

/// The uid and primary gid of user `name`, from `/etc/passwd`.
fn lookup(name: &str) -> Option<User> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() > 3 && f[0] == name {
            Some(User {
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
            })
        } else {
            None
        }
    })
}

/// Gives folder `path` (and what is in it) to `user`, so a process running as that user can
/// write there (a Sentinel rewrites its configuration file; a replica writes the RDB it
/// receives; a cluster node its `nodes.conf`).
pub fn give(path: &str, user: User) {
    let ok = Command::new("chown")
        .args(["-R", &format!("{}:{}", user.uid, user.gid), path])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chown {path}");
}
