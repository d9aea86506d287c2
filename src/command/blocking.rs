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
use super::args::Cursor;
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

/// Parses a blocking command's timeout (seconds, a decimal number) as Redis 7.0 does: the text
/// as C's `strtold` reads it (hexadecimal and `inf` included; no space around it, no `nan`),
/// then `ceil(seconds × 1000)` ms converted to a 64-bit integer. A value beyond that integer's
/// range (infinite included) converts to its most negative value, so Redis answers that the
/// timeout is negative; 0 ms (also from a tiny negative such as `-0.0001`) waits for ever.
pub fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let not_a_float = || Reply::from(Error::TimeoutNotAFloat);
    let secs = c_float(arg).ok_or_else(not_a_float)?;
    let ms = (secs * 1000.0).ceil();
    // `as` saturates and keeps -0.0 as 0; C's conversion of an out-of-range value gives the
    // most negative integer instead.
    if !(0.0..9.223_372_036_854_776e18).contains(&ms) {
        return Err(Reply::from(Error::TimeoutNegative));
    }
    let ms = ms as u64;
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}

/// A number as `strtold` reads a whole argument (Redis's `string2ld`): decimal or `0x`
/// hexadecimal with an optional `p` exponent, `inf`/`infinity`; `None` for anything else,
/// `nan`, or text around the number.
fn c_float(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    if text.is_empty() || text.len() > 5 * 1024 || text.starts_with(|c: char| c.is_whitespace()) {
        return None;
    }
    let (negative, body) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let value = match body.get(..2) {
        Some("0x" | "0X") => hex_float(&body[2..])?,
        // Rust reads the decimal forms strtold reads; a sign inside is refused here.
        _ if body.starts_with(['+', '-']) => return None,
        _ => body.parse::<f64>().ok().filter(|v| !v.is_nan())?,
    };
    Some(if negative { -value } else { value })
}

/// The digits of a hexadecimal float after `0x`: `h[.h][p[+-]d]`, at least one digit.
fn hex_float(text: &str) -> Option<f64> {
    let (mantissa, exponent) = match text.find(['p', 'P']) {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut value = 0.0f64;
    for c in int.chars() {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac.chars() {
        value += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    if let Some(e) = exponent {
        let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let e: i32 = e.parse().unwrap_or(if e.starts_with('-') {
            i32::MIN
        } else {
            i32::MAX
        });
        value *= 2f64.powi(e.clamp(-2000, 2000));
    }
    Some(value)
}

/// `BLPOP key [key ...] timeout`, read.
pub struct Blpop {
    keys: Vec<Bytes>,
    /// How long to wait, at most [`MAX_BLOCK`].
    timeout: Duration,
}

impl Blpop {
    /// Reads `BLPOP key [key ...] timeout`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Blpop, Reply> {
        let mut keys = c.rest_bytes();
        let timeout = keys.pop().ok_or(Error::WrongArity("blpop"))?;
        let timeout = parse_timeout(&timeout)?.unwrap_or(MAX_BLOCK).min(MAX_BLOCK);
        Ok(Blpop { keys, timeout })
    }
}

/// `BLPOP key [key ...] timeout`
pub fn blpop(proxy: &Arc<Proxy>, conn: &mut Conn, Blpop { keys, timeout }: Blpop) -> Action {
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
        // As Debian's Redis 7.0 answers each (tests/legacy.rs compares them with one).
        assert_eq!(parse_timeout(b"0x1"), Ok(Some(Duration::from_secs(1))));
        assert_eq!(
            parse_timeout(b"0x0.8"),
            Ok(Some(Duration::from_millis(500)))
        );
        assert_eq!(
            parse_timeout(b"0X1p-1"),
            Ok(Some(Duration::from_millis(500)))
        );
        assert_eq!(parse_timeout(b"0.0001"), Ok(Some(Duration::from_millis(1))));
        assert_eq!(parse_timeout(b"-0.0001"), Ok(None));
        assert_eq!(parse_timeout(b"-0"), Ok(None));
        assert_eq!(parse_timeout(b"1e-400"), Ok(None));
        assert!(parse_timeout(b"922337203685477").is_ok());
        for huge in byte_strings![b"inf", b"-Infinity", b"1e400", b"9223372036854776"] {
            assert_eq!(
                parse_timeout(huge),
                Err(Reply::static_error("ERR timeout is negative")),
                "{huge:?}"
            );
        }
        for bad in byte_strings![
            b"x", b"", b"nan", b" 1", b"1 ", b"0x", b"0x.", b"1_0", b"+-1", b"0x1p",
        ] {
            assert_eq!(
                parse_timeout(bad),
                Err(Reply::static_error(
                    "ERR timeout is not a float or out of range"
                ))
            );
        }
    }
}
