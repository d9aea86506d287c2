//! Replies: the values the proxy sends to clients and receives from masters.
//!
//! A [`Reply`] is protocol-neutral. It is encoded as RESP2 or RESP3 at the moment it is written,
//! using the protocol the client had selected when it sent the command. Replies from masters are
//! decoded by [`super::master::ReplyDecoder`] (masters always speak RESP2 to us).

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, Kind};

/// One reply value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+text`
    Simple(Bytes),
    /// `-text` (the text carries its own prefix such as `ERR`)
    Error(Bytes),
    /// `:n`
    Integer(i64),
    /// `$len\r\ndata`
    Bulk(Bytes),
    /// Null bulk string: `$-1` in RESP2, `_` in RESP3.
    Nil,
    /// Null array: `*-1` in RESP2, `_` in RESP3 (an aborted `EXEC`).
    NilArray,
    /// `*n` followed by the elements.
    Array(Vec<Reply>),
    /// `%n` in RESP3; a flat array of alternating keys and values in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// Out-of-band data (pub/sub messages, subscription confirmations): `>n` in RESP3, an
    /// ordinary array in RESP2.
    Push(Vec<Reply>),
    /// Several complete replies to one command, written one after the other (`SUBSCRIBE a b`
    /// confirms each channel with its own reply).
    Many(Vec<Reply>),
}

impl Reply {
    /// `+OK`
    pub fn ok() -> Reply {
        Reply::Simple(Bytes::from_static(b"OK"))
    }

    /// A simple string from static text.
    pub fn simple(text: &'static str) -> Reply {
        Reply::Simple(Bytes::from_static(text.as_bytes()))
    }

    /// An error reply. `text` must start with the error code, e.g. `ERR syntax error`. The
    /// proxy's own errors are made from the catalogue instead (`Reply::from(Error::...)`).
    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(Bytes::from(text.into()))
    }

    /// An error reply from static text.
    pub fn static_error(text: &'static str) -> Reply {
        Reply::Error(Bytes::from_static(text.as_bytes()))
    }

    /// A bulk string reply.
    pub fn bulk(data: impl Into<Bytes>) -> Reply {
        Reply::Bulk(data.into())
    }

    /// True for `+OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Simple(s) if s.as_ref() == b"OK")
    }

    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// An error reply's kind (its first word, whoever worded it); `None` for any other reply.
    pub fn error_kind(&self) -> Option<Kind> {
        match self {
            Reply::Error(text) => Some(Kind::of(text)),
            _ => None,
        }
    }

    /// A master's error to one of the proxy's own scripts, for the client: Redis ends an error
    /// raised inside a script with ` script: <sha>, on @user_script:<line>.`, and that SHA
    /// names the proxy's script, not the client's, so the error goes without it (as the same
    /// command sent on its own would have it). Any other reply is cloned as it is.
    pub fn from_our_script(&self) -> Reply {
        const ORIGIN: &[u8] = b" script: ";
        match self {
            Reply::Error(text) => match text.windows(ORIGIN.len()).position(|w| w == ORIGIN) {
                Some(at) => Reply::Error(text.slice(..at)),
                None => self.clone(),
            },
            other => other.clone(),
        }
    }

    /// Appends the encoding of this reply to `out`, as RESP3 when `resp3` is set.
    pub fn encode(&self, out: &mut BytesMut, resp3: bool) {
        match self {
            // The reply of every granted lock, written as one fixed-size copy.
            Reply::Simple(s) if s.as_ref() == b"OK" => out.extend_from_slice(b"+OK\r\n"),
            Reply::Simple(s) => line(out, b'+', s),
            Reply::Error(e) => line(out, b'-', e),
            Reply::Integer(i) => header(out, b':', *i),
            Reply::Bulk(b) => {
                header(out, b'$', b.len() as i64);
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::NilArray if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                header(out, b'*', items.len() as i64);
                for item in items {
                    item.encode(out, resp3);
                }
            }
            Reply::Push(items) => {
                header(out, if resp3 { b'>' } else { b'*' }, items.len() as i64);
                for item in items {
                    item.encode(out, resp3);
                }
            }
            Reply::Many(replies) => {
                for r in replies {
                    r.encode(out, resp3);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    header(out, b'%', pairs.len() as i64);
                } else {
                    header(out, b'*', 2 * pairs.len() as i64);
                }
                for (k, v) in pairs {
                    k.encode(out, resp3);
                    v.encode(out, resp3);
                }
            }
        }
    }
}

fn line(out: &mut BytesMut, prefix: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(prefix);
    // A simple string or error must not contain CR or LF; replace them so a reply can never
    // break the framing of the stream.
    if memchr::memchr2(b'\r', b'\n', text).is_some() {
        out.extend(
            text.iter()
                .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
        );
    } else {
        out.put_slice(text);
    }
    out.put_slice(b"\r\n");
}

pub(super) fn header(out: &mut BytesMut, prefix: u8, n: i64) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(n).as_bytes();
    out.reserve(digits.len() + 3);
    out.put_u8(prefix);
    out.put_slice(digits);
    out.put_slice(b"\r\n");
}

impl From<Error> for Reply {
    /// The catalogue's error as a reply: a constant wording is sent without a copy.
    fn from(e: Error) -> Reply {
        match e.text() {
            Cow::Borrowed(text) => Reply::static_error(text),
            Cow::Owned(text) => Reply::error(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, resp3: bool) -> Vec<u8> {
        let mut out = BytesMut::new();
        r.encode(&mut out, resp3);
        out.to_vec()
    }

    #[test]
    fn an_error_from_our_script_loses_only_the_scripts_origin() {
        let raised = Reply::static_error(
            "WRONGTYPE Operation against a key holding the wrong kind of value script: \
             e0e1f9fabfc9d4800c877a703b823ac0578ff8db, on @user_script:1.",
        );
        assert_eq!(
            raised.from_our_script(),
            Reply::static_error(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            )
        );
        // An error without the suffix, and any other reply, stay as they are.
        let plain = Reply::static_error("BUSY Redis is busy running a script.");
        assert_eq!(plain.from_our_script(), plain);
        assert_eq!(Reply::Integer(0).from_our_script(), Reply::Integer(0));
    }

    #[test]
    fn nil_differs_by_protocol() {
        assert_eq!(enc(&Reply::Nil, false), b"$-1\r\n");
        assert_eq!(enc(&Reply::Nil, true), b"_\r\n");
        assert_eq!(enc(&Reply::NilArray, false), b"*-1\r\n");
    }

    #[test]
    fn map_is_flat_in_resp2() {
        let m = Reply::Map(vec![(Reply::bulk("a"), Reply::Integer(1))]);
        assert_eq!(enc(&m, false), b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&m, true), b"%1\r\n$1\r\na\r\n:1\r\n");
    }

    #[test]
    fn pushes_are_arrays_in_resp2() {
        let p = Reply::Push(vec![
            Reply::bulk("message"),
            Reply::bulk("c"),
            Reply::bulk("m"),
        ]);
        assert_eq!(
            enc(&p, false),
            b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"
        );
        assert_eq!(enc(&p, true)[0], b'>');
        let two = Reply::Many(vec![Reply::Integer(1), Reply::Integer(2)]);
        assert_eq!(enc(&two, false), b":1\r\n:2\r\n");
    }

    #[test]
    fn simple_strings_cannot_break_framing() {
        assert_eq!(enc(&Reply::error("ERR a\r\nb"), false), b"-ERR a  b\r\n");
    }
}
