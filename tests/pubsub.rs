//! Publish/subscribe through the proxy: replies as one Redis gives them, each message delivered
//! once although every master publishes it (a release runs on every master), and subscribed
//! mode's rules in RESP2 and RESP3. (A `SUBSCRIBE` of tens of thousands of channels is in
//! tests/security.rs, with the other bounds.)

mod support;

use std::time::Duration;

use support::*;

/// Reads one reply, or `None` when nothing comes within `ms`.
async fn maybe(c: &mut Client, ms: u64) -> Option<String> {
    tokio::time::timeout(Duration::from_millis(ms), c.read_raw())
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

#[tokio::test]
async fn replies_read_like_one_redis() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let reference = Master::start();
    for addr in [p.clone(), reference.addr()] {
        let mut c = Client::connect(&addr).await;
        c.send(&["SUBSCRIBE", "a", "b"]).await;
        assert_eq!(
            maybe(&mut c, 2000).await.unwrap(),
            "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
        );
        assert_eq!(
            maybe(&mut c, 2000).await.unwrap(),
            "*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"
        );
        assert_eq!(
            c.raw(&["GET", "x"]).await,
            "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
            "{addr}"
        );
        assert_eq!(
            c.raw(&["PING"]).await,
            "*2\r\n$4\r\npong\r\n$0\r\n\r\n",
            "{addr}"
        );
        // Unsubscribing from everything: one reply per channel (in no set order), the count
        // going down to 0.
        c.send(&["UNSUBSCRIBE"]).await;
        let first = maybe(&mut c, 2000).await.unwrap();
        let second = maybe(&mut c, 2000).await.unwrap();
        assert!(
            first.starts_with("*3\r\n$11\r\nunsubscribe\r\n$1\r\n") && first.ends_with(":1\r\n")
        );
        assert!(
            second.starts_with("*3\r\n$11\r\nunsubscribe\r\n$1\r\n") && second.ends_with(":0\r\n")
        );
        assert_ne!(first[..first.len() - 4], second[..second.len() - 4]);
        assert_eq!(
            c.raw(&["UNSUBSCRIBE"]).await,
            "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"
        );
        assert_eq!(c.raw(&["PING"]).await, "+PONG\r\n", "{addr}");
    }
}

#[tokio::test]
async fn every_master_publishing_delivers_each_message_once() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut sub = Client::connect(&p).await;
    sub.send(&["SUBSCRIBE", "redisson_lock__channel:{l}"]).await;
    assert!(maybe(&mut sub, 2000).await.unwrap().contains("subscribe"));
    let mut psub = Client::connect(&p).await;
    psub.send(&["PSUBSCRIBE", "redisson_lock__channel:*"]).await;
    assert!(maybe(&mut psub, 2000).await.unwrap().contains("psubscribe"));
    // What an unlock script does: publish on every master.
    for m in &ms {
        m.client()
            .await
            .cmd(&["PUBLISH", "redisson_lock__channel:{l}", "0"])
            .await;
    }
    let want = "*3\r\n$7\r\nmessage\r\n$26\r\nredisson_lock__channel:{l}\r\n$1\r\n0\r\n";
    assert_eq!(maybe(&mut sub, 2000).await.as_deref(), Some(want));
    assert_eq!(
        maybe(&mut sub, 300).await,
        None,
        "a duplicate was delivered"
    );
    let pwant = "*4\r\n$8\r\npmessage\r\n$24\r\nredisson_lock__channel:*\r\n$26\r\nredisson_lock__channel:{l}\r\n$1\r\n0\r\n";
    assert_eq!(maybe(&mut psub, 2000).await.as_deref(), Some(pwant));
    assert_eq!(maybe(&mut psub, 300).await, None);
    // Published twice (on a majority only): delivered twice.
    for _ in 0..2 {
        for m in &ms[..2] {
            m.client()
                .await
                .cmd(&["PUBLISH", "redisson_lock__channel:{l}", "0"])
                .await;
        }
    }
    assert_eq!(maybe(&mut sub, 2000).await.as_deref(), Some(want));
    assert_eq!(maybe(&mut sub, 2000).await.as_deref(), Some(want));
    assert_eq!(maybe(&mut sub, 300).await, None);
    // PUBLISH through the proxy reaches the subscriber once, within milliseconds.
    let mut pubr = Client::connect(&p).await;
    let sent = tokio::time::Instant::now();
    // One subscriber by channel and one by pattern: 2 receivers, as Redis counts them.
    assert_eq!(
        pubr.raw(&["PUBLISH", "redisson_lock__channel:{l}", "1"])
            .await,
        ":2\r\n"
    );
    assert!(
        maybe(&mut sub, 2000)
            .await
            .unwrap()
            .ends_with("$1\r\n1\r\n")
    );
    assert!(sent.elapsed() < Duration::from_millis(500));
    assert_eq!(maybe(&mut sub, 300).await, None);
}

#[tokio::test]
async fn subscribing_inside_a_transaction_is_refused() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(
        c.raw(&["SUBSCRIBE", "a", "b"]).await,
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(
        c.raw(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(c.raw(&["PING"]).await, "+PONG\r\n");
}

#[tokio::test]
async fn resp3_subscribers_get_pushes_and_may_run_commands() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    c.raw(&["HELLO", "3"]).await;
    c.send(&["SSUBSCRIBE", "s"]).await;
    assert_eq!(
        maybe(&mut c, 2000).await.unwrap(),
        ">3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n"
    );
    assert_eq!(c.raw(&["GET", "nothing"]).await, "_\r\n");
    let mut other = Client::connect(&p).await;
    assert_eq!(other.raw(&["SPUBLISH", "s", "hi"]).await, ":1\r\n");
    assert_eq!(
        maybe(&mut c, 2000).await.unwrap(),
        ">3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$2\r\nhi\r\n"
    );
}

#[tokio::test]
async fn subscriptions_reach_masters_that_require_a_password() {
    let ms: Vec<Master> = (0..3)
        .map(|_| Master::start_with(&["--requirepass", "pw"]))
        .collect();
    let p = proxy_with(&ms, |c| c.backend_password = Some("pw".into())).await;
    let mut sub = Client::connect(&p).await;
    sub.send(&["SUBSCRIBE", "ch"]).await;
    assert!(maybe(&mut sub, 3000).await.unwrap().contains("subscribe"));
    for m in &ms {
        let mut c = m.client().await;
        c.cmd(&["AUTH", "pw"]).await;
        c.cmd(&["PUBLISH", "ch", "x"]).await;
    }
    assert_eq!(
        maybe(&mut sub, 2000).await.as_deref(),
        Some("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n")
    );
    assert_eq!(maybe(&mut sub, 300).await, None);
}

/// The subscriber link, like a data connection, asks `ROLE` and stays on primaries only. The
/// member's name reaches a replica first (as a name left on a node that was demoted can), whose
/// replication is then cut, and then the primary: a link that had settled on the replica would
/// stay there (its connection never breaks) and hear nothing published on the primary; the
/// link that refuses the replica retries and lands on the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_link_refuses_a_replica_and_finds_the_primary() {
    init_logs();
    // Each in a scratch folder: the full resynchronisation writes an RDB file there, not into
    // the tests' working folder, where a redis-server started later would load it.
    let mut dirs = Vec::new();
    let primary = support::sentinel::data_node(&mut dirs, &[]);
    let repl = support::fault::FaultProxy::start(primary.addr()).await;
    let (host, port) = repl.addr.rsplit_once(':').unwrap();
    let replica = support::sentinel::data_node(&mut dirs, &["--replicaof", host, port]);
    // The replica is in sync (it hears the primary's messages while replication runs).
    let mut r = Client::connect(&replica.addr()).await;
    for _ in 0..200 {
        let info = r.text(&["INFO", "replication"]).await;
        if info.contains("master_link_status:up") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let name = support::fault::FaultProxy::start(replica.addr()).await;
    let p = proxy(config_for(std::slice::from_ref(&name.addr)))
        .await
        .to_string();
    let mut sub = subscribed(&p, "wake").await;
    // Let a link that does not ask ROLE settle on the replica.
    tokio::time::sleep(Duration::from_millis(300)).await;
    repl.set(support::fault::Fault::Reset);
    name.retarget(primary.addr());
    published_on_reaches(&primary.addr(), &mut sub, "wake", Duration::from_secs(10)).await;
    // The data connection refused the replica all along, and took the primary too.
    wait_status(&p, 0, "up", Duration::from_secs(5)).await;
}
