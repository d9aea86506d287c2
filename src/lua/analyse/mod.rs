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

mod calls;
mod eval;
mod redis;
mod states;
mod values;

use calls::*;
pub use calls::{positive_side, predicate};
use redis::*;
pub use states::*;
pub use values::*;

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
}
