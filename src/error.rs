//! The error catalogue: every kind of error the proxy reports, with Redis's wording in one
//! place. Replies, logs and metric labels derive from the kind.

use thiserror::Error;

/// Why a master's reply does not count.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
pub enum BackendError {
    /// The master is marked down; the request was not sent.
    #[error("master is down")]
    Down,
    /// The connection failed before the reply came.
    #[error("connection to master lost")]
    Closed,
    /// The master's clock jumped: the `TIME` read with the request disagrees with the proxy's
    /// monotonic clock. The request did run.
    #[error("master clock jumped")]
    ClockJump,
    /// The master answered, but it is quarantined or clock-suspect, so its reply is no vote.
    #[error("master is excluded from the quorum")]
    Excluded,
    /// The master's queue is full; the request was not sent.
    #[error("master is overloaded")]
    Overloaded,
}

/// The first word of an error reply: Redis's error codes, which clients match on and
/// `/metrics` counts by (`redlock_errors_total{kind}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ERR`: syntax, arity, ranges, unknown commands, limits and most refusals.
    Err,
    /// `WRONGTYPE`: a key of another type.
    WrongType,
    /// `NOAUTH`: authentication required.
    NoAuth,
    /// `WRONGPASS`: a failed login.
    WrongPass,
    /// `NOPERM`: a key the user may not touch.
    NoPerm,
    /// `NOSCRIPT`: `EVALSHA` of a script nobody loaded.
    NoScript,
    /// `EXECABORT`: a transaction discarded because of an earlier error.
    ExecAbort,
    /// `NOPROTO`: a protocol version the proxy does not speak.
    NoProto,
    /// `BUSY`: a master running a script.
    Busy,
    /// `LOADING`: a master loading its data.
    Loading,
    /// `READONLY`: a replica asked to write.
    ReadOnly,
    /// `MASTERDOWN`: a replica that lost its master.
    MasterDown,
    /// `CLUSTERDOWN`: fewer than a quorum of masters answered.
    ClusterDown,
    /// Any other first word (a master's error the proxy passes on).
    Other,
}

impl Kind {
    /// Every kind, in the order metrics list them (`Other` last).
    pub const ALL: [Kind; 14] = [
        Kind::Err,
        Kind::WrongType,
        Kind::NoAuth,
        Kind::WrongPass,
        Kind::NoPerm,
        Kind::NoScript,
        Kind::ExecAbort,
        Kind::NoProto,
        Kind::Busy,
        Kind::Loading,
        Kind::ReadOnly,
        Kind::MasterDown,
        Kind::ClusterDown,
        Kind::Other,
    ];

    /// The word an error of this kind starts with, which is also its metric label (`other`
    /// for [`Kind::Other`]).
    pub const fn word(self) -> &'static str {
        match self {
            Kind::Err => "ERR",
            Kind::WrongType => "WRONGTYPE",
            Kind::NoAuth => "NOAUTH",
            Kind::WrongPass => "WRONGPASS",
            Kind::NoPerm => "NOPERM",
            Kind::NoScript => "NOSCRIPT",
            Kind::ExecAbort => "EXECABORT",
            Kind::NoProto => "NOPROTO",
            Kind::Busy => "BUSY",
            Kind::Loading => "LOADING",
            Kind::ReadOnly => "READONLY",
            Kind::MasterDown => "MASTERDOWN",
            Kind::ClusterDown => "CLUSTERDOWN",
            Kind::Other => "other",
        }
    }

    /// The kind of an error reply's text, by its first word.
    pub fn of(text: &[u8]) -> Kind {
        let word = text.split(|&c| c == b' ').next().unwrap_or_default();
        Kind::ALL[..Kind::ALL.len() - 1]
            .iter()
            .copied()
            .find(|k| k.word().as_bytes() == word)
            .unwrap_or(Kind::Other)
    }
}

/// An error the proxy words itself, as Redis words it: the catalogue. Each variant's text is
/// written once, in [`Error::text`]; its [`Kind`] is its first word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// `ERR unknown command 'name', with args beginning with: 'a' 'b' `.
    UnknownCommand {
        /// The name as the client spelled it, at most 128 bytes.
        name: String,
        /// The arguments, each quoted and followed by a space, at most about 128 bytes.
        args: String,
    },
    /// `ERR unknown subcommand 'sub'. Try COMMAND HELP.`
    UnknownSubcommand {
        /// The command, lower case.
        command: &'static str,
        /// The subcommand as the client spelled it, at most 128 bytes.
        sub: String,
    },
    /// `ERR wrong number of arguments for 'name' command`.
    WrongArity(&'static str),
    /// `ERR syntax error`.
    Syntax,
    /// `ERR value is not an integer or out of range`.
    NotAnInteger,
    /// `NOAUTH Authentication required.`
    NoAuth,
    /// `NOPERM` for a key the user may not touch.
    NoPermKeys,
    /// `WRONGPASS` for a failed login.
    WrongPass,
    /// `WRONGTYPE Operation against a key holding the wrong kind of value`.
    WrongType,
    /// `ERR Command not allowed inside a transaction`.
    NotInMulti,
    /// `ERR Can't execute 'name': only (P|S)SUBSCRIBE / ... are allowed in this context`.
    OnlySubscribe(&'static str),
    /// `CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered`.
    NoQuorum,
}

/// The longest piece of a client's input an error quotes.
const QUOTED: usize = 128;

impl Error {
    /// Redis's unknown-command error, quoting up to 128 bytes of `name` and of `args`.
    pub fn unknown_command<'a>(name: &[u8], args: impl Iterator<Item = &'a [u8]>) -> Error {
        let mut quoted = String::new();
        for arg in args {
            if quoted.len() >= QUOTED {
                break;
            }
            let room = QUOTED - quoted.len();
            let text = String::from_utf8_lossy(&arg[..arg.len().min(room)]);
            quoted.push_str(&format!("'{text}' "));
        }
        Error::UnknownCommand {
            name: String::from_utf8_lossy(&name[..name.len().min(QUOTED)]).into_owned(),
            args: quoted,
        }
    }

    /// Redis's unknown-subcommand error for `command`.
    pub fn unknown_subcommand(command: &'static str, sub: &[u8]) -> Error {
        Error::UnknownSubcommand {
            command,
            sub: String::from_utf8_lossy(&sub[..sub.len().min(QUOTED)]).into_owned(),
        }
    }

    /// The words of a constant error, when it has no parts (so a reply needs no allocation).
    pub fn static_text(&self) -> Option<&'static str> {
        Some(match self {
            Error::Syntax => "ERR syntax error",
            Error::NotAnInteger => "ERR value is not an integer or out of range",
            Error::NoAuth => "NOAUTH Authentication required.",
            Error::NoPermKeys => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
            }
            Error::WrongPass => "WRONGPASS invalid username-password pair or user is disabled.",
            Error::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value",
            Error::NotInMulti => "ERR Command not allowed inside a transaction",
            Error::NoQuorum => "CLUSTERDOWN redlock-proxy: fewer than a quorum of masters answered",
            _ => return None,
        })
    }

    /// The error's full text, as the client reads it (without the leading `-`).
    pub fn text(&self) -> std::borrow::Cow<'static, str> {
        if let Some(text) = self.static_text() {
            return text.into();
        }
        match self {
            Error::UnknownCommand { name, args } => {
                format!("ERR unknown command '{name}', with args beginning with: {args}")
            }
            Error::UnknownSubcommand { command, sub } => format!(
                "ERR unknown subcommand '{sub}'. Try {} HELP.",
                command.to_ascii_uppercase()
            ),
            Error::WrongArity(name) => {
                format!("ERR wrong number of arguments for '{name}' command")
            }
            Error::OnlySubscribe(name) => format!(
                "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
            ),
            _ => String::new(),
        }
        .into()
    }

    /// The error's kind: its first word.
    pub fn kind(&self) -> Kind {
        Kind::of(self.text().as_bytes())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}
