//! `EVAL`, `EVALSHA` and `SCRIPT`: scripts are looked up in the proxy's own cache and run by
//! meaning (see [`crate::scripts`]).
//!
//! The cache has Redis's semantics: a script's name is the SHA1 of its exact text, `EVAL` and
//! `SCRIPT LOAD` add to it, `EVALSHA` of an unknown SHA1 answers `NOSCRIPT`, and `SCRIPT FLUSH`
//! empties it. It lives in the proxy, so a master that restarts and forgets its scripts never
//! makes a client see `NOSCRIPT`.
//!
//! A recognised lock script becomes the matching quorum operation ([`super::lock::start`]),
//! bound to this call's keys and arguments. A script the proxy does not understand (or a lock
//! script called with arguments it cannot use) follows the `unknown_scripts` policy:
//! `majority` runs it on every master and answers the reply a quorum agree on (or an error when
//! they disagree); `reject` refuses it.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::action::Action;
use super::args::{Cursor, word};
use super::hashlock::{HashLockOp, Publication};
use super::keys::{Cond, SetOptions, SetWrite};
use super::lease::Leased;
use super::lock::{Announcement, LockOp, Wake};
use super::session::Conn;
use crate::config::UnknownScripts;
use crate::error::Error;
use crate::lockop::{
    ARGV_AFTER_KEYS, Answer, Choice, HashOp, HashScript, LockScript, Op, Param, PlainSet,
    PublishCommand, TtlUnit, WriteUnless,
};
use crate::proxy::Proxy;
use crate::quorum::{Request, ask};
use crate::scripts::{Meaning, Script};
use crate::wire::master::command;
use crate::wire::reply::Reply;
use crate::wire::resp::parse_int;

/// A script's call: `numkeys key... arg...`, read.
pub struct Call {
    /// `numkeys` as written.
    numkeys: Bytes,
    keys: Vec<Bytes>,
    argv: Vec<Bytes>,
}

impl Call {
    /// Reads `numkeys key... arg...`, with Redis's errors for a `numkeys` that is no integer,
    /// is negative, or names more keys than there are arguments.
    fn parse(c: &mut Cursor<'_>) -> Result<Call, Reply> {
        let numkeys = c.next_bytes()?;
        let n = parse_int(&numkeys).ok_or(Error::NotAnInteger)?;
        if n < 0 {
            return Err(Reply::from(Error::NegativeKeyCount));
        }
        if n as usize > c.remaining() {
            return Err(Reply::from(Error::KeyCountBeyondArgs));
        }
        let mut keys = c.rest_bytes();
        let argv = keys.split_off(n as usize);
        Ok(Call {
            numkeys,
            keys,
            argv,
        })
    }
}

/// `EVAL script numkeys [key ...] [arg ...]`, read: the script, and its call (or what is
/// wrong with it, answered once the script is cached, as it always has been).
pub struct Eval {
    body: Bytes,
    call: Result<Call, Reply>,
}

impl Eval {
    /// Reads `EVAL script numkeys [key ...] [arg ...]`.
    pub fn parse(c: &mut Cursor<'_>) -> Result<Eval, Error> {
        let body = c.next_bytes()?;
        Ok(Eval {
            body,
            call: Call::parse(c),
        })
    }
}

/// `EVAL script numkeys [key ...] [arg ...]`
pub fn eval(proxy: &Arc<Proxy>, conn: &mut Conn, Eval { body, call }: Eval) -> Action {
    let script = proxy
        .scripts()
        .insert(body.clone())
        .unwrap_or_else(|| Arc::new(proxy.scripts().script(body)));
    match call {
        Ok(call) => perform(proxy, conn, &script, call),
        Err(e) => e.into(),
    }
}

/// `EVALSHA sha1 numkeys [key ...] [arg ...]`, read.
pub struct EvalSha {
    sha: String,
    call: Call,
}

impl EvalSha {
    /// Reads `EVALSHA sha1 numkeys [key ...] [arg ...]` in Redis's order: a SHA1 of the wrong
    /// length cannot match (`NOSCRIPT`), then `numkeys` is checked.
    pub fn parse(c: &mut Cursor<'_>) -> Result<EvalSha, Reply> {
        let sha = c.next_arg()?;
        if sha.len() != 40 {
            return Err(Reply::from(Error::NoScript));
        }
        let sha = String::from_utf8_lossy(sha).into_owned();
        Ok(EvalSha {
            sha,
            call: Call::parse(c)?,
        })
    }
}

/// `EVALSHA sha1 numkeys [key ...] [arg ...]`: the script is looked up last.
pub fn evalsha(proxy: &Arc<Proxy>, conn: &mut Conn, EvalSha { sha, call }: EvalSha) -> Action {
    match proxy.scripts().get(&sha) {
        Some(script) => perform(proxy, conn, &script, call),
        None => Reply::from(Error::NoScript).into(),
    }
}

fn perform(proxy: &Arc<Proxy>, conn: &mut Conn, script: &Script, call: Call) -> Action {
    let (keys, argv) = (&call.keys[..], &call.argv[..]);
    let bound = match &script.meaning {
        Meaning::Lock(lock) => bind(lock, keys, argv).map(|op| op.map(Quorum::Lock)),
        Meaning::Hash(hash) => bind_hash(hash, keys, argv).map(|op| op.map(Quorum::Hash)),
        // Redisson's read-write and fair locks: the client's script on every master, decided
        // by the quorum (see `rwlock`).
        Meaning::Redisson(rw) => super::rwlock::bind(rw, &script.body, keys, argv).map(|op| {
            let channel = rw.op.channel_key().and_then(|i| keys.get(i - 1)).cloned();
            op.map(|op| Quorum::ReadWrite(op, channel))
        }),
        Meaning::Plain(plain) => {
            let run = run_plain(proxy, plain, keys, argv);
            return run.unwrap_or_else(|| unknown(proxy, script, &call));
        }
        Meaning::Unless(w) => {
            let run = run_unless(proxy, conn, w, keys, argv);
            return run.unwrap_or_else(|| unknown(proxy, script, &call));
        }
        Meaning::Unknown => None,
    };
    match bound {
        Some(Ok(op)) => match may_publish(conn, op.channel()) {
            Ok(()) => op.start(proxy, conn),
            Err(e) => e.into(),
        },
        Some(Err(e)) => e.into(),
        None => unknown(proxy, script, &call),
    }
}

/// A recognised script's operation, bound to one call: what the quorum runs.
// Held on the stack for one call and moved once: boxing the larger variant would cost an
// allocation per call instead.
#[allow(clippy::large_enum_variant)]
enum Quorum {
    Lock(LockOp),
    Hash(HashLockOp),
    /// With the channel the script publishes to, if it does.
    ReadWrite(super::rwlock::RwLockOp, Option<Bytes>),
}

impl Quorum {
    /// The channel the operation publishes to, if it does.
    fn channel(&self) -> Option<&[u8]> {
        match self {
            Quorum::Lock(op) => op.publish.as_ref().map(|p| &p.channel[..]),
            Quorum::Hash(op) => op.publish.as_ref().map(|p| &p.channel[..]),
            Quorum::ReadWrite(_, channel) => channel.as_deref(),
        }
    }

    fn start(self, proxy: &Arc<Proxy>, conn: &Conn) -> Action {
        match self {
            Quorum::Lock(op) => leased_lock(proxy, conn, op),
            Quorum::Hash(op) => leased_hash_lock(proxy, conn, op),
            Quorum::ReadWrite(op, _) => super::rwlock::start(proxy, op),
        }
    }
}

/// Whether a recognised script may publish on `channel` for the connection's user: never on
/// the proxy's own channels, and otherwise as the user's channel patterns allow, refused as
/// Redis refuses a script's publish (checked before the script runs anywhere, so a refused
/// release leaves the lock as it was rather than half done).
fn may_publish(conn: &Conn, channel: Option<&[u8]>) -> Result<(), Reply> {
    let Some(channel) = channel else {
        return Ok(());
    };
    super::pubsub::may_publish(conn, channel).map_err(|e| {
        Reply::from(match e {
            Error::NoPermChannels => Error::ScriptChannel,
            other => other,
        })
    })
}

/// Runs a script that writes a constant unless the key holds it (see [`WriteUnless`]) as
/// `SET key c IFNE c PX ttl`, a quorum write (see `conditional`), answering the script's own
/// constants: its "written" where a quorum wrote, its "not written" where the write was
/// refused (the key holds `c` on a quorum, or no quorum wrote), and errors as they are. `None`
/// when the call does not fit (no key, too few arguments): it then runs as written.
fn run_unless(
    proxy: &Arc<Proxy>,
    conn: &mut Conn,
    w: &WriteUnless,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Option<Action> {
    use futures_util::FutureExt;
    let key = keys.first()?.clone();
    let ttl = argv.get(w.ttl_arg.checked_sub(1)?)?;
    let Some(n) = parse_int(ttl) else {
        return Some(Reply::from(Error::NotAnInteger).into());
    };
    let ms = match w.unit {
        TtlUnit::Millis => Some(n),
        TtlUnit::Seconds => n.checked_mul(1000),
    };
    let Some(ms) = ms.filter(|ms| *ms > 0) else {
        return Some(Reply::from(Error::InvalidExpire("set")).into());
    };
    let write = SetWrite {
        name: Bytes::from_static(b"SET"),
        key,
        value: w.value.clone(),
        options: Vec::new(),
        opts: SetOptions {
            ttl_ms: Some(ms),
            cond: Some(Cond::Ne(w.value.clone())),
            ..SetOptions::default()
        },
    };
    let (ok, no) = (w.ok, w.no);
    let answer = move |r: Reply| {
        if r.is_ok() {
            super::lock::constant(ok)
        } else if matches!(r, Reply::Nil) {
            super::lock::constant(no)
        } else {
            r
        }
    };
    Some(match super::conditional::set(proxy, conn, write) {
        Action::Reply(r) => Action::Reply(answer(r)),
        Action::Later(later) => Action::Later(Box::pin(later.map(answer))),
        close @ Action::Close(_) => close,
    })
}

/// Runs a script that is one plain `SET` (see [`PlainSet`]) as that command: a write by the
/// majority rule, with `SET`'s errors and the `max_ttl_ms` cap. `None` when the call does not
/// fit (no key, too few arguments): it then runs as written, as for any script.
fn run_plain(
    proxy: &Arc<Proxy>,
    plain: &PlainSet,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Option<Action> {
    let key = keys.first()?.clone();
    let value = argv.get(plain.value_arg.checked_sub(1)?)?.clone();
    let ttl = argv.get(plain.ttl_arg.checked_sub(1)?)?.clone();
    let Some(n) = parse_int(&ttl) else {
        return Some(Reply::from(Error::NotAnInteger).into());
    };
    let (word, ms) = match plain.unit {
        TtlUnit::Millis => (&b"PX"[..], Some(n)),
        TtlUnit::Seconds => (&b"EX"[..], n.checked_mul(1000)),
    };
    let Some(ms) = ms.filter(|ms| *ms > 0) else {
        return Some(Reply::from(Error::InvalidExpire("set")).into());
    };
    let write = super::set::expiring(key, value, word, ttl, ms);
    Some(super::keys::write(proxy, write))
}

/// Runs a lock script's operation, with a lease when it acquires keys the connection leases.
fn leased_lock(proxy: &Arc<Proxy>, conn: &Conn, op: LockOp) -> Action {
    let leases = conn.leases_for(op.keys.iter().map(|k| k.as_ref()));
    match leases.filter(|_| super::lock::acquires(&op)) {
        None => super::lock::start(proxy, op),
        Some(leases) => {
            let lock = Leased::Plain {
                keys: op.keys.clone(),
                token: op.token.clone(),
                ttl_ms: op.ttl_ms,
            };
            let granted = super::lock::is_granted_reply(&op);
            let acquired = super::lock::start(proxy, op);
            super::lease::on_grant(leases, proxy, acquired, lock, granted)
        }
    }
}

/// Runs a hash-lock script's operation, with a lease when it acquires a key the connection
/// leases (renewed as Redisson's watchdog renews it).
fn leased_hash_lock(proxy: &Arc<Proxy>, conn: &Conn, op: HashLockOp) -> Action {
    let acquires = matches!(
        op.op,
        HashOp::Acquire | HashOp::FencedAcquire | HashOp::FencedAcquireToken
    );
    match conn
        .leases_for(std::iter::once(op.key.as_ref()))
        .filter(|_| acquires)
    {
        None => super::hashlock::start(proxy, op),
        Some(leases) => {
            let lock = Leased::Hash {
                key: op.key.clone(),
                field: op.field.clone(),
                ttl_ms: op.ttl_ms,
            };
            // A grant answers nil, or `{-1, token}` for a fenced lock's token form, or the
            // script's own constant.
            let own = op.replies.map(|(ok, _)| super::lock::constant(ok));
            let acquired = super::hashlock::start(proxy, op);
            let granted = move |r: &Reply| match (&own, r) {
                (Some(ok), r) => r == ok,
                (None, Reply::Nil) => true,
                (None, Reply::Array(v)) => v.first() == Some(&Reply::Integer(-1)),
                _ => false,
            };
            super::lease::on_grant(leases, proxy, acquired, lock, granted)
        }
    }
}

/// Binds a lock script to one call's keys and arguments. `None` when the call does not fit the
/// script's layout (too few keys or arguments): the script then runs as written, as Redis would
/// run it, under the unknown-script policy.
fn bind(lock: &LockScript, keys: &[Bytes], argv: &[Bytes]) -> Bound<LockOp> {
    // A script that spreads ARGV or tests #ARGV / #KEYS means its operation for some counts only.
    if lock.argv_count.is_some_and(|m| !m.contains(argv.len()))
        || lock.keys_count.is_some_and(|k| !k.contains(keys.len()))
    {
        return None;
    }
    let (keys, argv, padded) = parameters(lock, keys, argv)?;
    let argv = &argv[..];
    let switch = match &lock.choice {
        Choice::Always(_) => None,
        Choice::IfArg { arg, .. } | Choice::IfNum { arg, .. } | Choice::IfTokenLen { arg, .. } => {
            Some(*arg)
        }
    };
    if padded.contains(&lock.token_arg) || switch.is_some_and(|a| padded.contains(&a)) {
        return None;
    }
    // A choice on a number: the proxy reads only plain integers there.
    if let Choice::IfNum { arg, .. } = &lock.choice
        && argv
            .get(arg.checked_sub(1)?)
            .and_then(|a| parse_int(a))
            .is_none()
    {
        return Some(Err(Reply::from(Error::NotAnInteger)));
    }
    let op = lock.op(argv);
    let keys_all = keys;
    let keys = if lock.all_keys {
        keys.to_vec()
    } else {
        keys.first().cloned().into_iter().collect()
    };
    if keys.is_empty() {
        return None;
    }
    let token = if let Some(literal) = &lock.token_literal {
        literal.clone()
    } else if op == Op::Inspect {
        Bytes::new()
    } else {
        argv.get(lock.token_arg.checked_sub(1)?)?.clone()
    };
    let wake = match bind_wake(lock, keys_all, argv)? {
        Ok(wake) => wake,
        Err(e) => return Some(Err(e)),
    };
    let mut answer = lock.answer;
    let ttl_ms = match bind_ttl(lock, op, argv, &padded, &mut answer)? {
        Ok(ttl_ms) => ttl_ms,
        Err(e) => return Some(Err(e)),
    };
    let publish = bind_publish(lock, keys_all, argv)?;
    Some(Ok(LockOp {
        op,
        keys,
        token,
        ttl_ms,
        answer,
        wake,
        publish,
    }))
}

/// A call's keys, its arguments, and the positions among them that are padding.
type Layout<'a> = (&'a [Bytes], Cow<'a, [Bytes]>, Range<usize>);

/// A call bound to a script: `None` when it does not fit the script's layout, an error reply
/// when it fits but a value is wrong.
type Bound<T> = Option<Result<T, Reply>>;

/// The keys and arguments a lock script reads, from one call's: as given, or for a script that
/// takes its parameters in KEYS, its one key and its parameters. With parameters in KEYS and
/// ARGV both, the range is the positions that stand for parameters the call did not pass (the
/// padding): a call that needs them does not fit the layout. `None` when there is no key.
fn parameters<'a>(lock: &LockScript, keys: &'a [Bytes], argv: &'a [Bytes]) -> Option<Layout<'a>> {
    if !lock.params_in_keys {
        return Some((keys, Cow::Borrowed(argv), 0..0));
    }
    let (keys, params) = keys.split_at_checked(1)?;
    if argv.is_empty() {
        return Some((keys, Cow::Borrowed(params), 0..0));
    }
    // The script reads ARGV too: its `ARGV[j]` is parameter `ARGV_AFTER_KEYS + j`.
    let params = params.get(..ARGV_AFTER_KEYS).unwrap_or(params);
    let pad = ARGV_AFTER_KEYS - params.len();
    let padded = params.len() + 1..ARGV_AFTER_KEYS + 1;
    let mixed = params
        .iter()
        .cloned()
        .chain(std::iter::repeat_n(Bytes::new(), pad))
        .chain(argv.iter().cloned())
        .collect::<Vec<_>>();
    Some((keys, Cow::Owned(mixed), padded))
}

/// The list a script pushes to, to wake a waiter, with the TTL it gives it (which must be an
/// integer); `Ok(None)` for a script that wakes nobody.
fn bind_wake(lock: &LockScript, keys: &[Bytes], argv: &[Bytes]) -> Bound<Option<Box<Wake>>> {
    let Some(sig) = &lock.signal else {
        return Some(Ok(None));
    };
    let list = keys.get(sig.key.checked_sub(1)?)?.clone();
    let ttl = argv.get(sig.ttl_arg.checked_sub(1)?)?;
    let Some(ttl_ms) = parse_int(ttl) else {
        return Some(Err(Reply::from(Error::NotAnInteger)));
    };
    Some(Ok(Some(Box::new(Wake {
        list,
        ttl_ms,
        value: sig.value.clone(),
        always: sig.always,
    }))))
}

/// The TTL in ms the operation `op` is given: none for a release or a read of the holder, the
/// unit of the answer for a read of the TTL, else the call's (or the script's own) TTL, which
/// must be a positive integer. A script that answers the TTL it was given gets it in `answer`.
fn bind_ttl(
    lock: &LockScript,
    op: Op,
    argv: &[Bytes],
    padded: &Range<usize>,
    answer: &mut Answer,
) -> Bound<i64> {
    if matches!(
        op,
        Op::Release | Op::ReleaseAll | Op::Delete | Op::Inspect | Op::Held
    ) {
        return Some(Ok(0));
    }
    if op == Op::Remaining {
        // A read: the unit its answer is given in.
        return Some(Ok(match lock.unit {
            TtlUnit::Millis => 1,
            TtlUnit::Seconds => 1000,
        }));
    }
    let given = if let Some(k) = lock.ttl_literal {
        // A TTL written in the script: the same on every call.
        Some(k)
    } else {
        if padded.contains(&lock.ttl_arg) {
            return None;
        }
        parse_int(argv.get(lock.ttl_arg.checked_sub(1)?)?)
    };
    let ms = match lock.unit {
        TtlUnit::Millis => given,
        TtlUnit::Seconds => given.map(|s| s.saturating_mul(1000)),
    };
    // A script that answers the TTL it was given: that TTL, in its own unit.
    if let (Answer::Const(c), Some(n)) = (*answer, given)
        && c.use_ttl()
    {
        *answer = Answer::Const(c.bind_ttl(n));
    }
    match ms {
        Some(ms) if ms > 0 || (ms == 0 && op == Op::ExtendAdd) => Some(Ok(ms)),
        Some(_) => Some(Err(Reply::from(Error::InvalidScriptTtl))),
        None => Some(Err(Reply::from(Error::NotAnInteger))),
    }
}

/// What a releasing script publishes, and where, from the call's keys and arguments; `None`
/// when a parameter it names is missing.
fn bind_publish(
    lock: &LockScript,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Option<Option<Box<Announcement>>> {
    let Some(a) = &lock.announce else {
        return Some(None);
    };
    let param = |p: &Param| match p {
        Param::Key(i) => keys.get(i.checked_sub(1)?).cloned(),
        Param::Arg(j) => argv.get(j.checked_sub(1)?).cloned(),
        Param::Literal(b) => Some(b.clone()),
    };
    Some(Some(Box::new(Announcement {
        command: a.command.clone(),
        channel: param(&a.channel)?,
        message: param(&a.message)?,
        when: a.when,
    })))
}

/// Binds a hash-lock script to one call's keys and arguments; `None` when the call does not
/// fit its layout (it then runs as written, under the unknown-script policy). A publish command
/// named by an argument must be `publish` or `spublish`: anything else is refused, since the
/// proxy would otherwise run a command it never saw.
fn bind_hash(
    script: &HashScript,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Option<Result<HashLockOp, Reply>> {
    let arg = |j: usize| argv.get(j.checked_sub(1)?).cloned();
    let key = keys.first()?.clone();
    let field = match script.field_arg {
        0 => Bytes::new(),
        j => arg(j)?,
    };
    let ttl_ms = match script.ttl_arg {
        0 => 0,
        j => match (parse_int(&arg(j)?), script.unit) {
            (Some(ms), TtlUnit::Millis) => ms,
            // Beyond any `max_ttl_ms` when it overflows: refused as too long.
            (Some(s), TtlUnit::Seconds) => s.saturating_mul(1000),
            (None, _) => return Some(Err(Reply::from(Error::NotAnInteger))),
        },
    };
    let publish = match &script.publish {
        None => None,
        Some(p) => {
            let command = match &p.command {
                PublishCommand::Literal(c) => c.clone(),
                PublishCommand::Arg(j) => {
                    let c = arg(*j)?;
                    if c.eq_ignore_ascii_case(b"publish") {
                        Bytes::from_static(b"PUBLISH")
                    } else if c.eq_ignore_ascii_case(b"spublish") {
                        Bytes::from_static(b"SPUBLISH")
                    } else {
                        return Some(Err(Reply::from(Error::PublishArg(*j))));
                    }
                }
            };
            Some(Publication {
                command,
                channel: keys.get(p.channel_key.checked_sub(1)?)?.clone(),
                message: arg(p.message_arg)?,
            })
        }
    };
    let latch = match &script.latch {
        None => None,
        Some(l) => {
            let key = keys.get(l.key.checked_sub(1)?)?.clone();
            match parse_int(&arg(l.ttl_arg)?) {
                Some(ms) => Some((key, ms)),
                None => return Some(Err(Reply::from(Error::NotAnInteger))),
            }
        }
    };
    // RenewAll: every further key with its own field.
    let mut also = Vec::new();
    if script.op == HashOp::RenewAll {
        for (i, k) in keys.iter().enumerate().skip(1) {
            also.push((k.clone(), arg(script.field_arg + i)?));
        }
    }
    Some(Ok(HashLockOp {
        op: script.op,
        key,
        field,
        ttl_ms,
        keeps_ttl: script.op == HashOp::Unlock && script.ttl_arg == 0,
        publish,
        latch,
        also,
        counter: match script.op {
            HashOp::FencedAcquire | HashOp::FencedAcquireToken => Some(keys.get(1)?.clone()),
            _ => None,
        },
        replies: script.replies,
        unlock_replies: script.unlock_replies,
    }))
}

/// Runs a script the proxy does not understand on every master, by the configured policy.
fn unknown(proxy: &Arc<Proxy>, script: &Script, call: &Call) -> Action {
    if proxy.config().unknown_scripts == UnknownScripts::Reject {
        let sha = script.sha.clone();
        let why = script.refused.clone();
        return Reply::from(Error::UnknownScript { sha, why }).into();
    }
    let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + call.keys.len() + call.argv.len());
    parts.extend([&b"EVAL"[..], &script.body, &call.numkeys]);
    parts.extend(call.keys.iter().chain(&call.argv).map(|a| a.as_ref()));
    let req = command(&parts);
    super::action::in_turn(proxy, &call.keys, move |proxy| async move {
        let ballots = ask(
            &proxy.masters(),
            Request::Same(req),
            1,
            Instant::now() + proxy.config().node_timeout(),
        )
        .outcome()
        .await;
        match ballots.majority() {
            Some(r) => r.clone(),
            None => Reply::from(Error::ScriptDisagreement),
        }
    })
}

/// `SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP`, read.
pub enum ScriptCommand {
    /// `SCRIPT LOAD script`
    Load(Bytes),
    /// `SCRIPT EXISTS sha1 [sha1 ...]`
    Exists(Vec<String>),
    /// `SCRIPT FLUSH [ASYNC|SYNC]`
    Flush,
    /// `SCRIPT KILL`
    Kill,
    /// `SCRIPT HELP`
    Help,
}

impl ScriptCommand {
    /// Reads `SCRIPT subcommand ...`, with Redis's errors for an unknown subcommand, the
    /// wrong number of arguments, or a flush mode that is none.
    pub fn parse(c: &mut Cursor<'_>) -> Result<ScriptCommand, Error> {
        #[derive(Clone, Copy)]
        enum Sub {
            Load,
            Exists,
            Flush,
            Kill,
            Help,
        }
        const SUBS: &[(&[u8], Sub)] = &[
            (b"LOAD", Sub::Load),
            (b"EXISTS", Sub::Exists),
            (b"FLUSH", Sub::Flush),
            (b"KILL", Sub::Kill),
            (b"HELP", Sub::Help),
        ];
        const MODES: &[(&[u8], ())] = &[(b"SYNC", ()), (b"ASYNC", ())];
        let sub = c.next_arg()?;
        let Some(which) = word(sub, SUBS) else {
            return Err(Error::unknown_subcommand("script", sub));
        };
        Ok(match which {
            Sub::Load if c.remaining() == 1 => ScriptCommand::Load(c.next_bytes()?),
            Sub::Load => return Err(Error::WrongArity("script|load")),
            Sub::Exists if !c.at_end() => ScriptCommand::Exists(
                c.rest()
                    .map(|sha| String::from_utf8_lossy(sha).into_owned())
                    .collect(),
            ),
            Sub::Exists => return Err(Error::WrongArity("script|exists")),
            // As Redis: no mode, or one of the two; anything else (more words too) is refused.
            Sub::Flush => match (c.try_next(), c.remaining()) {
                (None, _) => ScriptCommand::Flush,
                (Some(mode), 0) if word(mode, MODES).is_some() => ScriptCommand::Flush,
                _ => return Err(Error::ScriptFlushMode),
            },
            Sub::Kill => {
                c.finish_arity("script|kill")?;
                ScriptCommand::Kill
            }
            Sub::Help => {
                c.finish_arity("script|help")?;
                ScriptCommand::Help
            }
        })
    }
}

/// `SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP` on the proxy's cache.
pub fn script(proxy: &Arc<Proxy>, _: &mut Conn, sub: ScriptCommand) -> Action {
    match sub {
        ScriptCommand::Load(body) => {
            let len = body.len();
            match proxy.scripts().insert(body) {
                Some(s) => Reply::Bulk(Bytes::from(s.sha.clone())),
                None => Reply::from(Error::ScriptTooLarge {
                    len,
                    max: proxy.config().script_cache_bytes,
                }),
            }
        }
        ScriptCommand::Exists(shas) => Reply::Array(
            shas.iter()
                .map(|sha| Reply::Integer(i64::from(proxy.scripts().get(sha).is_some())))
                .collect(),
        ),
        ScriptCommand::Flush => {
            proxy.scripts().flush();
            Reply::ok()
        }
        // The proxy never leaves a script running on a master that a client could kill.
        ScriptCommand::Kill => Reply::from(Error::NotBusy),
        ScriptCommand::Help => super::connection::help(&[
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "HELP",
            "    Print this help.",
        ]),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lockop::{Answer, Choice};

    fn b(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    fn script(choice: Choice, all_keys: bool) -> LockScript {
        LockScript {
            choice,
            token_arg: 1,
            ttl_arg: 2,
            unit: TtlUnit::Millis,
            all_keys,
            params_in_keys: false,
            token_literal: None,
            ttl_literal: None,
            answer: Answer::Count,
            signal: None,
            announce: None,
            argv_count: None,
            keys_count: None,
        }
    }

    #[test]
    fn binds_keys_token_and_ttl() {
        let multi = script(Choice::Always(Op::Acquire), true);
        let op = bind(&multi, &b(&["a", "b"]), &b(&["tok", "1000"]))
            .unwrap()
            .unwrap();
        assert_eq!(op.keys, b(&["a", "b"]));
        assert_eq!((op.token.as_ref(), op.ttl_ms), (&b"tok"[..], 1000));
        let single = script(Choice::Always(Op::Release), false);
        let op = bind(&single, &b(&["a", "b"]), &b(&["tok"]))
            .unwrap()
            .unwrap();
        assert_eq!(op.keys, b(&["a"]), "a one-key script touches KEYS[1] only");
    }

    #[test]
    fn binds_a_token_in_keys_with_its_ttl_in_argv() {
        // KEYS = key, token; ARGV = TTL (see `ARGV_AFTER_KEYS`).
        let mut s = script(Choice::Always(Op::AcquireOrRefresh), false);
        (s.params_in_keys, s.token_arg, s.ttl_arg) = (true, 1, ARGV_AFTER_KEYS + 1);
        let op = bind(&s, &b(&["k", "tok", "extra"]), &b(&["700"]))
            .unwrap()
            .unwrap();
        assert_eq!(op.keys, b(&["k"]));
        assert_eq!((op.token.as_ref(), op.ttl_ms), (&b"tok"[..], 700));
        // No token key, or no TTL: the call does not fit (never an empty token).
        assert!(bind(&s, &b(&["k"]), &b(&["700"])).is_none());
        assert!(bind(&s, &b(&["k", "tok"]), &[]).is_none());
        // A token further along KEYS than the call passed is not read from the padding.
        s.token_arg = 2;
        assert!(bind(&s, &b(&["k", "tok"]), &b(&["700"])).is_none());
    }

    #[test]
    fn calls_that_do_not_fit_run_as_written() {
        let extend = script(Choice::Always(Op::Extend), false);
        assert!(bind(&extend, &[], &b(&["tok", "10"])).is_none(), "no key");
        assert!(bind(&extend, &b(&["k"]), &b(&["tok"])).is_none(), "no TTL");
        assert_eq!(
            bind(&extend, &b(&["k"]), &b(&["tok", "soon"])),
            Some(Err(Reply::from(Error::NotAnInteger)))
        );
        assert!(matches!(
            bind(&extend, &b(&["k"]), &b(&["tok", "0"])),
            Some(Err(_))
        ));
    }

    #[test]
    fn seconds_and_parameters_in_keys_bind() {
        let mut s = script(Choice::Always(Op::Extend), false);
        s.unit = TtlUnit::Seconds;
        let op = bind(&s, &b(&["k"]), &b(&["tok", "7"])).unwrap().unwrap();
        assert_eq!(op.ttl_ms, 7000);
        // warlock's parityRelock: KEYS = key, TTL, token.
        let mut s = script(Choice::Always(Op::Extend), false);
        (s.params_in_keys, s.token_arg, s.ttl_arg) = (true, 2, 1);
        let op = bind(&s, &b(&["k", "500", "tok"]), &[]).unwrap().unwrap();
        assert_eq!(op.keys, b(&["k"]));
        assert_eq!((op.token.as_ref(), op.ttl_ms), (&b"tok"[..], 500));
        assert!(bind(&s, &[], &[]).is_none());
    }

    #[test]
    fn the_switch_argument_picks_the_operation() {
        let s = script(
            Choice::IfArg {
                arg: 3,
                value: Bytes::from_static(b"0"),
                then: Op::ExtendAdd,
                otherwise: Op::Extend,
            },
            false,
        );
        let add = bind(&s, &b(&["k"]), &b(&["t", "5", "0"])).unwrap().unwrap();
        let replace = bind(&s, &b(&["k"]), &b(&["t", "5", "1"])).unwrap().unwrap();
        assert_eq!((add.op, replace.op), (Op::ExtendAdd, Op::Extend));
    }
}
