//! Connection handshakes: `PING`, `ECHO`, `HELLO`, `AUTH`, `SELECT`, `CLIENT`, `QUIT`, `RESET`,
//! and `WAIT`.
//!
//! These never touch the masters; they answer the way one Redis 7 server would, so every
//! client's connection set-up succeeds.

use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::session::Conn;
use super::spec::parse_int;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::wire::reply::Reply;

/// The Redis version the proxy presents. Clients use it to pick features (such as `HELLO`).
pub const REDIS_VERSION: &str = "7.0.0";

/// `PING [message]`. Before `AUTH` it answers `NOAUTH`, as Redis 7 does. (The table still lets
/// it through unauthenticated so that its arity is checked first, as Redis checks it.)
pub fn ping(_: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    if !conn.logged_in() {
        return Reply::from(Error::NoAuth).into();
    }
    if conn.subscribed() && !conn.resp3() {
        // In subscribed mode (RESP2) Redis answers PING as a message-shaped array.
        let msg = args.get(1).cloned().unwrap_or_default();
        return Reply::Array(vec![Reply::bulk("pong"), Reply::Bulk(msg)]).into();
    }
    match args.len() {
        1 => Reply::simple("PONG").into(),
        2 => Reply::Bulk(args[1].clone()).into(),
        _ => Reply::from(Error::WrongArity("ping")).into(),
    }
}

/// `WAIT numreplicas timeout`. Redlock's masters are independent servers, not replicated
/// copies, so the proxy has no replica to wait for: it answers 0 replicas at once, after
/// checking the arguments as Redis does. (A Redis without replicas answers 0 too: at once
/// when asked for none, after the timeout otherwise; 0 fewer than asked for reads as "not
/// replicated" either way, never as more.)
pub fn wait(_: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    if parse_int(&args[1]).is_none() {
        return Reply::from(Error::NotAnInteger).into();
    }
    match parse_int(&args[2]) {
        None => Reply::from(Error::TimeoutNotAnInteger).into(),
        Some(t) if t < 0 => Reply::from(Error::TimeoutNegative).into(),
        Some(_) => Reply::Integer(0).into(),
    }
}

/// `ECHO message`
pub fn echo(_: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    Reply::Bulk(args[1].clone()).into()
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`
pub fn hello(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    let mut resp3 = conn.resp3();
    if let Some(ver) = args.get(1) {
        match parse_int(ver) {
            Some(2) => resp3 = false,
            Some(3) => resp3 = true,
            Some(_) => return Reply::from(Error::NoProto).into(),
            None => return Reply::from(Error::ProtocolVersionNotAnInteger).into(),
        }
    }
    let mut name = None;
    let mut i = 2;
    while i < args.len() {
        let opt = &args[i];
        if opt.eq_ignore_ascii_case(b"AUTH") && i + 2 < args.len() {
            match proxy.accounts().login(Some(&args[i + 1]), &args[i + 2]) {
                Ok(access) => {
                    conn.log_in(access);
                    lease_patterns_of(proxy, conn, Some(&args[i + 1]));
                }
                Err(e) => return Reply::from(e).into(),
            }
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && i + 1 < args.len() {
            if let Err(e) = valid_name(&args[i + 1]) {
                return e.into();
            }
            name = Some(args[i + 1].clone());
            i += 2;
        } else {
            let opt = String::from_utf8_lossy(opt).into_owned();
            return Reply::from(Error::HelloOption(opt)).into();
        }
    }
    if !conn.logged_in() {
        return Reply::from(Error::HelloNoAuth).into();
    }
    conn.set_resp3(resp3);
    if name.is_some() {
        conn.set_name(name);
    }
    let s = |t: &'static str| Reply::Bulk(Bytes::from_static(t.as_bytes()));
    Reply::Map(vec![
        (s("server"), s("redis")),
        (s("version"), s(REDIS_VERSION)),
        (s("proto"), Reply::Integer(if resp3 { 3 } else { 2 })),
        (s("id"), Reply::Integer(conn.id() as i64)),
        (s("mode"), s("standalone")),
        (s("role"), s("master")),
        (s("modules"), Reply::Array(Vec::new())),
    ])
    .into()
}

/// `AUTH [username] password`, as Redis 7 checks it (see [`crate::acl::Accounts::login`]).
pub fn auth(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    let (user, password) = match args.len() {
        2 => (None, &args[1]),
        3 => (Some(&args[1][..]), &args[2]),
        _ => return Reply::from(Error::Syntax).into(),
    };
    match proxy.accounts().login(user, password) {
        Ok(access) => {
            conn.log_in(access);
            lease_patterns_of(proxy, conn, user);
            Reply::ok().into()
        }
        Err(e) => Reply::from(e).into(),
    }
}

/// `SELECT index`: only database 0 exists behind the proxy.
pub fn select(_: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    match parse_int(&args[1]) {
        Some(0) => Reply::ok().into(),
        Some(n) if i32::try_from(n).is_err() => Reply::from(Error::NotAnInt32).into(),
        Some(_) => Reply::from(Error::DbIndexOutOfRange).into(),
        None => Reply::from(Error::NotAnInteger).into(),
    }
}

fn valid_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().all(|c| (b'!'..=b'~').contains(c)) {
        Ok(())
    } else {
        Err(Reply::from(Error::BadClientName))
    }
}

/// `CLIENT SETNAME|GETNAME|ID|SETINFO|INFO|NO-EVICT|NO-TOUCH|REPLY ...`
pub fn client(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>) -> Action {
    let sub = args[1].to_ascii_uppercase();
    let argc = args.len();
    match (sub.as_slice(), argc) {
        (b"SETNAME", 3) => match valid_name(&args[2]) {
            Ok(()) => {
                conn.set_name((!args[2].is_empty()).then(|| args[2].clone()));
                Reply::ok().into()
            }
            Err(e) => e.into(),
        },
        (b"GETNAME", 2) => conn
            .name()
            .cloned()
            .map(Reply::Bulk)
            .unwrap_or(Reply::Nil)
            .into(),
        (b"ID", 2) => Reply::Integer(conn.id() as i64).into(),
        (b"SETINFO", 4) => {
            let attr = args[2].to_ascii_uppercase();
            if attr == b"LIB-NAME" || attr == b"LIB-VER" {
                match valid_name(&args[3]) {
                    Ok(()) => Reply::ok().into(),
                    // The attribute is one of the two names, in the client's own case.
                    Err(_) => Reply::from(Error::BadClientAttr(
                        String::from_utf8_lossy(&args[2]).into_owned(),
                    ))
                    .into(),
                }
            } else {
                let attr = String::from_utf8_lossy(&args[2]).into_owned();
                Reply::from(Error::UnrecognizedOption(attr)).into()
            }
        }
        (b"INFO", 2) => Reply::Bulk(Bytes::from(format!(
            "id={} addr=? laddr={} name={} db=0 resp={}\n",
            conn.id(),
            proxy.listen_addr(),
            conn.name()
                .map(|n| String::from_utf8_lossy(n))
                .unwrap_or_default(),
            if conn.resp3() { 3 } else { 2 }
        )))
        .into(),
        (b"NO-EVICT" | b"NO-TOUCH", 3) => match args[2].to_ascii_uppercase().as_slice() {
            b"ON" | b"OFF" => Reply::ok().into(),
            _ => Reply::from(Error::Syntax).into(),
        },
        // As Redis: `OFF` drops every reply (its own too) until `ON`; `SKIP` has no reply and
        // drops the next command's. A client that turned replies off and got one anyway would
        // read each later reply as the answer to the command before it.
        (b"REPLY", 3) => match args[2].to_ascii_uppercase().as_slice() {
            b"ON" => {
                conn.reply_on();
                Reply::ok().into()
            }
            b"OFF" => {
                conn.reply_off();
                Reply::ok().into()
            }
            b"SKIP" => {
                conn.reply_skip();
                // No reply of its own: nothing is written for an empty set of replies.
                Reply::Many(Vec::new()).into()
            }
            _ => Reply::from(Error::Syntax).into(),
        },
        (b"HELP", 2) => help(&[
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "NO-EVICT (ON|OFF)",
            "    Protect current client connection from eviction.",
            "NO-TOUCH (ON|OFF)",
            "    Will not touch LRU/LFU stats when this mode is on.",
            "REPLY (ON|OFF|SKIP)",
            "    Control the replies sent to the current connection.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "SETINFO <option> <value>",
            "    Set client meta attr. Options are LIB-NAME and LIB-VER.",
            "HELP",
            "    Print this help.",
        ])
        .into(),
        _ => match client_subcommand(&sub) {
            Some(name) => Reply::from(Error::WrongArity(name)).into(),
            None => Reply::from(Error::unknown_subcommand("client", &args[1])).into(),
        },
    }
}

/// The name a `CLIENT` subcommand (upper case) has in its arity error, when the proxy knows it.
fn client_subcommand(sub: &[u8]) -> Option<&'static str> {
    Some(match sub {
        b"SETNAME" => "client|setname",
        b"GETNAME" => "client|getname",
        b"ID" => "client|id",
        b"SETINFO" => "client|setinfo",
        b"INFO" => "client|info",
        b"NO-EVICT" => "client|no-evict",
        b"NO-TOUCH" => "client|no-touch",
        b"REPLY" => "client|reply",
        b"HELP" => "client|help",
        _ => return None,
    })
}

/// A `HELP` subcommand's answer: one status line per line of text, as Redis gives it.
pub(super) fn help(lines: &[&'static str]) -> Reply {
    Reply::Array(
        lines
            .iter()
            .map(|l| Reply::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    )
}

/// `QUIT`: answer, then close.
pub fn quit(_: &Arc<Proxy>, _: &mut Conn, _: Vec<Bytes>) -> Action {
    Action::Close(Reply::ok())
}

/// `RESET`: back to a new connection's state.
pub fn reset(proxy: &Arc<Proxy>, conn: &mut Conn, _: Vec<Bytes>) -> Action {
    // The client is still here: its blocking commands keep waiting.
    conn.reset(proxy.accounts().required());
    lease_patterns_of(proxy, conn, None);
    Reply::simple("RESET").into()
}

/// After a login (or `RESET`, back to `default`), the connection's leases follow the user's
/// own `lease_keys`, where it has them.
fn lease_patterns_of(proxy: &Proxy, conn: &mut Conn, user: Option<&[u8]>) {
    if conn.may_lease() {
        conn.set_lease_patterns(proxy.lease_patterns(user));
    }
}
