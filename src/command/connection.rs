//! Connection handshakes: `PING`, `ECHO`, `HELLO`, `AUTH`, `SELECT`, `CLIENT`, `QUIT`, `RESET`,
//! and `WAIT`.
//!
//! These never touch the masters; they answer the way one Redis 7 server would, so every
//! client's connection set-up succeeds.

use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::args::{Cursor, word};
use super::session::Conn;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::wire::reply::Reply;

/// The Redis version the proxy presents. Clients use it to pick features (such as `HELLO`).
pub const REDIS_VERSION: &str = "7.0.0";

/// `PING [message]`, read: its message, and whether more than one was given (an arity error
/// answered only after the login check, as Redis answers it).
pub struct Ping {
    message: Option<Bytes>,
    too_many: bool,
}

impl Ping {
    /// Reads `PING [message]`.
    pub fn parse(c: &mut Cursor<'_>) -> Ping {
        let message = c.try_next_bytes();
        Ping {
            message,
            too_many: !c.at_end(),
        }
    }
}

/// `PING [message]`. Before `AUTH` it answers `NOAUTH`, as Redis 7 does. (The table still lets
/// it through unauthenticated so that its arity is checked first, as Redis checks it.)
pub fn ping(_: &Arc<Proxy>, conn: &mut Conn, ping: Ping) -> Action {
    if !conn.logged_in() {
        return Reply::from(Error::NoAuth).into();
    }
    if conn.subscribed() && !conn.resp3() {
        // In subscribed mode (RESP2) Redis answers PING as a message-shaped array.
        let msg = ping.message.unwrap_or_default();
        return Reply::Array(vec![Reply::bulk("pong"), Reply::Bulk(msg)]).into();
    }
    match ping {
        Ping { too_many: true, .. } => Reply::from(Error::WrongArity("ping")).into(),
        Ping { message: None, .. } => Reply::simple("PONG").into(),
        Ping {
            message: Some(msg), ..
        } => Reply::Bulk(msg).into(),
    }
}

/// `WAIT numreplicas timeout`, checked as Redis checks it: nothing else to keep.
pub struct Wait;

impl Wait {
    /// Reads `WAIT numreplicas timeout`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Wait, Error> {
        c.next_int()?;
        if c.next_int_or(Error::TimeoutNotAnInteger)? < 0 {
            return Err(Error::TimeoutNegative);
        }
        Ok(Wait)
    }
}

/// `WAIT numreplicas timeout`. Redlock's masters are independent servers, not replicated
/// copies, so the proxy has no replica to wait for: it answers 0 replicas at once, after
/// checking the arguments as Redis does. (A Redis without replicas answers 0 too: at once
/// when asked for none, after the timeout otherwise; 0 fewer than asked for reads as "not
/// replicated" either way, never as more.)
pub fn wait(_: &Arc<Proxy>, _: &mut Conn, _: Wait) -> Action {
    Reply::Integer(0).into()
}

/// `ECHO message`: the message.
pub struct Echo(Bytes);

impl Echo {
    /// Reads `ECHO message`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Echo, Error> {
        c.next_bytes().map(Echo)
    }
}

/// `ECHO message`
pub fn echo(_: &Arc<Proxy>, _: &mut Conn, echo: Echo) -> Action {
    Reply::Bulk(echo.0).into()
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`, read.
pub struct Hello {
    /// `Some(true)` for RESP3, `Some(false)` for RESP2, `None` to keep the connection's.
    resp3: Option<bool>,
    /// The options, in the client's order; an unknown one ends them.
    options: Vec<HelloOption>,
}

/// One option of `HELLO`.
enum HelloOption {
    /// `AUTH username password`
    Auth { user: Bytes, password: Bytes },
    /// `SETNAME clientname`
    SetName(Bytes),
    /// Anything else (refused when it is reached, after the options before it have acted).
    Unknown(String),
}

impl Hello {
    /// Reads `HELLO [protover [AUTH username password] [SETNAME clientname]]`; a protocol
    /// version that is no integer, or neither 2 nor 3, is refused at once.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Hello, Error> {
        let resp3 = match c.peek() {
            None => None,
            Some(_) => match c.next_int_or(Error::ProtocolVersionNotAnInteger)? {
                2 => Some(false),
                3 => Some(true),
                _ => return Err(Error::NoProto),
            },
        };
        let mut options = Vec::new();
        while let Some(opt) = c.try_next() {
            if opt.eq_ignore_ascii_case(b"AUTH") && c.remaining() >= 2 {
                let user = c.next_bytes()?;
                let password = c.next_bytes()?;
                options.push(HelloOption::Auth { user, password });
            } else if opt.eq_ignore_ascii_case(b"SETNAME") && !c.at_end() {
                options.push(HelloOption::SetName(c.next_bytes()?));
            } else {
                let opt = String::from_utf8_lossy(opt).into_owned();
                options.push(HelloOption::Unknown(opt));
                break;
            }
        }
        Ok(Hello { resp3, options })
    }
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`
pub fn hello(proxy: &Arc<Proxy>, conn: &mut Conn, hello: Hello) -> Action {
    let resp3 = hello.resp3.unwrap_or(conn.resp3());
    let mut name = None;
    for option in hello.options {
        match option {
            HelloOption::Auth { user, password } => {
                match proxy.accounts().login(Some(&user), &password) {
                    Ok(access) => {
                        conn.log_in(access);
                        lease_patterns_of(proxy, conn, Some(&user));
                    }
                    Err(e) => return Reply::from(e).into(),
                }
            }
            HelloOption::SetName(n) => {
                if let Err(e) = valid_name(&n) {
                    return e.into();
                }
                name = Some(n);
            }
            HelloOption::Unknown(opt) => return Reply::from(Error::HelloOption(opt)).into(),
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

/// `AUTH [username] password`, read.
pub struct Auth {
    user: Option<Bytes>,
    password: Bytes,
}

impl Auth {
    /// Reads `AUTH [username] password`; more arguments are a syntax error.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Auth, Error> {
        let first = c.next_bytes()?;
        let auth = match c.try_next_bytes() {
            None => Auth {
                user: None,
                password: first,
            },
            Some(password) => Auth {
                user: Some(first),
                password,
            },
        };
        c.finish()?;
        Ok(auth)
    }
}

/// `AUTH [username] password`, as Redis 7 checks it (see [`crate::acl::Accounts::login`]).
pub fn auth(proxy: &Arc<Proxy>, conn: &mut Conn, auth: Auth) -> Action {
    let user = auth.user.as_deref();
    match proxy.accounts().login(user, &auth.password) {
        Ok(access) => {
            conn.log_in(access);
            lease_patterns_of(proxy, conn, user);
            Reply::ok().into()
        }
        Err(e) => Reply::from(e).into(),
    }
}

/// `SELECT 0`: the only database behind the proxy (any other index is refused as it is read).
pub struct Select;

impl Select {
    /// Reads `SELECT index`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Select, Error> {
        match c.next_int()? {
            0 => Ok(Select),
            n if i32::try_from(n).is_err() => Err(Error::NotAnInt32),
            _ => Err(Error::DbIndexOutOfRange),
        }
    }
}

/// `SELECT index`: only database 0 exists behind the proxy.
pub fn select(_: &Arc<Proxy>, _: &mut Conn, _: Select) -> Action {
    Reply::ok().into()
}

fn valid_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().all(|c| (b'!'..=b'~').contains(c)) {
        Ok(())
    } else {
        Err(Reply::from(Error::BadClientName))
    }
}

/// A `CLIENT` subcommand, read and checked.
pub enum Client {
    /// `SETNAME name` (an empty name clears it).
    SetName(Option<Bytes>),
    /// `GETNAME`
    GetName,
    /// `ID`
    Id,
    /// `INFO`
    Info,
    /// `SETINFO`, `NO-EVICT`, `NO-TOUCH`: accepted, with nothing to do.
    Accepted,
    /// `REPLY ON|OFF|SKIP`
    Reply(ReplyMode),
    /// `HELP`
    Help,
}

/// `CLIENT REPLY`'s mode.
#[derive(Clone, Copy)]
pub enum ReplyMode {
    /// `ON`
    On,
    /// `OFF`
    Off,
    /// `SKIP`
    Skip,
}

/// The `CLIENT` subcommands the proxy serves, with their number of arguments (the command's
/// name and the subcommand's included) and their names in an arity error.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientSub {
    SetName,
    GetName,
    Id,
    SetInfo,
    Info,
    NoEvict,
    NoTouch,
    Reply,
    Help,
}

/// A `CLIENT` subcommand's row: which it is, its whole arity, its name in an arity error.
type ClientRow = (ClientSub, usize, &'static str);

const CLIENT_SUBS: &[(&[u8], ClientRow)] = &[
    (b"SETNAME", (ClientSub::SetName, 3, "client|setname")),
    (b"GETNAME", (ClientSub::GetName, 2, "client|getname")),
    (b"ID", (ClientSub::Id, 2, "client|id")),
    (b"SETINFO", (ClientSub::SetInfo, 4, "client|setinfo")),
    (b"INFO", (ClientSub::Info, 2, "client|info")),
    (b"NO-EVICT", (ClientSub::NoEvict, 3, "client|no-evict")),
    (b"NO-TOUCH", (ClientSub::NoTouch, 3, "client|no-touch")),
    (b"REPLY", (ClientSub::Reply, 3, "client|reply")),
    (b"HELP", (ClientSub::Help, 2, "client|help")),
];

impl Client {
    /// Reads `CLIENT subcommand ...` with Redis's errors: an unknown subcommand, a known one
    /// with the wrong number of arguments, a bad name or attribute, a mode that is none.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Client, Error> {
        let sub = c.next_arg()?;
        let Some((which, argc, name)) = word(sub, CLIENT_SUBS) else {
            return Err(Error::unknown_subcommand("client", sub));
        };
        if c.remaining() + 2 != argc {
            return Err(Error::WrongArity(name));
        }
        const ON_OFF: &[(&[u8], bool)] = &[(b"ON", true), (b"OFF", true)];
        const MODES: &[(&[u8], ReplyMode)] = &[
            (b"ON", ReplyMode::On),
            (b"OFF", ReplyMode::Off),
            (b"SKIP", ReplyMode::Skip),
        ];
        Ok(match which {
            ClientSub::SetName => {
                let name = c.next_bytes()?;
                valid_name(&name).map_err(|_| Error::BadClientName)?;
                Client::SetName((!name.is_empty()).then_some(name))
            }
            ClientSub::GetName => Client::GetName,
            ClientSub::Id => Client::Id,
            ClientSub::SetInfo => {
                let (attr, value) = (c.next_arg()?, c.next_arg()?);
                let attr_name = || String::from_utf8_lossy(attr).into_owned();
                if !attr.eq_ignore_ascii_case(b"LIB-NAME") && !attr.eq_ignore_ascii_case(b"LIB-VER")
                {
                    return Err(Error::UnrecognizedOption(attr_name()));
                }
                // The attribute is one of the two names, in the client's own case.
                valid_name(value).map_err(|_| Error::BadClientAttr(attr_name()))?;
                Client::Accepted
            }
            ClientSub::Info => Client::Info,
            ClientSub::NoEvict | ClientSub::NoTouch => {
                c.next_word(ON_OFF)?.ok_or(Error::Syntax)?;
                Client::Accepted
            }
            ClientSub::Reply => Client::Reply(c.next_word(MODES)?.ok_or(Error::Syntax)?),
            ClientSub::Help => Client::Help,
        })
    }
}

/// `CLIENT SETNAME|GETNAME|ID|SETINFO|INFO|NO-EVICT|NO-TOUCH|REPLY ...`
pub fn client(proxy: &Arc<Proxy>, conn: &mut Conn, client: Client) -> Action {
    match client {
        Client::SetName(name) => {
            conn.set_name(name);
            Reply::ok().into()
        }
        Client::GetName => conn
            .name()
            .cloned()
            .map(Reply::Bulk)
            .unwrap_or(Reply::Nil)
            .into(),
        Client::Id => Reply::Integer(conn.id() as i64).into(),
        Client::Accepted => Reply::ok().into(),
        Client::Info => Reply::Bulk(Bytes::from(format!(
            "id={} addr=? laddr={} name={} db=0 resp={}\n",
            conn.id(),
            proxy.listen_addr(),
            conn.name()
                .map(|n| String::from_utf8_lossy(n))
                .unwrap_or_default(),
            if conn.resp3() { 3 } else { 2 }
        )))
        .into(),
        // As Redis: `OFF` drops every reply (its own too) until `ON`; `SKIP` has no reply and
        // drops the next command's. A client that turned replies off and got one anyway would
        // read each later reply as the answer to the command before it.
        Client::Reply(ReplyMode::On) => {
            conn.reply_on();
            Reply::ok().into()
        }
        Client::Reply(ReplyMode::Off) => {
            conn.reply_off();
            Reply::ok().into()
        }
        Client::Reply(ReplyMode::Skip) => {
            conn.reply_skip();
            // No reply of its own: nothing is written for an empty set of replies.
            Reply::Many(Vec::new()).into()
        }
        Client::Help => help(&[
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
    }
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
pub fn quit(_: &Arc<Proxy>, _: &mut Conn) -> Action {
    Action::Close(Reply::ok())
}

/// `RESET`: back to a new connection's state.
pub fn reset(proxy: &Arc<Proxy>, conn: &mut Conn) -> Action {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::args::words as args;
    use crate::command::spec::Cmd;

    fn client(text: &str) -> Result<Client, String> {
        Client::parse(&mut Cursor::new(&args(text), Cmd::Client)).map_err(|e| e.text().into())
    }

    #[test]
    fn client_subcommands_are_read_with_redis_errors() {
        assert!(matches!(
            client("CLIENT setname n"),
            Ok(Client::SetName(Some(_)))
        ));
        assert!(matches!(
            client("CLIENT SETNAME "),
            Ok(Client::SetName(None))
        ));
        assert!(matches!(
            client("CLIENT reply Skip"),
            Ok(Client::Reply(ReplyMode::Skip))
        ));
        assert!(matches!(
            client("CLIENT NO-TOUCH off"),
            Ok(Client::Accepted)
        ));
        for (text, error) in [
            (
                "CLIENT nope",
                "ERR unknown subcommand 'nope'. Try CLIENT HELP.",
            ),
            (
                "CLIENT GETNAME x",
                "ERR wrong number of arguments for 'client|getname' command",
            ),
            ("CLIENT REPLY maybe", "ERR syntax error"),
            ("CLIENT NO-EVICT maybe", "ERR syntax error"),
            ("CLIENT SETINFO other x", "ERR Unrecognized option 'other'"),
        ] {
            assert_eq!(client(text).err().as_deref(), Some(error), "{text}");
        }
    }

    #[test]
    fn hello_reads_its_options_in_order_and_stops_at_an_unknown_one() {
        let hello = |text: &str| Hello::parse(&mut Cursor::new(&args(text), Cmd::Hello));
        let h = hello("HELLO 3 SETNAME n AUTH u p BOGUS x").ok().unwrap();
        assert_eq!(h.resp3, Some(true));
        assert!(matches!(
            &h.options[..],
            [
                HelloOption::SetName(_),
                HelloOption::Auth { .. },
                HelloOption::Unknown(o)
            ] if o == "BOGUS"
        ));
        assert!(matches!(hello("HELLO 4"), Err(Error::NoProto)));
        assert!(matches!(
            hello("HELLO x"),
            Err(Error::ProtocolVersionNotAnInteger)
        ));
        // `AUTH` without both its arguments is an unknown option.
        let h = hello("HELLO 2 AUTH u").ok().unwrap();
        assert!(matches!(&h.options[..], [HelloOption::Unknown(o)] if o == "AUTH"));
    }
}
