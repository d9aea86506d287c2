//! The foundation: quorum `SET NX PX` and the unlock script against real masters (N = 1, 3, 5),
//! failures of a minority and a majority, a silent master, pipelining, and the Redis-like front
//! end (errors, RESP3, inline commands, redis-cli, bad input, configuration errors).

mod common;

use std::time::Duration;

use common::*;
use redlock_proxy::wire::reply::Reply;
use tokio::time::Instant;

fn nil() -> Reply {
    Reply::Nil
}

async fn lock_cycle(proxy: &str) {
    let mut c = Client::connect(proxy).await;
    assert_eq!(
        c.cmd(&["SET", "lock:a", "t1", "NX", "PX", "10000"]).await,
        Reply::ok()
    );
    assert_eq!(
        c.cmd(&["SET", "lock:a", "t2", "NX", "PX", "10000"]).await,
        nil()
    );
    assert_eq!(
        c.cmd(&["EVAL", UNLOCK, "1", "lock:a", "t2"]).await,
        Reply::Integer(0)
    );
    assert_eq!(
        c.cmd(&["EVAL", UNLOCK, "1", "lock:a", "t1"]).await,
        Reply::Integer(1)
    );
    assert_eq!(
        c.cmd(&["set", "lock:a", "t2", "px", "10000", "nx"]).await,
        Reply::ok()
    );
    assert_eq!(
        c.cmd(&["EVAL", UNLOCK, "1", "lock:a", "t2"]).await,
        Reply::Integer(1)
    );
}

#[tokio::test]
async fn acquire_contend_release_with_1_3_and_5_masters() {
    for n in [1, 3, 5] {
        let ms = masters(n);
        let p = proxy_for(&ms).await.to_string();
        lock_cycle(&p).await;
    }
}

#[tokio::test]
async fn a_grant_leaves_token_and_ttl_on_a_quorum() {
    for n in [3, 5] {
        let ms = masters(n);
        let p = proxy_for(&ms).await.to_string();
        let mut c = Client::connect(&p).await;
        assert_eq!(
            c.cmd(&["SET", "res", "tok-123", "NX", "EX", "20"]).await,
            Reply::ok()
        );
        let mut holding = 0;
        for m in &ms {
            let mut d = m.client().await;
            let v = d.cmd(&["GET", "res"]).await;
            let ttl = d.cmd(&["PTTL", "res"]).await;
            if v == Reply::bulk("tok-123")
                && matches!(ttl, Reply::Integer(t) if t > 0 && t <= 20_000)
            {
                holding += 1;
            }
        }
        assert!(
            holding >= redlock_proxy::quorum::quorum(n),
            "only {holding} of {n} masters hold the lock"
        );
    }
}

#[tokio::test]
async fn locks_work_with_a_minority_killed() {
    for (n, kill) in [(3, 1), (5, 2)] {
        let mut ms = masters(n);
        let p = proxy_for(&ms).await.to_string();
        for m in ms.iter_mut().take(kill) {
            m.kill();
        }
        lock_cycle(&p).await;
    }
}

#[tokio::test]
async fn majority_killed_refuses_and_leaves_no_stray_keys() {
    for (n, kill) in [(3, 2), (5, 3)] {
        let mut ms = masters(n);
        let p = proxy_for(&ms).await.to_string();
        for m in ms.iter_mut().take(kill) {
            m.kill();
        }
        let mut c = Client::connect(&p).await;
        for i in 0..5 {
            let key = format!("stray:{i}");
            assert_eq!(
                c.cmd(&["SET", &key, "tok", "NX", "PX", "30000"]).await,
                nil()
            );
        }
        // The refused attempts were rolled back on the survivors; a PING through the same
        // masters' queues orders us after those rollbacks.
        assert_eq!(c.cmd(&["PING"]).await, Reply::simple("PONG"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        for i in 0..5 {
            let key = format!("stray:{i}");
            let left = values_on(&ms[kill..], &key).await;
            assert!(
                left.iter().all(Option::is_none),
                "stray {key} left on survivors: {left:?}"
            );
        }
    }
}

/// `(value on each master, PTTL on each master)` of `key`.
async fn state_on(ms: &[Master], key: &str) -> (Vec<Option<String>>, Vec<Reply>) {
    let mut ttls = Vec::new();
    for m in ms {
        ttls.push(m.client().await.cmd(&["PTTL", key]).await);
    }
    (values_on(ms, key).await, ttls)
}

#[tokio::test]
async fn a_second_set_nx_with_the_same_value_is_refused_as_redis_does() {
    // One plain redis-server is the reference.
    let reference = Master::start();
    let mut one = reference.client().await;
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    for client in [&mut one, &mut c] {
        assert_eq!(
            client
                .raw(&["SET", "same", "v1", "NX", "PX", "10000"])
                .await,
            "+OK\r\n"
        );
        // Redis: the key exists, so nil, even though it holds the caller's own value.
        assert_eq!(
            client
                .raw(&["SET", "same", "v1", "NX", "PX", "10000"])
                .await,
            "$-1\r\n"
        );
        assert_eq!(
            client.raw(&["set", "same", "v1", "nx", "ex", "10"]).await,
            "$-1\r\n"
        );
    }
    // The refused attempts changed nothing: the first grant's value and TTL stay.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (values, ttls) = state_on(&ms, "same").await;
    assert_eq!(values, vec![Some("v1".to_string()); 3]);
    for t in ttls {
        assert!(
            matches!(t, Reply::Integer(t) if t > 0 && t <= 9_800),
            "TTL was restarted by a refused SET NX: {t:?}"
        );
    }
}

/// Two clients whose values are not unique per holder (npm `redis-lock` uses a timestamp,
/// `Redis::DistLock` a host name) race for one lock with the same value, 50 rounds: exactly one
/// may be granted each round. With the unsafe `set_nx_reentrant` switched on (the negative
/// control) both are.
#[tokio::test]
async fn two_callers_with_the_same_value_never_both_hold_the_lock() {
    let ms = masters(3);
    for reentrant in [false, true] {
        let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
        let refs: Vec<&str> = addrs.iter().map(|s| s.as_str()).collect();
        let mut config = config_for(&refs);
        config.set_nx_reentrant = reentrant;
        let p = proxy(config).await.to_string();
        let (mut a, mut b) = (Client::connect(&p).await, Client::connect(&p).await);
        let mut both = 0;
        for round in 0..50 {
            let key = format!("dup:{reentrant}:{round}");
            let value = "1700000000123";
            let set = ["SET", key.as_str(), value, "NX", "PX", "10000"];
            let (ra, rb) = tokio::join!(a.cmd(&set), b.cmd(&set));
            let granted = [ra, rb].iter().filter(|r| **r == Reply::ok()).count();
            assert!(granted >= 1, "round {round}: nobody granted");
            if granted == 2 {
                both += 1;
            }
        }
        if reentrant {
            assert_eq!(both, 50, "the negative control must grant both callers");
        } else {
            assert_eq!(both, 0, "two holders of one lock");
        }
    }
}

/// A listener that accepts connections and never answers.
async fn silent_master() -> (String, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_silent_master_costs_at_most_the_node_timeout() {
    let ms = masters(2);
    let (silent, _task) = silent_master().await;
    let mut config = config_for(&[&ms[0].addr(), &ms[1].addr(), &silent]);
    config.node_timeout_ms = 100;
    let p = proxy(config).await.to_string();
    let mut c = Client::connect(&p).await;
    for i in 0..5 {
        let start = Instant::now();
        assert_eq!(
            c.cmd(&["SET", &format!("s:{i}"), "t", "NX", "PX", "10000"])
                .await,
            Reply::ok()
        );
        assert!(
            start.elapsed() < Duration::from_millis(600),
            "took {:?}",
            start.elapsed()
        );
    }
}

#[tokio::test]
async fn a_master_that_stops_answering_costs_at_most_the_node_timeout() {
    let ms = masters(3);
    let addrs: Vec<String> = ms.iter().map(|m| m.addr()).collect();
    let mut config = config_for(&[&addrs[0], &addrs[1], &addrs[2]]);
    config.node_timeout_ms = 100;
    let p = proxy(config).await.to_string();
    let mut c = Client::connect(&p).await;
    ms[2].pause();
    for i in 0..10 {
        let start = Instant::now();
        assert_eq!(
            c.cmd(&["SET", &format!("p:{i}"), "t", "NX", "PX", "10000"])
                .await,
            Reply::ok()
        );
        assert!(
            start.elapsed() < Duration::from_millis(600),
            "took {:?}",
            start.elapsed()
        );
    }
    ms[2].resume();
}

#[tokio::test]
async fn a_thousand_pipelined_commands_come_back_in_order() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let mut wire = Vec::new();
    let mut expect = Vec::new();
    for i in 0..1000 {
        let parts: Vec<String> = if i % 2 == 0 {
            // Ten keys: the first SET on each key wins, the rest are refused.
            let key = format!("pipe:{}", (i / 2) % 10);
            expect.push(if i / 2 < 10 {
                "+OK\r\n".to_string()
            } else {
                "$-1\r\n".to_string()
            });
            vec![
                "SET".into(),
                key,
                format!("t{i}"),
                "NX".into(),
                "PX".into(),
                "30000".into(),
            ]
        } else {
            let s = i.to_string();
            expect.push(format!("${}\r\n{s}\r\n", s.len()));
            vec!["ECHO".into(), s]
        };
        let refs: Vec<&[u8]> = parts.iter().map(|s| s.as_bytes()).collect();
        wire.extend_from_slice(&redlock_proxy::wire::master::command(&refs));
    }
    c.send_raw(&wire).await;
    for (i, want) in expect.iter().enumerate() {
        let got = String::from_utf8(c.read_raw().await).unwrap();
        assert_eq!(&got, want, "reply {i}");
    }
}

#[tokio::test]
async fn unknown_commands_get_redis_wording_and_the_connection_stays() {
    let ms = masters(1);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.raw(&["foo", "a", "b"]).await,
        "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"
    );
    assert_eq!(
        c.raw(&["SET", "k"]).await,
        "-ERR wrong number of arguments for 'set' command\r\n"
    );
    assert_eq!(
        c.raw(&["SET", "k", "v", "NX", "BOGUS"]).await,
        "-ERR syntax error\r\n"
    );
    // A repeated option is Redis's syntax too: the last expiry counts (a lock, granted).
    assert_eq!(
        c.raw(&["SET", "k", "v", "NX", "PX", "abc", "PX", "10000"])
            .await,
        "+OK\r\n"
    );
    let ttl = c.cmd(&["PTTL", "k"]).await;
    assert!(matches!(ttl, Reply::Integer(9_000..=10_000)), "{ttl:?}");
    assert_eq!(
        c.raw(&["SET", "k2", "v", "NX", "PX", "abc", "EX", "10"])
            .await,
        "-ERR syntax error\r\n"
    );
    assert_eq!(c.raw(&["PING"]).await, "+PONG\r\n");
}

/// A client that half-closes after its requests (`nc -N`, a script piping commands in) gets
/// every answer, as from Redis, and then the connection closes. Before, the proxy closed at
/// once: the lock was granted on the masters and nobody was told.
#[tokio::test]
async fn a_half_closed_client_still_gets_its_answers() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    c.send(&["SET", "hc", "t", "NX", "PX", "10000"]).await;
    c.send(&["GET", "hc"]).await;
    c.send(&["SET", "hc", "u", "NX", "PX", "10000"]).await;
    c.send_raw(b"*2\r\n$3\r\nGET").await;
    c.shutdown_write().await;
    for want in ["+OK\r\n", "$1\r\nt\r\n", "$-1\r\n"] {
        assert_eq!(String::from_utf8(c.read_raw().await).unwrap(), want);
    }
    // The unfinished request is dropped, as Redis drops it.
    assert!(c.closed().await);
}

/// `CLIENT REPLY OFF|ON|SKIP` as on Redis. A client that turned its replies off and got one
/// anyway would read every later reply as the answer to the command before it: here the
/// `+OK` of an unrelated `SET` would be read as the grant of a lock that is taken.
#[tokio::test]
async fn client_reply_off_and_skip_drop_exactly_the_replies_redis_drops() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut holder = Client::connect(&p).await;
    assert_eq!(
        holder
            .raw(&["SET", "lock", "theirs", "NX", "PX", "10000"])
            .await,
        "+OK\r\n"
    );
    let mut c = Client::connect(&p).await;
    // Pipelined as a fire-and-forget client sends them: only the lock's answer comes back.
    c.send(&["CLIENT", "REPLY", "SKIP"]).await;
    c.send(&["SET", "counter", "1", "PX", "10000"]).await;
    c.send(&["SET", "lock", "mine", "NX", "PX", "10000"]).await;
    assert_eq!(String::from_utf8(c.read_raw().await).unwrap(), "$-1\r\n");
    c.send(&["CLIENT", "REPLY", "OFF"]).await;
    c.send(&["SET", "counter", "2", "PX", "10000"]).await;
    c.send(&["GET", "counter"]).await;
    c.send(&["CLIENT", "REPLY", "ON"]).await;
    assert_eq!(String::from_utf8(c.read_raw().await).unwrap(), "+OK\r\n");
    assert_eq!(c.raw(&["GET", "counter"]).await, "$1\r\n2\r\n");
    // `ON` right after `SKIP` is answered; `SKIP` while off changes nothing.
    c.send(&["CLIENT", "REPLY", "SKIP"]).await;
    assert_eq!(c.raw(&["CLIENT", "REPLY", "ON"]).await, "+OK\r\n");
    c.send(&["CLIENT", "REPLY", "OFF"]).await;
    c.send(&["CLIENT", "REPLY", "SKIP"]).await;
    c.send(&["GET", "counter"]).await;
    assert_eq!(c.raw(&["CLIENT", "REPLY", "ON"]).await, "+OK\r\n");
    assert_eq!(
        c.raw(&["CLIENT", "REPLY", "MAYBE"]).await,
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        c.raw(&["CLIENT", "REPLY"]).await,
        "-ERR wrong number of arguments for 'client|reply' command\r\n"
    );
    // Inside a transaction it would cut EXEC's array short: refused, and EXEC aborts.
    assert_eq!(c.raw(&["MULTI"]).await, "+OK\r\n");
    assert!(
        c.raw(&["CLIENT", "REPLY", "SKIP"])
            .await
            .starts_with("-ERR Command not allowed inside a transaction")
    );
    assert!(c.raw(&["EXEC"]).await.starts_with("-EXECABORT"));
    // RESET turns replies back on.
    c.send(&["CLIENT", "REPLY", "OFF"]).await;
    assert_eq!(c.raw(&["RESET"]).await, "+RESET\r\n");
    assert_eq!(c.raw(&["PING"]).await, "+PONG\r\n");
}

#[tokio::test]
async fn resp3_after_hello_3() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let hello = c.raw(&["HELLO", "3"]).await;
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert!(hello.contains("proto\r\n:3\r\n"), "{hello}");
    assert_eq!(
        c.raw(&["SET", "r3", "a", "NX", "PX", "10000"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        c.raw(&["SET", "r3", "b", "NX", "PX", "10000"]).await,
        "_\r\n"
    );
    assert_eq!(c.raw(&["EVAL", UNLOCK, "1", "r3", "a"]).await, ":1\r\n");
    assert_eq!(c.raw(&["HELLO", "2"]).await.chars().next(), Some('*'));
    assert_eq!(
        c.raw(&["SET", "r3", "a", "NX", "PX", "10000"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        c.raw(&["SET", "r3", "b", "NX", "PX", "10000"]).await,
        "$-1\r\n"
    );
    assert_eq!(
        c.raw(&["HELLO", "4"]).await,
        "-NOPROTO unsupported protocol version\r\n"
    );
}

#[tokio::test]
async fn handshakes_that_clients_send() {
    let ms = masters(1);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    assert_eq!(c.raw(&["CLIENT", "SETNAME", "worker-1"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["CLIENT", "GETNAME"]).await, "$8\r\nworker-1\r\n");
    assert_eq!(
        c.raw(&["CLIENT", "SETINFO", "LIB-NAME", "x"]).await,
        "+OK\r\n"
    );
    assert!(c.raw(&["CLIENT", "ID"]).await.starts_with(':'));
    assert_eq!(c.raw(&["SELECT", "0"]).await, "+OK\r\n");
    assert!(
        c.raw(&["SELECT", "1"])
            .await
            .starts_with("-ERR DB index is out of range")
    );
    assert_eq!(c.raw(&["ECHO", "hi"]).await, "$2\r\nhi\r\n");
    assert_eq!(c.raw(&["PING", "x"]).await, "$1\r\nx\r\n");
    // Redisson's synced-replicas check: the masters are independent, no replica acknowledges.
    assert_eq!(c.raw(&["WAIT", "1", "1000"]).await, ":0\r\n");
    assert_eq!(c.raw(&["WAIT", "0", "0"]).await, ":0\r\n");
    assert_eq!(
        c.raw(&["WAIT", "x", "0"]).await,
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        c.raw(&["WAIT", "1", "-1"]).await,
        "-ERR timeout is negative\r\n"
    );
    assert!(c.raw(&["COMMAND", "COUNT"]).await.starts_with(':'));
    assert!(c.raw(&["COMMAND", "DOCS"]).await.starts_with('*'));
    assert!(
        c.raw(&["COMMAND", "INFO", "set"])
            .await
            .starts_with("*1\r\n*10\r\n$3\r\nset\r\n")
    );
    let info = c.text(&["INFO"]).await;
    for f in [
        "redis_version",
        "masters",
        "masters_up",
        "quorum",
        "master0",
    ] {
        assert!(!field(&info, f).is_empty(), "INFO lacks {f}: {info}");
    }
    assert_eq!(c.raw(&["AUTH", "pw"]).await.get(..5), Some("-ERR "));
    assert_eq!(c.raw(&["RESET"]).await, "+RESET\r\n");
    assert_eq!(c.raw(&["CLIENT", "GETNAME"]).await, "$-1\r\n");
    assert_eq!(c.raw(&["QUIT"]).await, "+OK\r\n");
    assert!(c.closed().await);
}

#[tokio::test]
async fn password_is_required_when_configured() {
    let ms = masters(1);
    let mut config = config_for(&[&ms[0].addr()]);
    config.password = Some("s3cret".into());
    let p = proxy(config).await.to_string();
    let mut c = Client::connect(&p).await;
    assert_eq!(
        c.raw(&["GET", "k"]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        c.raw(&["AUTH", "wrong"]).await,
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(c.raw(&["AUTH", "default", "s3cret"]).await, "+OK\r\n");
    assert_eq!(c.raw(&["GET", "k"]).await, "$-1\r\n");
    let mut c = Client::connect(&p).await;
    assert!(
        c.raw(&["HELLO", "3", "AUTH", "default", "s3cret"])
            .await
            .starts_with('%')
    );
}

#[tokio::test]
async fn inline_commands_work() {
    let ms = masters(1);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    c.send_raw(b"PING\r\nSET lk \"t 1\" NX PX 5000\r\nGET lk\r\n")
        .await;
    assert_eq!(c.read_raw().await, b"+PONG\r\n");
    assert_eq!(c.read_raw().await, b"+OK\r\n");
    assert_eq!(c.read_raw().await, b"$3\r\nt 1\r\n");
}

#[tokio::test]
async fn bad_input_gets_an_error_and_a_closed_connection_without_harming_others() {
    let ms = masters(1);
    let p = proxy_for(&ms).await.to_string();
    let mut bystander = Client::connect(&p).await;
    assert_eq!(
        bystander
            .raw(&["SET", "bx", "t", "NX", "PX", "10000"])
            .await,
        "+OK\r\n"
    );
    for (input, error) in [
        (
            &b"*1\r\n$99999999999\r\n"[..],
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*99999999999\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n*1\r\n$1\r\na\r\n",
            "-ERR Protocol error: expected '$', got '*'\r\n",
        ),
        (
            b"SET \"unterminated\r\n",
            "-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ] {
        let mut c = Client::connect(&p).await;
        c.send_raw(b"PING\r\n").await;
        c.send_raw(input).await;
        assert_eq!(c.read_raw().await, b"+PONG\r\n");
        assert_eq!(String::from_utf8(c.read_raw().await).unwrap(), error);
        assert!(c.closed().await, "connection closes after {error}");
    }
    // Garbage without any newline beyond the inline limit.
    let mut c = Client::connect(&p).await;
    c.send_raw(&vec![b'x'; 100 * 1024]).await;
    assert_eq!(
        c.read_raw().await,
        b"-ERR Protocol error: too big inline request\r\n"
    );
    // A half-sent frame followed by a disconnect.
    let mut c = Client::connect(&p).await;
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$2\r\nk").await;
    drop(c);
    assert_eq!(bystander.raw(&["GET", "bx"]).await, "$1\r\nt\r\n");
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli must be installed (scripts/test.sh installs it)");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_user_walkthrough_with_redis_cli() {
    let ms = masters(3);
    let port = proxy_for(&ms).await.port();
    tokio::task::spawn_blocking(move || {
        assert_eq!(
            redis_cli(port, &["SET", "lock:a", "t1", "NX", "PX", "10000"]),
            "OK"
        );
        assert_eq!(
            redis_cli(port, &["SET", "lock:a", "t2", "NX", "PX", "10000"]),
            ""
        );
        assert_eq!(redis_cli(port, &["EVAL", UNLOCK, "1", "lock:a", "t2"]), "0");
        assert_eq!(redis_cli(port, &["EVAL", UNLOCK, "1", "lock:a", "t1"]), "1");
        assert_eq!(
            redis_cli(port, &["SET", "lock:a", "t2", "NX", "PX", "10000"]),
            "OK"
        );
        assert_eq!(
            redis_cli(port, &["foo", "a"]),
            "ERR unknown command 'foo', with args beginning with: 'a'"
        );
        assert_eq!(
            redis_cli(
                port,
                &["--no-raw", "SET", "lock:a", "t3", "NX", "PX", "10000"]
            ),
            "(nil)"
        );
    })
    .await
    .unwrap();
}

#[test]
fn invalid_configuration_is_one_line_and_a_nonzero_exit() {
    let bin = env!("CARGO_BIN_EXE_redlock-proxy");
    let dir = std::env::temp_dir().join(format!("rlp-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_key = dir.join("bad.toml");
    std::fs::write(
        &bad_key,
        "backends = [\"127.0.0.1:6379\"]\nnot_a_setting = 1\n",
    )
    .unwrap();
    for (args, needle) in [
        (vec![], "no backends"),
        (
            vec!["--backends", "127.0.0.1:6379,nope"],
            "bad backend address 'nope'",
        ),
        (
            vec!["--backends", "127.0.0.1:6379", "--node-timeout-ms", "0"],
            "node_timeout_ms must be greater than 0",
        ),
        (
            vec!["--config", bad_key.to_str().unwrap()],
            "unknown field `not_a_setting`",
        ),
        (
            vec!["--backends", "127.0.0.1:6379", "--set", "drift_factor=2"],
            "drift_factor",
        ),
    ] {
        let out = std::process::Command::new(bin)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
