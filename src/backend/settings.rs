//! How one master's connection behaves: timeouts, reconnects, quarantine, clock watch, and the
//! credentials and TLS it connects with.

use std::time::Duration;

use super::clock;
use super::target;
use crate::tls::TlsTarget;

/// Connection and health settings for a master.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Time allowed to connect and greet.
    pub connect_timeout: Duration,
    /// An unanswered request older than this marks the master down.
    pub stall_timeout: Duration,
    /// First reconnect delay.
    pub reconnect_min: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
    /// How often the connection is probed (`TIME`, or `PING` without clock watch).
    pub probe_every: Duration,
    /// How long a restarted master sits out (max TTL + drift); `None` switches quarantine off.
    pub quarantine: Option<Duration>,
    /// Also quarantine a master that, when first seen, started less than the window ago.
    pub quarantine_young: bool,
    /// The operator declares that masters persist every write; checked on each master.
    pub masters_persist: bool,
    /// Clock watch rules (their `span` is also how long a jumped clock stays distrusted);
    /// `None` switches the watch off.
    pub clock: Option<clock::Rules>,
    /// Sent as `AUTH [user] password` first on every connect.
    pub auth: Option<target::Credentials>,
    /// TLS towards this master.
    pub tls: Option<TlsTarget>,
    /// For a Sentinel member: its Sentinels, asked for the primary before every connect (set
    /// by `kind::sentinel`).
    pub sentinel: Option<std::sync::Arc<super::sentinel::Sentinels>>,
    /// Where each connection tells which server (`run_id`) it reached, so that one server
    /// reached by two members votes once (see [`super::identity`]); `None` switches the check
    /// off (`member_identity_check = false`, a negative control for tests).
    pub identity: Option<super::identity::Claimant>,
}

#[cfg(test)]
impl Settings {
    /// Quiet settings for unit tests: no quarantine, no clock watch, no probes to speak of, fast
    /// reconnects. Tests change what they exercise with struct-update syntax.
    pub(crate) fn for_tests() -> Settings {
        Settings {
            connect_timeout: Duration::from_millis(500),
            stall_timeout: Duration::from_millis(500),
            reconnect_min: Duration::from_millis(10),
            reconnect_max: Duration::from_millis(20),
            probe_every: Duration::from_secs(60),
            quarantine: None,
            quarantine_young: false,
            masters_persist: false,
            clock: None,
            auth: None,
            tls: None,
            sentinel: None,
            identity: None,
        }
    }
}
