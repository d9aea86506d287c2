//! The one way a command reads its arguments: a [`Cursor`] over the request's [`Args`], from
//! the first argument after the command's name to the last. Each command's parser (next to
//! its handler) reads what it needs through it, once, and hands its handler a typed value; no
//! handler reads an argument by position.
//!
//! The cursor words its errors as Redis does: a missing argument is the command's
//! wrong-arity error, a number that is not one is `value is not an integer or out of range`
//! (read by [`resp::parse_int`], the crate's one integer reader), and an argument left over
//! is a `syntax error`.

use bytes::Bytes;

use super::spec::Cmd;
use crate::error::Error;
use crate::wire::request::Args;
use crate::wire::resp;

/// Reads a request's arguments in order, after the command's name.
#[derive(Clone)]
pub struct Cursor<'c> {
    args: &'c Args<'c>,
    /// The index of the next argument.
    at: usize,
    /// The command (its name is the arity error's, looked up only for an error).
    cmd: Cmd,
}

impl<'c> Cursor<'c> {
    /// A cursor at the first argument of `cmd`'s request `args` (after its name).
    #[inline]
    pub fn new(args: &'c Args<'c>, cmd: Cmd) -> Cursor<'c> {
        Cursor { args, at: 1, cmd }
    }

    /// The command's name as the client spelt it.
    pub fn name(&self) -> &'c [u8] {
        self.args.get(0).unwrap_or_default()
    }

    /// The command's name as the client spelt it, kept.
    pub fn name_bytes(&self) -> Bytes {
        self.args.bytes(0)
    }

    /// How many arguments are left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.args.len().saturating_sub(self.at)
    }

    /// True when every argument has been read.
    #[inline]
    pub fn at_end(&self) -> bool {
        self.remaining() == 0
    }

    /// The next argument, not read yet.
    #[inline]
    pub fn peek(&self) -> Option<&'c [u8]> {
        self.args.get(self.at)
    }

    /// The next argument, if there is one.
    #[inline]
    pub fn try_next(&mut self) -> Option<&'c [u8]> {
        let arg = self.args.get(self.at)?;
        self.at += 1;
        Some(arg)
    }

    /// Passes over the next `n` arguments (at most those left).
    #[inline]
    pub fn skip(&mut self, n: usize) {
        self.at = (self.at + n).min(self.args.len().max(self.at));
    }

    /// The next `N` arguments, when exactly `N` are left (read at once, for a command's usual
    /// shape).
    #[inline]
    pub fn exactly<const N: usize>(&mut self) -> Option<[&'c [u8]; N]> {
        if self.remaining() != N {
            return None;
        }
        let (args, at) = (self.args, self.at);
        self.at += N;
        Some(std::array::from_fn(|i| &args[at + i]))
    }

    /// The next argument kept, if there is one.
    #[inline]
    pub fn try_next_bytes(&mut self) -> Option<Bytes> {
        let arg = self.args.bytes_at(self.at)?;
        self.at += 1;
        Some(arg)
    }

    /// The next argument; the command's wrong-arity error when there is none.
    #[inline]
    pub fn next_arg(&mut self) -> Result<&'c [u8], Error> {
        self.try_next().ok_or_else(|| self.arity())
    }

    /// The next argument, kept (a slice of the request, not a copy).
    #[inline]
    pub fn next_bytes(&mut self) -> Result<Bytes, Error> {
        self.try_next_bytes().ok_or_else(|| self.arity())
    }

    /// The command's wrong-arity error.
    #[cold]
    fn arity(&self) -> Error {
        Error::WrongArity(self.cmd.spec().name)
    }

    /// The next argument as an integer (Redis's rules, see [`resp::parse_int`]); `value is
    /// not an integer or out of range` when it is none.
    pub fn next_int(&mut self) -> Result<i64, Error> {
        self.next_int_or(Error::NotAnInteger)
    }

    /// [`Cursor::next_int`], with the command's own error for an argument that is no integer.
    pub fn next_int_or(&mut self, bad: Error) -> Result<i64, Error> {
        resp::parse_int(self.next_arg()?).ok_or(bad)
    }

    /// The next argument as one of `words` (any case, no copy), with what it stands for.
    pub fn next_word<K: Copy>(&mut self, words: &[(&[u8], K)]) -> Result<Option<K>, Error> {
        Ok(word(self.next_arg()?, words))
    }

    /// Every argument left, in order.
    pub fn rest(&mut self) -> impl ExactSizeIterator<Item = &'c [u8]> + 'c {
        let args = self.args;
        let from = self.at.min(args.len());
        self.at = args.len();
        (from..args.len()).map(move |i| &args[i])
    }

    /// Every argument left, kept.
    pub fn rest_bytes(&mut self) -> Vec<Bytes> {
        let from = self.at.min(self.args.len());
        self.at = self.args.len();
        (from..self.args.len())
            .map(|i| self.args.bytes(i))
            .collect()
    }

    /// Every argument, the command's name first, wherever the cursor is (for a command sent on
    /// as it came).
    pub fn whole(&self) -> impl ExactSizeIterator<Item = &'c [u8]> + 'c {
        let args = self.args;
        (0..args.len()).map(move |i| &args[i])
    }

    /// Nothing may be left: Redis's `syntax error` otherwise.
    pub fn finish(&self) -> Result<(), Error> {
        if self.at_end() {
            Ok(())
        } else {
            Err(Error::Syntax)
        }
    }

    /// Nothing may be left: the command's wrong-arity error otherwise (Redis's answer where a
    /// subcommand's arity is exceeded).
    pub fn finish_arity(&self, name: &'static str) -> Result<(), Error> {
        if self.at_end() {
            Ok(())
        } else {
            Err(Error::WrongArity(name))
        }
    }
}

/// What `arg` stands for among `words` (compared without case and without a copy).
pub fn word<K: Copy>(arg: &[u8], words: &[(&[u8], K)]) -> Option<K> {
    words
        .iter()
        .find(|(w, _)| arg.eq_ignore_ascii_case(w))
        .map(|&(_, k)| k)
}

/// A request of the words of `text` (split at each space), for tests.
#[cfg(test)]
pub(crate) fn words(text: &str) -> Args<'static> {
    text.split(' ')
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect::<Vec<_>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::words as args;

    #[test]
    fn reads_in_order_with_redis_errors() {
        let a = args("WAIT 1 x k");
        let mut c = Cursor::new(&a, Cmd::Wait);
        assert_eq!(c.name(), b"WAIT");
        assert_eq!(c.remaining(), 3);
        assert_eq!(c.next_int(), Ok(1));
        assert_eq!(c.peek(), Some(&b"x"[..]));
        assert_eq!(c.next_int(), Err(Error::NotAnInteger));
        assert_eq!(c.finish(), Err(Error::Syntax));
        assert_eq!(c.next_bytes(), Ok(Bytes::from_static(b"k")));
        assert!(c.at_end());
        assert_eq!(c.finish(), Ok(()));
        assert_eq!(c.next_arg(), Err(Error::WrongArity("wait")));
        assert_eq!(c.next_bytes(), Err(Error::WrongArity("wait")));
        assert_eq!(c.try_next(), None);
        assert_eq!(c.rest().count(), 0);
        let mut c = Cursor::new(&a, Cmd::Wait);
        assert_eq!(c.clone().exactly::<2>(), None);
        let mut skipped = c.clone();
        skipped.skip(2);
        assert_eq!(skipped.exactly::<1>(), Some([&b"k"[..]]));
        skipped.skip(5);
        assert!(skipped.at_end());
        assert_eq!(c.exactly::<3>(), Some([&b"1"[..], b"x", b"k"]));
        assert!(c.at_end());
    }

    #[test]
    fn integers_by_the_one_parser() {
        let a = args("SELECT 010 -0 +1 9223372036854775808 -9223372036854775808");
        let mut c = Cursor::new(&a, Cmd::Select);
        for _ in 0..4 {
            assert_eq!(c.next_int(), Err(Error::NotAnInteger));
        }
        assert_eq!(c.next_int_or(Error::Syntax), Ok(i64::MIN));
    }

    #[test]
    fn words_without_case_and_the_rest() {
        const ON: &[(&[u8], bool)] = &[(b"ON", true), (b"OFF", false)];
        let a = args("CLIENT oFf maybe a b");
        let mut c = Cursor::new(&a, Cmd::Client);
        assert_eq!(c.next_word(ON), Ok(Some(false)));
        assert_eq!(c.next_word(ON), Ok(None));
        assert_eq!(c.whole().len(), 5);
        assert_eq!(c.name_bytes(), Bytes::from_static(b"CLIENT"));
        assert_eq!(c.rest().collect::<Vec<_>>(), [&b"a"[..], b"b"]);
        assert!(c.at_end());
        assert_eq!(word(b"on", ON), Some(true));
        assert_eq!(word(b"o", ON), None);
    }
}
