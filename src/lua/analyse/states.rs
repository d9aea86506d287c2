//! What a run starts from and ends with: each key's starting state ([`STARTS`]), the keys'
//! states as the script changes them ([`KeyNow`]), and the record of one run ([`Run`]) that
//! the classifiers in [`crate::lua`] read.

use std::fmt;

use super::values::Val;

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

/// [`Layout::field`] while looking for the field (see [`find_field`]).
pub(super) const FIND_FIELD: usize = usize::MAX;

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
