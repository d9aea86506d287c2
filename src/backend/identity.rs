//! One Redis server, one vote: members that turn out to reach the same server.
//!
//! The configuration refuses a master listed twice when the two are written alike, but the same
//! server under two names (`127.0.0.1:6379` and `localhost:6379`, a host name and its address, a
//! Sentinel member whose primary is also listed on its own, two cluster members that are one
//! cluster) would still vote twice, and one real master could then make a quorum of three. So
//! every connection, on every (re)connect, tells the [`Identities`] the server's `run_id` (from
//! `INFO server`, which the greeting reads anyway) on behalf of the member it votes for (a
//! cluster member's shard connections on behalf of the cluster member).
//!
//! Of the members connected to one server, the one made first (for one configuration: listed
//! first) holds it; every other is a *duplicate*: its votes never count and it is sent nothing
//! (it answers as a member that is down would), `INFO` shows it as `status=duplicate` with
//! `quarantine_reason=duplicate of member <name>`, `/metrics` as `redlock_master_duplicate`, and
//! an ERROR is logged. A member is a duplicate while any server it reaches is held by another
//! (a cluster member that shares one node with another member is a duplicate as a whole), so
//! two cluster members that are one cluster never end up each holding some of its nodes.
//!
//! A claim is made before the connection is marked up and given back after it is marked
//! down, and a holder that a claim displaces is marked a duplicate under the same lock,
//! before the new connection counts. A vote counts a member's reply only if the member was
//! trusted when the request was sent and still is when the reply comes, so two members
//! reaching one server are never both counted, not even across a change of holder. When the
//! holder's connection ends, the server passes to the next member still connected to it.
//!
//! None of this runs per request: the request path reads one bit, in the atomic it already
//! reads to tell whether the member is connected ([`super::health`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::{error, info};

use super::health::MasterInfo;

/// Which member holds each server (`run_id`), for every member of one proxy.
#[derive(Debug, Default)]
pub struct Identities {
    /// Each `run_id`'s claims, in the order their members were made: the holder first.
    claims: Mutex<HashMap<String, Vec<Claim>>>,
}

/// One member's claim on a server: how many of its connections reach it.
#[derive(Debug)]
struct Claim {
    member: Arc<MasterInfo>,
    connections: usize,
}

/// What a connection claims with: the proxy's [`Identities`], and the member it votes for
/// (`None`: the connection's own member).
#[derive(Debug, Clone)]
pub struct Claimant {
    identities: Arc<Identities>,
    member: Option<Arc<MasterInfo>>,
}

impl Claimant {
    /// Claims in `identities` for the connection's own member.
    pub fn new(identities: Arc<Identities>) -> Claimant {
        Claimant {
            identities,
            member: None,
        }
    }

    /// The same, on behalf of `member` (a cluster member, for its shards' connections).
    pub(super) fn for_member(&self, member: Arc<MasterInfo>) -> Claimant {
        Claimant {
            identities: self.identities.clone(),
            member: Some(member),
        }
    }

    /// The member a connection of `own` claims for.
    pub(super) fn member(&self, own: &Arc<MasterInfo>) -> Arc<MasterInfo> {
        self.member.clone().unwrap_or_else(|| own.clone())
    }

    /// The registry claimed in.
    pub(super) fn identities(&self) -> &Identities {
        &self.identities
    }
}

impl Identities {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Claim>>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection of `member` reaches the server `run_id`: call before the connection is
    /// marked up. The member is a duplicate when a member made before it holds the server; a
    /// holder made after it is one from now on.
    pub(super) fn claim(&self, run_id: &str, member: &Arc<MasterInfo>) {
        let mut claims = self.lock();
        let list = claims.entry(run_id.to_string()).or_default();
        match list.iter_mut().find(|c| Arc::ptr_eq(&c.member, member)) {
            Some(c) => c.connections += 1,
            None => {
                let at = list.partition_point(|c| c.member.made() < member.made());
                list.insert(
                    at,
                    Claim {
                        member: member.clone(),
                        connections: 1,
                    },
                );
            }
        }
        let all: Vec<Arc<MasterInfo>> = list.iter().map(|c| c.member.clone()).collect();
        for m in &all {
            judge(&claims, m, run_id);
        }
    }

    /// A connection of `member` to `run_id` ended: call after it is marked down. The server
    /// passes to the next member connected to it, if any.
    pub(super) fn release(&self, run_id: &str, member: &Arc<MasterInfo>) {
        let mut claims = self.lock();
        let Some(list) = claims.get_mut(run_id) else {
            return;
        };
        if let Some(i) = list.iter().position(|c| Arc::ptr_eq(&c.member, member)) {
            list[i].connections -= 1;
            if list[i].connections == 0 {
                list.remove(i);
            }
        }
        let mut all: Vec<Arc<MasterInfo>> = list.iter().map(|c| c.member.clone()).collect();
        if list.is_empty() {
            claims.remove(run_id);
        }
        all.push(member.clone());
        for m in &all {
            judge(&claims, m, run_id);
        }
    }
}

/// Sets whether `member` is a duplicate: it is while another member holds any server it
/// reaches. Logs a change (`run_id`: the server whose claims just changed, for the log).
fn judge(claims: &HashMap<String, Vec<Claim>>, member: &Arc<MasterInfo>, run_id: &str) {
    // The server named in the change first, so the log names it when it is the reason.
    let held_by_other = |id: &str, list: &Vec<Claim>| {
        let holder = &list.first()?.member;
        let mine = list.iter().any(|c| Arc::ptr_eq(&c.member, member));
        (mine && !Arc::ptr_eq(holder, member)).then(|| (id.to_string(), holder.addr.clone()))
    };
    let of = claims
        .get_key_value(run_id)
        .and_then(|(id, list)| held_by_other(id, list))
        .or_else(|| claims.iter().find_map(|(id, list)| held_by_other(id, list)));
    let was = member.is_duplicate().then(|| member.duplicate_of());
    match of {
        // Already a duplicate of that member: nothing to say.
        Some((_, holder)) if was.as_deref() == Some(holder.as_str()) => {}
        Some((id, holder)) => {
            member.set_duplicate(Some(&holder));
            error!(
                member = %member.addr,
                duplicate_of = %holder,
                run_id = %id,
                status = "duplicate",
                "members '{}' and '{holder}' reach the same Redis server (run_id {id}): it \
                 votes once, through '{holder}'; '{}' is sent nothing and its votes do not \
                 count while it reaches that server (list each master once)",
                member.addr,
                member.addr
            );
        }
        None if was.is_some() => {
            member.set_duplicate(None);
            // A duplicate whose own connection ended says nothing: it is down.
            if member.is_connected() {
                info!(
                    member = %member.addr,
                    "member holds the server it reaches now (no other member listed before it \
                     reaches it): its votes count"
                );
            }
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `m`'s connection to server `from` drops, and it connects to server `to`.
    fn reconnect(ids: &Identities, m: &Arc<MasterInfo>, from: &str, to: &str) {
        m.set_connected(false);
        ids.release(from, m);
        ids.claim(to, m);
        m.set_connected(true);
    }

    fn member(name: &str) -> Arc<MasterInfo> {
        let m = Arc::new(MasterInfo::new(name.into()));
        m.set_connected(true);
        m
    }

    #[test]
    fn the_member_listed_first_holds_a_server_and_the_next_takes_over_while_it_is_gone() {
        let ids = Identities::default();
        let (a, b, c) = (member("a:1"), member("b:1"), member("c:1"));
        ids.claim("r1", &a);
        ids.claim("r2", &c);
        assert!(a.is_trusted() && c.is_trusted());
        ids.claim("r1", &b);
        assert!(b.is_duplicate());
        assert!(!b.is_trusted(), "a duplicate never votes");
        assert!(!b.accepts(), "and is sent nothing");
        assert!(a.is_trusted(), "the holder still votes");
        assert_eq!(b.quarantine_reason(), "duplicate of member a:1");
        assert_eq!(b.status().name(), "duplicate");
        assert!(
            b.describe()
                .contains(",quarantine_reason=duplicate of member a:1,"),
            "{}",
            b.describe()
        );
        // The holder's connection ends (marked down first): the server passes to b.
        a.set_connected(false);
        ids.release("r1", &a);
        assert!(!b.is_duplicate() && b.is_trusted());
        // a comes back: listed first, it holds the server again, and b is the duplicate
        // before a's connection counts.
        ids.claim("r1", &a);
        assert!(b.is_duplicate() && !b.is_trusted());
        a.set_connected(true);
        assert!(a.is_trusted());
        assert_eq!(b.duplicate_of(), "a:1");
        // b reconnects to another server: it counts again.
        reconnect(&ids, &b, "r1", "r3");
        assert!(b.is_trusted());
    }

    #[test]
    fn a_member_that_reconnects_into_another_members_server_becomes_a_duplicate() {
        let ids = Identities::default();
        let (a, b) = (member("a:1"), member("b:1"));
        ids.claim("r1", &a);
        ids.claim("r2", &b);
        assert!(b.is_trusted());
        reconnect(&ids, &b, "r2", "r1");
        assert!(b.is_duplicate() && !b.is_trusted());
        assert!(a.is_trusted());
    }

    #[test]
    fn a_cluster_member_is_a_duplicate_while_any_of_its_servers_is_held() {
        let ids = Identities::default();
        let (single, cluster) = (member("n2:1"), member("redis-cluster://n1:1"));
        ids.claim("shard1", &cluster);
        ids.claim("shard2", &single);
        assert!(cluster.is_trusted());
        ids.claim("shard2", &cluster);
        assert!(
            cluster.is_duplicate(),
            "one of its shards is the other's server"
        );
        assert!(single.is_trusted());
        // Two connections of one member to one server are still one member.
        ids.claim("shard1", &cluster);
        ids.release("shard2", &cluster);
        assert!(!cluster.is_duplicate());
        ids.release("shard1", &cluster);
        assert!(ids.lock().contains_key("shard1"), "one connection remains");
        ids.release("shard1", &cluster);
        assert!(!ids.lock().contains_key("shard1"));
    }

    #[test]
    fn two_members_that_are_one_cluster_do_not_each_keep_part_of_it() {
        let ids = Identities::default();
        let (x, y) = (member("redis-cluster://a:1"), member("redis-cluster://b:1"));
        // Each reaches a different node first.
        ids.claim("node1", &x);
        ids.claim("node2", &y);
        assert!(x.is_trusted() && y.is_trusted());
        ids.claim("node2", &x);
        ids.claim("node1", &y);
        assert!(x.is_trusted(), "the member listed first holds every node");
        assert!(y.is_duplicate());
        assert_eq!(y.duplicate_of(), "redis-cluster://a:1");
    }
}
