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
    match run(proxy, conn, cmd, &mut Cursor::new(&args, cmd)) {
        Ok(action) => action,
        Err(refused) => refused.into(),
    }
}

/// Parses a checked command into its handler's type (each family's parsers sit beside their
/// handlers), then runs the handler; an argument the parser refuses is the reply.
#[inline]
fn run(proxy: &Arc<Proxy>, conn: &mut Conn, cmd: Cmd, c: &mut Cursor<'_>) -> Result<Action, Reply> {
    use connection::{Auth, Client, Echo, Hello, Ping, Select, Wait};
    use keys::{Expire, GetSet, SetNx, Verbatim};
    Ok(match cmd {
        Cmd::Set => set::set(proxy, conn, Set::parse(c, proxy.config().default_ttl_ms)?),
        Cmd::Ping => connection::ping(proxy, conn, Ping::parse(c)),
        Cmd::Echo => connection::echo(proxy, conn, Echo::parse(c)?),
        Cmd::Wait => connection::wait(proxy, conn, Wait::parse(c)?),
        Cmd::Hello => connection::hello(proxy, conn, Hello::parse(c)?),
        Cmd::Auth => connection::auth(proxy, conn, Auth::parse(c)?),
        Cmd::Select => connection::select(proxy, conn, Select::parse(c)?),
        Cmd::Client => connection::client(proxy, conn, Client::parse(c)?),
        Cmd::Quit => connection::quit(proxy, conn),
        Cmd::Reset => connection::reset(proxy, conn),
        Cmd::Command => introspect::command(proxy, conn, introspect::CommandQuery::parse(c)?),
        Cmd::Info => introspect::info(proxy, conn, introspect::Info::parse(c)),
        Cmd::Config => introspect::config(proxy, conn, introspect::ConfigGet::parse(c)?),
        Cmd::Get => keys::get(proxy, conn, Verbatim::one_key(c)?),
        Cmd::Exists => keys::exists(proxy, conn, Verbatim::all_keys(c)),
        Cmd::Setnx => keys::setnx(proxy, conn, SetNx::parse(c)?),
        Cmd::Getset => keys::getset(proxy, conn, GetSet::parse(c)?),
        Cmd::Del | Cmd::Unlink => keys::del(proxy, conn, Verbatim::all_keys(c)),
        Cmd::Setex | Cmd::Psetex => set::set(proxy, conn, Set::parse_setex(c, cmd)?),
        Cmd::Expire | Cmd::Pexpire | Cmd::Pexpireat | Cmd::Expireat => {
            keys::expire(proxy, conn, Expire::parse(c, cmd)?)
        }
        Cmd::Ttl | Cmd::Pttl => keys::ttl(proxy, conn, Verbatim::one_key(c)?),
        Cmd::Hget => keys::hget(proxy, conn, Verbatim::one_key(c)?),
        Cmd::Hexists | Cmd::Llen => keys::count(proxy, conn, Verbatim::one_key(c)?),
        Cmd::Hgetall => keys::hgetall(proxy, conn, Verbatim::one_key(c)?),
        Cmd::Blpop => blocking::blpop(proxy, conn, blocking::Blpop::parse(c)?),
        Cmd::Watch => transaction::watch(proxy, conn, transaction::Watch::parse(c)),
        Cmd::Unwatch => transaction::unwatch(proxy, conn),
        Cmd::Multi => transaction::multi(proxy, conn),
        Cmd::Exec => transaction::exec(proxy, conn, dispatch_owned),
        Cmd::Discard => transaction::discard(proxy, conn),
        Cmd::Eval => script::eval(proxy, conn, script::Eval::parse(c)?),
        Cmd::Evalsha => script::evalsha(proxy, conn, script::EvalSha::parse(c)?),
        Cmd::Script => script::script(proxy, conn, script::ScriptCommand::parse(c)?),
        Cmd::RedlockFence => fence::fence(proxy, conn, fence::Fence::parse(c)?),
        Cmd::Subscribe => pubsub::sub(proxy, conn, Channels::parse(c)),
        Cmd::Psubscribe => pubsub::psub(proxy, conn, Channels::parse(c)),
        Cmd::Ssubscribe => pubsub::ssub(proxy, conn, Channels::parse(c)),
        Cmd::Unsubscribe => pubsub::unsub(proxy, conn, Channels::parse(c)),
        Cmd::Punsubscribe => pubsub::punsub(proxy, conn, Channels::parse(c)),
        Cmd::Sunsubscribe => pubsub::sunsub(proxy, conn, Channels::parse(c)),
        Cmd::Publish | Cmd::Spublish => {
            pubsub::publish(proxy, conn, pubsub::Publish::parse(c, cmd)?)
        }
        Cmd::Delex => conditional::delex(proxy, conn, conditional::Delex::parse(c)?),
        Cmd::Delifeq => conditional::delifeq(proxy, conn, conditional::DelIfEq::parse(c)?),
        Cmd::Digest => conditional::digest(proxy, conn, conditional::Digest::parse(c)?),
    })
}
