//! Statements and expressions: the symbolic evaluation of Lua's control flow (blocks, `if`,
//! unrolled `for`, returns), locals, and operators, forking a run where an argument comparison
//! decides it.

use super::calls::{is_table_insert, library, log_level, numeric_test, predicate};
use super::machine::*;
use super::states::*;
use super::values::*;
use crate::lua::parse::*;

impl Machine<'_> {
    pub(super) fn stat(&mut self, s: &Stat) -> R<Flow> {
        self.step()?;
        match s {
            Stat::Local(ids, exprs) => {
                self.no_table_alias(exprs)?;
                let vals = self.spread(exprs, ids.len())?;
                for (k, id) in ids.iter().enumerate() {
                    self.set_local(*id, vals.get(k).cloned().unwrap_or(Val::Nil));
                }
            }
            Stat::Assign(targets, exprs) => self.assign(targets, exprs)?,
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
                return self.num_for(*var, start, stop, step.as_ref(), body);
            }
            Stat::GenFor(vars, exprs, body) => return self.gen_for(vars, exprs, body),
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

    pub(super) fn exprs(&mut self, es: &[Expr]) -> R<Vec<Val>> {
        es.iter().map(|e| self.expr(e)).collect()
    }

    /// The values of `local a, b, c = ...`: as [`Machine::exprs`], but a last `unpack(ARGV)` or
    /// `unpack(KEYS)` gives as many items as there are names left (`local token, ttl =
    /// unpack(ARGV)`).
    pub(super) fn spread(&mut self, es: &[Expr], names: usize) -> R<Vec<Val>> {
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

    pub(super) fn expr(&mut self, e: &Expr) -> R<Val> {
        self.step()?;
        Ok(match e {
            Expr::Nil => Val::Nil,
            Expr::True => Val::Bool(true),
            Expr::False => Val::Bool(false),
            Expr::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => Val::Num(*n as i64),
            Expr::Num(_) => return fail("a non-integer number"),
            Expr::Str(s) => Val::Str(s.clone()),
            Expr::Local(id) => self.locals.get(*id).cloned().unwrap_or(Val::Nil),
            Expr::Global(g) => global(g)?,
            Expr::Index(t, k) => self.index(t, k)?,
            Expr::Call(f, args) => return self.call(f, args),
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
            Expr::Un(op, a) => return self.unary(*op, a),
            Expr::Vararg | Expr::Method(..) | Expr::Function(_) => {
                return fail("a vararg, method or function");
            }
        })
    }

    pub(super) fn binary(&mut self, op: Bin, a: &Expr, b: &Expr) -> R<Val> {
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

    pub(super) fn assume(&self, j: usize, s: &[u8]) -> R<bool> {
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

    pub(super) fn eq(&self, a: &Val, b: &Val) -> R<bool> {
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

    /// `a, b = ...`: locals only (globals are read-only, tables are values).
    fn assign(&mut self, targets: &[Expr], exprs: &[Expr]) -> R<()> {
        self.no_table_alias(exprs)?;
        let vals = self.exprs(exprs)?;
        for (k, t) in targets.iter().enumerate() {
            match t {
                Expr::Local(id) => self.set_local(*id, vals.get(k).cloned().unwrap_or(Val::Nil)),
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
        Ok(())
    }

    /// A numeric `for`, unrolled: its bounds and step must be known, and few.
    fn num_for(
        &mut self,
        var: usize,
        start: &Expr,
        stop: &Expr,
        step: Option<&Expr>,
        body: &Block,
    ) -> R<Flow> {
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
            self.set_local(var, if counted { Val::Count(i) } else { Val::Num(i) });
            match self.block(body)? {
                Flow::Normal => {}
                Flow::Break => break,
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Normal)
    }

    /// A generic `for` over `ipairs`/`pairs` of `KEYS` or a table, unrolled.
    fn gen_for(&mut self, vars: &[usize], exprs: &[Expr], body: &Block) -> R<Flow> {
        let mut counted = false;
        let items: Vec<Val> = match exprs {
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
        Ok(Flow::Normal)
    }

    /// `t[k]`: `KEYS`, `ARGV`, `redis`, the library tables, tables built, reply fields.
    fn index(&mut self, t: &Expr, k: &Expr) -> R<Val> {
        let t = self.expr(t)?;
        let k = match self.expr(k)? {
            Val::Count(i) => Val::Num(i),
            k => k,
        };
        Ok(match (t, k) {
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
        })
    }

    /// A call: `redis.call`, `table.insert`, a library or local function, `tonumber`,
    /// `tostring`.
    fn call(&mut self, f: &Expr, args: &[Expr]) -> R<Val> {
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
        Ok(match f {
            Val::Call => {
                let mut all = vec![arg];
                all.extend(args);
                return self.redis(all);
            }
            Val::ToNumber => match arg {
                Val::Arg(j) => Val::NumArg(j),
                Val::Str(_) => numeric(arg)?,
                v @ (Val::Num(_) | Val::NumArg(_) | Val::Pttl(_) | Val::Ttl(_) | Val::Sum(_)) => v,
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
        })
    }

    /// `not a`, `-a`, `#a`.
    fn unary(&mut self, op: Un, a: &Expr) -> R<Val> {
        let v = self.expr(a)?;
        Ok(match (op, v) {
            (Un::Not, v) => Val::Bool(!truthy(&v)?),
            (Un::Neg, Val::Num(n)) => Val::Num(n.checked_neg().ok_or_else(overflow)?),
            (Un::Len, Val::Keys) if self.layout.keys_exact => Val::Num(self.keys.len() as i64),
            (Un::Len, Val::Keys) => Val::Count(self.keys.len() as i64),
            // `#ARGV` in a run that stands for a call with exactly `m` arguments
            // (`if #ARGV < 2 then return redis.error_reply(...) end`).
            (Un::Len, Val::Argv) if self.layout.argv_count > 0 && !self.layout.keys_as_args => {
                Val::Num(self.layout.argv_count as i64)
            }
            (Un::Len, Val::Table(t)) => {
                Val::Num(t.iter().take_while(|v| **v != Val::Nil).count() as i64)
            }
            (Un::Len, Val::Str(s)) => Val::Num(s.len() as i64),
            (op, v) => return fail(format!("{op:?} of {v}")),
        })
    }
}

/// The globals the analyser models; any other stops the run.
fn global(g: &str) -> R<Val> {
    Ok(match g {
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
    })
}
