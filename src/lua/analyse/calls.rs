//! Function calls other than Redis commands: the Lua and Redis library functions the analyser
//! models (`table.insert`, `string.sub`, `tonumber`, `redis.status_reply`, ...), the script's
//! own local functions, and numeric tests of arguments, read back as assumptions.

use super::machine::*;
use super::values::*;
use crate::lua::parse::*;

/// `table.insert`.
pub(super) fn is_table_insert(f: &Expr) -> bool {
    matches!(f, Expr::Index(t, name)
        if matches!(&**t, Expr::Global(g) if g == "table")
        && matches!(&**name, Expr::Str(s) if s == b"insert"))
}

impl Machine<'_> {
    /// Refuses `local b = a` (or `b = a`) where `a` holds a table: tables are values here, so
    /// an alias would not see `table.insert` on the other name.
    pub(super) fn no_table_alias(&self, es: &[Expr]) -> R<()> {
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
    pub(super) fn call_args(&mut self, es: &[Expr]) -> R<Vec<Val>> {
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
    pub(super) fn call_lib(&mut self, f: Val, args: &[Expr]) -> R<Val> {
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
    pub(super) fn head_eq(&mut self, a: &Val, b: &Val) -> R<bool> {
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
pub(super) fn numeric_test(op: Bin, l: &Val, r: &Val) -> Option<R<(usize, Vec<u8>, bool)>> {
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
pub(super) const PREDICATE: u8 = 0xff;

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
pub(super) fn functions<'a>(b: &'a Block, out: &mut Vec<&'a Func>) {
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
pub(super) fn library(t: &Val, name: &[u8]) -> Option<Lib> {
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
pub(super) fn log_level(name: &[u8]) -> Option<i64> {
    match name {
        b"LOG_DEBUG" => Some(0),
        b"LOG_VERBOSE" => Some(1),
        b"LOG_NOTICE" => Some(2),
        b"LOG_WARNING" => Some(3),
        _ => None,
    }
}
