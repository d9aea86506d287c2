//! `BLPOP`: waiting on a signal list, as python-redis-lock's blocking `acquire()` does (its
//! unlock script pushes to `lock-signal:<name>`, and waiters pop it).
//!
//! A blocking pop cannot be forwarded as it is: it would block the connection to each master
//! that every client shares. So the proxy runs it itself: in the key's turn it sends `LPOP` to
//! every master, and answers `[key, value]` when a quorum of masters popped the same value from
//! the list (a release through the proxy pushes on every master). Otherwise it waits and tries
//! again (polling every few milliseconds, backing off to [`MAX_POLL`]) until the timeout, and
//! then answers Redis's null array. The key's turn is held only while popping, never while
//! waiting, so the release it waits for can run.
//!
//! A `BLPOP` with timeout 0 (wait forever) returns the null array after [`MAX_BLOCK`]: a
//! client gone meanwhile must not leave a waiter behind for ever, and lock libraries treat the
//! null array as "try to take the lock again".

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, sleep};

use super::action::Action;
use super::keys::{Gather, vote};
use super::session::Conn;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::wire::master::command;
use crate::wire::reply::Reply;

/// Longest pause between two rounds of pops.
pub const MAX_POLL: Duration = Duration::from_millis(50);

/// Longest a `BLPOP` waits, whatever its timeout.
pub const MAX_BLOCK: Duration = Duration::from_secs(300);

/// Parses a blocking command's timeout (seconds, a decimal number) as Redis 7 does.
pub fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let not_a_float = || Reply::from(Error::TimeoutNotAFloat);
    let text = std::str::from_utf8(arg).map_err(|_| not_a_float())?;
    let secs: f64 = text.trim().parse().map_err(|_| not_a_float())?;
    if !secs.is_finite() {
        return Err(not_a_float());
    }
    if secs < 0.0 {
        return Err(Reply::from(Error::TimeoutNegative));
    }
    if secs > 1e12 {
        return Err(Reply::from(Error::TimeoutOutOfRange));
    }
    Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs)))
}

/// `BLPOP key [key ...] timeout`
pub fn blpop(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    let timeout = match parse_timeout(&args[args.len() - 1]) {
        Ok(t) => t.unwrap_or(MAX_BLOCK).min(MAX_BLOCK),
        Err(e) => return e.into(),
    };
    let keys: Vec<Bytes> = args[1..args.len() - 1].to_vec();
    let proxy = proxy.clone();
    let gone = conn.gone_signal();
    Action::Later(Box::pin(async move {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(2);
        loop {
            for key in &keys {
                if let Some(value) = pop(&proxy, key).await {
                    return Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Bulk(value)]);
                }
            }
            let now = Instant::now();
            // A client that has gone waits no longer (inside `MULTI`, whose commands run on
            // a copy of the connection's state, that is at once: one round, as Redis runs a
            // `BLPOP` in a transaction without blocking).
            if now >= deadline || gone.is_cancelled() {
                return Reply::NilArray;
            }
            tokio::select! {
                () = sleep(pause.min(deadline - now)) => {}
                () = gone.cancelled() => {}
            }
            pause = (pause * 2).min(MAX_POLL);
        }
    }))
}

/// `LPOP key` on every master, in the key's turn: the value a quorum popped alike.
async fn pop(proxy: &Proxy, key: &Bytes) -> Option<Bytes> {
    let _held = proxy
        .keylocks()
        .enqueue(std::slice::from_ref(key))
        .ready()
        .await;
    match vote(proxy, command(&[b"LPOP", key]), Gather::Outcome)
        .await
        .majority()
    {
        Some(Reply::Bulk(v)) => Some(v.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_like_redis() {
        assert_eq!(parse_timeout(b"0"), Ok(None));
        assert_eq!(parse_timeout(b"1.5"), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(parse_timeout(b"2"), Ok(Some(Duration::from_secs(2))));
        assert_eq!(
            parse_timeout(b"-1"),
            Err(Reply::static_error("ERR timeout is negative"))
        );
        for bad in [&b"x"[..], b"", b"inf", b"nan"] {
            assert_eq!(
                parse_timeout(bad),
                Err(Reply::static_error(
                    "ERR timeout is not a float or out of range"
                ))
            );
        }
    }
}
