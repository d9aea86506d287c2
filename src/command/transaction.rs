//! `WATCH`/`UNWATCH`/`MULTI`/`EXEC`/`DISCARD`, run by the proxy for the compare-then-delete
//! release pattern: `WATCH lock`, `GET lock`, compare the token, `MULTI`, `DEL lock`, `EXEC`.
//!
//! A transaction cannot be handed to the masters as it is: each master would judge the watch on
//! its own, and the masters' connections are shared by every client. So the proxy does it:
//!
//! - `WATCH key` records the value a quorum of masters hold (read in the key's turn, after
//!   every earlier command on it).
//! - `MULTI` starts queueing; each command is checked (name, arity) and answered `QUEUED`; a
//!   refused one makes `EXEC` answer `EXECABORT`, as Redis does.
//! - `EXEC` reads every watched key again, in its turn. If the value a quorum hold is not the
//!   one seen at `WATCH` (or no value has a quorum, either time), the transaction aborts with a
//!   nil reply. Otherwise the queued commands run in order, each under its own majority rule,
//!   and nothing from other clients of this proxy comes between the check and them. A queued
//!   `DEL` of a watched key deletes it on each master only while it still holds the watched
//!   value, so the release stays atomic on every master even against other proxies; a queued
//!   `EXPIRE`/`PEXPIRE`/`EXPIREAT`/`PEXPIREAT` of a watched key likewise sets the expiry only
//!   where the key still holds the watched value.
//!
//! A key "changed" when the value a quorum hold differs: unlike Redis, writing the same value
//! again or changing only the TTL does not abort `EXEC`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::action::{Action, in_turn};
use super::args::Cursor;
use super::keys;
use super::session::{Conn, Transaction, Watched};
use super::spec::{Cmd, keys_of, lookup};
use crate::error::Error;
use crate::proxy::Proxy;
use crate::quorum::{Ballots, Request, ask};
use crate::wire::master::command;
use crate::wire::master::eval;
use crate::wire::reply::Reply;
use crate::wire::request::Args;
use tokio::time::Instant;

/// Deletes `KEYS[i]` unconditionally when `ARGV[2i-1]` is `0`, or only while it holds
/// `ARGV[2i]` when that is `1`; answers how many keys it deleted.
const DEL_IF: &str = "local n = 0 \
    for i, key in ipairs(KEYS) do \
      if ARGV[2 * i - 1] == '0' or redis.call('get', key) == ARGV[2 * i] then \
        n = n + redis.call('del', key) \
      end \
    end \
    return n";

/// How `EXEC` runs a queued command: the dispatcher, handed down (it sits above this file).
pub type Run = fn(&Arc<Proxy>, &mut Conn, Vec<Bytes>) -> Action;

/// What keeping `args` costs: their bytes, and each one's handle (so that many empty
/// arguments count too).
fn held_size(args: &[Bytes]) -> usize {
    args.iter()
        .map(|a| a.len() + std::mem::size_of::<Bytes>())
        .sum()
}

/// Queues a checked command inside `MULTI`; past `max_multi_commands`, or past
/// `client_query_buffer_limit` bytes of queued arguments (the most a client may have sent and
/// not yet had run; counted as each command is queued), the command is refused and `EXEC` will
/// abort, as after any refused command.
pub fn queue(proxy: &Proxy, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    let config = proxy.config();
    let size = held_size(&args);
    match conn.queue(
        args,
        size,
        config.max_multi_commands,
        config.client_query_buffer_limit,
    ) {
        Ok(()) => Reply::simple("QUEUED").into(),
        Err(refused) => Reply::from(refused).into(),
    }
}

/// The majority value of each key: `Some(reply)` when a quorum answered alike. All the `GET`s
/// travel in one request per master (one round trip however many keys are watched).
async fn read(proxy: &Proxy, keys: &[Bytes]) -> Vec<Option<Reply>> {
    let mut request = Vec::new();
    for key in keys {
        request.extend_from_slice(&command(&[b"GET", key]));
    }
    let deadline = Instant::now() + proxy.config().node_timeout();
    let all = ask(
        &proxy.masters(),
        Request::Same(Bytes::from(request)),
        keys.len(),
        deadline,
    )
    .finish()
    .await;
    // Each master's replies, one per key (a master without a full set casts no vote).
    let mut per_master: Vec<Option<std::vec::IntoIter<Reply>>> = all
        .replies
        .iter()
        .map(|r| match r {
            Some(Reply::Array(each)) if each.len() == keys.len() => Some(each.clone().into_iter()),
            Some(single) if keys.len() == 1 => Some(vec![single.clone()].into_iter()),
            _ => None,
        })
        .collect();
    (0..keys.len())
        .map(|_| {
            let one = Ballots {
                replies: per_master
                    .iter_mut()
                    .map(|m| m.as_mut().and_then(Iterator::next))
                    .collect(),
                failed: all.failed.clone(),
                quorum: all.quorum,
                masters: all.masters.clone(),
            };
            let one = keys::counted(proxy.config(), one);
            Some(keys::agreed_or_no_quorum(&one)).filter(|r| !r.is_error())
        })
        .collect()
}

/// `WATCH key [key ...]`: the keys.
pub struct Watch(Vec<Bytes>);

impl Watch {
    /// Reads `WATCH key [key ...]`.
    pub fn parse(c: &mut Cursor<'_>) -> Watch {
        Watch(c.rest_bytes())
    }
}

/// `WATCH key [key ...]`
pub fn watch(proxy: &Arc<Proxy>, conn: &mut Conn, Watch(keys): Watch) -> Action {
    if conn.in_multi() {
        return Reply::from(Error::WatchInMulti).into();
    }
    let (watched, held) = match conn.watch(&keys, proxy.config().max_watch_keys) {
        Ok(watching) => watching,
        Err(refused) => return Reply::from(refused).into(),
    };
    let limit = proxy.config().client_query_buffer_limit;
    in_turn(proxy, &keys, move |proxy| async move {
        let keys: Vec<Bytes> = watched.iter().map(|w| w.key.clone()).collect();
        let seen = read(&proxy, &keys).await;
        // The values are kept (to guard `EXEC`'s deletes), so they count against the same
        // limit as what a client may have sent and not yet had run. Past it, none of this
        // call's values is kept: the keys count as changed, and `EXEC` will abort.
        let values: usize = seen
            .iter()
            .map(|r| match r {
                Some(Reply::Bulk(v)) => v.len(),
                _ => 0,
            })
            .sum();
        let bytes = values + held_size(&keys);
        if held.fetch_add(bytes, Ordering::Relaxed) + bytes > limit {
            held.fetch_sub(bytes, Ordering::Relaxed);
            for w in &watched {
                let _ = w.seen.set(None);
            }
            return Reply::from(Error::WatchedTooLarge { max: limit });
        }
        for (w, seen) in watched.iter().zip(seen) {
            let _ = w.seen.set(seen);
        }
        Reply::ok()
    })
}

/// `UNWATCH`
pub fn unwatch(_: &Arc<Proxy>, conn: &mut Conn) -> Action {
    conn.take_watched();
    Reply::ok().into()
}

/// `MULTI`
pub fn multi(_: &Arc<Proxy>, conn: &mut Conn) -> Action {
    if conn.in_multi() {
        return Reply::from(Error::NestedMulti).into();
    }
    conn.begin_multi();
    Reply::ok().into()
}

/// `DISCARD`
pub fn discard(_: &Arc<Proxy>, conn: &mut Conn) -> Action {
    if conn.take_multi().is_none() {
        return Reply::from(Error::DiscardWithoutMulti).into();
    }
    conn.take_watched();
    Reply::ok().into()
}

/// `EXEC`
/// `run` dispatches each queued command, as it would have run outside `MULTI`.
pub fn exec(proxy: &Arc<Proxy>, conn: &mut Conn, run: Run) -> Action {
    let Some(transaction) = conn.take_multi() else {
        return Reply::from(Error::ExecWithoutMulti).into();
    };
    let watched = conn.take_watched();
    let Transaction::Queued(queued) = transaction else {
        return Reply::from(Error::ExecAbort).into();
    };
    // Everything is put in line now, in order: the check of the watched keys, then each
    // queued command; the commands only run if the check passes.
    let keys: Vec<Bytes> = watched.iter().map(|w| w.key.clone()).collect();
    let check = (!keys.is_empty()).then(|| proxy.keylocks().enqueue(&keys));
    let mut scratch = conn.scratch();
    let actions: Vec<Action> = queued
        .into_iter()
        .map(|args| queued_action(proxy, &mut scratch, args, &watched, run))
        .collect();
    let proxy = proxy.clone();
    Action::Later(Box::pin(async move {
        if let Some(ticket) = check {
            let _held = ticket.ready().await;
            let now = read(&proxy, &keys).await;
            for (w, now) in watched.iter().zip(now) {
                if now.is_none() || w.seen.get() != Some(&now) {
                    return Reply::NilArray;
                }
            }
        }
        let mut replies = Vec::with_capacity(actions.len());
        for action in actions {
            replies.push(match action {
                Action::Reply(r) | Action::Close(r) => r,
                Action::Later(later) => later.await,
            });
        }
        Reply::Array(replies)
    }))
}

/// A queued command, made ready to run: a `DEL` that names watched keys deletes those only
/// while they hold the watched value, and an expiry (`PEXPIRE`, StackExchange.Redis's
/// `LockExtend`) of a watched key is set only where it holds the watched value; anything else
/// runs as it would outside `MULTI`.
fn queued_action(
    proxy: &Arc<Proxy>,
    conn: &mut Conn,
    args: Vec<Bytes>,
    watched: &[Watched],
    run: Run,
) -> Action {
    let request = Args::from(args);
    let cmd = request.get(0).and_then(lookup).map(|s| s.cmd);
    if let Some(cmd @ (Cmd::Expire | Cmd::Pexpire | Cmd::Expireat | Cmd::Pexpireat)) = cmd {
        let key = keys_of(cmd.spec(), &request).next();
        let holds = watched
            .iter()
            .find(|w| Some(&w.key[..]) == key)
            .and_then(Watched::value);
        if holds.is_some() {
            return match keys::Expire::parse(&mut Cursor::new(&request, cmd), cmd) {
                Ok(expire) => keys::expire_where(proxy, expire, holds),
                Err(e) => Reply::from(e).into(),
            };
        }
    }
    if cmd == Some(Cmd::Del) {
        let keys = Cursor::new(&request, Cmd::Del).rest_bytes();
        let by_key: std::collections::HashMap<&Bytes, &Watched> =
            watched.iter().map(|w| (&w.key, w)).collect();
        let expected: Vec<Option<Watched>> = keys
            .iter()
            .map(|k| by_key.get(k).map(|w| (*w).clone()))
            .collect();
        if expected.iter().any(Option::is_some) {
            return del_watched(proxy, keys, expected);
        }
    }
    run(proxy, conn, request.into_vec())
}

/// `DEL keys` where a watched key (`expected[i]`) is deleted on each master only while it still
/// holds the value seen at `WATCH` (read when the command runs, after the `WATCH` read); the
/// other keys unconditionally. Answers how many keys a quorum deleted.
fn del_watched(proxy: &Arc<Proxy>, keys: Vec<Bytes>, expected: Vec<Option<Watched>>) -> Action {
    in_turn(proxy, &keys.clone(), move |proxy| async move {
        let mut argv: Vec<Bytes> = Vec::with_capacity(2 * keys.len());
        for w in &expected {
            match w.as_ref().and_then(Watched::value) {
                Some(v) => argv.extend([Bytes::from_static(b"1"), v]),
                None => argv.extend([Bytes::from_static(b"0"), Bytes::new()]),
            }
        }
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_ref()).collect();
        let request = eval(DEL_IF, &keys, &argv);
        let ballots = keys::vote(&proxy, request, keys::Gather::Outcome).await;
        keys::quorum_floor(&keys::counted(proxy.config(), ballots))
    })
}
