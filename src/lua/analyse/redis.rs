//! The Redis commands a script calls (`redis.call` / `redis.pcall`): their effect on the
//! symbolic keys and the value each answers; hash commands only in a hash lock's layout.

use super::machine::*;
use super::states::*;
use super::values::*;
use crate::lua::parse::*;

impl Machine<'_> {
    /// Executes one `redis.call`: the command's name decides who models it (a publish, a hash
    /// command in a hash lock's layout, or one of the string and list commands below).
    pub(super) fn redis(&mut self, args: Vec<Val>) -> R<Val> {
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
        self.command(&cmd, &rest)
    }

    /// The effect and answer of one string or list command (`cmd` in lower case, `unlink`
    /// read as `del`). Any other command makes the run foreign, except in a hash lock's
    /// layout, which touches nothing else: that stops at once.
    fn command(&mut self, cmd: &[u8], rest: &[Val]) -> R<Val> {
        match (cmd, rest) {
            (b"get", [k]) => self.get(k),
            (b"lpush", [k, items @ ..]) if !items.is_empty() => self.lpush(k, items),
            (b"exists", ks) if !ks.is_empty() => self.exists(ks),
            // The lock's keys are strings, hashes (a hash lock) or lists (a signal list).
            (b"type", [k]) => Ok(Val::KeyType(match &self.keys[key(k)?].value {
                None => b"none",
                Some(Val::Table(_)) => b"list",
                Some(Val::Hash { .. }) => b"hash",
                Some(_) => b"string",
            })),
            (b"pttl" | b"ttl", [k]) => self.ttl(cmd == b"pttl", k),
            (b"del", ks) if !ks.is_empty() => self.del(ks),
            (b"set", [k, v, opts @ ..]) => self.set(k, v, opts),
            (b"setex" | b"psetex", [k, t, v]) => self.setex(cmd == b"setex", k, t, v),
            // A hash lock's token counter (Redisson's `RFencedLock`): only modelled there.
            (b"incr", [k]) if self.layout.field != 0 => self.incr(k),
            (b"mget", ks) if !ks.is_empty() => self.mget(ks),
            (b"msetnx" | b"mset", pairs) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
                self.mset(cmd == b"msetnx", pairs)
            }
            (b"setnx", [k, v]) => self.setnx(k, v),
            (b"getrange", [k, Val::Num(0), Val::Sum(end)]) => self.getrange(k, end),
            (b"pexpire" | b"expire", [k, t, flag @ ..]) if flag.len() <= 1 => {
                self.expire(cmd == b"expire", k, t, flag)
            }
            // A hash lock touches nothing else: stop at once.
            _ if self.layout.field != 0 => fail("a command a hash lock does not use"),
            _ => {
                self.foreign = true;
                Ok(Val::Opaque)
            }
        }
    }

    /// `GET k`.
    fn get(&self, k: &Val) -> R<Val> {
        Ok(match &self.keys[key(k)?].value {
            Some(Val::Table(_)) => return fail("reads a list as a string"),
            Some(Val::Hash { .. }) => return fail("reads a hash as a string"),
            v => v.clone().unwrap_or(Val::Bool(false)),
        })
    }

    /// `LPUSH k items...`: the list (a signal list) as a table, head first.
    fn lpush(&mut self, k: &Val, items: &[Val]) -> R<Val> {
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
        Ok(Val::Num(len))
    }

    /// `EXISTS ks...`.
    fn exists(&self, ks: &[Val]) -> R<Val> {
        let mut n = 0;
        for k in ks {
            n += i64::from(self.keys[key(k)?].value.is_some());
        }
        Ok(Val::Num(n))
    }

    /// `PTTL k` (`millis`) or `TTL k`: only the key's original TTL reads as a symbol.
    fn ttl(&self, millis: bool, k: &Val) -> R<Val> {
        let i = key(k)?;
        let now = &self.keys[i];
        Ok(match (&now.value, &now.ttl) {
            (None, _) => Val::Num(-2),
            (_, TtlNow::None) => Val::Num(-1),
            (_, TtlNow::Orig) if millis => Val::Pttl(i + 1),
            (_, TtlNow::Orig) => Val::Ttl(i + 1),
            _ => return fail("reads back a TTL it set"),
        })
    }

    /// `DEL ks...` (and `UNLINK`).
    fn del(&mut self, ks: &[Val]) -> R<Val> {
        let mut n = 0;
        for k in ks {
            let i = key(k)?;
            n += i64::from(self.keys[i].value.is_some());
            self.keys[i] = KeyNow {
                value: None,
                ttl: TtlNow::None,
            };
        }
        Ok(Val::Num(n))
    }

    /// `SET k v [NX|XX] [GET] [KEEPTTL] [PX|EX t]`.
    fn set(&mut self, k: &Val, v: &Val, opts: &[Val]) -> R<Val> {
        let i = key(k)?;
        let value = match v {
            Val::NumArg(j) => Val::Arg(*j),
            v @ (Val::Arg(_) | Val::Str(_) | Val::Num(_)) => v.clone(),
            v => return fail(format!("sets a key to {v}")),
        };
        let o = set_options(opts)?;
        let exists = self.keys[i].value.is_some();
        let old = match &self.keys[i].value {
            Some(Val::Table(_) | Val::Hash { .. }) if o.get => {
                return fail("SET ... GET on a key of another type");
            }
            v => v.clone().unwrap_or(Val::Bool(false)),
        };
        Ok(if (o.nx && exists) || (o.xx && !exists) {
            if o.get { old } else { Val::Bool(false) }
        } else {
            let ttl = match o.ttl {
                Some(t) => t,
                None if o.keep && exists => self.keys[i].ttl.clone(),
                None => TtlNow::None,
            };
            self.keys[i] = KeyNow {
                value: Some(value),
                ttl,
            };
            if o.get { old } else { Val::Status }
        })
    }

    /// `SETEX k t v` (`seconds`) or `PSETEX k t v`.
    fn setex(&mut self, seconds: bool, k: &Val, t: &Val, v: &Val) -> R<Val> {
        let i = key(k)?;
        let value = match v {
            v @ (Val::Arg(_) | Val::Str(_) | Val::Num(_)) => v.clone(),
            v => return fail(format!("sets a key to {v}")),
        };
        self.keys[i] = KeyNow {
            value: Some(value),
            ttl: ttl_set(seconds, t)?,
        };
        Ok(Val::Status)
    }

    /// `INCR k`, a hash lock's token counter.
    fn incr(&mut self, k: &Val) -> R<Val> {
        let i = key(k)?;
        let now = match &self.keys[i].value {
            None => Val::Num(1),
            Some(v @ (Val::Num(_) | Val::Many(_))) => add(v.clone(), Val::Num(1))?,
            Some(v) => return fail(format!("increments {v}")),
        };
        self.keys[i].value = Some(now.clone());
        Ok(now)
    }

    /// `MGET ks...`.
    fn mget(&self, ks: &[Val]) -> R<Val> {
        let mut out = Vec::with_capacity(ks.len());
        for k in ks {
            match &self.keys[key(k)?].value {
                Some(Val::Table(_)) => return fail("reads a list as a string"),
                v => out.push(v.clone().unwrap_or(Val::Bool(false))),
            }
        }
        Ok(Val::Table(out))
    }

    /// `MSETNX k v ...` (`nx`) or `MSET k v ...`.
    fn mset(&mut self, nx: bool, pairs: &[Val]) -> R<Val> {
        let mut writes = Vec::with_capacity(pairs.len() / 2);
        for kv in pairs.chunks(2) {
            writes.push((key(&kv[0])?, string_value(&kv[1])?));
        }
        if nx && writes.iter().any(|(i, _)| self.keys[*i].value.is_some()) {
            return Ok(Val::Num(0));
        }
        for (i, value) in writes {
            self.keys[i] = KeyNow {
                value: Some(value),
                ttl: TtlNow::None,
            };
        }
        Ok(if nx { Val::Num(1) } else { Val::Status })
    }

    /// `SETNX k v`.
    fn setnx(&mut self, k: &Val, v: &Val) -> R<Val> {
        let i = key(k)?;
        let value = string_value(v)?;
        if self.keys[i].value.is_some() {
            return Ok(Val::Num(0));
        }
        self.keys[i] = KeyNow {
            value: Some(value),
            ttl: TtlNow::None,
        };
        Ok(Val::Num(1))
    }

    /// `GETRANGE k 0 n-1`, the head of the key's value (see [`Run::prefix`]).
    fn getrange(&self, k: &Val, end: &[Val]) -> R<Val> {
        let i = key(k)?;
        let [Val::Arg(j), Val::Num(-1)] = end else {
            return fail("a GETRANGE it does not model");
        };
        Ok(match &self.keys[i].value {
            None => Val::Head(Box::new(Val::Str(Vec::new())), *j),
            Some(v @ (Val::Arg(_) | Val::Other(_) | Val::Str(_))) => {
                Val::Head(Box::new(v.clone()), *j)
            }
            Some(v) => return fail(format!("GETRANGE of {v}")),
        })
    }

    /// `EXPIRE k t [flag]` (`seconds`) or `PEXPIRE k t [flag]`.
    fn expire(&mut self, seconds: bool, k: &Val, t: &Val, flag: &[Val]) -> R<Val> {
        let i = key(k)?;
        let ttl = ttl_set(seconds, t)?;
        let sets = match flag {
            [] => true,
            [Val::Str(f)] => expire_flag(f, &self.keys[i].ttl, &ttl)?,
            _ => return fail("an EXPIRE option that is not a literal"),
        };
        if self.keys[i].value.is_none() || !sets {
            return Ok(Val::Num(0));
        }
        self.keys[i].ttl = ttl;
        Ok(Val::Num(1))
    }
}

/// The index of the key `v` names, which must be one of `KEYS`.
fn key(v: &Val) -> R<usize> {
    match v {
        Val::Key(i) => Ok(*i - 1),
        Val::Built(i) => fail(format!(
            "touches a key not given in KEYS (a name built from KEYS[{i}])"
        )),
        v => fail(format!("touches a key not given in KEYS ({v})")),
    }
}

/// A TTL's value: a number, an argument, or a sum of them.
fn ttl_value(v: &Val) -> R<Val> {
    match v {
        Val::Arg(_) | Val::NumArg(_) | Val::Sum(_) | Val::Num(_) => numeric(v.clone()),
        v => fail(format!("a TTL of {v}")),
    }
}

/// A TTL in milliseconds or seconds; `ARGV[j] * 1000` milliseconds is `ARGV[j]` seconds.
fn ttl_set(seconds: bool, v: &Val) -> R<TtlNow> {
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
}

/// The options of one `SET`.
#[derive(Default)]
struct SetOptions {
    nx: bool,
    xx: bool,
    keep: bool,
    /// `GET` (Redis 6.2, with `NX` from 7.0): the reply is the old value (nil for none),
    /// whether or not the write happened.
    get: bool,
    ttl: Option<TtlNow>,
}

/// Reads `SET`'s options, literals all.
fn set_options(opts: &[Val]) -> R<SetOptions> {
    let mut out = SetOptions::default();
    let mut o = 0;
    while o < opts.len() {
        let Val::Str(name) = &opts[o] else {
            return fail("a SET option that is not a literal");
        };
        match name.to_ascii_lowercase().as_slice() {
            b"nx" => out.nx = true,
            b"xx" => out.xx = true,
            b"keepttl" => out.keep = true,
            b"get" => out.get = true,
            unit @ (b"px" | b"ex") if o + 1 < opts.len() => {
                out.ttl = Some(ttl_set(unit == b"ex", &opts[o + 1])?);
                o += 1;
            }
            _ => return fail("a SET option it does not model"),
        }
        o += 1;
    }
    Ok(out)
}

/// Whether `EXPIRE`/`PEXPIRE` with option `flag` (Redis 7.0: `NX`, `XX`, `GT`, `LT`) sets the
/// TTL `new` on a key whose TTL is `now`. `NX` and `XX` depend only on whether the key has a
/// TTL. `GT` and `LT` compare with the time the key has left: decided for a key without a TTL
/// (counted as infinite) and for one this script set to the same value, refused otherwise,
/// since each master counts the time left on its own clock.
pub(super) fn expire_flag(flag: &[u8], now: &TtlNow, new: &TtlNow) -> R<bool> {
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

impl Machine<'_> {
    /// `table.insert(t, v)` appending a value to a table held in a local (a reply being built).
    pub(super) fn table_insert(&mut self, args: &[Expr]) -> R<Val> {
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
    pub(super) fn publish(&mut self, command: Val, rest: &[Val]) -> R<Val> {
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
    pub(super) fn hash(&mut self, cmd: Vec<u8>, rest: &[Val]) -> R<Val> {
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
