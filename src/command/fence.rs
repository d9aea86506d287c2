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
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::action::{Action, Later};
use super::args::Cursor;
use super::runner::{self, Clock, Operation, Voted};
use super::session::Conn;
use crate::config::Config;
use crate::error::Error;
use crate::lockop::{Lock, Verb};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote};
use crate::wire::master::eval;
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
pub fn retention(cfg: &Config) -> u64 {
    2 * cfg.quarantine_window().as_millis() as u64
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

/// How many prepares one `REDLOCK.FENCE` makes at most: another proxy may be minting the same
/// grant's token.
const MINTS: u32 = 4;

/// `REDLOCK.FENCE key token`
pub fn fence(proxy: &Arc<Proxy>, _: &mut Conn, Fence { key, token }: Fence) -> Action {
    let step = if proxy.config().fence_single_master {
        Step::Single
    } else {
        Step::prepare(0)
    };
    let fkey = fence_key(&key);
    runner::run(
        proxy,
        Round {
            key,
            fkey,
            token,
            step,
        },
    )
}

/// One round of minting, as a quorum operation: the first in the key's turn, the later ones
/// in its [`Operation::rest`], still in that turn. Every round waits for every reply: the value
/// accepted with the highest ballot may be anywhere.
struct Round {
    key: Bytes,
    /// The key's fence hash.
    fkey: Bytes,
    token: Bytes,
    step: Step,
}

/// What a round asks.
enum Step {
    /// The negative control (`fence_single_master`): master 0's own counter.
    Single,
    /// Prepare, with a ballot above `above`, drawn when the request leaves (in the key's turn)
    /// and kept for the accept.
    Prepare { above: u64, ballot: AtomicU64 },
    /// Accept `value` under `ballot`.
    Accept { ballot: u64, value: u64 },
}

impl Step {
    fn prepare(above: u64) -> Step {
        Step::Prepare {
            above,
            ballot: AtomicU64::new(0),
        }
    }
}

/// What a round decided.
#[derive(Debug, PartialEq, Eq)]
enum Minted {
    /// The token.
    Token(u64),
    /// The key does not hold the token on a quorum of masters.
    NotHeld,
    /// Some master promised this higher ballot: go again above it.
    Outbid(u64),
    /// Prepared by a quorum: accept the value accepted with the highest ballot or, without
    /// one, a new value above the highest counter `c` and the clock.
    Propose { value: Option<u64>, c: u64 },
}

impl Operation for Round {
    type Decision = Minted;

    fn lock(&self) -> Lock<'_> {
        Lock::mutex(std::slice::from_ref(&self.key), &self.token, 0)
    }

    fn verb(&self) -> Verb {
        Verb::Write
    }

    fn request(&self, _: &Masters, cfg: &Config) -> Request {
        let keys = [&self.key, &self.fkey];
        let keep = retention(cfg).to_string();
        let req = match &self.step {
            Step::Single => eval(SINGLE, &keys, &[&self.token]),
            Step::Prepare { above, ballot: b } => {
                let drawn = ballot(*above);
                b.store(drawn, Ordering::Relaxed);
                let b = drawn.to_string();
                eval(
                    PREPARE,
                    &keys,
                    &[&self.token, b.as_bytes(), keep.as_bytes()],
                )
            }
            Step::Accept { ballot, value } => {
                let (b, v) = (ballot.to_string(), value.to_string());
                let argv: [&[u8]; 4] = [&self.token, b.as_bytes(), v.as_bytes(), keep.as_bytes()];
                eval(ACCEPT, &keys, &argv)
            }
        };
        Request::Same(req)
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        vote.poll_finish(cx)
    }

    fn decide(&self, ballots: &Ballots, _: Duration, _: &Config) -> Minted {
        match &self.step {
            Step::Single => counted(ballots),
            Step::Prepare { .. } => prepared(ballots),
            Step::Accept { value, .. } => accepted(ballots, *value),
        }
    }

    fn answer(&self, _: &Proxy, minted: Minted, _: &mut Vote, _: &Clock) -> Result<Reply, Minted> {
        match minted {
            Minted::Token(t) => Ok(Reply::Integer(t as i64)),
            Minted::NotHeld => Ok(Reply::Nil),
            later => Err(later),
        }
    }

    fn rest(self, proxy: Arc<Proxy>, minted: Minted, voted: Voted) -> Later {
        Box::pin(self.rounds(proxy, minted, voted))
    }
}

impl Round {
    /// The rounds after the first (`minted`), in the key's turn: an accept on the members the
    /// prepare went to, or (outbid) a prepare with a higher ballot, up to [`MINTS`] prepares.
    async fn rounds(mut self, proxy: Arc<Proxy>, mut minted: Minted, voted: Voted) -> Reply {
        let Voted { vote, held, .. } = voted;
        // Both rounds of one mint go to one member set.
        let mut masters = vote.masters().clone();
        drop(vote);
        let mut mints = 1;
        let reply = loop {
            minted = match minted {
                Minted::Token(t) => break Reply::Integer(t as i64),
                Minted::NotHeld => break Reply::Nil,
                Minted::Outbid(_) if mints == MINTS => break Reply::from(Error::FenceContended),
                Minted::Outbid(p) => {
                    mints += 1;
                    self.step = Step::prepare(p);
                    let (minted, vote, _) = runner::decide(&proxy, &self).await;
                    masters = vote.masters().clone();
                    minted
                }
                Minted::Propose { value, c } => {
                    let value = value.unwrap_or_else(|| (c + 1).max(now_us()));
                    let ballot = match &self.step {
                        Step::Prepare { ballot, .. } => ballot.load(Ordering::Relaxed),
                        _ => 0,
                    };
                    self.step = Step::Accept { ballot, value };
                    runner::decide_on(&proxy, masters.clone(), &self).await.0
                }
            };
        };
        drop(held);
        reply
    }
}

/// The prepare round's decision. Fewer than a quorum holding the token: not held, unless some
/// promised a higher ballot where the others held it (outbid). Otherwise a value a quorum
/// accepted is chosen (a repeated call is one round), else a value is proposed.
fn prepared(prepared: &Ballots) -> Minted {
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
    Minted::Propose {
        value: accepted.and_then(|(_, v)| int(&Reply::Bulk(v.clone()))),
        c: given.iter().map(|(c, _, _)| *c).max().unwrap_or(0),
    }
}

/// The accept round's decision for `value`: the token when a quorum accepted it; else outbid
/// by the highest ballot promised meanwhile, or not held.
fn accepted(accepted: &Ballots, value: u64) -> Minted {
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

/// The negative control's decision: master 0's own counter, whatever the others hold.
fn counted(ballots: &Ballots) -> Minted {
    match ballots.replies.first() {
        Some(Some(Reply::Integer(n))) if *n > 0 => Minted::Token(*n as u64),
        _ => Minted::NotHeld,
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

    fn given(c: &'static str, ballot: &'static str, value: &'static str) -> Option<Reply> {
        Some(Reply::Array(vec![
            Reply::Integer(1),
            Reply::bulk(c),
            Reply::bulk(ballot),
            Reply::bulk(value),
        ]))
    }

    fn promised(p: &'static str) -> Option<Reply> {
        Some(Reply::Array(vec![Reply::Integer(-1), Reply::bulk(p)]))
    }

    #[test]
    fn a_prepare_proposes_a_value_above_every_counter_a_quorum_reports() {
        use crate::quorum::scripted::ballots;
        // Nothing accepted yet: a new value, above the highest counter.
        let b = ballots(vec![given("41", "0", ""), given("40", "0", ""), None]);
        assert_eq!(prepared(&b), Minted::Propose { value: None, c: 41 });
        // A value a quorum accepted under one ballot is chosen: the same token again.
        let b = ballots(vec![
            given("42", "7000", "42"),
            given("42", "7000", "42"),
            given("0", "0", ""),
        ]);
        assert_eq!(prepared(&b), Minted::Token(42));
        // Accepted on a minority: that value (the highest ballot's) is proposed again.
        let b = ballots(vec![
            given("42", "7000", "42"),
            given("43", "6000", "43"),
            given("0", "0", ""),
        ]);
        assert_eq!(
            prepared(&b),
            Minted::Propose {
                value: Some(42),
                c: 43
            }
        );
    }

    #[test]
    fn a_prepare_is_outbid_only_where_a_quorum_hold_the_token() {
        use crate::quorum::scripted::ballots;
        let not_held = Some(Reply::Integer(0));
        let b = ballots(vec![given("1", "0", ""), promised("99"), promised("120")]);
        assert_eq!(prepared(&b), Minted::Outbid(120));
        let b = ballots(vec![given("1", "0", ""), promised("99"), not_held.clone()]);
        assert_eq!(prepared(&b), Minted::Outbid(99));
        let b = ballots(vec![given("1", "0", ""), not_held.clone(), not_held]);
        assert_eq!(prepared(&b), Minted::NotHeld);
        let b = ballots(vec![promised("99"), None, None]);
        assert_eq!(prepared(&b), Minted::NotHeld);
    }

    #[test]
    fn an_accept_mints_the_token_only_with_a_quorum() {
        use crate::quorum::scripted::ballots;
        use Reply::Integer as I;
        let b = ballots(vec![Some(I(1)), Some(I(1)), Some(I(0))]);
        assert_eq!(accepted(&b, 42), Minted::Token(42));
        let b = ballots(vec![Some(I(1)), promised("900"), None]);
        assert_eq!(accepted(&b, 42), Minted::Outbid(900));
        let b = ballots(vec![Some(I(1)), Some(I(0)), Some(I(0))]);
        assert_eq!(accepted(&b, 42), Minted::NotHeld);
    }

    #[test]
    fn the_single_master_control_reads_master_0_alone() {
        use crate::quorum::scripted::ballots;
        use Reply::Integer as I;
        let b = ballots(vec![Some(I(7)), Some(I(0)), None]);
        assert_eq!(counted(&b), Minted::Token(7));
        let b = ballots(vec![Some(I(0)), Some(I(5)), Some(I(5))]);
        assert_eq!(counted(&b), Minted::NotHeld);
    }
}
