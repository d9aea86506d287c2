//! Leases: a lock acquired through the proxy on a key that matches `lease_keys` is renewed
//! while the connection that acquired it stays open.
//!
//! A connection whose lease patterns are not empty carries a [`Leases`]. When one of its
//! acquisitions is granted on keys that all match, a task keeps the lock: every TTL/3 it runs a
//! quorum compare-and-extend with the holder's token (a hash lock: with its field), back to the
//! full TTL, under Redlock's validity rule, never past the grant plus `lease_max_ms`. The lease
//! ends quietly when a quorum answer that the lock is no longer the holder's (released, through
//! any proxy), when the connection closes (and the lock is then released when
//! `lease_release_on_disconnect` is set), or at `lease_max_ms`.
//!
//! Two notices tell a holder that its lease is in trouble, each published on its own channel
//! of the proxy's and pushed to the holder's own connection when it speaks RESP3:
//!
//! - **Renewal failed** ([`RENEWAL_FAILED_CHANNEL`], message `<T> <key>`): a renewal could not
//!   reach a quorum within validity. The lock is still the holder's until T (the Unix time in
//!   ms, on the proxy's clock, when the validity of the last successful renewal ends), and the
//!   lease keeps trying, every tenth of the TTL, until then. Told once per run of failures.
//! - **Lost** ([`LOST_CHANNEL`], message `<key>`): validity ran out with no renewal succeeding
//!   (or the proxy stalled past it). Counted, and logged at WARN with the key. The holder must
//!   stop: another client may take the lock.
//!
//! Both reach only subscribers whose user may touch the key (see [`crate::pubsub`]).
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
pub const LOST_CHANNEL: &[u8] = crate::pubsub::LEASE_LOST;

/// The channel a failed renewal is published on while the lock is still valid; the message
/// is `<T> <key>`, T the Unix time in ms until which the lock stays the holder's.
pub const RENEWAL_FAILED_CHANNEL: &[u8] = crate::pubsub::LEASE_RENEWAL_FAILED;

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
    // Since the first failed renewal of a run of failures: the masters that answered the
    // latest one (a loss is published through them).
    let mut failing: Option<super::lock::Answered> = None;
    let end = loop {
        // The lock is the holder's until the validity of the last renewal ends.
        let valid_until = last + ttl.saturating_sub(drift);
        let next = match failing {
            None => last + ttl / 3,
            Some(_) => Instant::now() + (ttl / 10).max(Duration::from_millis(5)),
        };
        if next >= until {
            tokio::select! {
                () = sleep_until(until) => break End::Max,
                () = leases.closed() => break End::Disconnected,
            }
        }
        tokio::select! {
            () = sleep_until(next.min(valid_until)) => {}
            () = leases.closed() => break End::Disconnected,
        }
        let now = Instant::now();
        // A renewal that comes too late (this proxy stalled, or every retry failed) finds the
        // lock expired: lost, not released, whatever the masters now say.
        if now >= valid_until {
            break match failing.take() {
                Some(answered) => End::Lost(
                    "no renewal reached a quorum before the lock's validity ended",
                    answered,
                ),
                None => End::Lost(
                    "the lock expired before its renewal could run",
                    super::lock::Answered::default(),
                ),
            };
        }
        // Never past the lease's end: the last renewal sets only what is left of it.
        let left = until.saturating_duration_since(now).min(ttl);
        let ms = left.as_millis() as i64;
        if ms <= 0 {
            break End::Max;
        }
        let renew = async {
            match &lock {
                Leased::Plain { keys, token, .. } => lock::renew(&proxy, keys, token, ms).await,
                Leased::Hash { key, field, .. } => {
                    hashlock::renew_lease(&proxy, key, field, ms).await
                }
            }
        };
        // The holder is told of the loss when validity ends, not when a renewal still in
        // flight then gives up (its writes reach the masters all the same).
        let renewal = tokio::select! {
            renewal = renew => renewal,
            () = sleep_until(valid_until) => Renewal::Failed(
                "no renewal reached a quorum before the lock's validity ended",
                failing.take().unwrap_or_default(),
            ),
        };
        let expired = Instant::now() >= valid_until;
        match renewal {
            Renewal::Renewed => {
                Counters::bump(&proxy.counters().lease_renewals);
                last = now;
                failing = None;
            }
            Renewal::Gone => break End::Released,
            Renewal::Failed(why, answered) if expired => break End::Lost(why, answered),
            Renewal::Failed(why, answered) => {
                if failing.is_none() {
                    Counters::bump(&proxy.counters().lease_renewal_failures);
                    warn!(key = %lock.key().escape_ascii(), reason = why, "lease renewal failed; the lock stays valid until its validity ends");
                    let left = valid_until.saturating_duration_since(Instant::now());
                    let notice = renewal_failed_message(lock.key(), left);
                    let channel = Bytes::from_static(RENEWAL_FAILED_CHANNEL);
                    publish(&proxy, &channel, &notice, &answered);
                    leases.warn((RENEWAL_FAILED_CHANNEL, notice));
                }
                failing = Some(answered);
            }
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
    publish(proxy, &Bytes::from_static(LOST_CHANNEL), &key, answered);
    let told = leases.tell((LOST_CHANNEL, key));
    if !told {
        debug!("a lost-lease push was dropped: the holder's connection is gone or full");
    }
    told
}

/// Publishes one of the proxy's notices: to this proxy's subscribers now, and to the other
/// proxies' through the masters that `answered` (see [`tell`] for why only those).
fn publish(proxy: &Proxy, channel: &Bytes, message: &Bytes, answered: &super::lock::Answered) {
    proxy.hub().deliver_local(channel.clone(), message.clone());
    let publish = command(&[b"PUBLISH", channel, message]);
    for master in &answered.0 {
        master.send(publish.clone(), 1, None);
    }
}

/// The message of a failed renewal: `<T> <key>`, T the Unix time in ms, on this proxy's clock,
/// `left` from now (the message is built once, so every copy of it is the same).
fn renewal_failed_message(key: &Bytes, left: Duration) -> Bytes {
    let left_ms = i64::try_from(left.as_millis()).unwrap_or(i64::MAX);
    let until = super::spec::unix_ms().saturating_add(left_ms);
    let mut m = Vec::with_capacity(key.len() + 16);
    m.extend_from_slice(until.to_string().as_bytes());
    m.push(b' ');
    m.extend_from_slice(key);
    Bytes::from(m)
}

/// The push a RESP3 holder receives for a notice about its lease: the channel's message.
pub fn notice_push(channel: &'static [u8], message: Bytes) -> Reply {
    Reply::Push(vec![
        Reply::Bulk(Bytes::from_static(b"message")),
        Reply::Bulk(Bytes::from_static(channel)),
        Reply::Bulk(message),
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
        notice_push(LOST_CHANNEL, Bytes::from_static(b"lock:a")).encode(&mut out, true);
        assert_eq!(
            &out[..],
            b">3\r\n$7\r\nmessage\r\n$24\r\nredlock-proxy:lease-lost\r\n$6\r\nlock:a\r\n"
        );
    }

    #[test]
    fn a_failed_renewal_names_its_deadline_then_the_key_as_the_hub_reads_it() {
        let key = Bytes::from_static(b"lock a");
        let m = renewal_failed_message(&key, Duration::from_millis(1500));
        let (t, k) = m.split_at(m.iter().position(|&c| c == b' ').unwrap());
        let t: u128 = std::str::from_utf8(t).unwrap().parse().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert!(t > now && t <= now + 1500, "{t} against {now}");
        assert_eq!(&k[1..], b"lock a");
        assert_eq!(
            crate::pubsub::notice_key(RENEWAL_FAILED_CHANNEL, &m),
            Some(Some(&b"lock a"[..]))
        );
    }
}
