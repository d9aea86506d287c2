//! `EVAL`, `EVALSHA` and `SCRIPT`: scripts are looked up in the proxy's own cache and run by
//! meaning (see [`crate::scripts`]).
//!
//! A recognised lock script becomes the matching quorum operation. A script the proxy does not
//! understand follows the `unknown_scripts` policy: `majority` runs it on every master and
//! answers the reply a quorum agree on (or an error when they disagree); `reject` refuses it.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::{Action, not_an_integer, parse_int, unknown_subcommand, wrong_arity};
use crate::client::Conn;
use crate::config::UnknownScripts;
use crate::quorum::{Request, ask};
use crate::reply::{Reply, command};
use crate::scripts::{Meaning, Script};
use crate::server::Proxy;

/// `EVAL script numkeys [key ...] [arg ...]`
pub fn eval(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    let script = proxy
        .scripts
        .insert(args[1].clone())
        .unwrap_or_else(|| Arc::new(Script::new(args[1].clone())));
    run(proxy, &script, args)
}

/// `EVALSHA sha1 numkeys [key ...] [arg ...]`
pub fn evalsha(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    let sha = String::from_utf8_lossy(&args[1]);
    match proxy.scripts.get(&sha) {
        Some(script) => run(proxy, &script, args),
        None => Reply::static_error("NOSCRIPT No matching script. Please use EVAL.").into(),
    }
}

/// Splits `numkeys key... arg...` (from `args[2]` on) into keys and arguments.
fn split_keys(args: &[Bytes]) -> Result<(&[Bytes], &[Bytes]), Reply> {
    let n = parse_int(&args[2]).ok_or_else(not_an_integer)?;
    if n < 0 {
        return Err(Reply::static_error("ERR Number of keys can't be negative"));
    }
    let rest = &args[3..];
    if n as usize > rest.len() {
        return Err(Reply::static_error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    Ok(rest.split_at(n as usize))
}

fn run(proxy: &Arc<Proxy>, script: &Script, args: Vec<Bytes>) -> Action {
    let (keys, argv) = match split_keys(&args) {
        Ok(split) => split,
        Err(e) => return e.into(),
    };
    match script.meaning {
        Meaning::Release if keys.len() == 1 && !argv.is_empty() => {
            super::lock::release(proxy, keys[0].clone(), argv[0].clone())
        }
        _ => unknown(proxy, script, keys, &args),
    }
}

/// Runs a script the proxy does not understand on every master, by the configured policy.
fn unknown(proxy: &Arc<Proxy>, script: &Script, keys: &[Bytes], args: &[Bytes]) -> Action {
    if proxy.config.unknown_scripts == UnknownScripts::Reject {
        return Reply::error(format!(
            "ERR redlock-proxy does not know what script {} does, and unknown_scripts = \"reject\"",
            script.sha
        ))
        .into();
    }
    let mut parts: Vec<&[u8]> = Vec::with_capacity(args.len());
    parts.push(b"EVAL");
    parts.push(&script.body);
    parts.extend(args[2..].iter().map(|a| a.as_ref()));
    let req = command(&parts);
    let ticket = proxy.keylocks.enqueue(keys);
    let proxy = proxy.clone();
    Action::Later(Box::pin(async move {
        let _held = ticket.ready().await;
        let ballots = ask(
            &proxy.masters,
            Request::Same(req),
            1,
            Instant::now() + proxy.config.node_timeout(),
        )
        .outcome()
        .await;
        match ballots.majority() {
            Some(r) => r.clone(),
            None => Reply::static_error(
                "ERR redlock-proxy: the masters did not agree on the script's reply (no majority)",
            ),
        }
    }))
}

/// `SCRIPT LOAD | EXISTS | FLUSH` on the proxy's cache.
pub fn script(proxy: &Arc<Proxy>, _: &mut Conn, args: Vec<Bytes>) -> Action {
    let sub = args[1].to_ascii_uppercase();
    match sub.as_slice() {
        b"LOAD" if args.len() == 3 => match proxy.scripts.insert(args[2].clone()) {
            Some(s) => Reply::Bulk(Bytes::from(s.sha.clone())),
            None => Reply::static_error("ERR redlock-proxy script cache is full"),
        },
        b"LOAD" => wrong_arity("script|load"),
        b"EXISTS" if args.len() >= 3 => Reply::Array(
            args[2..]
                .iter()
                .map(|sha| {
                    Reply::Integer(i64::from(
                        proxy.scripts.get(&String::from_utf8_lossy(sha)).is_some(),
                    ))
                })
                .collect(),
        ),
        b"EXISTS" => wrong_arity("script|exists"),
        b"FLUSH" if args.len() <= 3 => {
            proxy.scripts.flush();
            Reply::ok()
        }
        _ => unknown_subcommand("script", &args[1]),
    }
    .into()
}
