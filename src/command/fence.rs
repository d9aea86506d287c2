//! `REDLOCK.FENCE key token`: a fencing token for the grant that `token` holds now.
//!
//! A fencing token is a number that, for one key, is strictly larger for every later grant, so
//! a resource can refuse a write from a holder that paused past its validity and lost the lock
//! meanwhile. Redlock was said to be unable to give one because counters kept on several nodes
//! drift apart; here the counter is a quorum register on the masters, and the token of one grant
//! is decided once, by a single-decree Paxos instance per grant, so it never changes.
//!
//! **State on each master**, in one hash per lock key, `redlock-fence:{key}`:
//! `c`, the highest token any grant of the key was given (it outlives the lock: its TTL is
//! refreshed to [`retention`] on every write), and the current grant's instance: `h` the
//! holder's token, `e` the lock's absolute expiry (`PEXPIRETIME`, so a later grant that reuses
//! the same value is told apart; an extension through the proxy updates it), `p` the highest
//! ballot promised, `ab`/`av` the ballot and value accepted.
//!
//! **Minting** (only when a client asks; acquisitions pay nothing):
//! 1. *Prepare*, in the key's turn, on every master: only where the key holds `token`, the
//!    master promises ballot `b` and answers its `c` and what it accepted. Fewer than a quorum
//!    of trusted masters holding the token: nil, as for a lock that is not held.
//! 2. If a quorum accepted the same value, it is the token (a value accepted by a quorum is
//!    chosen: a repeated call is one round). Otherwise the value is the one accepted with the
//!    highest ballot, or, if none, `max(c + 1, now in µs)`.
//! 3. *Accept* on every master (again only where the key holds `token`): `av = value`,
//!    `c = max(c, value)`. A quorum of acceptances answers the token.
//!
//! **Why it grows.** A later grant's prepare quorum meets the earlier token's accept quorum on at
//! least one master, whose `c` is at least the earlier token. A master that restarted empty lost
//! its `c`, but it sits out the restart quarantine (longer than any lock) before it counts, so by
//! then the clock term `now in µs` is past every token it held, as long as the proxies' clocks
//! agree within the quarantine window. The ballots are `ms × 1000 + proxy id`, from a clock that
//! never goes back within a proxy, so two proxies never use the same one.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::time::Instant;

use super::action::Action;
use super::args::Cursor;
use super::session::Conn;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, ask};
use crate::wire::reply::Reply;

/// Prepare: `KEYS` = lock key, fence hash; `ARGV` = token, ballot, retention ms. Answers 0 when
/// the key does not hold the token, `{-1, promised}` when a higher ballot was promised, else
/// `{1, c, accepted ballot, accepted value}`. Numbers are kept as strings: tokens are
/// microseconds (about 2^51), and Lua's `tostring` would print them in exponent form.
pub const PREPARE: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
    local e = redis.pcall('pexpiretime', KEYS[1]) \
    if type(e) == 'table' then e = '-' else e = string.format('%d', e) end \
    local f = redis.call('hmget', KEYS[2], 'h', 'e', 'p', 'ab', 'av', 'c') \
    if f[1] ~= ARGV[1] or f[2] ~= e then \
      redis.call('hset', KEYS[2], 'h', ARGV[1], 'e', e, 'p', '0', 'ab', '0', 'av', '') \
      f[3] = '0' f[4] = '0' f[5] = '' \
    end \
    if tonumber(f[3]) >= tonumber(ARGV[2]) then return {-1, f[3]} end \
    redis.call('hset', KEYS[2], 'p', ARGV[2]) \
    if redis.call('pttl', KEYS[2]) < tonumber(ARGV[3]) then \
      redis.call('pexpire', KEYS[2], ARGV[3]) end \
    return {1, f[6] or '0', f[4], f[5]}";

/// Accept: `KEYS` = lock key, fence hash; `ARGV` = token, ballot, value, retention ms. Answers
/// 1 when accepted, 0 when the key no longer holds this grant, `{-1, promised}` when a higher
/// ballot was promised meanwhile.
pub const ACCEPT: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
    local e = redis.pcall('pexpiretime', KEYS[1]) \
    if type(e) == 'table' then e = '-' else e = string.format('%d', e) end \
    local f = redis.call('hmget', KEYS[2], 'h', 'e', 'p', 'c') \
    if f[1] ~= ARGV[1] or f[2] ~= e then return 0 end \
    if tonumber(f[3] or '0') > tonumber(ARGV[2]) then return {-1, f[3]} end \
    local c = f[4] or '0' \
    if tonumber(ARGV[3]) > tonumber(c) then c = ARGV[3] end \
    redis.call('hset', KEYS[2], 'p', ARGV[2], 'ab', ARGV[2], 'av', ARGV[3], 'c', c) \
    if redis.call('pttl', KEYS[2]) < tonumber(ARGV[4]) then \
      redis.call('pexpire', KEYS[2], ARGV[4]) end \
    return 1";

/// The unsafe negative control (`fence_single_master`): a counter on master 0 alone, as a
/// client library that fences with one Redis would keep it.
const SINGLE: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
    return redis.call('incr', KEYS[2])";

/// The name of the fence hash of `key`.
pub fn fence_key(key: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(key.len() + 16);
    k.extend_from_slice(b"redlock-fence:{");
    k.extend_from_slice(key);
    k.push(b'}');
    Bytes::from(k)
}

/// How long a key's counter is kept after its last token: twice the quarantine window, so a
/// counter outlives every lock of its key and the restart quarantine of any master.
pub fn retention(proxy: &Proxy) -> u64 {
    2 * proxy.config().quarantine_window().as_millis() as u64
}

/// This process's wall clock, anchored once and advanced by the monotonic clock, so a step of
/// the system clock while the proxy runs cannot make it go back.
pub(crate) fn now_us() -> u64 {
    static ANCHOR: LazyLock<(u64, std::time::Instant)> = LazyLock::new(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        (wall, std::time::Instant::now())
    });
    ANCHOR.0 + ANCHOR.1.elapsed().as_micros() as u64
}

/// A ballot no other proxy uses and larger than every earlier one of this proxy, and larger
/// than `above`: `ms × 1000 + proxy id`.
fn ballot(above: u64) -> u64 {
    static ID: LazyLock<u64> = LazyLock::new(|| rand::random_range(0..1000));
    static LAST: AtomicU64 = AtomicU64::new(0);
    let mut b = (now_us() / 1000) * 1000 + *ID;
    while b <= above {
        b += 1000;
    }
    let prev = LAST.fetch_max(b, Ordering::AcqRel);
    if prev >= b {
        // Same millisecond as an earlier ballot of this proxy: the next free one.
        let next = (prev / 1000 + 1) * 1000 + *ID;
        LAST.fetch_max(next, Ordering::AcqRel);
        return next;
    }
    b
}

/// What one master answered to a prepare.
enum Promise {
    /// The key does not hold the token there (or no counted answer).
    NotHeld,
    /// A higher ballot was promised.
    Refused(u64),
    /// Promised: the master's counter and what it accepted (ballot 0 = nothing).
    Given {
        c: u64,
        ballot: u64,
        value: Option<Bytes>,
    },
}

fn int(r: &Reply) -> Option<u64> {
    match r {
        Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Reply::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

fn promise(r: &Option<Reply>) -> Promise {
    match r {
        Some(Reply::Array(items)) => match items.as_slice() {
            [Reply::Integer(-1), p] => Promise::Refused(int(p).unwrap_or(u64::MAX)),
            [Reply::Integer(1), c, ab, av] => Promise::Given {
                c: int(c).unwrap_or(0),
                ballot: int(ab).unwrap_or(0),
                value: match av {
                    Reply::Bulk(v) if !v.is_empty() => Some(v.clone()),
                    _ => None,
                },
            },
            _ => Promise::NotHeld,
        },
        _ => Promise::NotHeld,
    }
}

/// `REDLOCK.FENCE key token`, read.
pub struct Fence {
    key: Bytes,
    token: Bytes,
}

impl Fence {
    /// Reads `REDLOCK.FENCE key token`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Fence, Error> {
        Ok(Fence {
            key: c.next_bytes()?,
            token: c.next_bytes()?,
        })
    }
}

/// `REDLOCK.FENCE key token`
pub fn fence(proxy: &Arc<Proxy>, _: &mut Conn, Fence { key, token }: Fence) -> Action {
    let turn = vec![key.clone()];
    super::action::in_turn(proxy, &turn, move |proxy| async move {
        if proxy.config().fence_single_master {
            return single_master(&proxy, &key, &token).await;
        }
        // A few rounds at most: another proxy may be minting the same grant's token.
        let mut above = 0;
        for _ in 0..4 {
            match mint(&proxy, &key, &token, above).await {
                Minted::Token(t) => return Reply::Integer(t as i64),
                Minted::NotHeld => return Reply::Nil,
                Minted::Outbid(p) => above = p,
            }
        }
        Reply::from(Error::FenceContended)
    })
}

enum Minted {
    Token(u64),
    NotHeld,
    Outbid(u64),
}

async fn round(
    proxy: &Proxy,
    masters: &Masters,
    script: &str,
    keys: [&Bytes; 2],
    argv: &[&[u8]],
) -> Ballots {
    let req = crate::wire::master::eval(script, &keys, argv);
    let deadline = Instant::now() + proxy.config().node_timeout();
    // Every answer is wanted (the value accepted with the highest ballot may be anywhere).
    ask(masters, Request::Same(req), 1, deadline).finish().await
}

async fn mint(proxy: &Proxy, key: &Bytes, token: &Bytes, above: u64) -> Minted {
    let fkey = fence_key(key);
    let keep = retention(proxy).to_string();
    let b = ballot(above);
    let b_arg = b.to_string();
    // Both rounds go to one member set.
    let masters = proxy.masters();
    let prepared = round(
        proxy,
        &masters,
        PREPARE,
        [key, &fkey],
        &[token, b_arg.as_bytes(), keep.as_bytes()],
    )
    .await;
    let promises: Vec<Promise> = prepared.replies.iter().map(promise).collect();
    let is_given = |i: usize| matches!(promises[i], Promise::Given { .. });
    let refused = promises
        .iter()
        .filter_map(|p| match p {
            Promise::Refused(p) => Some(*p),
            _ => None,
        })
        .max();
    let given: Vec<(u64, u64, &Option<Bytes>)> = promises
        .iter()
        .filter_map(|p| match p {
            Promise::Given { c, ballot, value } => Some((*c, *ballot, value)),
            _ => None,
        })
        .collect();
    if !prepared.is_quorum(is_given) {
        let answered = |i: usize| is_given(i) || matches!(promises[i], Promise::Refused(_));
        return match refused {
            // Held on a quorum, but some promised a higher ballot: go again above it.
            Some(p) if prepared.is_quorum(answered) => Minted::Outbid(p),
            _ => Minted::NotHeld,
        };
    }
    // A value a quorum accepted is chosen; otherwise the one accepted with the highest ballot;
    // otherwise a new one.
    let accepted = given
        .iter()
        .filter_map(|(_, ballot, v)| v.as_ref().map(|v| (*ballot, v)))
        .max_by_key(|(ballot, _)| *ballot);
    if let Some((top, v)) = accepted {
        let same = |i: usize| {
            matches!(&promises[i], Promise::Given { ballot, value, .. }
                if *ballot == top && value.as_ref() == Some(v))
        };
        if prepared.is_quorum(same)
            && let Some(t) = int(&Reply::Bulk(v.clone()))
        {
            return Minted::Token(t);
        }
    }
    let value = match accepted.and_then(|(_, v)| int(&Reply::Bulk(v.clone()))) {
        Some(v) => v,
        None => {
            let c = given.iter().map(|(c, _, _)| *c).max().unwrap_or(0);
            (c + 1).max(now_us())
        }
    };
    let v_arg = value.to_string();
    let accepted = round(
        proxy,
        &masters,
        ACCEPT,
        [key, &fkey],
        &[token, b_arg.as_bytes(), v_arg.as_bytes(), keep.as_bytes()],
    )
    .await;
    if accepted.agree(|r| *r == Reply::Integer(1)) {
        return Minted::Token(value);
    }
    let outbid = accepted
        .replies
        .iter()
        .filter_map(|r| match r {
            Some(Reply::Array(items)) => items.get(1).and_then(int),
            _ => None,
        })
        .max();
    match outbid {
        Some(p) => Minted::Outbid(p),
        None => Minted::NotHeld,
    }
}

/// The negative control: master 0's own counter, whatever the others hold.
async fn single_master(proxy: &Proxy, key: &Bytes, token: &Bytes) -> Reply {
    let fkey = fence_key(key);
    let req = crate::wire::master::eval(SINGLE, &[key, &fkey], &[token]);
    let deadline = Instant::now() + proxy.config().node_timeout();
    let ballots = ask(&proxy.masters(), Request::Same(req), 1, deadline)
        .finish()
        .await;
    match &ballots.replies[0] {
        Some(Reply::Integer(n)) if *n > 0 => Reply::Integer(*n),
        _ => Reply::Nil,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ballots_grow_and_stay_above_what_was_promised() {
        let a = ballot(0);
        let b = ballot(0);
        assert!(b > a, "{a} {b}");
        let c = ballot(b + 5_000_000);
        assert!(c > b + 5_000_000);
        assert_eq!(c % 1000, a % 1000, "the proxy id stays in the low digits");
    }

    #[test]
    fn tokens_are_exact_in_lua_doubles() {
        // Lua numbers are doubles: tokens and ballots must stay below 2^53.
        assert!(now_us() < (1u64 << 53));
        assert!(ballot(0) < (1u64 << 53));
    }

    #[test]
    fn promises_are_read_from_the_prepare_replies() {
        let given = Some(Reply::Array(vec![
            Reply::Integer(1),
            Reply::bulk("41"),
            Reply::bulk("7000"),
            Reply::bulk("42"),
        ]));
        assert!(matches!(
            promise(&given),
            Promise::Given { c: 41, ballot: 7000, value: Some(ref v) } if v.as_ref() == b"42"
        ));
        let fresh = Some(Reply::Array(vec![
            Reply::Integer(1),
            Reply::bulk("0"),
            Reply::bulk("0"),
            Reply::bulk(""),
        ]));
        assert!(matches!(
            promise(&fresh),
            Promise::Given {
                c: 0,
                ballot: 0,
                value: None
            }
        ));
        let refused = Some(Reply::Array(vec![Reply::Integer(-1), Reply::bulk("99")]));
        assert!(matches!(promise(&refused), Promise::Refused(99)));
        assert!(matches!(
            promise(&Some(Reply::Integer(0))),
            Promise::NotHeld
        ));
        assert!(matches!(promise(&None), Promise::NotHeld));
    }
}
