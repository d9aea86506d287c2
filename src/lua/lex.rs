//! A linear-time Lua 5.1 lexer: every byte is looked at a bounded number of times, so a
//! hostile script costs time in proportion to its length.

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A name or keyword.
    Name(String),
    /// A string literal, escapes resolved.
    Str(Vec<u8>),
    /// A numeric literal.
    Num(f64),
    /// An operator or punctuation.
    Sym(&'static str),
}

const SYMS: &[&str] = &[
    "...", "==", "~=", "<=", ">=", "..", "::", "+", "-", "*", "/", "%", "^", "#", "<", ">", "=",
    "(", ")", "{", "}", "[", "]", ";", ":", ",", ".",
];

/// `[[`, `[=[`, ...: the level and the index just after the opening bracket.
fn long_open(src: &[u8], i: usize) -> Option<(usize, usize)> {
    if src.get(i) != Some(&b'[') {
        return None;
    }
    let mut j = i + 1;
    while src.get(j) == Some(&b'=') {
        j += 1;
    }
    (src.get(j) == Some(&b'[')).then_some((j - i - 1, j + 1))
}

/// Content of a long bracket opened at `start` and the index after it closes; one pass.
fn long_body(src: &[u8], start: usize, level: usize) -> Result<(&[u8], usize), String> {
    let mut i = start;
    while i < src.len() {
        if src[i] == b']' {
            let mut j = i + 1;
            while j < src.len() && src[j] == b'=' {
                j += 1;
            }
            if j - i - 1 == level && src.get(j) == Some(&b']') {
                return Ok((&src[start..i], j + 1));
            }
            // `]==` of the wrong level: the `=`s cannot start a closing bracket.
            i = j;
        } else {
            i += 1;
        }
    }
    Err("unfinished long string or comment".into())
}

/// A string quoted by `c` that opens at `src[i]`: its bytes, escapes applied, and the index
/// just past its closing quote.
fn quoted(src: &[u8], mut i: usize, c: u8) -> Result<(Vec<u8>, usize), String> {
    let mut s = Vec::new();
    i += 1;
    loop {
        let Some(&d) = src.get(i) else {
            return Err("unfinished string".into());
        };
        if d == c {
            i += 1;
            break;
        }
        if d == b'\n' {
            return Err("unfinished string".into());
        }
        if d != b'\\' {
            s.push(d);
            i += 1;
            continue;
        }
        let Some(&e) = src.get(i + 1) else {
            return Err("unfinished string".into());
        };
        i += 2;
        match e {
            b'n' => s.push(b'\n'),
            b't' => s.push(b'\t'),
            b'r' => s.push(b'\r'),
            b'a' => s.push(7),
            b'b' => s.push(8),
            b'f' => s.push(12),
            b'v' => s.push(11),
            b'\n' => s.push(b'\n'),
            b'0'..=b'9' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match src.get(i) {
                        Some(&d) if d.is_ascii_digit() => {
                            v = v * 10 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                s.push(u8::try_from(v).map_err(|_| "escape too large")?);
            }
            e => s.push(e),
        }
    }
    Ok((s, i))
}

/// Splits `src` into tokens.
pub fn lex(src: &[u8]) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    'outer: while i < src.len() {
        let c = src[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if src[i..].starts_with(b"--") {
            i += 2;
            if let Some((level, start)) = long_open(src, i) {
                i = long_body(src, start, level)?.1;
            } else {
                while i < src.len() && src[i] != b'\n' {
                    i += 1;
                }
            }
            continue;
        }
        if c == b'"' || c == b'\'' {
            let (s, end) = quoted(src, i, c)?;
            out.push(Tok::Str(s));
            i = end;
            continue;
        }
        if let Some((level, start)) = long_open(src, i) {
            let (body, end) = long_body(src, start, level)?;
            // Lua drops a newline right after the opening bracket.
            let body = body.strip_prefix(b"\r\n").unwrap_or(body);
            let body = body.strip_prefix(b"\n").unwrap_or(body);
            out.push(Tok::Str(body.to_vec()));
            i = end;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < src.len() && (src[i].is_ascii_alphanumeric() || src[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(
                String::from_utf8_lossy(&src[start..i]).into_owned(),
            ));
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && src.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let start = i;
            i += 1;
            while i < src.len() {
                let d = src[i];
                let sign = (d == b'+' || d == b'-') && matches!(src[i - 1], b'e' | b'E');
                if d.is_ascii_alphanumeric() || d == b'.' || sign {
                    i += 1;
                } else {
                    break;
                }
            }
            let text = String::from_utf8_lossy(&src[start..i]).to_ascii_lowercase();
            let n = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).map(|v| v as f64).ok(),
                None => text.parse::<f64>().ok(),
            };
            out.push(Tok::Num(n.ok_or("malformed number")?));
            continue;
        }
        for op in SYMS {
            if src[i..].starts_with(op.as_bytes()) {
                out.push(Tok::Sym(op));
                i += op.len();
                continue 'outer;
            }
        }
        return Err(format!("unexpected symbol near byte {i}"));
    }
    Ok(out)
}

/// Texts cut off inside a string, a long bracket, a comment or a byte sequence: refused
/// without a panic (by the lexer, and so by every reader of a script).
#[cfg(test)]
pub(crate) const UNTERMINATED: [&[u8]; 4] = [b"\"unterminated", b"[[", b"--[==[", b"\xff\xfe((("];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert_eq!(
            lex(b"if x~=[==[a]]]==] -- c\n then return 'a\\65' end").unwrap(),
            vec![
                Tok::Name("if".into()),
                Tok::Name("x".into()),
                Tok::Sym("~="),
                Tok::Str(b"a]]".to_vec()),
                Tok::Name("then".into()),
                Tok::Name("return".into()),
                Tok::Str(b"aA".to_vec()),
                Tok::Name("end".into()),
            ]
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for junk in UNTERMINATED.into_iter().chain([&b"'\\"[..], b"0x"]) {
            assert!(lex(junk).is_err(), "{junk:?}");
        }
    }
}
