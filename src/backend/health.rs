//! What the proxy knows about a master, and whether its votes count.
//!
//! A master is *connected* or not, and separately it may be *excluded* for a while:
//! quarantined after a restart (it may have lost locks), or clock-suspect after its clock
//! jumped (it may have expired locks early). An excluded master still gets every request, so
//! its data stays as close as possible to the others', but quorum counting ignores its replies
//! until the exclusion ends. Exclusions only ever grow: a new reason never shortens an old one.
//!
//! Deadlines are kept as milliseconds since the handle was made, in atomics, because every
//! reply of every vote asks whether its master is trusted.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Health of a master, as `INFO` and the logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not connected: requests fail at once and count as "no".
    Down,
    /// Connected and trusted.
    Up,
    /// Connected, but restarted (or started) recently: it may have lost locks.
    Quarantined,
    /// Connected, but its clock jumped or drifted: it may have expired locks early.
    ClockSuspect,
    /// Connected to a Redis server another member is connected to as well (the same `run_id`):
    /// the server votes through that member only, and this one is sent nothing.
    Duplicate,
}

impl Status {
    /// Lower-case name for `INFO` and logs.
    pub fn name(self) -> &'static str {
        match self {
            Status::Down => "down",
            Status::Up => "up",
            Status::Quarantined => "quarantined",
            Status::ClockSuspect => "clock-suspect",
            Status::Duplicate => "duplicate",
        }
    }
}

/// Why a member without a confirming majority is down, as `INFO`'s `quarantine_reason` and
/// `/metrics` show it.
pub fn unconfirmed_reason(votes: usize, of: usize) -> String {
    format!("no majority of sentinels ({votes} of {of}) confirmed the primary")
}

/// [`MasterInfo`]'s link bit: the connection is open.
const CONNECTED: u8 = 1;
/// [`MasterInfo`]'s link bit: the server is another member's too (see [`super::identity`]).
const DUPLICATE: u8 = 2;

/// Members made so far (each takes the next number, see [`MasterInfo::made`]).
static MADE: AtomicU64 = AtomicU64::new(0);

/// Shared state of one master: written by its driver, read by votes and `INFO`.
#[derive(Debug)]
pub struct MasterInfo {
    /// The member's name: `host:port` for a standalone master, the URL (without password) for
    /// a Sentinel member.
    pub addr: String,
    /// The member's kind, as `INFO` and `/metrics` name it (see `super::kind`).
    kind: &'static str,
    /// The data node the member is served by (or about to be): a standalone master's `addr`,
    /// the primary the Sentinels named last ("" before they named one).
    primary: Mutex<String>,
    /// The address of the last connection admitted (and, under the Sentinel majority rule, the
    /// config epoch it was confirmed at), to tell a failover on the next.
    served: Mutex<Option<(String, Option<u64>)>>,
    /// Under the Sentinel majority rule: the config epoch at which `primary` was confirmed
    /// (written under `primary`'s lock); `u64::MAX` while unknown.
    primary_epoch: AtomicU64,
    /// Why the quarantine in force was imposed: `restart`, `young`, `failover` or `new-member`.
    reason: Mutex<&'static str>,
    /// Primaries replaced (another address, or another run_id, named by the Sentinels).
    failovers: AtomicU64,
    epoch: Instant,
    /// [`CONNECTED`] and [`DUPLICATE`] bits, in one atomic so that "connected and not a
    /// duplicate" is one load on the request path.
    link: AtomicU8,
    /// The member whose server this one's connection reaches too, while [`DUPLICATE`] is set.
    duplicate_of: Mutex<String>,
    /// Milliseconds since `epoch` until which the master is quarantined (0: never was).
    quarantine_until: AtomicU64,
    /// A Sentinel member under the majority rule: milliseconds since `epoch` until which a
    /// majority of its Sentinels' confirmation of the primary lasts (0: none yet). `u64::MAX`
    /// for every other member: no confirmation needed.
    confirmed_until: AtomicU64,
    /// Under the majority rule: `(votes, of)` of the last round of questions to the Sentinels.
    confirmations: Mutex<Option<(usize, usize)>>,
    /// Milliseconds since `epoch` until which the master's clock is not trusted.
    clock_until: AtomicU64,
    /// Set while an exclusion is in force, so its end is logged once.
    excluded: AtomicBool,
    run_id: Mutex<Option<String>>,
    restarts: AtomicU64,
    clock_jumps: AtomicU64,
    /// Redis 7.0 or later: `SET ... NX GET` is allowed, so a reentrant acquisition of one key
    /// needs no script.
    set_nx_get: AtomicBool,
    /// When the member was made, among all members: of two members reaching one server, the
    /// one made first (listed first) votes (see [`super::identity`]).
    made: u64,
    /// Why the last connect failed or the connection ended; cleared on connect.
    last_error: Mutex<String>,
    /// Connections opened after the first.
    reconnects: AtomicU64,
    /// Connections dropped because a request went unanswered for `stall_timeout`.
    timeouts: AtomicU64,
    /// Seconds from writing a request to its first reply frame (for `/metrics`).
    latency: crate::counters::Latency,
}

impl MasterInfo {
    /// A standalone master not connected yet.
    #[cfg(test)]
    pub(crate) fn new(addr: String) -> MasterInfo {
        MasterInfo::of_kind(addr.clone(), super::kind::standalone::NAME, addr)
    }

    /// A member of `kind` named `addr`, served by `primary` ("" while unknown).
    pub fn of_kind(addr: String, kind: &'static str, primary: String) -> MasterInfo {
        MasterInfo {
            addr,
            kind,
            primary: Mutex::new(primary),
            served: Mutex::new(None),
            primary_epoch: AtomicU64::new(u64::MAX),
            reason: Mutex::new(""),
            failovers: AtomicU64::new(0),
            epoch: Instant::now(),
            link: AtomicU8::new(0),
            duplicate_of: Mutex::new(String::new()),
            quarantine_until: AtomicU64::new(0),
            confirmed_until: AtomicU64::new(u64::MAX),
            confirmations: Mutex::new(None),
            clock_until: AtomicU64::new(0),
            excluded: AtomicBool::new(false),
            run_id: Mutex::new(None),
            restarts: AtomicU64::new(0),
            clock_jumps: AtomicU64::new(0),
            set_nx_get: AtomicBool::new(false),
            made: MADE.fetch_add(1, Ordering::Relaxed),
            last_error: Mutex::new(String::new()),
            reconnects: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            latency: crate::counters::Latency::default(),
        }
    }

    /// The order in which members were made (listed, for those of one configuration).
    pub(super) fn made(&self) -> u64 {
        self.made
    }

    /// True when the master accepts `SET key value NX PX ms GET` (Redis 7.0 or later).
    pub fn set_nx_get(&self) -> bool {
        self.set_nx_get.load(Ordering::Relaxed)
    }

    /// Records the master's version, from `redis_version` of `INFO server`.
    pub fn set_version(&self, version: Option<&str>) {
        let major = version
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse::<u32>().ok());
        self.set_nx_get
            .store(major.is_some_and(|m| m >= 7), Ordering::Relaxed);
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Time left on a deadline stored in `slot`.
    fn left(&self, slot: &AtomicU64) -> Duration {
        Duration::from_millis(slot.load(Ordering::Acquire).saturating_sub(self.now_ms()))
    }

    /// Current status; an exclusion shows only while connected (a down master is down, and so
    /// is a Sentinel member whose primary no majority of its Sentinels confirms).
    pub fn status(&self) -> Status {
        if !self.is_connected() || !self.is_confirmed() {
            Status::Down
        } else if self.is_duplicate() {
            Status::Duplicate
        } else if !self.quarantine_left().is_zero() {
            Status::Quarantined
        } else if !self.clock_suspect_left().is_zero() {
            Status::ClockSuspect
        } else {
            Status::Up
        }
    }

    /// True when the connection is open.
    pub fn is_connected(&self) -> bool {
        self.link.load(Ordering::Acquire) & CONNECTED != 0
    }

    /// True when requests may be sent: connected, not a duplicate of another member, and (a
    /// Sentinel member under the majority rule) its primary confirmed.
    pub fn accepts(&self) -> bool {
        self.link.load(Ordering::Acquire) == CONNECTED && self.is_confirmed()
    }

    /// False while a Sentinel member under the majority rule has no confirmation of its
    /// primary in force; true for every other member (one load, no clock read).
    pub fn is_confirmed(&self) -> bool {
        let until = self.confirmed_until.load(Ordering::Acquire);
        until == u64::MAX || until > self.now_ms()
    }

    /// Makes this member one that needs a majority of its `of` Sentinels to confirm its
    /// primary before its votes count (none has yet).
    pub(super) fn expect_confirmations(&self, of: usize) {
        self.confirmed_until.store(0, Ordering::Release);
        if let Ok(mut g) = self.confirmations.lock() {
            *g = Some((0, of));
        }
    }

    /// Records how many of the configured Sentinels named the primary in the last round.
    pub(super) fn note_confirmations(&self, votes: usize, of: usize) {
        if let Ok(mut g) = self.confirmations.lock() {
            *g = Some((votes, of));
        }
    }

    /// `(votes, of)` of the last round of questions to the Sentinels; `None` for a member
    /// outside the majority rule.
    pub fn confirmations(&self) -> Option<(usize, usize)> {
        self.confirmations.lock().ok().and_then(|g| *g)
    }

    /// Milliseconds since `epoch` of `at`, rounded down (so a deadline is never late).
    fn ms_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Extends the confirmation of `addr` at config epoch `epoch` to `until`, if that is still
    /// the member's primary, at the same epoch (checked under the same lock
    /// [`MasterInfo::set_primary_confirmed`] takes, so a round that confirmed the node just
    /// replaced never credits its successor); false when it is not.
    pub(super) fn confirm(&self, addr: &str, epoch: u64, until: Instant) -> bool {
        let primary = self.primary.lock().unwrap_or_else(|p| p.into_inner());
        if *primary != addr || self.primary_epoch.load(Ordering::Acquire) != epoch {
            return false;
        }
        self.confirmed_until
            .fetch_max(self.ms_of(until), Ordering::AcqRel);
        true
    }

    pub(super) fn set_connected(&self, up: bool) {
        if up {
            self.link.fetch_or(CONNECTED, Ordering::AcqRel);
        } else {
            self.link.fetch_and(!CONNECTED, Ordering::AcqRel);
        }
    }

    /// True while the member's server is another member's too (see [`super::identity`]).
    pub fn is_duplicate(&self) -> bool {
        self.link.load(Ordering::Acquire) & DUPLICATE != 0
    }

    /// The member this one duplicates ("" when it is none).
    pub fn duplicate_of(&self) -> String {
        if !self.is_duplicate() {
            return String::new();
        }
        self.duplicate_of
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default()
    }

    /// Marks the member a duplicate of member `of` (its votes never count, it is sent
    /// nothing), or (`None`) no longer one. The name is written before the bit is set.
    pub(super) fn set_duplicate(&self, of: Option<&str>) {
        match of {
            Some(name) => {
                if let Ok(mut g) = self.duplicate_of.lock() {
                    name.clone_into(&mut g);
                }
                self.link.fetch_or(DUPLICATE, Ordering::AcqRel);
            }
            None => {
                self.link.fetch_and(!DUPLICATE, Ordering::AcqRel);
            }
        }
    }

    /// True when the master's replies count as votes: connected and not excluded.
    ///
    /// This runs twice per master per vote, so the usual case (no exclusion on record) reads
    /// no clock: an exclusion's end, once passed, is cleared (unless it was extended meanwhile).
    pub fn is_trusted(&self) -> bool {
        if !self.accepts() {
            return false;
        }
        let quarantine = self.quarantine_until.load(Ordering::Acquire);
        let clock = self.clock_until.load(Ordering::Acquire);
        if quarantine == 0 && clock == 0 {
            return true;
        }
        if quarantine.max(clock) > self.now_ms() {
            return false;
        }
        for (slot, until) in [
            (&self.quarantine_until, quarantine),
            (&self.clock_until, clock),
        ] {
            if until != 0 {
                let _ = slot.compare_exchange(until, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        true
    }

    /// Quarantine time left.
    pub fn quarantine_left(&self) -> Duration {
        self.left(&self.quarantine_until)
    }

    /// Clock-suspect time left.
    pub fn clock_suspect_left(&self) -> Duration {
        self.left(&self.clock_until)
    }

    /// Extends the exclusion in `slot` to at least `for_` from now; true when this one now
    /// ends last (its reason is the one to show).
    fn extend(&self, slot: &AtomicU64, for_: Duration) -> bool {
        let until = self.now_ms() + for_.as_millis() as u64;
        let before = slot.fetch_max(until, Ordering::AcqRel);
        self.excluded.store(true, Ordering::Release);
        until >= before
    }

    /// Keeps the master out of every quorum for at least `for_`, because of `why` (`restart`,
    /// `young`, `failover`, `new-member`: shown by `INFO` as `quarantine_reason`).
    pub(super) fn quarantine(&self, for_: Duration, why: &'static str) {
        let mut reason = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if self.extend(&self.quarantine_until, for_) {
            *reason = why;
        }
    }

    /// Why the member's votes do not count now: `no majority of sentinels (V of S) confirmed
    /// the primary` while a Sentinel member under the majority rule lacks a confirmation (it is
    /// then down, even when connected), else `duplicate of member <name>` while it
    /// reaches the same server as another member, else the quarantine's reason (`restart`,
    /// `young`, `failover`, `new-member`), else `clock` while its clock is distrusted; "" when
    /// they count (or it is down).
    pub fn quarantine_reason(&self) -> String {
        if !self.is_confirmed() {
            let (votes, of) = self.confirmations().unwrap_or_default();
            unconfirmed_reason(votes, of)
        } else if self.is_duplicate() {
            format!("duplicate of member {}", self.duplicate_of())
        } else if !self.quarantine_left().is_zero() {
            (*self.reason.lock().unwrap_or_else(|p| p.into_inner())).to_string()
        } else if !self.clock_suspect_left().is_zero() {
            "clock".to_string()
        } else {
            String::new()
        }
    }

    /// The member's kind (see `super::kind`).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The data node serving the member (or about to): `host:port`, "" while unknown.
    pub fn primary(&self) -> String {
        self.primary.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Records the primary the Sentinels named.
    pub(super) fn set_primary(&self, addr: &str) {
        if let Ok(mut g) = self.primary.lock() {
            addr.clone_into(&mut g);
        }
    }

    /// Records the primary a majority of the Sentinels confirmed at config epoch `epoch`, until
    /// `until`: a new primary (or the same node at another epoch) starts from this confirmation
    /// alone, the same one keeps the later of the two.
    pub(super) fn set_primary_confirmed(&self, addr: &str, epoch: u64, until: Instant) {
        let mut primary = self.primary.lock().unwrap_or_else(|p| p.into_inner());
        let until = self.ms_of(until);
        if *primary == addr && self.primary_epoch.load(Ordering::Acquire) == epoch {
            self.confirmed_until.fetch_max(until, Ordering::AcqRel);
        } else {
            addr.clone_into(&mut primary);
            self.primary_epoch.store(epoch, Ordering::Release);
            self.confirmed_until.store(until, Ordering::Release);
        }
    }

    /// Records the address of a connection admitted and returns the one before.
    pub(super) fn replace_served(
        &self,
        addr: String,
        epoch: Option<u64>,
    ) -> Option<(String, Option<u64>)> {
        match self.served.lock() {
            Ok(mut g) => g.replace((addr, epoch)),
            Err(_) => None,
        }
    }

    pub(super) fn count_failover(&self) {
        self.failovers.fetch_add(1, Ordering::Relaxed);
    }

    /// Primaries replaced (Sentinel members).
    pub fn failovers(&self) -> u64 {
        self.failovers.load(Ordering::Relaxed)
    }

    /// Keeps a member just added to the set out of every quorum for at least `for_`: it holds
    /// none of the locks granted before it joined (reason `new-member`).
    pub fn quarantine_new_member(&self, for_: Duration) {
        self.quarantine(for_, "new-member");
    }

    /// Distrusts the master's clock for at least `for_`.
    pub(super) fn distrust_clock(&self, for_: Duration) {
        self.clock_jumps.fetch_add(1, Ordering::Relaxed);
        self.extend(&self.clock_until, for_);
    }

    pub(super) fn count_restart(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// True once, when an exclusion that was in force has ended (for the log line).
    pub(super) fn exclusion_ended(&self) -> bool {
        self.quarantine_left().is_zero()
            && self.clock_suspect_left().is_zero()
            && self.excluded.swap(false, Ordering::AcqRel)
    }

    /// The master's `run_id`, learnt on the last connect.
    pub fn run_id(&self) -> Option<String> {
        self.run_id.lock().ok().and_then(|g| g.clone())
    }

    /// Records the `run_id` seen on connect and returns the one seen before.
    pub(super) fn replace_run_id(&self, id: Option<String>) -> Option<String> {
        match self.run_id.lock() {
            Ok(mut g) => std::mem::replace(&mut *g, id),
            Err(_) => None,
        }
    }

    /// Records why the master is not usable (shown by `INFO` as `last_error`). Commas and line
    /// breaks would split the `INFO` line, so they become `;` and spaces.
    pub(super) fn set_last_error(&self, why: &str) {
        let clean: String = why
            .chars()
            .map(|c| match c {
                ',' => ';',
                '\r' | '\n' => ' ',
                c => c,
            })
            .collect();
        if let Ok(mut g) = self.last_error.lock() {
            *g = clean;
        }
    }

    /// Why the master was last refused or lost ("" after a successful connect).
    pub fn last_error(&self) -> String {
        self.last_error
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default()
    }

    /// Restarts seen (a new `run_id` on reconnect).
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Clock jumps seen.
    pub fn clock_jumps(&self) -> u64 {
        self.clock_jumps.load(Ordering::Relaxed)
    }

    /// Connections opened after the first.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    pub(super) fn count_reconnect(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections dropped because a request went unanswered for `stall_timeout`.
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    pub(super) fn count_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Reply latency, request written to first reply frame, in seconds.
    pub fn latency(&self) -> &crate::counters::Latency {
        &self.latency
    }

    /// One `INFO` line body: `addr=…,status=…,run_id=…,…,kind=…,primary=…,quarantine_reason=…`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "addr={},status={},last_error={},run_id={},quarantine_ms={},clock_suspect_ms={},restarts={},clock_jumps={},kind={},primary={},quarantine_reason={},failovers={}",
            self.addr,
            self.status().name(),
            self.last_error(),
            self.run_id().unwrap_or_default(),
            self.quarantine_left().as_millis(),
            self.clock_suspect_left().as_millis(),
            self.restarts.load(Ordering::Relaxed),
            self.clock_jumps.load(Ordering::Relaxed),
            self.kind,
            self.primary(),
            // A Sentinel member's name holds commas, which would split the line.
            self.quarantine_reason().replace(',', ";"),
            self.failovers(),
        );
        if let Some((votes, of)) = self.confirmations() {
            let _ = write!(out, ",sentinels_confirming={votes},sentinels={of}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn exclusions_end_on_time_and_never_shrink() {
        let m = MasterInfo::new("127.0.0.1:1".into());
        assert_eq!(m.status(), Status::Down);
        assert!(!m.is_trusted());
        m.set_connected(true);
        assert_eq!(m.status(), Status::Up);
        assert!(m.is_trusted());

        m.quarantine(Duration::from_millis(3000), "failover");
        m.quarantine(Duration::from_millis(1000), "restart");
        assert_eq!(
            m.quarantine_reason(),
            "failover",
            "the longer one's reason shows"
        );
        assert_eq!(m.status(), Status::Quarantined);
        assert!(!m.is_trusted());
        tokio::time::advance(Duration::from_millis(2000)).await;
        assert_eq!(
            m.status(),
            Status::Quarantined,
            "the shorter one did not win"
        );
        m.distrust_clock(Duration::from_millis(2500));
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert_eq!(m.status(), Status::ClockSuspect);
        assert_eq!(m.quarantine_reason(), "clock");
        assert!(!m.exclusion_ended());
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(m.status(), Status::Up);
        assert!(m.is_trusted());
        assert!(m.exclusion_ended());
        assert!(!m.exclusion_ended(), "logged once");
        assert!(m.describe().contains("status=up"), "{}", m.describe());
        assert!(
            m.describe()
                .ends_with(",kind=standalone,primary=127.0.0.1:1,quarantine_reason=,failovers=0"),
            "{}",
            m.describe()
        );
        assert!(m.describe().contains("clock_jumps=1"), "{}", m.describe());
        m.set_last_error("WRONGPASS a, b\r\n");
        assert!(
            m.describe()
                .contains(",last_error=WRONGPASS a; b  ,run_id="),
            "{}",
            m.describe()
        );
    }
}
