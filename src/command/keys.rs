//! The key commands that lock owners and legacy `SETNX` lock code use, each answered by a
//! majority rule.
//!
//! Every command here goes to all N masters at once as one quorum operation of the runner
//! ([`Forward`]), and one rule per command turns the N replies into the answer ([`Rule`]); what
//! a write leaves behind is taken back in its undo phase. Where the masters disagree, the answer
//! is the conservative one, so that no two clients can both come away believing they hold a lock:
//!
//! - `GET`: the value a quorum agree on, else nil.
//! - `EXISTS`, `DEL`, `EXPIRE`, `PEXPIRE`, `PEXPIREAT`: the largest count that a quorum of
//!   masters reach ([`quorum_floor`]).
//! - `TTL`, `PTTL`: the longest time a quorum of masters still keep the key ([`ttl_floor`]).
//! - `SETNX`: 1 when a quorum created the key. Otherwise 0, and the value it wrote is deleted
//!   again (compare-and-delete) on every master where it may have landed.
//! - `GETSET` and `SET ... GET`: the old value a quorum agree on; otherwise the value just
//!   written, so a legacy takeover ("whoever gets back the expired timestamp owns the lock")
//!   cannot be won without a majority, and that value is deleted again where it landed.
//! - `SET` (plain or `XX`): the reply a quorum agree on; otherwise nil for `XX` and an error
//!   for a plain `SET`.
//!
//! A reply that fewer than a quorum of masters gave at all is the `CLUSTERDOWN` error, except
//! where the rule above names a safe answer.
//!
//! **Deadlock guard.** A write that would leave a key with no expiry (`SETNX`, `GETSET`, `SET`
//! without `EX`/`PX`/`KEEPTTL`) gives it `legacy_guard_ttl_ms` (capped at `max_ttl_ms`) instead,
//! so a client that dies between `SETNX` and `EXPIRE` does not block the resource forever.
//! Expiries are capped at `max_ttl_ms`, which the restart quarantine relies on.

use std::borrow::Cow;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::action::{Action, Later};
use super::args::Cursor;
use super::lock::compare_and_delete;
use super::runner::{Clock, Operation, Voted, run, send_each};
use super::session::Conn;
use super::spec::{Cmd, unix_ms};
use crate::config::{Config, LegacyDecision};
use crate::counters::Counters;
use crate::error::Error;
use crate::lockop::{Holder, Lock, Verb};
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Masters, Request, Vote, ask};
use crate::wire::master::{command, eval};
use crate::wire::reply::Reply;
use crate::wire::resp;

/// A key command sent on to every master, once its keys have their turn, and answered by the
/// rule of its command: one quorum operation of the runner ([`super::runner`]).
pub struct Forward {
    /// The command, encoded for the masters.
    request: Bytes,
    /// The keys it names (whose turn it takes).
    keys: Vec<Bytes>,
    /// What it does to them.
    verb: Verb,
    /// How many replies it waits for.
    gather: Gather,
    /// How the replies become the answer.
    rule: Rule,
}

/// How the masters' replies become one answer. A rule decides from the replies alone; what it
/// leaves to take back is [`Forward`]'s undo, sent while the command's keys are still held, so
/// it reaches each master before any later command on them.
pub enum Rule {
    /// A function of the replies.
    Of(fn(&Ballots) -> Reply),
    /// `SETNX`: 1 when a quorum created `key`; otherwise 0 (or a quorum's error), and `value` is
    /// taken back wherever it may have landed.
    Created {
        /// The key.
        key: Bytes,
        /// The value written.
        value: Bytes,
    },
    /// `GETSET` and `SET ... GET`: the old value a quorum agree on. Without one, the value just
    /// written (a legacy takeover cannot be won without a majority), and that value is taken
    /// back wherever it landed: two takeovers that split the masters between them would
    /// otherwise leave no majority value behind, and the lock blocked until the deadlock guard
    /// ran out.
    OldValue {
        /// The key.
        key: Bytes,
        /// The value written.
        written: Bytes,
    },
    /// `EXISTS` for `SET key token NX EXAT|PXAT <past>`: `OK` when a quorum lack the key, else
    /// nil (a denial).
    Absent,
}

/// How many replies a command waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Gather {
    /// Until the outcome is known (early decision).
    Outcome,
    /// Every master's, until the node deadline: a rule that cleans up needs to know what each
    /// master did, not guess it.
    All,
    /// The `first-master` negative control: every master's, and master 0's alone counted (a
    /// quorum of one), as a plain proxy in front of a single Redis would answer.
    FirstMaster,
}

impl Forward {
    /// `request` on every master for `keys`, answered by `rule` as soon as the outcome is known
    /// (every reply with the `first-master` negative control, which needs master 0's).
    pub fn new(proxy: &Proxy, verb: Verb, request: Bytes, keys: Vec<Bytes>, rule: Rule) -> Self {
        let gather = if proxy.config().legacy_decision == LegacyDecision::FirstMaster {
            Gather::FirstMaster
        } else {
            Gather::Outcome
        };
        Forward {
            request,
            keys,
            verb,
            gather,
            rule,
        }
    }

    /// This command, waiting for every master's reply (see [`Gather::All`]).
    pub fn every_reply(self) -> Self {
        match self.gather {
            Gather::Outcome => Forward {
                gather: Gather::All,
                ..self
            },
            _ => self,
        }
    }

    /// The ballots the rule counts (see [`Gather::FirstMaster`]).
    fn counted<'a>(&self, ballots: &'a Ballots) -> Cow<'a, Ballots> {
        match self.gather {
            Gather::FirstMaster => Cow::Owned(first_master(ballots.clone())),
            _ => Cow::Borrowed(ballots),
        }
    }
}

/// Whether a `SETNX` (or its `SET NX` form) created the key on a master.
fn created(r: &Reply) -> bool {
    r.is_ok() || *r == Reply::Integer(1)
}

impl Operation for Forward {
    type Decision = Reply;

    fn lock(&self) -> Lock<'_> {
        let holder = match &self.rule {
            Rule::Created { value, .. } | Rule::OldValue { written: value, .. } => {
                Holder::Token(value)
            }
            _ => Holder::Anyone,
        };
        Lock {
            holder,
            ..Lock::mutex(&self.keys, &[], 0)
        }
    }

    fn verb(&self) -> Verb {
        self.verb
    }

    fn request(&self, _: &Masters, _: &Config) -> Request {
        Request::Same(self.request.clone())
    }

    fn poll_vote(&self, vote: &mut Vote, cx: &mut Context<'_>) -> Poll<()> {
        match self.gather {
            Gather::Outcome => vote.poll_outcome(cx),
            Gather::All | Gather::FirstMaster => vote.poll_finish(cx),
        }
    }

    fn decide(&self, ballots: &Ballots, _: Duration, _: &Config) -> Reply {
        let b = self.counted(ballots);
        match &self.rule {
            Rule::Of(rule) => rule(&b),
            Rule::Created { .. } if b.agree(created) => Reply::Integer(1),
            Rule::Created { .. } => b.majority_error().cloned().unwrap_or(Reply::Integer(0)),
            Rule::OldValue { written, .. } => match b.majority() {
                Some(r) => r.clone(),
                None => Reply::Bulk(written.clone()),
            },
            Rule::Absent if b.agree(|r| *r == Reply::Integer(0)) => Reply::ok(),
            Rule::Absent => Reply::Nil,
        }
    }

    /// A write a quorum did not make, taken back (compare-and-delete) where it may have landed.
    fn undo(&self, ballots: &Ballots, _: Option<&Ballots>) -> Vec<Option<Bytes>> {
        let b = self.counted(ballots);
        match &self.rule {
            Rule::Created { key, value } if !b.agree(created) => {
                take_back_plan(&b, key, value, created)
            }
            Rule::OldValue { key, written } if b.majority().is_none() => {
                take_back_plan(&b, key, written, |r| !r.is_error())
            }
            _ => Vec::new(),
        }
    }

    fn answer(
        &self,
        proxy: &Proxy,
        reply: Reply,
        vote: &mut Vote,
        _: &Clock,
    ) -> Result<Reply, Reply> {
        if matches!(self.rule, Rule::Absent) && reply == Reply::Nil {
            Counters::bump(&proxy.counters().denials);
        }
        // Sent without counting a roll-back: a legacy write's clean-up is no lock's.
        send_each(vote.masters(), self.undo(vote.ballots(), None));
        Ok(reply)
    }

    fn rest(self, _: Arc<Proxy>, reply: Reply, _: Voted) -> Later {
        Box::pin(std::future::ready(reply))
    }
}

/// Runs `request` on every master for `keys` (see [`Forward`]).
pub fn forward(
    proxy: &Arc<Proxy>,
    verb: Verb,
    request: Bytes,
    keys: Vec<Bytes>,
    rule: Rule,
) -> Action {
    run(proxy, Forward::new(proxy, verb, request, keys, rule))
}

/// Sends `request` to every master and gathers the replies, for a caller that decides in its
/// own terms (every reply with the `first-master` negative control; see [`counted`]).
pub async fn vote(proxy: &Proxy, request: Bytes, gather: Gather) -> Ballots {
    let deadline = Instant::now() + proxy.config().node_timeout();
    let v = ask(&proxy.masters(), Request::Same(request), 1, deadline);
    // With the first-master rule, master 0's reply is needed even when the others decided.
    if gather != Gather::Outcome || proxy.config().legacy_decision == LegacyDecision::FirstMaster {
        v.finish().await
    } else {
        v.outcome().await
    }
}

/// The ballots a legacy rule counts: all of them, or with the `first-master` negative control
/// master 0's alone (see [`Gather::FirstMaster`]).
pub fn counted(cfg: &Config, ballots: Ballots) -> Ballots {
    if cfg.legacy_decision == LegacyDecision::FirstMaster {
        first_master(ballots)
    } else {
        ballots
    }
}

/// `ballots` with master 0's reply alone, and a quorum of one.
fn first_master(mut ballots: Ballots) -> Ballots {
    for i in 1..ballots.replies.len() {
        ballots.replies[i] = None;
        ballots.failed[i] = Some(crate::backend::BackendError::Down);
    }
    ballots.quorum = crate::quorum::Quorum::one();
    ballots
}

/// The take-back of `value` from `key` (only while the key still holds it) on every master
/// that `wrote` it, or that may have written it without a counted answer.
fn take_back_plan(
    b: &Ballots,
    key: &Bytes,
    value: &Bytes,
    wrote: impl Fn(&Reply) -> bool,
) -> Vec<Option<Bytes>> {
    let plan: Vec<Vec<&Bytes>> = (0..b.replies.len())
        .map(|i| match &b.replies[i] {
            Some(r) if wrote(r) => vec![key],
            None if b.may_have_run(i) => vec![key],
            _ => Vec::new(),
        })
        .collect();
    compare_and_delete(&plan, value)
}

/// The client's command, as it came.
fn verbatim(c: &Cursor<'_>) -> Bytes {
    let parts: Vec<&[u8]> = c.whole().collect();
    command(&parts)
}

/// A key command sent on to every master as the client wrote it: `GET`, `EXISTS`, `DEL`,
/// `UNLINK`, `TTL`, `PTTL`, `HGET`, `HEXISTS`, `HGETALL`, `LLEN`.
pub struct Verbatim {
    /// The command, encoded for the masters.
    request: Bytes,
    /// The keys it names (whose turn it takes).
    keys: Vec<Bytes>,
}

impl Verbatim {
    /// Reads `command key [argument ...]`: one key, then what the command takes after it.
    pub fn one_key(c: &mut Cursor<'_>) -> Result<Verbatim, Error> {
        let request = verbatim(c);
        let key = c.next_bytes()?;
        Ok(Verbatim {
            request,
            keys: vec![key],
        })
    }

    /// Runs it on every master (see [`Forward`]).
    fn forward(self, proxy: &Arc<Proxy>, verb: Verb, rule: Rule) -> Action {
        forward(proxy, verb, self.request, self.keys, rule)
    }

    /// Reads `command key [key ...]`: every argument a key.
    pub fn all_keys(c: &mut Cursor<'_>) -> Verbatim {
        Verbatim {
            request: verbatim(c),
            keys: c.rest_bytes(),
        }
    }
}

/// The largest integer that at least a quorum of masters reported (each master's reply counts
/// for every value up to it). The `CLUSTERDOWN` error when fewer than a quorum answered with an
/// integer; a majority's error (e.g. `WRONGTYPE`) is passed on.
pub fn quorum_floor(ballots: &Ballots) -> Reply {
    ranked(ballots, |n| n)
}

/// The `TTL`/`PTTL` rule: the remaining time that a quorum of masters still keep the key for,
/// where "no expiry" (-1) outranks every time and "missing" (-2) ranks below every time. It is
/// the time after which fewer than a majority may still hold the key.
pub fn ttl_floor(ballots: &Ballots) -> Reply {
    ranked(ballots, |n| if n == -1 { i64::MAX } else { n })
}

/// The quorum-th largest integer reply, ordered by `rank`.
fn ranked(ballots: &Ballots, rank: fn(i64) -> i64) -> Reply {
    let integer = |_, r: &Reply| match r {
        Reply::Integer(n) => Some(*n),
        _ => None,
    };
    match ballots.quorum_th(integer, |v| rank(*v)) {
        Some(v) => Reply::Integer(v),
        None => ballots.majority_error().cloned().unwrap_or_else(no_quorum),
    }
}

/// The error for a command that fewer than a quorum of masters answered alike.
pub fn no_quorum() -> Reply {
    Reply::from(Error::NoQuorum)
}

/// The reply a quorum agree on, else nil.
pub fn agreed(ballots: &Ballots) -> Reply {
    ballots.majority().cloned().unwrap_or(Reply::Nil)
}

/// The reply a quorum agree on, else the no-quorum error.
pub fn agreed_or_no_quorum(ballots: &Ballots) -> Reply {
    ballots.majority().cloned().unwrap_or_else(no_quorum)
}

/// `GET key`
pub fn get(proxy: &Arc<Proxy>, _: &mut Conn, v: Verbatim) -> Action {
    v.forward(proxy, Verb::Query, Rule::Of(agreed))
}

/// `EXISTS key [key ...]`
pub fn exists(proxy: &Arc<Proxy>, _: &mut Conn, v: Verbatim) -> Action {
    v.forward(proxy, Verb::Query, Rule::Of(quorum_floor))
}

/// `DEL key [key ...]`: deleted on every master; answers how many keys a quorum deleted.
pub fn del(proxy: &Arc<Proxy>, _: &mut Conn, v: Verbatim) -> Action {
    v.forward(proxy, Verb::Delete, Rule::Of(quorum_floor))
}

/// `PX <ms>` of the deadlock guard as text, or `None` when the guard is off.
pub(super) fn guard_px(cfg: &Config) -> Option<String> {
    let guard = cfg.legacy_guard_ttl_ms();
    (guard > 0).then(|| itoa::Buffer::new().format(guard).to_owned())
}

/// `SETNX key value`, read.
pub struct SetNx {
    key: Bytes,
    value: Bytes,
}

impl SetNx {
    /// Reads `SETNX key value`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<SetNx, Error> {
        Ok(SetNx {
            key: c.next_bytes()?,
            value: c.next_bytes()?,
        })
    }
}

/// `SETNX key value`: 1 when a quorum of masters created the key; otherwise 0, and the value is
/// deleted again wherever this `SETNX` may have written it (and only while it holds that value).
/// It waits for every master's answer first: legacy values are timestamps, and two clients
/// often write the same one, so a master that has not answered may hold the same value for the
/// lock's real holder.
pub fn setnx(proxy: &Arc<Proxy>, _: &mut Conn, SetNx { key, value }: SetNx) -> Action {
    let request = match guard_px(proxy.config()) {
        Some(ttl) => command(&[b"SET", &key, &value, b"NX", b"PX", ttl.as_bytes()]),
        None => command(&[b"SETNX", &key, &value]),
    };
    write_every(proxy, request, key.clone(), Rule::Created { key, value })
}

/// Runs a legacy write of `key` on every master, waiting for every reply: its rule takes back
/// what a quorum did not make, and needs to know what each master did, not guess it.
fn write_every(proxy: &Arc<Proxy>, request: Bytes, key: Bytes, rule: Rule) -> Action {
    let op = Forward::new(proxy, Verb::Write, request, vec![key], rule);
    run(proxy, op.every_reply())
}

/// `GETSET key value`, read.
pub struct GetSet {
    key: Bytes,
    value: Bytes,
    /// The command as the client wrote it.
    verbatim: Bytes,
}

impl GetSet {
    /// Reads `GETSET key value`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<GetSet, Error> {
        Ok(GetSet {
            verbatim: verbatim(c),
            key: c.next_bytes()?,
            value: c.next_bytes()?,
        })
    }
}

/// `GETSET key value`: written on every master (with the deadlock guard); answers the old
/// value a quorum agree on, else the value just written (see [`Rule::OldValue`]).
pub fn getset(proxy: &Arc<Proxy>, _: &mut Conn, g: GetSet) -> Action {
    let request = match guard_px(proxy.config()) {
        Some(ttl) => command(&[b"SET", &g.key, &g.value, b"PX", ttl.as_bytes(), b"GET"]),
        None => g.verbatim,
    };
    let (key, written) = (g.key, g.value);
    write_every(proxy, request, key.clone(), Rule::OldValue { key, written })
}

/// The error for an expiry beyond `max_ttl_ms`, if `ms` is one.
pub(super) fn too_long(proxy: &Proxy, ms: i64) -> Option<Reply> {
    let max = proxy.config().max_ttl_ms;
    (ms > max as i64).then(|| Reply::from(Error::ExpiryTooLong { ms, max }))
}

/// `EXPIRE key seconds`, `PEXPIRE key ms`, `EXPIREAT key unix-s`, `PEXPIREAT key unix-ms`
/// (with Redis 7's `NX|XX|GT|LT`), read.
pub struct Expire {
    /// The command's name as the client wrote it.
    name: Bytes,
    key: Bytes,
    /// The time as written, and the options after it, sent on as they are.
    time: Vec<Bytes>,
    /// The expiry in ms from now.
    ms: i64,
}

impl Expire {
    /// Reads `cmd key time [NX|XX|GT|LT]`, with Redis's errors: a time that is no integer, or
    /// seconds beyond milliseconds, or a relative expiry that is no time once added to the
    /// clock.
    pub fn parse(c: &mut Cursor<'_>, cmd: Cmd) -> Result<Expire, Error> {
        let name = c.name_bytes();
        let key = c.next_bytes()?;
        let n = c.peek().and_then(resp::parse_int);
        let time = c.rest_bytes();
        let Some(n) = n else {
            return Err(Error::NotAnInteger);
        };
        let now = unix_ms();
        let ms = match cmd {
            Cmd::Expire => n
                .checked_mul(1000)
                .filter(|ms| ms.checked_add(now).is_some()),
            Cmd::Pexpire => n.checked_add(now).map(|_| n),
            Cmd::Expireat => n.checked_mul(1000).map(|at| at.saturating_sub(now)),
            _ => Some(n.saturating_sub(now)),
        };
        let ms = ms.ok_or(Error::InvalidExpire(cmd.spec().name))?;
        Ok(Expire {
            name,
            key,
            time,
            ms,
        })
    }

    /// The key it sets the expiry of.
    pub fn key(&self) -> &Bytes {
        &self.key
    }
}

/// `EXPIRE key seconds`, `PEXPIRE key ms`, `EXPIREAT key unix-s`, `PEXPIREAT key unix-ms` (with
/// Redis 7's `NX|XX|GT|LT`): on every master; answers 1 when a quorum set the expiry.
pub fn expire(proxy: &Arc<Proxy>, _: &mut Conn, e: Expire) -> Action {
    expire_where(proxy, e, None)
}

/// Runs the client's expiry command (`ARGV[2]`, its arguments from `ARGV[3]`) on `KEYS[1]` only
/// while the key holds `ARGV[1]`; answers 0 elsewhere, as for a missing key.
const EXPIRE_IF: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
    return redis.call(ARGV[2], KEYS[1], unpack(ARGV, 3)) end return 0";

/// [`expire`], and with `holds` (`EXEC`'s watched value of the key) set on each master only
/// while the key still holds that value, so a queued extension never reaches another holder's
/// lock, even one written by another proxy after `EXEC`'s check.
pub(super) fn expire_where(proxy: &Arc<Proxy>, e: Expire, holds: Option<Bytes>) -> Action {
    if let Some(e) = too_long(proxy, e.ms) {
        return e.into();
    }
    let time = e.time.iter().map(|a| a.as_ref());
    let request = match &holds {
        None => {
            let parts: Vec<&[u8]> = [&e.name[..], &e.key].into_iter().chain(time).collect();
            command(&parts)
        }
        Some(value) => {
            let argv: Vec<&[u8]> = [&value[..], &e.name].into_iter().chain(time).collect();
            eval(EXPIRE_IF, std::slice::from_ref(&e.key), &argv)
        }
    };
    forward(
        proxy,
        Verb::Extend,
        request,
        vec![e.key],
        Rule::Of(quorum_floor),
    )
}

/// `TTL key`, `PTTL key`: see [`ttl_floor`].
pub fn ttl(proxy: &Arc<Proxy>, _: &mut Conn, v: Verbatim) -> Action {
    v.forward(proxy, Verb::Query, Rule::Of(ttl_floor))
}

/// `HGET key field`: the value a quorum agree on, else nil (as [`get`]). Lock libraries read
/// a hash lock's holder this way (Redisson's `getHoldCount`).
pub fn hget(proxy: &Arc<Proxy>, _: &mut Conn, v: Verbatim) -> Action {
    v.forward(proxy, Verb::Query, Rule::Of(agreed))
}

/// `HEXISTS key field`, `LLEN key`: the largest count a quorum of masters reach (see
/// [`quorum_floor`]): a field "exists" only where a majority have it.
pub fn count(proxy: &Arc<Proxy>, _: &mut Conn, v: Verbatim) -> Action {
    v.forward(proxy, Verb::Query, Rule::Of(quorum_floor))
}

/// `HGETALL key`: see [`agreed_hash`].
pub fn hgetall(proxy: &Arc<Proxy>, _: &mut Conn, v: Verbatim) -> Action {
    v.forward(proxy, Verb::Query, Rule::Of(agreed_hash))
}

/// The hash a quorum of masters hold alike (a map in RESP3, a flat array in RESP2, as Redis
/// answers); an empty one when no two agree, so nobody reads a lock as held that a majority
/// does not hold.
pub fn agreed_hash(ballots: &Ballots) -> Reply {
    match ballots.majority() {
        Some(Reply::Array(flat)) => Reply::Map(
            flat.chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect(),
        ),
        Some(other) => other.clone(),
        None => Reply::Map(Vec::new()),
    }
}

/// `SET key value <options with KEEPTTL>` that gives the key `ARGV[2]` ms when it has no TTL
/// afterwards: `KEYS[1]` the key, `ARGV[1]` the value, `ARGV[2]` the guard, the rest the
/// client's options. Answers what `SET` answered (`OK`, nil, or the old value with `GET`).
const SET_KEEPTTL: &str = "local r = redis.call('set', KEYS[1], ARGV[1], unpack(ARGV, 3)) \
    if redis.call('pttl', KEYS[1]) == -1 then redis.call('pexpire', KEYS[1], ARGV[2]) end \
    return r";

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
    /// `IFEQ`, `IFNE`, `IFDEQ` or `IFDNE` (Redis 8.4, Valkey 8.1): a conditional write, run by
    /// `command::conditional`.
    pub cond: Option<Cond>,
}

/// A digest argument of `IFDEQ`/`IFDNE`: exactly 16 hexadecimal digits, in either case (Redis
/// 8.4 compares them without case); `None` for anything else.
pub fn digest_arg(arg: &[u8]) -> Option<u64> {
    if arg.len() != 16 || !arg.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(arg).ok()?, 16).ok()
}

/// The condition of a conditional `SET` or `DELEX`, with its argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// `IFEQ value`: only where the key holds exactly `value` (a missing key does not).
    Eq(Bytes),
    /// `IFNE value`: only where the key does not hold `value` (a missing key counts).
    Ne(Bytes),
    /// `IFDEQ digest`: only where the value's XXH3 digest is this one.
    DigestEq(u64),
    /// `IFDNE digest`: only where the key is missing or its value's digest is another.
    DigestNe(u64),
}

/// A `SET` that writes without `NX` (or a conditional one): its parts, sent on as they are, and
/// what its options mean.
#[derive(Debug, PartialEq, Eq)]
pub struct SetWrite {
    /// The command's name as sent (`SET`, in the client's case).
    pub name: Bytes,
    /// The key.
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
    /// The options as written, sent on as they are.
    pub options: Vec<Bytes>,
    /// What they mean.
    pub opts: SetOptions,
}

/// `SET key value [XX] [GET] [EX|PX|EXAT|PXAT|KEEPTTL]` (any `SET` without `NX`).
pub fn write(proxy: &Arc<Proxy>, w: SetWrite) -> Action {
    let SetWrite {
        name,
        key,
        value,
        options,
        opts,
    } = w;
    if let Some(e) = opts.ttl_ms.and_then(|ms| too_long(proxy, ms)) {
        return e.into();
    }
    let options = options.iter().map(|a| a.as_ref());
    let mut parts: Vec<&[u8]> = [&name[..], &key, &value]
        .into_iter()
        .chain(options.clone())
        .collect();
    let guard = guard_px(proxy.config()).filter(|_| opts.ttl_ms.is_none());
    let request = match &guard {
        // `KEEPTTL` keeps the key's TTL, and a new key has none: it gets the guard's, on each
        // master in the same step (a script), so no key is ever left without one.
        Some(ttl) if opts.keep_ttl => {
            let argv: Vec<&[u8]> = [&value[..], ttl.as_bytes()]
                .into_iter()
                .chain(options)
                .collect();
            eval(SET_KEEPTTL, std::slice::from_ref(&key), &argv)
        }
        Some(ttl) => {
            parts.extend([b"PX".as_slice(), ttl.as_bytes()]);
            command(&parts)
        }
        None => command(&parts),
    };
    let rule = match (opts.get, opts.xx) {
        (true, _) => {
            let written = value;
            return write_every(proxy, request, key.clone(), Rule::OldValue { key, written });
        }
        (false, true) => Rule::Of(agreed),
        (false, false) => Rule::Of(agreed_or_no_quorum),
    };
    forward(proxy, Verb::Write, request, vec![key], rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::quorum::scripted::ballots;

    #[test]
    fn quorum_floor_counts_what_a_majority_reach() {
        use Reply::Integer as I;
        let b = ballots(vec![Some(I(2)), Some(I(1)), Some(I(0)), None, Some(I(2))]);
        assert_eq!(quorum_floor(&b), I(1));
        assert_eq!(
            quorum_floor(&ballots(vec![Some(I(2)), None, None])),
            no_quorum()
        );
    }

    #[test]
    fn ttl_floor_ranks_no_expiry_highest_and_missing_lowest() {
        use Reply::Integer as I;
        assert_eq!(
            ttl_floor(&ballots(vec![Some(I(-1)), Some(I(5000)), Some(I(-2))])),
            I(5000)
        );
        assert_eq!(
            ttl_floor(&ballots(vec![Some(I(-1)), Some(I(-1)), Some(I(7))])),
            I(-1)
        );
        assert_eq!(
            ttl_floor(&ballots(vec![Some(I(-2)), Some(I(-2)), Some(I(7))])),
            I(-2)
        );
        assert_eq!(
            ttl_floor(&ballots(vec![Some(I(9)), None, None])),
            no_quorum()
        );
    }

    #[test]
    fn a_majority_error_is_passed_on() {
        let wrong = Reply::static_error(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        );
        let b = ballots(vec![
            Some(wrong.clone()),
            Some(wrong.clone()),
            Some(Reply::Integer(1)),
        ]);
        assert_eq!(quorum_floor(&b), wrong);
    }

    fn op(rule: Rule, gather: Gather) -> Forward {
        Forward {
            request: Bytes::new(),
            keys: vec![Bytes::from_static(b"k")],
            verb: Verb::Write,
            gather,
            rule,
        }
    }

    fn setnx(gather: Gather) -> Forward {
        let (key, value) = (Bytes::from_static(b"k"), Bytes::from_static(b"v"));
        op(Rule::Created { key, value }, gather)
    }

    /// The compare-and-delete of `v` from `k` on the masters `on` of `n`.
    fn take_back_on(n: usize, on: &[usize]) -> Vec<Option<Bytes>> {
        let k = Bytes::from_static(b"k");
        let plan: Vec<Vec<&Bytes>> = (0..n)
            .map(|i| if on.contains(&i) { vec![&k] } else { vec![] })
            .collect();
        compare_and_delete(&plan, &Bytes::from_static(b"v"))
    }

    const NOW: Duration = Duration::ZERO;

    #[test]
    fn setnx_is_granted_by_a_quorum_of_creations_and_taken_back_where_it_may_have_landed() {
        use Reply::Integer as I;
        let (cfg, f) = (Config::default(), setnx(Gather::All));
        let b = ballots(vec![Some(Reply::ok()), Some(I(1)), Some(I(0))]);
        assert_eq!(f.decide(&b, NOW, &cfg), I(1));
        assert!(f.undo(&b, None).is_empty());
        // Created on master 0; master 1 found the key; master 2 never answered, and may have
        // written: taken back on 0 and 2.
        let mut b = ballots(vec![Some(Reply::ok()), Some(I(0)), None]);
        assert_eq!(f.decide(&b, NOW, &cfg), I(0));
        assert_eq!(f.undo(&b, None), take_back_on(3, &[0, 2]));
        // A master that was down never got it.
        b.failed[2] = Some(crate::backend::BackendError::Down);
        assert_eq!(f.undo(&b, None), take_back_on(3, &[0]));
        // A quorum's error is the answer; the creation is still taken back.
        let wrong = Reply::static_error("WRONGTYPE x");
        let b = ballots(vec![Some(wrong.clone()), Some(wrong.clone()), Some(I(1))]);
        assert_eq!(f.decide(&b, NOW, &cfg), wrong);
        assert_eq!(f.undo(&b, None), take_back_on(3, &[2]));
    }

    #[test]
    fn a_takeover_without_a_majority_answers_the_value_written_and_takes_it_back() {
        let bulk = |s: &'static str| Some(Reply::Bulk(Bytes::from_static(s.as_bytes())));
        let (cfg, written) = (Config::default(), Bytes::from_static(b"v"));
        let key = Bytes::from_static(b"k");
        let f = op(Rule::OldValue { key, written }, Gather::All);
        let b = ballots(vec![bulk("old"), bulk("old"), bulk("other")]);
        assert_eq!(f.decide(&b, NOW, &cfg), Reply::bulk("old"));
        assert!(f.undo(&b, None).is_empty());
        // Split: the value written, taken back wherever the write may have run (not where it
        // failed with an error).
        let b = ballots(vec![bulk("old"), Some(Reply::static_error("ERR x")), None]);
        assert_eq!(f.decide(&b, NOW, &cfg), Reply::bulk("v"));
        assert_eq!(f.undo(&b, None), take_back_on(3, &[0, 2]));
    }

    #[test]
    fn the_first_master_negative_control_counts_master_0_alone() {
        use Reply::Integer as I;
        let cfg = Config::default();
        // Master 0 created the key, the other two refused: a quorum of one says yes.
        let b = ballots(vec![Some(Reply::ok()), Some(I(0)), Some(I(0))]);
        let control = setnx(Gather::FirstMaster);
        assert_eq!(control.decide(&b, NOW, &cfg), I(1));
        assert!(control.undo(&b, None).is_empty());
        // The majority rule refuses it, and takes master 0's write back.
        let majority = setnx(Gather::All);
        assert_eq!(majority.decide(&b, NOW, &cfg), I(0));
        assert_eq!(majority.undo(&b, None), take_back_on(3, &[0]));
        // Refused on master 0: nothing is taken back anywhere else.
        let b = ballots(vec![Some(I(0)), Some(Reply::ok()), Some(Reply::ok())]);
        assert_eq!(control.decide(&b, NOW, &cfg), I(0));
        assert_eq!(control.undo(&b, None), take_back_on(3, &[]));
        let first = counted(
            &Config {
                legacy_decision: LegacyDecision::FirstMaster,
                ..Config::default()
            },
            b.clone(),
        );
        assert_eq!(agreed_or_no_quorum(&first), I(0));
        assert_eq!(agreed_or_no_quorum(&counted(&cfg, b)), Reply::ok());
    }

    #[test]
    fn a_born_expired_set_is_ok_only_where_a_quorum_lack_the_key() {
        use Reply::Integer as I;
        let (cfg, f) = (Config::default(), op(Rule::Absent, Gather::Outcome));
        let b = ballots(vec![Some(I(0)), Some(I(0)), Some(I(1))]);
        assert_eq!(f.decide(&b, NOW, &cfg), Reply::ok());
        let b = ballots(vec![Some(I(0)), Some(I(1)), None]);
        assert_eq!(f.decide(&b, NOW, &cfg), Reply::Nil);
        assert!(f.undo(&b, None).is_empty());
    }

    #[test]
    fn a_hash_is_read_where_a_quorum_hold_it_alike() {
        let flat = |v: &'static str| Some(Reply::Array(vec![Reply::bulk("f"), Reply::bulk(v)]));
        let b = ballots(vec![flat("1"), flat("1"), flat("2")]);
        let map = Reply::Map(vec![(Reply::bulk("f"), Reply::bulk("1"))]);
        assert_eq!(agreed_hash(&b), map);
        let b = ballots(vec![flat("1"), flat("2"), None]);
        assert_eq!(agreed_hash(&b), Reply::Map(Vec::new()));
    }
}
