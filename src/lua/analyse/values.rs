//! The analyser's symbolic values ([`Val`]) and the Lua semantics it needs of them: truth,
//! type, arithmetic on symbolic sums, ordering, conversion to a Redis reply, and the literal
//! replies a lock operation may give.

use std::fmt;

use crate::lockop::{Lit, Short};

/// Most terms in a symbolic sum (`ARGV[1] + PTTL(...) + ...`). Lock scripts add two or three;
/// a loop adding to one value would otherwise grow it, and every addition copies and sorts it.
pub(super) const MAX_TERMS: usize = 16;

/// Why a run stopped short of its end.
pub(super) enum Stop {
    Fork(usize, Vec<u8>),
    Fail(String),
    /// [`find_field`]: the first hash command names this field.
    Found(usize),
}

/// A step of a run: its value, or why it stopped.
pub(super) type R<T> = Result<T, Stop>;

pub(super) fn fail<T>(why: impl Into<String>) -> R<T> {
    Err(Stop::Fail(why.into()))
}

/// A symbolic value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// `nil`.
    Nil,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Num(i64),
    /// An integer that depends on the number of keys (`#KEYS`, a loop index over `KEYS`):
    /// usable as an index, a loop bound or a reply, but never compared, so that the one- and
    /// two-key runs stand for any number of keys.
    Count(i64),
    /// A string literal.
    Str(Vec<u8>),
    /// `ARGV[j]` (a string).
    Arg(usize),
    /// `tonumber(ARGV[j])`.
    NumArg(usize),
    /// The value another client holds in `KEYS[i]`: never equal to the token.
    Other(usize),
    /// The time `KEYS[i]` had left (milliseconds, > 0) when the script started.
    Pttl(usize),
    /// The same in seconds (≥ 0).
    Ttl(usize),
    /// A sum of the above, terms in a fixed order.
    Sum(Vec<Val>),
    /// A hold count known only to be at least 2, plus an offset: `Many(k)` is `c + k` with
    /// `c ≥ 2` (a re-entered hash lock). Comparisons that this does not decide stop the run.
    Many(i64),
    /// A hash lock's value: the caller's hold count in its field (`ARGV[field]`), if it has
    /// one, and whether another holder's field is present.
    Hash {
        /// The caller's count (`Num` or `Many`).
        mine: Option<Box<Val>>,
        /// Another holder's field is present.
        others: bool,
    },
    /// The status reply `OK`.
    Status,
    /// `TYPE`'s status reply, the table `{ok = name}` (`string`, `hash`, `list`, `none`): only
    /// its `ok` field is read.
    KeyType(&'static [u8]),
    /// A table of values (a multi-bulk reply).
    Table(Vec<Val>),
    /// The name `KEYS[i]`.
    Key(usize),
    /// A string built from the name `KEYS[i]` (`KEYS[1] .. ':count'`): a key the script was not
    /// given, if it names one.
    Built(usize),
    /// A string joined at run time from other strings (`':count:' .. ARGV[1]`), no key's name
    /// among them: only joined further (or refused where used).
    Joined,
    /// The result of a command the analyser does not model.
    Opaque,
    /// `tostring` of a table (a status or array reply): Lua's `table: 0x…`, an address that
    /// equals no string literal without that prefix; compared with anything else, undecided.
    Addr,
    /// `KEYS`.
    Keys,
    /// `ARGV`.
    Argv,
    /// `redis`.
    Redis,
    /// `redis.call` / `redis.pcall`.
    Call,
    /// `ARGV[j] * 1000` (a TTL in seconds, made milliseconds): only usable as a TTL.
    Thousand(usize),
    /// `ipairs`.
    Ipairs,
    /// `pairs`: over `KEYS` or a list without holes, the items in order, as `ipairs`.
    Pairs,
    /// `tonumber`.
    ToNumber,
    /// `tostring`.
    ToString,
    /// A function the script defined (`local function f`): an index into the run's functions.
    Func(usize),
    /// A library function or table the analyser models (see [`Lib`]).
    Lib(Lib),
    /// An error reply (`redis.error_reply(msg)`): Redis answers `-msg`.
    Error(Vec<u8>),
    /// The first `tonumber(ARGV[j])` bytes of a string: `GETRANGE key 0 n-1` or
    /// `string.sub(s, 1, n)` (bsm/redislock's token-prefix test). Only compared with another
    /// head of the same length, and then decided for the case where `ARGV[j]` is the token's
    /// length (see [`Run::prefix`]).
    Head(Box<Val>, usize),
}

/// Library functions and tables a lock script may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    /// `unpack` (only as the last argument of `redis.call`).
    Unpack,
    /// The `table` library.
    Table,
    /// `table.insert(t, v)` on a local table.
    TableInsert,
    /// The `string` library.
    String,
    /// `string.sub(s, 1, n)`.
    StringSub,
    /// `redis.status_reply`.
    StatusReply,
    /// `redis.error_reply`.
    ErrorReply,
    /// `redis.replicate_commands()`: switches a script to effects replication, the default
    /// since Redis 5 and the only mode since 7; it changes nothing the script does and
    /// answers `true`.
    Replicate,
    /// `redis.log(level, message, ...)`: writes to the server's log only, answers nothing.
    Log,
    /// `string.format(...)`: text the analyser does not follow ([`Val::Opaque`]), fit for a
    /// log message; as a key, compared or answered, it stops the analysis.
    StringFormat,
    /// `type(v)`: the name of a value's Lua type, for the values whose type is known.
    Type,
    /// The `math` library.
    Math,
    /// `math.floor(n)` / `math.ceil(n)` of an integer (a TTL argument read with `tonumber`:
    /// the proxy takes only integer TTLs, so rounding never changes one it accepts).
    Round,
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Nil => write!(f, "nil"),
            Val::Bool(b) => write!(f, "{b}"),
            Val::Num(n) | Val::Count(n) => write!(f, "{n}"),
            Val::Str(s) => write!(f, "'{}'", String::from_utf8_lossy(s)),
            Val::Arg(j) => write!(f, "ARGV[{j}]"),
            Val::NumArg(j) => write!(f, "tonumber(ARGV[{j}])"),
            Val::Other(i) => write!(f, "other{i}"),
            Val::Pttl(i) => write!(f, "pttl(KEYS[{i}])"),
            Val::Ttl(i) => write!(f, "ttl(KEYS[{i}])"),
            Val::Sum(t) => {
                let parts: Vec<String> = t.iter().map(|v| v.to_string()).collect();
                write!(f, "({})", parts.join(" + "))
            }
            Val::Status => write!(f, "OK"),
            Val::KeyType(t) => write!(f, "+{}", String::from_utf8_lossy(t)),
            Val::Many(k) => write!(f, "(n{k:+})"),
            Val::Hash { mine, others } => {
                let mine = mine.as_ref().map_or("-".to_string(), |m| m.to_string());
                write!(f, "hash(mine {mine}, others {others})")
            }
            Val::Table(t) => {
                let parts: Vec<String> = t.iter().map(|v| v.to_string()).collect();
                write!(f, "{{{}}}", parts.join(", "))
            }
            Val::Key(i) => write!(f, "KEYS[{i}]"),
            Val::Built(i) => write!(f, "KEYS[{i}]..."),
            Val::Joined => write!(f, "a joined string"),
            Val::Addr => write!(f, "a table's address"),
            Val::Error(e) => write!(f, "-{}", String::from_utf8_lossy(e)),
            Val::Head(v, j) => write!(f, "head({v}, ARGV[{j}])"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Lua to Redis reply conversion.
pub(super) fn to_reply(v: Val) -> Val {
    match v {
        Val::Bool(false) => Val::Nil,
        Val::Bool(true) => Val::Num(1),
        Val::Count(n) => Val::Num(n),
        Val::Table(items) => Val::Table(
            items
                .into_iter()
                .take_while(|v| *v != Val::Nil)
                .map(to_reply)
                .collect(),
        ),
        v => v,
    }
}

pub(super) fn truthy(v: &Val) -> R<bool> {
    match v {
        Val::Nil | Val::Bool(false) => Ok(false),
        Val::Opaque => fail("tests the result of a command it does not model"),
        _ => Ok(true),
    }
}

/// Lua's type of a value, for `==` across types (always false).
pub(super) fn kind(v: &Val) -> u8 {
    match v {
        Val::Nil => 0,
        Val::Bool(_) => 1,
        Val::Num(_)
        | Val::Count(_)
        | Val::NumArg(_)
        | Val::Pttl(_)
        | Val::Ttl(_)
        | Val::Sum(_)
        | Val::Many(_) => 2,
        Val::Str(_)
        | Val::Arg(_)
        | Val::Other(_)
        | Val::Key(_)
        | Val::Built(_)
        | Val::Joined
        | Val::Addr
        | Val::Head(..) => 3,
        Val::Status
        | Val::Table(_)
        | Val::Keys
        | Val::Argv
        | Val::Redis
        | Val::Hash { .. }
        | Val::Error(_) => 4,
        Val::Opaque => 5,
        _ => 6,
    }
}

/// A number-valued term in its canonical spelling (`ARGV[j]` whether or not `tonumber`ed).
pub(super) fn numeric(v: Val) -> R<Val> {
    match v {
        Val::NumArg(j) | Val::Arg(j) => Ok(Val::Arg(j)),
        v @ (Val::Num(_) | Val::Pttl(_) | Val::Ttl(_) | Val::Sum(_) | Val::Many(_)) => Ok(v),
        Val::Str(s) => match std::str::from_utf8(&s)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            Some(n) => Ok(Val::Num(n)),
            None => fail("arithmetic on a string"),
        },
        v => fail(format!("arithmetic on {v}")),
    }
}

pub(super) fn term_rank(v: &Val) -> (u8, i64) {
    match v {
        Val::Arg(j) => (0, *j as i64),
        Val::Pttl(i) => (1, *i as i64),
        Val::Ttl(i) => (2, *i as i64),
        Val::Num(n) => (3, *n),
        _ => (4, 0),
    }
}

/// The error `redis.error_reply(text)` answers, as Redis 7 spells it: one leading `-` is
/// dropped, and a text without a space (no error code of its own) gets `ERR `.
pub(super) fn error_text(text: &[u8]) -> Vec<u8> {
    let text = text.strip_prefix(b"-").unwrap_or(text);
    if text.contains(&b' ') {
        text.to_vec()
    } else {
        [b"ERR ".as_slice(), text].concat()
    }
}

/// A value a string command may store.
pub(super) fn string_value(v: &Val) -> R<Val> {
    match v {
        Val::NumArg(j) => Ok(Val::Arg(*j)),
        v @ (Val::Arg(_) | Val::Str(_) | Val::Num(_)) => Ok(v.clone()),
        v => fail(format!("sets a key to {v}")),
    }
}

pub(super) fn overflow() -> Stop {
    Stop::Fail("integer overflow".into())
}

pub(super) fn add(l: Val, r: Val) -> R<Val> {
    // An index that follows the keys (`ARGV[i + 1]` in a loop over `KEYS`).
    match (&l, &r) {
        (Val::Count(a), Val::Num(b)) | (Val::Num(b), Val::Count(a)) => {
            return Ok(Val::Count(a.checked_add(*b).ok_or_else(overflow)?));
        }
        _ => {}
    }
    let (l, r) = (numeric(l)?, numeric(r)?);
    match (&l, &r) {
        (Val::Num(x), Val::Num(y)) => return Ok(Val::Num(x.checked_add(*y).ok_or_else(overflow)?)),
        (Val::Many(k), Val::Num(d)) | (Val::Num(d), Val::Many(k)) => {
            return Ok(Val::Many(k.checked_add(*d).ok_or_else(overflow)?));
        }
        (Val::Many(_), _) | (_, Val::Many(_)) => return fail("adds to a hold count"),
        _ => {}
    }
    let mut terms = Vec::new();
    for v in [l, r] {
        match v {
            Val::Sum(t) => terms.extend(t),
            Val::Num(0) => {}
            v => terms.push(v),
        }
    }
    if terms.len() > MAX_TERMS {
        return fail("adds too many terms to analyse");
    }
    terms.sort_by_key(term_rank);
    Ok(Val::Sum(terms))
}

/// `a < b` (or `a <= b`).
pub(super) fn less(a: &Val, b: &Val, or_equal: bool) -> R<bool> {
    use Val::*;
    match (a, b) {
        (Num(x), Num(y)) => Ok(if or_equal { x <= y } else { x < y }),
        // A key with a TTL: PTTL > 0, TTL ≥ 0.
        (Pttl(_), Num(n)) if *n <= 0 => Ok(false),
        (Num(n), Pttl(_)) if *n <= 0 => Ok(true),
        (Ttl(_), Num(n)) if *n < 0 || (*n == 0 && !or_equal) => Ok(false),
        (Num(n), Ttl(_)) if *n < 0 || (*n == 0 && or_equal) => Ok(true),
        // A count `c + k` with `c ≥ 2`: at least `2 + k`.
        (Num(n), Many(k)) if *n < 2 + k || (*n == 2 + k && or_equal) => Ok(true),
        (Many(k), Num(n)) if *n < 2 + k || (*n == 2 + k && !or_equal) => Ok(false),
        _ => fail(format!("cannot decide {a} < {b}")),
    }
}

/// The constant a script answers with `v`, if it is one the proxy can give: a number, nil, a
/// status `OK`, a short string or error, a table of one number or one short string, (where
/// `ttl` names the TTL argument) that argument as a number or as text, or (where `token` names
/// the token argument) the token.
pub fn reply_lit(v: &Val, ttl: Option<usize>, token: Option<usize>) -> Option<Lit> {
    match v {
        Val::Num(n) => Some(Lit::Int(*n)),
        Val::Nil => Some(Lit::Nil),
        Val::Status => Some(Lit::Ok),
        Val::Str(s) => Short::new(s).map(Lit::Bulk),
        Val::Error(e) => Short::new(e).map(Lit::Error),
        Val::Table(items) => match items.as_slice() {
            [Val::Num(n)] => Some(Lit::Single(*n)),
            [Val::Str(s)] => Short::new(s).map(Lit::SingleBulk),
            _ => None,
        },
        Val::NumArg(j) if Some(*j) == ttl => Some(Lit::TtlNum),
        Val::Arg(j) if Some(*j) == ttl => Some(Lit::TtlText),
        Val::Arg(j) if Some(*j) == token => Some(Lit::TokenText),
        _ => None,
    }
}

/// A constant reply as the analyser's value (a reply of the TTL argument: `ARGV[ttl_arg]`; of
/// the token: `ARGV[token_arg]`).
pub fn lit_val(l: Lit, ttl_arg: usize, token_arg: usize) -> Val {
    match l {
        Lit::TokenText => Val::Arg(token_arg),
        Lit::TtlNum => Val::NumArg(ttl_arg),
        Lit::TtlText => Val::Arg(ttl_arg),
        Lit::Decimal(n) => Val::Str(n.to_string().into_bytes()),
        Lit::Int(n) => Val::Num(n),
        Lit::Nil => Val::Nil,
        Lit::Ok => Val::Status,
        Lit::Bulk(s) => Val::Str(s.as_bytes().to_vec()),
        Lit::Error(e) => Val::Error(e.as_bytes().to_vec()),
        Lit::Single(n) => Val::Table(vec![Val::Num(n)]),
        Lit::SingleBulk(s) => Val::Table(vec![Val::Str(s.as_bytes().to_vec())]),
    }
}
