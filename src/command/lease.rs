//! Leases: a lock acquired through the proxy on a key that matches `lease_keys` is renewed
//! while the connection that acquired it stays open.
//!
//! A connection whose lease patterns are not empty carries a [`Leases`]. When one of its
//! acquisitions is granted on keys that all match, a task keeps the lock: every TTL/3 it runs a
//! quorum compare-and-extend with the holder's token (a hash lock: with its field), back to the
//! full TTL, under Redlock's validity rule, never past the grant plus `lease_max_ms`. The lease
//! ends quietly when a quorum answer that the lock is no longer the holder's (released, through
//! any proxy), when the connection closes (and the lock is then released when
//! `lease_release_on_disconnect` is set), or at `lease_max_ms`. When a renewal cannot reach a
//! quorum within validity, the lease is **lost**: counted, logged at WARN with the key, and
//! told to the holder — published on [`LOST_CHANNEL`] with the key as message, and pushed to
//! the holder's own connection when it speaks RESP3.
//!
//! Connections without patterns carry nothing, and an acquisition that is not leased pays
//! nothing: the grant is watched only where a lease will follow it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::time::{Instant, sleep_until};
use tracing::{debug, warn};

use super::action::Action;
use super::hashlock;
use super::lock::{self, Renewal};
use super::session::Leases;
use crate::counters::Counters;
use crate::proxy::Proxy;
use crate::wire::master::command;
use crate::wire::reply::Reply;

/// The channel a lost lease is published on; the message is the lock's key.
pub const LOST_CHANNEL: &[u8] = b"redlock-proxy:lease-lost";

/// A lock a lease keeps.
#[derive(Debug, Clone)]
pub enum Leased {
    /// A plain lock: its keys hold the token.
    Plain {
        /// The keys, all or nothing.
        keys: Vec<Bytes>,
        /// The holder's token.
        token: Bytes,
        /// The TTL each renewal sets, in ms.
        ttl_ms: i64,
    },
    /// A re-entrant hash lock: the hash at `key` holds the holder's `field`.
    Hash {
        /// The lock's key.
        key: Bytes,
        /// The holder's field.
        field: Bytes,
        /// The TTL each renewal sets, in ms.
        ttl_ms: i64,
    },
}

impl Leased {
    /// The key a signal names (a multi-key lock's first).
    fn key(&self) -> &Bytes {
        match self {
            Leased::Plain { keys, .. } => &keys[0],
            Leased::Hash { key, .. } => key,
        }
    }

    /// What tells two leases of one lock apart: its (first) key, and its token or field.
    fn id(&self) -> (Bytes, Bytes) {
        match self {
            Leased::Plain { keys, token, .. } => (keys[0].clone(), token.clone()),
            Leased::Hash { key, field, .. } => (key.clone(), field.clone()),
        }
    }

    fn ttl_ms(&self) -> i64 {
        match self {
            Leased::Plain { ttl_ms, .. } | Leased::Hash { ttl_ms, .. } => *ttl_ms,
        }
    }
}

/// `action`, an acquisition of `lock` on a connection with `leases`, with a lease that starts
/// when its answer is a grant (`granted` says which answers are).
pub fn on_grant(
    leases: &Arc<Leases>,
    proxy: &Arc<Proxy>,
    action: Action,
    lock: Leased,
    granted: impl Fn(&Reply) -> bool + Send + 'static,
) -> Action {
    let (leases, proxy) = (leases.clone(), proxy.clone());
    let start = move |reply: &Reply| {
        if granted(reply) {
            hold(&leases, &proxy, lock);
        }
    };
    match action {
        Action::Reply(reply) => {
            start(&reply);
            Action::Reply(reply)
        }
        Action::Later(later) => Action::Later(Box::pin(later.map(move |reply| {
            start(&reply);
            reply
        }))),
        other => other,
    }
}

/// The most leases the proxy keeps at once, over every connection: a lock granted beyond gets
/// no lease (it expires by its TTL, as without leases), so many clients together cannot make
/// the proxy renew without bound either.
pub const MAX_LEASES_TOTAL: u64 = 100_000;

/// Starts keeping `lock`, granted just now, unless it is kept already.
fn hold(leases: &Arc<Leases>, proxy: &Arc<Proxy>, lock: Leased) {
    if Counters::get(&proxy.counters().leases_active) >= MAX_LEASES_TOTAL {
        debug!(
            key = %lock.key().escape_ascii(),
            "no new lease: the proxy keeps the most leases it may"
        );
        return;
    }
    if !leases.keep(lock.id()) {
        debug!(
            key = %lock.key().escape_ascii(),
            "no new lease: the lock has one already, or its connection keeps the most it may"
        );
        return;
    }
    Counters::bump(&proxy.counters().leases_active);
    tokio::spawn(keep(proxy.clone(), leases.clone(), lock, Instant::now()));
}

/// Why a lease ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Released,
    Disconnected,
    Max,
    /// Why, and the masters that answered the last renewal.
    Lost(&'static str, super::lock::Answered),
}

/// Renews `lock` until its lease ends, then does what the end asks.
async fn keep(proxy: Arc<Proxy>, leases: Arc<Leases>, lock: Leased, granted: Instant) {
    let ttl = Duration::from_millis(lock.ttl_ms().max(1) as u64);
    let until = granted + Duration::from_millis(proxy.config().lease_max_ms);
    let drift = crate::lockop::drift(ttl, proxy.config().drift_factor);
    let mut last = granted;
    let end = loop {
        let next = last + ttl / 3;
        if next >= until {
            tokio::select! {
                () = sleep_until(until) => break End::Max,
                () = leases.closed() => break End::Disconnected,
            }
        }
        tokio::select! {
            () = sleep_until(next) => {}
            () = leases.closed() => break End::Disconnected,
        }
        let now = Instant::now();
        // A renewal that comes too late (this proxy stalled) finds the lock expired: lost, not
        // released, whatever the masters now say.
        if now >= last + ttl.saturating_sub(drift) {
            break End::Lost(
                "the lock expired before its renewal could run",
                super::lock::Answered::default(),
            );
        }
        // Never past the lease's end: the last renewal sets only what is left of it.
        let left = until.saturating_duration_since(now).min(ttl);
        let ms = left.as_millis() as i64;
        if ms <= 0 {
            break End::Max;
        }
        let renewal = match &lock {
            Leased::Plain { keys, token, .. } => lock::renew(&proxy, keys, token, ms).await,
            Leased::Hash { key, field, .. } => hashlock::renew_lease(&proxy, key, field, ms).await,
        };
        match renewal {
            Renewal::Renewed => {
                Counters::bump(&proxy.counters().lease_renewals);
                last = now;
            }
            Renewal::Gone => break End::Released,
            Renewal::Failed(why, answered) => break End::Lost(why, answered),
        }
    };
    let counters = proxy.counters();
    counters.leases_active.fetch_sub(1, Ordering::Relaxed);
    let key = lock.key().clone();
    match end {
        End::Released => {
            leases.kept(&lock.id(), false);
            Counters::bump(&counters.leases_released);
            debug!(key = %key.escape_ascii(), "lease ended: the lock was released");
        }
        End::Max => {
            leases.kept(&lock.id(), false);
            Counters::bump(&counters.leases_max);
            debug!(key = %key.escape_ascii(), "lease ended at lease_max_ms");
        }
        End::Disconnected => {
            leases.kept(&lock.id(), false);
            Counters::bump(&counters.leases_disconnected);
            if proxy.config().lease_release_on_disconnect {
                release(&proxy, &lock).await;
            }
        }
        End::Lost(reason, answered) => {
            Counters::bump(&counters.leases_lost);
            warn!(key = %key.escape_ascii(), reason, "lease lost");
            let told = tell(&proxy, &leases, key, &answered);
            leases.kept(&lock.id(), told);
        }
    }
}

/// Releases a lock whose holder's connection closed: compare-and-delete with its token on
/// every master (a hash lock: only where the hash holds the holder's field).
async fn release(proxy: &Arc<Proxy>, lock: &Leased) {
    let action = match lock {
        Leased::Plain { keys, token, .. } => lock::release_all(proxy, keys.clone(), token.clone()),
        Leased::Hash { key, field, .. } => {
            hashlock::release_held(proxy, key.clone(), field.clone())
        }
    };
    let reply = match action {
        Action::Reply(r) | Action::Close(r) => r,
        Action::Later(later) => later.await,
    };
    debug!(key = %lock.key().escape_ascii(), ?reply, "lease released on disconnect");
}

/// Tells of a lost lease: to this proxy's subscribers of [`LOST_CHANNEL`] now, to the other
/// proxies' through the masters that `answered` the failed renewal, and to the holder's
/// connection.
///
/// Only the masters that just answered publish it: a `PUBLISH` queued on a master that is
/// stopped or stalled would run when it comes back, after every subscriber's de-duplication
/// window, and announce the loss a second time, perhaps to a holder that has taken the lock
/// again since.
fn tell(proxy: &Proxy, leases: &Leases, key: Bytes, answered: &super::lock::Answered) -> bool {
    let channel = Bytes::from_static(LOST_CHANNEL);
    proxy.hub().deliver_local(channel.clone(), key.clone());
    let publish = command(&[b"PUBLISH", &channel, &key]);
    for master in &answered.0 {
        master.send(publish.clone(), 1, None);
    }
    let told = leases.tell(key);
    if !told {
        debug!("a lost-lease push was dropped: the holder's connection is gone or full");
    }
    told
}

/// The push a RESP3 holder receives for a lease it lost: the channel's message.
pub fn lost_push(key: Bytes) -> Reply {
    Reply::Push(vec![
        Reply::Bulk(Bytes::from_static(b"message")),
        Reply::Bulk(Bytes::from_static(LOST_CHANNEL)),
        Reply::Bulk(key),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_told_apart_by_key_and_token_or_field() {
        let plain = |key: &'static [u8], token: &'static [u8]| Leased::Plain {
            keys: vec![Bytes::from_static(key)],
            token: Bytes::from_static(token),
            ttl_ms: 1000,
        };
        assert_eq!(plain(b"k", b"t").id(), plain(b"k", b"t").id());
        assert_ne!(plain(b"k", b"t").id(), plain(b"k", b"u").id());
        let hash = Leased::Hash {
            key: Bytes::from_static(b"k"),
            field: Bytes::from_static(b"f"),
            ttl_ms: 1000,
        };
        assert_eq!(
            hash.id(),
            (Bytes::from_static(b"k"), Bytes::from_static(b"f"))
        );
    }

    #[test]
    fn the_holders_push_is_the_channels_message() {
        let mut out = bytes::BytesMut::new();
        lost_push(Bytes::from_static(b"lock:a")).encode(&mut out, true);
        assert_eq!(
            &out[..],
            b">3\r\n$7\r\nmessage\r\n$24\r\nredlock-proxy:lease-lost\r\n$6\r\nlock:a\r\n"
        );
    }
}
