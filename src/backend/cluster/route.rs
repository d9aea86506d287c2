//! Where each command the proxy sends to a cluster member goes: the keys of a command (by
//! name: key positions for the commands the proxy sends, `numkeys` for scripts) and their slots.

use bytes::{Bytes, BytesMut};

use super::slots::key_slot;
use crate::wire::master::ReplyDecoder;
use crate::wire::reply::Reply;

/// One command of a request, with where it goes.
#[derive(Debug, Clone)]
pub struct Routed {
    /// The command's arguments, name first.
    pub args: Vec<Bytes>,
    /// Where it goes.
    pub place: Place,
}

/// Where a command goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// No key: any primary answers it.
    Anywhere,
    /// Every primary must run it (`SCRIPT LOAD`, `SCRIPT FLUSH`): the first reply is kept.
    Everywhere,
    /// All its keys hash to this slot.
    Slot(u16),
    /// Its keys (at these argument positions) span several slots.
    Cross(Vec<usize>),
}

/// Splits a request's bytes into commands (`replies` of them). `None` when the bytes are not
/// `replies` complete commands (never the case for the proxy's own requests).
pub fn commands(bytes: &Bytes, replies: usize) -> Option<Vec<Routed>> {
    let mut buf = BytesMut::from(&bytes[..]);
    let mut decoder = ReplyDecoder::default();
    let mut out = Vec::with_capacity(replies);
    while !buf.is_empty() {
        let Ok(Some(Reply::Array(parts))) = decoder.decode(&mut buf) else {
            return None;
        };
        let args = parts
            .into_iter()
            .map(|p| match p {
                Reply::Bulk(b) => Some(b),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let place = place(&args);
        out.push(Routed { args, place });
    }
    (out.len() == replies).then_some(out)
}

/// The argument positions of `args`'s keys, or where a keyless command goes.
pub fn key_positions(args: &[Bytes]) -> Result<Vec<usize>, Place> {
    let Some(name) = args.first() else {
        return Err(Place::Anywhere);
    };
    let name = name.to_ascii_uppercase();
    let n = args.len();
    Ok(match name.as_slice() {
        b"PING" | b"TIME" | b"INFO" | b"ROLE" | b"ECHO" | b"DBSIZE" | b"CLUSTER" | b"ASKING"
        | b"READONLY" | b"AUTH" | b"HELLO" | b"CLIENT" | b"CONFIG" | b"COMMAND" | b"LASTSAVE"
        | b"MULTI" | b"EXEC" | b"DISCARD" | b"UNWATCH" | b"WAIT" => return Err(Place::Anywhere),
        b"SCRIPT" | b"FLUSHALL" | b"FLUSHDB" | b"FUNCTION" => return Err(Place::Everywhere),
        b"DEL" | b"UNLINK" | b"EXISTS" | b"TOUCH" | b"MGET" | b"WATCH" => (1..n).collect(),
        b"MSET" | b"MSETNX" => (1..n).step_by(2).collect(),
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let numkeys = args
                .get(2)
                .and_then(|k| std::str::from_utf8(k).ok())
                .and_then(|k| k.parse::<usize>().ok())
                .unwrap_or(0);
            (3..(3 + numkeys).min(n)).collect()
        }
        _ if n > 1 => vec![1],
        _ => return Err(Place::Anywhere),
    })
}

/// Where a command goes.
pub fn place(args: &[Bytes]) -> Place {
    let keys = match key_positions(args) {
        Ok(k) => k,
        Err(p) => return p,
    };
    let mut slots = keys.iter().map(|&i| key_slot(&args[i]));
    let Some(first) = slots.next() else {
        return Place::Anywhere;
    };
    if slots.all(|s| s == first) {
        Place::Slot(first)
    } else {
        Place::Cross(keys)
    }
}

/// The one slot every command of a request goes to, if there is one (keyless commands go
/// with the others); `Err` when the request spans slots or needs every primary.
pub fn one_slot(cmds: &[Routed]) -> Result<Option<u16>, ()> {
    let mut slot = None;
    for c in cmds {
        match c.place {
            Place::Anywhere => {}
            Place::Slot(s) if slot.is_none() || slot == Some(s) => slot = Some(s),
            _ => return Err(()),
        }
    }
    Ok(slot)
}

/// What the cluster code must know about the proxy's scripts (they live in a layer above).
pub trait Scripts: Send + Sync {
    /// How a script whose keys span slots is split, if it can be.
    fn split(&self, body: &[u8]) -> Split;

    /// The release script the parts of a refused acquisition are undone with: `KEYS` the keys,
    /// `ARGV[1]` the token; deletes the keys that hold the token.
    fn release(&self) -> &'static str;
}

/// How a script whose keys span slots is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// It answers one code per lock key, each key on its own (1 when it was deleted), takes
    /// the number of lock keys in `ARGV[2]`, and pushes a wake-up signal on the key after them
    /// (`ARGV[3]` TTL, `ARGV[4]` element) when every code is 1 or `ARGV[5]` is `"1"`: the
    /// proxy's release and delete. Run per slot, then the signal.
    PerKey,
    /// The proxy's all-or-nothing acquisition (`ARGV` token, TTL, mode): one code per key
    /// (1 created, 2 already held the token), or 0 / -1 when it wrote nothing. Run per slot;
    /// if any part writes nothing, the parts that wrote are undone and the answer is that
    /// part's.
    Acquire,
    /// Not split: refused with `CROSSSLOT`.
    No,
}

/// A redirection a cluster node answered instead of running a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// `MOVED slot host:port`: the slot lives there now.
    Moved(String),
    /// `ASK slot host:port`: this one command, preceded by `ASKING`, goes there.
    Ask(String),
    /// `TRYAGAIN` (keys of a multi-key command mid-migration) or `CLUSTERDOWN`: retry shortly.
    Retry,
}

/// Reads a redirection from a reply.
pub fn redirect(reply: &Reply) -> Option<Redirect> {
    let Reply::Error(text) = reply else {
        return None;
    };
    let text = std::str::from_utf8(text).ok()?;
    let mut words = text.split(' ');
    // A redirection names a slot and a `host:port`; anything else (a hostile or broken node)
    // is no redirection, so the error stands as that node's answer and no connection is made
    // to an address that is none.
    let kind = words.next()?;
    let mut target = || {
        let slot = words.next()?.parse::<u16>().ok().filter(|s| *s < 16_384);
        let addr = words.next().filter(|a| is_node_addr(a));
        slot.and(addr).map(str::to_string)
    };
    match kind {
        "MOVED" => Some(Redirect::Moved(target()?)),
        "ASK" => Some(Redirect::Ask(target()?)),
        "TRYAGAIN" => Some(Redirect::Retry),
        _ => None,
    }
}

/// Whether `addr` is a node address as redirections write them: `host:port` (an IPv6 host
/// bare or in brackets; Redis 7 leaves the host out when it does not know it), a port of 1 to
/// 65535 in digits, a host of printable ASCII.
fn is_node_addr(addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    host.len() <= 255
        && host.bytes().all(|b| b.is_ascii_graphic())
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::master::{command, eval};

    #[test]
    fn commands_are_read_with_their_slots() {
        let mut bytes = command(&[b"SET", b"foo", b"t", b"NX", b"PX", b"100"]).to_vec();
        bytes.extend_from_slice(&command(&[b"PING"]));
        bytes.extend_from_slice(&eval("return 1", &["{a}x", "{a}y"], &[b"t"]));
        bytes.extend_from_slice(&command(&[b"DEL", b"foo", b"bar"]));
        bytes.extend_from_slice(&command(&[b"SCRIPT", b"LOAD", b"return 1"]));
        let cmds = commands(&Bytes::from(bytes), 5).unwrap();
        assert_eq!(cmds[0].place, Place::Slot(12182));
        assert_eq!(cmds[1].place, Place::Anywhere);
        assert_eq!(cmds[2].place, Place::Slot(key_slot(b"a")));
        assert_eq!(cmds[3].place, Place::Cross(vec![1, 2]));
        assert_eq!(cmds[4].place, Place::Everywhere);
        assert_eq!(one_slot(&cmds[..2]), Ok(Some(12182)));
        assert_eq!(one_slot(&cmds[..3]), Err(()));
        assert!(commands(&command(&[b"GET", b"k"]), 2).is_none());
        assert!(commands(&Bytes::from_static(b"*1\r\n$3\r\nGE"), 1).is_none());
    }

    #[test]
    fn redirections_are_read() {
        let moved = |to: &str| Some(Redirect::Moved(to.into()));
        for (error, read) in [
            ("MOVED 3999 127.0.0.1:6381", moved("127.0.0.1:6381")),
            (
                "ASK 3999 127.0.0.1:6381",
                Some(Redirect::Ask("127.0.0.1:6381".into())),
            ),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot",
                Some(Redirect::Retry),
            ),
            ("ERR x", None),
            ("MOVED 1 [::1]:7000", moved("[::1]:7000")),
            ("MOVED 1 :7000", moved(":7000")),
        ] {
            assert_eq!(redirect(&Reply::error(error)), read, "{error}");
        }
        assert_eq!(redirect(&Reply::Integer(1)), None);
        // A redirection without a slot and an address is none: the error stands as the
        // node's answer, and no connection is opened to something that is not an address.
        for bad in [
            "MOVED",
            "MOVED 1",
            "ASK 1",
            "MOVED 1 not-an-address",
            "ASK 1 not-an-address",
            "ASK 1 h:0",
            "ASK 1 h:65536",
            "ASK 1 h:+7000",
            "ASK 1 h:",
            "MOVED 16384 h:7000",
            "MOVED -1 h:7000",
            "MOVED x h:7000",
        ] {
            assert_eq!(redirect(&Reply::error(bad)), None, "{bad}");
        }
        let long = format!("ASK 1 {}:7000", "h".repeat(100_000));
        assert_eq!(redirect(&Reply::error(&long)), None);
    }
}
