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
mod rules;

use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::args::Cursor;
use super::keys::{Cond, Rule, SetWrite, digest_arg, forward, quorum_floor};
use super::lease::Leased;
use super::runner;
use super::session::Conn;
use crate::error::Error;
use crate::lockop::Verb;
use crate::proxy::Proxy;
use crate::quorum::Ballots;
use crate::wire::master::command;
use crate::wire::reply::Reply;
use op::{CondDel, CondSet, Plan, ReadFirst};
use rules::Write;
pub use rules::{COND_DEL, COND_SET, RESTORE, digest_hex, digest_of};

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
    use super::rules::*;
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
