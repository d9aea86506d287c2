//! Commands: from a request to an answer.
//!
//! A request is parsed once into a [`Command`] ([`spec`]: the table, the parser and each
//! command's keys); [`dispatch`] checks what applies to every command (login, the user's keys,
//! subscriptions, transactions) from the command's type, then runs its handler. A handler
//! returns an [`Action`]: an immediate reply for connection bookkeeping, or a future for
//! anything that talks to the masters. Futures are created synchronously during dispatch, and
//! they queue their requests to the masters in dispatch order, so pipelined commands reach
//! every master in the client's order.
//!
//! The files, from the bottom up (each uses only those above it in this list):
//! - [`spec`]: [`Cmd`], the table, [`Command`]. [`session`]: a client's state ([`Conn`]).
//!   [`action`]: [`Action`] and the per-key turn.
//! - [`repair`]: quorum repair, a lock written back after a granted extension to the
//!   trusted members that lacked it.
//! - [`lock`]: the Redlock engine (acquire, extend, release, roll back).
//! - [`keys`]: plain key commands decided by majority; [`conditional`] (`SET … IFEQ`,
//!   `DELEX`, `DELIFEQ`, `DIGEST`); [`set`] (`SET` and its forms);
//!   [`hashlock`] (re-entrant hash locks); [`rwlock`] (read-write and fair locks); [`fence`]
//!   (fencing tokens); [`script`] (`EVAL`, `EVALSHA`, `SCRIPT`); [`blocking`], [`pubsub`],
//!   [`connection`], [`introspect`], [`transaction`].
//! - this file: dispatch.

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
use session::Conn;
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
    let args = command.into_args();
    let client_reply =
        cmd == Cmd::Client && args.len() > 1 && args[1].eq_ignore_ascii_case(b"reply");
    if conn.in_multi() && (cmd.subscribes() || client_reply) {
        // Several replies to one command cannot sit inside EXEC's array (Redis 7.2 refuses
        // these in a transaction too), nor can a reply switched off halfway through it.
        conn.fail_multi();
        return Reply::from(Error::NotInMulti).into();
    }
    if conn.in_multi() && !cmd.runs_at_once() {
        return transaction::queue(proxy, conn, args.into_vec());
    }
    run(proxy, conn, cmd, args)
}

/// Runs a checked command's handler.
fn run(proxy: &Arc<Proxy>, conn: &mut Conn, cmd: Cmd, args: Args<'_>) -> Action {
    match cmd {
        Cmd::Ping => connection::ping(proxy, conn, args.into_vec()),
        Cmd::Echo => connection::echo(proxy, conn, args.into_vec()),
        Cmd::Wait => connection::wait(proxy, conn, args.into_vec()),
        Cmd::Hello => connection::hello(proxy, conn, args.into_vec()),
        Cmd::Auth => connection::auth(proxy, conn, args.into_vec()),
        Cmd::Select => connection::select(proxy, conn, args.into_vec()),
        Cmd::Client => connection::client(proxy, conn, args.into_vec()),
        Cmd::Quit => connection::quit(proxy, conn, args.into_vec()),
        Cmd::Reset => connection::reset(proxy, conn, args.into_vec()),
        Cmd::Command => introspect::command(proxy, conn, args.into_vec()),
        Cmd::Info => introspect::info(proxy, conn, args.into_vec()),
        Cmd::Config => introspect::config(proxy, conn, args.into_vec()),
        Cmd::Set => set::set(proxy, conn, args),
        Cmd::Get => keys::get(proxy, conn, args.into_vec()),
        Cmd::Exists => keys::exists(proxy, conn, args.into_vec()),
        Cmd::Setnx => keys::setnx(proxy, conn, args.into_vec()),
        Cmd::Getset => keys::getset(proxy, conn, args.into_vec()),
        Cmd::Del => keys::del(proxy, conn, args.into_vec()),
        Cmd::Unlink => keys::del(proxy, conn, args.into_vec()),
        Cmd::Setex => set::setex(proxy, conn, args.into_vec(), cmd),
        Cmd::Psetex => set::setex(proxy, conn, args.into_vec(), cmd),
        Cmd::Expire => keys::expire(proxy, conn, args.into_vec(), cmd),
        Cmd::Pexpire => keys::expire(proxy, conn, args.into_vec(), cmd),
        Cmd::Pexpireat => keys::expire(proxy, conn, args.into_vec(), cmd),
        Cmd::Expireat => keys::expire(proxy, conn, args.into_vec(), cmd),
        Cmd::Ttl => keys::ttl(proxy, conn, args.into_vec()),
        Cmd::Hget => keys::hget(proxy, conn, args.into_vec()),
        Cmd::Hexists => keys::count(proxy, conn, args.into_vec()),
        Cmd::Hgetall => keys::hgetall(proxy, conn, args.into_vec()),
        Cmd::Llen => keys::count(proxy, conn, args.into_vec()),
        Cmd::Blpop => blocking::blpop(proxy, conn, args.into_vec()),
        Cmd::Pttl => keys::ttl(proxy, conn, args.into_vec()),
        Cmd::Watch => transaction::watch(proxy, conn, args.into_vec()),
        Cmd::Unwatch => transaction::unwatch(proxy, conn, args.into_vec()),
        Cmd::Multi => transaction::multi(proxy, conn, args.into_vec()),
        Cmd::Exec => transaction::exec(proxy, conn, args.into_vec(), dispatch_owned),
        Cmd::Discard => transaction::discard(proxy, conn, args.into_vec()),
        Cmd::Eval => script::eval(proxy, conn, args.into_vec()),
        Cmd::Evalsha => script::evalsha(proxy, conn, args.into_vec()),
        Cmd::Script => script::script(proxy, conn, args.into_vec()),
        Cmd::RedlockFence => fence::fence(proxy, conn, args.into_vec()),
        Cmd::Subscribe => pubsub::sub(proxy, conn, args.into_vec()),
        Cmd::Psubscribe => pubsub::psub(proxy, conn, args.into_vec()),
        Cmd::Ssubscribe => pubsub::ssub(proxy, conn, args.into_vec()),
        Cmd::Unsubscribe => pubsub::unsub(proxy, conn, args.into_vec()),
        Cmd::Punsubscribe => pubsub::punsub(proxy, conn, args.into_vec()),
        Cmd::Sunsubscribe => pubsub::sunsub(proxy, conn, args.into_vec()),
        Cmd::Publish => pubsub::publish(proxy, conn, args.into_vec(), cmd),
        Cmd::Spublish => pubsub::publish(proxy, conn, args.into_vec(), cmd),
        Cmd::Delex => conditional::delex(proxy, conn, args.into_vec()),
        Cmd::Delifeq => conditional::delifeq(proxy, conn, args.into_vec()),
        Cmd::Digest => conditional::digest(proxy, conn, args.into_vec()),
    }
}
