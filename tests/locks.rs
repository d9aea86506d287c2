//! Locks: quorum `SET NX PX` and the unlock script against real masters (N = 1, 3, 5), what a
//! grant leaves on the masters, a minority and a majority of them killed, `SET NX` answered as
//! one Redis answers it (every form a lock owner uses, the same value twice, binary tokens), the
//! TTL cap and the default TTL; then the Redis-like front end locks arrive through: pipelining,
//! errors, a half-closed client, `CLIENT REPLY`, RESP3, handshakes, inline commands, redis-cli.

mod support;

use std::time::Duration;

use support::*;

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
            holding >= quorum(n),
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

// ---------------------------------------------------------------------------------------------
// `SET NX` as one Redis answers it.

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

/// `SET key token NX EXAT|PXAT <past>` answers `OK` only where a quorum of masters lack the
/// key (one Redis: `OK` where the key is missing, the value born expired), and writes nothing.
/// A holder on a quorum, with the key missing on the rest, gets nil; a key on a minority only
/// (a refused attempt's leftover) does not; with masters down, the ones left must still be a
/// quorum that lack the key. Negative control: decided by the first master alone (the unsafe
/// `legacy_decision = "first_master"`), the `OK` stands beside a holder on a quorum.
#[tokio::test]
async fn set_nx_with_an_expiry_already_past_is_ok_only_where_a_quorum_lack_the_key() {
    let mut ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let first_master = proxy_with(&ms, |c| c.legacy_decision = LegacyDecision::FirstMaster).await;
    let past = (now_ms() - 100_000).to_string();
    let set_past = |key: &'static str| ["SET", key, "me", "NX", "PXAT", ""];
    async fn plant(ms: &[Master], key: &str, on: &[usize]) {
        for &i in on {
            let mut m = ms[i].client().await;
            assert_eq!(
                m.cmd(&["SET", key, "holder", "PX", "100000"]).await,
                Reply::ok()
            );
        }
    }
    plant(&ms, "held", &[1, 2]).await;
    plant(&ms, "minority", &[0]).await;
    let mut answers = Vec::new();
    for proxy in [&p, &first_master] {
        let mut c = Client::connect(proxy).await;
        for key in ["missing", "held", "minority"] {
            let mut args = set_past(key);
            args[5] = &past;
            answers.push(c.raw(&args).await);
        }
    }
    let (ok, nil) = ("+OK\r\n", "$-1\r\n");
    assert_eq!(answers[..3], [ok, nil, ok], "missing, held, minority");
    assert_eq!(
        answers[3..],
        [ok, ok, nil],
        "the control: first master only"
    );
    // Nothing was written: the holder keeps its key, the missing key stays missing.
    assert_eq!(
        values_on(&ms, "held").await,
        vec![None, Some("holder".into()), Some("holder".into())]
    );
    assert_eq!(values_on(&ms, "missing").await, vec![None, None, None]);
    // Two masters down: the one left lacks the key, but is no quorum.
    ms[1].kill();
    ms[2].kill();
    let mut args = set_past("missing");
    args[5] = &past;
    assert_eq!(Client::connect(&p).await.raw(&args).await, nil);
}

/// Two clients whose values are not unique per holder (npm `redis-lock` uses a timestamp,
/// `Redis::DistLock` a host name) race for one lock with the same value, 50 rounds: exactly one
/// may be granted each round. With the unsafe `set_nx_reentrant` switched on (the negative
/// control) both are.
#[tokio::test]
async fn two_callers_with_the_same_value_never_both_hold_the_lock() {
    let ms = masters(3);
    for reentrant in [false, true] {
        let p = proxy_with(&ms, |c| c.set_nx_reentrant = reentrant).await;
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

#[tokio::test]
async fn set_forms_lock_owners_use() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let exat = (now.as_secs() + 10).to_string();
    let pxat = (now.as_millis() + 10_000).to_string();
    for (i, form) in [
        vec!["NX", "PX", "10000"],
        vec!["px", "10000", "nx"],
        vec!["nx", "ex", "10"],
        vec!["EX", "10", "NX"],
        vec!["NX", "EXAT", &exat],
        vec!["pxat", &pxat, "nx"],
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("form:{i}");
        let mut args = vec!["SET", &key, "tok"];
        args.extend(&form);
        assert_eq!(c.cmd(&args).await, Reply::ok(), "{form:?}");
        // As on one Redis, a second SET NX is refused whatever its value (the caller's own
        // included); another token is refused too.
        assert_eq!(c.cmd(&args).await, Reply::Nil, "{form:?} again");
        let mut other = args.clone();
        other[2] = "other";
        assert_eq!(c.cmd(&other).await, Reply::Nil, "{form:?} by another token");
        for m in &ms {
            let t = m.client().await.cmd(&["PTTL", &key]).await;
            assert!(
                matches!(t, Reply::Integer(t) if t > 8000 && t <= 10_000),
                "{form:?}: {t:?}"
            );
        }
    }
}

/// A key's value and raw PTTL.
async fn value_and_pttl(c: &mut Client, key: &str) -> (Option<String>, i64) {
    let v = match c.cmd(&["GET", key]).await {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    };
    match c.cmd(&["PTTL", key]).await {
        Reply::Integer(t) => (v, t),
        other => panic!("PTTL answered {other:?}"),
    }
}

/// Issue 9: every `SET ... NX` form a lock library may send, from every starting state, replies
/// and leaves the key exactly as on one plain redis-server (the value and whether it has a TTL;
/// the TTL itself within a second). This includes `SET k v NX` twice with the same value, which
/// Redis refuses the second time: libraries whose values are timestamps or host names rely on it.
/// Negative control: the same table with the unsafe `set_nx_reentrant` differs from Redis.
#[tokio::test]
async fn set_nx_forms_answer_what_one_redis_answers() {
    let reference = Master::start();
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mismatches = set_nx_table(&reference, &ms, &p).await;
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));

    let unsafe_ms = masters(3);
    let unsafe_p = proxy_with(&unsafe_ms, |c| c.set_nx_reentrant = true).await;
    let mismatches = set_nx_table(&reference, &unsafe_ms, &unsafe_p).await;
    assert!(
        mismatches.iter().any(|m| m.contains("from Mine, call 1"))
            && mismatches
                .iter()
                .any(|m| m.contains("from Missing, call 2")),
        "the reentrant opt-in should differ from Redis on a key already holding the value: {mismatches:#?}"
    );
}

/// Runs every SET NX form from every starting state on `reference` and through `proxy`, and
/// returns one line per difference.
async fn set_nx_table(reference: &Master, ms: &[Master], proxy: &str) -> Vec<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let exat = (now.as_secs() + 100).to_string();
    let pxat = (now.as_millis() + 100_000).to_string();
    // Already past: Redis answers OK where the key is missing (born expired), nil where not.
    let exat_past = (now.as_secs() - 100).to_string();
    let pxat_past = (now.as_millis() - 100_000).to_string();
    // Lock forms: they must answer exactly as Redis. The refused forms (a lock that could never
    // expire, KEEPTTL, GET; README "supported commands") must answer an error and touch nothing.
    let forms: Vec<(Vec<&str>, bool)> = vec![
        (vec!["NX", "PX", "10000"], true),
        (vec!["px", "10000", "nx"], true),
        (vec!["Nx", "eX", "10"], true),
        (vec!["EX", "10", "NX"], true),
        (vec!["NX", "EXAT", &exat], true),
        (vec!["pxat", &pxat, "nx"], true),
        (vec!["nX", "Px", "10000"], true),
        (vec!["NX", "EXAT", &exat_past], true),
        (vec!["pxat", &pxat_past, "nx"], true),
        (vec!["NX"], false),
        (vec!["nx"], false),
        (vec!["NX", "KEEPTTL"], false),
        (vec!["keepttl", "nx"], false),
        (vec!["NX", "GET"], false),
        (vec!["NX", "PX", "10000", "GET"], false),
        (vec!["get", "ex", "10", "nx"], false),
        (vec!["NX", "KEEPTTL", "GET"], false),
        (vec!["NX", "PXAT", &pxat, "GET"], false),
    ];
    let starts = ["Missing", "Mine", "Other", "Expired"];
    let mut r = reference.client().await;
    let mut c = Client::connect(proxy).await;
    // Set every starting state up first, then wait once for the expired ones.
    let mut cases = Vec::new();
    for (i, (form, supported)) in forms.iter().enumerate() {
        for start in starts {
            let key = format!("setnx:{i}:{start}");
            let (token, px) = match start {
                "Mine" => ("tok", "10000"),
                "Other" => ("other", "10000"),
                "Expired" => ("tok", "20"),
                _ => ("", ""),
            };
            if !token.is_empty() {
                assert_eq!(r.cmd(&["SET", &key, token, "PX", px]).await, Reply::ok());
                assert_eq!(
                    c.cmd(&["SET", &key, token, "NX", "PX", px]).await,
                    Reply::ok()
                );
            }
            cases.push((key, form.clone(), *supported, start));
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut mismatches = Vec::new();
    for (key, form, supported, start) in cases {
        let mut args = vec!["SET", key.as_str(), "tok"];
        args.extend(&form);
        if !supported {
            let before: Vec<_> = values_on(ms, &key).await;
            let got = c.raw(&args).await;
            let after: Vec<_> = values_on(ms, &key).await;
            if !got.starts_with("-ERR redlock-proxy ") || before != after {
                mismatches.push(format!(
                    "{form:?} from {start}: should be refused, untouched; got {got:?}, {before:?} -> {after:?}"
                ));
            }
            continue;
        }
        // Twice: the second call is `SET k v NX` with the value the first may have written.
        for round in 1..=2 {
            let want = r.raw(&args).await;
            let got = c.raw(&args).await;
            if want != got {
                mismatches.push(format!(
                    "{form:?} from {start}, call {round}: Redis {want:?}, proxy {got:?}"
                ));
            }
            let (wv, wt) = value_and_pttl(&mut r, &key).await;
            let mut per_master = Vec::new();
            for m in ms {
                per_master.push(value_and_pttl(&mut m.client().await, &key).await);
            }
            let majority = per_master
                .iter()
                .find(|(v, _)| per_master.iter().filter(|(o, _)| o == v).count() > ms.len() / 2)
                .cloned();
            let Some((gv, gt)) = majority else {
                mismatches.push(format!("{form:?} from {start}: no majority {per_master:?}"));
                continue;
            };
            let ttl_ok = if wt < 0 || gt < 0 {
                wt == gt
            } else {
                (wt - gt).abs() <= 1000
            };
            if wv != gv || !ttl_ok {
                mismatches.push(format!(
                    "{form:?} from {start}, call {round}: Redis ({wv:?}, {wt}), proxy majority ({gv:?}, {gt})"
                ));
            }
        }
    }
    mismatches
}

#[tokio::test]
async fn tokens_are_binary_safe() {
    let ms = masters(3);
    let p = proxy_for(&ms).await.to_string();
    let mut c = Client::connect(&p).await;
    // 20 raw bytes, as rslock makes them: not UTF-8, with CR, LF and NUL inside.
    let token: Vec<u8> = vec![
        0xff, 0x00, 0x0d, 0x0a, 0x80, 0xfe, 0x41, 0x00, 0x0a, 0xc3, 0x28, 0x01, 0x02, 0x03, 0x7f,
        0x90, 0xaa, 0xbb, 0x0d, 0xee,
    ];
    assert_eq!(
        c.cmd_bytes(&[b"SET", b"bin", &token, b"NX", b"PX", b"5000"])
            .await,
        Reply::ok()
    );
    for m in &ms {
        assert_eq!(
            m.client().await.cmd_bytes(&[b"GET", b"bin"]).await,
            Reply::Bulk(token.clone().into())
        );
    }
    let mut almost = token.clone();
    almost[19] ^= 1;
    let unlock = lua("rslock_UNLOCK_SCRIPT");
    let eval = |t: Vec<u8>| {
        let unlock = unlock.clone();
        let p = p.clone();
        async move {
            let mut c = Client::connect(&p).await;
            c.cmd_bytes(&[b"EVAL", unlock.as_bytes(), b"1", b"bin", &t])
                .await
        }
    };
    assert_eq!(eval(almost).await, Reply::Integer(0));
    assert_eq!(eval(token).await, Reply::Integer(1));
}

#[tokio::test]
async fn the_ttl_cap_and_the_default_ttl() {
    let ms = masters(3);
    let p = proxy_with(&ms, |c| c.max_ttl_ms = 10_000).await;
    let mut c = Client::connect(&p).await;
    let cap = "-ERR lock TTL 20000 ms exceeds the proxy's max_ttl_ms (10000 ms)\r\n";
    assert_eq!(c.raw(&["SET", "cap", "t", "NX", "PX", "20000"]).await, cap);
    assert_eq!(c.raw(&["SET", "cap", "t", "NX", "EX", "20"]).await, cap);
    let acquire = lua("redlock5_ACQUIRE_SCRIPT");
    assert_eq!(
        c.raw(&["EVAL", &acquire, "1", "cap", "t", "20000"]).await,
        cap
    );
    assert_eq!(
        c.raw(&["SET", "cap", "t", "NX", "PX", "8000"]).await,
        "+OK\r\n"
    );
    let extend = lua("redispy_extend");
    // Replace: over the cap up front. Add: 8 s left + 5 s would exceed it on the masters.
    assert_eq!(
        c.raw(&["EVAL", &extend, "1", "cap", "t", "20000", "1"])
            .await,
        cap
    );
    assert_eq!(
        c.raw(&["EVAL", &extend, "1", "cap", "t", "5000", "0"])
            .await,
        "-ERR lock TTL would exceed the proxy's max_ttl_ms (10000 ms)\r\n"
    );
    assert_eq!(
        c.raw(&["EVAL", &extend, "1", "cap", "t", "1000", "0"])
            .await,
        ":1\r\n"
    );
    // SET NX without a TTL: refused by default, never a lock that cannot expire.
    let refused = c.raw(&["SET", "forever", "t", "NX"]).await;
    assert!(
        refused.starts_with("-ERR") && refused.contains("expir"),
        "{refused}"
    );
    assert_eq!(values_on(&ms, "forever").await, vec![None, None, None]);
    // With default_ttl_ms it gets that TTL.
    let p = proxy_with(&ms, |c| c.default_ttl_ms = 3000).await;
    let mut c = Client::connect(&p).await;
    assert_eq!(c.raw(&["SET", "forever", "t", "NX"]).await, "+OK\r\n");
    for m in &ms {
        let t = m.client().await.cmd(&["PTTL", "forever"]).await;
        assert!(
            matches!(t, Reply::Integer(t) if t > 2000 && t <= 3000),
            "{t:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The front end: what a Redis client sees of the connection.

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
        wire.extend_from_slice(&command(&refs));
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

/// The connection and introspection commands, with wrong arities and bad options, answer as
/// one redis-server does, word for word. The proxy answers these itself, in Redis 7.0's words,
/// so the reference is Debian's redis-server even when the suite runs with Valkey members
/// (Valkey words a nested `MULTI` and `NOSCRIPT` differently).
#[tokio::test]
async fn connection_commands_answer_as_one_redis_does() {
    differential_on(
        Master::start_server("redis-server".into()),
        &[
            "PING",
            "PING a b",
            "ECHO",
            "ECHO a b",
            "SELECT",
            "SELECT 0",
            "SELECT abc",
            "SELECT 0 1",
            "SELECT 2147483648",
            "SELECT -9223372036854775808",
            "SELECT 99999999999999999999",
            "AUTH",
            "AUTH a b c",
            "HELLO 1",
            "HELLO abc",
            "HELLO 2 AUTH",
            "HELLO 2 SETNAME",
            "HELLO 2 FOO",
            "CLIENT",
            "CLIENT FOO",
            "CLIENT SETNAME",
            "CLIENT SETNAME a b",
            "CLIENT SETNAME ok",
            "CLIENT GETNAME",
            "CLIENT GETNAME x",
            "CLIENT ID x",
            "CLIENT REPLY",
            "CLIENT REPLY FOO",
            "CLIENT NO-EVICT",
            "CLIENT NO-EVICT maybe",
            "CLIENT NO-EVICT on",
            "CLIENT NO-EVICT OFF",
            "CLIENT NO-EVICT on x",
            "CLIENT HELP x",
            "COMMAND FOO",
            "COMMAND COUNT x",
            "COMMAND HELP x",
            "COMMAND LIST x",
            "COMMAND LIST FILTERBY",
            "COMMAND LIST FILTERBY PATTERN xyz*",
            "COMMAND LIST FILTERBY MODULE x",
            "COMMAND LIST FILTERBY FOO x",
            "COMMAND INFO nosuch",
            "SCRIPT",
            "SCRIPT FOO",
            "SCRIPT HELP x",
            "SCRIPT LOAD",
            "SCRIPT EXISTS",
            "SCRIPT FLUSH FOO",
            "SCRIPT FLUSH SYNC ASYNC",
            "SCRIPT KILL x",
            "MULTI",
            "MULTI",
            "EXEC",
            "EXEC",
            "DISCARD",
            "WATCH",
            "UNWATCH x",
            "EVAL",
            "EVAL return x",
            "EVAL return -1",
            "EVAL return 2 a",
            "EVALSHA abc 0",
            "EVALSHA abc x",
            "WAIT",
            "WAIT a 0",
            "WAIT 0 -1",
            "CONFIG",
            "CONFIG GET",
            "CONFIG FOO",
            "CONFIG nosuch x",
            "RESET x",
            "foobar",
            "FooBar a b c",
            "QUIT x",
        ],
    )
    .await;
}

/// `CLIENT SETINFO` (Redis 7.2, Valkey; Redis 7.0 has none) answers as Valkey 8.1 does, the
/// attribute's characters checked as a client name's are.
#[tokio::test]
async fn client_setinfo_answers_as_valkey_does() {
    let steps = [
        "CLIENT SETINFO lib-name redis-py",
        "CLIENT SETINFO LIB-VER 5.0.1",
        "CLIENT SETINFO lib-name ",
        "CLIENT SETINFO lib-name a\tb",
        "CLIENT SETINFO Lib-Ver é",
        "CLIENT SETINFO lib-name a b",
        "CLIENT SETINFO foo x",
        "CLIENT SETINFO lib-name",
    ];
    let valkey = Master::start_server(valkey_server("8.1"));
    let expected = support::differential::transcript(&valkey.addr(), &steps).await;
    let ms = masters(1);
    let p = proxy_for(&ms).await.to_string();
    assert_eq!(
        support::differential::transcript(&p, &steps).await,
        expected
    );
}

/// Inline commands (telnet, `redis-cli` pipes) are split as one redis-server splits them: a
/// quote may open inside a word, a closing quote ends the argument, vertical tab and form feed
/// are blanks only between arguments.
#[tokio::test]
async fn inline_quoting_splits_as_redis_does() {
    let reference = Master::start();
    let ms = masters(1);
    let p = proxy_for(&ms).await.to_string();
    for line in [
        &b"ECHO a\"b c\"\r\n"[..],
        b"ECHO x\"\\x41\"\r\n",
        b"ECHO a\"\"\r\n",
        b"ECHO a'b c'd\r\n",
        b"ECHO \x0ba\r\n",
        b"ECHO a\x0bb\r\n",
        b"ECHO 'a'\x0b\r\n",
        b"SET k\"1\" v\r\nGET k1\r\n",
    ] {
        let mut replies = Vec::new();
        for addr in [reference.addr(), p.clone()] {
            let mut c = Client::connect(&addr).await;
            c.send_raw(line).await;
            let mut got = c.read_raw().await;
            if line.starts_with(b"SET") {
                got.extend(c.read_raw().await);
            }
            replies.push(String::from_utf8_lossy(&got).into_owned());
        }
        assert_eq!(replies[1], replies[0], "{}", line.escape_ascii());
    }
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
