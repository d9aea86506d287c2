//! `SET`, parsed once into what it means: a Redlock acquisition (`NX` with an expiry) or a
//! plain write. The decision is made here, in one place; the acquisition runs in
//! [`super::lock`], the write under the majority rule in [`super::keys`], each handed what it
//! needs and nothing more, so the request reads on downwards from here. The options are read
//! from the request as decoded; an acquisition keeps only its key and token.

use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::args::Cursor;
use super::keys::{Cond, SetOptions, SetWrite, digest_arg};
use super::lease::Leased;
use super::session::Conn;
use super::spec::Cmd;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::wire::reply::Reply;
use crate::wire::resp::parse_int;

/// A `SET` option word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Word {
    Nx,
    Xx,
    Get,
    KeepTtl,
    Ex,
    Px,
    ExAt,
    PxAt,
    IfEq,
    IfNe,
    IfDeq,
    IfDne,
}

impl Word {
    /// The option `arg` names, in any case. The two-letter words of every lock request are
    /// compared with bit 5 (`0x20`) cleared: that upper-cases a letter and turns no other byte
    /// into one, so it is a case-insensitive comparison without a copy.
    #[inline]
    fn of(arg: &[u8]) -> Option<Word> {
        if let &[a, b] = arg {
            return match [a & !0x20, b & !0x20] {
                [b'N', b'X'] => Some(Word::Nx),
                [b'P', b'X'] => Some(Word::Px),
                [b'E', b'X'] => Some(Word::Ex),
                [b'X', b'X'] => Some(Word::Xx),
                _ => None,
            };
        }
        Word::long(arg)
    }

    /// [`Word::of`] for the longer words, which lock requests do not use (kept out of line, so
    /// the two-letter comparison inlines).
    #[inline(never)]
    fn long(arg: &[u8]) -> Option<Word> {
        [
            (&b"GET"[..], Word::Get),
            (b"PXAT", Word::PxAt),
            (b"EXAT", Word::ExAt),
            (b"KEEPTTL", Word::KeepTtl),
            (b"IFEQ", Word::IfEq),
            (b"IFNE", Word::IfNe),
            (b"IFDEQ", Word::IfDeq),
            (b"IFDNE", Word::IfDne),
        ]
        .into_iter()
        .find(|(word, _)| arg.eq_ignore_ascii_case(word))
        .map(|(_, w)| w)
    }
}

/// Parses `SET key value [NX|XX|IFEQ v|IFNE v|IFDEQ d|IFDNE d] [GET] [EX s|PX ms|EXAT s|PXAT
/// ms|KEEPTTL]` in any order and case, as Redis does: an option may repeat (`PX 1 PX 2`: the last
/// one counts), two different expiries are a syntax error, and only the expiry that counts is
/// read as a number, after every option has been checked. The conditions of Redis 8.4 and
/// Valkey 8.1 exclude each other and `NX`/`XX`, a second one included (Valkey answers
/// `SET k v IFEQ a IFEQ b` with a syntax error); a digest must be 16 hexadecimal digits.
pub fn parse_set(c: &mut Cursor<'_>) -> Result<SetOptions, Reply> {
    let mut o = SetOptions::default();
    // The expiry that counts: its word, and its number (KEEPTTL has none).
    let mut expiry: Option<(Word, &[u8])> = None;
    // The condition: its word, and its argument.
    let mut cond: Option<(Word, Bytes)> = None;
    while let Some(arg) = c.try_next() {
        let word = Word::of(arg);
        let other_expiry = |w: Word| expiry.is_some_and(|(seen, _)| seen != w);
        match word {
            Some(Word::Nx) if !o.xx && cond.is_none() => o.nx = true,
            Some(Word::Xx) if !o.nx && cond.is_none() => o.xx = true,
            Some(w @ (Word::IfEq | Word::IfNe | Word::IfDeq | Word::IfDne))
                if !o.nx && !o.xx && cond.is_none() && !c.at_end() =>
            {
                cond = Some((w, c.next_bytes()?));
            }
            Some(Word::Get) => o.get = true,
            Some(Word::KeepTtl) if !other_expiry(Word::KeepTtl) => {
                expiry = Some((Word::KeepTtl, &[]));
            }
            Some(unit @ (Word::Ex | Word::Px | Word::ExAt | Word::PxAt))
                if !other_expiry(unit) && !c.at_end() =>
            {
                expiry = Some((unit, c.next_arg()?));
            }
            _ => return Err(Reply::from(Error::Syntax)),
        }
    }
    if let Some((word, arg)) = cond {
        let digest = || digest_arg(&arg).ok_or_else(|| Reply::from(Error::BadDigest));
        o.cond = Some(match word {
            Word::IfEq => Cond::Eq(arg),
            Word::IfNe => Cond::Ne(arg),
            Word::IfDeq => Cond::DigestEq(digest()?),
            _ => Cond::DigestNe(digest()?),
        });
    }
    match expiry {
        None => {}
        Some((Word::KeepTtl, _)) => o.keep_ttl = true,
        Some((unit, arg)) => {
            let invalid = || Reply::from(Error::InvalidExpire("set"));
            let n = parse_int(arg).ok_or_else(|| Reply::from(Error::NotAnInteger))?;
            if n <= 0 {
                return Err(invalid());
            }
            let ms = expiry_ms(unit, n, super::spec::unix_ms()).ok_or_else(invalid)?;
            o.ttl_ms = Some(ms);
        }
    }
    Ok(o)
}

/// The TTL in ms from `now` (unix ms) of a positive expiry `n` in `unit` (`EX`, `PX`, `EXAT`,
/// `PXAT`), or `None` where Redis answers `invalid expire time`: as Redis, a relative expiry
/// must still be a time once added to the clock, and seconds must fit in milliseconds.
fn expiry_ms(unit: Word, n: i64, now: i64) -> Option<i64> {
    match unit {
        Word::Ex => n
            .checked_mul(1000)
            .filter(|ms| ms.checked_add(now).is_some()),
        Word::Px => n.checked_add(now).map(|_| n),
        Word::ExAt => n.checked_mul(1000).map(|at| at - now),
        _ => Some(n - now),
    }
}

/// What a `SET` command means.
#[derive(Debug, PartialEq, Eq)]
pub enum Set {
    /// `SET key token NX PX|EX|PXAT|EXAT ttl` (or `NX` alone with `default_ttl_ms`): a Redlock
    /// acquisition of `key` for `token`.
    Acquire {
        /// The lock's key.
        key: Bytes,
        /// The holder's token.
        token: Bytes,
        /// The TTL in milliseconds (from now).
        ttl_ms: i64,
    },
    /// `SET key token NX EXAT|PXAT <past>`: no lock, the value would be born expired; answered
    /// as Redis answers it (see [`born_expired`]).
    BornExpired {
        /// The key.
        key: Bytes,
        /// The token.
        token: Bytes,
        /// The TTL in milliseconds (from now): 0 or less.
        ttl_ms: i64,
    },
    /// `SET key value IFEQ|IFNE|IFDEQ|IFDNE ...`: a conditional write, a quorum operation of
    /// its own (see [`super::conditional`]); its options hold the condition.
    /// (Boxed, as is [`Set::Write`]: a lock request's `Set` stays small on its way.)
    Conditional(Box<SetWrite>),
    /// Any `SET` without `NX` (and `SETEX`, `PSETEX`): a write under the majority rule.
    Write(Box<SetWrite>),
}

impl Set {
    /// Parses a `SET` command; `default_ttl_ms` (0 = none) stands in for a missing expiry of the
    /// lock form. The error is the reply: Redis's wording for syntax, the proxy's for `NX`
    /// forms it does not serve as locks.
    #[inline]
    pub fn parse(c: &mut Cursor<'_>, default_ttl_ms: u64) -> Result<Set, Reply> {
        if let Some(lock) = Set::parse_lock(c) {
            return Ok(lock);
        }
        Set::parse_general(c, default_ttl_ms)
    }

    /// The shape nearly every lock request has, `SET key token NX PX ms` or `... NX EX s` (in
    /// any case), read in one pass; `None` for anything else, including every error, which
    /// [`Set::parse_general`] then words (the cursor is moved only for an answer).
    /// Where it answers, it answers as the general parser would (a test compares the two).
    #[inline]
    fn parse_lock(c: &mut Cursor<'_>) -> Option<Set> {
        if c.remaining() != 5 {
            return None;
        }
        // The words after the key and the token first: the two are kept only for an answer.
        let mut words = c.clone();
        words.skip(2);
        let [nx, unit, n] = words.exactly::<3>()?;
        let ttl_ms = Set::lock_ttl(nx, unit, n)?;
        let (key, token) = (c.try_next_bytes()?, c.try_next_bytes()?);
        Some(Set::Acquire { key, token, ttl_ms })
    }

    /// The TTL of a request of [`Set::parse_lock`]'s shape, from its last three arguments;
    /// `None` where that answers `None`.
    #[inline]
    fn lock_ttl(nx: &[u8], unit: &[u8], n: &[u8]) -> Option<i64> {
        if Word::of(nx) != Some(Word::Nx) {
            return None;
        }
        let n = short_positive(n)?;
        let ttl_ms = match Word::of(unit)? {
            Word::Px => n,
            Word::Ex => n.checked_mul(1000)?,
            _ => return None,
        };
        // A positive `n` has a positive product, so this is the general parser's `n <= 0`;
        // a TTL that could overflow the clock (beyond 2^60 ms) is left to the general parser,
        // which words it as Redis does.
        if !(1..=FAST_TTL_MAX).contains(&ttl_ms) {
            return None;
        }
        Some(ttl_ms)
    }

    /// [`Set::parse`] for any shape: the options in any order, and Redis's errors.
    fn parse_general(c: &mut Cursor<'_>, default_ttl_ms: u64) -> Result<Set, Reply> {
        let name = c.name_bytes();
        let key = c.next_bytes()?;
        let value = c.next_bytes()?;
        let mut options = c.clone();
        let opts = parse_set(c)?;
        if opts.cond.is_some() || !opts.nx {
            let write = Box::new(SetWrite {
                name,
                key,
                value,
                options: options.rest_bytes(),
                opts,
            });
            return Ok(if write.opts.cond.is_some() {
                Set::Conditional(write)
            } else {
                Set::Write(write)
            });
        }
        if opts.get || opts.keep_ttl {
            return Err(Reply::from(Error::NxOnlyAsLock));
        }
        let ttl_ms = match opts.ttl_ms {
            Some(ttl) => ttl,
            None if default_ttl_ms > 0 => default_ttl_ms as i64,
            None => {
                return Err(Reply::from(Error::NxWithoutExpiry));
            }
        };
        let token = value;
        if ttl_ms <= 0 {
            return Ok(Set::BornExpired { key, token, ttl_ms });
        }
        Ok(Set::Acquire { key, token, ttl_ms })
    }

    /// Parses `SETEX key seconds value` or `PSETEX key milliseconds value` (`cmd`) into the
    /// `SET key value EX|PX ttl` it is (Redis's own definition), with Redis's errors, which
    /// name the command itself.
    pub fn parse_setex(c: &mut Cursor<'_>, cmd: Cmd) -> Result<Set, Reply> {
        let key = c.next_bytes()?;
        let ttl = c.next_bytes()?;
        let value = c.next_bytes()?;
        let n = parse_int(&ttl).ok_or(Error::NotAnInteger)?;
        let (word, unit): (Word, &'static [u8]) = if cmd == Cmd::Psetex {
            (Word::Px, b"PX")
        } else {
            (Word::Ex, b"EX")
        };
        let invalid = || Reply::from(Error::InvalidExpire(cmd.spec().name));
        if n <= 0 {
            return Err(invalid());
        }
        let ms = expiry_ms(word, n, super::spec::unix_ms()).ok_or_else(invalid)?;
        Ok(Set::Write(Box::new(expiring(key, value, unit, ttl, ms))))
    }
}

/// The largest TTL the fast path reads: far beyond any `max_ttl_ms`, and so far from
/// `i64::MAX` that adding the clock cannot overflow.
const FAST_TTL_MAX: i64 = 1 << 60;

/// The usual TTL argument, read without overflow checks: 1 to 18 digits without a leading
/// zero (so below 10^18, within `i64`), which [`parse_int`] reads as the same positive number
/// (a test compares the two). `None` for anything else (a sign, a zero, a longer number,
/// junk), which [`Set::parse_general`] then reads or refuses with [`parse_int`].
fn short_positive(arg: &[u8]) -> Option<i64> {
    if arg.is_empty() || arg.len() > 18 || arg[0] == b'0' {
        return None;
    }
    let mut n: i64 = 0;
    for &d in arg {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(d - b'0');
    }
    Some(n)
}

/// `SET`: a lock acquisition or a write.
#[inline]
pub fn set(proxy: &Arc<Proxy>, conn: &mut Conn, set: Set) -> Action {
    match set {
        Set::BornExpired { key, token, ttl_ms } => {
            if proxy.config().set_nx_reentrant {
                // The unsafe opt-in answers as its acquisitions do: nil, never granted.
                super::lock::acquire(proxy, key, token, ttl_ms)
            } else {
                born_expired(proxy, key)
            }
        }
        Set::Acquire { key, token, ttl_ms } => {
            match conn.leases_for(std::iter::once(key.as_ref())) {
                None => super::lock::acquire(proxy, key, token, ttl_ms),
                Some(leases) => {
                    let lock = Leased::Plain {
                        keys: vec![key.clone()],
                        token: token.clone(),
                        ttl_ms,
                    };
                    let acquired = super::lock::acquire(proxy, key, token, ttl_ms);
                    super::lease::on_grant(leases, proxy, acquired, lock, Reply::is_ok)
                }
            }
        }
        Set::Write(write) => super::keys::write(proxy, *write),
        Set::Conditional(write) => super::conditional::set(proxy, conn, *write),
    }
}

/// `SET key token NX EXAT|PXAT <past>`: one Redis answers `OK` where the key is missing (the
/// value is born expired, so nothing is left behind) and nil where it exists. The proxy writes
/// nothing: it asks each master whether the key exists, in the key's turn, and answers `OK`
/// only when a quorum of trusted masters say it does not. No other holder can then hold the key
/// on a quorum, so the `OK` never stands beside a grant; a master that is down, quarantined or
/// slow counts against it (nil, the safe side).
#[cold]
#[inline(never)]
fn born_expired(proxy: &Arc<Proxy>, key: Bytes) -> Action {
    let request = crate::wire::master::command(&[b"EXISTS", &key]);
    let rule = super::keys::Rule::Absent;
    super::keys::forward(proxy, crate::lockop::Verb::Query, request, vec![key], rule)
}

/// `SET key value EX|PX ttl` (`unit` is `EX` or `PX`, `ttl` the number as written), which
/// expires in `ms` ms.
pub(super) fn expiring(
    key: Bytes,
    value: Bytes,
    unit: &'static [u8],
    ttl: Bytes,
    ms: i64,
) -> SetWrite {
    SetWrite {
        name: Bytes::from_static(b"SET"),
        key,
        value,
        options: vec![Bytes::from_static(unit), ttl],
        opts: SetOptions {
            ttl_ms: Some(ms),
            ..SetOptions::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::request::Args;

    /// The options of `SET` request `a`, read after its key and value.
    fn options(a: &Args<'_>) -> Result<SetOptions, Reply> {
        let mut c = Cursor::new(a, Cmd::Set);
        c.next_arg().unwrap();
        c.next_arg().unwrap();
        parse_set(&mut c)
    }

    fn parse(a: &Args<'_>, default_ttl_ms: u64) -> Result<Set, Reply> {
        Set::parse(&mut Cursor::new(a, Cmd::Set), default_ttl_ms)
    }

    use crate::command::args::words as args;

    #[test]
    fn set_options_in_any_order_and_case() {
        let o = options(&args("SET k v px 100 nx")).unwrap();
        assert!(o.nx);
        assert_eq!(o.ttl_ms, Some(100));
        let o = options(&args("set k v Nx eX 8")).unwrap();
        assert_eq!(o.ttl_ms, Some(8000));
    }

    #[test]
    fn option_words_in_any_case_and_nothing_else() {
        for (text, word) in [
            ("nx", Word::Nx),
            ("Xx", Word::Xx),
            ("pX", Word::Px),
            ("EX", Word::Ex),
            ("get", Word::Get),
            ("KeepTTL", Word::KeepTtl),
            ("exat", Word::ExAt),
            ("PXAT", Word::PxAt),
            ("ifeq", Word::IfEq),
            ("IfNe", Word::IfNe),
            ("IFDEQ", Word::IfDeq),
            ("ifdne", Word::IfDne),
        ] {
            assert_eq!(Word::of(text.as_bytes()), Some(word), "{text}");
        }
        // Every other pair of bytes, case folded or not, is no option.
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let upper = [a.to_ascii_uppercase(), b.to_ascii_uppercase()];
                let expected = match &upper {
                    b"NX" => Some(Word::Nx),
                    b"XX" => Some(Word::Xx),
                    b"PX" => Some(Word::Px),
                    b"EX" => Some(Word::Ex),
                    _ => None,
                };
                assert_eq!(Word::of(&[a, b]), expected, "{a} {b}");
            }
        }
        for other in ["", "N", "NXX", "GETS", "KEEPTT", "nx ", "\u{ce}X"] {
            assert_eq!(Word::of(other.as_bytes()), None, "{other:?}");
        }
    }

    #[test]
    fn set_option_errors_match_redis() {
        let refused = |text: &str| options(&args(text)).err();
        assert_eq!(refused("SET k v NX XX"), Some(Error::Syntax.into()));
        assert_eq!(refused("SET k v PX 1 EX 1"), Some(Error::Syntax.into()));
        assert_eq!(refused("SET k v PX"), Some(Error::Syntax.into()));
        assert_eq!(refused("SET k v PX abc"), Some(Error::NotAnInteger.into()));
        // Options are all checked before the expiry's number is read.
        assert_eq!(refused("SET k v PX abc EX 1"), Some(Error::Syntax.into()));
        assert_eq!(refused("SET k v KEEPTTL PX 1"), Some(Error::Syntax.into()));
        // A repeated option is no error: the last expiry counts, and only its number is read.
        let o = options(&args("SET k v NX NX PX abc PX 7000")).unwrap();
        assert!(o.nx);
        assert_eq!(o.ttl_ms, Some(7000));
        assert!(options(&args("SET k v KEEPTTL KEEPTTL")).unwrap().keep_ttl);
        assert_eq!(
            options(&args("SET k v PX 0")),
            Err(Reply::static_error(
                "ERR invalid expire time in 'set' command"
            ))
        );
        // Numbers at the edges of i64, answered as Redis 7+ and Valkey answer them: a relative
        // expiry that overflows once the clock is added, seconds beyond i64 milliseconds, and
        // the smallest i64 (an integer, so an invalid expire time, not a non-integer).
        for text in [
            "SET k v PX 9223372036854775807",
            "SET k v EX 9223372036854775",
            "SET k v EX 9223372036854776",
            "SET k v NX PX 9223372036854775807",
            "SET k v NX EX 9223372036854775",
            "SET k v IFEQ v PX 9223372036854775807",
            "SET k v PX -9223372036854775808",
            "SET k v IFEQ v PX -9223372036854775808",
            "SET k v EXAT 9223372036854776",
        ] {
            assert_eq!(
                parse(&args(text), 0).err(),
                Some(Reply::from(Error::InvalidExpire("set"))),
                "{text}"
            );
        }
        assert_eq!(
            options(&args("SET k v PX -9223372036854775809")),
            Err(Reply::from(Error::NotAnInteger))
        );
        // An absolute expiry far ahead is a time (the proxy's max_ttl_ms then refuses it).
        assert!(options(&args("SET k v PXAT 9223372036854775807")).is_ok());
        assert!(options(&args("SET k v EXAT 9223372036854775")).is_ok());
    }

    #[test]
    fn conditions_parse_as_valkey_and_redis_8_4_do() {
        let cond = |t: &str| options(&args(t)).map(|o| o.cond);
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert_eq!(cond("SET k v ifeq a"), Ok(Some(Cond::Eq(b("a")))));
        assert_eq!(cond("SET k v IfNe a GET"), Ok(Some(Cond::Ne(b("a")))));
        assert_eq!(
            cond("SET k v IFDEQ B6ACB9D84A38FF74 PX 5"),
            Ok(Some(Cond::DigestEq(0xb6acb9d84a38ff74)))
        );
        assert_eq!(
            cond("SET k v px 5 ifdne 00006c38adf31777"),
            Ok(Some(Cond::DigestNe(0x6c38adf31777)))
        );
        // As Valkey 8.1 answers: with NX or XX, a second condition, or no argument, a syntax
        // error; an expiry may still repeat.
        for text in [
            "SET k v NX IFEQ a",
            "SET k v IFEQ a XX",
            "SET k v IFEQ a IFEQ b",
            "SET k v IFEQ a IFNE b",
            "SET k v IFEQ",
            "SET k v IFDEQ",
        ] {
            assert_eq!(cond(text), Err(Reply::from(Error::Syntax)), "{text}");
        }
        assert!(cond("SET k v IFEQ a PX 1 PX 2").is_ok());
        // Redis 8.4: a digest is exactly 16 hexadecimal digits.
        for text in ["SET k v IFDEQ abc", "SET k v IFDNE zz6acb9d84a38ff74"] {
            assert_eq!(cond(text), Err(Reply::from(Error::BadDigest)), "{text}");
        }
        assert!(matches!(
            parse(&args("SET k v IFEQ a PX 100"), 0),
            Ok(Set::Conditional(_))
        ));
    }

    #[test]
    fn absolute_expiry_becomes_relative() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let o = options(&args(&format!("SET k v NX PXAT {}", now + 5000))).unwrap();
        let ttl = o.ttl_ms.unwrap();
        assert!((4000..=5000).contains(&ttl), "{ttl}");
    }

    /// A parse with its TTL taken out (set to 0, or none), and the TTL.
    fn without_ttl(parsed: Result<Set, Reply>) -> (Result<Set, Reply>, Option<i64>) {
        match parsed {
            Ok(Set::Acquire { key, token, ttl_ms }) => (
                Ok(Set::Acquire {
                    key,
                    token,
                    ttl_ms: 0,
                }),
                Some(ttl_ms),
            ),
            Ok(Set::BornExpired { key, token, ttl_ms }) => (
                Ok(Set::BornExpired {
                    key,
                    token,
                    ttl_ms: 0,
                }),
                Some(ttl_ms),
            ),
            Ok(Set::Write(mut w)) => {
                let ttl = w.opts.ttl_ms.take();
                (Ok(Set::Write(w)), ttl)
            }
            other => (other, None),
        }
    }

    #[test]
    fn the_lock_shape_is_read_as_the_general_parser_reads_it() {
        let words = [
            "NX", "nx", "Nx", "nX", "XX", "PX", "px", "Px", "EX", "ex", "eX", "PXAT", "EXAT",
            "GET", "KEEPTTL", "N", "NXX", "",
        ];
        let numbers = [
            "1",
            "100",
            "30000",
            "0",
            "-1",
            "-30000",
            "007",
            "+5",
            " 5",
            "5 ",
            "1.5",
            "abc",
            "",
            "9223372036854775",
            "9223372036854776",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "99999999999999999999",
        ];
        let mut compared = 0;
        for nx in words {
            for unit in words {
                for n in numbers {
                    let shaped = || -> Args<'static> {
                        ["SET", "k", "tok", nx, unit, n]
                            .iter()
                            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                            .collect::<Vec<_>>()
                            .into()
                    };
                    let fast = Set::parse_lock(&mut Cursor::new(&shaped(), Cmd::Set));
                    for default_ttl in [0, 5000] {
                        let general =
                            Set::parse_general(&mut Cursor::new(&shaped(), Cmd::Set), default_ttl);
                        if let Some(fast) = &fast {
                            assert_eq!(Ok(fast), general.as_ref(), "{nx} {unit} {n:?}");
                            compared += 1;
                        }
                        let before = super::super::spec::unix_ms();
                        let parsed = parse(&shaped(), default_ttl);
                        let general =
                            Set::parse_general(&mut Cursor::new(&shaped(), Cmd::Set), default_ttl);
                        let moved = super::super::spec::unix_ms() - before;
                        // EXAT/PXAT are read against the clock, for a lock and for a plain
                        // write alike: the two parses may see it a millisecond or so apart,
                        // and nothing else may differ.
                        let (parsed, a) = without_ttl(parsed);
                        let (general, b) = without_ttl(general);
                        assert_eq!(parsed, general, "{nx} {unit} {n:?}");
                        match (a, b) {
                            (Some(a), Some(b))
                                if unit.eq_ignore_ascii_case("exat")
                                    || unit.eq_ignore_ascii_case("pxat") =>
                            {
                                assert!((a - b).abs() <= moved, "{nx} {unit} {n:?}");
                            }
                            _ => assert_eq!(a, b, "{nx} {unit} {n:?}"),
                        }
                    }
                }
            }
        }
        // The fast path did answer for the lock shapes (4 spellings of NX, 6 of PX/EX, and the
        // numbers that are positive and fit).
        assert!(compared > 100, "{compared}");
        // Other lengths are left to the general parser.
        for text in [
            "SET k t NX",
            "SET k t NX PX 100 GET",
            "SET k t PX 100 NX",
            "SET k t",
        ] {
            assert_eq!(
                Set::parse_lock(&mut Cursor::new(&args(text), Cmd::Set)),
                None,
                "{text}"
            );
        }
    }

    #[test]
    fn the_lock_form_and_a_write_are_told_apart_once() {
        assert_eq!(
            parse(&args("set k t nx px 100"), 0),
            Ok(Set::Acquire {
                key: Bytes::from_static(b"k"),
                token: Bytes::from_static(b"t"),
                ttl_ms: 100
            })
        );
        assert!(matches!(
            parse(&args("SET k t NX"), 0),
            Err(Reply::Error(_))
        ));
        assert!(matches!(
            parse(&args("SET k t NX"), 5000),
            Ok(Set::Acquire { ttl_ms: 5000, .. })
        ));
        assert!(matches!(
            parse(&args("SET k t NX PX 100 GET"), 0),
            Err(Reply::Error(_))
        ));
        assert!(matches!(
            parse(&args("SET k t XX PX 100"), 0),
            Ok(Set::Write(w)) if w.opts.xx
        ));
    }

    #[test]
    fn the_short_reading_agrees_with_the_one_integer_parser() {
        for text in [
            "1",
            "9",
            "10",
            "30000",
            "999999999999999999",
            "1000000000000000000",
            "0",
            "00",
            "01",
            "-1",
            "+1",
            "",
            " 1",
            "1 ",
            "1a",
            "\u{661}",
        ] {
            if let Some(n) = short_positive(text.as_bytes()) {
                assert_eq!(parse_int(text.as_bytes()), Some(n), "{text:?}");
                assert!(n > 0);
            } else {
                assert!(
                    text.len() > 18 || parse_int(text.as_bytes()).is_none_or(|n| n <= 0),
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn setex_is_the_set_it_stands_for_with_its_own_errors() {
        let setex = |text: &str, cmd| Set::parse_setex(&mut Cursor::new(&args(text), cmd), cmd);
        let Ok(Set::Write(w)) = setex("PSETEX k 1500 v", Cmd::Psetex) else {
            panic!("no write");
        };
        assert_eq!((&w.key[..], &w.value[..]), (&b"k"[..], &b"v"[..]));
        assert_eq!(
            w.options,
            [Bytes::from_static(b"PX"), Bytes::from_static(b"1500")]
        );
        assert_eq!(w.opts.ttl_ms, Some(1500));
        assert_eq!(&w.name[..], b"SET");
        assert_eq!(
            setex("SETEX k 0 v", Cmd::Setex).err(),
            Some(Reply::from(Error::InvalidExpire("setex")))
        );
        assert_eq!(
            setex("PSETEX k x v", Cmd::Psetex).err(),
            Some(Reply::from(Error::NotAnInteger))
        );
        assert_eq!(
            setex("SETEX k 9223372036854776 v", Cmd::Setex).err(),
            Some(Reply::from(Error::InvalidExpire("setex")))
        );
    }
}
