//! What a Lua script means.
//!
//! Clients send lock scripts with `EVAL` or load them and call `EVALSHA`. The proxy keeps its
//! own script cache (SHA1 of the exact text → script), so `EVALSHA` works whatever the masters
//! remember, and recognises scripts by *normalised content* (see [`normalise`]): comments,
//! spacing, line endings, `;`, quote style, the case of Redis command names, redundant
//! parentheses and the names of local variables do not matter. That way a reworded or
//! CRLF-edited copy of a library's script keeps its meaning.
//!
//! A recognised script becomes a [`LockScript`]: one of the operations in [`Op`], where its
//! token and TTL sit in `ARGV`, whether it works on one key or on all of `KEYS`, and the reply
//! shape its library expects ([`Answer`]). The masters never run client scripts that the proxy
//! understands; they run the proxy's canonical scripts below ([`ACQUIRE`], [`EXTEND`],
//! [`RELEASE`]), sent with `EVAL`, so that a restarted master that forgot every script needs no
//! reloading. Operators can declare the meaning of their own scripts in the configuration.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::ScriptDecl;

/// A lock operation, in the proxy's terms. Every operation works on a list of keys, all or
/// nothing on each master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Set every key to the token with the TTL, only where none of them exists.
    Acquire,
    /// Like `Acquire`, but a key that already holds the token counts as free, and its TTL is
    /// reset ("set if absent or already mine").
    AcquireOrRefresh,
    /// Where every key holds the token, set its TTL to the given time.
    Extend,
    /// Where every key holds the token, add the given time to its TTL.
    ExtendAdd,
    /// Delete every key that holds the token.
    Release,
    /// Read `KEYS[1]`: the value a majority of masters agree on and how long a majority still
    /// hold it, answered as `[value, pttl]` (redlock-rb's `PTTL_SCRIPT`; any `reply` is ignored).
    Inspect,
}

/// The reply shape a library expects from its script.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// `1` on success, `0` otherwise.
    #[default]
    OneZero,
    /// The number of keys on success (release: the number of keys released), `0` otherwise.
    Count,
    /// `+OK` on success, nil otherwise.
    OkNil,
    /// `1` on success, `-1` otherwise.
    OneMinusOne,
    /// Release: `1` released, `-1` already gone (expired), `0` held by another token.
    /// Other operations: `1` or `0`.
    Tristate,
}

/// How a script picks its operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Always the same operation.
    Always(Op),
    /// `then` when `ARGV[arg]` equals `value`, else `otherwise` (redis-py's extend picks "add"
    /// or "replace" this way; redlock-rb's lock script picks acquire or extend).
    IfArg {
        /// 1-based `ARGV` index.
        arg: usize,
        /// The value that selects `then`.
        value: &'static [u8],
        /// Operation when it matches.
        then: Op,
        /// Operation otherwise.
        otherwise: Op,
    },
}

/// A script the proxy understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockScript {
    /// Which operation it performs.
    pub choice: Choice,
    /// 1-based `ARGV` index of the token.
    pub token_arg: usize,
    /// 1-based `ARGV` index of the TTL in milliseconds (acquire and extend).
    pub ttl_arg: usize,
    /// True when it works on every key in `KEYS`; false when only on `KEYS[1]`.
    pub all_keys: bool,
    /// The reply its library expects.
    pub answer: Answer,
}

impl LockScript {
    /// The operation for these arguments.
    pub fn op(&self, argv: &[Bytes]) -> Op {
        match &self.choice {
            Choice::Always(op) => *op,
            Choice::IfArg {
                arg,
                value,
                then,
                otherwise,
            } => {
                if argv.get(arg.wrapping_sub(1)).is_some_and(|a| a == value) {
                    *then
                } else {
                    *otherwise
                }
            }
        }
    }
}

/// What a script does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meaning {
    /// A lock operation the proxy runs as a quorum operation.
    Lock(LockScript),
    /// Not understood: handled by the `unknown_scripts` policy.
    Unknown,
}

/// A script the proxy has seen.
#[derive(Debug)]
pub struct Script {
    /// The exact text the client sent.
    pub body: Bytes,
    /// Lower-case hex SHA1 of `body`, as Redis computes it.
    pub sha: String,
    /// What it does.
    pub meaning: Meaning,
}

/// Lower-case hex SHA1, the name Redis gives a script.
pub fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

// ---------------------------------------------------------------------------------------------
// Normalisation: a small Lua lexer, then a few spelling folds on the token stream.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Str(Vec<u8>),
    Num(String),
    Sym(String),
}

const KEYWORDS: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
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

/// Content of a long bracket opened at `start` (just past `[[`) and the index after it closes.
fn long_body(src: &[u8], start: usize, level: usize) -> (&[u8], usize) {
    let mut close = Vec::with_capacity(level + 2);
    close.push(b']');
    close.extend(std::iter::repeat_n(b'=', level));
    close.push(b']');
    match src[start..].windows(close.len()).position(|w| w == close) {
        Some(p) => (&src[start..start + p], start + p + close.len()),
        None => (&src[start..], src.len()),
    }
}

fn lex(src: &[u8]) -> Vec<Tok> {
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
                i = long_body(src, start, level).1;
            } else {
                while i < src.len() && src[i] != b'\n' {
                    i += 1;
                }
            }
            continue;
        }
        if c == b'"' || c == b'\'' {
            let mut s = Vec::new();
            i += 1;
            while i < src.len() && src[i] != c {
                if src[i] == b'\\' && i + 1 < src.len() {
                    match src[i + 1] {
                        e @ (b'"' | b'\'' | b'\\') => s.push(e),
                        b'n' => s.push(b'\n'),
                        b't' => s.push(b'\t'),
                        e => s.extend_from_slice(&[b'\\', e]),
                    }
                    i += 2;
                } else {
                    s.push(src[i]);
                    i += 1;
                }
            }
            i += 1;
            out.push(Tok::Str(s));
            continue;
        }
        if let Some((level, start)) = long_open(src, i) {
            let (body, end) = long_body(src, start, level);
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
                let exponent_sign =
                    (d == b'+' || d == b'-') && matches!(src[i - 1], b'e' | b'E' | b'p' | b'P');
                if d.is_ascii_alphanumeric() || d == b'.' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Tok::Num(
                String::from_utf8_lossy(&src[start..i]).to_ascii_lowercase(),
            ));
            continue;
        }
        for op in ["...", "==", "~=", "<=", ">=", "..", "::", "//", "<<", ">>"] {
            if src[i..].starts_with(op.as_bytes()) {
                out.push(Tok::Sym(op.to_string()));
                i += op.len();
                continue 'outer;
            }
        }
        out.push(Tok::Sym(char::from(c).to_string()));
        i += 1;
    }
    out
}

fn is_name(t: Option<&Tok>, name: &str) -> bool {
    matches!(t, Some(Tok::Name(n)) if n == name)
}

fn is_sym(t: Option<&Tok>, sym: &str) -> bool {
    matches!(t, Some(Tok::Sym(s)) if s == sym)
}

/// Index of the `)` that closes the `(` at `open`.
fn matching_paren(toks: &[Tok], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        if is_sym(Some(t), "(") {
            depth += 1;
        } else if is_sym(Some(t), ")") {
            depth -= 1;
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

/// Spelling folds that keep the meaning: drop `;`, `redis.pcall` → `redis.call`, and drop the
/// parentheses around a whole `if`/`elseif`/`while` condition.
fn fold(mut toks: Vec<Tok>) -> Vec<Tok> {
    toks.retain(|t| !is_sym(Some(t), ";"));
    for k in 2..toks.len() {
        if is_name(toks.get(k), "pcall")
            && is_sym(toks.get(k - 1), ".")
            && is_name(toks.get(k - 2), "redis")
        {
            toks[k] = Tok::Name("call".into());
        }
    }
    let mut drop = vec![false; toks.len()];
    for k in 0..toks.len() {
        let opens_condition = ["if", "elseif", "while"]
            .iter()
            .any(|kw| is_name(toks.get(k), kw));
        if !opens_condition || !is_sym(toks.get(k + 1), "(") {
            continue;
        }
        if let Some(close) = matching_paren(&toks, k + 1)
            && (is_name(toks.get(close + 1), "then") || is_name(toks.get(close + 1), "do"))
        {
            drop[k + 1] = true;
            drop[close] = true;
        }
    }
    let mut keep = drop.iter().map(|d| !d);
    toks.retain(|_| keep.next().unwrap_or(true));
    toks
}

/// Renders the token stream: local variables renamed in order of declaration, string literals
/// that are arguments of `redis.call` lower-cased (Redis command names and options ignore
/// case), `unlink` read as `del`.
fn render(toks: &[Tok]) -> String {
    #[derive(PartialEq)]
    enum Decl {
        None,
        List,
        Params,
        InParams,
    }
    let mut names: HashMap<&str, String> = HashMap::new();
    let mut decl = Decl::None;
    let mut depth = 0usize;
    let mut call_depths: Vec<usize> = Vec::new();
    let mut out: Vec<String> = Vec::with_capacity(toks.len());
    for (k, t) in toks.iter().enumerate() {
        match t {
            Tok::Name(n) => {
                let keyword = KEYWORDS.contains(&n.as_str());
                match (&decl, n.as_str()) {
                    (_, "local") | (_, "for") => decl = Decl::List,
                    (_, "function") => decl = Decl::Params,
                    (Decl::List | Decl::InParams, _)
                        if !keyword && !names.contains_key(n.as_str()) =>
                    {
                        let alias = format!("_{}", names.len() + 1);
                        names.insert(n, alias);
                    }
                    (Decl::List | Decl::InParams, _) if !keyword => {}
                    (Decl::List, _) => decl = Decl::None,
                    _ => {}
                }
                let field = k > 0 && (is_sym(toks.get(k - 1), ".") || is_sym(toks.get(k - 1), ":"));
                match names.get(n.as_str()) {
                    Some(alias) if !field => out.push(alias.clone()),
                    _ => out.push(n.clone()),
                }
            }
            Tok::Sym(s) => {
                match (&decl, s.as_str()) {
                    (Decl::List | Decl::InParams, ",") => {}
                    (Decl::Params, "(") => decl = Decl::InParams,
                    (Decl::Params, _) => {}
                    (Decl::InParams, ")") => decl = Decl::None,
                    _ => decl = Decl::None,
                }
                if s == "(" {
                    depth += 1;
                    let is_call = k >= 3
                        && is_name(toks.get(k - 1), "call")
                        && is_sym(toks.get(k - 2), ".")
                        && is_name(toks.get(k - 3), "redis");
                    if is_call {
                        call_depths.push(depth);
                    }
                } else if s == ")" {
                    if call_depths.last() == Some(&depth) {
                        call_depths.pop();
                    }
                    depth = depth.saturating_sub(1);
                }
                out.push(s.clone());
            }
            Tok::Str(bytes) => {
                if decl != Decl::InParams {
                    decl = Decl::None;
                }
                let mut bytes = bytes.clone();
                if call_depths.last() == Some(&depth) {
                    bytes.make_ascii_lowercase();
                    if bytes == b"unlink" {
                        bytes = b"del".to_vec();
                    }
                }
                let mut s = String::from("\"");
                for b in bytes {
                    match b {
                        b'"' | b'\\' => {
                            s.push('\\');
                            s.push(char::from(b));
                        }
                        0x20..=0x7e => s.push(char::from(b)),
                        _ => s.push_str(&format!("\\x{b:02x}")),
                    }
                }
                s.push('"');
                out.push(s);
            }
            Tok::Num(n) => {
                decl = Decl::None;
                out.push(n.clone());
            }
        }
    }
    out.join(" ")
}

/// The canonical spelling of a script: two scripts with the same normal form do the same.
pub fn normalise(body: &[u8]) -> String {
    render(&fold(lex(body)))
}

// ---------------------------------------------------------------------------------------------
// Known scripts.

const fn lock(choice: Choice, all_keys: bool, answer: Answer) -> LockScript {
    LockScript {
        choice,
        token_arg: 1,
        ttl_arg: 2,
        all_keys,
        answer,
    }
}

const fn one(op: Op, answer: Answer) -> LockScript {
    lock(Choice::Always(op), false, answer)
}

/// Scripts of the lock libraries (and common rewordings), each written once; spacing, quotes
/// and local names do not matter because both sides are normalised before matching.
fn known() -> Vec<(&'static str, LockScript)> {
    use Answer::*;
    use Op::*;
    vec![
        // Compare-and-delete as the Redlock page, PHP, Ruby, Rust and .NET libraries write it.
        (
            r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#,
            one(Release, OneZero),
        ),
        (
            r#"if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("del",KEYS[1]) else return 0 end"#,
            one(Release, OneZero),
        ),
        (
            r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) end return 0"#,
            one(Release, OneZero),
        ),
        (
            r#"local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#,
            one(Release, OneZero),
        ),
        // redis-py Lock.release.
        (
            r#"local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end
               redis.call('del', KEYS[1]) return 1"#,
            one(Release, OneZero),
        ),
        // redsync deleteScript: -1 when the key is gone.
        (
            r#"local val = redis.call("GET", KEYS[1]) if val == ARGV[1] then return redis.call("DEL", KEYS[1])
               elseif val == false then return -1 else return 0 end"#,
            one(Release, Tristate),
        ),
        // node-redlock v4/v5 release over many keys: the number of keys deleted.
        (
            r#"local count = 0 for i, key in ipairs(KEYS) do if redis.call("get", key) == ARGV[1] then
               redis.pcall("del", key) count = count + 1 end end return count"#,
            lock(Choice::Always(Release), true, Count),
        ),
        // redis-py Lock.extend: ARGV[3] "0" adds to the TTL, "1" replaces it.
        (
            r#"local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end
               local expiration = redis.call('pttl', KEYS[1]) if not expiration then expiration = 0 end
               if expiration < 0 then return 0 end
               local newttl = ARGV[2] if ARGV[3] == "0" then newttl = ARGV[2] + expiration end
               redis.call('pexpire', KEYS[1], newttl) return 1"#,
            lock(
                Choice::IfArg {
                    arg: 3,
                    value: b"0",
                    then: ExtendAdd,
                    otherwise: Extend,
                },
                false,
                OneZero,
            ),
        ),
        // redis-py Lock.reacquire.
        (
            r#"local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end
               redis.call('pexpire', KEYS[1], ARGV[2]) return 1"#,
            one(Extend, OneZero),
        ),
        // redsync touchScript, and compare-and-pexpire as commonly hand-written.
        (
            r#"if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end"#,
            one(Extend, OneZero),
        ),
        (
            r#"if ARGV[1] == redis.call("GET", KEYS[1]) then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end"#,
            one(Extend, OneZero),
        ),
        (
            r#"if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0"#,
            one(Extend, OneZero),
        ),
        // rslock extend: re-SET with PX.
        (
            r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 else
               if redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) ~= nil then return 1 else return 0 end end"#,
            one(Extend, OneZero),
        ),
        // node-redlock v4/v5 extend over many keys.
        (
            r#"for i, key in ipairs(KEYS) do if redis.call("get", key) ~= ARGV[1] then return 0 end end
               for i, key in ipairs(KEYS) do redis.call("set", key, ARGV[1], "PX", ARGV[2]) end return #KEYS"#,
            lock(Choice::Always(Extend), true, Count),
        ),
        // node-redlock v4/v5 acquire over many keys, all or nothing.
        (
            r#"for i, key in ipairs(KEYS) do if redis.call("exists", key) == 1 then return 0 end end
               for i, key in ipairs(KEYS) do redis.call("set", key, ARGV[1], "PX", ARGV[2]) end return #KEYS"#,
            lock(Choice::Always(Acquire), true, Count),
        ),
        // A plain SET NX PX sent as a script.
        (
            r#"return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])"#,
            one(Acquire, OkNil),
        ),
        (
            r#"return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2], "NX")"#,
            one(Acquire, OkNil),
        ),
        // redsync touchWithSetNXScript: extend, or take the lock again if it is free.
        (
            r#"if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2])
               elseif redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then return 1 else return 0 end"#,
            one(AcquireOrRefresh, OneZero),
        ),
        // RedLock.net Extend.lua: the same, answering -1 on a conflict.
        (
            r#"local currentVal = redis.call('get', KEYS[1])
               if (currentVal == false) then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0
               elseif (currentVal == ARGV[1]) then return redis.call('pexpire', KEYS[1], ARGV[2])
               else return -1 end"#,
            one(AcquireOrRefresh, OneMinusOne),
        ),
        // redlock-rb PTTL_SCRIPT (locked?, valid_lock?, remaining TTL).
        (
            r#"return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }"#,
            one(Inspect, OneZero),
        ),
        // redlock-rb LOCK_SCRIPT: ARGV[3] "yes" may take a free lock, anything else only extends.
        (
            r#"if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then
               return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end"#,
            lock(
                Choice::IfArg {
                    arg: 3,
                    value: b"yes",
                    then: AcquireOrRefresh,
                    otherwise: Extend,
                },
                false,
                OkNil,
            ),
        ),
    ]
}

static KNOWN: LazyLock<HashMap<String, LockScript>> = LazyLock::new(|| {
    known()
        .into_iter()
        .map(|(text, meaning)| (normalise(text.as_bytes()), meaning))
        .collect()
});

/// A script meaning declared in the configuration, matched by SHA1 or by normalised text.
#[derive(Debug, Clone)]
struct Declared {
    sha: Option<String>,
    normal: Option<String>,
    meaning: LockScript,
}

impl Declared {
    fn from_config(d: &ScriptDecl) -> Declared {
        let op = d.meaning;
        Declared {
            sha: d.sha.as_ref().map(|s| s.to_ascii_lowercase()),
            normal: d.text.as_ref().map(|t| normalise(t.as_bytes())),
            meaning: LockScript {
                choice: Choice::Always(op),
                token_arg: d.token_arg,
                ttl_arg: d.ttl_arg,
                all_keys: d.all_keys,
                answer: d.reply,
            },
        }
    }
}

/// Classifies a script: declared meanings first (by SHA1, then by normalised text), then the
/// built-in library scripts.
fn classify(body: &[u8], sha: &str, declared: &[Declared]) -> Meaning {
    if let Some(d) = declared.iter().find(|d| d.sha.as_deref() == Some(sha)) {
        return Meaning::Lock(d.meaning.clone());
    }
    let normal = normalise(body);
    if let Some(d) = declared
        .iter()
        .find(|d| d.normal.as_deref() == Some(normal.as_str()))
    {
        return Meaning::Lock(d.meaning.clone());
    }
    KNOWN
        .get(&normal)
        .cloned()
        .map_or(Meaning::Unknown, Meaning::Lock)
}

/// Classifies a script by its content alone (no declared meanings).
pub fn recognise(body: &[u8]) -> Meaning {
    classify(body, &sha1_hex(body), &[])
}

// ---------------------------------------------------------------------------------------------
// The proxy's canonical scripts, run on the masters.

/// Acquire: `KEYS` = the keys, `ARGV` = token, TTL ms, `"1"` to accept keys that already hold
/// the token. All or nothing: answers 0 when it wrote nothing (-1 when the key that stopped it
/// holds the token itself, so a refused attempt knows a grant of its value may exist there),
/// else one code per key: 1 created, 2 already held the token (TTL reset), so a refused attempt
/// can undo exactly what it created.
pub const ACQUIRE: &str = "local done = {} \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then done[i] = 1 \
      elseif ARGV[3] == '1' and v == ARGV[1] then done[i] = 2 \
      elseif v == ARGV[1] then return -1 \
      else return 0 end \
    end \
    for i, key in ipairs(KEYS) do redis.call('set', key, ARGV[1], 'px', ARGV[2]) end \
    return done";

/// Extend: `KEYS` = the keys, `ARGV` = token, ms, `"1"` to add to the TTL (else replace it),
/// max TTL. All or nothing: answers the smallest new TTL (> 0) when every key held the token,
/// 0 when some key did not, -2 when the new TTL would exceed the max. A key's fencing instance
/// (see [`crate::command::fence`]) learns its new expiry, so the grant keeps its token.
pub const EXTEND: &str = "local ttl = {} local least = nil \
    for i, key in ipairs(KEYS) do \
      if redis.call('get', key) ~= ARGV[1] then return 0 end \
      local t = tonumber(ARGV[2]) \
      if ARGV[3] == '1' then \
        local left = redis.call('pttl', key) \
        if left < 0 then return 0 end \
        t = t + left \
      end \
      if t > tonumber(ARGV[4]) then return -2 end \
      ttl[i] = t \
      if least == nil or t < least then least = t end \
    end \
    for i, key in ipairs(KEYS) do \
      redis.call('pexpire', key, ttl[i]) \
      local fk = 'redlock-fence:{' .. key .. '}' \
      if redis.call('hget', fk, 'h') == ARGV[1] then \
        local e = redis.pcall('pexpiretime', key) \
        if type(e) ~= 'table' then redis.call('hset', fk, 'e', string.format('%d', e)) end \
      end \
    end \
    return least";

/// Inspect: the value of `KEYS[1]` and its PTTL, as `{value or nil, pttl}`.
pub const INSPECT: &str = "return { redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]) }";

/// Release: `KEYS` = the keys, `ARGV[1]` = token. Answers one code per key: 1 deleted,
/// 0 held by another token, -1 missing.
pub const RELEASE: &str = "local out = {} \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then out[i] = -1 \
      elseif v == ARGV[1] then redis.call('del', key) out[i] = 1 \
      else out[i] = 0 end \
    end \
    return out";

// ---------------------------------------------------------------------------------------------
// The cache.

/// What one cached script is counted as besides its text (its SHA1, meaning and the map's
/// own bookkeeping), so a flood of tiny scripts is bounded too.
const ENTRY_OVERHEAD: usize = 256;

/// The proxy's script cache, shared by all clients, bounded in bytes.
///
/// When adding a script would pass the budget, the oldest scripts are forgotten first. That
/// never breaks a client: `EVAL` carries its script and always runs it (cached or not),
/// `SCRIPT LOAD` always succeeds for a script that fits the budget, and `EVALSHA` of a
/// forgotten script answers `NOSCRIPT`, on which every client library sends the script again.
/// Cached texts are copies, so no client's request buffer stays alive with them.
pub struct ScriptCache {
    inner: RwLock<Cached>,
    declared: Vec<Declared>,
    budget: usize,
}

#[derive(Default)]
struct Cached {
    map: HashMap<String, Arc<Script>>,
    /// SHA1s in the order they were added, oldest first.
    order: std::collections::VecDeque<String>,
    bytes: usize,
}

impl ScriptCache {
    /// An empty cache of at most `budget` bytes that knows the meanings declared in the
    /// configuration.
    pub fn new(declared: &[ScriptDecl], budget: usize) -> ScriptCache {
        ScriptCache {
            inner: RwLock::default(),
            declared: declared.iter().map(Declared::from_config).collect(),
            budget,
        }
    }

    /// Hashes and classifies `body` without caching it.
    pub fn script(&self, body: Bytes) -> Script {
        let sha = sha1_hex(&body);
        let meaning = classify(&body, &sha, &self.declared);
        Script { body, sha, meaning }
    }

    /// Adds a script (from `SCRIPT LOAD` or `EVAL`), forgetting the oldest ones if the budget
    /// needs it, and returns it. `None` only for a script larger than the whole budget.
    pub fn insert(&self, body: Bytes) -> Option<Arc<Script>> {
        let sha = sha1_hex(&body);
        if let Some(s) = self.get(&sha) {
            return Some(s);
        }
        let cost = body.len() + ENTRY_OVERHEAD;
        if cost > self.budget {
            return None;
        }
        // A copy: `body` is a slice of the client's whole request buffer.
        let script = Arc::new(self.script(Bytes::copy_from_slice(&body)));
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = inner.map.get(&sha) {
            return Some(s.clone());
        }
        while inner.bytes + cost > self.budget {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.map.remove(&old) {
                inner.bytes -= gone.body.len() + ENTRY_OVERHEAD;
            }
        }
        inner.bytes += cost;
        inner.order.push_back(sha.clone());
        inner.map.insert(sha, script.clone());
        Some(script)
    }

    /// Looks a script up by SHA1 (any case).
    pub fn get(&self, sha: &str) -> Option<Arc<Script>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner
            .map
            .get(sha)
            .or_else(|| inner.map.get(&sha.to_ascii_lowercase()))
            .cloned()
    }

    /// Forgets every script.
    pub fn flush(&self) {
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = Cached::default();
    }

    /// Number of cached scripts.
    pub fn len(&self) -> usize {
        self.inner.read().map(|m| m.map.len()).unwrap_or(0)
    }

    /// Bytes the cached scripts count for (texts plus a fixed overhead each).
    pub fn bytes(&self) -> usize {
        self.inner.read().map(|m| m.bytes).unwrap_or(0)
    }

    /// True when no script is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_matches_redis() {
        // SHA1 of the empty string, as `SCRIPT LOAD ""` answers.
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    fn op_of(body: &[u8], argv: &[&str]) -> Option<(Op, bool, Answer)> {
        let argv: Vec<Bytes> = argv
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        match recognise(body) {
            Meaning::Lock(l) => Some((l.op(&argv), l.all_keys, l.answer)),
            Meaning::Unknown => None,
        }
    }

    /// The libraries' scripts, byte for byte (tests/clients/lua holds the exact texts).
    macro_rules! lua {
        ($name:literal) => {
            include_bytes!(concat!("../tests/clients/lua/", $name, ".lua")).as_slice()
        };
    }

    #[test]
    fn library_scripts_are_exact_copies() {
        // The fixtures must be the libraries' exact bytes, or the SHA1s clients send differ.
        for (body, sha) in [
            (
                lua!("redispy_release"),
                "c3f8721cbb97f72bc19e972846bd7aaf91901658",
            ),
            (
                lua!("redispy_extend"),
                "a4e8783852e6b949f9ef3a97212805108459a890",
            ),
            (
                lua!("redlock5_ACQUIRE_SCRIPT"),
                "96da70f7716f27d278a5218544df37fd8b0a5e4c",
            ),
            (
                lua!("redsync_deleteScript"),
                "e950836ed1e694540c503ef9972b8de518044d3b",
            ),
            (
                lua!("redlocknet_Extend_lua"),
                "9f614a785a5f9ae8c6396c6b4bf94d2087342603",
            ),
        ] {
            assert_eq!(sha1_hex(body), sha);
        }
    }

    #[test]
    fn every_library_script_is_recognised() {
        use Answer::*;
        use Op::*;
        type Case = (&'static [u8], &'static [&'static str], (Op, bool, Answer));
        let cases: &[Case] = &[
            (lua!("redispy_release"), &["t"], (Release, false, OneZero)),
            (
                lua!("redispy_extend"),
                &["t", "5", "0"],
                (ExtendAdd, false, OneZero),
            ),
            (
                lua!("redispy_extend"),
                &["t", "5", "1"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redispy_reacquire"),
                &["t", "5"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redlock5_ACQUIRE_SCRIPT"),
                &["t", "5"],
                (Acquire, true, Count),
            ),
            (
                lua!("redlock5_EXTEND_SCRIPT"),
                &["t", "5"],
                (Extend, true, Count),
            ),
            (
                lua!("redlock5_RELEASE_SCRIPT"),
                &["t"],
                (Release, true, Count),
            ),
            (
                lua!("redlock4_lockScript"),
                &["t", "5"],
                (Acquire, true, Count),
            ),
            (
                lua!("redlock4_extendScript"),
                &["t", "5"],
                (Extend, true, Count),
            ),
            (
                lua!("redlock4_unlockScript"),
                &["t"],
                (Release, true, Count),
            ),
            (
                lua!("redsync_deleteScript"),
                &["t"],
                (Release, false, Tristate),
            ),
            (
                lua!("redsync_old_deleteScript"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redsync_touchScript"),
                &["t", "5"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redsync_touchWithSetNXScript"),
                &["t", "5"],
                (AcquireOrRefresh, false, OneZero),
            ),
            (
                lua!("redlocknet_Unlock_lua"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redlocknet_Extend_lua"),
                &["t", "5"],
                (AcquireOrRefresh, false, OneMinusOne),
            ),
            (
                lua!("redlockrb_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redlockrb_v1_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("redlockrb_LOCK_SCRIPT"),
                &["t", "5", "yes"],
                (AcquireOrRefresh, false, OkNil),
            ),
            (
                lua!("redlockrb_LOCK_SCRIPT"),
                &["t", "5", "no"],
                (Extend, false, OkNil),
            ),
            (
                lua!("redlockrb_v1_LOCK_SCRIPT"),
                &["t", "5", "yes"],
                (AcquireOrRefresh, false, OkNil),
            ),
            (
                lua!("php_ronnylt_unlock"),
                &["t"],
                (Release, false, OneZero),
            ),
            (lua!("php_signe_unlock"), &["t"], (Release, false, OneZero)),
            (
                lua!("rslock_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
            (
                lua!("rslock_EXTEND_SCRIPT"),
                &["t", "5"],
                (Extend, false, OneZero),
            ),
            (
                lua!("redlockcrate2_UNLOCK_SCRIPT"),
                &["t"],
                (Release, false, OneZero),
            ),
        ];
        for (body, argv, want) in cases {
            assert_eq!(
                op_of(body, argv),
                Some(*want),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn hash_based_scripts_stay_unknown() {
        for body in [
            lua!("redisson_lock"),
            lua!("redisson_unlock"),
            lua!("redisson_renew"),
        ] {
            assert_eq!(recognise(body), Meaning::Unknown);
        }
    }

    #[test]
    fn release_is_recognised_whatever_the_spelling() {
        for text in [
            "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return redis.call(\"del\",KEYS[1]) else return 0 end",
            "if redis.call('get', KEYS[1]) == ARGV[1] then\r\n  return redis.call('del', KEYS[1])\r\nelse\r\n  return 0\r\nend",
            "if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) else return 0 end;",
            "if (redis.call('get', KEYS[1]) == ARGV[1]) then return redis.pcall('unlink', KEYS[1]) else return 0; end",
            "-- unlock\nif ARGV[1] == redis.call('get', KEYS[1]) then return redis.call('del', KEYS[1]) else return 0 end --[[ done ]]",
            "local value = redis.call('get', KEYS[1])\nif value == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
        ] {
            assert_eq!(
                op_of(text.as_bytes(), &["t"]),
                Some((Op::Release, false, Answer::OneZero)),
                "{text}"
            );
        }
    }

    #[test]
    fn different_meanings_stay_apart() {
        for text in [
            // Deletes when the token does NOT match.
            "if redis.call('get',KEYS[1]) ~= ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
            // Compares with another argument.
            "if redis.call('get',KEYS[1]) == ARGV[2] then return redis.call('del',KEYS[1]) else return 0 end",
            // Deletes unconditionally.
            "return redis.call('del', KEYS[1])",
            // Lua names are case-sensitive: `argv` is not `ARGV`.
            "if redis.call('get',KEYS[1]) == argv[1] then return redis.call('del',KEYS[1]) else return 0 end",
            // A string compared outside redis.call keeps its case.
            "if redis.call('get',KEYS[1]) == 'ARGV' then return redis.call('del',KEYS[1]) else return 0 end",
        ] {
            assert_eq!(recognise(text.as_bytes()), Meaning::Unknown, "{text}");
        }
        // Spaces inside a string matter.
        assert_ne!(normalise(b"return 'a b'"), normalise(b"return 'ab'"));
        // Two different locals are not merged.
        assert_ne!(
            normalise(b"local a = 1 local b = 2 return a"),
            normalise(b"local a = 1 local b = 2 return b")
        );
    }

    #[test]
    fn normal_form_is_readable() {
        assert_eq!(
            normalise(b"local tok = redis.call('GET', KEYS[1]); return tok -- c"),
            r#"local _1 = redis . call ( "get" , KEYS [ 1 ] ) return _1"#
        );
    }

    #[test]
    fn declared_meanings_win() {
        let decl = ScriptDecl {
            sha: None,
            text: Some("return redis.call('del', KEYS[1])".into()),
            meaning: Op::Release,
            reply: Answer::OneZero,
            token_arg: 1,
            ttl_arg: 2,
            all_keys: false,
        };
        let cache = ScriptCache::new(&[decl], 1 << 20);
        let s = cache.script(Bytes::from_static(
            b"return   redis.call(\"DEL\", KEYS[1])\r\n",
        ));
        assert!(
            matches!(s.meaning, Meaning::Lock(ref l) if l.choice == Choice::Always(Op::Release))
        );
        let by_sha = ScriptDecl {
            sha: Some(sha1_hex(b"return 7").to_uppercase()),
            text: None,
            meaning: Op::Extend,
            reply: Answer::Count,
            token_arg: 2,
            ttl_arg: 1,
            all_keys: true,
        };
        let cache = ScriptCache::new(&[by_sha], 1 << 20);
        let s = cache.script(Bytes::from_static(b"return 7"));
        assert!(matches!(s.meaning, Meaning::Lock(ref l) if l.token_arg == 2 && l.all_keys));
        assert_eq!(
            cache.script(Bytes::from_static(b"return 8")).meaning,
            Meaning::Unknown
        );
    }

    #[test]
    fn cache_finds_by_sha() {
        let cache = ScriptCache::new(&[], 1 << 20);
        let s = cache.insert(Bytes::from_static(b"return 1")).unwrap();
        assert!(cache.get(&s.sha).is_some());
        assert!(cache.get(&s.sha.to_uppercase()).is_some());
        cache.flush();
        assert!(cache.get(&s.sha).is_none());
    }

    #[test]
    fn the_cache_forgets_its_oldest_scripts_to_stay_within_its_budget() {
        let budget = 10 * (1000 + ENTRY_OVERHEAD);
        let cache = ScriptCache::new(&[], budget);
        let script = |i: usize| Bytes::from(format!("return {i} --{}", "x".repeat(990)));
        let shas: Vec<String> = (0..25)
            .map(|i| cache.insert(script(i)).expect("fits").sha.clone())
            .collect();
        assert!(cache.bytes() <= budget, "{}", cache.bytes());
        assert!(cache.get(&shas[0]).is_none(), "the oldest is gone");
        assert!(cache.get(&shas[24]).is_some(), "the newest stays");
        // A script larger than the whole budget is not cached (EVAL still runs it).
        assert!(cache.insert(Bytes::from(vec![b' '; budget])).is_none());
        // Cached text is a copy, not a slice of the request that carried it.
        let frame = Bytes::from(vec![b'-'; 64]);
        let s = cache.insert(frame.slice(0..10)).unwrap();
        assert_ne!(s.body.as_ptr(), frame.as_ptr());
    }

    #[test]
    fn lexer_survives_garbage() {
        for junk in [
            &b"\"unterminated"[..],
            b"[[",
            b"--[==[",
            b"\xff\xfe(((",
            b"redis.call(",
            b")))",
        ] {
            let _ = normalise(junk);
        }
    }
}
