//! Reads that lock owners use, answered by the majority rule.
//!
//! `GET` answers the value a quorum of masters agree on, or nil when no value has a quorum
//! (so a caller checking "is this lock still mine?" never gets a false yes). `EXISTS` answers
//! the largest count that a quorum of masters reach.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::Action;
use crate::client::Conn;
use crate::quorum::{Ballots, Request, ask};
use crate::reply::{Reply, command};
use crate::server::Proxy;

/// Sends the client's command verbatim to every master and maps the ballots to a reply.
pub fn forward(
    proxy: &Arc<Proxy>,
    args: &[Bytes],
    keys: &[Bytes],
    decide: fn(&Ballots) -> Reply,
) -> Action {
    let parts: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
    let req = command(&parts);
    let ticket = proxy.keylocks.enqueue(keys);
    let proxy = proxy.clone();
    Action::Later(Box::pin(async move {
        let _held = ticket.ready().await;
        let ballots = ask(
            &proxy.masters,
            Request::Same(req),
            1,
            Instant::now() + proxy.config.node_timeout(),
        )
        .outcome()
        .await;
        decide(&ballots)
    }))
}

/// The largest integer that at least a quorum of masters reported (each master's reply counts
/// for every value up to it). Nil when fewer than a quorum answered with an integer.
pub fn quorum_floor(ballots: &Ballots) -> Reply {
    let mut values: Vec<i64> = ballots
        .replies
        .iter()
        .filter_map(|r| match r {
            Some(Reply::Integer(i)) => Some(*i),
            _ => None,
        })
        .collect();
    values.sort_unstable_by(|a, b| b.cmp(a));
    match values.get(ballots.quorum - 1) {
        Some(v) => Reply::Integer(*v),
        None => no_quorum(),
    }
}

/// The error for a read that fewer than a quorum of masters answered.
pub fn no_quorum() -> Reply {
    Reply::static_error("CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered")
}

/// `GET key`
pub fn get(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    forward(proxy, &args, &args[1..2], |b| {
        b.majority().cloned().unwrap_or(Reply::Nil)
    })
}

/// `EXISTS key [key ...]`
pub fn exists(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    forward(proxy, &args, &args[1..], quorum_floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_floor_counts_what_a_majority_reach() {
        let b = Ballots {
            replies: vec![
                Some(Reply::Integer(2)),
                Some(Reply::Integer(1)),
                Some(Reply::Integer(0)),
                None,
                Some(Reply::Integer(2)),
            ],
            failed: vec![None; 5],
            quorum: 3,
        };
        assert_eq!(quorum_floor(&b), Reply::Integer(1));
        let b = Ballots {
            replies: vec![Some(Reply::Integer(2)), None, None],
            failed: vec![None; 3],
            quorum: 2,
        };
        assert_eq!(quorum_floor(&b), no_quorum());
    }
}
