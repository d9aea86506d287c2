//! Recognition of Redisson's read–write lock (`RReadWriteLock`) and fair lock (`RFairLock`)
//! scripts by what they do to which keys.
//!
//! These scripts loop over a hash's fields (`HKEYS`), build keys by concatenation
//! (`KEYS[2] .. ':' .. n`, the per-hold timeout keys of a read lock; `KEYS[4] .. ':' .. id`,
//! a fair waiter's channel) and keep a queue in a list and a sorted set: more than the
//! symbolic analyser of [`super::analyse`] follows. They are recognised here from a summary of
//! the script's effects instead: every `redis.call` with its command and the shape of each
//! argument (which `KEYS[i]`, a key built from `KEYS[i]`, which `ARGV[j]`, a literal), and the
//! forms of its `return`s. Spelling (spacing, quotes, local names, `if` forms) does not matter;
//! the set of effects must match one operation's exactly — its required commands present, and
//! no write command outside the ones that operation makes.
//!
//! The proxy does not replace these scripts with its own: it runs the client's script as it is
//! on every master (atomic there; the keys it builds share `KEYS[1]`'s name and hash tag) and
//! decides by the quorum from the replies (see the command layer's `rwlock`). What recognition
//! must get right is therefore the meaning of a reply — nil granted, an integer refused — and
//! where the caller's field and TTL are, for the roll-back of a partial grant.

use std::collections::HashMap;

use super::parse::{Block, Expr, KeyUse, Stat, is_redis_call, key_use_block};

/// What a recognised read–write or fair lock script does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedissonOp {
    /// `RReadWriteLock.readLock()` acquisition: `KEYS` = lock, timeout-key prefix. Nil when
    /// taken (free, read mode, or write mode held by the caller's own thread), else the PTTL.
    ReadAcquire,
    /// `RReadWriteLock.writeLock()` acquisition: `KEYS` = lock. Nil when taken (free, or
    /// re-entered in write mode), else the PTTL.
    WriteAcquire,
    /// A read or write lock's unlock (with its latch): 1 released, 0 still held, nil not held.
    RwUnlock,
    /// A read or write lock's forced unlock (by mode): 1 deleted, 0 not.
    RwForceUnlock,
    /// The read-lock watchdog (`ReadLockTask`, many locks at once): only `PEXPIRE`s, one 1 or
    /// 0 per lock.
    RwRenew,
    /// The read-lock watchdog before Redisson 3.44 (one lock, `KEYS` = lock, timeout-key
    /// prefix): only `PEXPIRE`s, 1 when the caller's field is there, else 0.
    RwRenewOne,
    /// `RFairLock` acquisition with a wait (`tryLock(wait, ...)`/`lock()`): nil when taken,
    /// else a wait in ms (and the caller queued).
    FairAcquire,
    /// `RFairLock` acquisition without a wait (`tryLock()`): nil when taken, else 1.
    FairTryAcquire,
    /// `RFairLock` unlock (with its latch): 1 released, 0 still held, nil not held.
    FairUnlock,
    /// `RFairLock` forced unlock: 1 deleted, 0 missing.
    FairForceUnlock,
    /// `RFairLock`'s `acquireFailed`: the caller leaves the queue (`KEYS` = queue, timeouts).
    FairDequeue,
    /// A read of the lock's state that writes nothing and answers 1 or 0 (the read lock's
    /// `isLocked()`).
    RwIsLocked,
}

impl RedissonOp {
    /// What the operation does to its lock, in the one vocabulary ([`crate::lockop::Verb`]).
    pub fn verb(self) -> crate::lockop::Verb {
        use crate::lockop::Verb;
        match self {
            RedissonOp::ReadAcquire
            | RedissonOp::WriteAcquire
            | RedissonOp::FairAcquire
            | RedissonOp::FairTryAcquire => Verb::Acquire,
            RedissonOp::RwUnlock | RedissonOp::FairUnlock => Verb::Release,
            RedissonOp::RwForceUnlock | RedissonOp::FairForceUnlock => Verb::Delete,
            RedissonOp::RwRenew | RedissonOp::RwRenewOne => Verb::Extend,
            RedissonOp::FairDequeue => Verb::Leave,
            RedissonOp::RwIsLocked => Verb::Query,
        }
    }
}

/// A recognised read–write or fair lock script and where its parameters sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedissonScript {
    /// What it does.
    pub op: RedissonOp,
    /// 1-based `ARGV` index of the caller's field (`<uuid>:<threadId>`), 0 when none.
    pub field_arg: usize,
    /// 1-based `ARGV` index of the TTL in ms, 0 when none.
    pub ttl_arg: usize,
    /// 1-based `ARGV` index that names the publish command, 0 when the script spells it.
    pub publish_arg: usize,
    /// How many `KEYS` a call needs (at least; the watchdog takes them in pairs).
    pub keys: usize,
}

impl RedissonOp {
    /// The 1-based `KEYS` index of the channel the operation may publish to: the channel
    /// itself (a read–write unlock's `KEYS[2]`), or the start of the channel's name (a fair
    /// unlock tells the next waiter on `KEYS[4] .. ':' .. id`). `None` when it publishes nothing.
    pub fn channel_key(self) -> Option<usize> {
        match self {
            RedissonOp::RwUnlock | RedissonOp::RwForceUnlock => Some(2),
            RedissonOp::FairUnlock | RedissonOp::FairForceUnlock => Some(4),
            _ => None,
        }
    }
}

/// The shape of one argument of a `redis.call`.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// `KEYS[i]`.
    Key(usize),
    /// `KEYS[<not a literal>]`.
    AnyKey,
    /// A string built by concatenation starting with `KEYS[i]`.
    Built(usize),
    /// `ARGV[j]`.
    Arg(usize),
    /// A string literal.
    Str(Vec<u8>),
    /// A number literal (`-1` included).
    Num(i64),
    /// Anything else.
    Other,
}

/// The command of a `redis.call`.
#[derive(Debug, Clone, PartialEq)]
enum Callee {
    /// A literal name, lower-cased.
    Name(Vec<u8>),
    /// `ARGV[j]` (Redisson passes `publish` or `spublish`).
    Arg(usize),
    /// Anything else.
    Other,
}

/// The form of a `return`.
#[derive(Debug, Clone, PartialEq)]
enum Ret {
    Nil,
    Num(i64),
    /// `redis.call('pttl', KEYS[1])`, directly.
    Pttl,
    Other,
}

#[derive(Default)]
struct Summary {
    calls: Vec<(Callee, Vec<Shape>)>,
    rets: Vec<Ret>,
    /// The shape each local was given (by local number); [`Shape::Other`] once it was given two
    /// different ones.
    locals: HashMap<usize, Shape>,
}

/// Commands that write. A script may make only the writes its operation makes.
const WRITES: &[&[u8]] = &[
    b"set",
    b"del",
    b"unlink",
    b"hset",
    b"hdel",
    b"hincrby",
    b"pexpire",
    b"expire",
    b"lpop",
    b"rpush",
    b"lrem",
    b"zadd",
    b"zrem",
    b"zincrby",
    b"publish",
    b"spublish",
    b"incr",
    b"hsetnx",
    b"lpush",
    b"rpop",
    b"getset",
    b"rename",
    b"persist",
    b"pexpireat",
    b"expireat",
    b"incrby",
    b"decr",
    b"decrby",
    b"append",
    b"hmset",
    b"setex",
    b"psetex",
    b"flushall",
    b"flushdb",
    b"ltrim",
    b"lset",
    b"linsert",
    b"sadd",
    b"srem",
    b"copy",
    b"move",
    b"restore",
];

impl Summary {
    fn of(block: &Block) -> Summary {
        let mut s = Summary::default();
        s.block(block);
        s
    }

    fn block(&mut self, b: &Block) {
        for st in b {
            match st {
                Stat::Local(ids, es) => {
                    es.iter().for_each(|e| self.expr(e));
                    for (id, e) in ids.iter().zip(es) {
                        let shape = self.shape(e);
                        self.give(*id, shape);
                    }
                }
                Stat::Assign(ts, es) => {
                    ts.iter().chain(es).for_each(|e| self.expr(e));
                    for (t, e) in ts.iter().zip(es) {
                        if let Expr::Local(id) = t {
                            let shape = self.shape(e);
                            self.give(*id, shape);
                        }
                    }
                }
                Stat::Call(e) => self.expr(e),
                Stat::Do(b) => self.block(b),
                Stat::While(e, b) | Stat::Repeat(b, e) => {
                    self.expr(e);
                    self.block(b);
                }
                Stat::If(arms, otherwise) => {
                    for (e, b) in arms {
                        self.expr(e);
                        self.block(b);
                    }
                    if let Some(b) = otherwise {
                        self.block(b);
                    }
                }
                Stat::NumFor(_, a, z, step, b) => {
                    self.expr(a);
                    self.expr(z);
                    if let Some(s) = step {
                        self.expr(s);
                    }
                    self.block(b);
                }
                Stat::GenFor(_, es, b) => {
                    es.iter().for_each(|e| self.expr(e));
                    self.block(b);
                }
                // A function is a place to hide calls from this summary: not recognised.
                Stat::Function(..) => self.calls.push((Callee::Other, Vec::new())),
                Stat::Return(es) => {
                    es.iter().for_each(|e| self.expr(e));
                    let r = match es.as_slice() {
                        [] | [Expr::Nil] => Ret::Nil,
                        [Expr::Num(n)] if n.fract() == 0.0 => Ret::Num(*n as i64),
                        [Expr::Call(f, args)] if is_redis_call(f) => match args.as_slice() {
                            [Expr::Str(c), k]
                                if c.eq_ignore_ascii_case(b"pttl")
                                    && self.shape(k) == Shape::Key(1) =>
                            {
                                Ret::Pttl
                            }
                            _ => Ret::Other,
                        },
                        _ => Ret::Other,
                    };
                    self.rets.push(r);
                }
                Stat::Break => {}
            }
        }
    }

    fn give(&mut self, id: usize, shape: Shape) {
        let given = self.locals.entry(id).or_insert_with(|| shape.clone());
        if *given != shape {
            *given = Shape::Other;
        }
    }

    fn expr(&mut self, e: &Expr) {
        match e {
            Expr::Call(f, args) => {
                if is_redis_call(f) {
                    let cmd = match args.first() {
                        Some(Expr::Str(c)) => Callee::Name(c.to_ascii_lowercase()),
                        Some(a) => match self.shape(a) {
                            Shape::Arg(j) => Callee::Arg(j),
                            _ => Callee::Other,
                        },
                        None => Callee::Other,
                    };
                    let shapes = args.iter().skip(1).map(|a| self.shape(a)).collect();
                    self.calls.push((cmd, shapes));
                } else if !matches!(&**f, Expr::Global(_) | Expr::Index(..)) {
                    self.calls.push((Callee::Other, Vec::new()));
                }
                self.expr(f);
                args.iter().for_each(|a| self.expr(a));
            }
            Expr::Method(t, _, args) => {
                self.expr(t);
                args.iter().for_each(|a| self.expr(a));
            }
            Expr::Index(a, b) | Expr::Bin(_, a, b) => {
                self.expr(a);
                self.expr(b);
            }
            Expr::Un(_, a) => self.expr(a),
            Expr::Table(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.expr(k);
                    }
                    self.expr(v);
                }
            }
            // Calls inside a function body are not followed: not recognised.
            Expr::Function(_) => self.calls.push((Callee::Other, Vec::new())),
            _ => {}
        }
    }

    fn shape(&self, e: &Expr) -> Shape {
        let global_index = |e: &Expr, name: &str| match e {
            Expr::Index(t, k) if matches!(&**t, Expr::Global(g) if g == name) => match &**k {
                Expr::Num(n) if n.fract() == 0.0 && *n >= 1.0 => Some(Some(*n as usize)),
                _ => Some(None),
            },
            _ => None,
        };
        if let Some(i) = global_index(e, "KEYS") {
            return i.map_or(Shape::AnyKey, Shape::Key);
        }
        if let Some(Some(j)) = global_index(e, "ARGV") {
            return Shape::Arg(j);
        }
        match e {
            Expr::Str(s) => Shape::Str(s.clone()),
            Expr::Num(n) if n.fract() == 0.0 => Shape::Num(*n as i64),
            Expr::Un(crate::lua::parse::Un::Neg, a) => match &**a {
                Expr::Num(n) if n.fract() == 0.0 => Shape::Num(-(*n as i64)),
                _ => Shape::Other,
            },
            Expr::Bin(crate::lua::parse::Bin::Concat, a, _) => match self.shape(a) {
                Shape::Key(i) | Shape::Built(i) => Shape::Built(i),
                _ => Shape::Other,
            },
            // A local has the shape it was given, when it was only ever given one.
            Expr::Local(id) => self.locals.get(id).cloned().unwrap_or(Shape::Other),
            _ => Shape::Other,
        }
    }

    /// Calls of `cmd` (lower-case).
    fn calls_of<'a>(&'a self, cmd: &'a [u8]) -> impl Iterator<Item = &'a [Shape]> + 'a {
        self.calls.iter().filter_map(move |(c, a)| match c {
            Callee::Name(n) if n == cmd => Some(a.as_slice()),
            _ => None,
        })
    }

    fn has(&self, cmd: &[u8], pred: impl Fn(&[Shape]) -> bool) -> bool {
        self.calls_of(cmd).any(pred)
    }

    /// Every call names a command the summary knows, and every write is one of `allowed`
    /// (a command named by `ARGV[publish]` counts as a publish).
    fn writes_only(&self, allowed: &[&[u8]], publish: Option<usize>) -> bool {
        self.calls.iter().all(|(c, _)| match c {
            Callee::Name(n) => !WRITES.contains(&n.as_slice()) || allowed.contains(&n.as_slice()),
            Callee::Arg(j) => publish == Some(*j),
            Callee::Other => false,
        })
    }

    /// The `ARGV` index that names a publish command (`redis.call(ARGV[j], channel, msg)`), if
    /// exactly one does.
    fn publish_arg(&self) -> Option<usize> {
        let mut found = None;
        for (c, _) in &self.calls {
            if let Callee::Arg(j) = c {
                if found.is_some_and(|f| f != *j) {
                    return None;
                }
                found = Some(*j);
            }
        }
        found
    }

    /// Publishes (by name or by `ARGV[j]`) whose channel has shape `channel`.
    fn publishes_to(&self, channel: &Shape) -> bool {
        self.calls.iter().any(|(c, a)| {
            let publish = match c {
                Callee::Name(n) => n == b"publish" || n == b"spublish",
                Callee::Arg(_) => true,
                Callee::Other => false,
            };
            publish && a.first() == Some(channel)
        })
    }

    fn returns_only(&self, allowed: impl Fn(&Ret) -> bool) -> bool {
        self.rets.iter().all(allowed)
    }
}

fn is_str(s: &Shape, lit: &[u8]) -> bool {
    matches!(s, Shape::Str(v) if v.as_slice() == lit)
}

/// The read–write or fair lock operation a parsed script performs, if its effects match one.
pub fn recognise(block: &Block) -> Option<RedissonScript> {
    let mut u = KeyUse::default();
    key_use_block(block, &mut u);
    let r = Reader {
        s: Summary::of(block),
        n: u.max_literal,
        needs: u.max_literal.max(2),
    };
    if u.dynamic {
        return r.rw_renew();
    }
    let mode_read = r.s.has(b"hget", |a| {
        a.len() == 2 && a[0] == k(1) && is_str(&a[1], b"mode")
    });
    match r.n {
        1 if mode_read && r.s.writes_only(&[], None) => {
            r.s.returns_only(|r| matches!(r, Ret::Num(0 | 1)))
                .then_some(r.script(RedissonOp::RwIsLocked, 0, 0, 0))
        }
        1 if mode_read && r.set_mode(b"write") => r.write_acquire(),
        2 if mode_read && r.set_mode(b"read") => r.read_acquire(),
        2 if mode_read => r.rw_force_unlock(),
        3 | 5 if mode_read => r.rw_unlock(),
        2 if r.s.has(b"hkeys", |a| a == [k(1)]) => r.rw_renew_one(),
        2 if r.s.has(b"lrange", |a| a.first() == Some(&k(1))) => r.fair_dequeue(),
        3 => r.fair_acquire(),
        4 | 5 if r.s.has(b"lindex", |a| a.first() == Some(&k(2))) => r.fair_unlock(),
        _ => None,
    }
}

/// `KEYS[i]`.
fn k(i: usize) -> Shape {
    Shape::Key(i)
}

/// What an acquisition answers: nil (taken) or the time the lock has left.
fn acquire_returns(r: &Ret) -> bool {
    matches!(r, Ret::Nil | Ret::Pttl)
}

/// A script's effects, read for one Redisson operation each.
struct Reader {
    s: Summary,
    /// The highest literal `KEYS[i]` the script names.
    n: usize,
    /// The keys a call must give (at least two).
    needs: usize,
}

impl Reader {
    /// The operation found, with where its arguments sit.
    fn script(
        &self,
        op: RedissonOp,
        field_arg: usize,
        ttl_arg: usize,
        publish_arg: usize,
    ) -> RedissonScript {
        RedissonScript {
            op,
            field_arg,
            ttl_arg,
            publish_arg,
            keys: if matches!(op, RedissonOp::WriteAcquire | RedissonOp::RwIsLocked) {
                1
            } else {
                self.needs
            },
        }
    }

    /// The caller's field: `ARGV[f]` counted by HINCRBY on `KEYS[1]` by `by`.
    fn counted(&self, by: i64) -> Option<usize> {
        self.s.calls_of(b"hincrby").find_map(|a| match a {
            [Shape::Key(1), Shape::Arg(f), Shape::Num(n)] if *n == by => Some(*f),
            _ => None,
        })
    }

    /// The TTL: `ARGV[t]` given to PEXPIRE of `KEYS[1]` (or of any key, with `any`).
    fn ttl(&self, any: bool) -> Option<usize> {
        self.s.calls_of(b"pexpire").find_map(|a| match a {
            [key, Shape::Arg(t)] if any || *key == k(1) => Some(*t),
            _ => None,
        })
    }

    /// Whether the script sets the lock's mode to `m`.
    fn set_mode(&self, m: &[u8]) -> bool {
        self.s.has(b"hset", |a| {
            a.len() == 3 && a[0] == k(1) && is_str(&a[1], b"mode") && is_str(&a[2], m)
        })
    }

    /// The read-lock watchdog (keys from a loop): HGET of each lock's fields and PEXPIREs,
    /// nothing else.
    fn rw_renew(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let renews = s.has(b"pexpire", |a| a.first() == Some(&Shape::AnyKey))
            && s.has(b"pexpire", |a| matches!(a.first(), Some(Shape::Other)))
            && s.has(b"hget", |a| a.first() == Some(&Shape::AnyKey));
        let t = self.ttl(true)?;
        (self.n == 0
            && renews
            && s.writes_only(&[b"pexpire"], None)
            && s.returns_only(|r| *r == Ret::Other))
        .then_some(self.script(RedissonOp::RwRenew, 0, t, 0))
    }

    /// Write acquisition: creates {mode: write, field: 1}, or counts a re-entry.
    fn write_acquire(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let f = self.counted(1)?;
        let t = self.ttl(false)?;
        let creates = s.has(b"hset", |a| a == [k(1), Shape::Arg(f), Shape::Num(1)]);
        (creates
            && f != t
            && s.writes_only(&[b"hset", b"hincrby", b"pexpire"], None)
            && s.returns_only(acquire_returns)
            && s.rets.contains(&Ret::Pttl))
        .then_some(self.script(RedissonOp::WriteAcquire, f, t, 0))
    }

    /// Read acquisition: one hold more, and a timeout key per hold built from `KEYS[2]`.
    fn read_acquire(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let f = self.counted(1)?;
        let t = self.ttl(false)?;
        let creates = s.has(b"hset", |a| a == [k(1), Shape::Arg(f), Shape::Num(1)]);
        let timeouts = s.has(b"set", |a| a.first() == Some(&Shape::Built(2)))
            && s.has(b"pexpire", |a| a == [Shape::Built(2), Shape::Arg(t)]);
        (creates
            && timeouts
            && f != t
            && s.writes_only(&[b"hset", b"hincrby", b"pexpire", b"set"], None)
            && s.returns_only(acquire_returns)
            && s.rets.contains(&Ret::Pttl))
        .then_some(self.script(RedissonOp::ReadAcquire, f, t, 0))
    }

    /// Forced unlock by mode: deletes the lock and publishes, nothing else.
    fn rw_force_unlock(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let p = s.publish_arg();
        (s.has(b"del", |a| a == [k(1)])
            && s.publishes_to(&k(2))
            && s.writes_only(&[b"del", b"publish", b"spublish"], p)
            && s.returns_only(|r| matches!(r, Ret::Num(0 | 1))))
        .then_some(self.script(RedissonOp::RwForceUnlock, 0, 0, p.unwrap_or(0)))
    }

    /// Unlock with its latch (`KEYS[n]`): one hold less, the lock deleted and published
    /// when none is left.
    fn rw_unlock(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let f = self.counted(-1)?;
        let p = s.publish_arg();
        let latch = s.has(b"get", |a| a == [k(self.n)])
            && s.has(b"set", |a| {
                a.len() == 4 && a[0] == k(self.n) && is_str(&a[2], b"px")
            });
        let timeouts = self.n == 3 || s.has(b"del", |a| a.first() == Some(&Shape::Built(3)));
        (latch
            && timeouts
            && s.has(b"del", |a| a == [k(1)])
            && s.publishes_to(&k(2))
            && s.writes_only(
                &[
                    b"set",
                    b"del",
                    b"hdel",
                    b"hincrby",
                    b"pexpire",
                    b"hset",
                    b"publish",
                    b"spublish",
                ],
                p,
            )
            && s.returns_only(|r| matches!(r, Ret::Nil | Ret::Num(0 | 1) | Ret::Other)))
        .then_some(self.script(RedissonOp::RwUnlock, f, 0, p.unwrap_or(0)))
    }

    /// The single-lock read renewal: the caller's field read, then only PEXPIREs (of the lock
    /// and of each hold's timeout key built from `KEYS[2]`).
    fn rw_renew_one(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let f = s.calls_of(b"hget").find_map(|a| match a {
            [Shape::Key(1), Shape::Arg(f)] => Some(*f),
            _ => None,
        })?;
        let t = self.ttl(false)?;
        (f != t
            && s.has(b"pexpire", |a| a == [Shape::Built(2), Shape::Arg(t)])
            && s.writes_only(&[b"pexpire"], None)
            && s.rets.contains(&Ret::Num(1))
            && s.returns_only(|r| matches!(r, Ret::Num(0 | 1))))
        .then_some(self.script(RedissonOp::RwRenewOne, f, t, 0))
    }

    /// `acquireFailed`: leaves the queue (`KEYS[1]`) and the timeout set (`KEYS[2]`).
    fn fair_dequeue(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let f = s.calls_of(b"zrem").find_map(|a| match a {
            [Shape::Key(2), Shape::Arg(f)] => Some(*f),
            _ => None,
        })?;
        (s.has(b"lrem", |a| {
            a.len() == 3 && a[0] == k(1) && a[2] == Shape::Arg(f)
        }) && s.writes_only(&[b"zrem", b"lrem", b"zincrby"], None)
            && s.rets.is_empty())
        .then_some(self.script(RedissonOp::FairDequeue, f, 0, 0))
    }

    /// Fair acquisition: first in the queue (`KEYS[2]`) and free, or a re-entry.
    fn fair_acquire(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let f = self.counted(1)?;
        let t = self.ttl(false)?;
        let creates = s.has(b"hset", |a| a == [k(1), Shape::Arg(f), Shape::Num(1)]);
        let queue = s.has(b"lindex", |a| a.first() == Some(&k(2)))
            && s.has(b"zscore", |a| a.first() == Some(&k(3)))
            && s.has(b"exists", |a| a == [k(1)]);
        if !(creates && queue && f != t) {
            return None;
        }
        let enqueues = s.has(b"rpush", |a| a == [k(2), Shape::Arg(f)])
            && s.has(b"zadd", |a| {
                a.len() == 3 && a[0] == k(3) && a[2] == Shape::Arg(f)
            });
        let base: &[&[u8]] = &[
            b"hset", b"hincrby", b"pexpire", b"lpop", b"zrem", b"zincrby",
        ];
        if enqueues {
            let mut w = base.to_vec();
            w.extend([&b"rpush"[..], b"zadd"]);
            (s.writes_only(&w, None)
                && s.rets.contains(&Ret::Nil)
                && s.returns_only(|r| matches!(r, Ret::Nil | Ret::Other)))
            .then_some(self.script(RedissonOp::FairAcquire, f, t, 0))
        } else {
            (s.writes_only(base, None) && s.returns_only(|r| matches!(r, Ret::Nil | Ret::Num(1))))
                .then_some(self.script(RedissonOp::FairTryAcquire, f, t, 0))
        }
    }

    /// Fair unlock (with its latch in `KEYS[5]`) or forced unlock: the next waiter in the queue
    /// is told on its own channel, `KEYS[4] .. ':' .. its id`.
    fn fair_unlock(&self) -> Option<RedissonScript> {
        let s = &self.s;
        let p = s.publish_arg();
        let base = s.has(b"del", |a| a == [k(1)])
            && s.publishes_to(&Shape::Built(4))
            && s.has(b"zscore", |a| a.first() == Some(&k(3)));
        if !base {
            return None;
        }
        match self.counted(-1) {
            Some(f) if self.n == 5 => {
                let latch = s.has(b"get", |a| a == [k(5)])
                    && s.has(b"set", |a| {
                        a.len() == 4 && a[0] == k(5) && is_str(&a[2], b"px")
                    });
                (latch
                    && s.writes_only(
                        &[
                            b"set",
                            b"del",
                            b"hincrby",
                            b"pexpire",
                            b"lpop",
                            b"zrem",
                            b"publish",
                            b"spublish",
                        ],
                        p,
                    )
                    && s.returns_only(|r| matches!(r, Ret::Nil | Ret::Num(0 | 1) | Ret::Other)))
                .then_some(self.script(RedissonOp::FairUnlock, f, 0, p.unwrap_or(0)))
            }
            None if self.n == 4 => (s
                .writes_only(&[b"del", b"lpop", b"zrem", b"publish", b"spublish"], p)
                && s.returns_only(|r| matches!(r, Ret::Num(0 | 1))))
            .then_some(self.script(RedissonOp::FairForceUnlock, 0, 0, p.unwrap_or(0))),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/tests/clients/lua/{name}.lua",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn of(body: &[u8]) -> Option<RedissonScript> {
        recognise(&crate::lua::parse_script(body).ok()?)
    }

    fn op(name: &str) -> Option<RedissonOp> {
        of(&lua(name)).map(|s| s.op)
    }

    /// Redisson's scripts, byte for byte (tests/clients/lua), each recognised as what it does,
    /// with its field, TTL and publish command where they are.
    #[test]
    fn redisson_read_write_and_fair_scripts_are_recognised() {
        use RedissonOp::*;
        let want = [
            ("redisson_rw_read_lock", ReadAcquire, 2, 1, 0, 2),
            ("redisson_rw_write_lock", WriteAcquire, 2, 1, 0, 1),
            ("redisson_rw_read_unlock", RwUnlock, 2, 0, 3, 5),
            ("redisson_rw_write_unlock", RwUnlock, 3, 0, 4, 3),
            ("redisson_rw_read_forceUnlock", RwForceUnlock, 0, 0, 2, 2),
            ("redisson_rw_write_forceUnlock", RwForceUnlock, 0, 0, 2, 2),
            ("redisson_rw_ReadLockTask_chunk", RwRenew, 0, 1, 0, 2),
            ("redisson_fair_lock", FairAcquire, 2, 1, 0, 3),
            ("redisson_fair_tryLock", FairTryAcquire, 2, 1, 0, 3),
            ("redisson_fair_unlock", FairUnlock, 3, 0, 5, 5),
            ("redisson_fair_forceUnlock", FairForceUnlock, 0, 0, 3, 4),
            ("redisson_fair_acquireFailed", FairDequeue, 1, 0, 0, 2),
            ("redisson_rw_read_isLocked", RwIsLocked, 0, 0, 0, 1),
            ("redisson_rw_read_renew_3x", RwRenewOne, 2, 1, 0, 2),
            ("redisson_rw_read_unlock_3x", RwUnlock, 2, 0, 3, 5),
        ];
        for (name, op, field_arg, ttl_arg, publish_arg, keys) in want {
            assert_eq!(
                of(&lua(name)),
                Some(RedissonScript {
                    op,
                    field_arg,
                    ttl_arg,
                    publish_arg,
                    keys,
                }),
                "{name}"
            );
        }
    }

    /// Spelling does not matter: spacing, quotes, local names.
    #[test]
    fn respelled_scripts_are_recognised_too() {
        let body = String::from_utf8(lua("redisson_rw_write_lock")).unwrap();
        let respelled = body
            .replace('\'', "\"")
            .replace("local mode", "local m")
            .replace("(mode", "(m")
            .replace("; ", "\n  ");
        assert_eq!(
            of(respelled.as_bytes()).map(|s| s.op),
            Some(RedissonOp::WriteAcquire)
        );
    }

    /// Near misses stay unrecognised: an extra write, a missing mode, another key written.
    #[test]
    fn near_misses_are_not_recognised() {
        let write = String::from_utf8(lua("redisson_rw_write_lock")).unwrap();
        for bad in [
            write.replace(
                "return nil; end; if",
                "redis.call('del', 'x'); return nil; end; if",
            ),
            write.replace("'mode', 'write'", "'mode', 'other'"),
            write.replace(
                "redis.call('hset', KEYS[1], ARGV[2], 1)",
                "redis.call('hset', KEYS[1], ARGV[2], 2)",
            ),
            write.replace("return redis.call('pttl', KEYS[1]);", "return 0;"),
            write.replace(
                "redis.call('pexpire', KEYS[1], ARGV[1]); return nil",
                "return nil",
            ),
        ] {
            assert_eq!(of(bad.as_bytes()), None, "{bad}");
        }
        let read = String::from_utf8(lua("redisson_rw_read_lock")).unwrap();
        let bad = read.replace(
            "redis.call('set', key, 1); ",
            "redis.call('set', key, 1); redis.call('flushall'); ",
        );
        assert_eq!(of(bad.as_bytes()), None);
        let fair = String::from_utf8(lua("redisson_fair_unlock")).unwrap();
        let bad = fair.replace(
            "redis.call('del', KEYS[1]); ",
            "redis.call('del', KEYS[1]); redis.call('del', KEYS[6]); ",
        );
        assert_eq!(of(bad.as_bytes()), None);
        // Redisson's plain RLock is the hash-lock recogniser's, not this one's.
        assert_eq!(op("redisson_lock"), None);
        assert_eq!(op("redisson_unlock"), None);
    }

    /// A long script is summarised in one pass and not recognised (bounded work on any input).
    #[test]
    fn long_scripts_are_summarised_and_refused() {
        let mut body = String::new();
        for i in 0..800 {
            body += &format!("local k{i} = KEYS[1] .. ':' .. {i} redis.call('set', k{i}, 1) ");
        }
        body += "return redis.call('pttl', KEYS[1])";
        let block = crate::lua::parse_script(body.as_bytes()).unwrap();
        assert_eq!(recognise(&block), None);
    }

    /// These scripts are not mistaken for other lock operations by the general recogniser.
    #[test]
    fn the_general_recognisers_leave_them_alone() {
        for name in [
            "redisson_rw_read_lock",
            "redisson_rw_write_lock",
            "redisson_rw_read_unlock",
            "redisson_rw_write_unlock",
            "redisson_rw_read_forceUnlock",
            "redisson_rw_write_forceUnlock",
            "redisson_rw_ReadLockTask_chunk",
            "redisson_fair_lock",
            "redisson_fair_tryLock",
            "redisson_fair_unlock",
            "redisson_fair_forceUnlock",
            "redisson_fair_acquireFailed",
            "redisson_rw_read_isLocked",
            "redisson_rw_read_renew_3x",
            "redisson_rw_read_unlock_3x",
        ] {
            let block = crate::lua::parse_script(&lua(name)).unwrap();
            assert!(super::super::classify(&block).is_none(), "{name}");
            assert!(
                super::super::hash::recognise_block(&lua(name), &block).is_none(),
                "{name}"
            );
        }
    }
}
