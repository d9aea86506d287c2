//! Behavioural analysis: runs a parsed script symbolically from every abstract starting state
//! of its keys and records what it does, so a lock script is recognised by its behaviour, not
//! its spelling.
//!
//! Each key starts missing, holding the token (`ARGV[1]`) or holding another client's value,
//! the last two with or without a TTL. A comparison of an argument with a string literal
//! (`ARGV[3] == "0"`) forks the run into both outcomes. `ipairs(KEYS)` and `for i = 1, #KEYS`
//! are unrolled over one and two keys. Anything the analyser cannot decide exactly (a loop
//! without bound, a comparison of two different arguments, a value of another holder compared
//! with a literal, a global, a function, ...) stops the analysis: the script is then unknown.
//! A run records the Redis calls made (with symbolic arguments), the keys' final states and the
//! reply; [`Run`]s are then classified in [`super`].
//!
//! Two more facts fork a run the same way: which of two keys' TTLs is smaller (`pttl(a) <
//! pttl(b)`, under the pseudo-argument [`ORDER`]), and, for a token-prefix test (`GETRANGE key
//! 0 n-1` against `string.sub(ARGV[1], 1, n)`), the run is decided where `n` is the token's
//! length ([`Run::prefix`]). Local functions are followed (not recursive, two calls deep), as
//! are `unpack` at the end of a `redis.call`, `table.insert` into a local table, and
//! `redis.status_reply` / `redis.error_reply`.

use std::fmt;

use super::parse::{Bin, Block, Expr, Func, Stat, Un, is_redis_call};
use crate::lockop::{Lit, Short};

/// Most statements and expressions evaluated in one run.
const MAX_STEPS: usize = 10_000;
/// Most runs per script (start states × argument forks).
const MAX_RUNS: usize = 1_000;
/// Most statements and expressions evaluated over every run of one script. The two limits
/// above alone would allow ten million, seconds of work on the runtime's thread for one
/// request of a few hundred bytes; the library scripts need a few thousand.
const MAX_TOTAL_STEPS: usize = 100_000;
/// Most terms in a symbolic sum (`ARGV[1] + PTTL(...) + ...`). Lock scripts add two or three;
/// a loop adding to one value would otherwise grow it, and every addition copies and sorts it.
const MAX_TERMS: usize = 16;
/// The pseudo-`ARGV` index of assumptions about the order of two keys' TTLs (see [`order`]);
/// real `ARGV` indexes start at 1.
pub const ORDER: usize = 0;

/// The pseudo-`ARGV` index of assumptions that another client's value equals a literal
/// (`GET KEYS[1] == "1"`), made only with [`Layout::literal_forks`]: the literal is the
/// assumption's text.
pub const HOLDS: usize = usize::MAX;

/// The assumption "`PTTL(KEYS[a])` < `PTTL(KEYS[b])`", recorded under [`ORDER`].
pub fn order(a: usize, b: usize) -> Vec<u8> {
    format!("pttl(KEYS[{a}]) < pttl(KEYS[{b}])").into_bytes()
}

/// Most nested calls of the script's own functions (each one nests the analyser's own stack).
const MAX_CALLS: usize = 2;
/// Most items `table.insert` may grow a table to.
const MAX_TABLE: usize = 64;
/// Most iterations of an unrolled numeric `for`.
const MAX_FOR: i64 = 16;

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

/// How a key stands before the script runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The key does not exist.
    Missing,
    /// It holds the token, `ARGV[1]`.
    Token,
    /// It holds another client's value.
    Other,
}

/// A key's starting state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// Its value.
    pub held: Held,
    /// Whether it has a TTL (only when it exists).
    pub ttl: bool,
}

/// Every starting state of one key.
pub const STARTS: [Start; 5] = [
    Start {
        held: Held::Missing,
        ttl: false,
    },
    Start {
        held: Held::Token,
        ttl: true,
    },
    Start {
        held: Held::Token,
        ttl: false,
    },
    Start {
        held: Held::Other,
        ttl: true,
    },
    Start {
        held: Held::Other,
        ttl: false,
    },
];

/// A key's TTL during and after a run.
#[derive(Debug, Clone, PartialEq)]
pub enum TtlNow {
    /// No TTL.
    None,
    /// The TTL it started with.
    Orig,
    /// Set by the script: the value, in seconds or milliseconds.
    Set {
        /// True for `EX` / `EXPIRE`.
        seconds: bool,
        /// The TTL.
        v: Val,
    },
}

/// A key's state during and after a run.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyNow {
    /// Its value, `None` when missing.
    pub value: Option<Val>,
    /// Its TTL.
    pub ttl: TtlNow,
}

impl KeyNow {
    /// The state a key starts in, the token being `ARGV[token]`.
    pub fn start(i: usize, s: Start, token: usize) -> KeyNow {
        let value = match s.held {
            Held::Missing => None,
            Held::Token => Some(Val::Arg(token)),
            Held::Other => Some(Val::Other(i)),
        };
        let ttl = if s.ttl && value.is_some() {
            TtlNow::Orig
        } else {
            TtlNow::None
        };
        KeyNow { value, ttl }
    }
}

impl fmt::Display for KeyNow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            None => write!(f, "missing"),
            Some(v) => {
                write!(f, "{v}")?;
                match &self.ttl {
                    TtlNow::None => write!(f, " (no ttl)"),
                    TtlNow::Orig => write!(f, " (ttl kept)"),
                    TtlNow::Set { seconds, v } => {
                        write!(f, " (ttl {v} {})", if *seconds { "s" } else { "ms" })
                    }
                }
            }
        }
    }
}

/// `ARGV[j] == literal` assumed true or false in a run.
pub type Assumption = (usize, Vec<u8>, bool);

/// One symbolic run of a script.
#[derive(Debug, Clone)]
pub struct Run {
    /// Where the script takes its parameters.
    pub layout: Layout,
    /// The keys' starting states.
    pub start: Vec<Start>,
    /// The argument comparisons this run assumed.
    pub assumed: Vec<Assumption>,
    /// The Redis calls made: command and arguments.
    pub calls: Vec<(Vec<u8>, Vec<Val>)>,
    /// True when it called a command the analyser does not model (a side effect it cannot
    /// account for).
    pub foreign: bool,
    /// The keys' final states.
    pub end: Vec<KeyNow>,
    /// The reply, as Redis converts it (`false` → nil, `true` → 1, tables cut at `nil`).
    pub reply: Val,
    /// `Some(j)` when the run compared token prefixes of length `ARGV[j]` (see [`Val::Head`]):
    /// it was then decided as if `ARGV[j]` were the token's length and a key's value holds the
    /// caller's prefix only when it is the token itself, so the run describes the script for
    /// that case only.
    pub prefix: Option<usize>,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let start: Vec<String> = self
            .start
            .iter()
            .enumerate()
            .map(|(i, s)| KeyNow::start(i + 1, *s, self.layout.token).to_string())
            .collect();
        write!(f, "[{}]", start.join("; "))?;
        for (j, s, yes) in &self.assumed {
            let op = if *yes { "==" } else { "~=" };
            write!(f, " ARGV[{j}]{op}'{}'", String::from_utf8_lossy(s))?;
        }
        write!(f, ":")?;
        for (cmd, args) in &self.calls {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            write!(f, " {} {};", String::from_utf8_lossy(cmd), args.join(" "))?;
        }
        let end: Vec<String> = self.end.iter().map(|k| k.to_string()).collect();
        write!(f, " -> {} [{}]", self.reply, end.join("; "))
    }
}

enum Stop {
    Fork(usize, Vec<u8>),
    Fail(String),
    /// [`find_field`]: the first hash command names this field.
    Found(usize),
}

/// [`Layout::field`] while looking for the field (see [`find_field`]).
const FIND_FIELD: usize = usize::MAX;

/// The `ARGV` index a hash-lock script uses as the caller's field (with `per_key`, the first
/// key's, `KEYS[i]`'s being `ARGV[field + i - 1]`): the field its first hash command names, from
/// the first of `starts` whose run reaches one. Finding it first spares trying every index.
pub fn find_field(block: &Block, starts: &[Vec<KeyNow>], per_key: bool) -> Option<usize> {
    let layout = Layout::hash(FIND_FIELD, per_key);
    let mut funcs = Vec::new();
    functions(block, &mut funcs);
    starts.iter().find_map(|keys| {
        let mut m = Machine::new(layout, keys.clone(), &[], &funcs);
        match m.block(block) {
            Err(Stop::Found(j)) => Some(j),
            _ => None,
        }
    })
}

type R<T> = Result<T, Stop>;

fn fail<T>(why: impl Into<String>) -> R<T> {
    Err(Stop::Fail(why.into()))
}

enum Flow {
    Normal,
    Break,
    Return(Val),
}

struct Machine<'a> {
    layout: Layout,
    keys: Vec<KeyNow>,
    locals: Vec<Val>,
    assumed: &'a [Assumption],
    calls: Vec<(Vec<u8>, Vec<Val>)>,
    foreign: bool,
    steps: usize,
    /// Most steps this run may take: [`MAX_STEPS`], or less when the script's runs so far have
    /// used most of [`MAX_TOTAL_STEPS`].
    limit: usize,
    /// Every `local function` in the script (see [`functions`]), by [`Val::Func`] index.
    funcs: &'a [&'a Func],
    /// Functions being called (no recursion).
    active: Vec<usize>,
    /// See [`Run::prefix`].
    prefix: Option<usize>,
}

/// Where a script takes its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The parameter holding the token (1-based).
    pub token: usize,
    /// False: parameters are `ARGV`. True: the script works on `KEYS[1]` and takes its
    /// parameters from `KEYS[2]`, `KEYS[3]`, ... (warlock's `parityRelock`); parameter `j` is
    /// then `KEYS[j + 1]`, shown as `ARGV[j]`.
    pub keys_as_args: bool,
    /// The `ARGV` index of the hash field that names the caller in a hash lock (Redisson's
    /// `<uuid>:<threadId>`), 0 for scripts without one. Only then are hash commands modelled.
    pub field: usize,
    /// True when each key has its own field: `KEYS[i]`'s is `ARGV[field + i - 1]` (Redisson's
    /// multi-lock renewal).
    pub field_per_key: bool,
    /// 0: `ARGV` holds as many arguments as the script reads, and spreading it into a command
    /// (`unpack(ARGV)`) is not followed. `m`: the run stands for a call with exactly `m`
    /// arguments, `unpack(ARGV)` spreads `ARGV[1]` to `ARGV[m]` and `ARGV[j]` past `m` is nil
    /// (see [`crate::lockop::LockScript::argv_count`]).
    pub argv_count: usize,
    /// True: the run stands for a call with exactly as many keys as it was given, so `#KEYS`
    /// is that number (a script testing it: see [`crate::lockop::LockScript::keys_count`]);
    /// false: `#KEYS` is the symbolic count of an unrolled loop over every key.
    pub keys_exact: bool,
    /// True: a comparison of another client's value with a string literal forks the run (see
    /// [`HOLDS`]) where it would stop it (a constant written as the lock's value, compared
    /// with itself).
    pub literal_forks: bool,
}

impl Layout {
    /// The plain layout: parameters in `ARGV`, the token in `ARGV[token]`, no hash field, as
    /// many arguments as the script reads, no literal forks.
    pub fn argv(token: usize) -> Layout {
        Layout {
            token,
            keys_as_args: false,
            field: 0,
            field_per_key: false,
            argv_count: 0,
            keys_exact: false,
            literal_forks: false,
        }
    }

    /// A hash lock's layout: parameters in `ARGV`, the caller's field in `ARGV[field]` (with
    /// `per_key`, one field per key from there).
    pub fn hash(field: usize, per_key: bool) -> Layout {
        Layout {
            field,
            field_per_key: per_key,
            ..Layout::argv(0)
        }
    }
}

/// Runs `block` from every combination of starting states of `n` keys; `Err` with the reason
/// when some run cannot be decided.
pub fn explore(block: &Block, n: usize, layout: Layout) -> Result<Vec<Run>, String> {
    let combos = STARTS.len().pow(n as u32);
    let mut runs = Vec::new();
    let mut total = Spent::default();
    for c in 0..combos {
        let start: Vec<Start> = (0..n)
            .map(|i| STARTS[(c / STARTS.len().pow(i as u32)) % STARTS.len()])
            .collect();
        let keys = start
            .iter()
            .enumerate()
            .map(|(i, s)| KeyNow::start(i + 1, *s, layout.token))
            .collect();
        runs_from(block, layout, keys, &start, &mut total, &mut runs)?;
    }
    Ok(runs)
}

/// Runs `block` from each of the given starting states of its keys (hash locks, whose states
/// [`STARTS`] does not describe). Each run's `start` is empty; runs come in the order of
/// `starts`, with `state` telling which one each run began from.
pub fn explore_states(
    block: &Block,
    layout: Layout,
    starts: &[Vec<KeyNow>],
) -> Result<Vec<(usize, Run)>, String> {
    let mut out = Vec::new();
    let mut total = Spent::default();
    for (k, keys) in starts.iter().enumerate() {
        let mut runs = Vec::new();
        runs_from(block, layout, keys.clone(), &[], &mut total, &mut runs)?;
        out.extend(runs.into_iter().map(|r| (k, r)));
    }
    Ok(out)
}

/// What the runs of one script have used so far.
#[derive(Default)]
struct Spent {
    runs: usize,
    steps: usize,
}

/// Every run from one starting state, forking on argument comparisons.
fn runs_from(
    block: &Block,
    layout: Layout,
    keys: Vec<KeyNow>,
    start: &[Start],
    total: &mut Spent,
    runs: &mut Vec<Run>,
) -> Result<(), String> {
    let mut funcs = Vec::new();
    functions(block, &mut funcs);
    let mut work: Vec<Vec<Assumption>> = vec![Vec::new()];
    while let Some(assumed) = work.pop() {
        total.runs += 1;
        if total.runs > MAX_RUNS {
            return Err("too many cases to analyse".into());
        }
        let mut m = Machine::new(layout, keys.clone(), &assumed, &funcs);
        m.limit = MAX_STEPS.min(MAX_TOTAL_STEPS - total.steps);
        let flow = m.block(block);
        total.steps += m.steps.min(m.limit);
        match flow {
            Ok(flow) => {
                let reply = match flow {
                    Flow::Return(v) => to_reply(v),
                    _ => Val::Nil,
                };
                runs.push(Run {
                    layout,
                    start: start.to_vec(),
                    assumed: assumed.clone(),
                    calls: m.calls,
                    foreign: m.foreign,
                    end: m.keys,
                    reply,
                    prefix: m.prefix,
                });
            }
            Err(Stop::Fork(j, s)) => {
                for yes in [false, true] {
                    let mut a = assumed.clone();
                    a.push((j, s.clone(), yes));
                    work.push(a);
                }
            }
            Err(Stop::Found(_)) => return Err("looking for a field".into()),
            Err(Stop::Fail(why)) => {
                let from: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                return Err(format!("{why} (keys: {})", from.join("; ")));
            }
        }
    }
    Ok(())
}

/// Lua to Redis reply conversion.
fn to_reply(v: Val) -> Val {
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

fn truthy(v: &Val) -> R<bool> {
    match v {
        Val::Nil | Val::Bool(false) => Ok(false),
        Val::Opaque => fail("tests the result of a command it does not model"),
        _ => Ok(true),
    }
}

/// Lua's type of a value, for `==` across types (always false).
fn kind(v: &Val) -> u8 {
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
fn numeric(v: Val) -> R<Val> {
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

fn term_rank(v: &Val) -> (u8, i64) {
    match v {
        Val::Arg(j) => (0, *j as i64),
        Val::Pttl(i) => (1, *i as i64),
        Val::Ttl(i) => (2, *i as i64),
        Val::Num(n) => (3, *n),
        _ => (4, 0),
    }
}

impl<'a> Machine<'a> {
    /// A machine at the start of one run from `keys`, under the argument facts `assumed`.
    fn new(
        layout: Layout,
        keys: Vec<KeyNow>,
        assumed: &'a [Assumption],
        funcs: &'a [&'a Func],
    ) -> Machine<'a> {
        Machine {
            layout,
            keys,
            locals: Vec::new(),
            assumed,
            calls: Vec::new(),
            foreign: false,
            steps: 0,
            limit: MAX_STEPS,
            funcs,
            active: Vec::new(),
            prefix: None,
        }
    }
}

impl Machine<'_> {
    fn step(&mut self) -> R<()> {
        self.steps += 1;
        if self.steps > self.limit {
            return fail("runs too long to analyse");
        }
        Ok(())
    }

    fn set_local(&mut self, id: usize, v: Val) {
        if self.locals.len() <= id {
            self.locals.resize(id + 1, Val::Nil);
        }
        self.locals[id] = v;
    }

    fn block(&mut self, b: &Block) -> R<Flow> {
        for s in b {
            match self.stat(s)? {
                Flow::Normal => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Normal)
    }

    fn stat(&mut self, s: &Stat) -> R<Flow> {
        self.step()?;
        match s {
            Stat::Local(ids, exprs) => {
                self.no_table_alias(exprs)?;
                let vals = self.spread(exprs, ids.len())?;
                for (k, id) in ids.iter().enumerate() {
                    self.set_local(*id, vals.get(k).cloned().unwrap_or(Val::Nil));
                }
            }
            Stat::Assign(targets, exprs) => {
                self.no_table_alias(exprs)?;
                let vals = self.exprs(exprs)?;
                for (k, t) in targets.iter().enumerate() {
                    match t {
                        Expr::Local(id) => {
                            self.set_local(*id, vals.get(k).cloned().unwrap_or(Val::Nil))
                        }
                        // Redis runs scripts with their globals read-only: such a script fails
                        // on every call ("Attempt to modify a readonly table" on Redis 7).
                        Expr::Global(g) => {
                            return fail(format!(
                                "assigns to the global {g}, which Redis refuses when the script runs"
                            ));
                        }
                        _ => return fail("assigns to a table"),
                    }
                }
            }
            Stat::Call(e) => {
                self.expr(e)?;
            }
            Stat::Do(b) => return self.block(b),
            Stat::If(arms, otherwise) => {
                for (cond, body) in arms {
                    let c = self.expr(cond)?;
                    if truthy(&c)? {
                        return self.block(body);
                    }
                }
                if let Some(body) = otherwise {
                    return self.block(body);
                }
            }
            Stat::NumFor(var, start, stop, step, body) => {
                let (a, z) = (self.expr(start)?, self.expr(stop)?);
                let counted = matches!(a, Val::Count(_)) || matches!(z, Val::Count(_));
                let (Val::Num(a) | Val::Count(a), Val::Num(z) | Val::Count(z)) = (a, z) else {
                    return fail("a numeric for without known bounds");
                };
                let step = match step {
                    None => 1,
                    Some(e) => match self.expr(e)? {
                        Val::Num(s) if s != 0 => s,
                        _ => return fail("a numeric for without a known step"),
                    },
                };
                let count = if step > 0 {
                    (z - a) / step + 1
                } else {
                    (a - z) / -step + 1
                };
                if count > MAX_FOR {
                    return fail("a numeric for with too many iterations");
                }
                for k in 0..count.max(0) {
                    let i = a + k * step;
                    self.set_local(*var, if counted { Val::Count(i) } else { Val::Num(i) });
                    match self.block(body)? {
                        Flow::Normal => {}
                        Flow::Break => break,
                        flow => return Ok(flow),
                    }
                }
            }
            Stat::GenFor(vars, exprs, body) => {
                let mut counted = false;
                let items: Vec<Val> = match exprs.as_slice() {
                    [Expr::Call(f, args)] if args.len() == 1 => {
                        let pairs = match self.expr(f)? {
                            Val::Ipairs => false,
                            Val::Pairs => true,
                            _ => return fail("a generic for other than ipairs or pairs"),
                        };
                        match self.expr(&args[0])? {
                            Val::Table(t) if pairs && t.contains(&Val::Nil) => {
                                return fail("pairs over a table with holes");
                            }
                            Val::Keys => {
                                counted = true;
                                (1..=self.keys.len()).map(Val::Key).collect()
                            }
                            Val::Table(t) => t.into_iter().take_while(|v| *v != Val::Nil).collect(),
                            _ => return fail("ipairs over something other than KEYS"),
                        }
                    }
                    _ => return fail("a generic for other than ipairs"),
                };
                for (k, item) in items.into_iter().enumerate() {
                    if let Some(id) = vars.first() {
                        let i = k as i64 + 1;
                        self.set_local(*id, if counted { Val::Count(i) } else { Val::Num(i) });
                    }
                    if let Some(id) = vars.get(1) {
                        self.set_local(*id, item);
                    }
                    match self.block(body)? {
                        Flow::Normal => {}
                        Flow::Break => break,
                        flow => return Ok(flow),
                    }
                }
            }
            Stat::While(..) | Stat::Repeat(..) => return fail("a loop without a known bound"),
            Stat::Function(Expr::Local(id), f) => {
                let Some(k) = self.funcs.iter().position(|g| std::ptr::eq(*g, &**f)) else {
                    return fail("a function it did not find");
                };
                self.set_local(*id, Val::Func(k));
            }
            Stat::Function(..) => return fail("defines a function"),
            Stat::Return(exprs) => {
                let mut vals = self.exprs(exprs)?;
                return Ok(Flow::Return(if vals.is_empty() {
                    Val::Nil
                } else {
                    vals.swap_remove(0)
                }));
            }
            Stat::Break => return Ok(Flow::Break),
        }
        Ok(Flow::Normal)
    }

    fn exprs(&mut self, es: &[Expr]) -> R<Vec<Val>> {
        es.iter().map(|e| self.expr(e)).collect()
    }

    /// The values of `local a, b, c = ...`: as [`Machine::exprs`], but a last `unpack(ARGV)` or
    /// `unpack(KEYS)` gives as many items as there are names left (`local token, ttl =
    /// unpack(ARGV)`).
    fn spread(&mut self, es: &[Expr], names: usize) -> R<Vec<Val>> {
        let Some((last, first)) = es.split_last() else {
            return Ok(Vec::new());
        };
        if let Expr::Call(f, a) = last
            && !is_redis_call(f)
            && let [t] = a.as_slice()
            && self.expr(f)? == Val::Lib(Lib::Unpack)
        {
            let mut out = self.exprs(first)?;
            let from = out.len();
            match self.expr(t)? {
                Val::Argv if !self.layout.keys_as_args => {
                    let m = self.layout.argv_count;
                    out.extend((1..=names.saturating_sub(from)).map(|j| {
                        if m > 0 && j > m {
                            Val::Nil
                        } else {
                            Val::Arg(j)
                        }
                    }));
                }
                Val::Keys if !self.layout.keys_as_args => {
                    let n = self.keys.len();
                    out.extend(
                        (1..=names.saturating_sub(from))
                            .map(|i| if i <= n { Val::Key(i) } else { Val::Nil }),
                    );
                }
                v => return fail(format!("unpack of {v}")),
            }
            return Ok(out);
        }
        self.exprs(es)
    }

    fn expr(&mut self, e: &Expr) -> R<Val> {
        self.step()?;
        Ok(match e {
            Expr::Nil => Val::Nil,
            Expr::True => Val::Bool(true),
            Expr::False => Val::Bool(false),
            Expr::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => Val::Num(*n as i64),
            Expr::Num(_) => return fail("a non-integer number"),
            Expr::Str(s) => Val::Str(s.clone()),
            Expr::Local(id) => self.locals.get(*id).cloned().unwrap_or(Val::Nil),
            Expr::Global(g) => match g.as_str() {
                "KEYS" => Val::Keys,
                "ARGV" => Val::Argv,
                "redis" => Val::Redis,
                "ipairs" => Val::Ipairs,
                "pairs" => Val::Pairs,
                "tonumber" => Val::ToNumber,
                "tostring" => Val::ToString,
                "unpack" => Val::Lib(Lib::Unpack),
                "table" => Val::Lib(Lib::Table),
                "string" => Val::Lib(Lib::String),
                "type" => Val::Lib(Lib::Type),
                "math" => Val::Lib(Lib::Math),
                _ => return fail(format!("uses the global {g}")),
            },
            Expr::Index(t, k) => {
                let t = self.expr(t)?;
                let k = match self.expr(k)? {
                    Val::Count(i) => Val::Num(i),
                    k => k,
                };
                match (t, k) {
                    (Val::Keys, Val::Num(i))
                        if self.layout.keys_as_args
                            && i >= 2
                            && (i as usize) <= crate::lockop::ARGV_AFTER_KEYS =>
                    {
                        Val::Arg(i as usize - 1)
                    }
                    // ARGV numbered after the parameters in KEYS (see `ARGV_AFTER_KEYS`).
                    (Val::Argv, Val::Num(j)) if self.layout.keys_as_args && j >= 1 => {
                        Val::Arg(crate::lockop::ARGV_AFTER_KEYS + j as usize)
                    }
                    (Val::Argv, _) if self.layout.keys_as_args => {
                        return fail("uses ARGV as well as parameters in KEYS");
                    }
                    (Val::Keys, Val::Num(i)) if i >= 1 && (i as usize) <= self.keys.len() => {
                        Val::Key(i as usize)
                    }
                    (Val::Keys, Val::Num(_)) => Val::Nil,
                    (Val::Argv, Val::Num(j))
                        if self.layout.argv_count > 0 && j as usize > self.layout.argv_count =>
                    {
                        Val::Nil
                    }
                    (Val::Argv, Val::Num(j)) if j >= 1 => Val::Arg(j as usize),
                    (Val::Redis, Val::Str(s)) if s == b"call" || s == b"pcall" => Val::Call,
                    (Val::Redis, Val::Str(s)) if log_level(&s).is_some() => {
                        Val::Num(log_level(&s).unwrap_or_default())
                    }
                    (t, Val::Str(s)) if library(&t, &s).is_some() => {
                        library(&t, &s).map_or(Val::Nil, Val::Lib)
                    }
                    (Val::Table(items), Val::Num(i)) if i >= 1 => {
                        items.get(i as usize - 1).cloned().unwrap_or(Val::Nil)
                    }
                    // A status reply is the table `{ok = 'OK'}`; an array reply has neither
                    // field (`if r.err then ...` after `redis.pcall`).
                    (Val::Status, Val::Str(f)) if f == b"ok" => Val::Str(b"OK".to_vec()),
                    (Val::KeyType(t), Val::Str(f)) if f == b"ok" => Val::Str(t.to_vec()),
                    (Val::Status | Val::KeyType(_) | Val::Table(_), Val::Str(f))
                        if f == b"ok" || f == b"err" =>
                    {
                        Val::Nil
                    }
                    (t, k) => return fail(format!("indexes {t} with {k}")),
                }
            }
            Expr::Call(f, args) => {
                if is_table_insert(f) {
                    return self.table_insert(args);
                }
                if is_redis_call(f) {
                    let args = self.call_args(args)?;
                    return self.redis(args);
                }
                let f = self.expr(f)?;
                if let Val::Func(_) | Val::Lib(_) = f {
                    return self.call_lib(f, args);
                }
                let mut args = self.exprs(args)?;
                let arg = if args.is_empty() {
                    Val::Nil
                } else {
                    args.swap_remove(0)
                };
                match f {
                    Val::Call => {
                        let mut all = vec![arg];
                        all.extend(args);
                        return self.redis(all);
                    }
                    Val::ToNumber => match arg {
                        Val::Arg(j) => Val::NumArg(j),
                        Val::Str(_) => numeric(arg)?,
                        v @ (Val::Num(_)
                        | Val::NumArg(_)
                        | Val::Pttl(_)
                        | Val::Ttl(_)
                        | Val::Sum(_)) => v,
                        Val::Nil | Val::Bool(_) | Val::Table(_) | Val::Status => Val::Nil,
                        // A hash lock's unlock latch: the number an earlier unlock stored.
                        Val::Other(i) if self.layout.field != 0 => Val::Other(i),
                        v => return fail(format!("tonumber of {v}")),
                    },
                    Val::ToString => match arg {
                        Val::NumArg(j) => Val::Arg(j),
                        Val::Bool(b) => Val::Str(b.to_string().into_bytes()),
                        Val::Nil => Val::Str(b"nil".to_vec()),
                        Val::Status | Val::Table(_) => Val::Addr,
                        Val::Num(n) => Val::Str(n.to_string().into_bytes()),
                        v @ (Val::Arg(_) | Val::Str(_) | Val::Other(_)) => v,
                        v => return fail(format!("tostring of {v}")),
                    },
                    f => return fail(format!("calls {f}")),
                }
            }
            Expr::Table(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (k, v) in items {
                    if k.is_some() {
                        return fail("a table with keys");
                    }
                    out.push(self.expr(v)?);
                }
                Val::Table(out)
            }
            Expr::Bin(op, a, b) => return self.binary(*op, a, b),
            Expr::Un(op, a) => {
                let v = self.expr(a)?;
                match (op, v) {
                    (Un::Not, v) => Val::Bool(!truthy(&v)?),
                    (Un::Neg, Val::Num(n)) => Val::Num(n.checked_neg().ok_or_else(overflow)?),
                    (Un::Len, Val::Keys) if self.layout.keys_exact => {
                        Val::Num(self.keys.len() as i64)
                    }
                    (Un::Len, Val::Keys) => Val::Count(self.keys.len() as i64),
                    // `#ARGV` in a run that stands for a call with exactly `m` arguments
                    // (`if #ARGV < 2 then return redis.error_reply(...) end`).
                    (Un::Len, Val::Argv)
                        if self.layout.argv_count > 0 && !self.layout.keys_as_args =>
                    {
                        Val::Num(self.layout.argv_count as i64)
                    }
                    (Un::Len, Val::Table(t)) => {
                        Val::Num(t.iter().take_while(|v| **v != Val::Nil).count() as i64)
                    }
                    (Un::Len, Val::Str(s)) => Val::Num(s.len() as i64),
                    (op, v) => return fail(format!("{op:?} of {v}")),
                }
            }
            Expr::Vararg | Expr::Method(..) | Expr::Function(_) => {
                return fail("a vararg, method or function");
            }
        })
    }

    fn binary(&mut self, op: Bin, a: &Expr, b: &Expr) -> R<Val> {
        match op {
            Bin::And => {
                let l = self.expr(a)?;
                return if truthy(&l)? { self.expr(b) } else { Ok(l) };
            }
            Bin::Or => {
                let l = self.expr(a)?;
                return if truthy(&l)? { Ok(l) } else { self.expr(b) };
            }
            _ => {}
        }
        let l = self.expr(a)?;
        let r = self.expr(b)?;
        if matches!(op, Bin::Eq | Bin::Ne)
            && (matches!(l, Val::Head(..)) || matches!(r, Val::Head(..)))
        {
            return Ok(Val::Bool(self.head_eq(&l, &r)? == (op == Bin::Eq)));
        }
        if op == Bin::Concat {
            // A name built from a key's: followed until it is used (as a key, it is refused).
            return match (&l, &r) {
                (Val::Key(i) | Val::Built(i), _) | (_, Val::Key(i) | Val::Built(i)) => {
                    Ok(Val::Built(*i))
                }
                (
                    Val::Str(_) | Val::Arg(_) | Val::NumArg(_) | Val::Num(_) | Val::Joined,
                    Val::Str(_) | Val::Arg(_) | Val::NumArg(_) | Val::Num(_) | Val::Joined,
                ) => Ok(Val::Joined),
                _ => fail("the operator Concat"),
            };
        }
        if let Some(test) = numeric_test(op, &l, &r) {
            let (j, pred, yes) = test?;
            return Ok(Val::Bool(self.assume(j, &pred)? == yes));
        }
        if let (Val::Pttl(x), Val::Pttl(y)) = (&l, &r)
            && x != y
            && matches!(op, Bin::Lt | Bin::Gt)
        {
            // Which of two keys expires first: forked on, like `ARGV[j] == literal`.
            let (a, b) = if op == Bin::Lt { (*x, *y) } else { (*y, *x) };
            return Ok(Val::Bool(self.assume(ORDER, &order(a, b))?));
        }
        Ok(match op {
            Bin::Eq => Val::Bool(self.eq(&l, &r)?),
            Bin::Ne => Val::Bool(!self.eq(&l, &r)?),
            Bin::Lt => Val::Bool(less(&l, &r, false)?),
            Bin::Le => Val::Bool(less(&l, &r, true)?),
            Bin::Gt => Val::Bool(less(&r, &l, false)?),
            Bin::Ge => Val::Bool(less(&r, &l, true)?),
            Bin::Add => add(l, r)?,
            // A bound that follows the keys (`for j = 1, i - 1` over the keys before `KEYS[i]`).
            Bin::Sub if matches!((&l, &r), (Val::Count(_), Val::Num(_))) => {
                let (Val::Count(a), Val::Num(b)) = (l, r) else {
                    return fail("subtracts unknown numbers");
                };
                Val::Count(a.checked_sub(b).ok_or_else(overflow)?)
            }
            Bin::Sub => match (numeric(l)?, numeric(r)?) {
                (Val::Num(x), Val::Num(y)) => Val::Num(x.checked_sub(y).ok_or_else(overflow)?),
                (l, Val::Num(y)) => add(l, Val::Num(y.checked_neg().ok_or_else(overflow)?))?,
                _ => return fail("subtracts unknown numbers"),
            },
            Bin::Mul => match (numeric(l)?, numeric(r)?) {
                (Val::Num(x), Val::Num(y)) => Val::Num(x.checked_mul(y).ok_or_else(overflow)?),
                (Val::Arg(j), Val::Num(1000)) | (Val::Num(1000), Val::Arg(j)) => Val::Thousand(j),
                _ => return fail("multiplies unknown numbers"),
            },
            _ => return fail(format!("the operator {op:?}")),
        })
    }

    fn assume(&self, j: usize, s: &[u8]) -> R<bool> {
        for (aj, as_, yes) in self.assumed {
            if *aj == j && as_ == s {
                return Ok(*yes);
            }
            // One value equals at most one literal (numeric tests are forked on freely).
            if *aj == j && *yes && predicate(as_).is_none() && predicate(s).is_none() {
                return Ok(false);
            }
        }
        Err(Stop::Fork(j, s.to_vec()))
    }

    fn eq(&self, a: &Val, b: &Val) -> R<bool> {
        use Val::*;
        if kind(a) != kind(b) {
            if kind(a) >= 5 || kind(b) >= 5 {
                return fail("compares the result of a command it does not model");
            }
            return Ok(false);
        }
        Ok(match (a, b) {
            (Nil, Nil) => true,
            (Bool(x), Bool(y)) => x == y,
            (Num(x), Num(y)) => x == y,
            (Str(x), Str(y)) => x == y,
            (Status, Status) => true,
            (Arg(i), Arg(j)) | (NumArg(i), NumArg(j)) | (Other(i), Other(j)) if i == j => true,
            (Arg(j), Str(s)) | (Str(s), Arg(j)) => self.assume(*j, s)?,
            (Other(_), Arg(t)) | (Arg(t), Other(_)) if *t == self.layout.token => false,
            (Other(_), Str(s)) | (Str(s), Other(_)) if self.layout.literal_forks => {
                self.assume(HOLDS, s)?
            }
            (Addr, Str(s)) | (Str(s), Addr) if !s.starts_with(b"table: ") => false,
            (Pttl(_), Num(n)) | (Num(n), Pttl(_)) if *n <= 0 => false,
            (Ttl(_), Num(n)) | (Num(n), Ttl(_)) if *n < 0 => false,
            (Many(k), Num(n)) | (Num(n), Many(k)) if *n < 2 + k => false,
            _ => return fail(format!("cannot decide {a} == {b}")),
        })
    }

    /// Executes one `redis.call`.
    fn redis(&mut self, args: Vec<Val>) -> R<Val> {
        // Redisson names its publish command in an argument (`PUBLISH` or `SPUBLISH`): modelled
        // as a publish, which the proxy accepts only after checking the argument at run time.
        if let Some(Val::Arg(j)) = args.first() {
            return self.publish(Val::Arg(*j), &args[1..]);
        }
        let Some(Val::Str(cmd)) = args.first() else {
            return fail("a command name that is not a literal");
        };
        if cmd.eq_ignore_ascii_case(b"publish") || cmd.eq_ignore_ascii_case(b"spublish") {
            return self.publish(Val::Str(cmd.to_ascii_lowercase()), &args[1..]);
        }
        if self.layout.field != 0 && cmd.first().is_some_and(|c| c.eq_ignore_ascii_case(&b'h')) {
            return self.hash(cmd.to_ascii_lowercase(), &args[1..]);
        }
        let mut cmd = cmd.to_ascii_lowercase();
        if cmd == b"unlink" {
            cmd = b"del".to_vec();
        }
        let rest: Vec<Val> = args[1..].to_vec();
        if rest
            .iter()
            .any(|a| matches!(a, Val::Nil | Val::Bool(_) | Val::Table(_)))
        {
            return fail("a command argument that Redis refuses");
        }
        if let Some(Val::Built(i)) = rest.first() {
            return fail(format!(
                "touches a key not given in KEYS (a name built from KEYS[{i}])"
            ));
        }
        self.calls.push((cmd.clone(), rest.clone()));
        let key = |v: &Val| match v {
            Val::Key(i) => Ok(*i - 1),
            Val::Built(i) => fail(format!(
                "touches a key not given in KEYS (a name built from KEYS[{i}])"
            )),
            v => fail(format!("touches a key not given in KEYS ({v})")),
        };
        let ttl_value = |v: &Val| -> R<Val> {
            match v {
                Val::Arg(_) | Val::NumArg(_) | Val::Sum(_) | Val::Num(_) => numeric(v.clone()),
                v => fail(format!("a TTL of {v}")),
            }
        };
        // A TTL in milliseconds or seconds; `ARGV[j] * 1000` milliseconds is `ARGV[j]` seconds.
        let ttl_set = |seconds: bool, v: &Val| -> R<TtlNow> {
            Ok(match v {
                Val::Thousand(j) if !seconds => TtlNow::Set {
                    seconds: true,
                    v: Val::Arg(*j),
                },
                v => TtlNow::Set {
                    seconds,
                    v: ttl_value(v)?,
                },
            })
        };
        Ok(match (cmd.as_slice(), rest.as_slice()) {
            (b"get", [k]) => match &self.keys[key(k)?].value {
                Some(Val::Table(_)) => return fail("reads a list as a string"),
                Some(Val::Hash { .. }) => return fail("reads a hash as a string"),
                v => v.clone().unwrap_or(Val::Bool(false)),
            },
            (b"lpush", [k, items @ ..]) if !items.is_empty() => {
                let i = key(k)?;
                let mut list: Vec<Val> = Vec::with_capacity(items.len());
                for v in items.iter().rev() {
                    match v {
                        Val::Str(_) | Val::Num(_) | Val::Arg(_) => list.push(v.clone()),
                        v => return fail(format!("pushes {v}")),
                    }
                }
                match &self.keys[i].value {
                    None => {}
                    Some(Val::Table(old)) => list.extend(old.iter().cloned()),
                    Some(_) => return fail("pushes onto a string"),
                }
                let len = list.len() as i64;
                self.keys[i].value = Some(Val::Table(list));
                Val::Num(len)
            }
            (b"exists", ks) if !ks.is_empty() => {
                let mut n = 0;
                for k in ks {
                    n += i64::from(self.keys[key(k)?].value.is_some());
                }
                Val::Num(n)
            }
            // The lock's keys are strings, hashes (a hash lock) or lists (a signal list).
            (b"type", [k]) => Val::KeyType(match &self.keys[key(k)?].value {
                None => b"none",
                Some(Val::Table(_)) => b"list",
                Some(Val::Hash { .. }) => b"hash",
                Some(_) => b"string",
            }),
            (b"pttl" | b"ttl", [k]) => {
                let i = key(k)?;
                let now = &self.keys[i];
                match (&now.value, &now.ttl) {
                    (None, _) => Val::Num(-2),
                    (_, TtlNow::None) => Val::Num(-1),
                    (_, TtlNow::Orig) if cmd == b"pttl" => Val::Pttl(i + 1),
                    (_, TtlNow::Orig) => Val::Ttl(i + 1),
                    _ => return fail("reads back a TTL it set"),
                }
            }
            (b"del", ks) if !ks.is_empty() => {
                let mut n = 0;
                for k in ks {
                    let i = key(k)?;
                    n += i64::from(self.keys[i].value.is_some());
                    self.keys[i] = KeyNow {
                        value: None,
                        ttl: TtlNow::None,
                    };
                }
                Val::Num(n)
            }
            (b"set", [k, v, opts @ ..]) => {
                let i = key(k)?;
                let value = match v {
                    Val::NumArg(j) => Val::Arg(*j),
                    v @ (Val::Arg(_) | Val::Str(_) | Val::Num(_)) => v.clone(),
                    v => return fail(format!("sets a key to {v}")),
                };
                let (mut nx, mut xx, mut keep, mut ttl) = (false, false, false, None);
                // `GET` (Redis 6.2, with `NX` from 7.0): the reply is the old value (nil for
                // none), whether or not the write happened.
                let mut get = false;
                let mut o = 0;
                while o < opts.len() {
                    let Val::Str(name) = &opts[o] else {
                        return fail("a SET option that is not a literal");
                    };
                    match name.to_ascii_lowercase().as_slice() {
                        b"nx" => nx = true,
                        b"xx" => xx = true,
                        b"keepttl" => keep = true,
                        b"get" => get = true,
                        unit @ (b"px" | b"ex") if o + 1 < opts.len() => {
                            ttl = Some(ttl_set(unit == b"ex", &opts[o + 1])?);
                            o += 1;
                        }
                        _ => return fail("a SET option it does not model"),
                    }
                    o += 1;
                }
                let exists = self.keys[i].value.is_some();
                let old = match &self.keys[i].value {
                    Some(Val::Table(_) | Val::Hash { .. }) if get => {
                        return fail("SET ... GET on a key of another type");
                    }
                    v => v.clone().unwrap_or(Val::Bool(false)),
                };
                if (nx && exists) || (xx && !exists) {
                    if get { old } else { Val::Bool(false) }
                } else {
                    let ttl = match ttl {
                        Some(t) => t,
                        None if keep && exists => self.keys[i].ttl.clone(),
                        None => TtlNow::None,
                    };
                    self.keys[i] = KeyNow {
                        value: Some(value),
                        ttl,
                    };
                    if get { old } else { Val::Status }
                }
            }
            (b"setex" | b"psetex", [k, t, v]) => {
                let i = key(k)?;
                let value = match v {
                    v @ (Val::Arg(_) | Val::Str(_) | Val::Num(_)) => v.clone(),
                    v => return fail(format!("sets a key to {v}")),
                };
                self.keys[i] = KeyNow {
                    value: Some(value),
                    ttl: ttl_set(cmd == b"setex", t)?,
                };
                Val::Status
            }
            // A hash lock's token counter (Redisson's `RFencedLock`): only modelled there.
            (b"incr", [k]) if self.layout.field != 0 => {
                let i = key(k)?;
                let now = match &self.keys[i].value {
                    None => Val::Num(1),
                    Some(v @ (Val::Num(_) | Val::Many(_))) => add(v.clone(), Val::Num(1))?,
                    Some(v) => return fail(format!("increments {v}")),
                };
                self.keys[i].value = Some(now.clone());
                now
            }
            (b"mget", ks) if !ks.is_empty() => {
                let mut out = Vec::with_capacity(ks.len());
                for k in ks {
                    match &self.keys[key(k)?].value {
                        Some(Val::Table(_)) => return fail("reads a list as a string"),
                        v => out.push(v.clone().unwrap_or(Val::Bool(false))),
                    }
                }
                Val::Table(out)
            }
            (b"msetnx" | b"mset", pairs) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
                let mut writes = Vec::with_capacity(pairs.len() / 2);
                for kv in pairs.chunks(2) {
                    writes.push((key(&kv[0])?, string_value(&kv[1])?));
                }
                if cmd == b"msetnx" && writes.iter().any(|(i, _)| self.keys[*i].value.is_some()) {
                    Val::Num(0)
                } else {
                    for (i, value) in writes {
                        self.keys[i] = KeyNow {
                            value: Some(value),
                            ttl: TtlNow::None,
                        };
                    }
                    if cmd == b"msetnx" {
                        Val::Num(1)
                    } else {
                        Val::Status
                    }
                }
            }
            (b"setnx", [k, v]) => {
                let i = key(k)?;
                let value = string_value(v)?;
                if self.keys[i].value.is_some() {
                    Val::Num(0)
                } else {
                    self.keys[i] = KeyNow {
                        value: Some(value),
                        ttl: TtlNow::None,
                    };
                    Val::Num(1)
                }
            }
            (b"getrange", [k, Val::Num(0), Val::Sum(end)]) => {
                let i = key(k)?;
                let [Val::Arg(j), Val::Num(-1)] = end.as_slice() else {
                    return fail("a GETRANGE it does not model");
                };
                match &self.keys[i].value {
                    None => Val::Head(Box::new(Val::Str(Vec::new())), *j),
                    Some(v @ (Val::Arg(_) | Val::Other(_) | Val::Str(_))) => {
                        Val::Head(Box::new(v.clone()), *j)
                    }
                    Some(v) => return fail(format!("GETRANGE of {v}")),
                }
            }
            (b"pexpire" | b"expire", [k, t, flag @ ..]) if flag.len() <= 1 => {
                let i = key(k)?;
                let ttl = ttl_set(cmd == b"expire", t)?;
                let sets = match flag {
                    [] => true,
                    [Val::Str(f)] => expire_flag(f, &self.keys[i].ttl, &ttl)?,
                    _ => return fail("an EXPIRE option that is not a literal"),
                };
                if self.keys[i].value.is_none() || !sets {
                    Val::Num(0)
                } else {
                    self.keys[i].ttl = ttl;
                    Val::Num(1)
                }
            }
            // A hash lock touches nothing else: stop at once.
            _ if self.layout.field != 0 => return fail("a command a hash lock does not use"),
            _ => {
                self.foreign = true;
                Val::Opaque
            }
        })
    }
}

/// Whether `EXPIRE`/`PEXPIRE` with option `flag` (Redis 7.0: `NX`, `XX`, `GT`, `LT`) sets the
/// TTL `new` on a key whose TTL is `now`. `NX` and `XX` depend only on whether the key has a
/// TTL. `GT` and `LT` compare with the time the key has left: decided for a key without a TTL
/// (counted as infinite) and for one this script set to the same value, refused otherwise,
/// since each master counts the time left on its own clock.
fn expire_flag(flag: &[u8], now: &TtlNow, new: &TtlNow) -> R<bool> {
    let flag = flag.to_ascii_lowercase();
    Ok(match (flag.as_slice(), now) {
        (b"nx", now) => *now == TtlNow::None,
        (b"xx", now) => *now != TtlNow::None,
        (b"gt", TtlNow::None) => false,
        (b"lt", TtlNow::None) => true,
        (b"gt" | b"lt", now) if now == new => false,
        (b"gt" | b"lt", _) => {
            let f = String::from_utf8_lossy(&flag).to_uppercase();
            return fail(format!(
                "it sets the expiry with {f}, which acts only where the new TTL is {} the time \
                 left, each master's own: no one answer across the masters",
                if f == "GT" { "more than" } else { "less than" }
            ));
        }
        _ => return fail("an EXPIRE option Redis refuses"),
    })
}

/// `table.insert`.
fn is_table_insert(f: &Expr) -> bool {
    matches!(f, Expr::Index(t, name)
        if matches!(&**t, Expr::Global(g) if g == "table")
        && matches!(&**name, Expr::Str(s) if s == b"insert"))
}

impl Machine<'_> {
    /// `table.insert(t, v)` appending a value to a table held in a local (a reply being built).
    fn table_insert(&mut self, args: &[Expr]) -> R<Val> {
        let [Expr::Local(id), v] = args else {
            return fail("table.insert other than appending to a local table");
        };
        let v = self.expr(v)?;
        if matches!(v, Val::Nil) {
            return fail("table.insert of nil");
        }
        // Locals hold copies here, while Lua tables are shared: a table is appended to only
        // when no other local (and no table) could be another name for it.
        let aliased = self.locals.iter().enumerate().any(|(k, l)| match l {
            Val::Table(items) => k != *id || items.iter().any(|i| matches!(i, Val::Table(_))),
            _ => false,
        });
        if aliased || matches!(v, Val::Table(_)) {
            return fail("table.insert into a table that may have another name");
        }
        match self.locals.get_mut(*id) {
            Some(Val::Table(items)) if !items.contains(&Val::Nil) => items.push(v),
            _ => return fail("table.insert into something other than a table"),
        }
        Ok(Val::Nil)
    }

    /// `PUBLISH channel message`, the command taken from `command` (a literal or an argument).
    /// Recorded as a call `publish command channel message`; the channel must be a key name or
    /// an argument, and the message an argument, a literal or a key's name. The reply (receivers) is not modelled.
    fn publish(&mut self, command: Val, rest: &[Val]) -> R<Val> {
        let [
            channel @ (Val::Key(_) | Val::Arg(_)),
            message @ (Val::Arg(_) | Val::Str(_) | Val::Num(_) | Val::Key(_)),
        ] = rest
        else {
            return fail("a publish it does not model");
        };
        self.calls.push((
            b"publish".to_vec(),
            vec![command, channel.clone(), message.clone()],
        ));
        Ok(Val::Opaque)
    }

    /// The hash commands of a hash lock on the caller's field `ARGV[field]`: `HEXISTS`,
    /// `HINCRBY` by a literal and `HSET` to 1. Any other field, command or value stops the run.
    fn hash(&mut self, cmd: Vec<u8>, rest: &[Val]) -> R<Val> {
        let field = self.layout.field;
        let (Some(Val::Key(i)), Some(Val::Arg(f))) = (rest.first(), rest.get(1)) else {
            return fail("a hash command on something other than a key and an argument");
        };
        let i = *i - 1;
        if field == FIND_FIELD {
            return match f.checked_sub(if self.layout.field_per_key { i } else { 0 }) {
                Some(j) if j >= 1 => Err(Stop::Found(j)),
                _ => fail("a field before the first argument"),
            };
        }
        let own = if self.layout.field_per_key {
            field + i
        } else {
            field
        };
        if *f != own {
            return fail("a hash field other than the caller's");
        }
        // Hash commands are not recorded in `calls`: their effect is the hash's end state.
        let (held, others) = match &self.keys[i].value {
            None => (false, false),
            Some(Val::Hash { mine, others }) => (mine.is_some(), *others),
            Some(v) => return fail(format!("a hash command on {v}")),
        };
        if let (b"hexists", []) = (cmd.as_slice(), &rest[2..]) {
            return Ok(Val::Num(i64::from(held)));
        }
        let mine = match &self.keys[i].value {
            Some(Val::Hash { mine, .. }) => mine.as_deref().cloned(),
            _ => None,
        };
        let by = match (cmd.as_slice(), &rest[2..]) {
            (b"hincrby", [Val::Num(d)]) => *d,
            // The increment written as a string (`hincrby key field '1'`): Redis reads it as
            // the integer.
            (b"hincrby", [Val::Str(d)]) => match std::str::from_utf8(d).ok().map(str::parse) {
                Some(Ok(d)) => d,
                _ => return fail("a hash command it does not model"),
            },
            (b"hset", [Val::Num(1)]) => 0,
            (b"hset", [Val::Str(one)]) if one == b"1" => 0,
            _ => return fail("a hash command it does not model"),
        };
        let (now, reply) = if cmd == b"hset" {
            (Val::Num(1), Val::Num(i64::from(mine.is_none())))
        } else {
            let now = add(mine.unwrap_or(Val::Num(0)), Val::Num(by))?;
            (now.clone(), now)
        };
        let ttl = if self.keys[i].value.is_some() {
            self.keys[i].ttl.clone()
        } else {
            TtlNow::None
        };
        self.keys[i] = KeyNow {
            value: Some(Val::Hash {
                mine: Some(Box::new(now)),
                others,
            }),
            ttl,
        };
        Ok(reply)
    }
}

impl Machine<'_> {
    /// Refuses `local b = a` (or `b = a`) where `a` holds a table: tables are values here, so
    /// an alias would not see `table.insert` on the other name.
    fn no_table_alias(&self, es: &[Expr]) -> R<()> {
        for e in es {
            if let Expr::Local(id) = e
                && matches!(self.locals.get(*id), Some(Val::Table(_)))
            {
                return fail("copies a table");
            }
        }
        Ok(())
    }

    /// The arguments of a `redis.call`, a trailing `unpack(t)` spread into its items.
    fn call_args(&mut self, es: &[Expr]) -> R<Vec<Val>> {
        let Some((last, first)) = es.split_last() else {
            return Ok(Vec::new());
        };
        let mut out = self.exprs(first)?;
        if let Expr::Call(f, a) = last
            && !is_redis_call(f)
            && self.expr(f)? == Val::Lib(Lib::Unpack)
        {
            let [t] = a.as_slice() else {
                return fail("unpack with a range");
            };
            match self.expr(t)? {
                // With parameters in KEYS, `KEYS` holds more than the keys modelled.
                Val::Keys if self.layout.keys_as_args => {
                    return fail("unpack of KEYS with parameters");
                }
                Val::Keys => out.extend((1..=self.keys.len()).map(Val::Key)),
                // ARGV spread into the command: followed for a known count only.
                Val::Argv if self.layout.argv_count > 0 && !self.layout.keys_as_args => {
                    out.extend((1..=self.layout.argv_count).map(Val::Arg));
                }
                Val::Argv => return fail("spreads ARGV into a command (unpack(ARGV))"),
                Val::Table(items) => out.extend(items.into_iter().take_while(|v| *v != Val::Nil)),
                v => return fail(format!("unpack of {v}")),
            }
            return Ok(out);
        }
        out.push(self.expr(last)?);
        Ok(out)
    }

    /// Calls a function the script defined or a modelled library function.
    fn call_lib(&mut self, f: Val, args: &[Expr]) -> R<Val> {
        match f {
            Val::Func(k) => {
                if self.active.contains(&k) {
                    return fail("a recursive function");
                }
                if self.active.len() >= MAX_CALLS {
                    return fail("functions called too deeply to analyse");
                }
                let Some(func) = self.funcs.get(k).copied() else {
                    return fail("calls an unknown function");
                };
                if func.vararg {
                    return fail("a vararg function");
                }
                self.no_table_alias(args)?;
                let vals = self.exprs(args)?;
                for (n, id) in func.params.iter().enumerate() {
                    self.set_local(*id, vals.get(n).cloned().unwrap_or(Val::Nil));
                }
                self.active.push(k);
                let flow = self.block(&func.body)?;
                self.active.pop();
                match flow {
                    Flow::Return(v) => Ok(v),
                    Flow::Normal => Ok(Val::Nil),
                    Flow::Break => fail("break outside a loop"),
                }
            }
            Val::Lib(Lib::TableInsert) => {
                let [Expr::Local(id), v] = args else {
                    return fail("table.insert other than at the end of a local table");
                };
                let v = self.expr(v)?;
                if matches!(v, Val::Nil | Val::Table(_)) {
                    return fail("inserts nil or a table");
                }
                match self.locals.get_mut(*id) {
                    Some(Val::Table(items)) if items.len() >= MAX_TABLE => {
                        return fail("a table too long to analyse");
                    }
                    Some(Val::Table(items)) if !items.contains(&Val::Nil) => items.push(v),
                    _ => return fail("table.insert into something other than a local table"),
                }
                Ok(Val::Nil)
            }
            Val::Lib(Lib::StringSub) => match self.exprs(args)?.as_slice() {
                [s @ Val::Arg(_), Val::Num(1), Val::NumArg(j) | Val::Arg(j)] => {
                    Ok(Val::Head(Box::new(s.clone()), *j))
                }
                _ => fail("a string.sub it does not model"),
            },
            Val::Lib(Lib::StatusReply) => match self.exprs(args)?.as_slice() {
                [Val::Str(s)] if s == b"OK" => Ok(Val::Status),
                _ => fail("a status reply other than OK"),
            },
            Val::Lib(Lib::ErrorReply) => match self.exprs(args)?.as_slice() {
                [Val::Str(s)]
                    if s.len() > 1 && s.iter().all(|c| c.is_ascii_graphic() || *c == b' ') =>
                {
                    Ok(Val::Error(error_text(s)))
                }
                _ => fail("an error reply it does not model"),
            },
            Val::Lib(Lib::Replicate) if args.is_empty() => Ok(Val::Bool(true)),
            Val::Lib(Lib::Round) => match self.exprs(args)?.as_slice() {
                [v @ (Val::Num(_) | Val::NumArg(_))] => Ok(v.clone()),
                _ => fail("a math.floor it does not model"),
            },
            Val::Lib(Lib::StringFormat) => {
                self.exprs(args)?;
                Ok(Val::Opaque)
            }
            Val::Lib(Lib::Type) => {
                let v = self.exprs(args)?.into_iter().next().unwrap_or(Val::Nil);
                let name: &[u8] = match v {
                    Val::Nil => b"nil",
                    Val::Bool(_) => b"boolean",
                    Val::Num(_) | Val::Count(_) | Val::NumArg(_) | Val::Pttl(_) | Val::Ttl(_) => {
                        b"number"
                    }
                    Val::Str(_) | Val::Arg(_) | Val::Other(_) => b"string",
                    Val::Table(_) | Val::Status | Val::KeyType(_) => b"table",
                    v => return fail(format!("the type of {v}")),
                };
                Ok(Val::Str(name.to_vec()))
            }
            // The message may be any values the script has (a key's name, a reply): Redis only
            // writes them to its log. Fewer than two arguments or another level is an error
            // there, and stays unknown here.
            Val::Lib(Lib::Log) => match self.exprs(args)?.as_slice() {
                [Val::Num(0..=3), _, ..] => Ok(Val::Nil),
                _ => fail("a redis.log it does not model"),
            },
            f => fail(format!("calls {f}")),
        }
    }

    /// `head(a, ARGV[j]) == head(b, ARGV[j])`, decided where `ARGV[j]` is the (non-empty)
    /// token's length: the caller's head is the token, and a key holds it only when its value
    /// is the token itself. (On Redis a longer value that starts with the token matches too;
    /// treating it as someone else's can only refuse, never grant, where Redis would grant.)
    fn head_eq(&mut self, a: &Val, b: &Val) -> R<bool> {
        let (Val::Head(x, j), Val::Head(y, k)) = (a, b) else {
            return fail("compares a prefix with a whole value");
        };
        let token = self.layout.token;
        if j != k || *j == token || self.prefix.is_some_and(|p| p != *j) {
            return fail("compares prefixes of different lengths");
        }
        let mine = Val::Arg(token);
        let other = match (&**x, &**y) {
            (x, y) if *x == mine => y,
            (x, y) if *y == mine => x,
            _ => return fail("compares prefixes of values other than the token"),
        };
        self.prefix = Some(*j);
        match other {
            v if *v == mine => Ok(true),
            Val::Other(_) => Ok(false),
            Val::Str(s) if s.is_empty() => Ok(false),
            v => fail(format!("compares the token's prefix with {v}")),
        }
    }
}

/// A numeric test of an argument against an integer literal, `tonumber(ARGV[j]) > 5` and the
/// like: forked on as an assumption about `ARGV[j]` (see [`predicate`]). Answers the argument,
/// the predicate, and whether the test holds when the predicate does. `None` when `op` is not
/// such a test.
fn numeric_test(op: Bin, l: &Val, r: &Val) -> Option<R<(usize, Vec<u8>, bool)>> {
    let (j, n, flipped) = match (l, r) {
        (Val::NumArg(j), Val::Num(n)) => (*j, *n, false),
        (Val::Num(n), Val::NumArg(j)) => (*j, *n, true),
        _ => return None,
    };
    // As `ARGV[j] OP n`.
    let op = match (op, flipped) {
        (Bin::Lt, true) => Bin::Gt,
        (Bin::Gt, true) => Bin::Lt,
        (Bin::Le, true) => Bin::Ge,
        (Bin::Ge, true) => Bin::Le,
        (op, _) => op,
    };
    let pred = |kind: u8, n: i64| {
        let mut p = vec![PREDICATE, kind];
        p.extend(n.to_string().bytes());
        p
    };
    let overflow = || Some(Err(overflow()));
    Some(Ok(match op {
        Bin::Gt => (j, pred(b'>', n), true),
        Bin::Ge => match n.checked_sub(1) {
            Some(m) => (j, pred(b'>', m), true),
            None => return overflow(),
        },
        Bin::Le => (j, pred(b'>', n), false),
        Bin::Lt => match n.checked_sub(1) {
            Some(m) => (j, pred(b'>', m), false),
            None => return overflow(),
        },
        Bin::Eq => (j, pred(b'=', n), true),
        Bin::Ne => (j, pred(b'=', n), false),
        _ => return None,
    }))
}

/// The first byte of an assumption that is a numeric test rather than a literal (see
/// [`predicate`]); no literal a script compares with starts with it in practice, and one that
/// did would only be read as a test that holds for no argument the proxy accepts.
const PREDICATE: u8 = 0xff;

/// A numeric assumption about an argument, read back: `(b'>', n)` for "ARGV[j] > n" and
/// `(b'=', n)` for "ARGV[j] == n" (as integers); `None` for a literal's equality.
pub fn predicate(s: &[u8]) -> Option<(u8, i64)> {
    let [PREDICATE, kind, n @ ..] = s else {
        return None;
    };
    Some((*kind, std::str::from_utf8(n).ok()?.parse().ok()?))
}

/// Whether an assumption about `ARGV[j]` (`s` assumed `yes`) holds for every positive integer,
/// the values the proxy accepts as a TTL: `Some(side)` tells which outcome every positive
/// integer gives, `None` when they differ.
pub fn positive_side(s: &[u8]) -> Option<bool> {
    match predicate(s) {
        Some((b'>', n)) => (n <= 0).then_some(true),
        Some((b'=', n)) => (n <= 0).then_some(false),
        Some(_) => None,
        // A literal: a positive decimal integer equals only itself.
        None => {
            let positive = std::str::from_utf8(s)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .is_some_and(|n| n > 0);
            (!positive).then_some(false)
        }
    }
}

/// Collects every `local function` body in `b`, nested ones too (the parser caps the depth).
fn functions<'a>(b: &'a Block, out: &mut Vec<&'a Func>) {
    for s in b {
        match s {
            Stat::Function(_, f) => {
                out.push(f);
                functions(&f.body, out);
            }
            Stat::Do(b) | Stat::While(_, b) | Stat::Repeat(b, _) => functions(b, out),
            Stat::NumFor(.., b) | Stat::GenFor(_, _, b) => functions(b, out),
            Stat::If(arms, otherwise) => {
                for (_, b) in arms {
                    functions(b, out);
                }
                if let Some(b) = otherwise {
                    functions(b, out);
                }
            }
            _ => {}
        }
    }
}

/// The library function or table `t.name`, when the analyser models it.
fn library(t: &Val, name: &[u8]) -> Option<Lib> {
    match (t, name) {
        (Val::Lib(Lib::Table), b"insert") => Some(Lib::TableInsert),
        (Val::Lib(Lib::String), b"sub") => Some(Lib::StringSub),
        (Val::Lib(Lib::String), b"format") => Some(Lib::StringFormat),
        (Val::Lib(Lib::Math), b"floor" | b"ceil") => Some(Lib::Round),
        (Val::Redis, b"status_reply") => Some(Lib::StatusReply),
        (Val::Redis, b"error_reply") => Some(Lib::ErrorReply),
        (Val::Redis, b"replicate_commands") => Some(Lib::Replicate),
        (Val::Redis, b"log") => Some(Lib::Log),
        _ => None,
    }
}

/// The value of Redis's `redis.LOG_*` level constants.
fn log_level(name: &[u8]) -> Option<i64> {
    match name {
        b"LOG_DEBUG" => Some(0),
        b"LOG_VERBOSE" => Some(1),
        b"LOG_NOTICE" => Some(2),
        b"LOG_WARNING" => Some(3),
        _ => None,
    }
}

/// The error `redis.error_reply(text)` answers, as Redis 7 spells it: one leading `-` is
/// dropped, and a text without a space (no error code of its own) gets `ERR `.
fn error_text(text: &[u8]) -> Vec<u8> {
    let text = text.strip_prefix(b"-").unwrap_or(text);
    if text.contains(&b' ') {
        text.to_vec()
    } else {
        [b"ERR ".as_slice(), text].concat()
    }
}

/// A value a string command may store.
fn string_value(v: &Val) -> R<Val> {
    match v {
        Val::NumArg(j) => Ok(Val::Arg(*j)),
        v @ (Val::Arg(_) | Val::Str(_) | Val::Num(_)) => Ok(v.clone()),
        v => fail(format!("sets a key to {v}")),
    }
}

fn overflow() -> Stop {
    Stop::Fail("integer overflow".into())
}

fn add(l: Val, r: Val) -> R<Val> {
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
fn less(a: &Val, b: &Val, or_equal: bool) -> R<bool> {
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
