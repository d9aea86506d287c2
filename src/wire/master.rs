//! The master side of the wire: commands encoded for a master, and the incremental decoder of
//! the RESP2 replies masters send back.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::reply::{Reply, header};
use crate::error::Error;

/// Replies nested deeper than this are not built: the master's reply is replaced by an error,
/// [`Error::ReplyTooDeep`] (whose wording names this number; a test keeps the two alike). A
/// script can return a table nested thousands of levels deep, and building, encoding and
/// dropping that recursively would overflow the stack. Every [`Reply`] from a master is
/// therefore at most this deep, so the recursive encoder and `Drop` stay far from the stack's
/// limit.
pub const MAX_REPLY_DEPTH: usize = 32;

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
            return Ok(Some(Reply::from(Error::ReplyTooDeep)));
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
    let Some(nl) = crate::wire::resp::find_lf(buf, from) else {
        return Ok(None);
    };
    if nl == from || buf[nl - 1] != b'\r' {
        return Err(());
    }
    Ok(Some((nl - 1, nl + 1)))
}

fn number(digits: &[u8]) -> Result<i64, ()> {
    crate::wire::resp::parse_int(digits).ok_or(())
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

/// Encodes a command (an array of bulk strings) for a master.
pub fn encode_command(out: &mut BytesMut, args: &[&[u8]]) {
    header(out, b'*', args.len() as i64);
    for arg in args {
        header(out, b'$', arg.len() as i64);
        out.put_slice(arg);
        out.put_slice(b"\r\n");
    }
}

/// The most the proxy buffers of one unfinished reply to its own questions outside the request
/// path (a greeting, `AUTH`, `ROLE`, Sentinel's answers): real answers are a few kilobytes.
pub const SMALL_REPLY: usize = 1 << 20;

/// Sends one command on `io` and reads one reply (see [`read_reply`]): the proxy's own
/// questions outside the request path (`ROLE`, `AUTH`, `CLUSTER SLOTS`, Sentinel's commands).
pub async fn ask_once<S>(
    io: &mut S,
    buf: &mut BytesMut,
    decoder: &mut ReplyDecoder,
    args: &[&[u8]],
    limit: usize,
) -> Result<Reply, String>
where
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    io.write_all(&command(args))
        .await
        .map_err(|e| e.to_string())?;
    io.flush().await.map_err(|e| e.to_string())?;
    read_reply(io, buf, decoder, limit).await
}

/// Reads the next reply from `io` into `buf`, refusing one that grows past `limit` bytes
/// unfinished (a node that streams without end cannot make the proxy buffer it all).
pub async fn read_reply<S>(
    io: &mut S,
    buf: &mut BytesMut,
    decoder: &mut ReplyDecoder,
    limit: usize,
) -> Result<Reply, String>
where
    S: AsyncRead + Unpin + ?Sized,
{
    loop {
        if let Some(r) = decoder.decode(buf)? {
            return Ok(r);
        }
        if buf.len() > limit {
            return Err("reply too large".to_string());
        }
        if io.read_buf(buf).await.map_err(|e| e.to_string())? == 0 {
            return Err("connection closed".to_string());
        }
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

/// `SET key token NX PX ttl`, as an acquisition of one key asks each master, with `GET` at the
/// end when `get` (a reentrant acquisition, which must see the holder: see the lock engine):
/// the same bytes as [`command`] makes of it, in one exactly-sized allocation,
/// with the constant words written as whole pieces rather than argument by argument, since
/// every lock request pays for this.
pub fn set_nx(key: &[u8], token: &[u8], ttl_ms: i64, get: bool) -> Bytes {
    const HEAD: &[u8] = b"*7\r\n$3\r\nSET\r\n";
    // Each piece after an argument starts with that argument's `\r\n`.
    const OPTIONS: &[u8] = b"\r\n$2\r\nNX\r\n$2\r\nPX\r\n";
    let tail: &[u8] = if get { b"\r\n$3\r\nGET\r\n" } else { b"\r\n" };
    let argc = if get { b'7' } else { b'6' };
    let mut ttl = itoa::Buffer::new();
    let ttl = ttl.format(ttl_ms).as_bytes();
    // `$<len>\r\n<arg>`, the `\r\n` after it counted in the piece that follows.
    let bulk = |len: usize| 3 + decimal_len(len) + len;
    let size = HEAD.len() + bulk(key.len()) + 2 + bulk(token.len()) + OPTIONS.len();
    let mut out = Vec::with_capacity(size + bulk(ttl.len()) + tail.len());
    let (mut one, mut two) = (
        *b"*7\r\n$3\r\nSET\r\n$0\r\n",
        *b"*7\r\n$3\r\nSET\r\n$00\r\n",
    );
    (one[1], two[1]) = (argc, argc);
    put_piece(&mut out, one, two, key.len());
    out.extend_from_slice(key);
    put_piece(&mut out, *b"\r\n$0\r\n", *b"\r\n$00\r\n", token.len());
    out.extend_from_slice(token);
    put_piece(
        &mut out,
        *b"\r\n$2\r\nNX\r\n$2\r\nPX\r\n$0\r\n",
        *b"\r\n$2\r\nNX\r\n$2\r\nPX\r\n$00\r\n",
        ttl.len(),
    );
    out.extend_from_slice(ttl);
    out.extend_from_slice(tail);
    debug_assert_eq!(out.len(), out.capacity());
    Bytes::from(out)
}

/// A constant piece of [`set_nx`] ending in a bulk header `$<n>\r\n`, given as `one`
/// (the piece with `$0\r\n`) and `two` (with `$00\r\n`): for `n` below 100, nearly every
/// length, the fitting one with its digits filled in, as one fixed-size copy.
#[inline(always)]
fn put_piece<const ONE: usize, const TWO: usize>(
    out: &mut Vec<u8>,
    mut one: [u8; ONE],
    mut two: [u8; TWO],
    n: usize,
) {
    if n < 10 {
        one[ONE - 3] = b'0' + n as u8;
        out.extend_from_slice(&one);
    } else if n < 100 {
        two[TWO - 4] = b'0' + (n / 10) as u8;
        two[TWO - 3] = b'0' + (n % 10) as u8;
        out.extend_from_slice(&two);
    } else {
        out.extend_from_slice(&one[..ONE - 4]);
        put_header(out, b'$', n);
    }
}

/// `EVAL script numkeys keys... args...`
pub fn eval<K: AsRef<[u8]>>(script: &str, keys: &[K], args: &[&[u8]]) -> Bytes {
    let n = itoa::Buffer::new().format(keys.len()).to_owned();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
    parts.extend([b"EVAL".as_slice(), script.as_bytes(), n.as_bytes()]);
    parts.extend(keys.iter().map(|k| k.as_ref()));
    parts.extend(args);
    command(&parts)
}

/// `TIME` as a master reads it, appended after a batch of timed requests (a constant: it is
/// written once per batch).
pub const TIME_COMMAND: &[u8] = b"*1\r\n$4\r\nTIME\r\n";

/// Decodes the next RESP2 reply from a master, consuming it from `buf` (a one-off
/// [`ReplyDecoder`]; connections keep one so that a reply arriving in pieces is scanned only
/// once). Returns `Ok(None)` when the reply is not complete yet.
pub fn decode_reply(buf: &mut BytesMut) -> Result<Option<Reply>, String> {
    ReplyDecoder::default().decode(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reply_that_outgrows_its_limit_is_refused_before_it_ends() {
        // A node that announces a 100 MB bulk and streams it: refused past the limit, long
        // before the bytes (here 8 MiB, then the end of the stream) run out. A read fills the
        // buffer's spare room, which doubles as it grows, so it may hold up to twice the limit.
        let mut wire = b"$100000000\r\n".to_vec();
        wire.resize(wire.len() + (8 << 20), b'x');
        let (mut buf, mut decoder) = (BytesMut::new(), ReplyDecoder::default());
        let got = read_reply(&mut &wire[..], &mut buf, &mut decoder, 1 << 20).await;
        assert_eq!(got, Err("reply too large".to_string()));
        assert!(buf.len() <= 2 << 20, "{}", buf.len());
        // Within the limit, a whole reply is read.
        let wire = b"*2\r\n$4\r\nrole\r\n:1\r\n".to_vec();
        let (mut buf, mut decoder) = (BytesMut::new(), ReplyDecoder::default());
        let got = read_reply(&mut &wire[..], &mut buf, &mut decoder, 1 << 20).await;
        assert_eq!(
            got,
            Ok(Reply::Array(vec![Reply::bulk("role"), Reply::Integer(1)]))
        );
    }

    #[test]
    fn common_replies_decode_quickly_as_the_general_decoder_would() {
        for wire in byte_strings![
            b"+OK\r\n",
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
            assert_eq!(decode_reply(&mut buf), Ok(Some(w)));
        }
        assert!(buf.is_empty());
        // Every cut of a frame waits for more.
        for cut in 1..wire.len() {
            let mut buf = BytesMut::from(&wire[..cut]);
            while let Ok(Some(_)) = decode_reply(&mut buf) {}
            assert!(decode_reply(&mut buf).is_ok(), "cut {cut}");
        }
        let mut deep = b"*1\r\n".repeat(12);
        deep.extend_from_slice(b":1\r\n");
        let mut buf = BytesMut::from(&deep[..]);
        assert!(matches!(decode_reply(&mut buf), Ok(Some(Reply::Array(_)))));
        assert!(decode_reply(&mut BytesMut::from(&b"?\r\n"[..])).is_err());
        // Found by the fuzzer: a line ending in a bare LF overran the buffer.
        assert!(decode_reply(&mut BytesMut::from(&b"+\r\n-\n"[..])).is_ok());
        let mut bare = BytesMut::from(&b"-\n"[..]);
        assert!(decode_reply(&mut bare).is_err());
    }

    #[test]
    fn the_depth_error_names_the_cap() {
        let text = Error::ReplyTooDeep.text();
        assert!(
            text.ends_with(&format!(" more than {MAX_REPLY_DEPTH} levels deep")),
            "{text}"
        );
    }

    #[test]
    fn replies_nested_beyond_the_cap_become_an_error_without_recursion() {
        // What `EVAL "local t={} local c=t for i=1,7000 do ... end return t" 0` makes a master
        // send (it overflowed the stack before), followed by a normal reply.
        let mut wire = b"*1\r\n".repeat(200_000);
        wire.extend_from_slice(b":1\r\n+OK\r\n");
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(
            decode_reply(&mut buf),
            Ok(Some(Reply::from(Error::ReplyTooDeep)))
        );
        assert_eq!(decode_reply(&mut buf), Ok(Some(Reply::ok())));
        // Exactly at the cap it is still a reply.
        let mut wire = b"*1\r\n".repeat(MAX_REPLY_DEPTH);
        wire.extend_from_slice(b":1\r\n");
        let reply = decode_reply(&mut BytesMut::from(&wire[..]))
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

    #[test]
    fn the_acquisition_command_is_encoded_as_any_command() {
        for len in [0, 1, 9, 10, 99, 100, 1000, 100_000] {
            let key = vec![b'k'; len];
            let token = vec![b't'; len / 2 + 3];
            for ttl in [1, 9, 10, 30_000, i64::MAX, -1, i64::MIN] {
                let text = ttl.to_string();
                let words: [&[u8]; 7] =
                    [b"SET", &key, &token, b"NX", b"PX", text.as_bytes(), b"GET"];
                for get in [false, true] {
                    assert_eq!(
                        set_nx(&key, &token, ttl, get),
                        command(&words[..6 + usize::from(get)]),
                        "{len} {ttl} {get}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_time_command_is_encoded_as_any_command() {
        assert_eq!(TIME_COMMAND, &command(&[b"TIME"])[..]);
    }
}
