//! The error catalogue: every error the proxy words itself, with Redis's wording in one
//! place. Replies, logs and metric labels derive from it.
//!
//! - [`Kind`]: an error reply's first word (`ERR`, `WRONGTYPE`, `NOAUTH`, ...), which clients
//!   match on and `/metrics` counts by. Any error reply has one, a master's too: [`Kind::of`].
//! - [`Error`]: the proxy's own errors, one variant per wording, with what the wording quotes as
//!   fields. [`Error::text`] spells every one of them, byte for byte as Redis (or, for the
//!   proxy's own refusals, as the proxy has always) words it; a reply is made with
//!   `Reply::from(Error::...)`, and nothing else in the crate spells an error.
//! - [`Malformed`]: the requests Redis answers with a protocol error. The request decoder
//!   (`wire::request`) keeps its own boundary type, `ProtocolError`, which is either one of
//!   these (answered with [`Error::Protocol`], then the connection closes) or an overflowing
//!   request, which Redis closes without a word. The decoder's vocabulary sits here rather than
//!   the catalogue in the decoder because every layer may look down at this module, and this
//!   module looks at none.
//! - [`BackendError`]: why a master's reply does not count (a "no" vote, never a client's
//!   reply).
//!
//! Errors a master sends are no part of the catalogue: they reach the client as the master
//! worded them, and are only classified (by [`Kind::of`]).

use std::borrow::Cow;

/// Why a master's reply does not count.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum BackendError {
    /// The master is marked down; the request was not sent.
    #[error("master is down")]
    Down,
    /// The connection failed before the reply came.
    #[error("connection to master lost")]
    Closed,
    /// The master's clock jumped: the `TIME` read with the request disagrees with the proxy's
    /// monotonic clock. The request did run.
    #[error("master clock jumped")]
    ClockJump,
    /// The master answered, but it is quarantined or clock-suspect, so its reply is no vote.
    #[error("master is excluded from the quorum")]
    Excluded,
    /// The master's queue is full; the request was not sent.
    #[error("master is overloaded")]
    Overloaded,
}

/// The first word of an error reply: Redis's error codes, which clients match on and
/// `/metrics` counts by (`redlock_errors_total{kind}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ERR`: syntax, arity, ranges, unknown commands, limits and most refusals.
    Err,
    /// `WRONGTYPE`: a key of another type.
    WrongType,
    /// `NOAUTH`: authentication required.
    NoAuth,
    /// `WRONGPASS`: a failed login.
    WrongPass,
    /// `NOPERM`: a key the user may not touch.
    NoPerm,
    /// `NOSCRIPT`: `EVALSHA` of a script nobody loaded.
    NoScript,
    /// `EXECABORT`: a transaction discarded because of an earlier error.
    ExecAbort,
    /// `NOPROTO`: a protocol version the proxy does not speak.
    NoProto,
    /// `BUSY`: a master running a script.
    Busy,
    /// `LOADING`: a master loading its data.
    Loading,
    /// `READONLY`: a replica asked to write.
    ReadOnly,
    /// `MASTERDOWN`: a replica that lost its master.
    MasterDown,
    /// `CLUSTERDOWN`: fewer than a quorum of masters answered.
    ClusterDown,
    /// Any other first word: a master's error the proxy passes on, and the proxy's own
    /// `NOTBUSY` and `TRYAGAIN`.
    Other,
}

impl Kind {
    /// Every kind, in the order metrics list them (`Other` last).
    pub const ALL: [Kind; 14] = [
        Kind::Err,
        Kind::WrongType,
        Kind::NoAuth,
        Kind::WrongPass,
        Kind::NoPerm,
        Kind::NoScript,
        Kind::ExecAbort,
        Kind::NoProto,
        Kind::Busy,
        Kind::Loading,
        Kind::ReadOnly,
        Kind::MasterDown,
        Kind::ClusterDown,
        Kind::Other,
    ];

    /// The word an error of this kind starts with, which is also its metric label (`other`
    /// for [`Kind::Other`]).
    pub const fn word(self) -> &'static str {
        match self {
            Kind::Err => "ERR",
            Kind::WrongType => "WRONGTYPE",
            Kind::NoAuth => "NOAUTH",
            Kind::WrongPass => "WRONGPASS",
            Kind::NoPerm => "NOPERM",
            Kind::NoScript => "NOSCRIPT",
            Kind::ExecAbort => "EXECABORT",
            Kind::NoProto => "NOPROTO",
            Kind::Busy => "BUSY",
            Kind::Loading => "LOADING",
            Kind::ReadOnly => "READONLY",
            Kind::MasterDown => "MASTERDOWN",
            Kind::ClusterDown => "CLUSTERDOWN",
            Kind::Other => "other",
        }
    }

    /// The kind of an error reply's text, by its first word.
    pub fn of(text: &[u8]) -> Kind {
        let word = text.split(|&c| c == b' ').next().unwrap_or_default();
        Kind::ALL[..Kind::ALL.len() - 1]
            .iter()
            .copied()
            .find(|k| k.word().as_bytes() == word)
            .unwrap_or(Kind::Other)
    }
}

/// A request Redis refuses with a protocol error (`ERR Protocol error: ...`), after which the
/// connection closes. Decoded without allocating: a plain value, no boxing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// The `*<count>` header is not a number or is too large.
    MultibulkLength,
    /// A `$<len>` header is not a number or is too large.
    BulkLength,
    /// Before `AUTH`, a multibulk announced more than 10 arguments.
    UnauthenticatedMultibulkLength,
    /// Before `AUTH`, a bulk was longer than 16384 bytes.
    UnauthenticatedBulkLength,
    /// An array element is not a bulk string: the byte found instead of `$`.
    ExpectedBulk(char),
    /// A `*<count>` header line did not end in time.
    HeaderTooLong,
    /// A `$<len>` header line did not end in time.
    BulkHeaderTooLong,
    /// An inline command line did not end in time.
    InlineTooLong,
    /// An inline command has an unterminated quote.
    UnbalancedQuotes,
}

impl Malformed {
    /// Redis's protocol error for the request, as [`Error::Protocol`] answers it.
    fn text(&self) -> Cow<'static, str> {
        let text: &'static str = match self {
            Malformed::MultibulkLength => "ERR Protocol error: invalid multibulk length",
            Malformed::BulkLength => "ERR Protocol error: invalid bulk length",
            Malformed::UnauthenticatedMultibulkLength => {
                "ERR Protocol error: unauthenticated multibulk length"
            }
            Malformed::UnauthenticatedBulkLength => {
                "ERR Protocol error: unauthenticated bulk length"
            }
            Malformed::ExpectedBulk(got) => {
                return format!("ERR Protocol error: expected '$', got '{got}'").into();
            }
            Malformed::HeaderTooLong => "ERR Protocol error: too big mbulk count string",
            Malformed::BulkHeaderTooLong => "ERR Protocol error: too big bulk count string",
            Malformed::InlineTooLong => "ERR Protocol error: too big inline request",
            Malformed::UnbalancedQuotes => "ERR Protocol error: unbalanced quotes in request",
        };
        Cow::Borrowed(text)
    }
}

/// An error the proxy words itself: the catalogue. Each variant's text is written once, in
/// [`Error::text`]; its [`Kind`] is its first word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    // --- Protocol: requests that cannot be decoded. ---
    /// `ERR Protocol error: ...`; the connection closes after it.
    Protocol(Malformed),

    // --- Commands: names, arity and syntax. ---
    /// `ERR unknown command 'name', with args beginning with: 'a' 'b' `.
    UnknownCommand {
        /// The name as the client spelled it, at most 128 bytes.
        name: String,
        /// The arguments, each quoted and followed by a space, at most about 128 bytes.
        args: String,
    },
    /// `ERR unknown subcommand 'sub'. Try COMMAND HELP.`
    UnknownSubcommand {
        /// The command, lower case.
        command: &'static str,
        /// The subcommand as the client spelled it, at most 128 bytes.
        sub: String,
    },
    /// `ERR wrong number of arguments for 'name' command` (`name` is lower case, and
    /// `command|sub` for a subcommand).
    WrongArity(&'static str),
    /// `ERR syntax error`.
    Syntax,
    /// `ERR must be exactly 16 hexadecimal characters` (an `IFDEQ`/`IFDNE` digest of `SET` or
    /// `DELEX`, worded as Redis 8.4 words it).
    BadDigest,
    /// `ERR Syntax error in HELLO option 'opt'`.
    HelloOption(String),
    /// `ERR Unrecognized option 'attr'` (`CLIENT SETINFO`).
    UnrecognizedOption(String),
    /// `ERR SCRIPT FLUSH only support SYNC|ASYNC option`.
    ScriptFlushMode,
    /// `ERR redlock-proxy does not support CONFIG SUB`.
    ConfigUnsupported(String),

    // --- Values and ranges: an argument of the right place but the wrong value. ---
    /// `ERR value is not an integer or out of range`.
    NotAnInteger,
    /// `ERR value is out of range, value must between -2147483648 and 2147483647` (Redis's
    /// wording, for an integer beyond 32 bits where it wants an `int`, as `SELECT`).
    NotAnInt32,
    /// `ERR Protocol version is not an integer or out of range` (`HELLO`).
    ProtocolVersionNotAnInteger,
    /// `ERR timeout is not an integer or out of range` (`WAIT`).
    TimeoutNotAnInteger,
    /// `ERR timeout is not a float or out of range` (`BLPOP`).
    TimeoutNotAFloat,
    /// `ERR timeout is negative`.
    TimeoutNegative,
    /// `ERR timeout is out of range`.
    TimeoutOutOfRange,
    /// `ERR invalid expire time in 'name' command`.
    InvalidExpire(&'static str),
    /// `ERR invalid expire time in lock extension`.
    InvalidExtension,
    /// `ERR invalid expire time in lock script` (a hash lock's TTL).
    InvalidLockScriptTtl,
    /// `ERR invalid expire time in lock script: the TTL must be a positive number of
    /// milliseconds` (a lock script's TTL argument).
    InvalidScriptTtl,
    /// `ERR DB index is out of range (redlock-proxy serves database 0 only)`.
    DbIndexOutOfRange,
    /// `ERR Number of keys can't be negative`.
    NegativeKeyCount,
    /// `ERR Number of keys can't be greater than number of args`.
    KeyCountBeyondArgs,
    /// `ERR Client names cannot contain spaces, newlines or special characters.`
    BadClientName,
    /// `ERR lib-name cannot contain spaces, newlines or special characters.` (`CLIENT
    /// SETINFO`, naming the attribute as the client wrote it).
    BadClientAttr(String),
    /// `ERR redlock-proxy runs ARGV[j] of this lock script only as PUBLISH or SPUBLISH`.
    PublishArg(usize),

    // --- Connection and key state. ---
    /// `NOPROTO unsupported protocol version`.
    NoProto,
    /// `WRONGTYPE Operation against a key holding the wrong kind of value`.
    WrongType,
    /// `ERR Can't execute 'name': only (P|S)SUBSCRIBE / ... are allowed in this context`.
    OnlySubscribe(&'static str),

    // --- Authentication and permissions. ---
    /// `NOAUTH Authentication required.`
    NoAuth,
    /// `NOAUTH HELLO must be called with the client already authenticated, ...`.
    HelloNoAuth,
    /// `WRONGPASS` for a failed login.
    WrongPass,
    /// `ERR AUTH <password> called without any password configured for the default user. ...`
    AuthWithoutPassword,
    /// `NOPERM` for a key the user may not touch.
    NoPermKeys,
    /// `NOPERM` for a channel the user may not subscribe or publish to.
    NoPermChannels,
    /// `ERR The user executing the script can't publish to the channel ...`: a recognised
    /// script would publish to a channel its user may not use.
    ScriptChannel,
    /// `NOPERM` for a publish on one of the proxy's own channels (`redlock-proxy:*`).
    ReservedChannel,

    // --- Transactions. ---
    /// `ERR Command not allowed inside a transaction`.
    NotInMulti,
    /// `ERR WATCH inside MULTI is not allowed`.
    WatchInMulti,
    /// `ERR MULTI calls can not be nested`.
    NestedMulti,
    /// `ERR DISCARD without MULTI`.
    DiscardWithoutMulti,
    /// `ERR EXEC without MULTI`.
    ExecWithoutMulti,
    /// `EXECABORT Transaction discarded because of previous errors.`
    ExecAbort,

    // --- Scripts. ---
    /// `NOSCRIPT No matching script. Please use EVAL.`
    NoScript,
    /// `NOTBUSY No scripts in execution right now.` (the proxy never leaves one running).
    NotBusy,
    /// `ERR redlock-proxy does not know what script SHA does (WHY), and unknown_scripts =
    /// "reject"`.
    UnknownScript {
        /// The script's SHA1, in hex.
        sha: String,
        /// Why it is not understood (one line; may be empty).
        why: String,
    },

    // --- Limits: the proxy's own bounds. ---
    /// `ERR lock TTL T ms exceeds the proxy's max_ttl_ms (M ms)`.
    TtlTooLong {
        /// The TTL asked for, in milliseconds.
        ttl: i64,
        /// `max_ttl_ms`.
        max: u64,
    },
    /// `ERR lock TTL would exceed the proxy's max_ttl_ms (M ms)` (an extension that adds).
    ExtensionTooLong {
        /// `max_ttl_ms`.
        max: u64,
    },
    /// `ERR expiry of T ms exceeds the proxy's max_ttl_ms (M ms)` (`EXPIRE` and the like).
    ExpiryTooLong {
        /// The expiry asked for, in milliseconds from now.
        ms: i64,
        /// `max_ttl_ms`.
        max: u64,
    },
    /// `ERR signal TTL T ms must be positive and within the proxy's max_ttl_ms (M ms)`.
    SignalTtl {
        /// The wake-up signal's TTL, in milliseconds.
        ttl: i64,
        /// `max_ttl_ms`.
        max: u64,
    },
    /// `ERR unlock latch TTL T ms must be positive and within the proxy's max_ttl_ms (M ms)`.
    LatchTtl {
        /// The unlock latch's TTL, in milliseconds.
        ttl: i64,
        /// `max_ttl_ms`.
        max: u64,
    },
    /// `ERR redlock-proxy supports SET NX only as a lock: ...` (`SET NX` with `GET` or
    /// `KEEPTTL`).
    NxOnlyAsLock,
    /// `ERR redlock-proxy refuses SET NX without an expiry: ...`.
    NxWithoutExpiry,
    /// `ERR redlock-proxy: too many commands in MULTI (max_multi_commands = N)`.
    TooManyQueued {
        /// `max_multi_commands`.
        max: usize,
    },
    /// `ERR redlock-proxy: MULTI would hold more than client_query_buffer_limit (N bytes) of
    /// queued commands`.
    QueuedTooLarge {
        /// `client_query_buffer_limit`.
        max: usize,
    },
    /// `ERR redlock-proxy: too many watched keys (max_watch_keys = N)`.
    TooManyWatched {
        /// `max_watch_keys`.
        max: usize,
    },
    /// `ERR redlock-proxy: watched values would pass client_query_buffer_limit (N bytes)`.
    WatchedTooLarge {
        /// `client_query_buffer_limit`.
        max: usize,
    },
    /// `ERR redlock-proxy: a script of N bytes is larger than script_cache_bytes (M)`.
    ScriptTooLarge {
        /// The script's length in bytes.
        len: usize,
        /// `script_cache_bytes`.
        max: usize,
    },
    /// `ERR max number of clients reached` (`max_clients`), written before closing.
    MaxClients,
    /// `ERR redlock-proxy: a master's reply is nested more than 32 levels deep`: stands in for
    /// a reply deeper than `wire::master::MAX_REPLY_DEPTH`.
    ReplyTooDeep,

    // --- Lock operations the proxy cannot form (its own scripts' shapes). ---
    /// `ERR redlock-proxy: a lock operation needs at least one key`.
    NoLockKeys,
    /// `ERR redlock-proxy: a TTL read needs constant replies`.
    TtlReadShape,
    /// `ERR redlock-proxy: an unlock needs a channel`.
    UnlockWithoutChannel,
    /// `ERR redlock-proxy: a forced unlock needs a channel`.
    ForceWithoutChannel,

    // --- Quorum: the masters gave no majority. ---
    /// `CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered`.
    NoQuorum,
    /// `CLUSTERDOWN ... answered the release`.
    NoQuorumRelease,
    /// `CLUSTERDOWN ... answered the unlock`.
    NoQuorumUnlock,
    /// `ERR redlock-proxy: the masters did not agree on the script's reply (no majority)`.
    ScriptDisagreement,
    /// `TRYAGAIN redlock-proxy: another proxy is fencing the same grant; try again`.
    FenceContended,
}

/// The longest piece of a client's input an error quotes.
const QUOTED: usize = 128;

impl Error {
    /// Redis's unknown-command error, quoting up to 128 bytes of `name` and of `args`.
    pub fn unknown_command<'a>(name: &[u8], args: impl Iterator<Item = &'a [u8]>) -> Error {
        let mut quoted = String::new();
        for arg in args {
            if quoted.len() >= QUOTED {
                break;
            }
            let room = QUOTED - quoted.len();
            let text = String::from_utf8_lossy(&arg[..arg.len().min(room)]);
            quoted.push_str(&format!("'{text}' "));
        }
        Error::UnknownCommand {
            name: String::from_utf8_lossy(&name[..name.len().min(QUOTED)]).into_owned(),
            args: quoted,
        }
    }

    /// Redis's unknown-subcommand error for `command`.
    pub fn unknown_subcommand(command: &'static str, sub: &[u8]) -> Error {
        Error::UnknownSubcommand {
            command,
            sub: String::from_utf8_lossy(&sub[..sub.len().min(QUOTED)]).into_owned(),
        }
    }

    /// The error's full text, as the client reads it (without the leading `-`): borrowed for
    /// a constant wording, so such a reply costs no allocation. Every wording is here, and
    /// only here, by family.
    pub fn text(&self) -> Cow<'static, str> {
        match self {
            Error::Protocol(m) => m.text(),
            Error::UnknownCommand { .. }
            | Error::UnknownSubcommand { .. }
            | Error::WrongArity(_)
            | Error::Syntax
            | Error::BadDigest
            | Error::HelloOption(_)
            | Error::UnrecognizedOption(_)
            | Error::ScriptFlushMode
            | Error::ConfigUnsupported(_)
            | Error::NotAnInteger
            | Error::NotAnInt32
            | Error::ProtocolVersionNotAnInteger
            | Error::TimeoutNotAnInteger
            | Error::TimeoutNotAFloat
            | Error::TimeoutNegative
            | Error::TimeoutOutOfRange
            | Error::InvalidExpire(_)
            | Error::InvalidExtension
            | Error::InvalidLockScriptTtl
            | Error::InvalidScriptTtl
            | Error::DbIndexOutOfRange
            | Error::NegativeKeyCount
            | Error::KeyCountBeyondArgs
            | Error::BadClientName
            | Error::BadClientAttr(_)
            | Error::PublishArg(_) => self.command_text(),
            Error::NoProto
            | Error::WrongType
            | Error::OnlySubscribe(_)
            | Error::NoAuth
            | Error::HelloNoAuth
            | Error::WrongPass
            | Error::AuthWithoutPassword
            | Error::NoPermKeys
            | Error::NoPermChannels
            | Error::ScriptChannel
            | Error::ReservedChannel
            | Error::NotInMulti
            | Error::WatchInMulti
            | Error::NestedMulti
            | Error::DiscardWithoutMulti
            | Error::ExecWithoutMulti
            | Error::ExecAbort => self.state_text(),
            Error::NoScript
            | Error::NotBusy
            | Error::UnknownScript { .. }
            | Error::TtlTooLong { .. }
            | Error::ExtensionTooLong { .. }
            | Error::ExpiryTooLong { .. }
            | Error::SignalTtl { .. }
            | Error::LatchTtl { .. }
            | Error::NxOnlyAsLock
            | Error::NxWithoutExpiry
            | Error::TooManyQueued { .. }
            | Error::QueuedTooLarge { .. }
            | Error::TooManyWatched { .. }
            | Error::WatchedTooLarge { .. }
            | Error::ScriptTooLarge { .. }
            | Error::MaxClients
            | Error::ReplyTooDeep => self.script_and_limit_text(),
            Error::NoLockKeys
            | Error::TtlReadShape
            | Error::UnlockWithoutChannel
            | Error::ForceWithoutChannel
            | Error::NoQuorum
            | Error::NoQuorumRelease
            | Error::NoQuorumUnlock
            | Error::ScriptDisagreement
            | Error::FenceContended => self.proxy_text(),
        }
    }

    /// Commands and their arguments: names, arity, syntax, values and ranges.
    fn command_text(&self) -> Cow<'static, str> {
        let text: &'static str = match self {
            Error::UnknownCommand { name, args } => {
                return format!("ERR unknown command '{name}', with args beginning with: {args}")
                    .into();
            }
            Error::UnknownSubcommand { command, sub } => {
                return format!(
                    "ERR unknown subcommand '{sub}'. Try {} HELP.",
                    command.to_ascii_uppercase()
                )
                .into();
            }
            Error::WrongArity(name) => {
                return format!("ERR wrong number of arguments for '{name}' command").into();
            }
            Error::Syntax => "ERR syntax error",
            Error::BadDigest => "ERR must be exactly 16 hexadecimal characters",
            Error::HelloOption(opt) => {
                return format!("ERR Syntax error in HELLO option '{opt}'").into();
            }
            Error::UnrecognizedOption(opt) => {
                return format!("ERR Unrecognized option '{opt}'").into();
            }
            Error::ScriptFlushMode => "ERR SCRIPT FLUSH only support SYNC|ASYNC option",
            Error::ConfigUnsupported(sub) => {
                return format!("ERR redlock-proxy does not support CONFIG {sub}").into();
            }

            // Values and ranges.
            Error::NotAnInteger => "ERR value is not an integer or out of range",
            Error::NotAnInt32 => {
                "ERR value is out of range, value must between -2147483648 and 2147483647"
            }
            Error::ProtocolVersionNotAnInteger => {
                "ERR Protocol version is not an integer or out of range"
            }
            Error::TimeoutNotAnInteger => "ERR timeout is not an integer or out of range",
            Error::TimeoutNotAFloat => "ERR timeout is not a float or out of range",
            Error::TimeoutNegative => "ERR timeout is negative",
            Error::TimeoutOutOfRange => "ERR timeout is out of range",
            Error::InvalidExpire(name) => {
                return format!("ERR invalid expire time in '{name}' command").into();
            }
            Error::InvalidExtension => "ERR invalid expire time in lock extension",
            Error::InvalidLockScriptTtl => "ERR invalid expire time in lock script",
            Error::InvalidScriptTtl => {
                "ERR invalid expire time in lock script: the TTL must be a positive number of milliseconds"
            }
            Error::DbIndexOutOfRange => {
                "ERR DB index is out of range (redlock-proxy serves database 0 only)"
            }
            Error::NegativeKeyCount => "ERR Number of keys can't be negative",
            Error::KeyCountBeyondArgs => "ERR Number of keys can't be greater than number of args",
            Error::BadClientName => {
                "ERR Client names cannot contain spaces, newlines or special characters."
            }
            Error::BadClientAttr(attr) => {
                return format!(
                    "ERR {attr} cannot contain spaces, newlines or special characters."
                )
                .into();
            }
            Error::PublishArg(j) => {
                return format!(
                    "ERR redlock-proxy runs ARGV[{j}] of this lock script only as PUBLISH or SPUBLISH"
                )
                .into();
            }
            _ => unreachable!("not of this family: {self:?}"),
        };
        Cow::Borrowed(text)
    }

    /// What the connection may do now: its protocol, its login, its permissions and its transaction.
    fn state_text(&self) -> Cow<'static, str> {
        let text: &'static str = match self {
            Error::NoProto => "NOPROTO unsupported protocol version",
            Error::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value",
            Error::OnlySubscribe(name) => {
                return format!(
                    "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
                )
                .into();
            }

            // Authentication and permissions.
            Error::NoAuth => "NOAUTH Authentication required.",
            Error::HelloNoAuth => {
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
            }
            Error::WrongPass => "WRONGPASS invalid username-password pair or user is disabled.",
            Error::AuthWithoutPassword => {
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
            }
            Error::NoPermKeys => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
            }
            Error::NoPermChannels => {
                "NOPERM this user has no permissions to access one of the channels used as arguments"
            }
            Error::ScriptChannel => {
                "ERR The user executing the script can't publish to the channel mentioned in the command"
            }
            Error::ReservedChannel => {
                "NOPERM redlock-proxy:* channels carry the proxy's own notices: clients may subscribe to them, never publish"
            }

            // Transactions.
            Error::NotInMulti => "ERR Command not allowed inside a transaction",
            Error::WatchInMulti => "ERR WATCH inside MULTI is not allowed",
            Error::NestedMulti => "ERR MULTI calls can not be nested",
            Error::DiscardWithoutMulti => "ERR DISCARD without MULTI",
            Error::ExecWithoutMulti => "ERR EXEC without MULTI",
            Error::ExecAbort => "EXECABORT Transaction discarded because of previous errors.",
            _ => unreachable!("not of this family: {self:?}"),
        };
        Cow::Borrowed(text)
    }

    /// Scripts, and the proxy's own bounds.
    fn script_and_limit_text(&self) -> Cow<'static, str> {
        let text: &'static str = match self {
            Error::NoScript => "NOSCRIPT No matching script. Please use EVAL.",
            Error::NotBusy => "NOTBUSY No scripts in execution right now.",
            Error::UnknownScript { sha, why } if why.is_empty() => {
                return format!(
                    "ERR redlock-proxy does not know what script {sha} does, and unknown_scripts = \"reject\""
                )
                .into();
            }
            Error::UnknownScript { sha, why } => {
                return format!(
                    "ERR redlock-proxy does not know what script {sha} does ({why}), and unknown_scripts = \"reject\""
                )
                .into();
            }

            // Limits.
            Error::TtlTooLong { ttl, max } => {
                return format!("ERR lock TTL {ttl} ms exceeds the proxy's max_ttl_ms ({max} ms)")
                    .into();
            }
            Error::ExtensionTooLong { max } => {
                return format!("ERR lock TTL would exceed the proxy's max_ttl_ms ({max} ms)")
                    .into();
            }
            Error::ExpiryTooLong { ms, max } => {
                return format!("ERR expiry of {ms} ms exceeds the proxy's max_ttl_ms ({max} ms)")
                    .into();
            }
            Error::SignalTtl { ttl, max } => {
                return format!(
                    "ERR signal TTL {ttl} ms must be positive and within the proxy's max_ttl_ms ({max} ms)"
                )
                .into();
            }
            Error::LatchTtl { ttl, max } => {
                return format!(
                    "ERR unlock latch TTL {ttl} ms must be positive and within the proxy's max_ttl_ms ({max} ms)"
                )
                .into();
            }
            Error::NxOnlyAsLock => {
                "ERR redlock-proxy supports SET NX only as a lock: SET key token NX PX milliseconds (or EX seconds)"
            }
            Error::NxWithoutExpiry => {
                "ERR redlock-proxy refuses SET NX without an expiry: the lock could never expire (add PX or EX, or set default_ttl_ms)"
            }
            Error::TooManyQueued { max } => {
                return format!(
                    "ERR redlock-proxy: too many commands in MULTI (max_multi_commands = {max})"
                )
                .into();
            }
            Error::QueuedTooLarge { max } => {
                return format!(
                    "ERR redlock-proxy: MULTI would hold more than client_query_buffer_limit ({max} bytes) of queued commands"
                )
                .into();
            }
            Error::TooManyWatched { max } => {
                return format!(
                    "ERR redlock-proxy: too many watched keys (max_watch_keys = {max})"
                )
                .into();
            }
            Error::WatchedTooLarge { max } => {
                return format!(
                    "ERR redlock-proxy: watched values would pass client_query_buffer_limit ({max} bytes)"
                )
                .into();
            }
            Error::ScriptTooLarge { len, max } => {
                return format!(
                    "ERR redlock-proxy: a script of {len} bytes is larger than script_cache_bytes ({max})"
                )
                .into();
            }
            Error::MaxClients => "ERR max number of clients reached",
            Error::ReplyTooDeep => {
                "ERR redlock-proxy: a master's reply is nested more than 32 levels deep"
            }
            _ => unreachable!("not of this family: {self:?}"),
        };
        Cow::Borrowed(text)
    }

    /// The proxy's own operations: lock operations it cannot form, and quorums the masters did
    /// not give.
    fn proxy_text(&self) -> Cow<'static, str> {
        let text: &'static str = match self {
            Error::NoLockKeys => "ERR redlock-proxy: a lock operation needs at least one key",
            Error::TtlReadShape => "ERR redlock-proxy: a TTL read needs constant replies",
            Error::UnlockWithoutChannel => "ERR redlock-proxy: an unlock needs a channel",
            Error::ForceWithoutChannel => "ERR redlock-proxy: a forced unlock needs a channel",

            // Quorum.
            Error::NoQuorum => "CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered",
            Error::NoQuorumRelease => {
                "CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered the release"
            }
            Error::NoQuorumUnlock => {
                "CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered the unlock"
            }
            Error::ScriptDisagreement => {
                "ERR redlock-proxy: the masters did not agree on the script's reply (no majority)"
            }
            Error::FenceContended => {
                "TRYAGAIN redlock-proxy: another proxy is fencing the same grant; try again"
            }
            _ => unreachable!("not of this family: {self:?}"),
        };
        Cow::Borrowed(text)
    }

    /// The error's kind: its first word.
    pub fn kind(&self) -> Kind {
        Kind::of(self.text().as_bytes())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every variant (and every malformed request).
    fn every() -> Vec<Error> {
        let m = [
            Malformed::MultibulkLength,
            Malformed::BulkLength,
            Malformed::UnauthenticatedMultibulkLength,
            Malformed::UnauthenticatedBulkLength,
            Malformed::ExpectedBulk('*'),
            Malformed::HeaderTooLong,
            Malformed::BulkHeaderTooLong,
            Malformed::InlineTooLong,
            Malformed::UnbalancedQuotes,
        ];
        let mut all: Vec<Error> = m.into_iter().map(Error::Protocol).collect();
        all.extend([
            Error::unknown_command(b"foo", [&b"a"[..]].into_iter()),
            Error::unknown_subcommand("client", b"x"),
            Error::WrongArity("get"),
            Error::Syntax,
            Error::BadDigest,
            Error::HelloOption("X".into()),
            Error::UnrecognizedOption("x".into()),
            Error::ScriptFlushMode,
            Error::ConfigUnsupported("SET".into()),
            Error::NotAnInteger,
            Error::NotAnInt32,
            Error::ProtocolVersionNotAnInteger,
            Error::TimeoutNotAnInteger,
            Error::TimeoutNotAFloat,
            Error::TimeoutNegative,
            Error::TimeoutOutOfRange,
            Error::InvalidExpire("set"),
            Error::InvalidExtension,
            Error::InvalidLockScriptTtl,
            Error::InvalidScriptTtl,
            Error::DbIndexOutOfRange,
            Error::NegativeKeyCount,
            Error::KeyCountBeyondArgs,
            Error::BadClientName,
            Error::BadClientAttr("lib-name".into()),
            Error::PublishArg(3),
            Error::NoProto,
            Error::WrongType,
            Error::OnlySubscribe("get"),
            Error::NoAuth,
            Error::HelloNoAuth,
            Error::WrongPass,
            Error::AuthWithoutPassword,
            Error::NoPermKeys,
            Error::NoPermChannels,
            Error::ScriptChannel,
            Error::ReservedChannel,
            Error::NotInMulti,
            Error::WatchInMulti,
            Error::NestedMulti,
            Error::DiscardWithoutMulti,
            Error::ExecWithoutMulti,
            Error::ExecAbort,
            Error::NoScript,
            Error::NotBusy,
            Error::UnknownScript {
                sha: "ab".into(),
                why: String::new(),
            },
            Error::TtlTooLong { ttl: 2, max: 1 },
            Error::ExtensionTooLong { max: 1 },
            Error::ExpiryTooLong { ms: 2, max: 1 },
            Error::SignalTtl { ttl: 0, max: 1 },
            Error::LatchTtl { ttl: 0, max: 1 },
            Error::NxOnlyAsLock,
            Error::NxWithoutExpiry,
            Error::TooManyQueued { max: 1 },
            Error::QueuedTooLarge { max: 1 },
            Error::TooManyWatched { max: 1 },
            Error::WatchedTooLarge { max: 1 },
            Error::ScriptTooLarge { len: 2, max: 1 },
            Error::MaxClients,
            Error::ReplyTooDeep,
            Error::NoLockKeys,
            Error::TtlReadShape,
            Error::UnlockWithoutChannel,
            Error::ForceWithoutChannel,
            Error::NoQuorum,
            Error::NoQuorumRelease,
            Error::NoQuorumUnlock,
            Error::ScriptDisagreement,
            Error::FenceContended,
        ]);
        all
    }

    #[test]
    fn every_wording_is_distinct_and_starts_with_its_kind() {
        let mut seen = std::collections::HashSet::new();
        for e in every() {
            let text = e.text();
            assert!(seen.insert(text.clone().into_owned()), "twice: {text}");
            assert!(!text.contains(['\r', '\n']), "{text}");
            match e {
                // Redis's own words with no kind of their own: counted as `other`.
                Error::NotBusy | Error::FenceContended => assert_eq!(e.kind(), Kind::Other),
                _ => {
                    assert_ne!(e.kind(), Kind::Other, "{text}");
                    assert!(text.starts_with(&format!("{} ", e.kind().word())), "{text}");
                }
            }
        }
    }

    #[test]
    fn parametrised_wordings() {
        assert_eq!(
            Error::Protocol(Malformed::ExpectedBulk('*')).text(),
            "ERR Protocol error: expected '$', got '*'"
        );
        assert_eq!(
            Error::TtlTooLong { ttl: 9, max: 5 }.text(),
            "ERR lock TTL 9 ms exceeds the proxy's max_ttl_ms (5 ms)"
        );
        assert_eq!(
            Error::UnknownScript {
                sha: "ab".into(),
                why: String::new(),
            }
            .text(),
            "ERR redlock-proxy does not know what script ab does, and unknown_scripts = \"reject\""
        );
        assert_eq!(
            Error::UnknownScript {
                sha: "ab".into(),
                why: "touches a key not given in KEYS".into(),
            }
            .text(),
            "ERR redlock-proxy does not know what script ab does (touches a key not given in KEYS), and unknown_scripts = \"reject\""
        );
        assert_eq!(
            Error::WrongArity("client|setname").text(),
            "ERR wrong number of arguments for 'client|setname' command"
        );
        // Constant wordings are borrowed: their replies cost no allocation.
        assert!(matches!(Error::NoQuorum.text(), Cow::Borrowed(_)));
    }

    #[test]
    fn kinds_are_indexed_by_their_place_in_all() {
        // `Counters` keeps one counter per kind at `kind as usize`.
        for (i, k) in Kind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
        assert_eq!(Kind::ALL.last(), Some(&Kind::Other));
    }

    #[test]
    fn kinds_are_read_from_the_first_word() {
        assert_eq!(Kind::of(b"ERR syntax error"), Kind::Err);
        assert_eq!(Kind::of(b"CLUSTERDOWN x"), Kind::ClusterDown);
        assert_eq!(Kind::of(b"BUSY Redis is busy"), Kind::Busy);
        assert_eq!(
            Kind::of(b"BUSYKEY Target key name already exists."),
            Kind::Other
        );
        assert_eq!(Kind::of(b"other x"), Kind::Other);
        assert_eq!(Kind::of(b"ERR"), Kind::Err);
        assert_eq!(Kind::of(b""), Kind::Other);
    }
}
