//! Commands: the table of what the proxy understands, and dispatch from a request to an answer.
//!
//! Every command has one [`Spec`] row: its name, its arity (Redis's convention: positive means
//! exact, negative means at least), its flags and key positions (for `COMMAND`), and the function
//! that runs it. Arity is checked here, once, for all commands. The hot commands (`SET`) read
//! the request as decoded, views into its frame ([`Args`]); the others take their arguments as
//! owned `Bytes`, converted once here. A handler returns an [`Action`]:
//! an immediate reply for connection bookkeeping, or a future for anything that talks to the
//! masters. Futures are created synchronously during dispatch, and they queue their requests to
//! the masters in dispatch order, so pipelined commands reach every master in the client's order.

pub mod blocking;
pub mod connection;
pub mod fence;
pub mod hashlock;
pub mod introspect;
pub mod keys;
pub mod lock;
pub mod pubsub;
pub mod script;
pub mod set;
pub mod transaction;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use futures_util::FutureExt;

use crate::acl::Keys;
use crate::client::Conn;
use crate::proxy::Proxy;
use crate::reply::Reply;
use crate::request::Args;
use crate::stats::Stats;

/// A reply still being computed.
pub type Later = Pin<Box<dyn Future<Output = Reply> + Send + 'static>>;

/// What dispatching a command produced.
pub enum Action {
    /// The reply is known now.
    Reply(Reply),
    /// The reply comes when the masters have answered.
    Later(Later),
    /// Send this reply, then close the connection (`QUIT`).
    Close(Reply),
}

impl From<Reply> for Action {
    fn from(r: Reply) -> Action {
        Action::Reply(r)
    }
}

/// A command handler. `args[0]` is the command name as the client spelled it.
#[derive(Clone, Copy)]
pub enum Handler {
    /// Takes the arguments as owned `Bytes` (one conversion at dispatch).
    Owned(fn(&Arc<Proxy>, &mut Conn, Vec<Bytes>) -> Action),
    /// Reads the request as decoded, keeping only the arguments it needs.
    Args(fn(&Arc<Proxy>, &mut Conn, Args<'_>) -> Action),
}

/// One row of the command table.
pub struct Spec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i32,
    /// Flags reported by `COMMAND`.
    pub flags: &'static [&'static str],
    /// First key position, last key position (-1 = last argument), step; 0,0,0 for no keys.
    pub keys: (i32, i32, i32),
    /// Runs the command.
    pub run: Handler,
    /// May run before `AUTH` when a password is configured.
    pub before_auth: bool,
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    run: fn(&Arc<Proxy>, &mut Conn, Vec<Bytes>) -> Action,
) -> Spec {
    row(name, arity, flags, keys, Handler::Owned(run))
}

/// A row whose handler reads the request as decoded ([`Handler::Args`]).
const fn spec_args(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    run: fn(&Arc<Proxy>, &mut Conn, Args<'_>) -> Action,
) -> Spec {
    row(name, arity, flags, keys, Handler::Args(run))
}

/// A row of the table, run only after `AUTH` (see [`open`]).
const fn row(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    run: Handler,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        keys,
        run,
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

/// Every command the proxy serves.
pub static TABLE: &[Spec] = &[
    open(spec("ping", -1, &["fast", "stale"], NONE, connection::ping)),
    spec("echo", 2, &["fast"], NONE, connection::echo),
    spec("wait", 3, &["noscript"], NONE, connection::wait),
    open(spec(
        "hello",
        -1,
        &["noscript", "fast", "no_auth"],
        NONE,
        connection::hello,
    )),
    open(spec(
        "auth",
        -2,
        &["noscript", "fast", "no_auth"],
        NONE,
        connection::auth,
    )),
    spec("select", 2, &["fast"], NONE, connection::select),
    spec("client", -2, &["noscript"], NONE, connection::client),
    open(spec(
        "quit",
        -1,
        &["fast", "no_auth"],
        NONE,
        connection::quit,
    )),
    open(spec(
        "reset",
        1,
        &["noscript", "fast", "no_auth"],
        NONE,
        connection::reset,
    )),
    spec(
        "command",
        -1,
        &["loading", "stale"],
        NONE,
        introspect::command,
    ),
    spec("info", -1, &["loading", "stale"], NONE, introspect::info),
    spec(
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        NONE,
        introspect::config,
    ),
    spec_args("set", -3, &["write", "denyoom"], FIRST, set::set),
    spec("get", 2, &["readonly", "fast"], FIRST, keys::get),
    spec("exists", -2, &["readonly", "fast"], ALL, keys::exists),
    spec(
        "setnx",
        3,
        &["write", "denyoom", "fast"],
        FIRST,
        keys::setnx,
    ),
    spec(
        "getset",
        3,
        &["write", "denyoom", "fast"],
        FIRST,
        keys::getset,
    ),
    spec("del", -2, &["write"], ALL, keys::del),
    spec("unlink", -2, &["write", "fast"], ALL, keys::del),
    spec("setex", 4, &["write", "denyoom"], FIRST, set::setex),
    spec("psetex", 4, &["write", "denyoom"], FIRST, set::setex),
    spec("expire", -3, &["write", "fast"], FIRST, keys::expire),
    spec("pexpire", -3, &["write", "fast"], FIRST, keys::expire),
    spec("pexpireat", -3, &["write", "fast"], FIRST, keys::expire),
    spec("expireat", -3, &["write", "fast"], FIRST, keys::expire),
    spec("ttl", 2, &["readonly", "fast"], FIRST, keys::ttl),
    spec("hget", 3, &["readonly", "fast"], FIRST, keys::hget),
    spec("hexists", 3, &["readonly", "fast"], FIRST, keys::count),
    spec("hgetall", 2, &["readonly"], FIRST, keys::hgetall),
    spec("llen", 2, &["readonly", "fast"], FIRST, keys::count),
    spec(
        "blpop",
        -3,
        &["write", "noscript", "blocking"],
        (1, -2, 1),
        blocking::blpop,
    ),
    spec("pttl", 2, &["readonly", "fast"], FIRST, keys::ttl),
    spec("watch", -2, TX, ALL, transaction::watch),
    spec("unwatch", 1, TX, NONE, transaction::unwatch),
    spec("multi", 1, TX, NONE, transaction::multi),
    spec(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        NONE,
        transaction::exec,
    ),
    spec("discard", 1, TX, NONE, transaction::discard),
    spec(
        "eval",
        -3,
        &["noscript", "skip_monitor"],
        NONE,
        script::eval,
    ),
    spec(
        "evalsha",
        -3,
        &["noscript", "skip_monitor"],
        NONE,
        script::evalsha,
    ),
    spec("script", -2, &["noscript"], NONE, script::script),
    spec("redlock.fence", 3, &["write", "fast"], FIRST, fence::fence),
    spec("subscribe", -2, PUBSUB, NONE, pubsub::sub),
    spec("psubscribe", -2, PUBSUB, NONE, pubsub::psub),
    spec("ssubscribe", -2, PUBSUB, ALL, pubsub::ssub),
    spec("unsubscribe", -1, PUBSUB, NONE, pubsub::unsub),
    spec("punsubscribe", -1, PUBSUB, NONE, pubsub::punsub),
    spec("sunsubscribe", -1, PUBSUB, ALL, pubsub::sunsub),
    spec(
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        NONE,
        pubsub::publish,
    ),
    spec(
        "spublish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        FIRST,
        pubsub::publish,
    ),
];

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
    LazyLock::new(|| TABLE.iter().find(|s| s.name == "set"));

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

/// Runs `op` on the masters once every key in `keys` has its turn (see [`crate::keylock`]):
/// the one way a command that reads or writes keys is put in line. The turn is taken now, at
/// dispatch, so pipelined commands keep their order on every key, and it is held until `op`'s
/// reply is ready.
pub fn in_turn<F, Fut>(proxy: &Arc<Proxy>, keys: &[Bytes], op: F) -> Action
where
    F: FnOnce(Arc<Proxy>) -> Fut + Send + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    in_turn_held(proxy, keys, move |proxy, held| async move {
        let reply = op(proxy).await;
        drop(held);
        reply
    })
}

/// [`in_turn`] for an operation that keeps the turn beyond its reply (a lock acquisition
/// answers early and cleans up in the background before the keys are free): `op` owns the
/// turn, and the keys are free when it drops `held`.
pub fn in_turn_held<F, Fut>(proxy: &Arc<Proxy>, keys: &[Bytes], op: F) -> Action
where
    F: FnOnce(Arc<Proxy>, crate::keylock::Held) -> Fut + Send + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    in_turn_of(proxy, proxy.keylocks.enqueue(keys), op)
}

/// [`in_turn_held`] for a turn already taken (`ticket`), so the caller need not own a copy of
/// its keys.
pub fn in_turn_of<F, Fut>(proxy: &Arc<Proxy>, ticket: crate::keylock::Ticket, op: F) -> Action
where
    F: FnOnce(Arc<Proxy>, crate::keylock::Held) -> Fut + Send + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let proxy = proxy.clone();
    // `then`, not an `async` block: the operation's future takes the place of the wait for the
    // turn instead of being stored beside it, so each request's one allocation stays small.
    Action::Later(Box::pin(ticket.ready().then(move |held| op(proxy, held))))
}

/// Runs one request: a decoded one, or arguments already owned (`Vec<Bytes>`).
pub fn dispatch<'a>(proxy: &Arc<Proxy>, conn: &mut Conn, args: impl Into<Args<'a>>) -> Action {
    dispatch_args(proxy, conn, args.into())
}

fn dispatch_args(proxy: &Arc<Proxy>, conn: &mut Conn, args: Args<'_>) -> Action {
    Stats::bump(&proxy.stats.commands);
    let Some(spec) = lookup(&args[0]) else {
        conn.multi_failed |= conn.multi.is_some();
        return unknown_command(&args).into();
    };
    proxy.metrics.count_command(spec);
    if !arity_ok(spec.arity, args.len()) {
        conn.multi_failed |= conn.multi.is_some();
        return wrong_arity(spec.name).into();
    }
    if !conn.authed && !spec.before_auth {
        return Reply::static_error("NOAUTH Authentication required.").into();
    }
    if conn.keys != Keys::All && keys_of(spec, &args).any(|k| !conn.keys.allows(k)) {
        // Checked here, once, for every command (queued ones included, as Redis checks them
        // when queueing and then aborts EXEC).
        conn.multi_failed |= conn.multi.is_some();
        return Reply::static_error(crate::acl::NOPERM).into();
    }
    if !conn.resp3 && conn.subscribed() && !pubsub::allowed_while_subscribed(spec.name) {
        return Reply::error(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            spec.name
        ))
        .into();
    }
    let client_reply =
        spec.name == "client" && args.len() > 1 && args[1].eq_ignore_ascii_case(b"reply");
    if conn.multi.is_some() && (spec.name.ends_with("subscribe") || client_reply) {
        // Several replies to one command cannot sit inside EXEC's array (Redis 7.2 refuses
        // these in a transaction too), nor can a reply switched off halfway through it.
        conn.multi_failed = true;
        return Reply::static_error("ERR Command not allowed inside a transaction").into();
    }
    if conn.multi.is_some() && !transaction::runs_at_once(spec.name) {
        return transaction::queue(proxy, conn, args.into_vec());
    }
    match spec.run {
        Handler::Args(run) => run(proxy, conn, args),
        Handler::Owned(run) => run(proxy, conn, args.into_vec()),
    }
}

/// The keys a command names: from its table row's key positions, and for `EVAL`/`EVALSHA`
/// from `numkeys`. Publish/subscribe channels are not keys (the shard commands list them as
/// keys for `COMMAND`, but Redis checks them against channel permissions).
pub fn keys_of<'a>(spec: &Spec, args: &'a Args<'_>) -> impl Iterator<Item = &'a [u8]> + 'a {
    let argc = args.len() as i64;
    let (first, last, step) = match spec.name {
        "eval" | "evalsha" => {
            let n = args.get(2).and_then(parse_int).unwrap_or(0);
            if n > 0 { (3, 2 + n, 1) } else { (0, -1, 1) }
        }
        _ if spec.flags.contains(&"pubsub") || spec.keys.0 == 0 => (0, -1, 1),
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
    (start..end).step_by(step as usize).map(|i| &args[i])
}

fn arity_ok(arity: i32, argc: usize) -> bool {
    if arity >= 0 {
        argc == arity as usize
    } else {
        argc >= arity.unsigned_abs() as usize
    }
}

/// `ERR wrong number of arguments for 'x' command`.
pub fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// `ERR syntax error`.
pub fn syntax_error() -> Reply {
    Reply::static_error("ERR syntax error")
}

/// Redis's unknown-command error, quoting up to 128 bytes of arguments.
pub fn unknown_command(args: &Args<'_>) -> Reply {
    let mut quoted = String::new();
    for arg in args.iter().skip(1) {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        let text = String::from_utf8_lossy(&arg[..arg.len().min(room)]);
        quoted.push_str(&format!("'{text}' "));
    }
    let name = String::from_utf8_lossy(&args[0][..args[0].len().min(128)]);
    Reply::error(format!(
        "ERR unknown command '{name}', with args beginning with: {quoted}"
    ))
}

/// `ERR unknown subcommand 'x'. Try NAME HELP.`
pub fn unknown_subcommand(command: &str, sub: &[u8]) -> Reply {
    Reply::error(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)]),
        command.to_ascii_uppercase()
    ))
}

/// Upper-cases a short keyword into `buf` without allocating; anything longer than `buf` (so no
/// keyword) comes back empty.
pub fn upper<'a>(arg: &[u8], buf: &'a mut [u8; 8]) -> &'a [u8] {
    let Some(dst) = buf.get_mut(..arg.len()) else {
        return &[];
    };
    for (d, c) in dst.iter_mut().zip(arg) {
        *d = c.to_ascii_uppercase();
    }
    dst
}

/// Parses a base-10 integer argument the way Redis does (see [`crate::resp::parse_int`]).
pub fn parse_int(arg: &[u8]) -> Option<i64> {
    crate::resp::parse_int(arg)
}

/// Wall-clock time in ms since the Unix epoch, for absolute expiries (`EXAT`, `PEXPIREAT`).
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `ERR value is not an integer or out of range`.
pub fn not_an_integer() -> Reply {
    Reply::static_error("ERR value is not an integer or out of range")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for unknown in [
            &b""[..],
            b"\x00",
            b"sett",
            b"se",
            b"s\xc5t",
            &[b'g'; 33],
            &[b'x'; 1000],
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
        assert_eq!(
            unknown_command(&b(&["foo", "a", "b"])),
            Reply::error("ERR unknown command 'foo', with args beginning with: 'a' 'b' ")
        );
        assert_eq!(
            unknown_command(&b(&["foo"])),
            Reply::error("ERR unknown command 'foo', with args beginning with: ")
        );
    }

    #[test]
    fn keys_come_from_the_table_and_from_numkeys() {
        let keys = |v: &[&str]| -> Vec<String> {
            let args = b(v);
            let spec = lookup(&args[0]).unwrap();
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
    fn integers_parse_like_redis() {
        assert_eq!(parse_int(b"10"), Some(10));
        assert_eq!(parse_int(b"-1"), Some(-1));
        assert_eq!(parse_int(b"010"), None);
        assert_eq!(parse_int(b"1.5"), None);
        assert_eq!(parse_int(b""), None);
    }
}
