//! Replies: the values the proxy sends to clients and receives from masters.
//!
//! A [`Reply`] is protocol-neutral. It is encoded as RESP2 or RESP3 at the moment it is written,
//! using the protocol the client had selected when it sent the command. Replies from masters are
//! decoded with the `redis-protocol` crate (masters always speak RESP2 to us) and converted here.

use bytes::{Buf, BufMut, Bytes, BytesMut};
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

    /// Decodes the next RESP2 reply from a master, consuming it from `buf` (a one-off
    /// [`ReplyDecoder`]; connections keep one so that a reply arriving in pieces is scanned
    /// only once). Returns `Ok(None)` when the reply is not complete yet.
    pub fn decode_resp2(buf: &mut BytesMut) -> Result<Option<Reply>, String> {
        ReplyDecoder::default().decode(buf)
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

/// Replies nested deeper than this are not built: the master's reply is replaced by an error
/// (a script can return a table nested thousands of levels deep; building, encoding and
/// dropping that recursively would overflow the stack). Every [`Reply`] from a master is
/// therefore at most this deep, so the recursive encoder and `Drop` stay far from the stack's
/// limit.
pub const MAX_REPLY_DEPTH: usize = 32;

/// The error that stands in for a reply nested deeper than [`MAX_REPLY_DEPTH`].
pub const TOO_DEEP: &str = "ERR redlock-proxy: a master's reply is nested more than 32 levels deep";

/// An incremental RESP2 decoder for one master connection.
///
/// A reply is scanned once to find where it ends and how deep it nests (without recursion: a
/// stack of "elements left" per open array, on the heap), then built. When the reply is not
/// complete, the scan position is kept, so the next read resumes where this one stopped
/// instead of scanning from the start again.
#[derive(Debug, Default)]
pub struct ReplyDecoder {
    /// Bytes of the current reply already scanned.
    pos: usize,
    /// Elements still expected in each open array, innermost last.
    open: Vec<i64>,
    /// The deepest nesting seen in the current reply.
    deepest: usize,
}

impl ReplyDecoder {
    /// Decodes the next complete reply from `buf`, consuming it. `Ok(None)` when more bytes
    /// are needed (nothing is consumed; the scan resumes on the next call). A malformed reply is
    /// an error: the connection cannot be resynchronised.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Reply>, String> {
        if self.pos == 0
            && let Some(reply) = quick(buf)
        {
            return Ok(Some(reply));
        }
        let Some(len) = self.scan(buf).map_err(|()| "malformed reply".to_string())? else {
            return Ok(None);
        };
        let deepest = std::mem::take(&mut self.deepest);
        self.pos = 0;
        let frame = buf.split_to(len).freeze();
        if deepest > MAX_REPLY_DEPTH {
            return Ok(Some(Reply::static_error(TOO_DEEP)));
        }
        Ok(Some(build(&frame)))
    }

    /// Advances the scan; returns the length of the reply once it is complete.
    fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, ()> {
        loop {
            let pos = self.pos;
            let Some(&kind) = buf.get(pos) else {
                return Ok(None);
            };
            let Some((end, after)) = crlf(buf, pos + 1)? else {
                return Ok(None);
            };
            match kind {
                b'+' | b'-' | b':' => self.pos = after,
                b'$' => {
                    let n = number(&buf[pos + 1..end])?;
                    if n < 0 {
                        self.pos = after;
                    } else {
                        let stop = after
                            .checked_add(n as usize)
                            .and_then(|s| s.checked_add(2))
                            .ok_or(())?;
                        if buf.len() < stop {
                            return Ok(None);
                        }
                        self.pos = stop;
                    }
                }
                b'*' => {
                    let n = number(&buf[pos + 1..end])?;
                    self.pos = after;
                    if n > 0 {
                        self.open.push(n);
                        self.deepest = self.deepest.max(self.open.len());
                        continue;
                    }
                }
                _ => return Err(()),
            }
            // One element is complete: close every array it completes.
            loop {
                match self.open.last_mut() {
                    None => return Ok(Some(self.pos)),
                    Some(left) => {
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                        self.open.pop();
                    }
                }
            }
        }
    }
}

/// The replies a lock operation gets most (`+OK`, `$-1`, `:0` to `:9`), decoded and consumed
/// without scanning, slicing or reference counting; `None` for anything else (or a reply not
/// complete yet), which the general decoder then handles.
fn quick(buf: &mut BytesMut) -> Option<Reply> {
    let (reply, len) = match buf.get(..4)? {
        [b':', d @ b'0'..=b'9', b'\r', b'\n'] => (Reply::Integer(i64::from(d - b'0')), 4),
        b"+OK\r" if buf.get(4) == Some(&b'\n') => (Reply::ok(), 5),
        b"$-1\r" if buf.get(4) == Some(&b'\n') => (Reply::Nil, 5),
        _ => return None,
    };
    buf.advance(len);
    Some(reply)
}

/// The `\r\n`-terminated line starting at `from`: the index of its `\r` and of the byte after
/// its `\n`, once complete. A line without its `\r` is malformed (masters always send CRLF).
fn crlf(buf: &[u8], from: usize) -> Result<Option<(usize, usize)>, ()> {
    let Some(nl) = crate::resp::find_lf(buf, from) else {
        return Ok(None);
    };
    if nl == from || buf[nl - 1] != b'\r' {
        return Err(());
    }
    Ok(Some((nl - 1, nl + 1)))
}

fn number(digits: &[u8]) -> Result<i64, ()> {
    crate::resp::parse_int(digits).ok_or(())
}

/// Builds the reply of a frame already scanned (complete, well formed, at most
/// [`MAX_REPLY_DEPTH`] deep), without recursion.
fn build(frame: &Bytes) -> Reply {
    // Arrays under construction, innermost last, each with the elements it still expects.
    let mut open: Vec<(Vec<Reply>, usize)> = Vec::new();
    let mut pos = 0;
    loop {
        let kind = frame[pos];
        // The frame was scanned: every line is complete and well formed.
        let (end, after) = crlf(frame, pos + 1)
            .ok()
            .flatten()
            .unwrap_or((frame.len(), frame.len()));
        let text = frame.slice(pos + 1..end);
        pos = after;
        let mut done = match kind {
            b'+' => Reply::Simple(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Integer(number(&text).unwrap_or(0)),
            b'$' => match number(&text).unwrap_or(-1) {
                n if n < 0 => Reply::Nil,
                n => {
                    let data = frame.slice(pos..pos + n as usize);
                    pos += n as usize + 2;
                    Reply::Bulk(data)
                }
            },
            _ => match number(&text).unwrap_or(-1) {
                n if n < 0 => Reply::Nil,
                0 => Reply::Array(Vec::new()),
                n => {
                    // Pre-size only modestly: the count is the master's claim.
                    let n = n as usize;
                    open.push((Vec::with_capacity(n.min(64)), n));
                    continue;
                }
            },
        };
        loop {
            let Some((items, left)) = open.last_mut() else {
                return done;
            };
            items.push(done);
            *left -= 1;
            if *left > 0 {
                break;
            }
            let Some((items, _)) = open.pop() else {
                unreachable!("an open array was just seen")
            };
            done = Reply::Array(items);
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

/// Encodes a command into a new buffer of exactly the right size (this runs for every request
/// sent to the masters, so it makes one allocation, no capacity growth, and formats each
/// length once).
pub fn command(args: &[&[u8]]) -> Bytes {
    let size = 3
        + decimal_len(args.len())
        + args
            .iter()
            .map(|a| 5 + a.len() + decimal_len(a.len()))
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    put_header(&mut out, b'*', args.len());
    for arg in args {
        put_header(&mut out, b'$', arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    debug_assert_eq!(out.len(), size);
    Bytes::from(out)
}

/// Digits in `n` written in decimal.
pub(crate) fn decimal_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// `<prefix><n>\r\n`; the short lengths of most arguments are written as one fixed-size copy.
#[inline(always)]
pub(crate) fn put_header(out: &mut Vec<u8>, prefix: u8, n: usize) {
    if n < 10 {
        out.extend_from_slice(&[prefix, b'0' + n as u8, b'\r', b'\n']);
    } else if n < 100 {
        let (tens, ones) = ((n / 10) as u8, (n % 10) as u8);
        out.extend_from_slice(&[prefix, b'0' + tens, b'0' + ones, b'\r', b'\n']);
    } else {
        out.push(prefix);
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
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
    fn common_replies_decode_quickly_as_the_general_decoder_would() {
        for wire in [
            &b"+OK\r\n"[..],
            b"$-1\r\n",
            b":0\r\n",
            b":7\r\n",
            b":12\r\n",
            b"+OKAY\r\n",
            b"$2\r\nab\r\n",
            b"-ERR x\r\n",
        ] {
            let mut buf = BytesMut::from(wire);
            buf.extend_from_slice(b"+PONG\r\n");
            let mut d = ReplyDecoder::default();
            let got = d.decode(&mut buf).unwrap();
            assert_eq!(got, Some(build(&Bytes::copy_from_slice(wire))));
            assert_eq!(d.decode(&mut buf).unwrap(), Some(Reply::simple("PONG")));
            assert!(buf.is_empty());
        }
        // Incomplete: nothing is consumed until the line ends.
        let mut d = ReplyDecoder::default();
        let mut buf = BytesMut::from(&b"+OK\r"[..]);
        assert_eq!(d.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"\n");
        assert_eq!(d.decode(&mut buf).unwrap(), Some(Reply::ok()));
    }

    #[test]
    fn commands_encode_lengths_of_every_width() {
        for n in [0, 9, 10, 99, 100, 12_345] {
            let arg = vec![b'x'; n];
            let want = format!("*2\r\n$3\r\nSET\r\n${n}\r\n{}\r\n", "x".repeat(n));
            assert_eq!(command(&[b"SET", &arg]), want.as_bytes());
        }
        let many: Vec<&[u8]> = vec![b"k"; 120];
        let mut want = String::from("*120\r\n");
        want.push_str(&"$1\r\nk\r\n".repeat(120));
        assert_eq!(command(&many), want.as_bytes());
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
        // Found by the fuzzer: a line ending in a bare LF overran the buffer.
        assert!(Reply::decode_resp2(&mut BytesMut::from(&b"+\r\n-\n"[..])).is_ok());
        let mut bare = BytesMut::from(&b"-\n"[..]);
        assert!(Reply::decode_resp2(&mut bare).is_err());
    }

    #[test]
    fn replies_nested_beyond_the_cap_become_an_error_without_recursion() {
        // What `EVAL "local t={} local c=t for i=1,7000 do ... end return t" 0` makes a master
        // send (it overflowed the stack before), followed by a normal reply.
        let mut wire = b"*1\r\n".repeat(200_000);
        wire.extend_from_slice(b":1\r\n+OK\r\n");
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(
            Reply::decode_resp2(&mut buf),
            Ok(Some(Reply::static_error(TOO_DEEP)))
        );
        assert_eq!(Reply::decode_resp2(&mut buf), Ok(Some(Reply::ok())));
        // Exactly at the cap it is still a reply.
        let mut wire = b"*1\r\n".repeat(MAX_REPLY_DEPTH);
        wire.extend_from_slice(b":1\r\n");
        let reply = Reply::decode_resp2(&mut BytesMut::from(&wire[..]))
            .unwrap()
            .unwrap();
        let mut depth = 0;
        let mut at = &reply;
        while let Reply::Array(items) = at {
            depth += 1;
            at = &items[0];
        }
        assert_eq!((depth, at), (MAX_REPLY_DEPTH, &Reply::Integer(1)));
    }

    #[test]
    fn a_reply_arriving_in_pieces_resumes_its_scan() {
        let wire = b"*3\r\n$5\r\nhello\r\n*2\r\n:1\r\n:2\r\n$-1\r\n+OK\r\n";
        let mut decoder = ReplyDecoder::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in wire.iter() {
            buf.extend_from_slice(&[byte]);
            while let Some(r) = decoder.decode(&mut buf).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(
            got,
            vec![
                Reply::Array(vec![
                    Reply::bulk("hello"),
                    Reply::Array(vec![Reply::Integer(1), Reply::Integer(2)]),
                    Reply::Nil,
                ]),
                Reply::ok()
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn command_encoding() {
        assert_eq!(
            &command(&[b"GET", b"k"])[..],
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        );
    }
}
