//! Live membership changes: `SIGHUP` re-reads the member list, and adding, removing or replacing
//! masters never lets two clients hold one lock, even while several proxies are reloaded one
//! after the other (docs/operations.md, "Changing the masters"; the argument is in
//! docs/design.md).
//!
//! Each safety test runs the same schedule twice or more: with the transition rule (a grant
//! needs a quorum of the old members and one of the new) and without it
//! (`membership_transition = false`), where the checkers must find the double grant.
//!
//! Run with `cargo test --test membership` (after `scripts/deps.sh test`).

mod support;

use std::time::Duration;

use support::fault::{Fault, FaultProxy};
use support::load::{Checker, Load, Spec, Targets, Verdict, report};
use support::*;
use tokio::time::{Instant, sleep};

/// Every proxy's `max_ttl_ms` here: the quarantine window is 2,022 ms and a transition lasts
/// twice that (the default), which leaves one window to reload the second proxy.
const MAX_TTL: &str = "max_ttl_ms = 2000";

/// Waits until the proxy could grant a lock (a quorum, of both sides during a transition, is
/// trusted); panics after 15 s.
async fn ready(p: &ProxyProcess) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let info = p.info().await;
        if field(&info, "quorum_available") == "1" {
            return;
        }
        assert!(Instant::now() < until, "never ready:\n{info}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the proxy trusts all its `n` masters (each out of its start-up quarantine), so
/// that cutting some off leaves a known set; panics after 15 s.
async fn all_trusted(p: &ProxyProcess, n: usize) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let info = p.info().await;
        if field(&info, "masters_trusted") == n.to_string() {
            return;
        }
        assert!(Instant::now() < until, "not all trusted:\n{info}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `p` has logged `text`; panics after 5 s.
async fn logged(p: &ProxyProcess, text: &str) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let log = p.stderr();
        if log.contains(text) {
            return log;
        }
        assert!(Instant::now() < until, "never logged {text:?}:\n{log}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// The `INFO redlock` line of master `i`.
fn master_line(info: &str, i: usize) -> String {
    field(info, &format!("master{i}"))
}

/// The replacement, under contention from both proxies: masters A, B, C, then D in place of
/// C, on proxy 1 first and on proxy 2 one second later (within the documented window). Until
/// proxy 2 has the new list too, it cannot reach B (so its grants rest on A and C alone, the
/// case a transition must cover). With the transition rule off (and new members voting at
/// once), proxy 1 grants on B and D while proxy 2 grants on A and C: two holders.
async fn replacement(settings: &str, name: &str) -> Verdict {
    let mut ms = masters(4);
    let (a, b, c, d) = (ms[0].addr(), ms[1].addr(), ms[2].addr(), ms[3].addr());
    // Proxy 2 reaches B through a fault proxy: the same member on both lists of proxy 2.
    let fb = FaultProxy::start(b.clone()).await;
    let settings = format!("{MAX_TTL}\n{settings}");
    let p1 = ProxyProcess::start(&[a.clone(), b.clone(), c.clone()], &settings, &[]);
    let p2 = ProxyProcess::start(&[a.clone(), fb.addr.clone(), c.clone()], &settings, &[]);
    all_trusted(&p1, 3).await;
    all_trusted(&p2, 3).await;
    // Proxy 2 loses B from the start (it still has a quorum, A and C), so no key of its grants
    // is left behind on B when proxy 1 changes.
    fb.set(Fault::Reset);
    // Few clients per resource and proxy, so that each proxy's queue on a key is often empty
    // and both proxies win it in turn.
    let checker = Checker::new(name, 4);
    let spec = Spec {
        clients: 8,
        ttl_ms: 1000,
        hold_ms: (20, 80),
        retry_ms: (2, 10),
    };
    let load = Load::start(
        name,
        checker.clone(),
        Targets::new(&[p1.addr.clone(), p2.addr.clone()]),
        spec,
    );
    // A connection opened before the reload is the same one after it.
    let mut kept = p1.client().await;
    assert_eq!(
        kept.raw(&["CLIENT", "ID"]).await,
        kept.raw(&["CLIENT", "ID"]).await
    );
    let id = kept.raw(&["CLIENT", "ID"]).await;
    sleep(Duration::from_millis(800)).await;

    // Proxy 1 first.
    p1.rewrite(&[a.clone(), b.clone(), d.clone()]);
    p1.signal("HUP");
    logged(&p1, "member list changed").await;
    assert_eq!(
        kept.raw(&["CLIENT", "ID"]).await,
        id,
        "the client's connection survived"
    );
    let info = p1.info().await;
    if !settings.contains("membership_transition = false") {
        assert_eq!(field(&info, "membership_transition"), "1", "{info}");
        assert_eq!(field(&info, "masters"), "4", "{info}");
        assert!(master_line(&info, 2).ends_with("member=old"), "{info}");
        assert!(master_line(&info, 3).ends_with("member=new"), "{info}");
        if !settings.contains("quarantine = false") {
            assert!(
                master_line(&info, 3).contains("quarantine_reason=new-member"),
                "{info}"
            );
        }
    }
    sleep(Duration::from_millis(1000)).await;

    // Then proxy 2, within the window (B reachable again).
    fb.heal();
    p2.rewrite(&[a.clone(), fb.addr.clone(), d.clone()]);
    p2.signal("HUP");
    logged(&p2, "member list changed").await;
    // Until both transitions are over, and a little after: C is not needed any more.
    sleep(Duration::from_millis(4500)).await;
    let info = p1.info().await;
    assert_eq!(field(&info, "membership_transition"), "0", "{info}");
    assert_eq!(field(&info, "masters"), "3", "{info}");
    ms[2].kill();
    let after = Instant::now();
    sleep(Duration::from_millis(1500)).await;
    load.stop().await;
    assert!(
        checker.grants_between(after, Instant::now()) > 0,
        "granted without C once the change is done:\n{}",
        checker.timeline()
    );
    drop(fb);
    report(name, settings.trim(), 1, &checker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_member_on_two_proxies_in_turn_never_grants_twice() {
    let v = replacement("quarantine = true", "replace").await;
    assert!(v.grants > 20, "{v:?}");
    assert_eq!(v.violations(), 0, "{v:?}");
}

/// The negative control: the same schedule with the transition rule off finds two holders.
/// New members vote at once here too (`quarantine = false`): for a single replacement, the
/// quarantine of the new member alone would keep its window safe (see docs/design.md); the
/// removal test below shows the case it cannot cover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_transition_rule_a_replacement_grants_twice() {
    let v = replacement(
        "quarantine = false\nmembership_transition = false",
        "replace-unsafe",
    )
    .await;
    assert!(
        v.violations() > 0,
        "the checkers found no double grant: {v:?}"
    );
}

/// The transition rule alone (new members voting at once) keeps the same schedule safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transition_rule_alone_keeps_a_replacement_safe() {
    let v = replacement("quarantine = false", "replace-rule-only").await;
    assert_eq!(v.violations(), 0, "{v:?}");
}

/// One lock, deterministically: proxy 2 (still on the first `old` masters) grants it while the
/// masters at positions `cut` cannot reach it; then proxy 1 changes to the masters at positions
/// `new` and asks for the same lock. Answers both replies.
async fn two_holders(old: usize, cut: &[usize], new: &[usize], settings: &str) -> (String, String) {
    let ms = masters(old.max(new.iter().max().map_or(0, |m| m + 1)));
    let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let settings = format!("{MAX_TTL}\n{settings}");
    let p1 = ProxyProcess::start(&addrs[..old], &settings, &[]);
    let mut faults = Vec::new();
    let mut via = addrs[..old].to_vec();
    for &i in cut {
        let f = FaultProxy::start(addrs[i].clone()).await;
        via[i] = f.addr.clone();
        faults.push(f);
    }
    let p2 = ProxyProcess::start(&via, &settings, &[]);
    all_trusted(&p1, old).await;
    all_trusted(&p2, old).await;
    for f in &faults {
        f.set(Fault::Reset);
    }
    // On a loaded machine a master may miss the node timeout: the first grant is the set-up,
    // so it is asked again until it is granted.
    let mut c2 = p2.client().await;
    let (first, granted_at) =
        attempts(&mut c2, "holder-2", Instant::now() + Duration::from_secs(3)).await;
    let list: Vec<String> = new.iter().map(|&i| addrs[i].clone()).collect();
    p1.rewrite(&list);
    p1.signal("HUP");
    logged(&p1, "member list changed").await;
    // Proxy 1 reaches every master: it asks once it has connected to the new ones, so that a
    // slow connect is not taken for a refusal.
    all_connected(&p1).await;
    // Asked until shortly before proxy 2's lock expires: one grant among the replies is a
    // second holder.
    let mut c1 = p1.client().await;
    let until = granted_at + Duration::from_millis(HOLD_MS - 300);
    let (second, _) = attempts(&mut c1, "holder-1", until).await;
    (first, second)
}

/// The TTL of the lock in [`two_holders`] (ms): `max_ttl_ms`, so that proxy 1 has the most
/// time to find a second grant while proxy 2 still holds it.
const HOLD_MS: u64 = 2000;

/// Waits until `p` has every master of its lists connected (up or quarantined); panics after
/// 5 s.
async fn all_connected(p: &ProxyProcess) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let info = p.info().await;
        let n: usize = field(&info, "masters").parse().unwrap_or(0);
        if (0..n).all(|i| !master_line(&info, i).contains("status=down")) {
            return;
        }
        assert!(Instant::now() < until, "never connected:\n{info}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// `SET lock:one token NX PX 2000` every 50 ms until granted or until `until` has passed;
/// the last reply and when its request was sent.
async fn attempts(c: &mut Client, token: &str, until: Instant) -> (String, Instant) {
    let ttl = HOLD_MS.to_string();
    loop {
        let sent = Instant::now();
        let reply = c.raw(&["SET", "lock:one", token, "NX", "PX", &ttl]).await;
        if reply == OK || Instant::now() + Duration::from_millis(50) >= until {
            return (reply, sent);
        }
        sleep(Duration::from_millis(50)).await;
    }
}

const OK: &str = "+OK\r\n";
const NIL: &str = "$-1\r\n";

/// {A,B,C} → {A,B,D}: proxy 2 holds the lock on A and C; proxy 1 could take it on B and D.
async fn replaced_once(settings: &str) -> String {
    let (first, second) = two_holders(3, &[1], &[0, 1, 3], settings).await;
    assert_eq!(first, OK);
    second
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lock_across_a_replacement() {
    // The transition rule alone: the old set's quorum (A, C) still holds the lock.
    assert_eq!(replaced_once("quarantine = false").await, NIL);
    // The negative control: neither protection, two holders.
    assert_eq!(
        replaced_once("quarantine = false\nmembership_transition = false").await,
        OK
    );
    // The quarantine of the new member alone also covers one replacement, while it lasts: D
    // does not vote, and B alone is no quorum of A, B, D.
    assert_eq!(
        replaced_once("quarantine = true\nmembership_transition = false").await,
        NIL
    );
}

/// {A,B,C,D,E} → {A,B,C}: proxy 2 holds the lock on C, D and E; no member is new, so
/// quarantine has nothing to do, and only the transition rule keeps proxy 1 from granting the
/// same lock on A and B (2 of 3).
async fn removed_two(transition: bool) -> String {
    let settings = format!("quarantine = true\nmembership_transition = {transition}");
    let (first, second) = two_holders(5, &[0, 1], &[0, 1, 2], &settings).await;
    assert_eq!(first, OK);
    second
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_members_needs_a_quorum_of_the_old_set_during_the_transition() {
    assert_eq!(removed_two(true).await, NIL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_transition_rule_removing_members_grants_twice() {
    assert_eq!(
        removed_two(false).await,
        OK,
        "the negative control: two holders"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_or_a_second_change_during_a_transition_keeps_the_members() {
    let ms = masters(5);
    let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let p = ProxyProcess::start(&addrs[..3], &format!("{MAX_TTL}\nquarantine = false"), &[]);
    ready(&p).await;
    let mut c = p.client().await;
    let id = c.raw(&["CLIENT", "ID"]).await;
    // A file that does not parse: the old list stays, with an error.
    p.write_config("backends = [\"127.0.0.1:1\"\nthis is not toml");
    p.signal("HUP");
    let log = logged(&p, "the member list stays as it was").await;
    assert!(log.contains("ERROR"), "{log}");
    let info = p.info().await;
    assert_eq!(field(&info, "masters"), "3", "{info}");
    assert_eq!(field(&info, "membership_transition"), "0", "{info}");
    assert_eq!(
        c.raw(&["SET", "lock:bad", "t", "NX", "PX", "1000"]).await,
        "+OK\r\n"
    );
    assert_eq!(c.raw(&["CLIENT", "ID"]).await, id);
    // A file that lists one master twice (it would vote twice): the old list stays, with an
    // error naming both entries.
    p.rewrite(&[addrs[0].clone(), addrs[1].clone(), addrs[0].clone()]);
    p.signal("HUP");
    let log = logged(&p, "name the same master").await;
    assert!(log.contains("ERROR"), "{log}");
    let info = p.info().await;
    assert_eq!(field(&info, "masters"), "3", "{info}");
    assert!(master_line(&info, 2).contains(&addrs[2]), "{info}");
    // A valid file that changes another setting too: applied for the members, the other
    // setting named in a warning.
    let mut list = addrs[..2].to_vec();
    list.push(addrs[3].clone());
    let settings = "max_ttl_ms = 2000\nquarantine = false\nnode_timeout_ms = 300";
    let body = format!(
        "listen = {:?}\nbackends = {list:?}\n{settings}\nreconnect_min_ms = 20\nreconnect_max_ms = 200\n",
        p.addr
    );
    p.write_config(&body);
    p.signal("HUP");
    let log = logged(&p, "member list changed").await;
    assert!(log.contains("node_timeout_ms"), "{log}");
    // A second change while the transition runs is refused, with an error.
    let mut other = addrs[..2].to_vec();
    other.push(addrs[4].clone());
    p.rewrite(&other);
    p.signal("HUP");
    let log = logged(&p, "member list not changed").await;
    assert!(log.contains("in progress"), "{log}");
    let info = p.info().await;
    assert_eq!(field(&info, "masters"), "4", "{info}");
    assert!(master_line(&info, 3).contains(&addrs[3]), "{info}");
    assert_eq!(c.raw(&["CLIENT", "ID"]).await, id);
}

/// During a transition, `/readyz` is ready only while a quorum of the old members and one of
/// the new are trusted: with D new (quarantined) and B stopped, two of the four masters vote
/// (A and C, as many as the new set's quorum), yet no grant is possible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_and_metrics_during_a_transition() {
    let ms = masters(4);
    let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let metrics = format!("127.0.0.1:{}", free_port());
    let settings = format!(
        "max_ttl_ms = 4000\nquarantine = true\nmetrics_listen = {metrics:?}\n\
         stall_timeout_ms = 300\nprobe_interval_ms = 100"
    );
    let p = ProxyProcess::start(&addrs[..3], &settings, &[]);
    // Every master out of its start-up ("young") quarantine first: uptime is whole seconds, so
    // masters started a moment apart may leave it up to a second apart, and A and C must both
    // vote once B stops.
    all_trusted(&p, 3).await;
    let mut list = addrs[..2].to_vec();
    list.push(addrs[3].clone());
    p.rewrite(&list);
    p.signal("HUP");
    logged(&p, "member list changed").await;
    let (status, body) = http_get(&metrics, "/readyz", "").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let (_, text) = http_get(&metrics, "/metrics", "").await;
    let d = &addrs[3];
    for line in [
        format!("redlock_master_quarantine_reason{{master=\"{d}\",reason=\"new-member\"}} 1"),
        format!("redlock_master_member{{master=\"{d}\",member=\"new\"}} 1"),
        format!(
            "redlock_master_member{{master=\"{}\",member=\"old\"}} 1",
            addrs[2]
        ),
        format!(
            "redlock_master_member{{master=\"{}\",member=\"both\"}} 1",
            addrs[0]
        ),
        "redlock_membership_transition 1".to_string(),
    ] {
        assert!(text.contains(&line), "no {line} in:\n{text}");
    }
    ms[1].pause();
    let until = Instant::now() + Duration::from_secs(3);
    let body = loop {
        let (status, body) = http_get(&metrics, "/readyz", "").await;
        if status == "HTTP/1.1 503 Service Unavailable" {
            break body;
        }
        assert!(Instant::now() < until, "/readyz stayed {status}");
        sleep(Duration::from_millis(50)).await;
    };
    assert!(body.contains("old members and one of the new"), "{body}");
    let info = p.info().await;
    assert_eq!(field(&info, "masters_trusted"), "2", "{info}");
    assert_eq!(field(&info, "quorum"), "2", "{info}");
    assert_eq!(field(&info, "quorum_available"), "0", "{info}");
    let mut c = p.client().await;
    assert_eq!(
        c.raw(&["SET", "lock:r", "t", "NX", "PX", "1000"]).await,
        "$-1\r\n"
    );
    ms[1].resume();
}

/// Waits until `p` has logged `text` at least `n` times; panics after 5 s.
async fn logged_times(p: &ProxyProcess, text: &str, n: usize) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let log = p.stderr();
        if log.matches(text).count() >= n {
            return;
        }
        assert!(
            Instant::now() < until,
            "{text:?} not logged {n} times:\n{log}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the transition in progress on `p` has ended; panics after 15 s.
async fn transition_over(p: &ProxyProcess) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let info = p.info().await;
        if field(&info, "membership_transition") == "0" {
            return;
        }
        assert!(
            Instant::now() < until,
            "the transition never ended:\n{info}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// How many connections of master `node` are subscribed to `channel` (`PUBSUB NUMSUB`).
async fn subscribers_on(node: &str, channel: &str) -> String {
    let mut c = Client::connect(node).await;
    c.raw(&["PUBSUB", "NUMSUB", channel]).await
}

/// Waits until master `node` has `n` subscribers to `channel`; panics after 10 s.
async fn numsub(node: &str, channel: &str, n: usize) {
    let want = format!("*2\r\n${}\r\n{channel}\r\n:{n}\r\n", channel.len());
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let now = subscribers_on(node, channel).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < until,
            "{node} never had {n} subscribers of {channel}: {now:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for `n` messages for `sub` carrying `payload` within `within`; answers how many came.
async fn copies_of(sub: &mut Client, payload: &str, within: Duration) -> usize {
    let until = Instant::now() + within;
    let mut seen = 0;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match sub.try_read(left).await {
            Some(m) => seen += String::from_utf8_lossy(&m).matches(payload).count(),
            None => break,
        }
    }
    seen
}

/// Releases publish their unlock message on the masters where they deleted (Redisson's and
/// Spring's waiters, python-redis-lock's signal): a client subscribed through the proxy must
/// hear what is published on members added by `SIGHUP`, also once every member it started
/// with is gone. The hub's links follow the members: D gets a link at the change (a message
/// published on D alone reaches both a `SUBSCRIBE` and a `PSUBSCRIBE` client), C's link stays
/// until the transition ends and is closed then, and after {A,B,C} → {A,B,D} → {D,E,F} only
/// the new members are published on. Before the hub followed the members, nothing published
/// on D reached the subscribers (the links stayed on A, B and C).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_hear_the_members_a_reload_adds() {
    let ms = masters(6);
    let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let (a, b, c, d, e, f) = (
        &addrs[0], &addrs[1], &addrs[2], &addrs[3], &addrs[4], &addrs[5],
    );
    let p = ProxyProcess::start(
        &[a.clone(), b.clone(), c.clone()],
        &format!("{MAX_TTL}\nquarantine = false"),
        &[],
    );
    ready(&p).await;
    let mut sub = subscribed(&p.addr, "unlock:ch").await;
    let mut psub = Client::connect(&p.addr).await;
    psub.send(&["PSUBSCRIBE", "unlock:p:*"]).await;
    let confirm = psub
        .try_read(Duration::from_secs(10))
        .await
        .expect("confirmed");
    assert!(String::from_utf8_lossy(&confirm).contains("psubscribe"));
    let within = Duration::from_secs(10);
    published_on_reaches(c, &mut sub, "unlock:ch", within).await;

    // D in place of C.
    p.rewrite(&[a.clone(), b.clone(), d.clone()]);
    p.signal("HUP");
    logged_times(&p, "member list changed", 1).await;
    published_on_reaches(d, &mut sub, "unlock:ch", within).await;
    published_on_reaches(d, &mut psub, "unlock:p:x", within).await;
    // C's link stays for the transition (releases that started before, and proxies not yet
    // reloaded, still publish there), and is closed when it ends.
    numsub(c, "unlock:ch", 1).await;
    transition_over(&p).await;
    numsub(c, "unlock:ch", 0).await;
    // A release publishes on every member it deleted on: the subscriber hears it once.
    for node in [a, b, d] {
        let mut direct = Client::connect(node).await;
        direct.raw(&["PUBLISH", "unlock:ch", "released-once"]).await;
    }
    assert_eq!(
        copies_of(&mut sub, "released-once", Duration::from_millis(1000)).await,
        1
    );

    // Every original member replaced: {A,B,D} → {D,E,F}.
    p.rewrite(&[d.clone(), e.clone(), f.clone()]);
    p.signal("HUP");
    logged_times(&p, "member list changed", 2).await;
    transition_over(&p).await;
    for old in [a, b, c] {
        numsub(old, "unlock:ch", 0).await;
    }
    for new in [d, e, f] {
        published_on_reaches(new, &mut sub, "unlock:ch", within).await;
        published_on_reaches(new, &mut psub, "unlock:p:y", within).await;
    }
}
