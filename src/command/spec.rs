//! The command table and the parser: a request becomes a [`Command`] once, here. Every
//! command has one [`Spec`] row: its [`Cmd`], its name, its arity (Redis's convention: positive
//! means exact, negative means at least), its flags and key positions (for `COMMAND`). What a
//! dispatcher, the ACL check and the metrics need to know of a command comes from its `Cmd` and
//! its row, never from comparing its name.

use std::sync::LazyLock;

use crate::error::Error;
use crate::wire::request::Args;
use crate::wire::resp;

/// Every command the proxy serves, in [`TABLE`] order (its index is the row's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// `PING`
    Ping,
    /// `ECHO`
    Echo,
    /// `WAIT`
    Wait,
    /// `HELLO`
    Hello,
    /// `AUTH`
    Auth,
    /// `SELECT`
    Select,
    /// `CLIENT`
    Client,
    /// `QUIT`
    Quit,
    /// `RESET`
    Reset,
    /// `COMMAND`
    Command,
    /// `INFO`
    Info,
    /// `CONFIG`
    Config,
    /// `SET`
    Set,
    /// `GET`
    Get,
    /// `EXISTS`
    Exists,
    /// `SETNX`
    Setnx,
    /// `GETSET`
    Getset,
    /// `DEL`
    Del,
    /// `UNLINK`
    Unlink,
    /// `SETEX`
    Setex,
    /// `PSETEX`
    Psetex,
    /// `EXPIRE`
    Expire,
    /// `PEXPIRE`
    Pexpire,
    /// `PEXPIREAT`
    Pexpireat,
    /// `EXPIREAT`
    Expireat,
    /// `TTL`
    Ttl,
    /// `HGET`
    Hget,
    /// `HEXISTS`
    Hexists,
    /// `HGETALL`
    Hgetall,
    /// `LLEN`
    Llen,
    /// `BLPOP`
    Blpop,
    /// `PTTL`
    Pttl,
    /// `WATCH`
    Watch,
    /// `UNWATCH`
    Unwatch,
    /// `MULTI`
    Multi,
    /// `EXEC`
    Exec,
    /// `DISCARD`
    Discard,
    /// `EVAL`
    Eval,
    /// `EVALSHA`
    Evalsha,
    /// `SCRIPT`
    Script,
    /// `REDLOCK.FENCE`
    RedlockFence,
    /// `SUBSCRIBE`
    Subscribe,
    /// `PSUBSCRIBE`
    Psubscribe,
    /// `SSUBSCRIBE`
    Ssubscribe,
    /// `UNSUBSCRIBE`
    Unsubscribe,
    /// `PUNSUBSCRIBE`
    Punsubscribe,
    /// `SUNSUBSCRIBE`
    Sunsubscribe,
    /// `PUBLISH`
    Publish,
    /// `SPUBLISH`
    Spublish,
    /// `DELEX` (Redis 8.4)
    Delex,
    /// `DELIFEQ` (Valkey 9.0)
    Delifeq,
    /// `DIGEST` (Redis 8.4)
    Digest,
}

impl Cmd {
    /// The command's row of [`TABLE`].
    pub fn spec(self) -> &'static Spec {
        &TABLE[self as usize]
    }

    /// A publish/subscribe command: its arguments are channels, not keys.
    pub fn is_pubsub(self) -> bool {
        matches!(
            self,
            Cmd::Subscribe
                | Cmd::Psubscribe
                | Cmd::Ssubscribe
                | Cmd::Unsubscribe
                | Cmd::Punsubscribe
                | Cmd::Sunsubscribe
                | Cmd::Publish
                | Cmd::Spublish
        )
    }

    /// A subscribe or unsubscribe command, which answers with one reply per channel.
    pub fn subscribes(self) -> bool {
        self.is_pubsub() && !matches!(self, Cmd::Publish | Cmd::Spublish)
    }

    /// Commands a RESP2 connection may send while subscribed.
    pub fn allowed_while_subscribed(self) -> bool {
        self.subscribes() || matches!(self, Cmd::Ping | Cmd::Quit | Cmd::Reset)
    }

    /// Commands that act at once inside `MULTI` instead of being queued.
    pub fn runs_at_once(self) -> bool {
        matches!(
            self,
            Cmd::Exec
                | Cmd::Discard
                | Cmd::Multi
                | Cmd::Watch
                | Cmd::Unwatch
                | Cmd::Quit
                | Cmd::Reset
        )
    }
}

/// One row of the command table.
pub struct Spec {
    /// The command.
    pub cmd: Cmd,
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i32,
    /// Flags reported by `COMMAND`.
    pub flags: &'static [&'static str],
    /// First key position, last key position (-1 = last argument), step; 0,0,0 for no keys.
    pub keys: (i32, i32, i32),
    /// May run before `AUTH` when a password is configured.
    pub before_auth: bool,
}

/// A row of the table, run only after `AUTH` (see [`open`]).
const fn row(
    cmd: Cmd,
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
) -> Spec {
    Spec {
        cmd,
        name,
        arity,
        flags,
        keys,
        before_auth: false,
    }
}

const fn open(mut s: Spec) -> Spec {
    s.before_auth = true;
    s
}

/// Flags Redis reports for `WATCH`, `UNWATCH`, `MULTI` and `DISCARD`.
const TX: &[&str] = &["noscript", "loading", "stale", "fast"];

const NONE: (i32, i32, i32) = (0, 0, 0);
const FIRST: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);

/// Flags Redis reports for the subscribe commands.
const PUBSUB: &[&str] = &["pubsub", "noscript", "loading", "stale"];

/// Every command the proxy serves, in [`Cmd`] order.
pub static TABLE: &[Spec] = &[
    open(row(Cmd::Ping, "ping", -1, &["fast", "stale"], NONE)),
    row(Cmd::Echo, "echo", 2, &["fast"], NONE),
    row(Cmd::Wait, "wait", 3, &["noscript"], NONE),
    open(row(
        Cmd::Hello,
        "hello",
        -1,
        &["noscript", "fast", "no_auth"],
        NONE,
    )),
    open(row(
        Cmd::Auth,
        "auth",
        -2,
        &["noscript", "fast", "no_auth"],
        NONE,
    )),
    row(Cmd::Select, "select", 2, &["fast"], NONE),
    row(Cmd::Client, "client", -2, &["noscript"], NONE),
    open(row(Cmd::Quit, "quit", -1, &["fast", "no_auth"], NONE)),
    open(row(
        Cmd::Reset,
        "reset",
        1,
        &["noscript", "fast", "no_auth"],
        NONE,
    )),
    row(Cmd::Command, "command", -1, &["loading", "stale"], NONE),
    row(Cmd::Info, "info", -1, &["loading", "stale"], NONE),
    row(
        Cmd::Config,
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        NONE,
    ),
    row(Cmd::Set, "set", -3, &["write", "denyoom"], FIRST),
    row(Cmd::Get, "get", 2, &["readonly", "fast"], FIRST),
    row(Cmd::Exists, "exists", -2, &["readonly", "fast"], ALL),
    row(Cmd::Setnx, "setnx", 3, &["write", "denyoom", "fast"], FIRST),
    row(
        Cmd::Getset,
        "getset",
        3,
        &["write", "denyoom", "fast"],
        FIRST,
    ),
    row(Cmd::Del, "del", -2, &["write"], ALL),
    row(Cmd::Unlink, "unlink", -2, &["write", "fast"], ALL),
    row(Cmd::Setex, "setex", 4, &["write", "denyoom"], FIRST),
    row(Cmd::Psetex, "psetex", 4, &["write", "denyoom"], FIRST),
    row(Cmd::Expire, "expire", -3, &["write", "fast"], FIRST),
    row(Cmd::Pexpire, "pexpire", -3, &["write", "fast"], FIRST),
    row(Cmd::Pexpireat, "pexpireat", -3, &["write", "fast"], FIRST),
    row(Cmd::Expireat, "expireat", -3, &["write", "fast"], FIRST),
    row(Cmd::Ttl, "ttl", 2, &["readonly", "fast"], FIRST),
    row(Cmd::Hget, "hget", 3, &["readonly", "fast"], FIRST),
    row(Cmd::Hexists, "hexists", 3, &["readonly", "fast"], FIRST),
    row(Cmd::Hgetall, "hgetall", 2, &["readonly"], FIRST),
    row(Cmd::Llen, "llen", 2, &["readonly", "fast"], FIRST),
    row(
        Cmd::Blpop,
        "blpop",
        -3,
        &["write", "noscript", "blocking"],
        (1, -2, 1),
    ),
    row(Cmd::Pttl, "pttl", 2, &["readonly", "fast"], FIRST),
    row(Cmd::Watch, "watch", -2, TX, ALL),
    row(Cmd::Unwatch, "unwatch", 1, TX, NONE),
    row(Cmd::Multi, "multi", 1, TX, NONE),
    row(
        Cmd::Exec,
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        NONE,
    ),
    row(Cmd::Discard, "discard", 1, TX, NONE),
    row(Cmd::Eval, "eval", -3, &["noscript", "skip_monitor"], NONE),
    row(
        Cmd::Evalsha,
        "evalsha",
        -3,
        &["noscript", "skip_monitor"],
        NONE,
    ),
    row(Cmd::Script, "script", -2, &["noscript"], NONE),
    row(
        Cmd::RedlockFence,
        "redlock.fence",
        3,
        &["write", "fast"],
        FIRST,
    ),
    row(Cmd::Subscribe, "subscribe", -2, PUBSUB, NONE),
    row(Cmd::Psubscribe, "psubscribe", -2, PUBSUB, NONE),
    row(Cmd::Ssubscribe, "ssubscribe", -2, PUBSUB, ALL),
    row(Cmd::Unsubscribe, "unsubscribe", -1, PUBSUB, NONE),
    row(Cmd::Punsubscribe, "punsubscribe", -1, PUBSUB, NONE),
    row(Cmd::Sunsubscribe, "sunsubscribe", -1, PUBSUB, ALL),
    row(
        Cmd::Publish,
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        NONE,
    ),
    row(
        Cmd::Spublish,
        "spublish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        FIRST,
    ),
    row(Cmd::Delex, "delex", -2, &["write", "fast"], FIRST),
    row(Cmd::Delifeq, "delifeq", 3, &["write", "fast"], FIRST),
    row(Cmd::Digest, "digest", 2, &["readonly", "fast"], FIRST),
];

/// A request parsed once: its command's row and its arguments, the command's name first.
pub struct Command<'a> {
    spec: &'static Spec,
    args: Args<'a>,
}

/// A request that is no command: unknown, or of the wrong arity (with its row, so it is still
/// counted as that command).
pub struct Refused {
    /// The row, when the name is known.
    pub spec: Option<&'static Spec>,
    /// What the client is told.
    pub error: Error,
}

impl<'a> Command<'a> {
    /// Looks the command up by name (any case) and checks its arity.
    pub fn parse(args: Args<'a>) -> Result<Command<'a>, Refused> {
        let name = args.get(0).unwrap_or_default();
        let Some(spec) = lookup(name) else {
            return Err(Refused {
                spec: None,
                error: Error::unknown_command(name, args.iter().skip(1)),
            });
        };
        if !arity_ok(spec.arity, args.len()) {
            return Err(Refused {
                spec: Some(spec),
                error: Error::WrongArity(spec.name),
            });
        }
        Ok(Command { spec, args })
    }

    /// The command.
    pub fn cmd(&self) -> Cmd {
        self.spec.cmd
    }

    /// The command's row.
    pub fn spec(&self) -> &'static Spec {
        self.spec
    }

    /// The arguments, the command's name first.
    pub fn args(&self) -> &Args<'a> {
        &self.args
    }

    /// The arguments, given up.
    pub fn into_args(self) -> Args<'a> {
        self.args
    }

    /// The keys the command names (see [`keys_of`]).
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> + '_ {
        keys_of(self.spec, &self.args)
    }
}

/// The longest name [`lookup`] considers; every name in [`TABLE`] is shorter.
const LONGEST_NAME: usize = 32;

/// [`TABLE`] in buckets by name length and the low five bits of the name's first byte (the
/// same for a letter in either case), so a lookup compares the name with the one or two rows
/// of its shape instead of lower-casing it into a buffer and hashing it.
static BY_SHAPE: LazyLock<Box<[Vec<&'static Spec>]>> = LazyLock::new(|| {
    let mut buckets = vec![Vec::new(); (LONGEST_NAME + 1) * 32].into_boxed_slice();
    for spec in TABLE {
        buckets[shape(spec.name.as_bytes())].push(spec);
    }
    buckets
});

/// The bucket of [`BY_SHAPE`] for a name of at most [`LONGEST_NAME`] bytes.
fn shape(name: &[u8]) -> usize {
    let first = name.first().map_or(0, |b| usize::from(b & 0x1f));
    name.len() * 32 + first
}

/// [`TABLE`]'s `SET` row: the lock command, which nearly every request names.
static SET: LazyLock<Option<&'static Spec>> =
    LazyLock::new(|| TABLE.iter().find(|s| s.cmd == Cmd::Set));

/// Finds a command by name, case-insensitively, without allocating.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    // `SET` in any case, without the table: its bytes are all letters, so setting bit 5 of
    // each lower-cases exactly the letters that match.
    if let &[s, e, t] = name
        && [s | 0x20, e | 0x20, t | 0x20] == *b"set"
    {
        return *SET;
    }
    if name.len() > LONGEST_NAME {
        return None;
    }
    // Table names are lower case, so comparing without case is comparing the lower-cased name.
    BY_SHAPE[shape(name)]
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
        .copied()
}

/// A request named `POST` or `Host:` is an HTTP request: Redis takes it for a cross-protocol
/// attack and closes the connection without running it (or anything after it).
pub fn is_http(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"POST") || name.eq_ignore_ascii_case(b"Host:")
}

/// The keys a command names: from its table row's key positions, and for `EVAL`/`EVALSHA`
/// from `numkeys`. Publish/subscribe channels are not keys (the shard commands list them as
/// keys for `COMMAND`, but Redis checks them against channel permissions).
pub fn keys_of<'a>(spec: &Spec, args: &'a Args<'_>) -> impl Iterator<Item = &'a [u8]> + 'a {
    let argc = args.len() as i64;
    let (first, last, step) = match spec.cmd {
        Cmd::Eval | Cmd::Evalsha => {
            // `numkeys`, after the script (the table's key positions are positions).
            let n = args.iter().nth(2).and_then(resp::parse_int).unwrap_or(0);
            if n > 0 { (3, 2 + n, 1) } else { (0, -1, 1) }
        }
        _ if spec.cmd.is_pubsub() || spec.keys.0 == 0 => (0, -1, 1),
        _ => {
            let (f, l, st) = spec.keys;
            let l = if l < 0 {
                argc + i64::from(l)
            } else {
                i64::from(l)
            };
            (i64::from(f), l, i64::from(st.max(1)))
        }
    };
    let end = (last + 1).clamp(0, argc) as usize;
    let start = if first <= 0 {
        end
    } else {
        (first as usize).min(end)
    };
    args.iter().take(end).skip(start).step_by(step as usize)
}

fn arity_ok(arity: i32, argc: usize) -> bool {
    if arity >= 0 {
        argc == arity as usize
    } else {
        argc >= arity.unsigned_abs() as usize
    }
}

/// Wall-clock time in ms since the Unix epoch, for absolute expiries (`EXAT`, `PEXPIREAT`).
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn b(v: &[&str]) -> Args<'static> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect::<Vec<_>>()
            .into()
    }

    #[test]
    fn set_is_found_as_through_the_table() {
        for a in 0..=255u8 {
            for name in [[a, b'e', b't'], [b's', a, b't'], [b's', b'e', a]] {
                let through_table = BY_SHAPE[shape(&name)]
                    .iter()
                    .find(|s| s.name.as_bytes().eq_ignore_ascii_case(&name))
                    .copied();
                assert!(
                    std::ptr::eq(
                        lookup(&name).map_or(std::ptr::null(), |s| s as *const Spec),
                        through_table.map_or(std::ptr::null(), |s| s as *const Spec)
                    ),
                    "{}",
                    name.escape_ascii()
                );
            }
        }
        assert_eq!(lookup(b"SET").map(|s| s.name), Some("set"));
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup(b"SeT").map(|s| s.name), Some("set"));
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(&[b'a'; 100]).is_none());
    }

    #[test]
    fn every_name_in_any_case_finds_its_row_and_nothing_else_does() {
        for spec in TABLE {
            let name = spec.name.as_bytes();
            assert!(name.len() <= LONGEST_NAME, "{}", spec.name);
            assert_eq!(
                name,
                name.to_ascii_lowercase(),
                "table names are lower case"
            );
            let upper = name.to_ascii_uppercase();
            let mixed: Vec<u8> = name
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        *b
                    }
                })
                .collect();
            for variant in [name, &upper, &mixed] {
                assert!(
                    std::ptr::eq(lookup(variant).unwrap(), spec),
                    "{}",
                    spec.name
                );
            }
            // One byte more or less, or one byte changed (a letter's bit 6 flipped keeps its
            // low five bits, so it lands in the same bucket), is another name.
            let mut longer = name.to_vec();
            longer.push(b'x');
            let mut changed = name.to_vec();
            changed[0] ^= 0x40;
            for other in [&longer[..], &name[..name.len() - 1], &changed] {
                if let Some(found) = lookup(other) {
                    assert!(found.name.as_bytes().eq_ignore_ascii_case(other));
                }
            }
        }
        for unknown in byte_strings![
            b"",
            b"\x00",
            b"sett",
            b"se",
            b"s\xc5t",
            [b'g'; 33],
            [b'x'; 1000],
        ] {
            assert!(lookup(unknown).is_none(), "{unknown:?}");
        }
        // A name longer than 32 bytes is unknown even when its start is a command.
        let mut long = b"set".to_vec();
        long.extend_from_slice(&[b' '; 40]);
        assert!(lookup(&long).is_none());
    }

    #[test]
    fn unknown_command_wording() {
        let refused = |v: &[&str]| match Command::parse(b(v)) {
            Err(r) => r.error.text().into_owned(),
            Ok(_) => panic!("{v:?} parsed"),
        };
        assert_eq!(
            refused(&["foo", "a", "b"]),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            refused(&["foo"]),
            "ERR unknown command 'foo', with args beginning with: "
        );
        assert_eq!(
            refused(&["GET"]),
            "ERR wrong number of arguments for 'get' command"
        );
    }

    #[test]
    fn every_row_stands_at_its_commands_index() {
        for (i, spec) in TABLE.iter().enumerate() {
            assert_eq!(spec.cmd as usize, i, "{}", spec.name);
            assert!(std::ptr::eq(spec.cmd.spec(), spec));
        }
    }

    #[test]
    fn keys_come_from_the_table_and_from_numkeys() {
        let keys = |v: &[&str]| -> Vec<String> {
            let args = b(v);
            let spec = lookup(args.get(0).unwrap()).unwrap();
            keys_of(spec, &args)
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect()
        };
        assert_eq!(keys(&["SET", "k", "v", "NX"]), ["k"]);
        assert_eq!(keys(&["DEL", "a", "b", "c"]), ["a", "b", "c"]);
        assert_eq!(keys(&["BLPOP", "a", "b", "0"]), ["a", "b"]);
        assert_eq!(keys(&["EVAL", "s", "2", "a", "b", "argv"]), ["a", "b"]);
        assert_eq!(keys(&["EVALSHA", "s", "0", "argv"]), Vec::<String>::new());
        // A numkeys larger than the arguments names what is there; the handler refuses it.
        assert_eq!(keys(&["EVAL", "s", "9", "a"]), ["a"]);
        assert_eq!(keys(&["EVAL", "s", "x", "a"]), Vec::<String>::new());
        assert_eq!(keys(&["SSUBSCRIBE", "ch"]), Vec::<String>::new());
        assert_eq!(keys(&["PING"]), Vec::<String>::new());
        assert_eq!(keys(&["WATCH", "a", "b"]), ["a", "b"]);
    }

    #[test]
    fn arity_rules() {
        assert!(arity_ok(2, 2));
        assert!(!arity_ok(2, 3));
        assert!(arity_ok(-3, 5));
        assert!(!arity_ok(-3, 2));
    }

    #[test]
    fn http_is_recognised_in_any_case() {
        for name in byte_strings![b"POST", b"post", b"Host:", b"HOST:", b"host:"] {
            assert!(is_http(name));
        }
        for name in byte_strings![b"GET", b"HOST", b"POSTS", b"SET"] {
            assert!(!is_http(name));
        }
    }
}
