//! A Lua 5.1 parser to an AST, depth-capped recursive descent: statement nesting and
//! expression height are both bounded by [`MAX_DEPTH`], so no input can overflow the stack,
//! and the node count by [`MAX_NODES`].
//!
//! Local variables are resolved while parsing: each declaration gets a number in order of
//! appearance ([`Expr::Local`]), so two scripts that differ only in local names parse to the
//! same tree. Parentheses are dropped (a script's meaning never depends on them in the forms
//! analysed here), and the command name in `redis.call`/`redis.pcall` is lower-cased, since
//! Redis ignores its case.

use super::lex::Tok;

/// Deepest nesting of blocks and expressions accepted.
pub const MAX_DEPTH: usize = 64;
/// Most AST nodes accepted.
pub const MAX_NODES: usize = 20_000;

/// A binary operator.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bin {
    Or,
    And,
    Lt,
    Gt,
    Le,
    Ge,
    Ne,
    Eq,
    Concat,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

/// A unary operator.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Un {
    Not,
    Neg,
    Len,
}

/// An expression.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Nil,
    True,
    False,
    Num(f64),
    Str(Vec<u8>),
    Vararg,
    /// A local variable, numbered in order of declaration.
    Local(usize),
    Global(String),
    Index(Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Vec<Expr>),
    Method(Box<Expr>, String, Vec<Expr>),
    Function(Box<Func>),
    /// Table constructor: `(key, value)`, key `None` for positional items.
    Table(Vec<(Option<Expr>, Expr)>),
    Bin(Bin, Box<Expr>, Box<Expr>),
    Un(Un, Box<Expr>),
}

/// A function body.
#[derive(Debug, Clone, PartialEq)]
pub struct Func {
    /// Parameters (local numbers).
    pub params: Vec<usize>,
    /// Whether it takes `...`.
    pub vararg: bool,
    /// The body.
    pub body: Block,
}

/// A statement.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq)]
pub enum Stat {
    Local(Vec<usize>, Vec<Expr>),
    Assign(Vec<Expr>, Vec<Expr>),
    Call(Expr),
    Do(Block),
    While(Expr, Block),
    Repeat(Block, Expr),
    If(Vec<(Expr, Block)>, Option<Block>),
    NumFor(usize, Expr, Expr, Option<Expr>, Block),
    GenFor(Vec<usize>, Vec<Expr>, Block),
    /// `function a.b:c() end` (target expression) or `local function f`.
    Function(Expr, Box<Func>),
    Return(Vec<Expr>),
    Break,
}

/// A block of statements.
pub type Block = Vec<Stat>;

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    depth: usize,
    nodes: usize,
    scopes: Vec<Vec<(String, usize)>>,
    next_local: usize,
}

type R<T> = Result<T, String>;

/// Parses a whole chunk.
pub fn parse(toks: Vec<Tok>) -> R<Block> {
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
        nodes: 0,
        scopes: vec![Vec::new()],
        next_local: 0,
    };
    let b = p.block()?;
    if p.pos != p.toks.len() {
        return Err(format!("'<eof>' expected near token {}", p.pos));
    }
    Ok(b)
}

fn is_block_end(t: Option<&Tok>) -> bool {
    match t {
        None => true,
        Some(Tok::Name(n)) => matches!(n.as_str(), "end" | "else" | "elseif" | "until"),
        _ => false,
    }
}

fn binop(t: Option<&Tok>) -> Option<(Bin, u8, u8)> {
    // (operator, left priority, right priority), as Lua 5.1's lparser.c.
    Some(match t? {
        Tok::Name(n) if n == "or" => (Bin::Or, 1, 1),
        Tok::Name(n) if n == "and" => (Bin::And, 2, 2),
        Tok::Sym("<") => (Bin::Lt, 3, 3),
        Tok::Sym(">") => (Bin::Gt, 3, 3),
        Tok::Sym("<=") => (Bin::Le, 3, 3),
        Tok::Sym(">=") => (Bin::Ge, 3, 3),
        Tok::Sym("~=") => (Bin::Ne, 3, 3),
        Tok::Sym("==") => (Bin::Eq, 3, 3),
        Tok::Sym("..") => (Bin::Concat, 5, 4),
        Tok::Sym("+") => (Bin::Add, 6, 6),
        Tok::Sym("-") => (Bin::Sub, 6, 6),
        Tok::Sym("*") => (Bin::Mul, 7, 7),
        Tok::Sym("/") => (Bin::Div, 7, 7),
        Tok::Sym("%") => (Bin::Mod, 7, 7),
        Tok::Sym("^") => (Bin::Pow, 10, 9),
        _ => return None,
    })
}

const UNARY_PRIORITY: u8 = 8;

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Name(n)) if n == kw)
    }

    fn is_sym(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Sym(t)) if *t == s)
    }

    fn accept_kw(&mut self, kw: &str) -> bool {
        let yes = self.is_kw(kw);
        self.pos += usize::from(yes);
        yes
    }

    fn accept_sym(&mut self, s: &str) -> bool {
        let yes = self.is_sym(s);
        self.pos += usize::from(yes);
        yes
    }

    fn expect_kw(&mut self, kw: &str) -> R<()> {
        if self.accept_kw(kw) {
            Ok(())
        } else {
            Err(format!("'{kw}' expected near token {}", self.pos))
        }
    }

    fn expect_sym(&mut self, s: &str) -> R<()> {
        if self.accept_sym(s) {
            Ok(())
        } else {
            Err(format!("'{s}' expected near token {}", self.pos))
        }
    }

    fn node(&mut self) -> R<()> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err("script too large to analyse".into());
        }
        Ok(())
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("script nested too deeply to analyse".into());
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn name(&mut self) -> R<String> {
        match self.peek() {
            Some(Tok::Name(n)) if !is_keyword(n) => {
                let n = n.clone();
                self.pos += 1;
                Ok(n)
            }
            _ => Err(format!("<name> expected near token {}", self.pos)),
        }
    }

    fn declare(&mut self, name: String) -> usize {
        let id = self.next_local;
        self.next_local += 1;
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name, id));
        }
        id
    }

    fn resolve(&self, name: &str) -> Option<usize> {
        self.scopes
            .iter()
            .rev()
            .flat_map(|s| s.iter().rev())
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
    }

    fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        self.scopes.push(Vec::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    fn block(&mut self) -> R<Block> {
        self.enter()?;
        let b = self.scoped(|p| {
            let mut out = Vec::new();
            while !is_block_end(p.peek()) {
                if p.accept_sym(";") {
                    continue;
                }
                let last = p.is_kw("return") || p.is_kw("break");
                out.push(p.statement()?);
                p.accept_sym(";");
                if last {
                    break;
                }
            }
            Ok(out)
        })?;
        self.leave();
        Ok(b)
    }

    fn statement(&mut self) -> R<Stat> {
        self.node()?;
        if self.accept_kw("if") {
            return self.if_stat();
        }
        if self.accept_kw("while") {
            let cond = self.expr()?;
            self.expect_kw("do")?;
            let body = self.block()?;
            self.expect_kw("end")?;
            return Ok(Stat::While(cond, body));
        }
        if self.accept_kw("do") {
            let body = self.block()?;
            self.expect_kw("end")?;
            return Ok(Stat::Do(body));
        }
        if self.accept_kw("repeat") {
            return self.repeat_stat();
        }
        if self.accept_kw("for") {
            return self.for_stat();
        }
        if self.accept_kw("function") {
            return self.function_stat();
        }
        if self.accept_kw("local") {
            return self.local_stat();
        }
        if self.accept_kw("return") {
            let exprs = if is_block_end(self.peek()) || self.is_sym(";") {
                Vec::new()
            } else {
                self.exprlist()?
            };
            return Ok(Stat::Return(exprs));
        }
        if self.accept_kw("break") {
            return Ok(Stat::Break);
        }
        let e = self.suffixed()?;
        if self.is_sym("=") || self.is_sym(",") {
            let mut targets = vec![e];
            while self.accept_sym(",") {
                targets.push(self.suffixed()?);
            }
            self.expect_sym("=")?;
            if targets
                .iter()
                .any(|t| !matches!(t, Expr::Local(_) | Expr::Global(_) | Expr::Index(..)))
            {
                return Err("syntax error: cannot assign".into());
            }
            let values = self.exprlist()?;
            return Ok(Stat::Assign(targets, values));
        }
        if matches!(e, Expr::Call(..) | Expr::Method(..)) {
            Ok(Stat::Call(e))
        } else {
            Err(format!("syntax error near token {}", self.pos))
        }
    }

    /// `if ... then ... elseif ... else ... end`, after its `if`.
    fn if_stat(&mut self) -> R<Stat> {
        let mut arms = Vec::new();
        let cond = self.expr()?;
        self.expect_kw("then")?;
        arms.push((cond, self.block()?));
        let mut otherwise = None;
        loop {
            if self.accept_kw("elseif") {
                let cond = self.expr()?;
                self.expect_kw("then")?;
                arms.push((cond, self.block()?));
            } else if self.accept_kw("else") {
                otherwise = Some(self.block()?);
                self.expect_kw("end")?;
                break;
            } else {
                self.expect_kw("end")?;
                break;
            }
        }
        Ok(Stat::If(arms, otherwise))
    }

    /// `repeat ... until cond`, after its `repeat`: the condition sees the body's locals.
    fn repeat_stat(&mut self) -> R<Stat> {
        self.enter()?;
        let r = self.scoped(|p| {
            let mut body = Vec::new();
            while !is_block_end(p.peek()) {
                if !p.accept_sym(";") {
                    body.push(p.statement()?);
                }
            }
            p.expect_kw("until")?;
            Ok(Stat::Repeat(body, p.expr()?))
        });
        self.leave();
        r
    }

    /// A numeric or generic `for`, after its `for`.
    fn for_stat(&mut self) -> R<Stat> {
        let first = self.name()?;
        if self.accept_sym("=") {
            let start = self.expr()?;
            self.expect_sym(",")?;
            let stop = self.expr()?;
            let step = if self.accept_sym(",") {
                Some(self.expr()?)
            } else {
                None
            };
            self.expect_kw("do")?;
            return self.scoped(|p| {
                let var = p.declare(first);
                let body = p.block()?;
                p.expect_kw("end")?;
                Ok(Stat::NumFor(var, start, stop, step, body))
            });
        }
        let mut names = vec![first];
        while self.accept_sym(",") {
            names.push(self.name()?);
        }
        self.expect_kw("in")?;
        let exprs = self.exprlist()?;
        self.expect_kw("do")?;
        self.scoped(|p| {
            let vars = names.into_iter().map(|n| p.declare(n)).collect();
            let body = p.block()?;
            p.expect_kw("end")?;
            Ok(Stat::GenFor(vars, exprs, body))
        })
    }

    /// `function a.b:c() ... end`, after its `function`.
    fn function_stat(&mut self) -> R<Stat> {
        let mut target = self.var_name()?;
        let mut method = false;
        while self.is_sym(".") || self.is_sym(":") {
            method = self.is_sym(":");
            self.pos += 1;
            let field = self.name()?;
            target = Expr::Index(Box::new(target), Box::new(Expr::Str(field.into_bytes())));
            if method {
                break;
            }
        }
        let f = self.funcbody(method)?;
        Ok(Stat::Function(target, Box::new(f)))
    }

    /// `local function f`, or `local a, b = ...`, after its `local`.
    fn local_stat(&mut self) -> R<Stat> {
        if self.accept_kw("function") {
            let name = self.name()?;
            let id = self.declare(name);
            let f = self.funcbody(false)?;
            return Ok(Stat::Function(Expr::Local(id), Box::new(f)));
        }
        let mut names = vec![self.name()?];
        while self.accept_sym(",") {
            names.push(self.name()?);
        }
        let exprs = if self.accept_sym("=") {
            self.exprlist()?
        } else {
            Vec::new()
        };
        // The values are evaluated before the new names are in scope.
        let ids = names.into_iter().map(|n| self.declare(n)).collect();
        Ok(Stat::Local(ids, exprs))
    }

    fn var_name(&mut self) -> R<Expr> {
        let n = self.name()?;
        Ok(match self.resolve(&n) {
            Some(id) => Expr::Local(id),
            None => Expr::Global(n),
        })
    }

    fn funcbody(&mut self, method: bool) -> R<Func> {
        self.enter()?;
        let r = self.scoped(|p| {
            let mut params = Vec::new();
            if method {
                params.push(p.declare("self".into()));
            }
            let mut vararg = false;
            p.expect_sym("(")?;
            if !p.accept_sym(")") {
                loop {
                    if p.accept_sym("...") {
                        vararg = true;
                        break;
                    }
                    let n = p.name()?;
                    params.push(p.declare(n));
                    if !p.accept_sym(",") {
                        break;
                    }
                }
                p.expect_sym(")")?;
            }
            let body = p.block()?;
            p.expect_kw("end")?;
            Ok(Func {
                params,
                vararg,
                body,
            })
        });
        self.leave();
        r
    }

    fn exprlist(&mut self) -> R<Vec<Expr>> {
        let mut v = vec![self.expr()?];
        while self.accept_sym(",") {
            v.push(self.expr()?);
        }
        Ok(v)
    }

    fn expr(&mut self) -> R<Expr> {
        Ok(self.subexpr(0)?.0)
    }

    /// Precedence climbing; answers the expression and its height (bounded by [`MAX_DEPTH`]).
    fn subexpr(&mut self, limit: u8) -> R<(Expr, usize)> {
        self.enter()?;
        self.node()?;
        let un = match self.peek() {
            Some(Tok::Name(n)) if n == "not" => Some(Un::Not),
            Some(Tok::Sym("-")) => Some(Un::Neg),
            Some(Tok::Sym("#")) => Some(Un::Len),
            _ => None,
        };
        let (mut e, mut h) = match un {
            Some(op) => {
                self.pos += 1;
                let (e, h) = self.subexpr(UNARY_PRIORITY)?;
                match (op, e) {
                    (Un::Neg, Expr::Num(n)) => (Expr::Num(-n), h),
                    (op, e) => (Expr::Un(op, Box::new(e)), h + 1),
                }
            }
            None => self.simple()?,
        };
        while let Some((op, left, right)) = binop(self.peek()) {
            if left <= limit {
                break;
            }
            self.pos += 1;
            self.node()?;
            let (r, rh) = self.subexpr(right)?;
            h = h.max(rh) + 1;
            if h > MAX_DEPTH {
                return Err("expression too deep to analyse".into());
            }
            e = Expr::Bin(op, Box::new(e), Box::new(r));
        }
        self.leave();
        Ok((e, h))
    }

    fn simple(&mut self) -> R<(Expr, usize)> {
        let e = match self.peek() {
            Some(Tok::Num(n)) => Expr::Num(*n),
            Some(Tok::Str(s)) => Expr::Str(s.clone()),
            Some(Tok::Sym("...")) => Expr::Vararg,
            Some(Tok::Name(n)) if n == "nil" => Expr::Nil,
            Some(Tok::Name(n)) if n == "true" => Expr::True,
            Some(Tok::Name(n)) if n == "false" => Expr::False,
            Some(Tok::Name(n)) if n == "function" => {
                self.pos += 1;
                let f = self.funcbody(false)?;
                return Ok((Expr::Function(Box::new(f)), 1));
            }
            Some(Tok::Sym("{")) => return self.table(),
            _ => return self.suffixed_h(),
        };
        self.pos += 1;
        Ok((e, 1))
    }

    fn table(&mut self) -> R<(Expr, usize)> {
        self.enter()?;
        self.expect_sym("{")?;
        let mut items = Vec::new();
        let mut h = 1;
        while !self.accept_sym("}") {
            self.node()?;
            let item = if self.accept_sym("[") {
                let (k, kh) = self.subexpr(0)?;
                self.expect_sym("]")?;
                self.expect_sym("=")?;
                let (v, vh) = self.subexpr(0)?;
                h = h.max(kh).max(vh);
                (Some(k), v)
            } else if matches!(self.peek(), Some(Tok::Name(_)))
                && matches!(self.toks.get(self.pos + 1), Some(Tok::Sym("=")))
            {
                let k = self.name()?;
                self.pos += 1;
                let (v, vh) = self.subexpr(0)?;
                h = h.max(vh);
                (Some(Expr::Str(k.into_bytes())), v)
            } else {
                let (v, vh) = self.subexpr(0)?;
                h = h.max(vh);
                (None, v)
            };
            items.push(item);
            if !self.accept_sym(",") && !self.accept_sym(";") {
                self.expect_sym("}")?;
                break;
            }
        }
        self.leave();
        Ok((Expr::Table(items), h + 1))
    }

    fn suffixed(&mut self) -> R<Expr> {
        Ok(self.suffixed_h()?.0)
    }

    fn suffixed_h(&mut self) -> R<(Expr, usize)> {
        self.enter()?;
        let (mut e, mut h) = if self.accept_sym("(") {
            let (e, h) = self.subexpr(0)?;
            self.expect_sym(")")?;
            (e, h)
        } else {
            (self.var_name()?, 1)
        };
        loop {
            self.node()?;
            if h > MAX_DEPTH {
                return Err("expression too deep to analyse".into());
            }
            if self.accept_sym(".") {
                let f = self.name()?;
                e = Expr::Index(Box::new(e), Box::new(Expr::Str(f.into_bytes())));
                h += 1;
            } else if self.accept_sym("[") {
                let (k, kh) = self.subexpr(0)?;
                self.expect_sym("]")?;
                h = h.max(kh) + 1;
                e = Expr::Index(Box::new(e), Box::new(k));
            } else if self.accept_sym(":") {
                let m = self.name()?;
                let (args, ah) = self.args()?;
                h = h.max(ah) + 1;
                e = Expr::Method(Box::new(e), m, args);
            } else if self.is_sym("(")
                || self.is_sym("{")
                || matches!(self.peek(), Some(Tok::Str(_)))
            {
                let (mut args, ah) = self.args()?;
                h = h.max(ah) + 1;
                if is_redis_call(&e)
                    && let Some(Expr::Str(cmd)) = args.first_mut()
                {
                    cmd.make_ascii_lowercase();
                }
                e = Expr::Call(Box::new(e), args);
            } else {
                break;
            }
        }
        self.leave();
        Ok((e, h))
    }

    fn args(&mut self) -> R<(Vec<Expr>, usize)> {
        match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok((vec![Expr::Str(s)], 1))
            }
            Some(Tok::Sym("{")) => {
                let (t, h) = self.table()?;
                Ok((vec![t], h))
            }
            _ => {
                self.expect_sym("(")?;
                let mut args = Vec::new();
                let mut h = 0;
                if !self.accept_sym(")") {
                    loop {
                        let (a, ah) = self.subexpr(0)?;
                        h = h.max(ah);
                        args.push(a);
                        if !self.accept_sym(",") {
                            break;
                        }
                    }
                    self.expect_sym(")")?;
                }
                Ok((args, h))
            }
        }
    }
}

/// `redis.call` or `redis.pcall`.
pub fn is_redis_call(e: &Expr) -> bool {
    matches!(e, Expr::Index(t, f)
        if matches!(&**t, Expr::Global(g) if g == "redis")
        && matches!(&**f, Expr::Str(s) if s == b"call" || s == b"pcall"))
}

fn is_keyword(n: &str) -> bool {
    matches!(
        n,
        "and"
            | "break"
            | "do"
            | "else"
            | "elseif"
            | "end"
            | "false"
            | "for"
            | "function"
            | "if"
            | "in"
            | "local"
            | "nil"
            | "not"
            | "or"
            | "repeat"
            | "return"
            | "then"
            | "true"
            | "until"
            | "while"
    )
}

/// How many keys a script uses: the highest literal `KEYS[i]`, and whether it also uses `KEYS`
/// as a whole (`ipairs(KEYS)`, `#KEYS`, `KEYS[i]` with a variable).
#[derive(Default, Clone, Copy)]
pub(super) struct KeyUse {
    pub(super) max_literal: usize,
    pub(super) dynamic: bool,
    /// The highest literal `ARGV[j]` (at most 64).
    pub(super) max_argv: usize,
    /// `ARGV` used as a whole (`unpack(ARGV)`), not only indexed.
    pub(super) argv_whole: bool,
    /// `#KEYS` read (a test of how many keys the call passed, or a loop bound).
    pub(super) keys_len: bool,
}

pub(super) fn key_use_block(b: &Block, u: &mut KeyUse) {
    for s in b {
        match s {
            Stat::Local(_, es) | Stat::Return(es) => es.iter().for_each(|e| key_use(e, u)),
            Stat::Assign(ts, es) => ts.iter().chain(es).for_each(|e| key_use(e, u)),
            Stat::Call(e) => key_use(e, u),
            Stat::Do(b) => key_use_block(b, u),
            Stat::While(e, b) | Stat::Repeat(b, e) => {
                key_use(e, u);
                key_use_block(b, u);
            }
            Stat::If(arms, otherwise) => {
                for (e, b) in arms {
                    key_use(e, u);
                    key_use_block(b, u);
                }
                if let Some(b) = otherwise {
                    key_use_block(b, u);
                }
            }
            Stat::NumFor(_, a, z, step, b) => {
                key_use(a, u);
                key_use(z, u);
                if let Some(s) = step {
                    key_use(s, u);
                }
                key_use_block(b, u);
            }
            Stat::GenFor(_, es, b) => {
                es.iter().for_each(|e| key_use(e, u));
                key_use_block(b, u);
            }
            Stat::Function(e, f) => {
                key_use(e, u);
                key_use_block(&f.body, u);
            }
            Stat::Break => {}
        }
    }
}

fn key_use(e: &Expr, u: &mut KeyUse) {
    match e {
        Expr::Index(t, k) if matches!(&**t, Expr::Global(g) if g == "KEYS") => match &**k {
            Expr::Num(n) if n.fract() == 0.0 && *n >= 1.0 && *n <= 64.0 => {
                u.max_literal = u.max_literal.max(*n as usize);
            }
            k => {
                u.dynamic = true;
                key_use(k, u);
            }
        },
        Expr::Un(Un::Len, a) if matches!(&**a, Expr::Global(g) if g == "KEYS") => {
            u.dynamic = true;
            u.keys_len = true;
        }
        Expr::Global(g) if g == "KEYS" => u.dynamic = true,
        Expr::Global(g) if g == "ARGV" => u.argv_whole = true,
        Expr::Index(t, k) if matches!(&**t, Expr::Global(g) if g == "ARGV") => {
            if let Expr::Num(n) = &**k
                && n.fract() == 0.0
                && *n >= 1.0
                && *n <= 64.0
            {
                u.max_argv = u.max_argv.max(*n as usize);
            }
            key_use(k, u);
        }
        Expr::Index(a, b) | Expr::Bin(_, a, b) => {
            key_use(a, u);
            key_use(b, u);
        }
        Expr::Un(_, a) => key_use(a, u),
        Expr::Call(f, args) | Expr::Method(f, _, args) => {
            key_use(f, u);
            args.iter().for_each(|a| key_use(a, u));
        }
        Expr::Table(items) => {
            for (k, v) in items {
                if let Some(k) = k {
                    key_use(k, u);
                }
                key_use(v, u);
            }
        }
        Expr::Function(f) => key_use_block(&f.body, u),
        _ => {}
    }
}
