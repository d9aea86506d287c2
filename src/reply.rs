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

    /// Decodes the next RESP2 reply from a master, consuming it from `buf`. Returns `Ok(None)`
    /// when the reply is not complete yet. This hand-written decoder covers every RESP2 shape
    /// (it measured about ten times cheaper than the general `redis-protocol` decoder on the
    /// replies of a lock operation); arrays nested deeper than a few levels are handed to
    /// `redis-protocol`.
    pub fn decode_resp2(buf: &mut BytesMut) -> Result<Option<Reply>, String> {
        match frame_len(buf, 0, 0) {
            Ok(Some(n)) => {
                let frame = buf.split_to(n).freeze();
                let mut pos = 0;
                Ok(Some(build(&frame, &mut pos)))
            }
            Ok(None) => Ok(None),
            Err(Deep) => match redis_protocol::resp2::decode::decode_bytes_mut(buf) {
                Ok(Some((frame, _, _))) => Ok(Some(Reply::from_resp2(frame))),
                Ok(None) => Ok(None),
                Err(e) => Err(format!("{e:?}")),
            },
            Err(Malformed) => Err("malformed reply".into()),
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

/// Nesting beyond which [`Reply::decode_resp2`] defers to `redis-protocol`.
const MAX_DEPTH: usize = 8;

enum FrameError {
    Deep,
    Malformed,
}
use FrameError::{Deep, Malformed};

/// End of the `\r\n`-terminated line starting at `from` (index of `\r`), if complete.
fn crlf(buf: &[u8], from: usize) -> Option<usize> {
    let nl = memchr::memchr(b'\n', buf.get(from..)?)? + from;
    Some(nl.saturating_sub(1).max(from))
}

fn number(digits: &[u8]) -> Result<i64, FrameError> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return Err(Malformed);
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(Malformed);
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(i64::from(d - b'0')))
            .ok_or(Malformed)?;
    }
    Ok(if negative { -n } else { n })
}

/// Length of the complete frame starting at `pos`, `None` when incomplete.
fn frame_len(buf: &[u8], pos: usize, depth: usize) -> Result<Option<usize>, FrameError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let Some(end) = crlf(buf, pos + 1) else {
        return Ok(None);
    };
    let after = end + 2;
    match kind {
        b'+' | b'-' | b':' => Ok(Some(after - pos)),
        b'$' => {
            let n = number(&buf[pos + 1..end])?;
            if n < 0 {
                return Ok(Some(after - pos));
            }
            let stop = after + n as usize + 2;
            Ok((buf.len() >= stop).then_some(stop - pos))
        }
        b'*' => {
            if depth >= MAX_DEPTH {
                return Err(Deep);
            }
            let n = number(&buf[pos + 1..end])?;
            let mut at = after;
            for _ in 0..n.max(0) {
                match frame_len(buf, at, depth + 1)? {
                    Some(len) => at += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(at - pos))
        }
        _ => Err(Malformed),
    }
}

/// Builds the reply of a frame already known to be complete and well formed.
fn build(frame: &Bytes, pos: &mut usize) -> Reply {
    let kind = frame[*pos];
    let end = crlf(frame, *pos + 1).unwrap_or(frame.len());
    let text = frame.slice(*pos + 1..end);
    *pos = end + 2;
    match kind {
        b'+' => Reply::Simple(text),
        b'-' => Reply::Error(text),
        b':' => Reply::Integer(number(&text).unwrap_or(0)),
        b'$' => match number(&text).unwrap_or(-1) {
            n if n < 0 => Reply::Nil,
            n => {
                let data = frame.slice(*pos..*pos + n as usize);
                *pos += n as usize + 2;
                Reply::Bulk(data)
            }
        },
        _ => match number(&text).unwrap_or(-1) {
            n if n < 0 => Reply::Nil,
            n => Reply::Array((0..n).map(|_| build(frame, pos)).collect()),
        },
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

/// Encodes a command into a new buffer of exactly the right size (this runs for every request
/// sent to the masters, so it makes one allocation and no capacity checks per argument).
pub fn command(args: &[&[u8]]) -> Bytes {
    let mut digits = itoa::Buffer::new();
    let size = 3
        + digits.format(args.len()).len()
        + args
            .iter()
            .map(|a| 5 + a.len() + digits.format(a.len()).len())
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.push(b'*');
    out.extend_from_slice(digits.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        out.extend_from_slice(digits.format(arg.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    debug_assert_eq!(out.len(), size);
    Bytes::from(out)
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
    fn decodes_what_masters_send() {
        let wire = b"+OK\r\n$-1\r\n:12\r\n$3\r\na\r\n\r\n*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n-ERR x\r\n*-1\r\n*1\r\n*0\r\n";
        let want = [
            Reply::ok(),
            Reply::Nil,
            Reply::Integer(12),
            Reply::bulk("a\r\n"),
            Reply::Array(vec![Reply::bulk("1700000000"), Reply::bulk("123456")]),
            Reply::error("ERR x"),
            Reply::Nil,
            Reply::Array(vec![Reply::Array(vec![])]),
        ];
        let mut buf = BytesMut::from(&wire[..]);
        for w in want {
            assert_eq!(Reply::decode_resp2(&mut buf), Ok(Some(w)));
        }
        assert!(buf.is_empty());
        // Every cut of a frame waits for more.
        for cut in 1..wire.len() {
            let mut buf = BytesMut::from(&wire[..cut]);
            while let Ok(Some(_)) = Reply::decode_resp2(&mut buf) {}
            assert!(Reply::decode_resp2(&mut buf).is_ok(), "cut {cut}");
        }
        let mut deep = b"*1\r\n".repeat(12);
        deep.extend_from_slice(b":1\r\n");
        let mut buf = BytesMut::from(&deep[..]);
        assert!(matches!(
            Reply::decode_resp2(&mut buf),
            Ok(Some(Reply::Array(_)))
        ));
        assert!(Reply::decode_resp2(&mut BytesMut::from(&b"?\r\n"[..])).is_err());
    }

    #[test]
    fn command_encoding() {
        assert_eq!(
            &command(&[b"GET", b"k"])[..],
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        );
    }
}
