//! Commands: from a request to an answer.
//!
//! A request is looked up once into a [`Command`] ([`spec`]: the table, its arity and each
//! command's keys); [`dispatch`] checks what applies to every command (login, the user's keys,
//! subscriptions, transactions) from the command's type. Then `run` parses the arguments, once,
//! through one [`args::Cursor`], into the command's own type (each family's types and parsers
//! sit beside their handlers: `set::Set`, `keys::Expire`, `connection::Client`, ...), and hands
//! that to the handler; no handler reads an argument by position. A handler returns an
//! [`Action`]: an immediate reply for connection bookkeeping, or a future for anything that
//! talks to the masters. Futures are created synchronously during dispatch, and they queue
//! their requests to the masters in dispatch order, so pipelined commands reach every master in
//! the client's order.
//!
//! The files, from the bottom up (each uses only those above it in this list):
//! - [`spec`]: [`Cmd`], the table, [`Command`]. [`args`]: the argument cursor.
//!   [`session`]: a client's state ([`Conn`]). [`action`]: [`Action`] and the per-key turn.
//! - [`repair`]: quorum repair, a lock written back after a granted extension to the
//!   trusted members that lacked it.
//! - [`lock`]: the Redlock engine (acquire, extend, release, roll back).
//! - [`keys`]: plain key commands decided by majority; [`conditional`] (`SET … IFEQ`,
//!   `DELEX`, `DELIFEQ`, `DIGEST`); [`set`] (`SET` and its forms);
//!   [`hashlock`] (re-entrant hash locks); [`rwlock`] (read-write and fair locks); [`fence`]
//!   (fencing tokens); [`script`] (`EVAL`, `EVALSHA`, `SCRIPT`); [`blocking`], [`pubsub`],
//!   [`connection`], [`introspect`], [`transaction`].
//! - this file: dispatch, and the one place where a command is parsed.

pub mod action;
pub mod args;
pub mod blocking;
pub mod conditional;
pub mod connection;
pub mod fence;
pub mod hashlock;
pub mod introspect;
pub mod keys;
pub mod lease;
pub mod lock;
pub mod pubsub;
pub mod repair;
pub mod runner;
pub mod rwlock;
pub mod script;
pub mod session;
pub mod set;
pub mod spec;
pub mod transaction;

use std::sync::Arc;

use bytes::Bytes;

pub use action::{Action, Later};
use args::Cursor;
use pubsub::Channels;
use session::Conn;
use set::Set;
pub use spec::{Cmd, Command, Spec, TABLE, lookup};

use crate::counters::Counters;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::wire::reply::Reply;
use crate::wire::request::Args;

/// Runs one request: a decoded one, or arguments already owned (`Vec<Bytes>`).
pub fn dispatch<'a>(proxy: &Arc<Proxy>, conn: &mut Conn, args: impl Into<Args<'a>>) -> Action {
    dispatch_args(proxy, conn, args.into())
}

/// [`dispatch`] for owned arguments, as `EXEC` runs what `MULTI` queued.
fn dispatch_owned(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    dispatch_args(proxy, conn, args.into())
}

fn dispatch_args(proxy: &Arc<Proxy>, conn: &mut Conn, args: Args<'_>) -> Action {
    Counters::bump(&proxy.counters().commands);
    let command = match Command::parse(args) {
        Ok(command) => command,
        Err(refused) => {
            if let Some(spec) = refused.spec {
                proxy.counters().count_command(spec.cmd as usize);
            }
            conn.fail_multi();
            return Reply::from(refused.error).into();
        }
    };
    let cmd = command.cmd();
    proxy.counters().count_command(cmd as usize);
    if !conn.logged_in() && !command.spec().before_auth {
        return Reply::from(Error::NoAuth).into();
    }
    if !conn.may_touch(|| command.keys()) {
        // Checked here, once, for every command (queued ones included, as Redis checks them
        // when queueing and then aborts EXEC).
        conn.fail_multi();
        return Reply::from(Error::NoPermKeys).into();
    }
    if !conn.resp3() && conn.subscribed() && !cmd.allowed_while_subscribed() {
        return Reply::from(Error::OnlySubscribe(command.spec().name)).into();
    }
    let client_reply = cmd == Cmd::Client
        && Cursor::new(command.args(), cmd)
            .peek()
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"reply"));
    let args = command.into_args();
    if conn.in_multi() && (cmd.subscribes() || client_reply) {
        // Several replies to one command cannot sit inside EXEC's array (Redis 7.2 refuses
        // these in a transaction too), nor can a reply switched off halfway through it.
        conn.fail_multi();
        return Reply::from(Error::NotInMulti).into();
    }
    if conn.in_multi() && !cmd.runs_at_once() {
        return transaction::queue(proxy, conn, args.into_vec());
    }
    execute(proxy, conn, cmd, &mut Cursor::new(&args, cmd))
}

/// Runs `handler` on what a parser read, or answers the parser's error.
#[inline(always)]
fn then<T, E: Into<Reply>>(parsed: Result<T, E>, handler: impl FnOnce(T) -> Action) -> Action {
    match parsed {
        Ok(command) => handler(command),
        Err(refused) => refused.into().into(),
    }
}

/// Parses a checked command into its handler's type (each family's parsers sit beside their
/// handlers), then runs the handler; an argument the parser refuses is the reply. This is the
/// one place a command's arguments are read.
#[inline]
fn execute(proxy: &Arc<Proxy>, conn: &mut Conn, cmd: Cmd, c: &mut Cursor<'_>) -> Action {
    use connection::{Auth, Client, Echo, Hello, Ping, Select, Wait};
    use keys::{Expire, GetSet, SetNx, Verbatim};
    match cmd {
        Cmd::Set => then(Set::parse(c, proxy.config().default_ttl_ms), |x| {
            set::set(proxy, conn, x)
        }),
        Cmd::Ping => connection::ping(proxy, conn, Ping::parse(c)),
        Cmd::Echo => then(Echo::parse(c), |x| connection::echo(proxy, conn, x)),
        Cmd::Wait => then(Wait::parse(c), |x| connection::wait(proxy, conn, x)),
        Cmd::Hello => then(Hello::parse(c), |x| connection::hello(proxy, conn, x)),
        Cmd::Auth => then(Auth::parse(c), |x| connection::auth(proxy, conn, x)),
        Cmd::Select => then(Select::parse(c), |x| connection::select(proxy, conn, x)),
        Cmd::Client => then(Client::parse(c), |x| connection::client(proxy, conn, x)),
        Cmd::Quit => connection::quit(proxy, conn),
        Cmd::Reset => connection::reset(proxy, conn),
        Cmd::Command => then(introspect::CommandQuery::parse(c), |x| {
            introspect::command(proxy, conn, x)
        }),
        Cmd::Info => introspect::info(proxy, conn, introspect::Info::parse(c)),
        Cmd::Config => then(introspect::ConfigGet::parse(c), |x| {
            introspect::config(proxy, conn, x)
        }),
        Cmd::Get => then(Verbatim::one_key(c), |x| keys::get(proxy, conn, x)),
        Cmd::Exists => keys::exists(proxy, conn, Verbatim::all_keys(c)),
        Cmd::Setnx => then(SetNx::parse(c), |x| keys::setnx(proxy, conn, x)),
        Cmd::Getset => then(GetSet::parse(c), |x| keys::getset(proxy, conn, x)),
        Cmd::Del | Cmd::Unlink => keys::del(proxy, conn, Verbatim::all_keys(c)),
        Cmd::Setex | Cmd::Psetex => then(Set::parse_setex(c, cmd), |x| set::set(proxy, conn, x)),
        Cmd::Expire | Cmd::Pexpire | Cmd::Pexpireat | Cmd::Expireat => {
            then(Expire::parse(c, cmd), |x| keys::expire(proxy, conn, x))
        }
        Cmd::Ttl | Cmd::Pttl => then(Verbatim::one_key(c), |x| keys::ttl(proxy, conn, x)),
        Cmd::Hget => then(Verbatim::one_key(c), |x| keys::hget(proxy, conn, x)),
        Cmd::Hexists | Cmd::Llen => then(Verbatim::one_key(c), |x| keys::count(proxy, conn, x)),
        Cmd::Hgetall => then(Verbatim::one_key(c), |x| keys::hgetall(proxy, conn, x)),
        Cmd::Blpop => then(blocking::Blpop::parse(c), |x| {
            blocking::blpop(proxy, conn, x)
        }),
        Cmd::Watch => transaction::watch(proxy, conn, transaction::Watch::parse(c)),
        Cmd::Unwatch => transaction::unwatch(proxy, conn),
        Cmd::Multi => transaction::multi(proxy, conn),
        Cmd::Exec => transaction::exec(proxy, conn, dispatch_owned),
        Cmd::Discard => transaction::discard(proxy, conn),
        Cmd::Eval => then(script::Eval::parse(c), |x| script::eval(proxy, conn, x)),
        Cmd::Evalsha => then(script::EvalSha::parse(c), |x| {
            script::evalsha(proxy, conn, x)
        }),
        Cmd::Script => then(script::ScriptCommand::parse(c), |x| {
            script::script(proxy, conn, x)
        }),
        Cmd::RedlockFence => then(fence::Fence::parse(c), |x| fence::fence(proxy, conn, x)),
        Cmd::Subscribe => pubsub::sub(proxy, conn, Channels::parse(c)),
        Cmd::Psubscribe => pubsub::psub(proxy, conn, Channels::parse(c)),
        Cmd::Ssubscribe => pubsub::ssub(proxy, conn, Channels::parse(c)),
        Cmd::Unsubscribe => pubsub::unsub(proxy, conn, Channels::parse(c)),
        Cmd::Punsubscribe => pubsub::punsub(proxy, conn, Channels::parse(c)),
        Cmd::Sunsubscribe => pubsub::sunsub(proxy, conn, Channels::parse(c)),
        Cmd::Publish | Cmd::Spublish => then(pubsub::Publish::parse(c, cmd), |x| {
            pubsub::publish(proxy, conn, x)
        }),
        Cmd::Delex => then(conditional::Delex::parse(c), |x| {
            conditional::delex(proxy, conn, x)
        }),
        Cmd::Delifeq => then(conditional::DelIfEq::parse(c), |x| {
            conditional::delifeq(proxy, conn, x)
        }),
        Cmd::Digest => then(conditional::Digest::parse(c), |x| {
            conditional::digest(proxy, conn, x)
        }),
    }
}
