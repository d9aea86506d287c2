//! The machine that runs a script once: its locals, the keys' states, the calls made so far
//! and its step budget, with the block walk every statement goes through. What it does for
//! each statement, expression, Redis command and library call is in the sibling modules.

use super::states::{Assumption, KeyNow, Layout};
use super::values::{R, Val, fail};
use crate::lua::parse::{Block, Func};

/// Most statements and expressions evaluated in one run.
pub(super) const MAX_STEPS: usize = 10_000;

/// Most nested calls of the script's own functions (each one nests the analyser's own stack).
pub(super) const MAX_CALLS: usize = 2;
/// Most items `table.insert` may grow a table to.
pub(super) const MAX_TABLE: usize = 64;
/// Most iterations of an unrolled numeric `for`.
pub(super) const MAX_FOR: i64 = 16;

pub(super) enum Flow {
    Normal,
    Break,
    Return(Val),
}

pub(super) struct Machine<'a> {
    pub(super) layout: Layout,
    pub(super) keys: Vec<KeyNow>,
    pub(super) locals: Vec<Val>,
    pub(super) assumed: &'a [Assumption],
    pub(super) calls: Vec<(Vec<u8>, Vec<Val>)>,
    pub(super) foreign: bool,
    pub(super) steps: usize,
    /// Most steps this run may take: [`MAX_STEPS`], or less when the script's runs so far have
    /// used most of [`MAX_TOTAL_STEPS`].
    pub(super) limit: usize,
    /// Every `local function` in the script (see [`functions`]), by [`Val::Func`] index.
    pub(super) funcs: &'a [&'a Func],
    /// Functions being called (no recursion).
    pub(super) active: Vec<usize>,
    /// See [`Run::prefix`].
    pub(super) prefix: Option<usize>,
}

impl<'a> Machine<'a> {
    /// A machine at the start of one run from `keys`, under the argument facts `assumed`.
    pub(super) fn new(
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
    pub(super) fn step(&mut self) -> R<()> {
        self.steps += 1;
        if self.steps > self.limit {
            return fail("runs too long to analyse");
        }
        Ok(())
    }

    pub(super) fn set_local(&mut self, id: usize, v: Val) {
        if self.locals.len() <= id {
            self.locals.resize(id + 1, Val::Nil);
        }
        self.locals[id] = v;
    }

    pub(super) fn block(&mut self, b: &Block) -> R<Flow> {
        for s in b {
            match self.stat(s)? {
                Flow::Normal => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Normal)
    }
}
