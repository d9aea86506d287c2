//! The lock vocabulary: what a lock operation is, in the proxy's terms, and the Redlock
//! arithmetic (quorum, drift, validity) every layer above shares.
//!
//! A recognised script ([`crate::scripts`]) becomes a [`LockScript`] (one of the operations in
//! [`Op`], where its token and TTL sit in `ARGV`, the reply shape its library expects) or a
//! [`HashScript`] (a re-entrant hash lock's operation, [`HashOp`]). The configuration declares
//! script meanings in the same words. Nothing here does I/O or imports another module of the
//! crate: it is the ground floor.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
/// A lock operation, in the proxy's terms. Every operation works on a list of keys, all or
/// nothing on each master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Set every key to the token with the TTL, only where none of them exists.
    Acquire,
    /// Like `Acquire`, but a key that already holds the token counts as free, and its TTL is
    /// reset ("set if absent or already mine").
    AcquireOrRefresh,
    /// Where every key holds the token, set its TTL to the given time.
    Extend,
    /// Where every key holds the token, add the given time to its TTL.
    ExtendAdd,
    /// Delete every key that holds the token.
    Release,
    /// Delete every key, whatever it holds (python-redis-lock's `reset`, Redisson's
    /// `forceUnlock`): `DEL` as a quorum operation.
    Delete,
    /// Read `KEYS[1]`: the value a majority of masters agree on and how long a majority still
    /// hold it, answered as `[value, pttl]` (redlock-rb's `PTTL_SCRIPT`; any `reply` is ignored).
    Inspect,
    /// Like `AcquireOrRefresh`, but all or nothing on each master: every key is missing
    /// (acquired) or every key holds the token (refreshed); a mix is refused
    /// (bsm/redislock's `obtain`). With one key, the same as `AcquireOrRefresh`.
    AcquireOrRefreshAll,
    /// Delete the keys only where every one of them holds the token (bsm/redislock's
    /// `release`). With one key, the same as `Release`.
    ReleaseAll,
    /// A read: how long the caller still holds `KEYS[1]` (pottery's `_acquired_script`,
    /// bsm/redislock's and aioredlock's TTL scripts). The TTL a quorum of masters holding the
    /// token still agree on (the quorum-th largest), in the script's unit; else one of two
    /// constants ([`Answer::Const`]): `ok` when a quorum hold the token without a TTL, `no`
    /// when they do not hold it.
    Remaining,
    /// Like `Acquire`, but a key that already holds the token counts as granted *without*
    /// touching its TTL ("set if absent, else answer yes if already mine"). One key only; not
    /// declarable in the configuration. Where a master holds the key for the caller already,
    /// its remaining TTL (not the requested one) counts toward the grant's validity.
    #[serde(skip)]
    AcquireOrKeep,
    /// Like `AcquireOrRefresh` on one key, with the TTL argument read in milliseconds where the
    /// key is taken and in seconds where it already holds the token and is refreshed (a script
    /// that takes with `SET ... PX ARGV[2]` and refreshes with `EXPIRE ... ARGV[2]`): the
    /// refresh holds the key a thousand times longer, as on one Redis. The grant's validity
    /// counts the shorter of the two. Not declarable in the configuration.
    #[serde(skip)]
    AcquireOrRefreshSeconds,
    /// A read: whether the caller holds `KEYS[1]`, answered with one of three constants
    /// ([`Answer::Const`]): `ok` where a quorum of masters hold the token, `gone` where a quorum
    /// have no such key, `no` otherwise (another holds it, or the masters do not agree). Not
    /// declarable in the configuration.
    #[serde(skip)]
    Held,
}

impl Op {
    /// What the operation does to its lock, in the one vocabulary ([`Verb`]).
    pub fn verb(self) -> Verb {
        match self {
            Op::Acquire
            | Op::AcquireOrRefresh
            | Op::AcquireOrRefreshAll
            | Op::AcquireOrKeep
            | Op::AcquireOrRefreshSeconds => Verb::Acquire,
            Op::Extend | Op::ExtendAdd => Verb::Extend,
            Op::Release | Op::ReleaseAll => Verb::Release,
            Op::Delete => Verb::Delete,
            Op::Inspect | Op::Remaining | Op::Held => Verb::Query,
        }
    }

    /// The TTL in ms a refresh of a key that already holds the token sets, for an acquisition
    /// whose TTL is `ttl_ms` (`None` when it overflows).
    pub fn refresh_ms(self, ttl_ms: i64) -> Option<i64> {
        match self {
            Op::AcquireOrRefreshSeconds => ttl_ms.checked_mul(1000),
            _ => Some(ttl_ms),
        }
    }
}

/// Where a script with parameters in `KEYS` (see [`LockScript::params_in_keys`]) numbers its
/// `ARGV`: `ARGV[j]` is parameter `ARGV_AFTER_KEYS + j`, after at most this many taken from
/// `KEYS[2]` on.
pub const ARGV_AFTER_KEYS: usize = 100;

/// The reply shape a library expects from its script.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// `1` on success, `0` otherwise.
    #[default]
    OneZero,
    /// The number of keys on success (release: the number of keys released), `0` otherwise.
    Count,
    /// `+OK` on success, nil otherwise.
    OkNil,
    /// `1` on success, `-1` otherwise.
    OneMinusOne,
    /// Release: `1` released, `-1` already gone (expired), `0` held by another token.
    /// Other operations: `1` or `0`.
    Tristate,
    /// `+OK` on success, `0` otherwise (warlock's `parityRelock`).
    OkZero,
    /// `0` on success, `1` otherwise (python-redis-lock). Its extend script also answers `2`
    /// for a key that holds the token without a TTL; the proxy's grants always have one, and
    /// the proxy extends such a key instead.
    ZeroOne,
    /// Constant replies found by the analyser (see [`Replies`]): for shapes no named variant
    /// covers, such as `"OK"`/`"FAIL"` strings or an error reply on refusal (aioredlock).
    #[serde(skip)]
    Const(Replies),
}

/// The constant replies of a script: on success, on refusal, for a release when every key was
/// already gone and, for an acquisition, when the caller already held every key (a refresh). Each is what one Redis would answer (`"OK"` returned from Lua is a
/// bulk string, `redis.status_reply("OK")` a status, `redis.error_reply(e)` an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replies {
    /// Granted, extended, released.
    pub ok: Lit,
    /// Refused (held by someone else).
    pub no: Lit,
    /// A release of keys that were all gone (expired); other operations answer `no`.
    pub gone: Lit,
    /// An acquisition granted where the caller already held every key (its TTL reset); other
    /// operations answer `ok`.
    pub again: Lit,
}

impl Replies {
    /// Replies that do not tell a refresh from a fresh grant (`again` is `ok`).
    pub fn new(ok: Lit, no: Lit, gone: Lit) -> Replies {
        Replies {
            ok,
            no,
            gone,
            again: ok,
        }
    }

    /// Whether any reply is the call's TTL argument (see [`Lit::TtlNum`]).
    pub fn use_ttl(&self) -> bool {
        self.ok.is_ttl() || self.no.is_ttl() || self.gone.is_ttl() || self.again.is_ttl()
    }

    /// These replies with the call's TTL argument (`ttl`, in the script's unit) in place of
    /// [`Lit::TtlNum`] and [`Lit::TtlText`].
    pub fn bind_ttl(self, ttl: i64) -> Replies {
        Replies {
            ok: self.ok.bind_ttl(ttl),
            no: self.no.bind_ttl(ttl),
            gone: self.gone.bind_ttl(ttl),
            again: self.again.bind_ttl(ttl),
        }
    }
}

/// One constant reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lit {
    /// `:n`
    Int(i64),
    /// Nil.
    Nil,
    /// `+OK`
    Ok,
    /// A bulk string.
    Bulk(Short),
    /// An error reply, `-text`.
    Error(Short),
    /// A one-element array of an integer, `*1 :n` (a script's `return {n}`).
    Single(i64),
    /// A one-element array of a bulk string, `*1 $… text` (a script's `return {'OK'}`).
    SingleBulk(Short),
    /// The TTL argument as a number, `:n` (a script's `return tonumber(ARGV[t])` after it set
    /// that TTL): bound to each call's TTL, in the script's own unit, by [`Replies::bind_ttl`].
    TtlNum,
    /// The TTL argument as given, a bulk string (a script's `return ARGV[t]`): bound as
    /// [`Lit::TtlNum`] is, to [`Lit::Decimal`].
    TtlText,
    /// The token argument as given, a bulk string (a script's `return ARGV[1]` where `ARGV[1]`
    /// is the token, GitLab's lease renewal): answered as each call's own token.
    TokenText,
    /// A bulk string of an integer's decimal digits: a [`Lit::TtlText`] bound to a call's TTL
    /// (which the proxy reads only in Redis's canonical spelling, so the digits are exactly
    /// the argument's bytes).
    Decimal(i64),
}

impl Lit {
    /// Whether this reply is the call's TTL argument, unbound.
    pub fn is_ttl(self) -> bool {
        matches!(self, Lit::TtlNum | Lit::TtlText)
    }

    /// Whether a bound TTL reply (a positive integer, or its digits) could look like this one.
    pub fn may_look_like_a_ttl(self) -> bool {
        match self {
            Lit::Int(n) | Lit::Decimal(n) => n > 0,
            Lit::Bulk(s) => {
                let b = s.as_bytes();
                !b.is_empty() && b[0] != b'0' && b.iter().all(u8::is_ascii_digit)
            }
            // A token may be digits.
            Lit::TtlNum | Lit::TtlText | Lit::TokenText => true,
            Lit::Nil | Lit::Ok | Lit::Error(_) | Lit::Single(_) | Lit::SingleBulk(_) => false,
        }
    }

    fn bind_ttl(self, ttl: i64) -> Lit {
        match self {
            Lit::TtlNum => Lit::Int(ttl),
            Lit::TtlText => Lit::Decimal(ttl),
            l => l,
        }
    }
}

/// A constant reply text, kept once for the whole process so [`Answer`] stays `Copy` and small
/// (it travels with every lock operation, the plain `SET NX PX` too).
///
/// Texts are interned: each distinct text is stored once and never freed. The store is bounded
/// ([`Short::BUDGET`] bytes in all, each text at most [`Short::MAX`]): past it, a script with a
/// new constant reply is not recognised (it stays unknown, which refuses rather than answers
/// wrongly). Texts are only made when a script is recognised, never per request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Short {
    bytes: &'static [u8],
}

impl std::fmt::Debug for Short {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes))
    }
}

/// The interned texts and the bytes they take.
static INTERNED: std::sync::Mutex<(Vec<&'static [u8]>, usize)> =
    std::sync::Mutex::new((Vec::new(), 0));

impl Short {
    /// Longest text kept: room for any constant error or status text a lock library answers
    /// (`dlock token mismatch, unable to unlock` and the like).
    pub const MAX: usize = 256;

    /// Most bytes all interned texts may take together.
    pub const BUDGET: usize = 256 * 1024;

    /// Most distinct texts interned (a lookup walks them, at recognition time only).
    const MAX_TEXTS: usize = 4096;

    /// `None` when `text` is longer than [`Short::MAX`], or new and the store is full.
    pub fn new(text: &[u8]) -> Option<Short> {
        if text.len() > Short::MAX {
            return None;
        }
        let mut store = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bytes) = store.0.iter().find(|t| **t == text) {
            return Some(Short { bytes });
        }
        if store.1 + text.len() > Short::BUDGET || store.0.len() >= Short::MAX_TEXTS {
            return None;
        }
        let bytes: &'static [u8] = Box::leak(text.to_vec().into_boxed_slice());
        store.0.push(bytes);
        store.1 += text.len();
        Some(Short { bytes })
    }

    /// The text.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes
    }
}

/// A wake-up signal a script leaves for waiters besides its lock operation: on each master,
/// the list `KEYS[key]` is replaced by one element, `value`, that expires after `ARGV[ttl_arg]`
/// milliseconds (python-redis-lock's unlock and reset; its waiters `BLPOP` the list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    /// 1-based `KEYS` index of the list.
    pub key: usize,
    /// 1-based `ARGV` index of its TTL in milliseconds.
    pub ttl_arg: usize,
    /// The element pushed.
    pub value: Bytes,
    /// True: signalled on every master; false: only where the operation did its work there
    /// (the token was deleted).
    pub always: bool,
}

/// A release's announcement to waiters subscribed to a channel, besides its lock operation:
/// `PUBLISH channel message` (or `SPUBLISH`) on each master where the condition held there (the
/// proxy's pub/sub hub hands the copies to its subscribers once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    /// The command, upper case: `PUBLISH` or `SPUBLISH`.
    pub command: Bytes,
    /// The channel: a key's name or an argument.
    pub channel: Param,
    /// The message: an argument or a literal.
    pub message: Param,
    /// Where it is published.
    pub when: AnnounceWhen,
}

/// Where an announcement takes a value from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// 1-based `KEYS` index.
    Key(usize),
    /// 1-based `ARGV` index.
    Arg(usize),
    /// A literal.
    Literal(Bytes),
}

/// On which masters an announcement is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnounceWhen {
    /// Every master, whatever the release did there.
    Always,
    /// Where the release deleted the key.
    Released,
    /// Where the release deleted the key or it was already gone.
    ReleasedOrGone,
}

/// How a script picks its operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Always the same operation.
    Always(Op),
    /// `then` when `ARGV[arg]` equals `value`, else `otherwise` (redis-py's extend picks "add"
    /// or "replace" this way; redlock-rb's lock script picks acquire or extend).
    IfArg {
        /// 1-based `ARGV` index.
        arg: usize,
        /// The value that selects `then`.
        value: Bytes,
        /// Operation when it matches.
        then: Op,
        /// Operation otherwise.
        otherwise: Op,
    },
    /// `then` when the integer `ARGV[arg]` passes `test`, else `otherwise` (a script that
    /// tests `tonumber(ARGV[arg])` against a number). A call whose `ARGV[arg]` is not an integer
    /// is refused with an error (Lua reads more spellings of a number than the proxy does).
    IfNum {
        /// 1-based `ARGV` index.
        arg: usize,
        /// The test.
        test: NumTest,
        /// Operation when it passes.
        then: Op,
        /// Operation otherwise.
        otherwise: Op,
    },
    /// `then` when `ARGV[arg]` is the token's length in bytes (at least 1), else `otherwise`:
    /// bsm/redislock's `obtain` takes a key back when its value starts with the caller's token
    /// prefix of `ARGV[arg]` bytes. The whole token is the only prefix the proxy compares
    /// (`then`, where a key that holds exactly the token is the caller's); with any other
    /// length it never takes a held key back (`otherwise`, a plain acquisition), which can
    /// refuse where one Redis would grant, never grant where it would refuse.
    IfTokenLen {
        /// 1-based `ARGV` index of the prefix length.
        arg: usize,
        /// Operation when it is the token's length.
        then: Op,
        /// Operation otherwise.
        otherwise: Op,
    },
}

/// A test of an integer argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumTest {
    /// `n > k`.
    Greater(i64),
    /// `n == k`.
    Equal(i64),
}

impl NumTest {
    /// Whether `n` passes.
    pub fn holds(self, n: i64) -> bool {
        match self {
            NumTest::Greater(k) => n > k,
            NumTest::Equal(k) => n == k,
        }
    }
}

/// The unit of a script's TTL argument.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TtlUnit {
    /// Milliseconds (`PX`, `PEXPIRE`).
    #[default]
    Millis,
    /// Seconds (`EX`, `EXPIRE`).
    Seconds,
}

/// A script the proxy understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockScript {
    /// Which operation it performs.
    pub choice: Choice,
    /// 1-based `ARGV` index of the token.
    pub token_arg: usize,
    /// 1-based `ARGV` index of the TTL (acquire and extend).
    pub ttl_arg: usize,
    /// The TTL argument's unit.
    pub unit: TtlUnit,
    /// True when it works on every key in `KEYS`; false when only on `KEYS[1]`.
    pub all_keys: bool,
    /// True when it works on `KEYS[1]` and takes its parameters from the other keys: the
    /// token and TTL indexes then count from `KEYS[2]` (warlock's `parityRelock` is called
    /// with `KEYS` = key, TTL, token), and `ARGV[j]` is index [`ARGV_AFTER_KEYS`]` + j` (a
    /// token in `KEYS[2]` with its TTL in `ARGV[1]`).
    pub params_in_keys: bool,
    /// A constant the script writes as the lock's value instead of a token argument (a mutex
    /// without ownership, `PSETEX KEYS[1] ARGV[1] 'locked'`): the token is this literal, and
    /// `token_arg` is unused. Only for a plain `Acquire`.
    pub token_literal: Option<Bytes>,
    /// A TTL written in the script (in `unit`) instead of a TTL argument
    /// (`redis.call('expire', KEYS[1], 30)`): every call sets that TTL, and `ttl_arg` is 0.
    pub ttl_literal: Option<i64>,
    /// The reply its library expects.
    pub answer: Answer,
    /// The wake-up signal it leaves, if any.
    pub signal: Option<Signal>,
    /// What it publishes, if anything (a release only).
    pub announce: Option<Announce>,
    /// `Some(counts)` when the script spreads `ARGV` into a command (`redis.call('psetex',
    /// KEYS[1], unpack(ARGV))`) or tests `#ARGV`: it means this operation only when called
    /// with one of these numbers of arguments (with others, Redis would run another command,
    /// refuse it, or answer the script's usage error).
    pub argv_count: Option<Counts>,
    /// `Some(counts)` when the script tests `#KEYS` (`if #KEYS ~= 1 then return
    /// redis.error_reply(...) end`): it means this operation only when called with one of
    /// these numbers of keys.
    pub keys_count: Option<Counts>,
}

/// A set of small counts (of arguments or keys, 0 to 15) a script's meaning holds for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts(u16);

impl Counts {
    /// The largest count a set holds.
    pub const MAX: usize = 15;

    /// The set of the one count `n` (empty when `n` is beyond [`Counts::MAX`]).
    pub fn one(n: usize) -> Counts {
        Counts::default().with(n)
    }

    /// This set and the count `n` (unchanged when `n` is beyond [`Counts::MAX`]).
    pub fn with(self, n: usize) -> Counts {
        if n > Self::MAX {
            return self;
        }
        Counts(self.0 | 1 << n)
    }

    /// Whether the set holds `n`.
    pub fn contains(self, n: usize) -> bool {
        n <= Self::MAX && self.0 & (1 << n) != 0
    }

    /// The smallest count in the set.
    pub fn min(self) -> Option<usize> {
        (self.0 != 0).then(|| self.0.trailing_zeros() as usize)
    }
}

impl LockScript {
    /// The operation for these arguments.
    pub fn op(&self, argv: &[Bytes]) -> Op {
        match &self.choice {
            Choice::Always(op) => *op,
            Choice::IfArg {
                arg,
                value,
                then,
                otherwise,
            } => {
                if argv.get(arg.wrapping_sub(1)).is_some_and(|a| a == value) {
                    *then
                } else {
                    *otherwise
                }
            }
            Choice::IfNum {
                arg,
                test,
                then,
                otherwise,
            } => {
                let n = argv
                    .get(arg.wrapping_sub(1))
                    .and_then(|a| std::str::from_utf8(a).ok()?.parse::<i64>().ok());
                if n.is_some_and(|n| test.holds(n)) {
                    *then
                } else {
                    *otherwise
                }
            }
            Choice::IfTokenLen {
                arg,
                then,
                otherwise,
            } => {
                let token = argv.get(self.token_arg.wrapping_sub(1)).map(|t| t.len());
                let len = argv
                    .get(arg.wrapping_sub(1))
                    .filter(|a| !a.is_empty() && a.iter().all(u8::is_ascii_digit))
                    .and_then(|a| std::str::from_utf8(a).ok()?.parse::<usize>().ok());
                if token.is_some_and(|t| t >= 1) && len == token {
                    *then
                } else {
                    *otherwise
                }
            }
        }
    }
}

/// A script that, from every starting state, ends in what one plain `SET KEYS[1] ARGV[value_arg]
/// PX|EX ARGV[ttl_arg]` does and answers `OK` (Redis::DistLock's extend: `SET ... XX PX`, else
/// `SET ... NX PX`): the proxy runs it as that command, with that command's answer and rules (a
/// write by the majority rule, capped by `max_ttl_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlainSet {
    /// 1-based `ARGV` index of the value.
    pub value_arg: usize,
    /// 1-based `ARGV` index of the TTL.
    pub ttl_arg: usize,
    /// The TTL's unit.
    pub unit: TtlUnit,
}

/// A script that writes a constant to `KEYS[1]` with a TTL of `ARGV[ttl_arg]` unless the key
/// already holds that constant (`if GET(KEYS[1]) == "1" then return "NOK" else return
/// SET(KEYS[1], "1", "PX", ARGV[1]) end`): whatever else the key holds is overwritten. That is
/// Redis 8.4's `SET key value IFNE value PX ttl`, which the proxy serves as a quorum write (see
/// `command::conditional`), answering the script's own constants for written and not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteUnless {
    /// The constant written and compared with.
    pub value: Bytes,
    /// 1-based `ARGV` index of the TTL.
    pub ttl_arg: usize,
    /// The TTL's unit.
    pub unit: TtlUnit,
    /// The reply where it wrote.
    pub ok: Lit,
    /// The reply where the key already held the constant (and where no quorum wrote).
    pub no: Lit,
}

/// An operation on a re-entrant hash lock (Redisson's `RLock`): the lock is a hash whose one
/// field, the holder's name (`<uuid>:<threadId>`), counts how often it holds the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashOp {
    /// Take the lock, or take it once more when the caller already holds it; answers nil on
    /// success and otherwise the lock's PTTL.
    Acquire,
    /// Give up one hold: nil when the caller does not hold it, 0 when it still does (the TTL
    /// renewed), 1 when this was its last hold (the hash deleted and the release published).
    Unlock,
    /// Set the TTL where the caller holds the lock: 1, else 0 (the watchdog's renewal).
    Renew,
    /// Delete the lock whoever holds it, publishing the release: 1 when it existed, else 0.
    ForceUnlock,
    /// [`HashOp::Acquire`] that also counts a fencing token in `KEYS[2]` on every grant
    /// (Redisson's `RFencedLock`); answers as `Acquire` (the token is read with `GET KEYS[2]`).
    FencedAcquire,
    /// [`HashOp::FencedAcquire`] answering `{-1, token}` on success and `{pttl, -1}` otherwise
    /// (`RFencedLock.lockAndGetToken`).
    FencedAcquireToken,
    /// [`HashOp::Renew`] of every key in `KEYS`, each with its own field (`KEYS[i]`'s is
    /// `ARGV[field_arg + i - 1]`), answering one 1 or 0 per key (Redisson's multi-lock
    /// renewal, `LockTask`, the watchdog of 3.44 and later).
    RenewAll,
}

impl HashOp {
    /// What the operation does to its lock, in the one vocabulary ([`Verb`]).
    pub fn verb(self) -> Verb {
        match self {
            HashOp::Acquire | HashOp::FencedAcquire | HashOp::FencedAcquireToken => Verb::Acquire,
            HashOp::Unlock => Verb::Release,
            HashOp::Renew | HashOp::RenewAll => Verb::Extend,
            HashOp::ForceUnlock => Verb::Delete,
        }
    }
}

/// Where a hash-lock script publishes the release for waiters subscribed to the lock's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishArgs {
    /// 1-based `KEYS` index of the channel.
    pub channel_key: usize,
    /// 1-based `ARGV` index of the message.
    pub message_arg: usize,
    /// The command: `PUBLISH`/`SPUBLISH` literally, or named by an argument.
    pub command: PublishCommand,
}

/// How a hash-lock script names its publish command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishCommand {
    /// A literal command, upper case (`PUBLISH` or `SPUBLISH`).
    Literal(Bytes),
    /// 1-based `ARGV` index of the command's name; the proxy accepts only `publish` and
    /// `spublish` there (any case) and refuses the call otherwise.
    Arg(usize),
}

/// An unlock latch: the unlock's answer, kept under `KEYS[key]` for `ARGV[ttl_arg]` ms, so
/// that a retried unlock (same request, same latch key) answers the same again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latch {
    /// 1-based `KEYS` index of the latch key.
    pub key: usize,
    /// 1-based `ARGV` index of its TTL in milliseconds.
    pub ttl_arg: usize,
}

/// A hash-lock script the proxy understands (Redisson's lock, unlock, renewal, forceUnlock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashScript {
    /// The operation, always on `KEYS[1]`.
    pub op: HashOp,
    /// 1-based `ARGV` index of the caller's field (0 for `ForceUnlock`, which names none; the
    /// first key's for `RenewAll`).
    pub field_arg: usize,
    /// 1-based `ARGV` index of the TTL in milliseconds (0 for `ForceUnlock`, and for an `Unlock`
    /// that leaves the TTL as it was where a hold is left).
    pub ttl_arg: usize,
    /// Where the release is published (`Unlock`, `ForceUnlock`).
    pub publish: Option<PublishArgs>,
    /// The unlock latch, if the unlock keeps one.
    pub latch: Option<Latch>,
    /// The TTL argument's unit (Redisson's: milliseconds; `EXPIRE key ARGV[2]` in the
    /// re-entrant hash locks of many tutorials: seconds).
    pub unit: TtlUnit,
    /// `Acquire` only: the constants it answers when granted and when refused (`return 1` /
    /// `return 0`), in place of Redisson's nil and the lock's PTTL.
    pub replies: Option<(Lit, Lit)>,
    /// `Unlock` without `publish` only: the constants it answers where the caller did not hold
    /// the lock, where it still holds it (one hold less), and where this was its last hold, in
    /// place of Redisson's nil, 0 and 1 (tutorials' unlocks answer nil in all three).
    pub unlock_replies: Option<[Lit; 3]>,
}

// ---------------------------------------------------------------------------------------------
// The lock model.

/// What a lock is, whatever command or script names it: its keys, who holds it, whether
/// holders share it, how holds are counted, how many holders it admits, and its TTL. Every
/// operation the runner runs ([`crate::command::runner::Operation::lock`]) describes its lock
/// in these words, and acts on it with one [`Verb`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lock<'a> {
    /// The keys, all or nothing (the lock's own first; a queue, counter or signal list after).
    pub keys: &'a [Bytes],
    /// Who holds it.
    pub holder: Holder<'a>,
    /// Exclusive or shared.
    pub mode: Mode,
    /// How a holder's holds are counted.
    pub holds: Holds,
    /// How many holders it admits at once (1 for a mutex).
    pub admits: u32,
    /// The TTL a grant or extension asks for, in ms (0 where the operation sets none).
    pub ttl_ms: i64,
}

/// Who holds a lock: the identity an operation compares before it touches the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<'a> {
    /// The key's value is the holder's token (`SET key token NX PX ttl`).
    Token(&'a [u8]),
    /// A field of the hash under the key (Redisson's `<uuid>:<threadId>`).
    Field(&'a [u8]),
    /// A member of the set or sorted set under the key (a semaphore's permit).
    Member(&'a [u8]),
    /// Nobody in particular: the operation acts whoever holds the lock (a forced delete, a
    /// read of whoever holds it, a write conditioned on the value alone).
    Anyone,
}

/// Whether holders share a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One holder at a time.
    Exclusive,
    /// Many holders at once (read locks, semaphore permits).
    Shared,
}

/// How a holder's holds on a lock are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// Held or not: taking it again is refused, or refreshes it.
    Once,
    /// Re-entrant: each take adds a hold, each unlock gives one up.
    Counted,
}

/// What an operation does to its lock: the one vocabulary every lock-bearing command and
/// recognised script is read into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Take it (or take it again, where the lock allows).
    Acquire,
    /// Give it up where the caller holds it.
    Release,
    /// Keep it longer where the caller holds it.
    Extend,
    /// Read it: who holds it, for how long.
    Query,
    /// Delete it whoever holds it.
    Delete,
    /// Write a value on a condition of the value held (`SET IFEQ`, `SETNX`, `GETSET`).
    Write,
    /// Leave a lock's queue of waiters.
    Leave,
}

impl<'a> Lock<'a> {
    /// A mutex held by a token over `keys`.
    pub fn mutex(keys: &'a [Bytes], token: &'a [u8], ttl_ms: i64) -> Lock<'a> {
        Lock {
            keys,
            holder: Holder::Token(token),
            mode: Mode::Exclusive,
            holds: Holds::Once,
            admits: 1,
            ttl_ms,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Redlock arithmetic.

/// `⌊n/2⌋ + 1`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Clock drift allowance for a TTL: `ttl × drift_factor + 2 ms` (Redis expires keys with 1 ms
/// precision, plus 1 ms).
///
/// Worked out in whole nanoseconds (rounded to the nearest one): `Duration::mul_f64` goes
/// through an exact float-to-duration conversion that costs more than the rest of a grant.
pub fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    // `as` saturates: a negative or NaN factor gives no drift, a huge one the longest duration.
    let scaled = (ttl.as_secs_f64() * drift_factor * 1e9 + 0.5) as u64;
    Duration::from_nanos(scaled) + Duration::from_millis(2)
}

/// Remaining validity of a lock: `ttl − elapsed − drift`, or `None` when nothing is left.
pub fn validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl, drift_factor))
}

/// The quorum-th largest of `values` by `rank`: the most that at least `quorum` of them reach
/// (the TTL a quorum of masters still hold, say). `None` with fewer than `quorum` values.
pub fn quorum_th<T: Copy, K: Ord>(
    quorum: usize,
    mut values: Vec<T>,
    rank: impl Fn(&T) -> K,
) -> Option<T> {
    values.sort_unstable_by_key(|v| std::cmp::Reverse(rank(v)));
    values.get(quorum.checked_sub(1)?).copied()
}
