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
//!
//! # Layout
//! - `machine`: one run's state (locals, keys, calls made, step budget) and the block walk.
//! - `eval`: statements and expressions; `redis`: the Redis commands; `calls`: library and
//!   local functions, numeric tests of arguments.
//! - `values`: symbolic values and their Lua semantics; `states`: key states, starting
//!   states, layouts and the record of a run.

mod calls;
mod eval;
mod machine;
mod redis;
mod states;
mod values;

pub use calls::{positive_side, predicate};
pub use states::{
    Assumption, HOLDS, Held, KeyNow, Layout, ORDER, Run, STARTS, Start, TtlNow, order,
};
pub use values::{Val, lit_val, reply_lit};

use super::parse::Block;
use calls::functions;
use machine::{Flow, MAX_STEPS, Machine};
use states::FIND_FIELD;
use values::{Stop, to_reply};

/// Most runs per script (start states × argument forks).
const MAX_RUNS: usize = 1_000;
/// Most statements and expressions evaluated over every run of one script. The two limits
/// above alone would allow ten million, seconds of work on the runtime's thread for one
/// request of a few hundred bytes; the library scripts need a few thousand.
const MAX_TOTAL_STEPS: usize = 100_000;

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
