//! Replies: the values the proxy sends to clients and receives from masters.
//!
//! A [`Reply`] is protocol-neutral. It is encoded as RESP2 or RESP3 at the moment it is written,
//! using the protocol the client had selected when it sent the command. Replies from masters are
//! decoded with the `redis-protocol` crate (masters always speak RESP2 to us) and converted here.

use bytes::{BufMut, Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame;

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

    /// An error reply. `text` must start with the error code, e.g. `ERR syntax error`.
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

    /// Converts a frame decoded from a master.
    pub fn from_resp2(frame: BytesFrame) -> Reply {
        match frame {
            BytesFrame::SimpleString(s) => Reply::Simple(s),
            BytesFrame::Error(e) => Reply::Error(e.into_inner()),
            BytesFrame::Integer(i) => Reply::Integer(i),
            BytesFrame::BulkString(b) => Reply::Bulk(b),
            BytesFrame::Array(items) => {
                Reply::Array(items.into_iter().map(Reply::from_resp2).collect())
            }
            BytesFrame::Null => Reply::Nil,
        }
    }

    /// Appends the encoding of this reply to `out`, as RESP3 when `resp3` is set.
    pub fn encode(&self, out: &mut BytesMut, resp3: bool) {
        match self {
            Reply::Simple(s) => line(out, b'+', s),
            Reply::Error(e) => line(out, b'-', e),
            Reply::Integer(i) => header(out, b':', *i),
            Reply::Bulk(b) => {
                header(out, b'$', b.len() as i64);
                out.put_slice(b);
                out.put_slice(b"\r\n");
            }
            Reply::Nil if resp3 => out.put_slice(b"_\r\n"),
            Reply::Nil => out.put_slice(b"$-1\r\n"),
            Reply::NilArray if resp3 => out.put_slice(b"_\r\n"),
            Reply::NilArray => out.put_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                header(out, b'*', items.len() as i64);
                for item in items {
                    item.encode(out, resp3);
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

fn header(out: &mut BytesMut, prefix: u8, n: i64) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(n).as_bytes();
    out.reserve(digits.len() + 3);
    out.put_u8(prefix);
    out.put_slice(digits);
    out.put_slice(b"\r\n");
}

/// Encodes a command (an array of bulk strings) for a master.
pub fn encode_command(out: &mut BytesMut, args: &[&[u8]]) {
    header(out, b'*', args.len() as i64);
    for arg in args {
        header(out, b'$', arg.len() as i64);
        out.put_slice(arg);
        out.put_slice(b"\r\n");
    }
}

/// Encodes a command into a new buffer.
pub fn command(args: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    encode_command(&mut out, args);
    out.freeze()
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
    fn simple_strings_cannot_break_framing() {
        assert_eq!(enc(&Reply::error("ERR a\r\nb"), false), b"-ERR a  b\r\n");
    }

    #[test]
    fn command_encoding() {
        assert_eq!(
            &command(&[b"GET", b"k"])[..],
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        );
    }
}
