//! The conditional string commands of Redis 8.4 and Valkey, as quorum operations:
//! `SET key value IFEQ|IFNE|IFDEQ|IFDNE ...`, `DELEX key [IFEQ|IFNE|IFDEQ|IFDNE arg]`,
//! `DELIFEQ key value` and `DIGEST key`.
//!
//! The masters need none of them: each master runs the proxy's own scripts below (Redis 7.0
//! has no conditional command), so every member answers alike whatever it runs.
//!
//! - **`SET … IFEQ/IFNE` (and the digest forms)** is a write decided like an acquisition: `OK`
//!   only when a quorum of masters wrote it and the TTL a quorum now hold, less the elapsed time
//!   and drift, is still valid; otherwise nil. Where a refused write landed, the master gets its
//!   old value back, with the TTL it had (so a refused takeover does not cut another holder's
//!   lock short on a minority, which could otherwise free it early). `SET tok IFEQ tok PX ttl` is
//!   thus a lock extension, and `SET new IFEQ old` a guarded takeover.
//! - **`DELEX key IFEQ tok`** and **`DELIFEQ key tok`** are the Redlock release (compare and
//!   delete on every master, see [`super::lock::release`]); `DELEX key` is `DEL key`; the other
//!   conditions delete where they hold and answer 1 when a quorum deleted.
//! - **`DIGEST key`** is a read: the digest of the value a quorum agree on, else nil.
//! - **Digests** (`IFDEQ`/`IFDNE`): Lua on the masters cannot compute XXH3, so the proxy reads
//!   the value on every master first, computes its digest, and then sends the value-conditioned
//!   form with the exact value it read: the condition "the digest is `d`" is then checked
//!   atomically against that value, and a value that changed in between is not written.
//!
//! This file holds the commands, the members' scripts and the answers; `op.rs` holds the
//! conditional `SET` and delete as the runner's phases (see [`super::runner`]).

mod op;

use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::args::Cursor;
use super::keys::{Cond, Rule, SetWrite, digest_arg, forward, no_quorum, quorum_floor};
use super::lease::Leased;
use super::lock::agreed_error;
use super::runner;
use super::session::Conn;
use crate::error::Error;
use crate::lockop::Verb;
use crate::proxy::Proxy;
use crate::quorum::Ballots;
use crate::wire::master::command;
use crate::wire::reply::Reply;
use op::{CondDel, CondSet, Plan, ReadFirst};

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
struct Write {
    key: Bytes,
    value: Bytes,
    cond: Cond,
    /// The TTL asked for (`EX`/`PX`/`EXAT`/`PXAT`), in ms from now.
    ttl_ms: Option<i64>,
    keep_ttl: bool,
    get: bool,
}

/// `SET key value IFEQ|IFNE|IFDEQ|IFDNE arg [GET] [expiry]` (see the module docs).
pub fn set(proxy: &Arc<Proxy>, conn: &mut Conn, write: SetWrite) -> Action {
    let SetWrite {
        key, value, opts, ..
    } = write;
    let Some(cond) = opts.cond else {
        return Reply::from(Error::Syntax).into();
    };
    let max = proxy.config().max_ttl_ms;
    if let Some(ttl) = opts.ttl_ms.filter(|t| *t > max as i64) {
        return Reply::from(Error::TtlTooLong { ttl, max }).into();
    }
    let w = Write {
        key,
        value,
        cond,
        ttl_ms: opts.ttl_ms,
        keep_ttl: opts.keep_ttl,
        get: opts.get,
    };
    // An absolute expiry already past (`EXAT`/`PXAT`) is no error: as in Redis and Valkey, a
    // write whose condition holds deletes the key (the value is born expired), so it is a
    // conditional delete decided by the quorum, whose refusal gives each master its value back.
    let lease = match (w.ttl_ms, w.get) {
        (Some(ttl_ms), false) if ttl_ms > 0 => conn
            .leases_for(std::iter::once(w.key.as_ref()))
            .map(|leases| {
                let lock = Leased::Plain {
                    keys: vec![w.key.clone()],
                    token: w.value.clone(),
                    ttl_ms,
                };
                (leases, lock)
            }),
        _ => None,
    };
    let action = match Plan::every(&w.cond) {
        Some(plan) => runner::run(proxy, CondSet { w, plan }),
        None => runner::run(proxy, ReadFirst::<CondSet>(w)),
    };
    match lease {
        Some((leases, lock)) => super::lease::on_grant(leases, proxy, action, lock, Reply::is_ok),
        None => action,
    }
}

/// Whether a master's answer to [`COND_SET`] says it wrote.
fn wrote(r: &Reply) -> bool {
    matches!(r, Reply::Array(a) if a.first() == Some(&Reply::Integer(1)))
}

/// The old value in a master's answer to [`COND_SET`] (nil: the key was missing).
fn old_of(r: &Reply) -> Option<&Reply> {
    match r {
        Reply::Array(a) => a.get(1),
        _ => None,
    }
}

/// How long a master's answer says the key lives now (`i64::MAX` for no TTL).
fn new_ttl_of(r: &Reply) -> Option<i64> {
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
fn repairs(w: &Write) -> Option<super::repair::Reading> {
    let extension = matches!(&w.cond, Cond::Eq(m) if *m == w.value)
        && w.ttl_ms.is_some_and(|t| t > 0)
        && !w.keep_ttl;
    extension.then_some(super::repair::Reading {
        holds: |r, _| new_ttl_of(r).filter(|t| *t != i64::MAX && wrote(r)),
        missing: |r| {
            matches!(r, Reply::Array(a)
                if a.first() == Some(&Reply::Integer(0)) && a.get(1) == Some(&Reply::Nil))
        },
    })
}

/// Whether `old` (the value a key held before, nil for none) makes the condition true.
fn holds(cond: &Cond, old: &Reply) -> bool {
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
fn agreed_old(ballots: &Ballots) -> Option<&Reply> {
    ballots.tally_by(old_of).and_then(|(old, _)| old)
}

/// The answer of a granted write: `OK`, or with `GET` the old value (the one a quorum agree
/// on, else one that made the condition true, as it did where the write landed).
fn set_reply(w: &Write, ballots: &Ballots) -> Reply {
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
fn not_set_reply(w: &Write, ballots: Option<&Ballots>) -> Reply {
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

/// The condition of `DELEX key <word> <arg>`: Redis's syntax error for another word, its
/// digest error for a digest that is not 16 hexadecimal digits.
fn delex_cond(word: &[u8], arg: &Bytes) -> Result<Cond, Error> {
    let digest = || digest_arg(arg).ok_or(Error::BadDigest);
    Ok(if word.eq_ignore_ascii_case(b"IFEQ") {
        Cond::Eq(arg.clone())
    } else if word.eq_ignore_ascii_case(b"IFNE") {
        Cond::Ne(arg.clone())
    } else if word.eq_ignore_ascii_case(b"IFDEQ") {
        Cond::DigestEq(digest()?)
    } else if word.eq_ignore_ascii_case(b"IFDNE") {
        Cond::DigestNe(digest()?)
    } else {
        return Err(Error::Syntax);
    })
}

/// `DELEX key [IFEQ v | IFNE v | IFDEQ d | IFDNE d]`, read.
pub enum Delex {
    /// `DELEX key`: a `DEL`.
    Del(Bytes),
    /// `DELEX key <condition>`
    If {
        /// The key.
        key: Bytes,
        /// The condition, with its argument.
        cond: Cond,
    },
}

impl Delex {
    /// Reads `DELEX key [<word> <arg>]`: a syntax error for any other number of arguments or
    /// another word, the digest error for a digest that is not 16 hexadecimal digits.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Delex, Error> {
        let key = c.next_bytes()?;
        if c.at_end() {
            return Ok(Delex::Del(key));
        }
        if c.remaining() != 2 {
            return Err(Error::Syntax);
        }
        let word = c.next_arg()?;
        let cond = delex_cond(word, &c.next_bytes()?)?;
        Ok(Delex::If { key, cond })
    }
}

/// `DELEX key [IFEQ v | IFNE v | IFDEQ d | IFDNE d]` (see the module docs).
pub fn delex(proxy: &Arc<Proxy>, _: &mut Conn, delex: Delex) -> Action {
    match delex {
        // `DEL` on the masters: they need not know `DELEX`.
        Delex::Del(key) => {
            let del = command(&[b"DEL", &key]);
            forward(proxy, Verb::Delete, del, vec![key], Rule::Of(quorum_floor))
        }
        Delex::If {
            key,
            cond: Cond::Eq(token),
        } => super::lock::release(proxy, key, token),
        Delex::If { key, cond } => match Plan::every(&cond) {
            Some(plan) => runner::run(proxy, CondDel { key, plan }),
            None => runner::run(proxy, ReadFirst::<CondDel>((key, cond))),
        },
    }
}

/// `DELIFEQ key value` (Valkey 9.0), read.
pub struct DelIfEq {
    key: Bytes,
    value: Bytes,
}

impl DelIfEq {
    /// Reads `DELIFEQ key value`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<DelIfEq, Error> {
        Ok(DelIfEq {
            key: c.next_bytes()?,
            value: c.next_bytes()?,
        })
    }
}

/// `DELIFEQ key value` (Valkey 9.0): the Redlock release, as `DELEX key IFEQ value`.
pub fn delifeq(proxy: &Arc<Proxy>, _: &mut Conn, d: DelIfEq) -> Action {
    super::lock::release(proxy, d.key, d.value)
}

/// Decides a conditional delete from each master's answer (1 deleted, 0 not): 1 when a quorum
/// deleted, 0 when a quorum answered but fewer deleted; else a quorum's error (`WRONGTYPE`) or
/// the no-quorum error.
fn deleted(ballots: &Ballots) -> Reply {
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

/// `DIGEST key`: the key.
pub struct Digest(Bytes);

impl Digest {
    /// Reads `DIGEST key`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Digest, Error> {
        c.next_bytes().map(Digest)
    }
}

/// `DIGEST key`: the digest of the value a quorum of masters agree on; nil when none has a
/// quorum (or the key is missing there); a quorum's error (`WRONGTYPE`) is passed on.
pub fn digest(proxy: &Arc<Proxy>, _: &mut Conn, Digest(key): Digest) -> Action {
    let get = command(&[b"GET", &key]);
    forward(proxy, Verb::Query, get, vec![key], Rule::Of(agreed_digest))
}

/// The digest of the value a quorum agree on; a quorum's error is passed on; else nil.
fn agreed_digest(ballots: &Ballots) -> Reply {
    match ballots.majority() {
        Some(Reply::Bulk(v)) => Reply::Bulk(digest_hex(digest_of(v))),
        Some(e) if e.is_error() => e.clone(),
        _ => Reply::Nil,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::scripted::ballots;
    use Reply::Integer as I;
    use std::time::Duration;

    pub(super) fn bulk(s: &str) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn digests_are_xxh3_as_redis_prints_them() {
        // The example of Redis's DIGEST page, and Redis's fix for leading zeros (16 digits
        // always, lower case).
        assert_eq!(digest_hex(digest_of(b"Hello world")), "b6acb9d84a38ff74");
        assert_eq!(digest_hex(0x6c38adf31777), "00006c38adf31777");
        // XXH3-64 of the empty input with seed 0 (the reference implementation's value).
        assert_eq!(digest_of(b""), 0x2d06800538d394c2);
        assert_eq!(digest_arg(b"B6ACB9D84A38FF74"), Some(0xb6acb9d84a38ff74));
        for bad in [
            &b"b6acb9d84a38ff7"[..],
            b"b6acb9d84a38ff744",
            b"g6acb9d84a38ff74",
            b"",
        ] {
            assert_eq!(digest_arg(bad), None, "{}", bad.escape_ascii());
        }
    }

    #[test]
    fn only_an_ifeq_extension_with_a_ttl_is_repaired_and_only_where_the_key_was_missing() {
        use crate::command::repair::{EXTEND_READING, plan};
        let ext = |cond: Cond, ttl_ms: Option<i64>, keep_ttl: bool| Write {
            cond,
            ttl_ms,
            keep_ttl,
            ..write(Cond::Eq(Bytes::from_static(b"new")), false)
        };
        let new = || Bytes::from_static(b"new");
        assert!(repairs(&ext(Cond::Eq(new()), Some(1000), false)).is_some());
        // A takeover, the other conditions, no TTL or `KEEPTTL`: not extensions.
        for w in [
            ext(Cond::Eq(Bytes::from_static(b"old")), Some(1000), false),
            ext(Cond::Ne(new()), Some(1000), false),
            ext(Cond::DigestEq(digest_of(b"new")), Some(1000), false),
            ext(Cond::Eq(new()), None, false),
            ext(Cond::Eq(new()), Some(1000), true),
            ext(Cond::Eq(new()), Some(-1), false),
        ] {
            assert!(repairs(&w).is_none());
        }
        let reading = repairs(&ext(Cond::Eq(new()), Some(1000), false)).expect("an extension");
        // Five members: wrote on three (new PTTL 1000); the key was missing on the fourth; the
        // fifth held another value.
        let wrote = Some(Reply::Array(vec![I(1), bulk("new"), I(400), I(1000)]));
        let missing = Some(Reply::Array(vec![I(0), Reply::Nil, I(-2)]));
        let other = Some(Reply::Array(vec![I(0), bulk("other"), I(700)]));
        let b = ballots(vec![wrote.clone(), wrote.clone(), wrote, missing, other]);
        let p = plan(&b, reading, 1000, |_| true, Duration::ZERO, 0.01).expect("a repair");
        assert_eq!((p.members, p.px_ms), (vec![3], 1000 - 12));
        // The script's reading never takes a conditional `SET`'s answers for a grant.
        assert_eq!(
            plan(&b, EXTEND_READING, 1000, |_| true, Duration::ZERO, 0.01),
            None
        );
    }

    pub(super) fn write(cond: Cond, get: bool) -> Write {
        Write {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"new"),
            cond,
            ttl_ms: Some(10_000),
            keep_ttl: false,
            get,
        }
    }

    pub(super) fn answer(flag: i64, old: Reply) -> Option<Reply> {
        Some(Reply::Array(vec![I(flag), old, I(5_000), I(10_000)]))
    }

    #[test]
    fn a_refused_set_with_get_never_reads_as_written() {
        let eq = |m: &str| Cond::Eq(Bytes::copy_from_slice(m.as_bytes()));
        let ne = |m: &str| Cond::Ne(Bytes::copy_from_slice(m.as_bytes()));
        // IFEQ old: written on one master of three. The old value a quorum agree on is "old",
        // which would tell the client "set": the answer is nil instead.
        let b = ballots(vec![answer(1, bulk("old")), answer(0, bulk("old")), None]);
        assert_eq!(not_set_reply(&write(eq("old"), true), Some(&b)), Reply::Nil);
        // A value that fails the condition is passed on as it is.
        let b = ballots(vec![answer(0, bulk("x")), answer(0, bulk("x")), None]);
        assert_eq!(not_set_reply(&write(eq("old"), true), Some(&b)), bulk("x"));
        // IFNE m: the compared value itself says "not set".
        let b = ballots(vec![answer(1, Reply::Nil), None, None]);
        assert_eq!(not_set_reply(&write(ne("m"), true), Some(&b)), bulk("m"));
        // IFDNE d without any value of digest d read: no answer can say "not set" truthfully.
        let d = digest_of(b"held");
        let b = ballots(vec![answer(1, Reply::Nil), None, None]);
        assert!(not_set_reply(&write(Cond::DigestNe(d), true), Some(&b)).is_error());
        let b = ballots(vec![answer(1, Reply::Nil), answer(0, bulk("held")), None]);
        assert_eq!(
            not_set_reply(&write(Cond::DigestNe(d), true), Some(&b)),
            bulk("held")
        );
        // Without GET: nil.
        assert_eq!(
            not_set_reply(&write(eq("old"), false), Some(&b)),
            Reply::Nil
        );
    }

    #[test]
    fn a_granted_set_with_get_answers_an_old_value_that_meets_the_condition() {
        let eq = Cond::Eq(Bytes::from_static(b"old"));
        let b = ballots(vec![answer(1, bulk("old")), answer(1, bulk("old")), None]);
        assert_eq!(set_reply(&write(eq.clone(), true), &b), bulk("old"));
        assert_eq!(set_reply(&write(eq, false), &b), Reply::ok());
        // IFNE: the masters held different values; any of the written ones says "set".
        let ne = Cond::Ne(Bytes::from_static(b"m"));
        let b = ballots(vec![answer(1, Reply::Nil), answer(1, bulk("x")), None]);
        let got = set_reply(&write(ne.clone(), true), &b);
        assert!(holds(&ne, &got), "{got:?}");
    }

    #[test]
    fn a_conditional_delete_needs_a_quorum_of_deletions() {
        assert_eq!(deleted(&ballots(vec![Some(I(1)), Some(I(1)), None])), I(1));
        assert_eq!(deleted(&ballots(vec![Some(I(1)), Some(I(0)), None])), I(0));
        assert!(deleted(&ballots(vec![Some(I(1)), None, None])).is_error());
        let wrong = Some(Reply::static_error(
            "WRONGTYPE Operation against a key holding the wrong kind of value script: \
             0123456789abcdef0123456789abcdef01234567, on @user_script:1.",
        ));
        assert_eq!(
            deleted(&ballots(vec![wrong.clone(), wrong, Some(I(1))])),
            Reply::static_error(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            )
        );
    }

    #[test]
    fn conditions_on_a_missing_key() {
        // Redis 8.4: IFEQ/IFDEQ never hold on a missing key, IFNE/IFDNE always do.
        let m = Bytes::from_static(b"m");
        assert!(!holds(&Cond::Eq(m.clone()), &Reply::Nil));
        assert!(!holds(&Cond::DigestEq(1), &Reply::Nil));
        assert!(holds(&Cond::Ne(m), &Reply::Nil));
        assert!(holds(&Cond::DigestNe(1), &Reply::Nil));
    }
}
