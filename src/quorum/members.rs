//! The member set, changed while the proxy runs (`SIGHUP`), without ever letting two clients
//! hold one lock.
//!
//! Every operation takes one [`Masters`] snapshot when it starts and uses it to the end, its
//! roll-back and clean-up included: a read lock and a reference count, never held across a wait.
//! A change swaps in a new snapshot; operations already running keep theirs, so a member that
//! was removed still receives their releases and roll-backs, and its connection closes when the
//! last snapshot holding it is gone.
//!
//! A change opens a *transition* (`membership_transition_ms`, at least `max_ttl_ms` plus drift):
//! its snapshot is the union of the old set and the new one, reached once per vote, and its rule
//! ([`Quorum::joint`]) needs a quorum of the old members and a quorum of the new. Members added
//! start quarantined for the quarantine window (reason `new-member`); members that stay (same
//! address, credentials and TLS) keep their connection and their state. When the transition
//! ends, the new set alone decides. A second change while a transition runs is refused: the
//! old side must be one set, the one every other proxy may still be deciding with. The safety
//! argument, and what it asks of an operator running several proxies, is in `docs/design.md`.

use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::Masters;
use super::rule::{MAX_JOINT, Quorum};
use crate::backend::Backend;
use crate::backend::kind::Link;

/// The member set in force, and the transition to it while one runs.
pub struct Membership {
    /// The snapshot new operations take.
    current: RwLock<Masters>,
    /// What changes take and give; only reloads and the end of a transition lock it.
    state: Mutex<State>,
    /// Told the links of every member in the snapshot new operations take, each time it is
    /// swapped (see [`Membership::observe`]).
    observer: OnceLock<Observer>,
}

/// What [`Membership::observe`] calls.
type Observer = Box<dyn Fn(&[Link]) + Send + Sync>;

/// One member: how it is reached, and its handle.
struct Member {
    link: Link,
    backend: Backend,
}

struct State {
    /// The set in force: the new set during a transition.
    members: Vec<Member>,
    /// When the transition in progress ends.
    until: Option<Instant>,
    /// Counts changes, so a transition's timer ends only its own transition.
    generation: u64,
}

/// How a change is made.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// How long the transition lasts; `None` switches the transition rule off (the unsafe
    /// negative control `membership_transition = false`: the new set decides at once).
    pub transition: Option<Duration>,
    /// How long members added sit out (`None`: they vote at once, `quarantine = false`).
    pub quarantine: Option<Duration>,
}

/// What a change did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    /// Members added (addresses).
    pub added: Vec<String>,
    /// Members removed (addresses).
    pub removed: Vec<String>,
    /// Members kept with their connection.
    pub kept: usize,
    /// How long the transition lasts (`None`: no transition, the new set decides now).
    pub transition: Option<Duration>,
}

impl Changed {
    /// True when the member set is what it was.
    pub fn is_none(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

impl Membership {
    /// The members `members`, in force at once (no transition).
    pub fn new(members: Vec<(Link, Backend)>) -> Arc<Membership> {
        let members: Vec<Member> = members
            .into_iter()
            .map(|(link, backend)| Member { link, backend })
            .collect();
        let masters = members.iter().map(|m| m.backend.clone()).collect();
        Arc::new(Membership {
            current: RwLock::new(masters),
            state: Mutex::new(State {
                members,
                until: None,
                generation: 0,
            }),
            observer: OnceLock::new(),
        })
    }

    /// Calls `f` with the links of the members in the snapshot new operations take, whenever
    /// a change or the end of a transition swaps it (during a transition: the old members and
    /// the new, those that stay once), in the order of the swaps (it runs under the lock that
    /// orders them). The pub/sub hub follows the members this way. Set once; later calls are
    /// ignored.
    pub fn observe(&self, f: impl Fn(&[Link]) + Send + Sync + 'static) {
        let _ = self.observer.set(Box::new(f));
    }

    fn tell(&self, links: &[Link]) {
        if let Some(f) = self.observer.get() {
            f(links);
        }
    }

    /// The snapshot an operation takes when it starts, and keeps to its end.
    pub fn snapshot(&self) -> Masters {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Time left in the transition in progress, if any.
    pub fn transition_left(&self) -> Option<Duration> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .until
            .map(|u| u.saturating_duration_since(Instant::now()))
    }

    /// Makes `links` the member set: members that stay keep their handle; `spawn` starts the
    /// others (then quarantined as new members); the transition opens (see the module docs).
    /// Refused (with why) while another transition runs and the set would change, or when the
    /// union of both sets is larger than one vote can count.
    pub fn change(
        self: &Arc<Self>,
        links: Vec<Link>,
        rules: Rules,
        mut spawn: impl FnMut(&Link) -> Backend,
    ) -> Result<Changed, String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Which old member each new link keeps, if any (each old member kept at most once).
        let mut taken = vec![false; state.members.len()];
        let kept: Vec<Option<usize>> = links
            .iter()
            .map(|l| {
                let j = (0..state.members.len())
                    .find(|&j| !taken[j] && state.members[j].link.same(l))?;
                taken[j] = true;
                Some(j)
            })
            .collect();
        let mut changed = Changed {
            added: links
                .iter()
                .zip(&kept)
                .filter(|(_, k)| k.is_none())
                .map(|(l, _)| l.addr.clone())
                .collect(),
            removed: (0..state.members.len())
                .filter(|&j| !taken[j])
                .map(|j| state.members[j].link.addr.clone())
                .collect(),
            kept: kept.iter().flatten().count(),
            transition: None,
        };
        if changed.is_none() {
            return Ok(changed);
        }
        if let Some(until) = state.until {
            let left = until.saturating_duration_since(Instant::now());
            return Err(format!(
                "a change of members is in progress for another {} ms; the member list was not \
                 changed (reload again once it has ended)",
                left.as_millis()
            ));
        }
        let old = state.members.len();
        if rules.transition.is_some() && old + changed.added.len() > MAX_JOINT {
            return Err(format!(
                "the old and the new members together are more than {MAX_JOINT}; change fewer \
                 members at once"
            ));
        }
        // The union: the old set in its order, then the members added.
        let mut union: Vec<Backend> = state.members.iter().map(|m| m.backend.clone()).collect();
        let mut union_links: Vec<Link> = state.members.iter().map(|m| m.link.clone()).collect();
        let mut new_positions = Vec::with_capacity(links.len());
        let mut members = Vec::with_capacity(links.len());
        for (link, k) in links.into_iter().zip(kept) {
            let backend = match k {
                Some(j) => {
                    new_positions.push(j);
                    state.members[j].backend.clone()
                }
                None => {
                    let b = spawn(&link);
                    if let Some(q) = rules.quarantine {
                        b.info().quarantine_new_member(q);
                    }
                    new_positions.push(union.len());
                    union.push(b.clone());
                    union_links.push(link.clone());
                    b
                }
            };
            members.push(Member { link, backend });
        }
        state.generation += 1;
        let in_force = rules.transition.is_some();
        let snapshot = match rules.transition {
            Some(length) => {
                let old_positions: Vec<usize> = (0..old).collect();
                state.until = Some(Instant::now() + length);
                changed.transition = Some(length);
                let generation = state.generation;
                let this: Weak<Membership> = Arc::downgrade(self);
                tokio::spawn(async move {
                    tokio::time::sleep(length).await;
                    if let Some(m) = this.upgrade() {
                        m.end_transition(generation);
                    }
                });
                Masters::with_rule(union, Quorum::joint(&old_positions, &new_positions))
            }
            None => members.iter().map(|m| m.backend.clone()).collect(),
        };
        state.members = members;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = snapshot;
        if in_force {
            self.tell(&union_links);
        } else {
            let links: Vec<Link> = state.members.iter().map(|m| m.link.clone()).collect();
            self.tell(&links);
        }
        Ok(changed)
    }

    /// Ends the transition of change `generation`: the new set alone decides from now on.
    fn end_transition(&self, generation: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.generation != generation || state.until.is_none() {
            return;
        }
        state.until = None;
        let masters: Masters = state.members.iter().map(|m| m.backend.clone()).collect();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = masters;
        let links: Vec<Link> = state.members.iter().map(|m| m.link.clone()).collect();
        self.tell(&links);
        let addrs: Vec<&str> = state.members.iter().map(|m| m.link.addr.as_str()).collect();
        info!(masters = ?addrs, "membership transition ended: the new member set alone decides");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Settings;
    use crate::backend::kind::standalone;

    fn link(addr: &str) -> Link {
        crate::backend::kind::standalone::link(addr.into(), None, None)
    }

    /// Addresses nobody listens on: the handles only need to exist.
    fn set(addrs: &[&str]) -> Arc<Membership> {
        Membership::new(
            addrs
                .iter()
                .map(|a| {
                    (
                        link(a),
                        standalone::member(a.to_string(), Settings::for_tests()),
                    )
                })
                .collect(),
        )
    }

    fn spawn(l: &Link) -> Backend {
        standalone::member(l.addr.clone(), Settings::for_tests())
    }

    const RULES: Rules = Rules {
        transition: Some(Duration::from_secs(10)),
        quarantine: Some(Duration::from_secs(5)),
    };

    fn addrs(m: &Masters) -> Vec<String> {
        m.iter().map(|b| b.info().addr.clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_replacement_votes_on_the_union_until_the_transition_ends() {
        let m = set(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let before = m.snapshot();
        let links = vec![
            link("127.0.0.1:1"),
            link("127.0.0.1:2"),
            link("127.0.0.1:4"),
        ];
        let changed = m.change(links, RULES, spawn).unwrap();
        assert_eq!(changed.added, ["127.0.0.1:4"]);
        assert_eq!(changed.removed, ["127.0.0.1:3"]);
        assert_eq!(changed.kept, 2);
        let during = m.snapshot();
        assert_eq!(
            addrs(&during),
            ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"]
        );
        assert_eq!(during.rule(), Quorum::joint(&[0, 1, 2], &[0, 1, 3]));
        // Kept members are the very same handles; the added one is quarantined as new.
        assert!(std::ptr::eq(before[0].info(), during[0].info()));
        assert_eq!(during[3].info().quarantine_reason(), "new-member");
        // An operation that took the old snapshot keeps it.
        assert_eq!(before.len(), 3);
        // A second change during the transition is refused, the same list is not a change.
        let again = vec![
            link("127.0.0.1:1"),
            link("127.0.0.1:5"),
            link("127.0.0.1:4"),
        ];
        assert!(
            m.change(again, RULES, spawn)
                .unwrap_err()
                .contains("in progress")
        );
        let same = vec![
            link("127.0.0.1:1"),
            link("127.0.0.1:2"),
            link("127.0.0.1:4"),
        ];
        assert!(m.change(same, RULES, spawn).unwrap().is_none());
        assert!(m.transition_left().is_some());
        tokio::time::sleep(Duration::from_secs(11)).await;
        let after = m.snapshot();
        assert_eq!(addrs(&after), ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"]);
        assert_eq!(after.rule(), Quorum::of(3));
        assert_eq!(m.transition_left(), None);
    }

    /// The observer (the pub/sub hub) sees the union during the transition, then the new set.
    #[tokio::test(start_paused = true)]
    async fn the_observer_sees_every_member_in_force() {
        let m = set(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
        let log = seen.clone();
        m.observe(move |links| {
            let addrs = links.iter().map(|l| l.addr.clone()).collect();
            log.lock().unwrap().push(addrs);
        });
        let links = vec![
            link("127.0.0.1:1"),
            link("127.0.0.1:2"),
            link("127.0.0.1:4"),
        ];
        m.change(links, RULES, spawn).unwrap();
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(
            *seen.lock().unwrap(),
            [
                vec!["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"],
                vec!["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"],
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_transition_rule_the_new_set_decides_at_once() {
        let m = set(&["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let links = vec![
            link("127.0.0.1:1"),
            link("127.0.0.1:2"),
            link("127.0.0.1:4"),
        ];
        let rules = Rules {
            transition: None,
            quarantine: None,
        };
        let changed = m.change(links, rules, spawn).unwrap();
        assert_eq!(changed.transition, None);
        let now = m.snapshot();
        assert_eq!(addrs(&now), ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"]);
        assert_eq!(now.rule(), Quorum::of(3));
        assert_eq!(now[2].info().quarantine_reason(), "");
    }

    #[tokio::test(start_paused = true)]
    async fn new_credentials_make_a_new_member() {
        let m = set(&["127.0.0.1:1"]);
        let mut l = link("127.0.0.1:1");
        l.auth = Some(crate::backend::target::Credentials {
            user: None,
            password: "p".into(),
        });
        let changed = m.change(vec![l], RULES, spawn).unwrap();
        assert_eq!(changed.added, ["127.0.0.1:1"]);
        assert_eq!(changed.removed, ["127.0.0.1:1"]);
    }
}
