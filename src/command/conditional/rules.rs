//! The conditional writes' scripts on the masters, and the pure rules their answers are read
//! by: what each master did, whether a condition holds, and the answer in Redis's words. The
//! commands ([`super`]) and the runner's operations ([`super::op`]) both read them.

use bytes::Bytes;

use crate::command::keys::{Cond, no_quorum};
use crate::command::lock::agreed_error;
use crate::error::Error;
use crate::quorum::Ballots;
use crate::wire::reply::Reply;

/// A conditional `SET` on one master: `KEYS[1]` the key; `ARGV` = new value, mode (`1` the key
/// holds `ARGV[3]`, `2` it does not, `3` it is missing), `ARGV[3]`, TTL in ms (`0`: none, `-1`:
/// an absolute expiry already past, so the write deletes the key, as Redis's does),
/// `1` for `KEEPTTL`, the deadlock guard's TTL (`0`: off). Answers `{1, old, old pttl, new
/// pttl}` where it wrote, `{0, old, old pttl}` where it did not; a key of another type raises
/// `WRONGTYPE`. A key that would be left without a TTL gets the guard's, in the same step; a
/// fencing instance of the new value learns its new expiry (as an extension's does).
pub const COND_SET: &str = "local v = redis.call('get', KEYS[1]) \
    local m = ARGV[2] local ok = false \
    if m == '1' then ok = (v == ARGV[3]) \
    elseif m == '2' then ok = (v ~= ARGV[3]) \
    elseif m == '3' then ok = (v == false) end \
    local t = redis.call('pttl', KEYS[1]) \
    if not ok then return {0, v, t} end \
    if ARGV[4] == '-1' then redis.call('del', KEYS[1]) return {1, v, t, -2} end \
    if ARGV[4] ~= '0' then redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[4]) \
    elseif ARGV[5] == '1' then \
      redis.call('set', KEYS[1], ARGV[1], 'keepttl') \
      if ARGV[6] ~= '0' and redis.call('pttl', KEYS[1]) == -1 then \
        redis.call('pexpire', KEYS[1], ARGV[6]) end \
    elseif ARGV[6] ~= '0' then redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[6]) \
    else redis.call('set', KEYS[1], ARGV[1]) end \
    local fk = 'redlock-fence:{' .. KEYS[1] .. '}' \
    if redis.call('hget', fk, 'h') == ARGV[1] then \
      local e = redis.pcall('pexpiretime', KEYS[1]) \
      if type(e) ~= 'table' then redis.call('hset', fk, 'e', string.format('%d', e)) end \
    end \
    return {1, v, t, redis.call('pttl', KEYS[1])}";

/// Gives a master back what a refused conditional `SET` replaced, while the key still holds
/// the value written or nothing (a short TTL may have run out already): `ARGV` = the value
/// written, `1` if the key held a value (`0`: it was missing, so it is deleted), the old value,
/// its PTTL then (-1: none). A key that now holds a third value is left alone. Answers 1 when
/// restored. Restoring on a key that became missing can only keep the old holder's key longer
/// than a release through another proxy meant, never shorter, so it is the safe side.
pub const RESTORE: &str = "local cur = redis.call('get', KEYS[1]) \
    if cur ~= false and cur ~= ARGV[1] then return 0 end \
    if ARGV[2] == '0' then \
      if cur ~= false then redis.call('del', KEYS[1]) end \
      return 1 end \
    local t = tonumber(ARGV[4]) \
    if t > 0 then redis.call('set', KEYS[1], ARGV[3], 'px', t) \
    else redis.call('set', KEYS[1], ARGV[3]) end \
    return 1";

/// A conditional delete on one master: `ARGV` = mode (`1` delete if the key holds `ARGV[2]`,
/// `2` if it holds another value), `ARGV[2]`. Answers 1 deleted, 0 not (a missing key is not
/// deleted); a key of another type raises `WRONGTYPE`.
pub const COND_DEL: &str = "local v = redis.call('get', KEYS[1]) \
    if v == false then return 0 end \
    local hit = (v == ARGV[2]) \
    if ARGV[1] == '2' then hit = not hit end \
    if hit then redis.call('del', KEYS[1]) return 1 end \
    return 0";

/// The digest `DIGEST` answers and `IFDEQ`/`IFDNE` compare: XXH3-64 with seed 0.
pub fn digest_of(value: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(value)
}

/// A digest as Redis 8.4 prints it: 16 lower-case hexadecimal digits, leading zeros kept.
pub fn digest_hex(digest: u64) -> Bytes {
    Bytes::from(format!("{digest:016x}"))
}

/// A conditional `SET`, parsed.
pub(super) struct Write {
    /// The key.
    pub(super) key: Bytes,
    /// The value written.
    pub(super) value: Bytes,
    /// The condition on the value held.
    pub(super) cond: Cond,
    /// The TTL asked for (`EX`/`PX`/`EXAT`/`PXAT`), in ms from now.
    pub(super) ttl_ms: Option<i64>,
    /// `KEEPTTL`.
    pub(super) keep_ttl: bool,
    /// `GET`: answer the old value.
    pub(super) get: bool,
}

/// Whether a master's answer to [`COND_SET`] says it wrote.
pub(super) fn wrote(r: &Reply) -> bool {
    matches!(r, Reply::Array(a) if a.first() == Some(&Reply::Integer(1)))
}

/// The old value in a master's answer to [`COND_SET`] (nil: the key was missing).
pub(super) fn old_of(r: &Reply) -> Option<&Reply> {
    match r {
        Reply::Array(a) => a.get(1),
        _ => None,
    }
}

/// How long a master's answer says the key lives now (`i64::MAX` for no TTL).
pub(super) fn new_ttl_of(r: &Reply) -> Option<i64> {
    match r {
        Reply::Array(a) => match a.get(3) {
            Some(Reply::Integer(-1)) => Some(i64::MAX),
            Some(Reply::Integer(t)) if *t > 0 => Some(*t),
            _ => None,
        },
        _ => None,
    }
}

/// How a granted conditional `SET` reads for a quorum repair, when it is a lock extension:
/// `SET tok IFEQ tok PX ttl` (the value kept, a TTL given). A member where the key was missing
/// answered `{0, nil, …}`; one that wrote brings its new PTTL. Other forms (a takeover, `IFNE`,
/// the digests, no TTL or `KEEPTTL`) are not repaired.
pub(super) fn repairs(w: &Write) -> Option<crate::command::repair::Reading> {
    let extension = matches!(&w.cond, Cond::Eq(m) if *m == w.value)
        && w.ttl_ms.is_some_and(|t| t > 0)
        && !w.keep_ttl;
    extension.then_some(crate::command::repair::Reading {
        holds: |r, _| new_ttl_of(r).filter(|t| *t != i64::MAX && wrote(r)),
        missing: |r| {
            matches!(r, Reply::Array(a)
                if a.first() == Some(&Reply::Integer(0)) && a.get(1) == Some(&Reply::Nil))
        },
    })
}

/// Whether `old` (the value a key held before, nil for none) makes the condition true.
pub(super) fn holds(cond: &Cond, old: &Reply) -> bool {
    let value = match old {
        Reply::Bulk(v) => Some(v),
        _ => None,
    };
    match (cond, value) {
        (Cond::Eq(m), Some(v)) => v == m,
        (Cond::Eq(_) | Cond::DigestEq(_), None) => false,
        (Cond::Ne(m), Some(v)) => v != m,
        (Cond::Ne(_) | Cond::DigestNe(_), None) => true,
        (Cond::DigestEq(d), Some(v)) => digest_of(v) == *d,
        (Cond::DigestNe(d), Some(v)) => digest_of(v) != *d,
    }
}

/// The old value a quorum of masters agree on, if any.
pub(super) fn agreed_old(ballots: &Ballots) -> Option<&Reply> {
    ballots.tally_by(old_of).and_then(|(old, _)| old)
}

/// The answer of a granted write: `OK`, or with `GET` the old value (the one a quorum agree
/// on, else one that made the condition true, as it did where the write landed).
pub(super) fn set_reply(w: &Write, ballots: &Ballots) -> Reply {
    if !w.get {
        return Reply::ok();
    }
    if let Some(old) = agreed_old(ballots).filter(|o| holds(&w.cond, o)) {
        return old.clone();
    }
    ballots
        .replies
        .iter()
        .flatten()
        .filter(|r| wrote(r))
        .find_map(old_of)
        .cloned()
        .unwrap_or(Reply::Nil)
}

/// The answer of a refused write: nil, or with `GET` an old value that tells the client the
/// condition failed, since `SET … GET` answers the old value whether it wrote or not and a
/// client reads "written" from an old value that meets the condition. The one a quorum agree
/// on when it says so; otherwise one that does: nil for `IFEQ`/`IFDEQ` (no key, nothing
/// written), the compared value for `IFNE`, a value read with the digest for `IFDNE` (without
/// one, the no-quorum error).
pub(super) fn not_set_reply(w: &Write, ballots: Option<&Ballots>) -> Reply {
    if !w.get {
        return Reply::Nil;
    }
    if let Some(old) = ballots.and_then(agreed_old).filter(|o| !holds(&w.cond, o)) {
        return old.clone();
    }
    match &w.cond {
        Cond::Eq(_) | Cond::DigestEq(_) => Reply::Nil,
        Cond::Ne(m) => Reply::Bulk(m.clone()),
        Cond::DigestNe(_) => ballots
            .into_iter()
            .flat_map(|b| b.replies.iter().flatten())
            .filter_map(old_of)
            .find(|o| matches!(o, Reply::Bulk(_)) && !holds(&w.cond, o))
            .cloned()
            .unwrap_or_else(no_quorum),
    }
}

/// Decides a conditional delete from each master's answer (1 deleted, 0 not): 1 when a quorum
/// deleted, 0 when a quorum answered but fewer deleted; else a quorum's error (`WRONGTYPE`) or
/// the no-quorum error.
pub(super) fn deleted(ballots: &Ballots) -> Reply {
    if ballots.agree(|r| *r == Reply::Integer(1)) {
        return Reply::Integer(1);
    }
    if let Some(e) = agreed_error(ballots) {
        return e;
    }
    if ballots.agree(|r| matches!(r, Reply::Integer(_))) {
        return Reply::Integer(0);
    }
    Reply::from(Error::NoQuorumRelease)
}
