//! Transactions through the proxy: `WATCH`/`MULTI`/`EXEC` as legacy lock code releases a lock
//! (and aborts when someone took it over), `EXEC`'s delete guarded on each master by the value
//! `WATCH` saw, the whole of `WATCH`/`MULTI`/`EXEC`/`DISCARD`/`UNWATCH` against one redis-server,
//! and the caps on queued commands and watched values.

mod support;

use support::*;

#[tokio::test]
async fn watch_multi_exec_releases_and_aborts_when_the_lock_changed() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut holder = Client::connect(&p).await;
    let mut other = Client::connect(&p).await;

    // Release: the lock is still ours, so EXEC deletes it on every master.
    assert_eq!(holder.raw(&["SETNX", "tx:lock", "tokA"]).await, ":1\r\n");
    assert_eq!(holder.raw(&["WATCH", "tx:lock"]).await, "+OK\r\n");
    assert_eq!(holder.raw(&["GET", "tx:lock"]).await, "$4\r\ntokA\r\n");
    assert_eq!(holder.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(holder.raw(&["DEL", "tx:lock"]).await, "+QUEUED\r\n");
    assert_eq!(holder.raw(&["EXEC"]).await, "*1\r\n:1\r\n");
    assert_eq!(values_on(&ms, "tx:lock").await, vec![None, None, None]);

    // Abort: someone took the lock over between WATCH and EXEC; it must survive.
    assert_eq!(holder.raw(&["SETNX", "tx:lock", "tokA"]).await, ":1\r\n");
    assert_eq!(holder.raw(&["WATCH", "tx:lock"]).await, "+OK\r\n");
    assert_eq!(holder.raw(&["GET", "tx:lock"]).await, "$4\r\ntokA\r\n");
    assert_eq!(
        other.raw(&["GETSET", "tx:lock", "tokB"]).await,
        "$4\r\ntokA\r\n"
    );
    assert_eq!(holder.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(holder.raw(&["DEL", "tx:lock"]).await, "+QUEUED\r\n");
    assert_eq!(holder.raw(&["EXEC"]).await, "*-1\r\n");
    let tok_b = Some("tokB".to_string());
    assert_eq!(values_on(&ms, "tx:lock").await, vec![tok_b.clone(); 3]);

    // The whole pattern pipelined in one write behaves the same.
    holder
        .send_raw(b"WATCH tx:lock\r\nGET tx:lock\r\nMULTI\r\nDEL tx:lock\r\nEXEC\r\n")
        .await;
    let mut replies = String::new();
    for _ in 0..5 {
        replies.push_str(&String::from_utf8_lossy(&holder.read_raw().await));
    }
    assert_eq!(
        replies,
        "+OK\r\n$4\r\ntokB\r\n+OK\r\n+QUEUED\r\n*1\r\n:1\r\n"
    );
}

#[tokio::test]
async fn exec_deletes_a_watched_key_only_where_it_still_holds_the_watched_value() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    assert_eq!(c.raw(&["SETNX", "tx:cas", "mine"]).await, ":1\r\n");
    assert_eq!(c.raw(&["WATCH", "tx:cas"]).await, "+OK\r\n");
    // A minority master changes behind the proxy's back: the majority value is unchanged, so
    // EXEC runs, but the delete spares master 0's different value.
    ms[0].client().await.cmd(&["SET", "tx:cas", "theirs"]).await;
    c.raw(&["MULTI"]).await;
    c.raw(&["DEL", "tx:cas"]).await;
    assert_eq!(c.raw(&["EXEC"]).await, "*1\r\n:1\r\n");
    assert_eq!(
        values_on(&ms, "tx:cas").await,
        vec![Some("theirs".to_string()), None, None]
    );
}

/// StackExchange.Redis's `LockExtend` (`WATCH`, `GET`, `MULTI`, `PEXPIRE`, `EXEC`): the queued
/// expiry of a watched key is set only where the key still holds the watched value, so it never
/// lengthens another holder's lock on a master where the value differs (without the guard,
/// master 0's TTL would be 60 s too).
#[tokio::test]
async fn exec_extends_a_watched_key_only_where_it_still_holds_the_watched_value() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.raw(&["SET", "tx:ext", "mine", "PX", "5000", "NX"]).await,
        "+OK\r\n"
    );
    let mut direct = ms[0].client().await;
    let theirs = direct.cmd(&["SET", "tx:ext", "theirs", "PX", "5000"]).await;
    assert_eq!(theirs, Reply::ok());
    for (cmd, amount) in [("PEXPIRE", "60000"), ("EXPIRE", "60")] {
        assert_eq!(c.raw(&["WATCH", "tx:ext"]).await, "+OK\r\n");
        c.raw(&["MULTI"]).await;
        assert_eq!(c.raw(&[cmd, "tx:ext", amount]).await, "+QUEUED\r\n");
        assert_eq!(c.raw(&["EXEC"]).await, "*1\r\n:1\r\n", "{cmd}");
        let mut ttls = Vec::new();
        for m in &ms {
            ttls.push(match m.client().await.cmd(&["PTTL", "tx:ext"]).await {
                Reply::Integer(t) => t,
                other => panic!("{other:?}"),
            });
        }
        assert!(
            ttls[0] <= 5000,
            "{cmd}: the other value untouched: {ttls:?}"
        );
        assert!(
            ttls[1] > 55000 && ttls[2] > 55000,
            "{cmd}: extended: {ttls:?}"
        );
    }
    assert_eq!(
        values_on(&ms, "tx:ext").await,
        vec![
            Some("theirs".to_string()),
            Some("mine".into()),
            Some("mine".into())
        ]
    );
}

#[tokio::test]
async fn differential_transactions() {
    differential(&[
        "SETNX lock tok",
        "EXEC",
        "DISCARD",
        "UNWATCH",
        // The release pattern, kept.
        "WATCH lock",
        "GET lock",
        "MULTI",
        "MULTI",
        "DEL lock",
        "EXEC",
        "GET lock",
        // The release pattern, aborted by another client's takeover.
        "SETNX lock tok",
        "WATCH lock",
        "B:GETSET lock other",
        "MULTI",
        "GET lock",
        "DEL lock",
        "EXEC",
        "GET lock",
        // A watched key that nobody touched, several commands, several keys.
        "WATCH lock nokey",
        "MULTI",
        "GET lock",
        "SETNX lock x",
        "SETNX nokey y",
        "DEL lock nokey",
        "EXISTS lock",
        "EXEC",
        // Errors while queueing abort the transaction.
        "MULTI",
        "NOSUCHCOMMAND a",
        "GET",
        "EXEC",
        // DISCARD drops the queue and the watches.
        "SETNX lock tok",
        "WATCH lock",
        "MULTI",
        "DEL lock",
        "DISCARD",
        "B:GETSET lock other",
        "MULTI",
        "DEL lock",
        "EXEC",
        // UNWATCH forgets the watch.
        "SETNX lock tok",
        "WATCH lock",
        "B:GETSET lock again",
        "UNWATCH",
        "MULTI",
        "GET lock",
        "EXEC",
    ])
    .await;
}

#[tokio::test]
async fn multi_is_capped_and_the_cap_aborts_exec() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.max_multi_commands = 3).await;
    let mut c = Client::connect(&p).await;
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    for _ in 0..3 {
        assert_eq!(c.raw(&["GET", "k"]).await, "+QUEUED\r\n");
    }
    assert_eq!(
        c.raw(&["GET", "k"]).await,
        "-ERR redlock-proxy: too many commands in MULTI (max_multi_commands = 3)\r\n"
    );
    assert_eq!(
        c.raw(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // Bytes are capped too: queued commands may not hold more than the query buffer limit
    // (1,000 queued 4 MiB commands held gigabytes).
    let p = proxy_with(&ms, |c| c.client_query_buffer_limit = 64 * 1024).await;
    let mut c = Client::connect(&p).await;
    let big = "x".repeat(40 * 1024);
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["ECHO", &big]).await, "+QUEUED\r\n");
    assert_eq!(
        c.raw(&["ECHO", &big]).await,
        "-ERR redlock-proxy: MULTI would hold more than client_query_buffer_limit (65536 bytes) of queued commands\r\n"
    );
    assert_eq!(
        c.raw(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // Each argument's bookkeeping counts too: thousands of empty ones are no free pass.
    let mut del = vec!["DEL"];
    del.extend(std::iter::repeat_n("", 3_000));
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert!(
        c.raw(&del)
            .await
            .starts_with("-ERR redlock-proxy: MULTI would hold")
    );
    assert!(c.raw(&["EXEC"]).await.starts_with("-EXECABORT"));
}

/// `WATCH` keeps the values it saw (to guard `EXEC`'s deletes): they are capped in bytes like
/// queued commands (75 watched 4 MiB values held 600 MB). Past the cap the `WATCH` is an
/// error, its keys count as changed (`EXEC` aborts), and `UNWATCH` frees the budget.
#[tokio::test]
async fn watched_values_are_capped_in_bytes() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.client_query_buffer_limit = 64 * 1024).await;
    let mut c = Client::connect(&p).await;
    let big = "v".repeat(40 * 1024);
    for k in ["w1", "w2"] {
        assert_eq!(c.raw(&["SET", k, &big, "PX", "60000"]).await, "+OK\r\n");
    }
    assert_eq!(c.raw(&["WATCH", "w1"]).await, "+OK\r\n");
    assert_eq!(
        c.raw(&["WATCH", "w2"]).await,
        "-ERR redlock-proxy: watched values would pass client_query_buffer_limit (65536 bytes)\r\n"
    );
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["GET", "w1"]).await, "+QUEUED\r\n");
    assert_eq!(c.raw(&["EXEC"]).await, "*-1\r\n");
    // EXEC unwatched everything: the budget is whole again.
    assert_eq!(c.raw(&["WATCH", "w2"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["UNWATCH"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["WATCH", "w1"]).await, "+OK\r\n");
}
