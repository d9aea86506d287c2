//! Request decoding: RESP multibulk arrays and inline commands, as Redis accepts them.
//!
//! Clients send commands either as an array of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or
//! as an inline line (`GET k\r\n`, what telnet sends). Other RESP types are not commands, so this
//! decoder accepts only those two shapes, which also makes deep nesting impossible. Every length
//! is checked against [`Limits`] before anything is buffered for it, and a violation is reported
//! with Redis's own wording; the connection is then closed, as Redis does.
//!
//! Decoded arguments are zero-copy slices of the read buffer.

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

/// Size limits on a single request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted bulk string, in bytes.
    pub max_bulk_len: usize,
    /// Largest accepted number of arguments.
    pub max_args: usize,
    /// Largest accepted inline command line, in bytes.
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 4 * 1024 * 1024,
            max_args: 64 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// A malformed request. The text is what Redis says; the connection closes after it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtocolError {
    /// The `*<count>` header is not a number or is too large.
    #[error("ERR Protocol error: invalid multibulk length")]
    MultibulkLength,
    /// A `$<len>` header is not a number or is too large.
    #[error("ERR Protocol error: invalid bulk length")]
    BulkLength,
    /// An array element is not a bulk string.
    #[error("ERR Protocol error: expected '$', got '{0}'")]
    ExpectedBulk(char),
    /// A header line did not end in time.
    #[error("ERR Protocol error: too big mbulk count string")]
    HeaderTooLong,
    /// An inline command line did not end in time.
    #[error("ERR Protocol error: too big inline request")]
    InlineTooLong,
    /// An inline command has an unterminated quote.
    #[error("ERR Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
}

/// Decodes the next complete request from `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, consuming nothing. Empty requests (a blank
/// inline line, `*0`) are consumed and skipped, as Redis does.
pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    loop {
        if buf.is_empty() {
            return Ok(None);
        }
        let parsed = if buf[0] == b'*' {
            decode_multibulk(buf, limits)?
        } else {
            decode_inline(buf, limits)?
        };
        match parsed {
            None => return Ok(None),
            Some(args) if args.is_empty() => continue,
            Some(args) => return Ok(Some(args)),
        }
    }
}

/// Finds the end of the `\r\n`-terminated line starting at `from`; returns the index of `\r`.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let nl = memchr::memchr(b'\n', &buf[from..])? + from;
    // Redis requires CRLF in multibulk headers; a bare LF leaves the CR check to the caller.
    Some(if nl > from && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    })
}

fn parse_len(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let (neg, digits) = match digits[0] {
        b'-' => (true, &digits[1..]),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -n } else { n })
}

fn decode_multibulk(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(end) = line_end(buf, 1) else {
        return if buf.len() > limits.max_inline_len {
            Err(ProtocolError::HeaderTooLong)
        } else {
            Ok(None)
        };
    };
    let count = parse_len(&buf[1..end]).ok_or(ProtocolError::MultibulkLength)?;
    if count > limits.max_args as i64 {
        return Err(ProtocolError::MultibulkLength);
    }
    let mut pos = skip_eol(buf, end);
    if count <= 0 {
        buf.advance(pos);
        return Ok(Some(Vec::new()));
    }
    // First pass: validate headers and find where the request ends, without copying.
    let mut spans = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if pos >= buf.len() {
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return Err(ProtocolError::ExpectedBulk(buf[pos] as char));
        }
        let Some(end) = line_end(buf, pos + 1) else {
            return if buf.len() - pos > limits.max_inline_len {
                Err(ProtocolError::HeaderTooLong)
            } else {
                Ok(None)
            };
        };
        let len = parse_len(&buf[pos + 1..end]).ok_or(ProtocolError::BulkLength)?;
        if len < 0 || len > limits.max_bulk_len as i64 {
            return Err(ProtocolError::BulkLength);
        }
        let start = skip_eol(buf, end);
        let stop = start + len as usize;
        if buf.len() < stop + 2 {
            return Ok(None);
        }
        spans.push((start, stop));
        pos = stop + 2;
    }
    let frame = buf.split_to(pos).freeze();
    Ok(Some(
        spans.into_iter().map(|(a, b)| frame.slice(a..b)).collect(),
    ))
}

fn skip_eol(buf: &[u8], end: usize) -> usize {
    if buf[end] == b'\r' { end + 2 } else { end + 1 }
}

fn decode_inline(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        return if buf.len() > limits.max_inline_len {
            Err(ProtocolError::InlineTooLong)
        } else {
            Ok(None)
        };
    };
    let line = buf.split_to(nl + 1);
    let text = line.strip_suffix(b"\n").unwrap_or(&line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    split_args(text).map(Some)
}

/// Splits an inline command line into arguments, with Redis's quoting rules: double quotes
/// understand `\n`, `\r`, `\t`, `\b`, `\a`, `\\`, `\"` and `\xHH`; single quotes understand `\'`.
pub fn split_args(line: &[u8]) -> Result<Vec<Bytes>, ProtocolError> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Ok(args);
        }
        let mut arg = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(ProtocolError::UnbalancedQuotes),
                        Some(b'\\')
                            if line.get(i + 1) == Some(&b'x')
                                && hex_pair(line, i + 2).is_some() =>
                        {
                            arg.push(hex_pair(line, i + 2).unwrap_or_default());
                            i += 4;
                        }
                        Some(b'\\') if i + 1 < line.len() => {
                            arg.push(match line[i + 1] {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => 8,
                                b'a' => 7,
                                other => other,
                            });
                            i += 2;
                        }
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(&c) => {
                            arg.push(c);
                            i += 1;
                        }
                    }
                }
                ensure_separated(line, i)?;
            }
            b'\'' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(ProtocolError::UnbalancedQuotes),
                        Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                            arg.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(&c) => {
                            arg.push(c);
                            i += 1;
                        }
                    }
                }
                ensure_separated(line, i)?;
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    arg.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(Bytes::from(arg));
    }
}

/// A closing quote must be followed by whitespace or the end of the line.
fn ensure_separated(line: &[u8], i: usize) -> Result<(), ProtocolError> {
    match line.get(i) {
        Some(c) if !c.is_ascii_whitespace() => Err(ProtocolError::UnbalancedQuotes),
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
            Err(ProtocolError::MultibulkLength)
        );
        assert_eq!(
            parse(b"*1\r\n$999999999999\r\n"),
            Err(ProtocolError::BulkLength)
        );
        assert_eq!(parse(b"*1\r\n$-5\r\n"), Err(ProtocolError::BulkLength));
        assert_eq!(parse(b"*x\r\n"), Err(ProtocolError::MultibulkLength));
    }

    #[test]
    fn nesting_is_not_a_command() {
        assert_eq!(
            parse(b"*1\r\n*1\r\n$1\r\na\r\n"),
            Err(ProtocolError::ExpectedBulk('*'))
        );
    }

    #[test]
    fn endless_lines_are_refused() {
        let mut long = vec![b'a'; 70 * 1024];
        assert_eq!(parse(&long), Err(ProtocolError::InlineTooLong));
        long[0] = b'*';
        assert_eq!(parse(&long), Err(ProtocolError::HeaderTooLong));
    }

    #[test]
    fn inline_with_quotes() {
        assert_eq!(
            parse(b"SET k \"a b\\x41\\n\" 'it\\'s'\r\n"),
            Ok(args(&["SET", "k", "a bA\n", "it's"]))
        );
        assert_eq!(parse(b"SET \"k\r\n"), Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(
            parse(b"SET \"k\"x\r\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
    }

    #[test]
    fn empty_requests_are_skipped() {
        assert_eq!(parse(b"\r\n*0\r\nPING\n"), Ok(args(&["PING"])));
    }
}
