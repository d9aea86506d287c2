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
//! The first member to claim a `run_id` keeps it; any other member that claims it while the
//! first still holds it is a *duplicate*: its votes never count and it is sent nothing (it
//! answers as a member that is down would), `INFO` shows it as `status=duplicate` with
//! `quarantine_reason=duplicate of member <name>`, and an ERROR is logged. The claim is made
//! before the connection is marked up, and given back after it is marked down, so two members
//! holding one server are never both counted, not even for a moment. When the holder's
//! connection ends, the `run_id` passes to the next member still connected to that server.
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
    /// Each `run_id`'s claims, the holder first.
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
    /// marked up. The member becomes a duplicate when another member holds the server.
    pub(super) fn claim(&self, run_id: &str, member: &Arc<MasterInfo>) {
        let mut claims = self.lock();
        let list = claims.entry(run_id.to_string()).or_default();
        match list.iter_mut().find(|c| Arc::ptr_eq(&c.member, member)) {
            Some(c) => c.connections += 1,
            None => list.push(Claim {
                member: member.clone(),
                connections: 1,
            }),
        }
        let holder = list[0].member.addr.clone();
        judge(&claims, member, Some((run_id, &holder)));
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
        let others: Vec<Arc<MasterInfo>> = list.iter().map(|c| c.member.clone()).collect();
        if list.is_empty() {
            claims.remove(run_id);
        }
        judge(&claims, member, None);
        for m in &others {
            judge(&claims, m, None);
        }
    }
}

/// Sets whether `member` is a duplicate: it is while another member holds any server it
/// claims. `new` names the claim just made (`run_id`, holder), for the log.
fn judge(
    claims: &HashMap<String, Vec<Claim>>,
    member: &Arc<MasterInfo>,
    new: Option<(&str, &str)>,
) {
    let of = claims.iter().find_map(|(run_id, list)| {
        let holder = &list.first()?.member;
        let mine = list.iter().any(|c| Arc::ptr_eq(&c.member, member));
        (mine && !Arc::ptr_eq(holder, member)).then(|| (run_id.as_str(), holder.addr.as_str()))
    });
    let was = member.is_duplicate();
    match of {
        Some((run_id, holder)) => {
            if !was || new.is_some_and(|(id, _)| id == run_id) {
                error!(
                    member = %member.addr,
                    duplicate_of = holder,
                    run_id,
                    status = "duplicate",
                    "members '{}' and '{holder}' reach the same Redis server (run_id {run_id}): \
                     it votes once, through '{holder}'; '{}' is sent nothing and its votes never \
                     count until it reaches another server (list each master once)",
                    member.addr,
                    member.addr
                );
            }
            member.set_duplicate(Some(holder));
        }
        None if was => {
            member.set_duplicate(None);
            info!(
                member = %member.addr,
                "member no longer reaches a server another member holds: its votes count again"
            );
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> Arc<MasterInfo> {
        let m = Arc::new(MasterInfo::new(name.into()));
        m.set_connected(true);
        m
    }

    #[test]
    fn the_first_to_claim_a_server_holds_it_and_the_next_takes_over_when_it_leaves() {
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
        // a comes back: now it is the duplicate.
        a.set_connected(true);
        ids.claim("r1", &a);
        assert!(a.is_duplicate() && !a.is_trusted());
        assert_eq!(a.duplicate_of(), "b:1");
        // a reconnects to another server: it counts again.
        a.set_connected(false);
        ids.release("r1", &a);
        ids.claim("r3", &a);
        a.set_connected(true);
        assert!(a.is_trusted());
    }

    #[test]
    fn a_member_that_reconnects_into_another_members_server_becomes_a_duplicate() {
        let ids = Identities::default();
        let (a, b) = (member("a:1"), member("b:1"));
        ids.claim("r1", &a);
        ids.claim("r2", &b);
        assert!(b.is_trusted());
        b.set_connected(false);
        ids.release("r2", &b);
        ids.claim("r1", &b);
        b.set_connected(true);
        assert!(b.is_duplicate() && !b.is_trusted());
        assert!(a.is_trusted());
    }

    #[test]
    fn a_cluster_member_claims_for_each_shard_and_is_a_duplicate_if_any_is_held() {
        let ids = Identities::default();
        let (single, cluster) = (member("n2:1"), member("redis-cluster://n1:1"));
        ids.claim("shard1", &cluster);
        ids.claim("shard2", &single);
        assert!(cluster.is_trusted());
        ids.claim("shard2", &cluster);
        assert!(
            cluster.is_duplicate(),
            "one of its shards is another member's server"
        );
        // Two connections of one member to one server are still one member.
        ids.claim("shard1", &cluster);
        ids.release("shard2", &cluster);
        assert!(!cluster.is_duplicate());
        ids.release("shard1", &cluster);
        assert!(ids.lock().contains_key("shard1"), "one connection remains");
        ids.release("shard1", &cluster);
        assert!(!ids.lock().contains_key("shard1"));
    }
}
