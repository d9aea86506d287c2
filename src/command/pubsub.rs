//! `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE`, their `UNSUBSCRIBE`s, `PUBLISH` and `SPUBLISH`, as
//! Redis answers them, across the masters (see [`crate::pubsub`]).
//!
//! A subscription is answered once a quorum of masters confirmed the proxy's own subscription
//! to it (at most a second), so a message published after the answer reaches the client. A
//! publish goes to every master (every master's subscribers, other proxies included, get it)
//! and answers the largest number of receivers any master reported.
//!
//! A user limited to some channels (`channels` in `[[users]]`) is refused, as Redis 7 refuses
//! it, a subscription or publish that names a channel outside them (`NOPERM`); a pattern
//! subscription must name one of its patterns exactly. Nobody publishes on the proxy's own
//! channels (`redlock-proxy:*`), which only the proxy's notices use.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::action::Action;
use super::args::Cursor;
use super::keys::{Gather, vote};
use super::session::Conn;
use super::spec::Cmd;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::pubsub::{Kind, reserved};
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

/// True when the connection's user may subscribe to every one of `names`.
fn may_subscribe(conn: &Conn, kind: Kind, names: &[Bytes]) -> bool {
    names.iter().all(|n| match kind {
        Kind::Pattern => conn.may_use_pattern(n),
        Kind::Channel | Kind::Shard => conn.may_use_channel(n),
    })
}

/// The channels (or patterns) a subscribe or unsubscribe command names, read.
pub struct Channels(Vec<Bytes>);

impl Channels {
    /// Reads `command [name ...]`.
    pub fn parse(c: &mut Cursor<'_>) -> Channels {
        Channels(c.rest_bytes())
    }
}

fn subscribe(proxy: &Arc<Proxy>, conn: &mut Conn, Channels(names): Channels, kind: Kind) -> Action {
    if !may_subscribe(conn, kind, &names) {
        return Reply::from(Error::NoPermChannels).into();
    }
    let subs = conn.subscribe_with(proxy.hub());
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

fn unsubscribe(conn: &mut Conn, Channels(names): Channels, kind: Kind) -> Action {
    let Some(subs) = conn.subs().cloned() else {
        return confirmation(kind, false, None, 0).into();
    };
    let names = if names.is_empty() {
        subs.list(kind)
    } else {
        names
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

/// Whether the connection's user may publish on `channel`: not on the proxy's own channels,
/// whoever asks, and otherwise as its channel patterns allow.
pub fn may_publish(conn: &Conn, channel: &[u8]) -> Result<(), Error> {
    if reserved(channel) {
        Err(Error::ReservedChannel)
    } else if !conn.may_use_channel(channel) {
        Err(Error::NoPermChannels)
    } else {
        Ok(())
    }
}

/// `SUBSCRIBE channel [channel ...]`
pub fn sub(proxy: &Arc<Proxy>, conn: &mut Conn, names: Channels) -> Action {
    subscribe(proxy, conn, names, Kind::Channel)
}

/// `PSUBSCRIBE pattern [pattern ...]`
pub fn psub(proxy: &Arc<Proxy>, conn: &mut Conn, names: Channels) -> Action {
    subscribe(proxy, conn, names, Kind::Pattern)
}

/// `SSUBSCRIBE shardchannel [shardchannel ...]`
pub fn ssub(proxy: &Arc<Proxy>, conn: &mut Conn, names: Channels) -> Action {
    subscribe(proxy, conn, names, Kind::Shard)
}

/// `UNSUBSCRIBE [channel ...]`
pub fn unsub(_: &Arc<Proxy>, conn: &mut Conn, names: Channels) -> Action {
    unsubscribe(conn, names, Kind::Channel)
}

/// `PUNSUBSCRIBE [pattern ...]`
pub fn punsub(_: &Arc<Proxy>, conn: &mut Conn, names: Channels) -> Action {
    unsubscribe(conn, names, Kind::Pattern)
}

/// `SUNSUBSCRIBE [shardchannel ...]`
pub fn sunsub(_: &Arc<Proxy>, conn: &mut Conn, names: Channels) -> Action {
    unsubscribe(conn, names, Kind::Shard)
}

/// `PUBLISH channel message`, `SPUBLISH shardchannel message`, read.
pub struct Publish {
    /// `SPUBLISH`
    shard: bool,
    channel: Bytes,
    message: Bytes,
}

impl Publish {
    /// Reads `PUBLISH channel message` or `SPUBLISH shardchannel message` (`cmd`).
    pub fn parse(c: &mut Cursor<'_>, cmd: Cmd) -> Result<Publish, Error> {
        Ok(Publish {
            shard: cmd == Cmd::Spublish,
            channel: c.next_bytes()?,
            message: c.next_bytes()?,
        })
    }
}

/// `PUBLISH channel message`, `SPUBLISH shardchannel message`
pub fn publish(proxy: &Arc<Proxy>, conn: &mut Conn, p: Publish) -> Action {
    if let Err(e) = may_publish(conn, &p.channel) {
        return Reply::from(e).into();
    }
    let name: &[u8] = if p.shard { b"SPUBLISH" } else { b"PUBLISH" };
    let request = command(&[name, &p.channel, &p.message]);
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
