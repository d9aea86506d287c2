//! Lock acquisition (`SET key token NX PX ttl`) and release, as Redlock quorum operations.
//!
//! Acquire follows the algorithm exactly: read the monotonic clock, send `SET NX PX` to all N
//! masters at once, stop as soon as the outcome is known or the per-node timeout passes, and
//! grant only with a quorum of `OK`s and validity (`ttl − elapsed − drift`) above the minimum.
//! A refused attempt is rolled back on every master that may hold what it wrote: all of them
//! except those that answered "key exists", which certainly wrote nothing (and whose key, if it
//! carries the same token, belongs to an earlier grant that must not be touched).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::{Action, not_an_integer, parse_int, syntax_error};
use crate::client::Conn;
use crate::quorum::{Ballots, Request, ask, validity};
use crate::reply::{Reply, command};
use crate::scripts::RELEASE;
use crate::server::Proxy;
use crate::stats::Stats;

/// The options of a `SET` command.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// `NX`: only if absent.
    pub nx: bool,
    /// `XX`: only if present.
    pub xx: bool,
    /// `GET`: return the old value.
    pub get: bool,
    /// `KEEPTTL`.
    pub keep_ttl: bool,
    /// The TTL in milliseconds from now, from `EX`, `PX`, `EXAT` or `PXAT`.
    pub ttl_ms: Option<i64>,
}

/// Parses `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` in any order and case.
pub fn parse_set(args: &[Bytes]) -> Result<SetOptions, Reply> {
    let mut o = SetOptions::default();
    let mut expiry_seen = false;
    let mut i = 3;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match opt.as_slice() {
            b"NX" if !o.xx => o.nx = true,
            b"XX" if !o.nx => o.xx = true,
            b"GET" => o.get = true,
            b"KEEPTTL" if !expiry_seen => {
                o.keep_ttl = true;
                expiry_seen = true;
            }
            b"EX" | b"PX" | b"EXAT" | b"PXAT" if !expiry_seen && i + 1 < args.len() => {
                let n = parse_int(&args[i + 1]).ok_or_else(not_an_integer)?;
                if n <= 0 {
                    return Err(Reply::static_error(
                        "ERR invalid expire time in 'set' command",
                    ));
                }
                let now_ms = || {
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_millis() as i64)
                        .unwrap_or(0)
                };
                let ms = match opt.as_slice() {
                    b"EX" => n.checked_mul(1000),
                    b"PX" => Some(n),
                    b"EXAT" => n.checked_mul(1000).map(|at| at - now_ms()),
                    _ => Some(n - now_ms()),
                }
                .ok_or_else(|| Reply::static_error("ERR invalid expire time in 'set' command"))?;
                o.ttl_ms = Some(ms);
                expiry_seen = true;
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    Ok(o)
}

/// `SET`: the lock form (`NX` with an expiry) becomes a Redlock acquisition.
pub fn set(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    let opts = match parse_set(&args) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    if !opts.nx || opts.get || opts.keep_ttl {
        return Reply::static_error(
            "ERR redlock-proxy supports SET only as a lock: SET key token NX PX milliseconds (or EX seconds)",
        )
        .into();
    }
    let Some(ttl) = opts.ttl_ms else {
        return Reply::static_error(
            "ERR redlock-proxy refuses SET NX without an expiry: the lock could never expire (add PX or EX)",
        )
        .into();
    };
    if ttl > proxy.config.max_ttl_ms as i64 {
        return Reply::error(format!(
            "ERR lock TTL {ttl} ms exceeds the proxy's max_ttl_ms ({} ms)",
            proxy.config.max_ttl_ms
        ))
        .into();
    }
    acquire(proxy, args[1].clone(), args[2].clone(), ttl)
}

/// Runs a Redlock acquisition of `key` for `token` with `ttl_ms`; answers `OK` or nil.
pub fn acquire(proxy: &Arc<Proxy>, key: Bytes, token: Bytes, ttl_ms: i64) -> Action {
    let ticket = proxy.keylocks.enqueue(std::slice::from_ref(&key));
    let proxy = proxy.clone();
    Action::Later(Box::pin(async move {
        let held = ticket.ready().await;
        if ttl_ms <= 0 {
            // An absolute expiry in the past: the lock would be born expired.
            Stats::bump(&proxy.stats.denials);
            return Reply::Nil;
        }
        let ttl = Duration::from_millis(ttl_ms as u64);
        let ttl_arg = itoa::Buffer::new().format(ttl_ms).to_owned();
        let set = command(&[b"SET", &key, &token, b"NX", b"PX", ttl_arg.as_bytes()]);
        let start = Instant::now();
        let deadline = start + proxy.config.node_timeout();
        let mut vote = ask(&proxy.masters, Request::Same(set), 1, deadline);
        let ballots = vote.decide().await;
        let left = validity(ttl, start.elapsed(), proxy.config.drift_factor);
        let quorum_ok = ballots.majority().is_some_and(Reply::is_ok);
        let min = Duration::from_millis(proxy.config.min_validity_ms);
        if quorum_ok && left.is_some_and(|v| v > min) {
            trace!(validity_ms = left.map(|v| v.as_millis()), "lock granted");
            Stats::bump(&proxy.stats.grants);
            return Reply::ok();
        }
        debug!(quorum_ok, "lock refused");
        Stats::bump(&proxy.stats.denials);
        // Answer now; the key stays ours (`held`) until the late replies are in and the
        // rollback is queued, so no later operation on the key can overtake it.
        tokio::spawn(async move {
            let ballots = vote.finish().await;
            roll_back(&proxy, &ballots, &key, &token);
            drop(held);
        });
        Reply::Nil
    }))
}

/// Deletes `key` where it still holds `token`, on every master that may hold what the refused
/// attempt wrote: those that said `OK` and those that never answered. A master that answered
/// "exists" wrote nothing, and its key (even with the same token) belongs to someone else's
/// grant, or an earlier one of this client's, so it is left alone.
fn roll_back(proxy: &Proxy, ballots: &Ballots, key: &Bytes, token: &Bytes) {
    let release = command(&[b"EVAL", RELEASE.as_bytes(), b"1", key, token]);
    let mut sent = false;
    for (i, m) in proxy.masters.iter().enumerate() {
        let wrote_nothing = matches!(&ballots.replies[i], Some(r) if !r.is_ok());
        if !wrote_nothing && ballots.may_have_run(i) {
            m.send(release.clone(), 1, None);
            sent = true;
        }
    }
    if sent {
        Stats::bump(&proxy.stats.rollbacks);
    }
}

/// Runs compare-and-delete of `key`/`token` on all N masters; answers how many masters'
/// majority deleted it: 1 when a quorum deleted the key, else 0.
pub fn release(proxy: &Arc<Proxy>, key: Bytes, token: Bytes) -> Action {
    let ticket = proxy.keylocks.enqueue(std::slice::from_ref(&key));
    let proxy = proxy.clone();
    Action::Later(Box::pin(async move {
        let _held = ticket.ready().await;
        let req = command(&[b"EVAL", RELEASE.as_bytes(), b"1", &key, &token]);
        let ballots = ask(
            &proxy.masters,
            Request::Same(req),
            1,
            Instant::now() + proxy.config.node_timeout(),
        )
        .outcome()
        .await;
        if ballots.majority() == Some(&Reply::Integer(1)) {
            Stats::bump(&proxy.stats.releases);
            Reply::Integer(1)
        } else {
            Reply::Integer(0)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    #[test]
    fn set_options_in_any_order_and_case() {
        let o = parse_set(&args("SET k v px 100 nx")).unwrap();
        assert!(o.nx);
        assert_eq!(o.ttl_ms, Some(100));
        let o = parse_set(&args("set k v Nx eX 8")).unwrap();
        assert_eq!(o.ttl_ms, Some(8000));
    }

    #[test]
    fn set_option_errors_match_redis() {
        assert_eq!(parse_set(&args("SET k v NX XX")), Err(syntax_error()));
        assert_eq!(parse_set(&args("SET k v PX 1 EX 1")), Err(syntax_error()));
        assert_eq!(parse_set(&args("SET k v PX")), Err(syntax_error()));
        assert_eq!(parse_set(&args("SET k v PX abc")), Err(not_an_integer()));
        assert_eq!(
            parse_set(&args("SET k v PX 0")),
            Err(Reply::static_error(
                "ERR invalid expire time in 'set' command"
            ))
        );
    }

    #[test]
    fn absolute_expiry_becomes_relative() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let o = parse_set(&args(&format!("SET k v NX PXAT {}", now + 5000))).unwrap();
        let ttl = o.ttl_ms.unwrap();
        assert!((4000..=5000).contains(&ttl), "{ttl}");
    }
}
