//! `COMMAND` and `INFO`: what the proxy serves and how it is doing.

use std::fmt::Write;
use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::args::{Cursor, word};
use super::session::Conn;
use super::spec::{Spec, TABLE, lookup};
use crate::counters::Counters;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::quorum::Masters;
use crate::wire::reply::Reply;

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

/// The Redis 7 `COMMAND INFO` shape for one command.
fn describe(spec: &Spec) -> Reply {
    Reply::Array(vec![
        bulk(spec.name),
        Reply::Integer(spec.arity.into()),
        Reply::Array(
            spec.flags
                .iter()
                .map(|f| Reply::Simple(Bytes::from_static(f.as_bytes())))
                .collect(),
        ),
        Reply::Integer(spec.keys.0.into()),
        Reply::Integer(spec.keys.1.into()),
        Reply::Integer(spec.keys.2.into()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

fn docs(spec: &Spec) -> Reply {
    Reply::Map(vec![
        (
            bulk("summary"),
            bulk(&format!(
                "{} (redlock-proxy)",
                spec.name.to_ascii_uppercase()
            )),
        ),
        (bulk("since"), bulk("1.0.0")),
        (bulk("group"), bulk("generic")),
    ])
}

/// `COMMAND [COUNT | LIST | INFO name... | DOCS [name...]]`, read.
pub enum CommandQuery {
    /// `COMMAND`, `COMMAND INFO`: the named rows (`None` for an unknown name), or all.
    Info(Vec<Option<&'static Spec>>),
    /// `COMMAND COUNT`
    Count,
    /// `COMMAND LIST [filter]`: the filter's words.
    List(Vec<Bytes>),
    /// `COMMAND DOCS [name...]`: the known rows among those named, or all.
    Docs(Vec<&'static Spec>),
    /// `COMMAND HELP`
    Help,
}

impl CommandQuery {
    /// Reads `COMMAND [subcommand ...]`, with Redis's errors for an unknown subcommand or one
    /// given arguments it takes none of.
    pub fn parse(c: &mut Cursor<'_>) -> Result<CommandQuery, Error> {
        #[derive(Clone, Copy)]
        enum Sub {
            Count,
            List,
            Info,
            Docs,
            Help,
        }
        const SUBS: &[(&[u8], Sub)] = &[
            (b"COUNT", Sub::Count),
            (b"LIST", Sub::List),
            (b"INFO", Sub::Info),
            (b"DOCS", Sub::Docs),
            (b"HELP", Sub::Help),
        ];
        let Some(sub) = c.try_next() else {
            return Ok(CommandQuery::Info(TABLE.iter().map(Some).collect()));
        };
        let Some(which) = word(sub, SUBS) else {
            return Err(Error::unknown_subcommand("command", sub));
        };
        let named = !c.at_end();
        Ok(match which {
            Sub::Count => {
                c.finish_arity("command|count")?;
                CommandQuery::Count
            }
            Sub::List => CommandQuery::List(c.rest_bytes()),
            Sub::Info if named => CommandQuery::Info(c.rest().map(lookup).collect()),
            Sub::Info => CommandQuery::Info(TABLE.iter().map(Some).collect()),
            Sub::Docs if named => CommandQuery::Docs(c.rest().filter_map(lookup).collect()),
            Sub::Docs => CommandQuery::Docs(TABLE.iter().collect()),
            Sub::Help => {
                c.finish_arity("command|help")?;
                CommandQuery::Help
            }
        })
    }
}

/// `COMMAND [COUNT | LIST | INFO name... | DOCS [name...]]`
pub fn command(_: &Arc<Proxy>, _: &mut Conn, query: CommandQuery) -> Action {
    match query {
        CommandQuery::Count => Reply::Integer(TABLE.len() as i64),
        CommandQuery::List(filter) => list(&filter),
        CommandQuery::Info(rows) => Reply::Array(
            rows.into_iter()
                .map(|s| s.map(describe).unwrap_or(Reply::Nil))
                .collect(),
        ),
        CommandQuery::Docs(rows) => {
            Reply::Map(rows.into_iter().map(|s| (bulk(s.name), docs(s))).collect())
        }
        CommandQuery::Help => super::connection::help(&[
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all commands.",
            "COUNT",
            "    Return the total number of commands in this server.",
            "LIST",
            "    Return a list of all commands in this server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "HELP",
            "    Print this help.",
        ]),
    }
    .into()
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`, as Redis words
/// it: the proxy has no modules, and its table gives no command an ACL category.
fn list(filter: &[Bytes]) -> Reply {
    let names = |keep: &dyn Fn(&Spec) -> bool| {
        Reply::Array(
            TABLE
                .iter()
                .filter(|s| keep(s))
                .map(|s| bulk(s.name))
                .collect(),
        )
    };
    match filter {
        [] => names(&|_| true),
        [by, kind, value] if by.eq_ignore_ascii_case(b"FILTERBY") => {
            match kind.to_ascii_uppercase().as_slice() {
                b"MODULE" | b"ACLCAT" => Reply::Array(Vec::new()),
                b"PATTERN" => {
                    let pattern = bounded_pattern(value);
                    names(&|s| {
                        pattern
                            .as_ref()
                            .is_some_and(|p| crate::acl::glob(p, s.name.as_bytes()))
                    })
                }
                _ => Reply::from(Error::Syntax),
            }
        }
        _ => Reply::from(Error::Syntax),
    }
}

/// A client's `FILTERBY PATTERN` with runs of `*` made one (the same pattern), or `None` when
/// it is still longer than 4 KiB: such a pattern is taken to match no command name (the longest
/// has 13 bytes), rather than have each name's match cost a scan of it per character.
fn bounded_pattern(pattern: &[u8]) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(pattern.len().min(4097));
    let (mut i, mut after_star) = (0, false);
    while i < pattern.len() {
        let c = pattern[i];
        if c == b'\\' && i + 1 < pattern.len() {
            // An escaped character (a literal `*` too) is kept as it is.
            out.extend_from_slice(&pattern[i..i + 2]);
            i += 2;
            after_star = false;
        } else {
            if !(c == b'*' && after_star) {
                out.push(c);
            }
            after_star = c == b'*';
            i += 1;
        }
        if out.len() > 4096 {
            return None;
        }
    }
    Some(out)
}

/// `INFO [section ...]`, read: the sections asked for, in lower case.
pub struct Info(Vec<String>);

impl Info {
    /// Reads `INFO [section ...]`.
    pub fn parse(c: &mut Cursor<'_>) -> Info {
        Info(
            c.rest()
                .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                .collect(),
        )
    }
}

/// `INFO [section ...]`: Redis's server and clients sections, plus `redlock`, the proxy's own.
pub fn info(proxy: &Arc<Proxy>, _: &mut Conn, Info(wanted): Info) -> Action {
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "everything" | "default"));
    let show = |name: &str| all || wanted.iter().any(|w| w == name);
    let mut out = String::new();
    if show("server") {
        let _ = write!(
            out,
            "# Server\r\nredis_version:{}\r\nredis_mode:standalone\r\nproxy:redlock-proxy\r\nproxy_version:{}\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            super::connection::REDIS_VERSION,
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            proxy.run_id(),
            proxy.listen_addr().port(),
            proxy.started().elapsed().as_secs(),
        );
    }
    if show("clients") {
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\n\r\n",
            proxy.clients()
        );
    }
    if show("replication") {
        out.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n");
    }
    if show("stats") {
        let s = &proxy.counters();
        let _ = write!(
            out,
            "# Stats\r\ntotal_commands_processed:{}\r\n\r\n",
            Counters::get(&s.commands)
        );
    }
    if show("redlock") {
        let s = &proxy.counters();
        let masters = proxy.masters();
        let up = masters.iter().filter(|m| m.is_up()).count();
        let trusted = masters.iter().filter(|m| m.is_trusted()).count();
        let _ = write!(
            out,
            "# Redlock\r\nmasters:{}\r\nmasters_up:{}\r\nmasters_trusted:{}\r\nquorum:{}\r\nquorum_available:{}\r\nquorum_available_in_ms:{}\r\nnode_timeout_ms:{}\r\ndrift_factor:{}\r\nmax_ttl_ms:{}\r\nquarantine_window_ms:{}\r\nmembership_transition:{}\r\nmembership_transition_left_ms:{}\r\nlocks_granted:{}\r\nlocks_denied:{}\r\nlocks_rolled_back:{}\r\nlocks_released:{}\r\nlocks_repaired:{}\r\nleases_active:{}\r\nleases_renewed:{}\r\nleases_lost:{}\r\nleases_renewal_failed:{}\r\nleases_released:{}\r\nleases_ended:{}\r\nkeys_in_flight:{}\r\nscripts_cached:{}\r\n",
            masters.len(),
            up,
            trusted,
            masters.rule().size(),
            u8::from(masters.quorum_trusted()),
            quorum_available_in_ms(&masters),
            proxy.config().node_timeout_ms,
            proxy.config().drift_factor,
            proxy.config().max_ttl_ms,
            proxy.config().quarantine_window().as_millis(),
            u8::from(masters.rule().is_joint()),
            proxy.transition_left().map_or(0, |t| t.as_millis()),
            Counters::get(&s.grants),
            Counters::get(&s.denials),
            Counters::get(&s.rollbacks),
            Counters::get(&s.releases),
            Counters::get(&s.locks_repaired),
            Counters::get(&s.leases_active),
            Counters::get(&s.lease_renewals),
            Counters::get(&s.leases_lost),
            Counters::get(&s.lease_renewal_failures),
            Counters::get(&s.leases_released),
            Counters::get(&s.leases_released)
                + Counters::get(&s.leases_disconnected)
                + Counters::get(&s.leases_max),
            proxy.keylocks().busy(),
            proxy.scripts().len(),
        );
        for (i, m) in masters.iter().enumerate() {
            let member = masters.rule().side(i).unwrap_or("current");
            let _ = write!(out, "master{i}:{},member={member}\r\n", m.info().describe());
            let _ = write!(out, "master{i}_kind:{}\r\n", m.kind());
            // A member made of shards: each shard's primary, slots and health.
            for (j, s) in m.shards().iter().enumerate() {
                let _ = write!(
                    out,
                    "master{i}_shard{j}:primary={},slots={},replicas={},{}",
                    s.primary,
                    s.slots.replace(' ', ";"),
                    s.replicas.join(";"),
                    s.info
                        .describe()
                        .split_once(',')
                        .map_or("", |(_, rest)| rest),
                );
                if let Some(why) = &s.quarantine_reason {
                    let _ = write!(out, ",quarantine_reason={}", why.replace([',', ' '], "_"));
                }
                out.push_str("\r\n");
            }
        }
        out.push_str("\r\n");
    }
    Reply::Bulk(Bytes::from(out)).into()
}

/// Milliseconds until a quorum of masters is trusted again, as far as the proxy can tell: 0
/// when it is now, -1 when it waits on masters that are down (no time can be given).
fn quorum_available_in_ms(masters: &Masters) -> i64 {
    let waits = masters.iter().enumerate().map(|(n, m)| {
        let i = m.info();
        // A duplicate counts only through the member it duplicates: no time can be given.
        let wait = i.accepts().then(|| {
            if i.is_trusted() {
                0
            } else {
                i.quarantine_left().max(i.clock_suspect_left()).as_millis()
            }
        });
        (n, wait)
    });
    // The shortest wait after which a quorum (of both sides, during a change of members) is
    // trusted; a master that is down never counts (`None` ranks last).
    let rank = |w: &Option<u128>| std::cmp::Reverse(w.unwrap_or(u128::MAX));
    match masters.rule().th(waits, rank).flatten() {
        Some(ms) => ms.min(i64::MAX as u128) as i64,
        None => -1,
    }
}

/// `CONFIG GET pattern...`, the one subcommand served (others are refused as they are read).
pub struct ConfigGet;

impl ConfigGet {
    /// Reads `CONFIG subcommand ...`: Redis's own subcommands other than `GET` are refused by
    /// name; anything else is Redis's error.
    pub fn parse(c: &mut Cursor<'_>) -> Result<ConfigGet, Error> {
        const REFUSED: &[(&[u8], &str)] = &[
            (b"SET", "SET"),
            (b"RESETSTAT", "RESETSTAT"),
            (b"REWRITE", "REWRITE"),
            (b"HELP", "HELP"),
        ];
        let sub = c.next_arg()?;
        if sub.eq_ignore_ascii_case(b"GET") {
            return if c.at_end() {
                Err(Error::WrongArity("config|get"))
            } else {
                Ok(ConfigGet)
            };
        }
        match word(sub, REFUSED) {
            Some(name) => Err(Error::ConfigUnsupported(name.to_owned())),
            None => Err(Error::unknown_subcommand("config", sub)),
        }
    }
}

/// `CONFIG GET pattern...` answers an empty map: the proxy has no Redis parameters to show, and
/// tools such as redis-benchmark only read them for display.
pub fn config(_: &Arc<Proxy>, _: &mut Conn, _: ConfigGet) -> Action {
    Reply::Map(Vec::new()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_pattern_is_bounded_without_changing_its_meaning() {
        let many = [&b"*".repeat(5000)[..], b"ping"].concat();
        assert_eq!(bounded_pattern(&many).as_deref(), Some(&b"*ping"[..]));
        // Escaped stars are literal and stay; a class is not a run of stars.
        assert_eq!(bounded_pattern(br"a\**").as_deref(), Some(&br"a\**"[..]));
        assert_eq!(bounded_pattern(br"a\\**").as_deref(), Some(&br"a\\*"[..]));
        let class = [&b"*["[..], &b"x".repeat(5000)].concat();
        assert_eq!(bounded_pattern(&class), None);
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let names = |p: &str| list(&[b("FILTERBY"), b("PATTERN"), b(p)]);
        assert_eq!(names("p?ng"), Reply::Array(vec![bulk("ping")]));
        assert_eq!(
            list(&[b("FILTERBY"), b("PATTERN"), Bytes::from(many)]),
            Reply::Array(vec![bulk("ping")])
        );
        assert_eq!(
            list(&[b("FILTERBY"), b("PATTERN"), Bytes::from(class)]),
            Reply::Array(Vec::new())
        );
    }
}
