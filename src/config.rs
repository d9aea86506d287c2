//! Configuration: a TOML file, overridden by command-line flags, checked once at start-up.
//!
//! Every setting has a default except the list of masters. [`Config::validate`] turns every
//! mistake into one readable line, so `main` can print it and exit non-zero.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::lockop::{Answer, Op};

/// A configuration mistake, worded for the operator.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (unknown keys included).
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, flattened to one line.
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// What to do with an `EVAL`/`EVALSHA` script whose meaning the proxy does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownScripts {
    /// Run it on every master; answer only a reply that a majority agree on. Unsafe with
    /// untrusted clients: such a script can run any command on every master (`FLUSHALL`, a loop
    /// that never ends, keys without a TTL); opt in only when every client is trusted.
    Majority,
    /// Refuse it with an error (the default).
    Reject,
}

/// How the legacy key commands (`SETNX`, `GETSET`, `GET`, `DEL`, ...) turn the masters'
/// replies into one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LegacyDecision {
    /// The majority rule of each command (see README, "Legacy SETNX code").
    Majority,
    /// Master 0's reply alone, as a plain proxy in front of one Redis would answer. Unsafe: it
    /// exists so the tests can show what the majority rule prevents.
    FirstMaster,
}

/// The most members `backends` may list: every one is a connection (a cluster member several)
/// and a position in each vote, and a membership change counts the old and new ones together
/// in 64 bits.
pub const MAX_BACKENDS: usize = 64;

/// The largest `max_ttl_ms` accepted: 10^12 ms, about 31 years. A lock TTL is compared and
/// added as a signed 64-bit number of ms (and to the clock, for `EXAT`), so a larger one would
/// wrap or overflow instead of meaning "very long".
pub const MAX_TTL_LIMIT_MS: u64 = 1_000_000_000_000;

/// The most `max_clients` accepted: 2^20, Linux's usual ceiling on open files per process
/// (`fs.nr_open`); each client is one.
pub const MAX_CLIENTS_LIMIT: usize = 1 << 20;

/// The most runtime `threads` accepted: each is an OS thread started at once.
pub const MAX_THREADS: usize = 1024;

/// The largest byte limit accepted (`max_bulk_len`, the client buffers, the script cache): 1 TiB,
/// far above any machine's memory, and so far from where a length read as a signed number wraps.
pub const MAX_BYTES_LIMIT: usize = 1 << 40;

/// The proxy's settings. Field names are the TOML keys.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the proxy listens on for clients.
    pub listen: String,
    /// The independent members, one entry each: a standalone master as `host:port` (or a
    /// `redis://` / `rediss://` URL), or a primary named by its Sentinels as
    /// `redis-sentinel://[password@]host:port[,host:port...]#master-name`. Their number is the N
    /// of the quorum.
    pub backends: Vec<String>,
    /// How long to wait for one master's reply before counting it as a "no" (ms). Keep it small
    /// compared with lock TTLs: the Redlock design suggests 5–50 ms for a 10 s TTL.
    pub node_timeout_ms: u64,
    /// Clock drift allowance as a fraction of the TTL. `drift = ttl × drift_factor + 2 ms`.
    pub drift_factor: f64,
    /// A lock is granted only if its remaining validity is above this (ms).
    pub min_validity_ms: u64,
    /// Time allowed to open and greet a master connection (ms).
    pub connect_timeout_ms: u64,
    /// A master that leaves a request unanswered this long is marked down and reconnected (ms).
    pub stall_timeout_ms: u64,
    /// First reconnect delay (ms); it doubles up to `reconnect_max_ms`, with jitter.
    pub reconnect_min_ms: u64,
    /// Longest reconnect delay (ms).
    pub reconnect_max_ms: u64,
    /// Largest TTL a lock may ask for (ms). Larger requests get an error. This bound is what
    /// lets the proxy know how long a restarted master must sit out.
    pub max_ttl_ms: u64,
    /// Most client connections served at once; more are refused with an error.
    pub max_clients: usize,
    /// Largest bulk string a client may send (bytes).
    pub max_bulk_len: usize,
    /// Most commands one client may have in flight before the proxy stops reading from it.
    pub max_pipeline: usize,
    /// Largest request (bytes, all of its arguments together) and largest unparsed input one
    /// client may have buffered. Redis's `client-query-buffer-limit` is 1 GB; lock commands are
    /// tiny, so the default here is 64 MiB. A client that goes beyond it is disconnected, as
    /// Redis does. Before `AUTH` (with `password` set) the much smaller Redis 7 limits apply:
    /// 10 arguments and 16384-byte bulks.
    pub client_query_buffer_limit: usize,
    /// Most reply bytes one client may leave unread (bytes). A client that goes beyond it is
    /// disconnected; the commands it had in flight still complete (or are undone) on the masters.
    pub client_output_buffer_limit: usize,
    /// A client that accepts none of its pending replies for this long is disconnected (ms);
    /// the commands it had in flight still complete (or are undone) on the masters.
    pub client_write_timeout_ms: u64,
    /// Scripts the proxy does not recognise: `reject` (the default) refuses them; `majority`
    /// (unsafe with untrusted clients) runs them on every master and answers the majority reply.
    /// Lock scripts the proxy recognises work in every mode.
    pub unknown_scripts: UnknownScripts,
    /// Worker threads for the proxy's runtime; 0 (the default) chooses: one per two CPU cores,
    /// at least one (see [`Config::workers`]). 1 runs a single-threaded runtime.
    pub threads: usize,
    /// When set, clients must `AUTH` with this password (as the user `default`, or with no user
    /// name) before other commands; `PING` included, as on Redis 7.
    pub password: Option<String>,
    /// Restart quarantine. A master whose `run_id` changed (it restarted, and without
    /// persistence came back empty) takes no part in any quorum for the quarantine window,
    /// `max_ttl_ms` plus its drift, so every lock it may have lost has expired everywhere first.
    /// On the first connect, a master that has been up for less than the window sits out the
    /// rest of it: another proxy, or this one before a restart, may have granted locks it lost.
    /// Switch off only for masters known to start empty with no lock ever granted on them.
    pub quarantine: bool,
    /// After `SIGHUP` changes the member list, a grant needs a quorum of the old members and a
    /// quorum of the new for `membership_transition_ms`. `false` lets the new set decide at
    /// once: unsafe, a negative control for tests (two clients can then hold one lock).
    pub membership_transition: bool,
    /// How long a change of members lasts, in ms: at least the quarantine window (`max_ttl_ms`
    /// plus drift). 0 (the default) means twice the quarantine window, which leaves one window
    /// to reload every other proxy.
    pub membership_transition_ms: u64,
    /// One Redis server, one vote: every member's connection reports the server's `run_id`
    /// when it connects, and a member that reaches a server another member already reaches
    /// (the same master under two names, such as `127.0.0.1:6379` and `localhost:6379`) is a
    /// duplicate: it is sent nothing and its votes never count. `false` switches the check
    /// off: unsafe, a negative control for tests (one master could then be counted twice).
    pub member_identity_check: bool,
    /// A Sentinel member's primary is the node a majority of its *configured* Sentinels
    /// (`⌊S/2⌋ + 1` of the `S` listed) name at the newest config epoch, all asked at once, and
    /// its votes count only while such a majority has confirmed it within a bound derived from
    /// `max_ttl_ms`, `drift_factor` and the Sentinels' `down-after-milliseconds` (re-confirmed
    /// well inside it); without one the member is down. `false` takes the first Sentinel's
    /// answer with no bound, as before: unsafe under a partition (a proxy cut off with the old
    /// primary and one Sentinel keeps granting there), a negative control for tests.
    pub sentinel_majority: bool,
    /// Declares that every master persists every write (`appendonly yes` + `appendfsync
    /// always`), so a restart loses nothing and needs no quarantine. The proxy checks each
    /// master on connect and quarantines any that does not.
    pub masters_persist: bool,
    /// Clock watch. Every master's `TIME` is compared with the proxy's monotonic clock on each
    /// probe and in the same round trip as each acquisition. A master whose clock jumps by more
    /// than `clock_jump_ms`, or runs faster or slower than `drift_factor` (at least 0.1 %)
    /// allows, is clock-suspect: its votes do not count until it has been steady for the
    /// quarantine window.
    pub clock_watch: bool,
    /// Clock jumps up to this (ms), beyond the allowed rate error, are tolerated. Keep it below
    /// the drift allowance of the shortest TTL in use (`ttl × drift_factor + 2 ms`).
    pub clock_jump_ms: u64,
    /// How often an idle master connection is probed with `TIME` (or `PING` without clock
    /// watch), in ms. A probe left unanswered for `stall_timeout_ms` marks the master down.
    pub probe_interval_ms: u64,
    /// Set by `--dev`: the proxy started the masters itself, empty, so a young master needs no
    /// quarantine on the first connect. Not a file setting.
    #[serde(skip)]
    pub masters_started_here: bool,
    /// TTL (ms) given to `SET key token NX` sent without any expiry (redis-py's `Lock` with
    /// `timeout=None` sends that). 0, the default, refuses such a `SET` with an error instead:
    /// a lock that cannot expire would deadlock forever after a crash, and a TTL the holder
    /// does not know about could expire under it.
    pub default_ttl_ms: u64,
    /// Unsafe opt-in, off by default. When true, `SET key value NX PX ttl` on a key that already
    /// holds `value` on the masters counts as a grant (and restarts its TTL) instead of nil, so a
    /// client that retries after a lost `OK` is not locked out until the TTL ends. Redis answers
    /// nil there, and libraries whose values are not unique per holder (timestamps such as npm
    /// `redis-lock`'s `Date.now() + timeout + 1`, host names such as `Redis::DistLock`'s) would
    /// then get two holders at once. Switch on only when every holder's value is unique.
    pub set_nx_reentrant: bool,
    /// Unsafe, for tests only: `REDLOCK.FENCE` takes its token from a counter on master 0 alone,
    /// as a library fencing against one Redis would. Such a token goes back when that master
    /// restarts empty; the default quorum counter does not.
    pub fence_single_master: bool,
    /// Most keys one client may have under `WATCH` at once; more get an error.
    pub max_watch_keys: usize,
    /// Most commands one `MULTI` may queue; past it a command is refused and `EXEC` aborts.
    pub max_multi_commands: usize,
    /// Bytes the script cache may hold (each script's text plus a small fixed overhead); the
    /// oldest scripts are forgotten first. Clients send a forgotten script again on `NOSCRIPT`.
    pub script_cache_bytes: usize,
    /// Deadlock guard (ms): the TTL given to a key that a legacy write would otherwise leave with
    /// no expiry (`SETNX`, `GETSET`, `SET` without `EX`/`PX`/`KEEPTTL`), so a client that dies
    /// between `SETNX` and `EXPIRE` cannot block the resource forever. Keep it longer than any
    /// legacy lock is held. 0 switches the guard off (keys then live until deleted, like on
    /// Redis, and outlast the restart quarantine). Capped at `max_ttl_ms`.
    pub legacy_guard_ttl_ms: u64,
    /// How legacy key commands decide: `majority` (the default) or `first-master` (unsafe; a
    /// negative control for tests).
    pub legacy_decision: LegacyDecision,
    /// The meaning of the operator's own lock scripts, as `[[scripts]]` tables (see
    /// [`ScriptDecl`]). They take precedence over the built-in library scripts.
    pub scripts: Vec<ScriptDecl>,
    /// ACL user the proxy authenticates as on every master (`AUTH user password`). A backend
    /// URL's own user wins.
    pub backend_user: Option<String>,
    /// Password for every master (`requirepass`, or the ACL user's). A backend URL's own
    /// password wins. Prefer `backend_password_file` or the `REDLOCK_BACKEND_PASSWORD`
    /// environment variable, which keep it off the command line.
    pub backend_password: Option<String>,
    /// File holding the masters' password (a trailing newline is ignored).
    pub backend_password_file: Option<String>,
    /// Password the proxy gives the Sentinels of `redis-sentinel://` members (`AUTH`, as
    /// Sentinel's `requirepass`); unset, the Sentinels are asked without one. The data nodes'
    /// password is the URL's own, or `backend_password`.
    pub backend_sentinel_password: Option<String>,
    /// Speak TLS to every master (a `rediss://` backend always does).
    pub backend_tls: bool,
    /// PEM bundle of the authorities that sign the masters' certificates; unset trusts the
    /// system's store.
    pub backend_tls_ca_cert_file: Option<String>,
    /// PEM client certificate shown to masters running with `tls-auth-clients yes`.
    pub backend_tls_cert_file: Option<String>,
    /// PEM private key of `backend_tls_cert_file`.
    pub backend_tls_key_file: Option<String>,
    /// Name sent as SNI and checked on the masters' certificates; unset, each master's host.
    pub backend_tls_server_name: Option<String>,
    /// `host:port` serving Prometheus metrics at `/metrics`; unset, no metrics listener.
    pub metrics_listen: Option<String>,
    /// Log line format on stderr: `text` (the default) or `json` (one object a line).
    pub log_format: LogFormat,
    /// Client users besides `default` (whose password is `password`), as Redis ACL users: each
    /// logs in with `AUTH name password` and may touch only the keys its patterns match.
    pub users: Vec<UserDecl>,
    /// `host:port` where clients connect over TLS; unset, no TLS listener. `listen = ""`
    /// switches the plaintext listener off.
    pub tls_listen: Option<String>,
    /// PEM certificate chain the TLS listener presents (re-read on `SIGHUP`).
    pub tls_cert_file: Option<String>,
    /// PEM private key of `tls_cert_file` (re-read on `SIGHUP`).
    pub tls_key_file: Option<String>,
    /// PEM authorities for client certificates: when set, TLS clients must present a
    /// certificate signed by one of them (mutual TLS).
    pub tls_ca_cert_file: Option<String>,
    /// On `SIGTERM`/`SIGINT`, how long (ms) commands in flight may take to finish and their
    /// replies to be written before the proxy exits anyway.
    pub shutdown_timeout_ms: u64,
    /// Glob patterns (as `[[users]]` `keys` are written) of the keys whose locks get a lease:
    /// the proxy renews such a lock while the connection that acquired it stays open. Empty
    /// (the default): no leases.
    pub lease_keys: Vec<String>,
    /// The longest a lease keeps its lock, in ms from the grant: no renewal extends the lock
    /// beyond it.
    pub lease_max_ms: u64,
    /// Release a leased lock at once (compare-and-delete with its token) when the connection
    /// that acquired it closes; otherwise it stops being renewed and expires by its TTL.
    pub lease_release_on_disconnect: bool,
    /// Quorum repair. After an extension or a lease renewal that a quorum granted, the lock is
    /// written back (`SET key token NX PX <validity left>`, or its hash-lock equivalent) on
    /// every trusted member that answered the extension with "key missing" (one that was down
    /// or cut off when the lock was granted, and is back), so the lock rests on every trusted
    /// member again and survives the next single loss. `false` leaves a lock on the bare majority it was granted on: a
    /// negative control for tests (the next single loss then frees a held lock).
    pub quorum_repair: bool,
}

/// One `[[users]]` entry: a client user, as a Redis ACL user.
///
/// ```toml
/// [[users]]
/// name = "locker"
/// password_file = "/etc/redlock-proxy/locker.pass"   # or password = "...", or password_sha256
/// keys = ["lock:*"]                                  # `~lock:*` (Redis's spelling) works too
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserDecl {
    /// The user name given to `AUTH name password`.
    pub name: String,
    /// The user's password. Give exactly one of `password`, `password_sha256`, `password_file`.
    pub password: Option<String>,
    /// SHA-256 of the password in hex, as `ACL GETUSER` shows it.
    pub password_sha256: Option<String>,
    /// File holding the password (a trailing newline is ignored).
    pub password_file: Option<String>,
    /// Glob patterns (Redis's `*`, `?`, `[...]`) of the keys the user may lock, read or
    /// release; a leading `~` is accepted. Empty: no key at all. `*`: every key.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Glob patterns of the publish/subscribe channels the user may subscribe and publish to
    /// (`SUBSCRIBE`, `SSUBSCRIBE`, `PUBLISH`, `SPUBLISH`, and the channels a recognised script
    /// publishes to); a leading `&` is accepted, as Redis writes them. A `PSUBSCRIBE` pattern
    /// must be one of them exactly. Empty: no channel at all (Redis 7's default). `*`: every
    /// channel.
    #[serde(default)]
    pub channels: Vec<String>,
    /// This user's own `lease_keys`, in place of the global list; unset: the global list.
    pub lease_keys: Option<Vec<String>>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines, coloured only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

/// Settings whose values are secrets: shown as `<redacted>` by `Debug`.
const SECRET_KEYS: [&str; 3] = ["password", "backend_password", "backend_sentinel_password"];

impl std::fmt::Debug for Config {
    // Derived Debug would print passwords, and a Config may well be logged with `?config`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Ok(mut table) = toml::Table::try_from(self) else {
            return f.write_str("Config { .. }");
        };
        for key in SECRET_KEYS {
            if table.contains_key(key) {
                table.insert(key.into(), "<redacted>".into());
            }
        }
        if let Some(toml::Value::Array(us)) = table.get_mut("users") {
            for u in us.iter_mut().filter_map(toml::Value::as_table_mut) {
                if u.contains_key("password") {
                    u.insert("password".into(), "<redacted>".into());
                }
            }
        }
        if let Some(toml::Value::Array(bs)) = table.get_mut("backends") {
            for b in bs.iter_mut() {
                if let Some(s) = b.as_str() {
                    *b = crate::endpoint::redact(s).into();
                }
            }
        }
        write!(f, "Config {table:?}")
    }
}

/// One `[[scripts]]` entry: a script the proxy should treat as a lock operation.
///
/// ```toml
/// [[scripts]]
/// text = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
/// meaning = "release"     # acquire | acquire_or_refresh | extend | extend_add | release | inspect
/// reply = "one_zero"      # one_zero | count | ok_nil | one_minus_one | tristate | ok_zero
/// token_arg = 1           # ARGV index of the token
/// ttl_arg = 2             # ARGV index of the TTL in ms (acquire / extend)
/// all_keys = false        # true: works on every key in KEYS, false: only KEYS[1]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptDecl {
    /// SHA1 (40 hex digits) of the script's exact text. Give this or `text`.
    pub sha: Option<String>,
    /// The script's text. Matched by the canonical form of its syntax tree, so spacing, line
    /// endings, quote style, comments and the names of locals may differ.
    pub text: Option<String>,
    /// The lock operation it performs.
    pub meaning: Op,
    /// The reply its caller expects.
    #[serde(default)]
    pub reply: Answer,
    /// 1-based `ARGV` index of the lock token.
    #[serde(default = "first_arg")]
    pub token_arg: usize,
    /// 1-based `ARGV` index of the TTL in milliseconds (acquire and extend only).
    #[serde(default = "second_arg")]
    pub ttl_arg: usize,
    /// True when the script works on every key in `KEYS`, all or nothing; false when it only
    /// touches `KEYS[1]`.
    #[serde(default)]
    pub all_keys: bool,
}

fn first_arg() -> usize {
    1
}

fn second_arg() -> usize {
    2
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7777".into(),
            backends: Vec::new(),
            node_timeout_ms: 50,
            drift_factor: 0.01,
            min_validity_ms: 1,
            connect_timeout_ms: 500,
            stall_timeout_ms: 1000,
            reconnect_min_ms: 50,
            reconnect_max_ms: 2000,
            max_ttl_ms: 300_000,
            max_clients: 10_000,
            max_bulk_len: 4 * 1024 * 1024,
            max_pipeline: 1024,
            client_query_buffer_limit: 64 * 1024 * 1024,
            client_output_buffer_limit: 64 * 1024 * 1024,
            client_write_timeout_ms: 10_000,
            unknown_scripts: UnknownScripts::Reject,
            password: None,
            threads: 0,
            default_ttl_ms: 0,
            set_nx_reentrant: false,
            fence_single_master: false,
            max_watch_keys: 1024,
            max_multi_commands: 1024,
            script_cache_bytes: 32 * 1024 * 1024,
            legacy_guard_ttl_ms: 300_000,
            legacy_decision: LegacyDecision::Majority,
            scripts: Vec::new(),
            quarantine: true,
            membership_transition: true,
            membership_transition_ms: 0,
            member_identity_check: true,
            sentinel_majority: true,
            masters_persist: false,
            clock_watch: true,
            clock_jump_ms: 5,
            probe_interval_ms: 1000,
            masters_started_here: false,
            backend_user: None,
            backend_password: None,
            backend_password_file: None,
            backend_sentinel_password: None,
            backend_tls: false,
            backend_tls_ca_cert_file: None,
            backend_tls_cert_file: None,
            backend_tls_key_file: None,
            backend_tls_server_name: None,
            metrics_listen: None,
            log_format: LogFormat::Text,
            users: Vec::new(),
            tls_listen: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            shutdown_timeout_ms: 5000,
            lease_keys: Vec::new(),
            lease_max_ms: 3_600_000,
            lease_release_on_disconnect: false,
            quorum_repair: true,
        }
    }
}

impl Config {
    /// Reads a TOML file. Unknown keys are errors.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<text>".into(),
            message: e.message().replace('\n', " "),
        })
    }

    /// Applies one `key=value` override, where the value is written as in the TOML file.
    pub fn set(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let (key, value) = assignment.split_once('=').ok_or_else(|| {
            ConfigError::Invalid(format!("--set expects KEY=VALUE, got '{assignment}'"))
        })?;
        let key = key.trim();
        let value = value.trim();
        // Accept bare words for strings, so `--set unknown_scripts=reject` works without quotes.
        let parsed = toml::from_str::<toml::Table>(&format!("{key} = {value}"))
            .or_else(|_| toml::from_str::<toml::Table>(&format!("{key} = {value:?}")))
            .map_err(|e| {
                ConfigError::Invalid(format!(
                    "--set {assignment}: {}",
                    e.message().replace('\n', " ")
                ))
            })?;
        let mut table =
            toml::Table::try_from(&*self).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        table.extend(parsed);
        *self = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                ConfigError::Invalid(format!(
                    "--set {assignment}: {}",
                    e.message().replace('\n', " ")
                ))
            })?;
        Ok(())
    }

    /// Splits a `--backends` list into members: at commas, except inside a `redis-sentinel://`
    /// URL, which keeps its own commas up to its `#master-name`.
    pub fn split_backends(text: &str) -> Vec<String> {
        crate::endpoint::split_backends(text)
    }

    /// Checks ranges and addresses: the data alone. The files the configuration names
    /// (passwords, certificates) are read once, by the bootstrap step that builds from it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_backends()?;
        self.validate_listeners()?;
        self.validate_ranges()?;
        self.validate_together()?;
        for (i, d) in self.scripts.iter().enumerate() {
            d.validate()
                .map_err(|m| ConfigError::Invalid(format!("scripts[{i}]: {m}")))?;
        }
        Ok(())
    }

    /// The members: at least one, not too many, each well written, and no master twice.
    fn validate_backends(&self) -> Result<(), ConfigError> {
        if self.backends.is_empty() {
            return bad(
                "no backends configured (use --backends HOST:PORT,... or `backends = [...]`)"
                    .into(),
            );
        }
        if self.backends.len() > MAX_BACKENDS {
            return bad(format!(
                "{} backends: at most {MAX_BACKENDS} (a Redlock quorum needs a few independent \
                 masters, not hundreds)",
                self.backends.len()
            ));
        }
        let mut members = Vec::with_capacity(self.backends.len());
        for b in &self.backends {
            let member = crate::endpoint::MemberUrl::parse(b).map_err(|m| {
                ConfigError::Invalid(format!(
                    "bad backend address '{}': {m}",
                    crate::endpoint::redact(b)
                ))
            })?;
            members.push(member);
        }
        for m in &members {
            if let Some(s) = crate::endpoint::sentinel_listed_twice(m) {
                return bad(format!(
                    "backend '{}' lists the Sentinel {s} twice: each Sentinel counts once toward \
                     the majority, so list it once",
                    m.name()
                ));
            }
        }
        if let Some((a, b)) = crate::endpoint::listed_twice(&members) {
            return bad(format!(
                "backends '{a}' and '{b}' name the same master: each master votes once, so \
                 list it once"
            ));
        }
        Ok(())
    }

    /// Credentials that go in pairs, and the addresses the proxy listens on.
    fn validate_listeners(&self) -> Result<(), ConfigError> {
        if self.backend_password.is_some() && self.backend_password_file.is_some() {
            return bad("set backend_password or backend_password_file, not both".into());
        }
        if self.backend_tls_cert_file.is_some() != self.backend_tls_key_file.is_some() {
            return bad("backend_tls_cert_file and backend_tls_key_file go together".into());
        }
        if let Some(m) = &self.metrics_listen {
            check_addr(m).map_err(|e| {
                ConfigError::Invalid(format!("bad metrics_listen address '{m}': {e}"))
            })?;
        }
        if !self.listen.is_empty() || self.tls_listen.is_none() {
            check_addr(&self.listen).map_err(|m| {
                ConfigError::Invalid(format!("bad listen address '{}': {m}", self.listen))
            })?;
        }
        if let Some(t) = &self.tls_listen {
            check_addr(t)
                .map_err(|e| ConfigError::Invalid(format!("bad tls_listen address '{t}': {e}")))?;
            if self.tls_cert_file.is_none() || self.tls_key_file.is_none() {
                return bad("tls_listen needs tls_cert_file and tls_key_file".into());
            }
        }
        Ok(())
    }

    /// Each number on its own: above 0, and below the bounds past which it is a mistake.
    fn validate_ranges(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("node_timeout_ms", self.node_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("stall_timeout_ms", self.stall_timeout_ms),
            ("reconnect_min_ms", self.reconnect_min_ms),
            ("reconnect_max_ms", self.reconnect_max_ms),
            ("max_ttl_ms", self.max_ttl_ms),
            ("max_clients", self.max_clients as u64),
            ("max_bulk_len", self.max_bulk_len as u64),
            ("max_pipeline", self.max_pipeline as u64),
            (
                "client_query_buffer_limit",
                self.client_query_buffer_limit as u64,
            ),
            (
                "client_output_buffer_limit",
                self.client_output_buffer_limit as u64,
            ),
            ("client_write_timeout_ms", self.client_write_timeout_ms),
            ("clock_jump_ms", self.clock_jump_ms),
            ("probe_interval_ms", self.probe_interval_ms),
            ("shutdown_timeout_ms", self.shutdown_timeout_ms),
            ("lease_max_ms", self.lease_max_ms),
        ] {
            if v == 0 {
                return bad(format!("{name} must be greater than 0"));
            }
        }
        // Upper bounds: a value beyond them is a mistake that would show only at run time, as a
        // panic, a limit that wraps (every lock refused) or a machine brought down.
        if self.max_ttl_ms > MAX_TTL_LIMIT_MS {
            return bad(format!(
                "max_ttl_ms ({}) must not exceed {MAX_TTL_LIMIT_MS} (about 31 years)",
                self.max_ttl_ms
            ));
        }
        if self.min_validity_ms >= self.max_ttl_ms {
            return bad(format!(
                "min_validity_ms ({}) must be below max_ttl_ms ({}): no lock could ever be granted",
                self.min_validity_ms, self.max_ttl_ms
            ));
        }
        if self.max_clients > MAX_CLIENTS_LIMIT {
            return bad(format!(
                "max_clients ({}) must not exceed {MAX_CLIENTS_LIMIT}",
                self.max_clients
            ));
        }
        if self.threads > MAX_THREADS {
            return bad(format!(
                "threads ({}) must not exceed {MAX_THREADS}",
                self.threads
            ));
        }
        for (name, v) in [
            ("max_bulk_len", self.max_bulk_len),
            ("client_query_buffer_limit", self.client_query_buffer_limit),
            (
                "client_output_buffer_limit",
                self.client_output_buffer_limit,
            ),
            ("script_cache_bytes", self.script_cache_bytes),
        ] {
            if v > MAX_BYTES_LIMIT {
                return bad(format!(
                    "{name} ({v}) must not exceed {MAX_BYTES_LIMIT} (1 TiB)"
                ));
            }
        }
        Ok(())
    }

    /// Settings that must agree with each other (or that read as a surprise on their own).
    fn validate_together(&self) -> Result<(), ConfigError> {
        if self.password.as_deref() == Some("") {
            // Redis's `requirepass ""` turns authentication off; here it would ask every client
            // for an empty password, which anyone can give. Either reading is a surprise.
            return bad("password is empty: leave it unset for no password, or set one".into());
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return bad(format!(
                "drift_factor must be in [0, 0.5), got {}",
                self.drift_factor
            ));
        }
        let window = self.quarantine_window().as_millis();
        if self.membership_transition_ms != 0 && u128::from(self.membership_transition_ms) < window
        {
            return bad(format!(
                "membership_transition_ms ({}) must be at least the quarantine window, max_ttl_ms \
                 plus drift ({window} ms)",
                self.membership_transition_ms
            ));
        }
        if self.reconnect_min_ms > self.reconnect_max_ms {
            return bad("reconnect_min_ms must not exceed reconnect_max_ms".into());
        }
        if self.default_ttl_ms > self.max_ttl_ms {
            return bad(format!(
                "default_ttl_ms ({}) must not exceed max_ttl_ms ({})",
                self.default_ttl_ms, self.max_ttl_ms
            ));
        }
        Ok(())
    }

    /// The deadlock guard's TTL in ms (0 = off): `legacy_guard_ttl_ms`, capped at `max_ttl_ms`.
    pub fn legacy_guard_ttl_ms(&self) -> u64 {
        self.legacy_guard_ttl_ms.min(self.max_ttl_ms)
    }

    /// How many runtime workers to start: `threads`, or when it is 0 one per two CPU cores
    /// available to the process (at least one).
    ///
    /// A proxy's work per request is mostly the kernel's (four socket operations), and on a
    /// host it shares with its clients or masters a second worker mostly adds the
    /// multi-threaded scheduler's cross-thread wake-ups: on two cores, one worker spent about
    /// half the CPU time per request that two did, and served more requests per second
    /// (README, Benchmarks).
    pub fn workers(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
            // The runtime starts before the configuration is validated (which then refuses
            // this count): it must not start the threads first.
            n if n > MAX_THREADS => 1,
            n => n,
        }
    }

    /// The per-master reply timeout.
    pub fn node_timeout(&self) -> Duration {
        Duration::from_millis(self.node_timeout_ms)
    }

    /// How long a restarted master sits out, and how long a jumped clock must stay steady:
    /// the longest lock's TTL plus its drift allowance, `max_ttl × (1 + drift_factor) + 2 ms`.
    /// Every lock a master held before is expired on every other master by then.
    pub fn quarantine_window(&self) -> Duration {
        let max_ttl = Duration::from_millis(self.max_ttl_ms);
        max_ttl + crate::lockop::drift(max_ttl, self.drift_factor)
    }

    /// How long a change of members lasts: `membership_transition_ms`, or twice the quarantine
    /// window when it is 0.
    pub fn membership_transition(&self) -> Duration {
        match self.membership_transition_ms {
            0 => self.quarantine_window() * 2,
            ms => Duration::from_millis(ms),
        }
    }
}

impl ScriptDecl {
    fn validate(&self) -> Result<(), String> {
        match (&self.sha, &self.text) {
            (Some(_), Some(_)) | (None, None) => {
                return Err("give exactly one of `sha` and `text`".into());
            }
            (Some(sha), None) if sha.len() != 40 || !sha.bytes().all(|c| c.is_ascii_hexdigit()) => {
                return Err(format!("sha '{sha}' is not 40 hex digits"));
            }
            _ => {}
        }
        if self.token_arg == 0 || self.ttl_arg == 0 {
            return Err("token_arg and ttl_arg count from 1, like ARGV".into());
        }
        // A request carries at most 65,536 arguments: a place beyond them is never given, and
        // the declaration would never match a call.
        if self.token_arg.max(self.ttl_arg) > 65_536 {
            return Err(
                "token_arg and ttl_arg must be at most 65536 (arguments of a request)".into(),
            );
        }
        if self.meaning != Op::Release && self.token_arg == self.ttl_arg {
            return Err("token_arg and ttl_arg must differ".into());
        }
        if self.meaning == Op::Remaining {
            // Its answers are the script's own constants, which only the analyser finds.
            return Err(
                "meaning = \"remaining\" is recognised from the script, not declared".into(),
            );
        }
        Ok(())
    }
}

/// A configuration refused, with why.
fn bad(why: String) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid(why))
}

fn check_addr(addr: &str) -> Result<(), String> {
    if addr.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let (host, port) = addr.rsplit_once(':').ok_or("expected HOST:PORT")?;
    if host.is_empty() {
        return Err("empty host".into());
    }
    port.parse::<u16>()
        .map_err(|_| format!("bad port '{port}'"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys serde accepts where `probe` stands (the list its unknown-field error names).
    fn accepted_keys(probe: &str) -> Vec<String> {
        let Err(ConfigError::Parse { message, .. }) = Config::from_toml(probe) else {
            panic!("an unknown key is refused: {probe}");
        };
        let list = message
            .split("expected one of ")
            .nth(1)
            .or_else(|| message.split("expected ").nth(1))
            .unwrap_or_else(|| panic!("no key list in: {message}"));
        list.split(',')
            .map(|k| k.trim().trim_matches('`').to_string())
            .filter(|k| !k.is_empty())
            .collect()
    }

    #[test]
    fn every_setting_the_proxy_accepts_is_documented_in_docs_configuration() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/configuration.md"
        ))
        .expect("docs/configuration.md");
        let mut missing = Vec::new();
        for (table, probe) in [
            ("", "no_such_setting = 1"),
            ("[[users]]", "[[users]]\nname = \"u\"\nno_such_setting = 1"),
            ("[[scripts]]", "[[scripts]]\nno_such_setting = 1"),
        ] {
            let keys = accepted_keys(probe);
            assert!(keys.len() > 3, "{table}: {keys:?}");
            for key in keys {
                // `masters_started_here` is set by `--dev` only and refused in a file.
                if key != "masters_started_here" && !doc.contains(&format!("`{key}`")) {
                    missing.push(format!("{table} {key}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "not in docs/configuration.md: {missing:?}"
        );
    }

    fn with_backends(text: &str) -> Result<Config, ConfigError> {
        let c = Config::from_toml(&format!("backends = [\"127.0.0.1:1\"]\n{text}"))?;
        c.validate().map(|_| c)
    }

    #[test]
    fn defaults_validate_once_backends_exist() {
        assert!(with_backends("").is_ok());
        assert!(
            Config::default()
                .validate()
                .unwrap_err()
                .to_string()
                .contains("no backends")
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        assert!(
            with_backends("bogus = 1")
                .unwrap_err()
                .to_string()
                .contains("unknown field")
        );
        assert!(
            with_backends("node_timeout_ms = 0")
                .unwrap_err()
                .to_string()
                .contains("node_timeout_ms")
        );
        let c = Config::from_toml("backends = [\"nohost\"]").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("bad backend address")
        );
    }

    #[test]
    fn a_huge_backends_list_is_refused() {
        let list: Vec<String> = (1..=MAX_BACKENDS + 1).map(|p| format!("h:{p}")).collect();
        let c = Config::from_toml(&format!("backends = {list:?}")).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("65 backends: at most 64"), "{e}");
        let c = Config::from_toml(&format!("backends = {:?}", &list[..MAX_BACKENDS])).unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn a_master_listed_twice_is_refused() {
        // The same master twice would vote twice: `a:1` alone would be a quorum of three.
        for list in [
            r#"["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000"]"#,
            r#"["localhost:7000", "redis://LOCALHOST:7000/0"]"#,
            r#"["redis-cluster://h:1,h:2", "redis-cluster://h:3,h:2"]"#,
            // One place under several spellings: loopback by name and by address, IPv6
            // written two ways, an IPv4-mapped address, a host name with its final dot.
            r#"["localhost:7000", "127.0.0.1:7000"]"#,
            r#"["[::1]:7000", "localhost:7000"]"#,
            r#"["[0:0::1]:7000", "127.0.0.1:7000"]"#,
            r#"["[2001:db8::1]:7000", "[2001:0db8:0:0::1]:7000"]"#,
            r#"["[::ffff:10.0.0.1]:7000", "10.0.0.1:7000"]"#,
            r#"["redis.example:7000", "Redis.Example.:7000"]"#,
        ] {
            let c = Config::from_toml(&format!("backends = {list}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("name the same master"), "{list}: {e}");
        }
        let c = Config::from_toml(r#"backends = ["h:1", "h:2", "h:3"]"#).unwrap();
        assert!(c.validate().is_ok());
        // One Sentinel twice in one member's list would count twice toward its majority.
        for list in [
            r#"["redis-sentinel://s:1,t:1,s:1#m"]"#,
            r#"["redis-sentinel://localhost:26379,127.0.0.1#m"]"#,
        ] {
            let c = Config::from_toml(&format!("backends = {list}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(
                e.contains("twice: each Sentinel counts once"),
                "{list}: {e}"
            );
        }
        let c = Config::from_toml(r#"backends = ["redis-sentinel://s:1,s:2,t:1#m"]"#).unwrap();
        assert!(c.validate().is_ok());
        // Other loopback addresses are other places.
        let c = Config::from_toml(r#"backends = ["127.0.0.1:1", "127.0.0.2:1", "::1:2"]"#).unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn set_overrides_by_key() {
        let mut c = with_backends("").unwrap();
        c.set("node_timeout_ms=7").unwrap();
        c.set("unknown_scripts=reject").unwrap();
        assert_eq!(c.node_timeout_ms, 7);
        assert_eq!(c.unknown_scripts, UnknownScripts::Reject);
        assert!(c.set("nope=1").is_err());
        c.set("quarantine=false").unwrap();
        assert!(!c.quarantine);
        c.set("default_ttl_ms=30000").unwrap();
        assert_eq!(c.default_ttl_ms, 30000);
    }

    #[test]
    fn the_example_file_parses_with_its_script_declaration() {
        let text = include_str!("../configs/redlock-proxy.toml");
        let at = text
            .find("# [[scripts]]")
            .expect("example declares a script");
        let uncommented: String = text[at..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let c = Config::from_toml(&format!("{}{uncommented}\n", &text[..at])).unwrap();
        c.validate().unwrap();
        assert_eq!(c.scripts.len(), 1);
        assert_eq!(c.scripts[0].meaning, Op::Release);
        assert_eq!(c.users.len(), 1);
        assert_eq!(c.users[0].keys, ["lock:*"]);
        assert_eq!(
            c.users[0].lease_keys.as_deref(),
            Some(&["lock:*".to_string()][..])
        );
    }

    #[test]
    fn declared_scripts_are_checked() {
        let c = with_backends(
            "[[scripts]]\ntext = \"return 1\"\nmeaning = \"release\"\nreply = \"tristate\"\n",
        )
        .unwrap();
        assert_eq!(c.scripts[0].meaning, Op::Release);
        assert_eq!(c.scripts[0].reply, Answer::Tristate);
        assert_eq!((c.scripts[0].token_arg, c.scripts[0].ttl_arg), (1, 2));
        let mut c2 = c.clone();
        c2.set("node_timeout_ms=9").unwrap();
        assert_eq!(c2.scripts, c.scripts, "--set keeps declared scripts");
        for (bad, why) in [
            ("meaning = \"release\"", "exactly one"),
            ("sha = \"abc\"\nmeaning = \"release\"", "40 hex"),
            (
                "text = \"x\"\nmeaning = \"extend\"\nttl_arg = 1",
                "must differ",
            ),
            ("text = \"x\"\nmeaning = \"lock\"", "unknown variant"),
            (
                "text = \"x\"\nmeaning = \"release\"\ntoken_arg = 18446744073709551615",
                "at most 65536",
            ),
            (
                "text = \"x\"\nmeaning = \"acquire\"\nttl_arg = 65537",
                "at most 65536",
            ),
        ] {
            let err = with_backends(&format!("[[scripts]]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(
            with_backends("default_ttl_ms = 400000")
                .unwrap_err()
                .to_string()
                .contains("default_ttl_ms")
        );
    }

    #[test]
    fn the_example_file_is_valid_and_shows_the_defaults() {
        let c = Config::from_toml(include_str!("../configs/redlock-proxy.toml")).unwrap();
        c.validate().unwrap();
        let d = Config::default();
        assert_eq!(c.quarantine, d.quarantine);
        assert_eq!(c.masters_persist, d.masters_persist);
        assert_eq!(c.clock_watch, d.clock_watch);
        assert_eq!(c.clock_jump_ms, d.clock_jump_ms);
        assert_eq!(c.probe_interval_ms, d.probe_interval_ms);
        assert!(
            Config::from_toml("masters_started_here = true").is_err(),
            "set by --dev only"
        );
    }

    #[test]
    fn debug_never_prints_passwords() {
        let c = Config::from_toml(
            "backends = [\"redis://u:hunter2@h:1\", \"redis-sentinel://hunter4@s1,s2#m\"]\n\
             password = \"client-secret\"\nbackend_password = \"hunter3\"\n\
             backend_sentinel_password = \"hunter5\"",
        )
        .unwrap();
        let shown = format!("{c:?}");
        for secret in ["hunter2", "client-secret", "hunter3", "hunter4", "hunter5"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("redis://u:<redacted>@h:1"), "{shown}");
        assert!(
            shown.contains("redis-sentinel://<redacted>@s1:26379,s2:26379#m"),
            "{shown}"
        );
        assert!(c.validate().is_ok());
        assert!(
            with_backends("backend_password = \"a\"\nbackend_password_file = \"/f\"")
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
    }

    #[test]
    fn quarantine_window_is_max_ttl_plus_drift() {
        let c = with_backends("max_ttl_ms = 10000\ndrift_factor = 0.01").unwrap();
        assert_eq!(c.quarantine_window(), Duration::from_millis(10_102));
        assert!(
            with_backends("probe_interval_ms = 0")
                .unwrap_err()
                .to_string()
                .contains("probe_interval_ms")
        );
    }
}
