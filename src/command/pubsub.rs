//! `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE`, their `UNSUBSCRIBE`s, `PUBLISH` and `SPUBLISH`, as
//! Redis answers them, across the masters (see [`crate::pubsub`]).
//!
//! A subscription is answered once a quorum of masters confirmed the proxy's own subscription
//! to it (at most a second), so a message published after the answer reaches the client. A
//! publish goes to every master (every master's subscribers, other proxies included, get it)
//! and answers the largest number of receivers any master reported.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::action::Action;
use super::keys::{Gather, vote};
use super::session::Conn;
use super::spec::Cmd;
use crate::proxy::Proxy;
use crate::pubsub::Kind;
use crate::wire::master::command;
use crate::wire::reply::Reply;

/// The longest a subscription waits for the masters to confirm it.
const CONFIRM_WITHIN: Duration = Duration::from_secs(1);

fn verb(kind: Kind, on: bool) -> &'static [u8] {
    match (kind, on) {
        (Kind::Channel, true) => b"subscribe",
        (Kind::Pattern, true) => b"psubscribe",
        (Kind::Shard, true) => b"ssubscribe",
        (Kind::Channel, false) => b"unsubscribe",
        (Kind::Pattern, false) => b"punsubscribe",
        (Kind::Shard, false) => b"sunsubscribe",
    }
}

fn confirmation(kind: Kind, on: bool, name: Option<Bytes>, count: usize) -> Reply {
    Reply::Push(vec![
        Reply::Bulk(Bytes::from_static(verb(kind, on))),
        name.map_or(Reply::Nil, Reply::Bulk),
        Reply::Integer(count as i64),
    ])
}

fn subscribe(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>, kind: Kind) -> Action {
    let subs = conn.subscribe_with(proxy.hub());
    let names: Vec<Bytes> = args[1..].to_vec();
    let replies: Vec<Reply> = names
        .iter()
        .map(|n| confirmation(kind, true, Some(n.clone()), subs.add(kind, n)))
        .collect();
    Action::Later(Box::pin(async move {
        for n in &names {
            subs.hub().confirmed(kind, n, CONFIRM_WITHIN).await;
        }
        Reply::Many(replies)
    }))
}

fn unsubscribe(conn: &mut Conn, args: Vec<Bytes>, kind: Kind) -> Action {
    let Some(subs) = conn.subs().cloned() else {
        return confirmation(kind, false, None, 0).into();
    };
    let names = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        subs.list(kind)
    };
    if names.is_empty() {
        return confirmation(kind, false, None, subs.count(kind)).into();
    }
    Reply::Many(
        names
            .into_iter()
            .map(|n| {
                let count = subs.remove(kind, &n);
                confirmation(kind, false, Some(n), count)
            })
            .collect(),
    )
    .into()
}

/// `SUBSCRIBE channel [channel ...]`
pub fn sub(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    subscribe(proxy, conn, args, Kind::Channel)
}

/// `PSUBSCRIBE pattern [pattern ...]`
pub fn psub(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    subscribe(proxy, conn, args, Kind::Pattern)
}

/// `SSUBSCRIBE shardchannel [shardchannel ...]`
pub fn ssub(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    subscribe(proxy, conn, args, Kind::Shard)
}

/// `UNSUBSCRIBE [channel ...]`
pub fn unsub(_: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    unsubscribe(conn, args, Kind::Channel)
}

/// `PUNSUBSCRIBE [pattern ...]`
pub fn punsub(_: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    unsubscribe(conn, args, Kind::Pattern)
}

/// `SUNSUBSCRIBE [shardchannel ...]`
pub fn sunsub(_: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    unsubscribe(conn, args, Kind::Shard)
}

/// `PUBLISH channel message`, `SPUBLISH shardchannel message`
pub fn publish(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>, cmd: Cmd) -> Action {
    let name: &[u8] = if cmd == Cmd::Spublish {
        b"SPUBLISH"
    } else {
        b"PUBLISH"
    };
    let request = command(&[name, &args[1], &args[2]]);
    let proxy = proxy.clone();
    Action::Later(Box::pin(async move {
        let ballots = vote(&proxy, request, Gather::Outcome).await;
        let most = ballots.integers().max();
        match most {
            Some(n) => Reply::Integer(n),
            None => ballots
                .majority()
                .cloned()
                .unwrap_or_else(super::keys::no_quorum),
        }
    }))
}
