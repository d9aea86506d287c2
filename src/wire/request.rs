//! Request decoding: RESP multibulk arrays and inline commands, as Redis accepts them.
//!
//! Clients send commands either as an array of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or
//! as an inline line (`GET k\r\n`, what telnet sends). Other RESP types are not commands, so this
//! decoder accepts only those two shapes, which also makes deep nesting impossible. Every length
//! is checked against [`Limits`] before anything is buffered for it, and a violation is reported
//! with Redis's own wording; the connection is then closed, as Redis does. Before `AUTH` (when a
//! password is set) Redis 7's much smaller limits apply: 10 arguments, 16384-byte bulks.
//!
//! A [`Decoder`] is incremental: it keeps its place in a partial request between reads, so a
//! request trickling in byte by byte is scanned once, not again from its start on every read.
//!
//! A decoded request is an [`Args`]: the request's bytes, split off the read buffer as one
//! frame, and where each argument lies in it, in a list the decoder reuses. Commands read their
//! arguments as `&[u8]` views of the frame; only an argument a command keeps (a lock's key and
//! token) becomes a `Bytes`, a slice of the frame. So a request costs no allocation and no
//! reference count per argument. An inline command is unquoted in place, in its own line, and
//! decodes to the same form.

use std::fmt;
use std::ops::Index;

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

use crate::error::{Error, Malformed};

/// Most arguments a multibulk may announce before `AUTH` (Redis 7).
pub const UNAUTHENTICATED_MAX_ARGS: i64 = 10;
/// Largest bulk accepted before `AUTH` (Redis 7).
pub const UNAUTHENTICATED_MAX_BULK: i64 = 16384;

/// Where one argument lies in its frame: start and end offsets.
type Span = (usize, usize);

/// Above this many entries, the decoder's argument list is freed after a request rather than
/// kept for the next (one huge request does not pin its list for the connection's life).
const SPANS_KEPT: usize = 1024;

/// One request: the command name (`args[0]`) and its arguments.
///
/// Decoded requests are views into their frame (see the module documentation), borrowed from
/// the [`Decoder`] until the next request is decoded; `From<Vec<Bytes>>` makes one from
/// arguments already owned one by one (a command replayed by `EXEC`, or rewritten by another).
/// Index it for an argument's bytes; [`Args::bytes`] for one to keep, [`Args::into_vec`] for all.
pub struct Args<'a>(Form<'a>);

enum Form<'a> {
    /// Arguments at `spans` in `frame`.
    Frame { frame: Bytes, spans: &'a [Span] },
    /// Arguments owned one by one.
    Parts(Vec<Bytes>),
}

impl<'a> Args<'a> {
    /// The number of arguments, the command name included.
    pub fn len(&self) -> usize {
        match &self.0 {
            Form::Frame { spans, .. } => spans.len(),
            Form::Parts(parts) => parts.len(),
        }
    }

    /// True when there are no arguments (never for a decoded request).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Argument `i`'s bytes, if there is one.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        match &self.0 {
            Form::Frame { frame, spans } => spans.get(i).map(|&(a, b)| &frame[a..b]),
            Form::Parts(parts) => parts.get(i).map(|p| &p[..]),
        }
    }

    /// Every argument's bytes, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| &self[i])
    }

    /// Argument `i` as a `Bytes` to keep: a slice of the frame, not a copy. Panics when there
    /// is no argument `i`, as indexing does.
    pub fn bytes(&self, i: usize) -> Bytes {
        match &self.0 {
            Form::Frame { frame, spans } => frame.slice(spans[i].0..spans[i].1),
            Form::Parts(parts) => parts[i].clone(),
        }
    }

    /// Argument `i` as a `Bytes` to keep (see [`Args::bytes`]), if there is one.
    #[inline]
    pub fn bytes_at(&self, i: usize) -> Option<Bytes> {
        match &self.0 {
            Form::Frame { frame, spans } => spans.get(i).map(|&(a, b)| frame.slice(a..b)),
            Form::Parts(parts) => parts.get(i).cloned(),
        }
    }

    /// Every argument as a `Bytes`, for commands that keep their arguments.
    pub fn into_vec(self) -> Vec<Bytes> {
        match self.0 {
            Form::Frame { frame, spans } => spans.iter().map(|&(a, b)| frame.slice(a..b)).collect(),
            Form::Parts(parts) => parts,
        }
    }
}

impl Index<usize> for Args<'_> {
    type Output = [u8];

    fn index(&self, i: usize) -> &[u8] {
        match &self.0 {
            Form::Frame { frame, spans } => &frame[spans[i].0..spans[i].1],
            Form::Parts(parts) => &parts[i],
        }
    }
}

impl From<Vec<Bytes>> for Args<'static> {
    fn from(parts: Vec<Bytes>) -> Args<'static> {
        Args(Form::Parts(parts))
    }
}

impl PartialEq for Args<'_> {
    fn eq(&self, other: &Args<'_>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Args<'_> {}

impl fmt::Debug for Args<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// One argument, shown as `Bytes` shows itself.
        struct Arg<'b>(&'b [u8]);
        impl fmt::Debug for Arg<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "b\"{}\"", self.0.escape_ascii())
            }
        }
        f.debug_list().entries(self.iter().map(Arg)).finish()
    }
}

/// Size limits on a single request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted bulk string, in bytes.
    pub max_bulk_len: usize,
    /// Largest accepted number of arguments.
    pub max_args: usize,
    /// Largest accepted inline command line, in bytes.
    pub max_inline_len: usize,
    /// Largest accepted request, all of its headers and arguments together, in bytes.
    pub max_request_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 4 * 1024 * 1024,
            max_args: 64 * 1024,
            max_inline_len: 64 * 1024,
            max_request_len: 64 * 1024 * 1024,
        }
    }
}

/// Why a request cannot be decoded: the decoder's boundary type. What the client is told comes
/// from the error catalogue ([`Error::Protocol`]); see [`ProtocolError::answer`].
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtocolError {
    /// A malformed request: Redis answers it with a protocol error, then closes the
    /// connection.
    #[error("{}", Error::Protocol(*.0))]
    Malformed(Malformed),
    /// The request is larger than `client_query_buffer_limit`. Redis closes such a client
    /// without a reply, and so does the proxy; the text is for the log.
    #[error("request larger than client_query_buffer_limit")]
    RequestTooLarge,
}

impl From<Malformed> for ProtocolError {
    fn from(m: Malformed) -> ProtocolError {
        ProtocolError::Malformed(m)
    }
}

impl ProtocolError {
    /// What the client is told before the connection closes; `None` when it is told nothing
    /// (Redis answers every protocol error except an overflowing query buffer).
    pub fn answer(&self) -> Option<Error> {
        match self {
            ProtocolError::Malformed(m) => Some(Error::Protocol(*m)),
            ProtocolError::RequestTooLarge => None,
        }
    }
}

/// Decodes requests from a client's read buffer, keeping its place in a partial request.
///
/// The buffer must only grow at its end between calls (new bytes read), except for what
/// [`Decoder::decode`] itself consumes: offsets into the request in progress are kept.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    /// Parsing resumes here: bytes before it belong to the request in progress and are checked.
    pos: usize,
    /// The search for the current line's end resumes here (0: not started).
    scan: usize,
    /// Arguments of the multibulk in progress still to come; 0 outside a multibulk.
    left: usize,
    /// Length of the bulk whose payload starts at `pos`, once its header has been read.
    bulk: Option<usize>,
    /// Where each argument of the request in progress (or the one last decoded) lies, reused
    /// from request to request.
    spans: Vec<Span>,
    /// Bytes examined so far, for the tests' bound on rescanning.
    #[cfg(test)]
    examined: usize,
}

impl Decoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            pos: 0,
            scan: 0,
            left: 0,
            bulk: None,
            spans: Vec::new(),
            #[cfg(test)]
            examined: 0,
        }
    }

    /// True while a request has been started but not completed.
    pub fn in_request(&self) -> bool {
        self.left > 0 || self.scan > 0
    }

    /// Decodes the next complete request from `buf`, with the smaller pre-`AUTH` limits when
    /// `authed` is false.
    ///
    /// Returns `Ok(None)` when more bytes are needed; a complete request is consumed from
    /// `buf`, a partial one is left there (its place kept). Empty requests (a blank inline
    /// line, `*0`) are consumed and skipped, as Redis does. The request borrows the decoder
    /// (its list of argument places) until the next call.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        authed: bool,
    ) -> Result<Option<Args<'_>>, ProtocolError> {
        loop {
            if self.left == 0 {
                if buf.is_empty() {
                    return Ok(None);
                }
                if buf[0] != b'*' {
                    match self.inline(buf)? {
                        None => return Ok(None),
                        Some(_) if self.spans.is_empty() => continue,
                        Some(frame) => return Ok(Some(self.args(frame))),
                    }
                }
                let Some((count, nl)) = self.header(buf, 0) else {
                    return if buf.len() > self.limits.max_inline_len {
                        Err(Malformed::HeaderTooLong.into())
                    } else {
                        Ok(None)
                    };
                };
                let count = count.ok_or(Malformed::MultibulkLength)?;
                if count > self.limits.max_args as i64 {
                    return Err(Malformed::MultibulkLength.into());
                }
                if !authed && count > UNAUTHENTICATED_MAX_ARGS {
                    return Err(Malformed::UnauthenticatedMultibulkLength.into());
                }
                if count <= 0 {
                    buf.advance(nl + 1);
                    continue;
                }
                self.left = count as usize;
                self.pos = nl + 1;
                self.reset_spans();
            }
            return self.multibulk(buf, authed);
        }
    }

    /// Continues the multibulk in progress.
    fn multibulk(
        &mut self,
        buf: &mut BytesMut,
        authed: bool,
    ) -> Result<Option<Args<'_>>, ProtocolError> {
        if self.bulk.is_none() {
            self.whole_bulks(buf, authed);
        }
        while self.left > 0 {
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    let Some(&first) = buf.get(self.pos) else {
                        return Ok(None);
                    };
                    if first != b'$' {
                        return Err(Malformed::ExpectedBulk(first as char).into());
                    }
                    let Some((len, nl)) = self.header(buf, self.pos) else {
                        return if buf.len() - self.pos > self.limits.max_inline_len {
                            Err(Malformed::BulkHeaderTooLong.into())
                        } else {
                            Ok(None)
                        };
                    };
                    let len = len.ok_or(Malformed::BulkLength)?;
                    if len < 0 || len > self.limits.max_bulk_len as i64 {
                        return Err(Malformed::BulkLength.into());
                    }
                    if !authed && len > UNAUTHENTICATED_MAX_BULK {
                        return Err(Malformed::UnauthenticatedBulkLength.into());
                    }
                    let len = len as usize;
                    if nl + 1 + len + 2 > self.limits.max_request_len {
                        return Err(ProtocolError::RequestTooLarge);
                    }
                    self.pos = nl + 1;
                    self.bulk = Some(len);
                    len
                }
            };
            let stop = self.pos + len;
            if buf.len() < stop + 2 {
                return Ok(None);
            }
            self.spans.push((self.pos, stop));
            self.pos = stop + 2;
            self.bulk = None;
            self.left -= 1;
        }
        let frame = buf.split_to(self.pos).freeze();
        self.pos = 0;
        Ok(Some(self.args(frame)))
    }

    /// Takes the arguments that have arrived whole, while their headers are the usual ones
    /// ([`quick_header`]) and within the limits: the common case, a whole request in the
    /// buffer, in one tight loop. It stops at anything else, for the general loop to read or
    /// refuse as it would have from there.
    fn whole_bulks(&mut self, buf: &[u8], authed: bool) {
        let (mut pos, mut left) = (self.pos, self.left);
        // An argument is taken only when it has arrived whole and within the request limit.
        let end = buf.len().min(self.limits.max_request_len);
        let max_len = if authed {
            self.limits.max_bulk_len as i64
        } else {
            UNAUTHENTICATED_MAX_BULK.min(self.limits.max_bulk_len as i64)
        };
        while left > 0 {
            // One- and two-digit lengths (nearly every argument) are matched with the `$` in
            // one pattern; longer ones take [`quick_header`].
            let (len, nl) = match buf.get(pos..) {
                Some(&[b'$', d, b'\r', b'\n', ..]) if d.is_ascii_digit() => {
                    (i64::from(d - b'0'), pos + 3)
                }
                Some(&[b'$', a @ b'1'..=b'9', d, b'\r', b'\n', ..]) if d.is_ascii_digit() => {
                    (i64::from(a - b'0') * 10 + i64::from(d - b'0'), pos + 4)
                }
                Some(&[b'$', ..]) => match quick_header(buf, pos) {
                    Some(header) => header,
                    None => break,
                },
                _ => break,
            };
            let stop = nl + 1 + len as usize;
            if len > max_len || stop + 2 > end {
                break;
            }
            self.spans.push((nl + 1, stop));
            pos = stop + 2;
            left -= 1;
        }
        if left != self.left {
            #[cfg(test)]
            {
                self.examined += pos - self.pos;
            }
            (self.pos, self.left, self.scan) = (pos, left, 0);
        }
    }

    /// The request just completed: its arguments at `self.spans` in `frame`.
    fn args(&self, frame: Bytes) -> Args<'_> {
        Args(Form::Frame {
            frame,
            spans: &self.spans,
        })
    }

    /// Empties the list of argument places for a new request.
    fn reset_spans(&mut self) {
        if self.spans.capacity() > SPANS_KEPT {
            self.spans = Vec::new();
        } else {
            self.spans.clear();
        }
    }

    /// Decodes an inline command line once its end has arrived: the line becomes the frame,
    /// unquoted in place, with its arguments' places in `self.spans` (none for a blank line).
    fn inline(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, ProtocolError> {
        let Some(nl) = self.line_end(buf, 0) else {
            return if buf.len() > self.limits.max_inline_len {
                Err(Malformed::InlineTooLong.into())
            } else {
                Ok(None)
            };
        };
        let mut line = buf.split_to(nl + 1);
        let end = if nl > 0 && line[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        self.reset_spans();
        split_args(&mut line[..end], &mut self.spans)?;
        Ok(Some(line.freeze()))
    }

    /// Reads the header line (`*<n>`, `$<n>`) whose prefix is at `at`, once it has ended: its
    /// number (`None` if it is not one) and where its `\n` is.
    #[inline]
    fn header(&mut self, buf: &[u8], at: usize) -> Option<(Option<i64>, usize)> {
        if let Some((n, nl)) = quick_header(buf, at) {
            #[cfg(test)]
            {
                self.examined += nl - at;
            }
            self.scan = 0;
            return Some((Some(n), nl));
        }
        self.unusual_header(buf, at)
    }

    /// [`Decoder::header`] for a line [`quick_header`] does not read: unfinished, or unusual.
    #[inline(never)]
    fn unusual_header(&mut self, buf: &[u8], at: usize) -> Option<(Option<i64>, usize)> {
        let nl = self.line_end(buf, at + 1)?;
        Some((parse_len(&buf[at + 1..content_end(buf, at + 1, nl)]), nl))
    }

    /// Finds the `\n` ending the line that starts at `from`, resuming where the last search of
    /// this line stopped.
    fn line_end(&mut self, buf: &[u8], from: usize) -> Option<usize> {
        let start = self.scan.max(from);
        let found = crate::wire::resp::find_lf(buf, start);
        #[cfg(test)]
        {
            self.examined += found.map_or(buf.len().saturating_sub(start), |i| i + 1 - start);
        }
        match found {
            Some(i) => {
                self.scan = 0;
                Some(i)
            }
            None => {
                self.scan = buf.len();
                None
            }
        }
    }
}

/// Decodes the next complete request from `buf` with a fresh [`Decoder`] (the client is taken
/// to be authenticated), its arguments owned. For one-off decoding: a partial request is parsed
/// again next time.
pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    Ok(Decoder::new(*limits).decode(buf, true)?.map(Args::into_vec))
}

/// Most digits [`quick_header`] reads; longer numbers take the general way.
const QUICK_DIGITS: usize = 10;

/// The usual header line, read in one pass: after the prefix at `at`, 1 to [`QUICK_DIGITS`]
/// digits without a leading zero, then `\r\n`. Its number and where its `\n` is; `None` for
/// anything else (an unfinished line, a bare LF, a sign, a malformed or longer number), which
/// the general reader ([`Decoder::line_end`], [`parse_len`]) then judges, so both read every
/// line alike.
#[inline]
fn quick_header(buf: &[u8], at: usize) -> Option<(i64, usize)> {
    let digits = buf.get(at + 1..)?;
    // One digit, the commonest header (`*6`, `$3`), in one comparison.
    if let &[d, b'\r', b'\n', ..] = digits
        && d.is_ascii_digit()
    {
        return Some((i64::from(d - b'0'), at + 3));
    }
    let mut n: i64 = 0;
    let mut i = 0;
    while i < QUICK_DIGITS
        && let Some(&d) = digits.get(i)
        && d.is_ascii_digit()
    {
        n = n * 10 + i64::from(d - b'0');
        i += 1;
    }
    if i == 0 || (digits[0] == b'0' && i > 1) || digits.get(i..i + 2) != Some(b"\r\n") {
        return None;
    }
    Some((n, at + 1 + i + 1))
}

/// The end of a header line's content: the `\r` before `nl`, or `nl` itself for a bare LF
/// (accepted, as before; Redis requires CRLF in multibulk headers).
fn content_end(buf: &[u8], from: usize, nl: usize) -> usize {
    if nl > from && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    }
}

fn parse_len(digits: &[u8]) -> Option<i64> {
    crate::wire::resp::parse_int(digits)
}

/// Splits an inline command line into arguments, with Redis's quoting rules (`sdssplitargs`):
/// double quotes understand `\n`, `\r`, `\t`, `\b`, `\a`, `\\`, `\"` and `\xHH`; single quotes
/// understand `\'`. A quote may also open inside a word (`a"b c"` is `ab c`), and a closing
/// quote ends the argument, so it must be followed by a space or the end of the line. Blanks
/// between arguments are C's `isspace`; a word ends only at a space, tab, CR or LF.
///
/// The arguments are written over the line itself, unquoted, one after another, and `spans`
/// gets where each lies. Unquoting only ever shortens, so each byte is written at or before the
/// place it was read from, which has been read by then.
fn split_args(line: &mut [u8], spans: &mut Vec<Span>) -> Result<(), ProtocolError> {
    // `i` reads, `w` writes; always `w <= i`.
    let (mut i, mut w) = (0, 0);
    loop {
        while i < line.len() && c_isspace(line[i]) {
            i += 1;
        }
        if i >= line.len() {
            return Ok(());
        }
        let start = w;
        // Unquoted until a quote opens; the argument ends where its closing quote is.
        loop {
            match line.get(i) {
                None | Some(b' ' | b'\t' | b'\r' | b'\n') => break,
                Some(&quote @ (b'"' | b'\'')) => {
                    i = unquote(line, i + 1, quote, &mut w)?;
                    ensure_separated(line, i)?;
                    break;
                }
                Some(&c) => {
                    line[w] = c;
                    w += 1;
                    i += 1;
                }
            }
        }
        spans.push((start, w));
    }
}

/// Writes the quoted part of an argument, read from `i` (just past its opening `quote`), at
/// `w` onwards, unescaped; returns where its closing quote ends. A quote never closed is
/// Redis's unbalanced-quotes error.
fn unquote(
    line: &mut [u8],
    mut i: usize,
    quote: u8,
    w: &mut usize,
) -> Result<usize, ProtocolError> {
    loop {
        let (c, read) = match line.get(i) {
            None => return Err(Malformed::UnbalancedQuotes.into()),
            Some(&c) if c == quote => return Ok(i + 1),
            Some(b'\\') => unescape(line, i, quote),
            Some(&c) => (c, 1),
        };
        line[*w] = c;
        *w += 1;
        i += read;
    }
}

/// The byte a backslash at `i` stands for between `quote`s, and how many bytes it takes. In
/// double quotes: `\xHH`, `\n`, `\r`, `\t`, `\b`, `\a`, or the escaped byte itself; in
/// single quotes only `\'`. Any other backslash is itself.
fn unescape(line: &[u8], i: usize, quote: u8) -> (u8, usize) {
    let next = line.get(i + 1).copied();
    if quote == b'\'' {
        return match next {
            Some(b'\'') => (b'\'', 2),
            _ => (b'\\', 1),
        };
    }
    if next == Some(b'x')
        && let Some(c) = hex_pair(line, i + 2)
    {
        return (c, 4);
    }
    match next {
        Some(b'n') => (b'\n', 2),
        Some(b'r') => (b'\r', 2),
        Some(b't') => (b'\t', 2),
        Some(b'b') => (8, 2),
        Some(b'a') => (7, 2),
        Some(other) => (other, 2),
        None => (b'\\', 1),
    }
}

/// C's `isspace`: what Redis skips between inline arguments and wants after a closing quote.
fn c_isspace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A closing quote must be followed by whitespace or the end of the line.
fn ensure_separated(line: &[u8], i: usize) -> Result<(), ProtocolError> {
    match line.get(i) {
        Some(&c) if !c_isspace(c) => Err(Malformed::UnbalancedQuotes.into()),
        _ => Ok(()),
    }
}

fn hex_pair(line: &[u8], i: usize) -> Option<u8> {
    let hi = (*line.get(i)? as char).to_digit(16)?;
    let lo = (*line.get(i + 1)? as char).to_digit(16)?;
    Some((hi * 16 + lo) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let mut buf = BytesMut::from(input);
        decode(&mut buf, &Limits::default())
    }

    fn args(v: &[&str]) -> Option<Vec<Bytes>> {
        Some(
            v.iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect(),
        )
    }

    #[test]
    fn protocol_errors_are_worded_by_the_catalogue() {
        let e = ProtocolError::from(Malformed::ExpectedBulk('*'));
        assert_eq!(e.to_string(), "ERR Protocol error: expected '$', got '*'");
        assert_eq!(
            e.answer(),
            Some(Error::Protocol(Malformed::ExpectedBulk('*')))
        );
    }

    #[test]
    fn multibulk() {
        assert_eq!(
            parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
            Ok(args(&["GET", "k"]))
        );
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n";
        for cut in 1..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(
                decode(&mut buf, &Limits::default()),
                Ok(None),
                "cut at {cut}"
            );
            assert_eq!(buf.len(), cut, "nothing consumed at {cut}");
        }
    }

    #[test]
    fn pipelined_requests_come_out_one_by_one() {
        let mut buf = BytesMut::from(&b"PING\r\n*1\r\n$4\r\nPING\r\n"[..]);
        let limits = Limits::default();
        assert_eq!(decode(&mut buf, &limits), Ok(args(&["PING"])));
        assert_eq!(decode(&mut buf, &limits), Ok(args(&["PING"])));
        assert_eq!(decode(&mut buf, &limits), Ok(None));
    }

    #[test]
    fn binary_values_are_untouched() {
        let got = parse(b"*2\r\n$3\r\nGET\r\n$4\r\n\x00\xff\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(&got[1][..], b"\x00\xff\r\n");
    }

    #[test]
    fn giant_lengths_are_refused_before_buffering() {
        assert_eq!(
            parse(b"*999999999999\r\n"),
            Err(Malformed::MultibulkLength.into())
        );
        assert_eq!(
            parse(b"*1\r\n$999999999999\r\n"),
            Err(Malformed::BulkLength.into())
        );
        assert_eq!(parse(b"*1\r\n$-5\r\n"), Err(Malformed::BulkLength.into()));
        assert_eq!(parse(b"*x\r\n"), Err(Malformed::MultibulkLength.into()));
    }

    #[test]
    fn nesting_is_not_a_command() {
        assert_eq!(
            parse(b"*1\r\n*1\r\n$1\r\na\r\n"),
            Err(Malformed::ExpectedBulk('*').into())
        );
    }

    #[test]
    fn endless_lines_are_refused() {
        let mut long = vec![b'a'; 70 * 1024];
        assert_eq!(parse(&long), Err(Malformed::InlineTooLong.into()));
        long[0] = b'*';
        assert_eq!(parse(&long), Err(Malformed::HeaderTooLong.into()));
    }

    #[test]
    fn inline_with_quotes() {
        assert_eq!(
            parse(b"SET k \"a b\\x41\\n\" 'it\\'s'\r\n"),
            Ok(args(&["SET", "k", "a bA\n", "it's"]))
        );
        assert_eq!(
            parse(b"SET \"k\r\n"),
            Err(Malformed::UnbalancedQuotes.into())
        );
        assert_eq!(
            parse(b"SET \"k\"x\r\n"),
            Err(Malformed::UnbalancedQuotes.into())
        );
    }

    /// Feeds `input` to one decoder `step` bytes at a time; returns the requests and the bytes
    /// it examined.
    fn trickle(input: &[u8], step: usize, limits: Limits) -> (Vec<Vec<Bytes>>, usize) {
        let mut d = Decoder::new(limits);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in input.chunks(step) {
            buf.extend_from_slice(chunk);
            while let Some(args) = d.decode(&mut buf, true).unwrap() {
                out.push(args.into_vec());
            }
        }
        assert!(buf.is_empty() && !d.in_request());
        (out, d.examined)
    }

    #[test]
    fn trickled_requests_decode_as_whole_ones() {
        let mut input = b"SET k \"a b\" NX\r\n*0\r\n".to_vec();
        input.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na\r\nbc\r\nPING\n");
        for step in 1..input.len() {
            let (got, _) = trickle(&input, step, Limits::default());
            assert_eq!(
                got,
                vec![
                    args(&["SET", "k", "a b", "NX"]).unwrap(),
                    args(&["SET", "k", "a\r\nbc"]).unwrap(),
                    args(&["PING"]).unwrap(),
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn a_trickled_request_is_scanned_once() {
        // 20000 arguments, then a 60 KB inline line, one byte per read. Re-parsing from the
        // start on every read would examine billions of bytes.
        let mut input = b"*20000\r\n".to_vec();
        for _ in 0..20000 {
            input.extend_from_slice(b"$1\r\nx\r\n");
        }
        input.extend(std::iter::repeat_n(b'a', 60_000));
        input.extend_from_slice(b"\r\n");
        let (got, examined) = trickle(&input, 1, Limits::default());
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), 20000);
        assert!(
            examined <= 2 * input.len(),
            "{examined} for {}",
            input.len()
        );
    }

    #[test]
    fn before_auth_redis_7_limits_apply() {
        // What a fresh decoder makes of `wire` before AUTH: how many arguments, or an error.
        let before_auth = |wire: &[u8]| {
            let mut d = Decoder::new(Limits::default());
            d.decode(&mut BytesMut::from(wire), false)
                .map(|got| got.map(|args| args.len()))
        };
        assert_eq!(before_auth(b"*10\r\n"), Ok(None));
        assert_eq!(
            before_auth(b"*11\r\n"),
            Err(Malformed::UnauthenticatedMultibulkLength.into())
        );
        assert_eq!(before_auth(b"*2\r\n$4\r\nECHO\r\n$16384\r\n"), Ok(None));
        assert_eq!(
            before_auth(b"*2\r\n$4\r\nECHO\r\n$16385\r\n"),
            Err(Malformed::UnauthenticatedBulkLength.into())
        );
        // The general limits come first, as in Redis.
        assert_eq!(
            before_auth(b"*1\r\n$99999999999\r\n"),
            Err(Malformed::BulkLength.into())
        );
        // Once authenticated, the same headers are fine.
        let mut buf = BytesMut::from(&b"*11\r\n"[..]);
        assert_eq!(
            Decoder::new(Limits::default()).decode(&mut buf, true),
            Ok(None)
        );
    }

    #[test]
    fn a_request_larger_than_the_limit_is_refused_at_its_header() {
        let limits = Limits {
            max_request_len: 1000,
            ..Limits::default()
        };
        let mut buf = BytesMut::from(&b"*3\r\n$4\r\nECHO\r\n$600\r\n"[..]);
        let mut d = Decoder::new(limits);
        assert_eq!(d.decode(&mut buf, true), Ok(None));
        buf.extend_from_slice(&[b'x'; 600]);
        buf.extend_from_slice(b"\r\n$600\r\n");
        let err = d.decode(&mut buf, true).unwrap_err();
        assert_eq!(err, ProtocolError::RequestTooLarge);
        assert_eq!(err.answer(), None);
    }

    #[test]
    fn empty_requests_are_skipped() {
        assert_eq!(parse(b"\r\n*0\r\nPING\n"), Ok(args(&["PING"])));
    }

    #[test]
    fn arguments_are_views_of_one_frame() {
        let mut d = Decoder::new(Limits::default());
        let mut buf = BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\nPING\r\n"[..]);
        let args = d.decode(&mut buf, true).unwrap().unwrap();
        assert_eq!(args.len(), 3);
        assert_eq!(&args[0], b"SET");
        assert_eq!(args.get(2), Some(&b"vv"[..]));
        assert_eq!(args.get(3), None);
        assert_eq!(args.iter().collect::<Vec<_>>(), [&b"SET"[..], b"k", b"vv"]);
        // A kept argument is a slice of the frame, not a copy.
        let kept = args.bytes(1);
        assert_eq!(kept.as_ptr(), args[1].as_ptr());
        assert_eq!(format!("{args:?}"), r#"[b"SET", b"k", b"vv"]"#);
        let owned = Args::from(args.into_vec());
        assert_eq!(format!("{owned:?}"), r#"[b"SET", b"k", b"vv"]"#);
        assert_eq!(owned.bytes(2), Bytes::from_static(b"vv"));
        // The next request reuses the list of places.
        assert_eq!(
            d.decode(&mut buf, true).unwrap().unwrap().into_vec(),
            ["PING"]
        );
    }

    /// Redis's `sdssplitargs`, transcribed state for state (in a quote or not, each argument
    /// built in its own buffer), against which the in-place splitting is checked.
    fn split_reference(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        let unbalanced = || Err(Malformed::UnbalancedQuotes.into());
        let isspace = |c: Option<u8>| c.is_some_and(|c| b" \t\n\x0b\x0c\r".contains(&c));
        let mut args = Vec::new();
        let mut p = 0;
        loop {
            while isspace(line.get(p).copied()) {
                p += 1;
            }
            if p >= line.len() {
                return Ok(args);
            }
            let (mut inq, mut insq, mut done) = (false, false, false);
            let mut current = Vec::new();
            while !done {
                let c = line.get(p).copied();
                let next = line.get(p + 1).copied();
                if inq {
                    let hex = (c == Some(b'\\') && next == Some(b'x'))
                        .then(|| hex_pair(line, p + 2))
                        .flatten();
                    if let Some(h) = hex {
                        current.push(h);
                        p += 3;
                    } else if c == Some(b'\\') && next.is_some() {
                        p += 1;
                        current.push(match line[p] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            other => other,
                        });
                    } else if c == Some(b'"') {
                        if next.is_some() && !isspace(next) {
                            return unbalanced();
                        }
                        done = true;
                    } else if let Some(c) = c {
                        current.push(c);
                    } else {
                        return unbalanced();
                    }
                } else if insq {
                    if c == Some(b'\\') && next == Some(b'\'') {
                        p += 1;
                        current.push(b'\'');
                    } else if c == Some(b'\'') {
                        if next.is_some() && !isspace(next) {
                            return unbalanced();
                        }
                        done = true;
                    } else if let Some(c) = c {
                        current.push(c);
                    } else {
                        return unbalanced();
                    }
                } else {
                    match c {
                        None | Some(b' ' | b'\n' | b'\r' | b'\t') => done = true,
                        Some(b'"') => inq = true,
                        Some(b'\'') => insq = true,
                        Some(c) => current.push(c),
                    }
                }
                if p < line.len() {
                    p += 1;
                }
            }
            args.push(current);
        }
    }

    #[test]
    fn the_quick_header_reads_as_the_general_one() {
        let alphabet = b"0123456789\r\n-+ x";
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut quick = 0;
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 16) as usize;
            let mut line = vec![b'$'];
            line.extend((0..len).map(|k| alphabet[((seed >> (4 + 3 * k)) % 16) as usize]));
            if let Some((n, nl)) = quick_header(&line, 0) {
                quick += 1;
                let general = crate::wire::resp::find_lf(&line, 1).unwrap();
                assert_eq!(nl, general, "{}", line.escape_ascii());
                assert_eq!(Some(n), parse_len(&line[1..content_end(&line, 1, nl)]));
            }
        }
        assert!(quick > 1000, "{quick}");
        assert_eq!(quick_header(b"$12345678901\r\n", 0), None);
        assert_eq!(
            quick_header(b"$1234567890\r\n", 0),
            Some((1_234_567_890, 12))
        );
        assert_eq!(quick_header(b"x$0\r\n", 1), Some((0, 4)));
    }

    #[test]
    fn inline_lines_unquoted_in_place_split_as_redis_splits_them() {
        // Lines drawn from the characters that matter to the quoting rules.
        let alphabet = b" \t\x0b\x0c\"'\\xa4Fnrtb1";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200_000 {
            let len = (next() % 12) as usize;
            let line: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let mut inplace = line.clone();
            let mut spans = Vec::new();
            let got = split_args(&mut inplace, &mut spans)
                .map(|()| spans.iter().map(|&(a, b)| inplace[a..b].to_vec()).collect());
            assert_eq!(
                got,
                split_reference(&line),
                "{:?}",
                line.escape_ascii().to_string()
            );
        }
    }
}
