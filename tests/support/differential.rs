//! The proxy against one redis-server: the same steps through both, the same transcript.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Client, Master, masters, proxy_with};

/// The wall clock in ms since 1970, as legacy lock code writes its lock values.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// Runs `steps` (split on spaces; `{at}` becomes a unix time in ms 100 s ahead, `{at_s}` the
/// same in seconds) on `addr`, two connections: steps starting with `B:` go through the second
/// one.
///
/// The times are taken when a step names them, and `{at_s}` early in a second: Redis rounds a
/// `TTL` to the nearest second, so a whole-second expiry set late in a second (100 s ahead of
/// the second's start, 99.6 s ahead of now) would read 99 on one server and 100 on another.
pub async fn transcript(addr: &str, steps: &[&str]) -> Vec<String> {
    let mut a = Client::connect(addr).await;
    let mut b = Client::connect(addr).await;
    let mut out = Vec::new();
    for step in steps {
        let (c, step) = match step.strip_prefix("B:") {
            Some(rest) => (&mut b, rest),
            None => (&mut a, *step),
        };
        let args = step_args(step).await;
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        out.push(format!("{step} -> {}", c.raw(&args).await.escape_debug()));
    }
    out
}

/// The arguments of one transcript step: split on spaces, `{at}` a unix time in ms 100 s from
/// now, `{at_s}` the same in seconds, taken early in a second (see [`transcript`]).
pub async fn step_args(step: &str) -> Vec<String> {
    if step.contains("{at_s}") {
        let into_second = now_ms() % 1000;
        if into_second > 100 {
            tokio::time::sleep(std::time::Duration::from_millis(1000 - into_second)).await;
        }
    }
    let at = (now_ms() + 100_000).to_string();
    let at_s = (now_ms() / 1000 + 100).to_string();
    step.split(' ')
        .map(|s| s.replace("{at}", &at).replace("{at_s}", &at_s))
        .collect()
}

/// Runs `steps` (see [`transcript`]) on one redis-server and through a proxy in front of three
/// masters, and asserts the two transcripts are the same.
pub async fn differential(steps: &[&str]) {
    differential_on(Master::start(), steps).await
}

/// [`differential`] with `single` as the one server to compare with.
pub async fn differential_on(single: Master, steps: &[&str]) {
    let expected = transcript(&single.addr(), steps).await;
    let ms = masters(3);
    // Redis keeps a key with no expiry: so does the proxy with the guard off. (With the guard,
    // see `documented_differences_from_one_redis` in tests/legacy.rs.)
    let p = proxy_with(&ms, |c| c.legacy_guard_ttl_ms = 0).await;
    assert_eq!(transcript(&p, steps).await, expected);
}
