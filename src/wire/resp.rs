//! The two primitives every RESP reader here shares: finding the end of a line and reading a
//! decimal integer. Requests ([`super::request`]), master replies ([`super::master`]), `TIME`
//! readings and command arguments all use these, so they agree on what a number is.

/// How many bytes are looked at one by one before a line end is searched for with `memchr`:
/// RESP header lines (`*3`, `$5`, `:1`) are a few bytes long, shorter than `memchr`'s set-up.
const SHORT_LINE: usize = 16;

/// The index of the first `\n` at or after `from`, if any. The caller decides what a line
/// without its `\r` means (requests tolerate it, replies do not).
pub fn find_lf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    let head = rest.len().min(SHORT_LINE);
    if let Some(i) = rest[..head].iter().position(|&b| b == b'\n') {
        return Some(from + i);
    }
    memchr::memchr(b'\n', &rest[head..]).map(|i| from + head + i)
}

/// A decimal integer as Redis reads one (its `string2ll`): an optional `-` and 1 to 19 digits,
/// nothing else (no `+`, no spaces, no leading zero, no `-0`), within `i64`. `None` otherwise.
/// Command arguments follow the same rule.
pub fn parse_int(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || negative) {
        return None;
    }
    // Accumulated as a negative number, whose range reaches `i64::MIN` (as Redis's reads).
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative { Some(n) } else { n.checked_neg() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_ends_short_and_long() {
        assert_eq!(find_lf(b"$3\r\nSET\r\n", 0), Some(3));
        assert_eq!(find_lf(b"$3\r\nSET\r\n", 4), Some(8));
        assert_eq!(find_lf(b"$3\r", 0), None);
        assert_eq!(find_lf(b"ab", 5), None);
        let mut long = vec![b'x'; 100];
        long.push(b'\n');
        assert_eq!(find_lf(&long, 0), Some(100));
        assert_eq!(find_lf(&long, 90), Some(100));
        assert_eq!(find_lf(&long[..100], 0), None);
    }

    #[test]
    fn integers_strictly() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-1"), Some(-1));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775807"), Some(-i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in byte_strings![
            b"",
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"00000000000000000001",
            b"010",
            b"-0",
            b"-01",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
