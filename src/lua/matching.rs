//! Matching runs against the lock operations: the one [`Op`], TTL argument, unit and reply
//! shape ([`Answer`]) that every run of a script matches, with what each run must have
//! called, written and answered for it. The layouts tried come from [`super::classify`].

use super::analyse::{self, Held, KeyNow, Run, TtlNow, Val, lit_val, reply_lit};
use crate::lockop::{Answer, Lit, Op, Replies, TtlUnit};

/// The highest `ARGV` index tried as the token's place.
pub(super) const MAX_TOKEN_ARG: usize = 8;

/// The base of the pseudo-argument index that stands for a TTL written in the script: index
/// `TTL_LITERAL + k` is the literal `k` (see [`ttl_val`]); no real argument index comes near.
pub(super) const TTL_LITERAL: usize = usize::MAX / 2;

/// Largest TTL literal taken for one (the proxy's `max_ttl_ms` applies on top, per call).
pub(super) const MAX_TTL_LITERAL: i64 = i32::MAX as i64;

/// The TTL value `ttl_arg` stands for in a run: `ARGV[ttl_arg]`, or a literal.
pub(super) fn ttl_val(ttl_arg: usize) -> Val {
    match ttl_arg.checked_sub(TTL_LITERAL) {
        Some(k) => Val::Num(k as i64),
        None => Val::Arg(ttl_arg),
    }
}
pub(super) fn has(r: &Run, j: usize, s: &[u8], yes: bool) -> bool {
    r.assumed
        .iter()
        .any(|(a, b, y)| *a == j && b == s && *y == yes)
}

pub(super) const OPS: [Op; 13] = [
    Op::Release,
    Op::Delete,
    Op::Inspect,
    Op::Acquire,
    Op::AcquireOrRefresh,
    // Taken in ms, refreshed in seconds: only where one unit does not fit (see `ttl_of`).
    Op::AcquireOrRefreshSeconds,
    Op::AcquireOrKeep,
    Op::Extend,
    Op::ExtendAdd,
    // Only where the ones above do not fit (with one key they are the same).
    Op::AcquireOrRefreshAll,
    Op::ReleaseAll,
    Op::Remaining,
    Op::Held,
];

pub(super) const ANSWERS: [Answer; 7] = [
    Answer::OneZero,
    Answer::Count,
    Answer::OkNil,
    Answer::OneMinusOne,
    Answer::Tristate,
    Answer::OkZero,
    Answer::ZeroOne,
];

/// The one operation, TTL argument, unit and reply shape that every run matches.
pub(super) fn side(runs: &[&Run]) -> Option<(Op, usize, TtlUnit, Answer)> {
    if runs.is_empty()
        || runs
            .iter()
            .any(|r| r.foreign || r.calls.iter().any(|(c, _)| c == b"publish"))
    {
        return None;
    }
    for op in OPS {
        let ttls: Vec<(usize, TtlUnit)> = if matches!(
            op,
            Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Held
        ) {
            vec![(2, TtlUnit::Millis)]
        } else if op == Op::Remaining {
            // The unit of the reply; there is no TTL argument.
            vec![(0, TtlUnit::Millis), (0, TtlUnit::Seconds)]
        } else {
            match ttl_of(runs, op) {
                Some(t) => vec![t],
                None => continue,
            }
        };
        for (ttl_arg, unit) in ttls {
            let timed = !matches!(
                op,
                Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Remaining | Op::Held
            );
            if timed && ttl_arg == runs[0].layout.token {
                continue;
            }
            for answer in
                ANSWERS
                    .into_iter()
                    .chain(constant_replies(runs, op, timed.then_some(ttl_arg)))
            {
                if runs.iter().all(|r| matches(r, op, ttl_arg, unit, answer)) {
                    return Some((op, ttl_arg, unit, answer));
                }
            }
        }
    }
    None
}

/// The constant replies `op` would need to explain these runs (see [`Answer::Const`]): the
/// reply of a run where it succeeds, of one where it is refused and, for a release, of one
/// where every key was missing. `None` when a reply is not a constant or success and refusal
/// look the same.
///
/// With `ttl` (an operation that sets the TTL `ARGV[ttl]`), a reply may also be that argument
/// (`return tonumber(ARGV[2])` or `return ARGV[2]` after setting it): a constant per call, bound
/// to each call's TTL (see [`Lit::TtlNum`]). A TTL reply must then differ from every other reply
/// for every TTL the proxy accepts (a positive integer), or the script stays unknown.
pub(super) fn constant_replies(runs: &[&Run], op: Op, ttl: Option<usize>) -> Option<Answer> {
    let reply_where = |f: &dyn Fn(&Run) -> bool| runs.iter().find(|r| f(r)).map(|r| &r.reply);
    let every = |r: &Run, h: Held| r.start.iter().all(|s| s.held == h);
    let strict_refresh =
        |r: &Run| r.start.iter().all(|s| s.held == Held::Token && s.ttl) && strict_success(r, op);
    let (ok, no, gone, again) = match op {
        Op::Release | Op::ReleaseAll => {
            let ok = reply_where(&|r| every(r, Held::Token))?;
            (
                ok,
                reply_where(&|r| every(r, Held::Other))?,
                reply_where(&|r| every(r, Held::Missing))?,
                ok,
            )
        }
        Op::Delete | Op::Inspect => return None,
        // `ok`: held by the caller; `no`: by another; `gone`: missing.
        Op::Held => {
            let ok = reply_where(&|r| every(r, Held::Token))?;
            let no = reply_where(&|r| every(r, Held::Other))?;
            let gone = reply_where(&|r| every(r, Held::Missing))?;
            if ok == no || ok == gone {
                return None;
            }
            (ok, no, gone, ok)
        }
        // `ok`: held without a TTL; `no` (and `gone`): not held.
        Op::Remaining => {
            let ok = reply_where(&|r| every(r, Held::Token) && r.start.iter().any(|s| !s.ttl))?;
            let no = reply_where(&|r| every(r, Held::Other))?;
            (ok, no, no, ok)
        }
        _ => {
            let no = reply_where(&|r| every(r, Held::Other))?;
            // A fresh grant: a run that succeeds from missing keys (else any success).
            let ok = reply_where(&|r| strict_success(r, op) && !strict_refresh(r))
                .or_else(|| reply_where(&|r| strict_success(r, op)))?;
            let again = reply_where(&strict_refresh).unwrap_or(ok);
            // An extension of one key may answer otherwise where the key is gone (the proxy
            // tells it from the masters' answers; over several keys it cannot).
            let gone = match op {
                Op::Extend | Op::ExtendAdd if runs.iter().all(|r| r.start.len() == 1) => {
                    reply_where(&|r| every(r, Held::Missing)).unwrap_or(no)
                }
                _ => no,
            };
            (ok, no, gone, again)
        }
    };
    let token = runs.first().map(|r| r.layout.token);
    let lit = |v: &Val| reply_lit(v, ttl, token);
    let replies = Replies {
        ok: lit(ok)?,
        no: lit(no)?,
        gone: lit(gone)?,
        again: lit(again)?,
    };
    let all = [replies.ok, replies.no, replies.gone, replies.again];
    if all.iter().any(|l| l.is_ttl()) && all.iter().any(|l| !l.is_ttl() && l.may_look_like_a_ttl())
    {
        return None;
    }
    let told_apart = replies.ok != replies.no && replies.again != replies.no;
    // A release that answers one constant whatever it found (`return 'OK'` after deleting
    // where the key held the token): its reply tells nothing, so it cannot be read as a grant.
    let one_answer = matches!(op, Op::Release | Op::ReleaseAll)
        && replies.no == replies.ok
        && replies.gone == replies.ok
        && replies.again == replies.ok;
    (told_apart || one_answer || op == Op::Remaining).then_some(Answer::Const(replies))
}

/// The TTL argument a successful run of `op` wrote (for a refresh in seconds, the one a run
/// that took the key wrote, in milliseconds: see [`Op::AcquireOrRefreshSeconds`]).
pub(super) fn ttl_of(runs: &[&Run], op: Op) -> Option<(usize, TtlUnit)> {
    let taken = |r: &&&Run| {
        op != Op::AcquireOrRefreshSeconds || r.start.iter().all(|s| s.held == Held::Missing)
    };
    let found = runs
        .iter()
        .filter(|r| strict_success(r, op))
        .filter(taken)
        .find_map(|r| match &r.end.first()?.ttl {
            TtlNow::Set { seconds, v } => {
                let arg = match (op, v) {
                    (Op::ExtendAdd, Val::Sum(t)) => match t.as_slice() {
                        [Val::Arg(d), Val::Pttl(1)] => *d,
                        _ => return None,
                    },
                    (Op::ExtendAdd, _) => return None,
                    (_, Val::Arg(d)) => *d,
                    (_, Val::Num(k)) if (1..=MAX_TTL_LITERAL).contains(k) => {
                        TTL_LITERAL + *k as usize
                    }
                    _ => return None,
                };
                let unit = if *seconds {
                    TtlUnit::Seconds
                } else {
                    TtlUnit::Millis
                };
                Some((arg, unit))
            }
            _ => None,
        });
    // Taken in milliseconds from an argument (the refresh then reads it in seconds).
    found.filter(|(arg, unit)| {
        op != Op::AcquireOrRefreshSeconds || (*unit == TtlUnit::Millis && *arg <= MAX_TOKEN_ARG)
    })
}

pub(super) fn strict_success(r: &Run, op: Op) -> bool {
    let all = |f: &dyn Fn(Held, bool) -> bool| r.start.iter().all(|s| f(s.held, s.ttl));
    match op {
        Op::Acquire => all(&|h, _| h == Held::Missing),
        Op::AcquireOrRefresh | Op::AcquireOrRefreshSeconds => {
            all(&|h, t| h == Held::Missing || (h == Held::Token && t))
        }
        // A key holding the token without a TTL is kept too (held for ever, as valid as any).
        Op::AcquireOrKeep => all(&|h, _| h != Held::Other),
        Op::Extend => all(&|h, t| h == Held::Token && t),
        Op::ExtendAdd => all(&|h, t| h == Held::Token && t),
        Op::AcquireOrRefreshAll => {
            all(&|h, _| h == Held::Missing) || all(&|h, t| h == Held::Token && t)
        }
        Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Remaining | Op::Held => false,
    }
}

/// The reply the proxy gives for a granted (`ok`) or refused operation (as `command::lock`).
pub(super) fn expected(
    answer: Answer,
    ok: bool,
    n: usize,
    ttl_arg: usize,
    token_arg: usize,
) -> Val {
    match (answer, ok) {
        (Answer::Const(c), true) => lit_val(c.ok, ttl_arg, token_arg),
        (Answer::Const(c), false) => lit_val(c.no, ttl_arg, token_arg),
        (Answer::OkNil | Answer::OkZero, true) => Val::Status,
        (Answer::OkNil, false) => Val::Nil,
        (Answer::Count, true) => Val::Num(n as i64),
        (Answer::OneMinusOne, false) => Val::Num(-1),
        (Answer::ZeroOne, ok) => Val::Num(i64::from(!ok)),
        (_, ok) => Val::Num(i64::from(ok)),
    }
}

/// Whether one run is the operation `op`, with the TTL in `ttl_arg` in `unit` and replies
/// shaped `answer`: what it must have written from its starting state, and what answered.
pub(super) fn matches(r: &Run, op: Op, ttl_arg: usize, unit: TtlUnit, answer: Answer) -> bool {
    let trial = Trial::new(r, ttl_arg, unit, answer);
    match op {
        Op::Release => trial.release(),
        Op::ReleaseAll => trial.release_all(),
        Op::Remaining => trial.remaining(),
        Op::Delete => trial.delete(),
        Op::Held => trial.held(),
        Op::Inspect => trial.inspect(),
        Op::AcquireOrKeep => trial.acquire_or_keep(),
        _ => trial.acquire_or_extend(op),
    }
}

/// One run on trial against an operation's parameters, with its keys as they
/// started (`unchanged`: what an operation that writes nothing leaves).
struct Trial<'r> {
    r: &'r Run,
    ttl_arg: usize,
    unit: TtlUnit,
    answer: Answer,
    /// The number of keys.
    n: usize,
    token_arg: usize,
    unchanged: Vec<KeyNow>,
}

impl Trial<'_> {
    fn new(r: &Run, ttl_arg: usize, unit: TtlUnit, answer: Answer) -> Trial<'_> {
        Trial {
            r,
            ttl_arg,
            unit,
            answer,
            n: r.start.len(),
            token_arg: r.layout.token,
            unchanged: r
                .start
                .iter()
                .enumerate()
                .map(|(i, s)| KeyNow::start(i + 1, *s, r.layout.token))
                .collect(),
        }
    }

    /// The reply `shape` gives for success (`ok`) or refusal with this run's keys.
    fn expected(&self, shape: Answer, ok: bool) -> Val {
        expected(shape, ok, self.n, self.ttl_arg, self.token_arg)
    }

    /// The value a literal reply stands for in this run.
    fn lit(&self, l: Lit) -> Val {
        lit_val(l, self.ttl_arg, self.token_arg)
    }
}

impl Trial<'_> {
    /// An [`Op::Release`] run: the token's keys deleted, the others as they were.
    fn release(&self) -> bool {
        let end: Vec<KeyNow> = self
            .unchanged
            .iter()
            .map(|k| match k.value {
                Some(Val::Arg(t)) if t == self.r.layout.token => KeyNow {
                    value: None,
                    ttl: TtlNow::None,
                },
                _ => k.clone(),
            })
            .collect();
        let deleted = self
            .r
            .start
            .iter()
            .filter(|s| s.held == Held::Token)
            .count();
        let missing = self
            .r
            .start
            .iter()
            .filter(|s| s.held == Held::Missing)
            .count();
        let reply = match self.answer {
            Answer::Count => Val::Num(deleted as i64),
            Answer::Tristate if deleted == self.n => Val::Num(1),
            Answer::Tristate if deleted + missing == self.n => Val::Num(-1),
            Answer::Tristate => Val::Num(0),
            Answer::Const(c) if deleted + missing == self.n && deleted < self.n => self.lit(c.gone),
            shape => self.expected(shape, deleted == self.n),
        };
        self.r.end == end && self.r.reply == reply
    }

    /// An [`Op::ReleaseAll`] run: every key deleted when all hold the token, none otherwise.
    fn release_all(&self) -> bool {
        let mine = self.r.start.iter().all(|s| s.held == Held::Token);
        let end: Vec<KeyNow> = if mine {
            vec![
                KeyNow {
                    value: None,
                    ttl: TtlNow::None,
                };
                self.n
            ]
        } else {
            self.unchanged.clone()
        };
        let reply = match self.answer {
            Answer::Count => Val::Num(if mine { self.n as i64 } else { 0 }),
            Answer::Tristate => return false,
            Answer::Const(c) if self.r.start.iter().all(|s| s.held == Held::Missing) => {
                self.lit(c.gone)
            }
            shape => self.expected(shape, mine),
        };
        self.r.end == end && self.r.reply == reply
    }

    /// An [`Op::Remaining`] run: nothing written, the time the token's key has left answered
    /// (the smaller of two).
    fn remaining(&self) -> bool {
        let Answer::Const(c) = self.answer else {
            return false;
        };
        let in_unit = |k: usize| match self.unit {
            TtlUnit::Millis => Val::Pttl(k),
            TtlUnit::Seconds => Val::Ttl(k),
        };
        if self.r.end != self.unchanged {
            return false;
        }
        if !self.r.start.iter().all(|s| s.held == Held::Token) {
            return self.r.reply == self.lit(c.no);
        }
        if !self.r.start.iter().all(|s| s.ttl) {
            // Held, a key without a TTL (never one the proxy granted): the proxy answers
            // `ok`; the script may also self.answer the TTL of a key that has one.
            return self.r.reply == self.lit(c.ok)
                || (1..=self.n).any(|k| self.r.start[k - 1].ttl && self.r.reply == in_unit(k));
        }
        match self.n {
            1 => self.r.reply == in_unit(1),
            // The smallest of two TTLs, by the order the run assumed.
            2 => {
                let first = |a: usize, b: usize| {
                    self.r.assumed.iter().find_map(|(j, s, yes)| {
                        (*j == analyse::ORDER && *s == analyse::order(a, b)).then_some(*yes)
                    })
                };
                let least = match (first(1, 2), first(2, 1)) {
                    (Some(true), _) | (_, Some(false)) => 1,
                    (_, Some(true)) | (Some(false), _) => 2,
                    (None, None) => return false,
                };
                self.r.reply == in_unit(least)
            }
            _ => false,
        }
    }

    /// An [`Op::Delete`] run: every key gone, whoever held it.
    fn delete(&self) -> bool {
        let gone = KeyNow {
            value: None,
            ttl: TtlNow::None,
        };
        let existed = self
            .r
            .start
            .iter()
            .filter(|s| s.held != Held::Missing)
            .count();
        let reply = match self.answer {
            Answer::Count => Val::Num(existed as i64),
            shape => self.expected(shape, existed == self.n),
        };
        self.r.end.iter().all(|k| *k == gone) && self.r.reply == reply
    }

    /// An [`Op::Held`] run: nothing written, the answer telling whose the key is.
    fn held(&self) -> bool {
        let Answer::Const(c) = self.answer else {
            return false;
        };
        let want = match self.r.start[0].held {
            Held::Token => c.ok,
            Held::Other => c.no,
            Held::Missing => c.gone,
        };
        self.n == 1 && self.r.end == self.unchanged && self.r.reply == self.lit(want)
    }

    /// An [`Op::Inspect`] run: nothing written, the value and PTTL answered.
    fn inspect(&self) -> bool {
        if self.n != 1 || self.answer != Answer::OneZero {
            return false;
        }
        let k = &self.unchanged[0];
        let value = k.value.clone().unwrap_or(Val::Nil);
        let ttl = match (&k.value, &k.ttl) {
            (None, _) => Val::Num(-2),
            (_, TtlNow::None) => Val::Num(-1),
            _ => Val::Pttl(1),
        };
        let reply = if value == Val::Nil {
            Val::Table(Vec::new())
        } else {
            Val::Table(vec![value, ttl])
        };
        // Redis cuts a table at its first nil, and `false` (a missing key) becomes nil:
        // `{false, -2}` is answered as `[nil, -2]`.
        let reply_missing = Val::Table(vec![Val::Nil, Val::Num(-2)]);
        let got = match &self.r.reply {
            Val::Table(t) if t.first() == Some(&Val::Nil) => reply_missing.clone(),
            other => other.clone(),
        };
        self.r.end == self.unchanged
            && (got == reply || (k.value.is_none() && got == reply_missing))
    }

    /// An [`Op::AcquireOrKeep`] run: a missing key taken, the token's kept as it is.
    fn acquire_or_keep(&self) -> bool {
        // One key: missing, it is taken with the TTL; already the token's, it is kept as it
        // is (TTL untouched) and the grant answered; another's, nothing changes.
        if self.n != 1 {
            return false;
        }
        let reply_ok = self.expected(self.answer, true);
        match self.r.start[0].held {
            Held::Missing => {
                let taken = KeyNow {
                    value: Some(Val::Arg(self.r.layout.token)),
                    ttl: TtlNow::Set {
                        seconds: self.unit == TtlUnit::Seconds,
                        v: ttl_val(self.ttl_arg),
                    },
                };
                self.r.end == [taken] && self.r.reply == reply_ok
            }
            Held::Token => {
                let again = match self.answer {
                    Answer::Const(c) => self.lit(c.again),
                    shape => self.expected(shape, true),
                };
                self.r.end == self.unchanged && self.r.reply == again
            }
            Held::Other => {
                self.r.end == self.unchanged && self.r.reply == self.expected(self.answer, false)
            }
        }
    }

    /// A run of an acquisition, refresh or extension (every other [`Op`]): the keys taken with
    /// the TTL where the operation succeeds, nothing changed where it does not.
    fn acquire_or_extend(&self, op: Op) -> bool {
        if op == Op::AcquireOrRefreshSeconds && self.n != 1 {
            return false;
        }
        let ttl = |i: usize| {
            let v = if op == Op::ExtendAdd {
                Val::Sum(vec![Val::Arg(self.ttl_arg), Val::Pttl(i + 1)])
            } else {
                ttl_val(self.ttl_arg)
            };
            // A refresh in seconds: the same argument read in seconds where the key was
            // already the caller's.
            let refreshed =
                op == Op::AcquireOrRefreshSeconds && self.r.start[i].held == Held::Token;
            TtlNow::Set {
                seconds: self.unit == TtlUnit::Seconds || refreshed,
                v,
            }
        };
        let success: Vec<KeyNow> = (0..self.n)
            .map(|i| KeyNow {
                value: Some(Val::Arg(self.r.layout.token)),
                ttl: ttl(i),
            })
            .collect();
        // A key holding the token without a TTL cannot come from the proxy's own grants;
        // refusing it is as safe as extending it (python-redis-lock answers 2 there).
        let lenient = op != Op::Acquire
            && self.r.start.iter().any(|s| s.held == Held::Token && !s.ttl)
            && self.r.start.iter().all(|s| s.held != Held::Other);
        let again = match self.answer {
            Answer::Const(c) if self.r.start.iter().all(|s| s.held == Held::Token) => {
                self.lit(c.again)
            }
            shape => self.expected(shape, true),
        };
        let won = self.r.end == success && self.r.reply == again;
        let refused = match self.answer {
            Answer::Const(c)
                if matches!(op, Op::Extend | Op::ExtendAdd)
                    && self.n == 1
                    && self.r.start[0].held == Held::Missing =>
            {
                self.lit(c.gone)
            }
            shape => self.expected(shape, false),
        };
        let lost = self.r.end == self.unchanged
            && (self.r.reply == refused
                || (lenient && self.answer == Answer::ZeroOne && self.r.reply == Val::Num(2)));
        if strict_success(self.r, op) || (lenient && won) {
            won || (lenient && lost)
        } else {
            lost
        }
    }
}
