//! `SET`, parsed once into what it means: a Redlock acquisition (`NX` with an expiry) or a
//! plain write. The decision is made here, in one place; the acquisition runs in
//! [`super::lock`], the write under the majority rule in [`super::keys`], each handed what it
//! needs and nothing more, so the request reads on downwards from here. The options are read
//! from the request as decoded; an acquisition keeps only its key and token.

use std::sync::Arc;

use bytes::Bytes;

use super::action::Action;
use super::keys::{Cond, SetOptions, digest_arg};
use super::lease::Leased;
use super::session::Conn;
use super::spec::Cmd;
use crate::error::Error;
use crate::proxy::Proxy;
use crate::wire::reply::Reply;
use crate::wire::request::Args;
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
pub fn parse_set(args: &Args<'_>) -> Result<SetOptions, Reply> {
    let mut o = SetOptions::default();
    // The expiry that counts: its word, and where its number is (KEEPTTL has none).
    let mut expiry: Option<(Word, usize)> = None;
    // The condition: its word, and where its argument is.
    let mut cond: Option<(Word, usize)> = None;
    let mut i = 3;
    while i < args.len() {
        let word = Word::of(&args[i]);
        let other_expiry = |w: Word| expiry.is_some_and(|(seen, _)| seen != w);
        match word {
            Some(Word::Nx) if !o.xx && cond.is_none() => o.nx = true,
            Some(Word::Xx) if !o.nx && cond.is_none() => o.xx = true,
            Some(w @ (Word::IfEq | Word::IfNe | Word::IfDeq | Word::IfDne))
                if !o.nx && !o.xx && cond.is_none() && i + 1 < args.len() =>
            {
                cond = Some((w, i + 1));
                i += 1;
            }
            Some(Word::Get) => o.get = true,
            Some(Word::KeepTtl) if !other_expiry(Word::KeepTtl) => {
                expiry = Some((Word::KeepTtl, i));
            }
            Some(unit @ (Word::Ex | Word::Px | Word::ExAt | Word::PxAt))
                if !other_expiry(unit) && i + 1 < args.len() =>
            {
                expiry = Some((unit, i + 1));
                i += 1;
            }
            _ => return Err(Reply::from(Error::Syntax)),
        }
        i += 1;
    }
    if let Some((word, at)) = cond {
        let digest = || digest_arg(&args[at]).ok_or_else(|| Reply::from(Error::BadDigest));
        o.cond = Some(match word {
            Word::IfEq => Cond::Eq(args.bytes(at)),
            Word::IfNe => Cond::Ne(args.bytes(at)),
            Word::IfDeq => Cond::DigestEq(digest()?),
            _ => Cond::DigestNe(digest()?),
        });
    }
    match expiry {
        None => {}
        Some((Word::KeepTtl, _)) => o.keep_ttl = true,
        Some((unit, at)) => {
            let invalid = || Reply::from(Error::InvalidExpire("set"));
            let n = parse_int(&args[at]).ok_or_else(|| Reply::from(Error::NotAnInteger))?;
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
    /// its own (see [`super::conditional`]).
    Conditional {
        /// The command as the client sent it (its key and value are `args[1]`, `args[2]`).
        args: Vec<Bytes>,
        /// Its parsed options, the condition among them.
        opts: SetOptions,
    },
    /// Any `SET` without `NX`: a write under the majority rule.
    Write {
        /// The command as the client sent it.
        args: Vec<Bytes>,
        /// Its parsed options.
        opts: SetOptions,
    },
}

impl Set {
    /// Parses a `SET` command; `default_ttl_ms` (0 = none) stands in for a missing expiry of the
    /// lock form. The error is the reply: Redis's wording for syntax, the proxy's for `NX`
    /// forms it does not serve as locks.
    pub fn parse(args: Args<'_>, default_ttl_ms: u64) -> Result<Set, Reply> {
        if let Some(lock) = Set::parse_lock(&args) {
            return Ok(lock);
        }
        Set::parse_general(args, default_ttl_ms)
    }

    /// The shape nearly every lock request has, `SET key token NX PX ms` or `... NX EX s` (in
    /// any case), read in one pass over fixed positions; `None` for anything else, including
    /// every error, which [`Set::parse_general`] then words. Where it answers, it answers as
    /// the general parser would (a test compares the two).
    fn parse_lock(args: &Args<'_>) -> Option<Set> {
        let ttl_ms = Set::lock_ttl(args)?;
        Some(Set::Acquire {
            key: args.bytes(1),
            token: args.bytes(2),
            ttl_ms,
        })
    }

    /// The TTL of a request of [`Set::parse_lock`]'s shape (its key and token are `args[1]`
    /// and `args[2]`); `None` where that answers `None`.
    #[inline]
    fn lock_ttl(args: &Args<'_>) -> Option<i64> {
        if args.len() != 6 || Word::of(&args[3]) != Some(Word::Nx) {
            return None;
        }
        let n = positive(&args[5])?;
        let ttl_ms = match Word::of(&args[4])? {
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
    fn parse_general(args: Args<'_>, default_ttl_ms: u64) -> Result<Set, Reply> {
        let opts = parse_set(&args)?;
        if opts.cond.is_some() {
            let args = args.into_vec();
            return Ok(Set::Conditional { args, opts });
        }
        if !opts.nx {
            let args = args.into_vec();
            return Ok(Set::Write { args, opts });
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
        if args.len() < 3 {
            return Err(Reply::from(Error::WrongArity("set")));
        }
        if ttl_ms <= 0 {
            return Ok(Set::BornExpired {
                key: args.bytes(1),
                token: args.bytes(2),
                ttl_ms,
            });
        }
        Ok(Set::Acquire {
            key: args.bytes(1),
            token: args.bytes(2),
            ttl_ms,
        })
    }
}

/// The largest TTL the fast path reads: far beyond any `max_ttl_ms`, and so far from
/// `i64::MAX` that adding the clock cannot overflow.
const FAST_TTL_MAX: i64 = 1 << 60;

/// The usual TTL argument, read without overflow checks: 1 to 18 digits without a leading
/// zero (so below 10^18, within `i64`), which [`parse_int`] reads as the same positive number.
/// `None` for anything else (a sign, a zero, a longer number, junk), which
/// [`Set::parse_general`] then reads or refuses.
fn positive(arg: &[u8]) -> Option<i64> {
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
pub fn set(proxy: &Arc<Proxy>, conn: &mut Conn, args: Args<'_>) -> Action {
    match Set::parse(args, proxy.config().default_ttl_ms) {
        Err(e) => e.into(),
        Ok(Set::BornExpired { key, token, ttl_ms }) => {
            if proxy.config().set_nx_reentrant {
                // The unsafe opt-in answers as its acquisitions do: nil, never granted.
                super::lock::acquire(proxy, key, token, ttl_ms)
            } else {
                born_expired(proxy, key)
            }
        }
        Ok(Set::Acquire { key, token, ttl_ms }) => {
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
        Ok(Set::Write { args, opts }) => super::keys::write(proxy, args, opts),
        Ok(Set::Conditional { args, opts }) => super::conditional::set(proxy, conn, args, opts),
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
    let rule = |proxy: &Proxy, b: &crate::quorum::Ballots| {
        if b.agree(|r| *r == Reply::Integer(0)) {
            Reply::ok()
        } else {
            crate::counters::Counters::bump(&proxy.counters().denials);
            Reply::Nil
        }
    };
    super::keys::forward(proxy, request, &[key], Box::new(rule))
}

/// `SETEX key seconds value`, `PSETEX key milliseconds value`: a plain write with an expiry,
/// run as `SET key value EX|PX ttl` (Redis's own definition), with Redis's errors.
pub fn setex(proxy: &Arc<Proxy>, conn: &mut Conn, args: Vec<Bytes>, cmd: Cmd) -> Action {
    let name = cmd.spec().name;
    let Some(n) = parse_int(&args[2]) else {
        return Reply::from(Error::NotAnInteger).into();
    };
    let (word, unit): (Word, &'static [u8]) = if cmd == Cmd::Psetex {
        (Word::Px, b"PX")
    } else {
        (Word::Ex, b"EX")
    };
    // Checked here, not by `SET`, whose error would name `set`.
    if n <= 0 || expiry_ms(word, n, super::spec::unix_ms()).is_none() {
        return Reply::from(Error::InvalidExpire(name)).into();
    }
    let set = vec![
        Bytes::from_static(b"SET"),
        args[1].clone(),
        args[3].clone(),
        Bytes::from_static(unit),
        args[2].clone(),
    ];
    self::set(proxy, conn, set.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args<'static> {
        s.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect::<Vec<_>>()
            .into()
    }

    #[test]
    fn set_options_in_any_order_and_case() {
        let o = parse_set(&args("SET k v px 100 nx")).unwrap();
        assert!(o.nx);
        assert_eq!(o.ttl_ms, Some(100));
        let o = parse_set(&args("set k v Nx eX 8")).unwrap();
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
        assert_eq!(
            parse_set(&args("SET k v NX XX")),
            Err(Reply::from(Error::Syntax))
        );
        assert_eq!(
            parse_set(&args("SET k v PX 1 EX 1")),
            Err(Reply::from(Error::Syntax))
        );
        assert_eq!(
            parse_set(&args("SET k v PX")),
            Err(Reply::from(Error::Syntax))
        );
        assert_eq!(
            parse_set(&args("SET k v PX abc")),
            Err(Reply::from(Error::NotAnInteger))
        );
        // Options are all checked before the expiry's number is read.
        assert_eq!(
            parse_set(&args("SET k v PX abc EX 1")),
            Err(Reply::from(Error::Syntax))
        );
        assert_eq!(
            parse_set(&args("SET k v KEEPTTL PX 1")),
            Err(Reply::from(Error::Syntax))
        );
        // A repeated option is no error: the last expiry counts, and only its number is read.
        let o = parse_set(&args("SET k v NX NX PX abc PX 7000")).unwrap();
        assert!(o.nx);
        assert_eq!(o.ttl_ms, Some(7000));
        assert!(
            parse_set(&args("SET k v KEEPTTL KEEPTTL"))
                .unwrap()
                .keep_ttl
        );
        assert_eq!(
            parse_set(&args("SET k v PX 0")),
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
                Set::parse(args(text), 0).err(),
                Some(Reply::from(Error::InvalidExpire("set"))),
                "{text}"
            );
        }
        assert_eq!(
            parse_set(&args("SET k v PX -9223372036854775809")),
            Err(Reply::from(Error::NotAnInteger))
        );
        // An absolute expiry far ahead is a time (the proxy's max_ttl_ms then refuses it).
        assert!(parse_set(&args("SET k v PXAT 9223372036854775807")).is_ok());
        assert!(parse_set(&args("SET k v EXAT 9223372036854775")).is_ok());
    }

    #[test]
    fn conditions_parse_as_valkey_and_redis_8_4_do() {
        let cond = |t: &str| parse_set(&args(t)).map(|o| o.cond);
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
            Set::parse(args("SET k v IFEQ a PX 100"), 0),
            Ok(Set::Conditional { .. })
        ));
    }

    #[test]
    fn absolute_expiry_becomes_relative() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let o = parse_set(&args(&format!("SET k v NX PXAT {}", now + 5000))).unwrap();
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
            Ok(Set::Write { args, mut opts }) => {
                let ttl = opts.ttl_ms.take();
                (Ok(Set::Write { args, opts }), ttl)
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
                    let fast = Set::parse_lock(&shaped());
                    for default_ttl in [0, 5000] {
                        let general = Set::parse_general(shaped(), default_ttl);
                        if let Some(fast) = &fast {
                            assert_eq!(Ok(fast), general.as_ref(), "{nx} {unit} {n:?}");
                            compared += 1;
                        }
                        let before = super::super::spec::unix_ms();
                        let parsed = Set::parse(shaped(), default_ttl);
                        let general = Set::parse_general(shaped(), default_ttl);
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
            assert_eq!(Set::parse_lock(&args(text)), None, "{text}");
        }
    }

    #[test]
    fn the_lock_form_and_a_write_are_told_apart_once() {
        assert_eq!(
            Set::parse(args("set k t nx px 100"), 0),
            Ok(Set::Acquire {
                key: Bytes::from_static(b"k"),
                token: Bytes::from_static(b"t"),
                ttl_ms: 100
            })
        );
        assert!(matches!(
            Set::parse(args("SET k t NX"), 0),
            Err(Reply::Error(_))
        ));
        assert!(matches!(
            Set::parse(args("SET k t NX"), 5000),
            Ok(Set::Acquire { ttl_ms: 5000, .. })
        ));
        assert!(matches!(
            Set::parse(args("SET k t NX PX 100 GET"), 0),
            Err(Reply::Error(_))
        ));
        assert!(matches!(
            Set::parse(args("SET k t XX PX 100"), 0),
            Ok(Set::Write {
                opts: SetOptions { xx: true, .. },
                ..
            })
        ));
    }
}
