//! What the recognition tests share: the libraries' scripts as fixtures, and short ways to
//! ask what a script means.

use bytes::Bytes;

use super::*;
use crate::lockop::*;

/// The libraries' scripts, byte for byte (tests/clients/lua holds the exact texts).
macro_rules! lua {
    ($name:literal) => {
        include_bytes!(concat!("../../tests/clients/lua/", $name, ".lua")).as_slice()
    };
}

/// A call's arguments, as the proxy receives them.
pub(super) fn argv(a: &[&str]) -> Vec<Bytes> {
    a.iter()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect()
}

/// The lock script `body` is recognised as; a panic naming it when it is none.
pub(super) fn lock(body: &[u8]) -> LockScript {
    match recognise(body) {
        Meaning::Lock(l) => l,
        other => panic!(
            "not a lock script ({other:?}): {}",
            String::from_utf8_lossy(body)
        ),
    }
}

/// The operation the lock script `body` chooses, and how it answers.
pub(super) fn choice_and_answer(body: &[u8]) -> (Choice, Answer) {
    let l = lock(body);
    (l.choice, l.answer)
}

/// Asserts that the lock script `body` always does `op`, and answers as `answer` says.
#[track_caller]
pub(super) fn assert_always(body: &[u8], op: Op, answer: Answer) {
    let got = choice_and_answer(body);
    let text = String::from_utf8_lossy(body);
    assert_eq!(got, (Choice::Always(op), answer), "{text}");
}

/// What a lock script does when called with `argv`: its operation, whether it takes every
/// key, and its answer; `None` for a script that is no lock script.
pub(super) fn op_of(body: &[u8], argv: &[&str]) -> Option<(Op, bool, Answer)> {
    let argv = self::argv(argv);
    match recognise(body) {
        Meaning::Lock(l) => Some((l.op(&argv), l.all_keys, l.answer)),
        Meaning::Hash(_)
        | Meaning::Plain(_)
        | Meaning::Redisson(_)
        | Meaning::Unless(_)
        | Meaning::Unknown => None,
    }
}
