//! A command whose keys fall in several slots of a cluster member, split where per-slot parts
//! answer as one Redis would (see [`Split`] and docs/design.md), else refused with `CROSSSLOT`.

use bytes::Bytes;

use super::route::{Routed, Split};
use super::slots;
use super::{CROSSSLOT, Cluster, encode};
use crate::error::BackendError;
use crate::wire::reply::Reply;

/// The wake-up signal of a split release: `KEYS[1]` the list, `ARGV` its element and TTL.
const SIGNAL: &str = "redis.call('del', KEYS[1]) redis.call('lpush', KEYS[1], ARGV[1]) \
    redis.call('pexpire', KEYS[1], ARGV[2]) return 1";

impl Cluster {
    /// One command whose keys span slots: split where the parts answer as one Redis would,
    /// else refused with `CROSSSLOT`.
    pub(super) async fn run_cross(
        &self,
        cmd: &Routed,
        keys: &[usize],
        time: bool,
    ) -> Result<Reply, BackendError> {
        let name = cmd.args[0].to_ascii_uppercase();
        match name.as_slice() {
            b"DEL" | b"UNLINK" | b"EXISTS" | b"TOUCH" => {
                let mut sum = 0;
                for (slot, group) in by_slot(&cmd.args, keys) {
                    let mut args = vec![cmd.args[0].clone()];
                    args.extend(group.iter().map(|&i| cmd.args[i].clone()));
                    match self.run_in(encode(&args), Some(slot), time).await? {
                        Reply::Integer(n) => sum += n,
                        other => return Ok(other),
                    }
                }
                Ok(Reply::Integer(sum))
            }
            b"MGET" => {
                let mut out = vec![Reply::Nil; keys.len()];
                for (slot, group) in by_slot(&cmd.args, keys) {
                    let mut args = vec![cmd.args[0].clone()];
                    args.extend(group.iter().map(|&i| cmd.args[i].clone()));
                    match self.run_in(encode(&args), Some(slot), time).await? {
                        Reply::Array(values) if values.len() == group.len() => {
                            for (&i, v) in group.iter().zip(values) {
                                out[i - 1] = v;
                            }
                        }
                        other => return Ok(other),
                    }
                }
                Ok(Reply::Array(out))
            }
            b"EVAL" => match self.scripts.split(&cmd.args[1]) {
                Split::PerKey => self.per_key(cmd, time).await,
                Split::Acquire => self.acquire(cmd, time).await,
                Split::No => Ok(Reply::static_error(CROSSSLOT)),
            },
            _ => Ok(Reply::static_error(CROSSSLOT)),
        }
    }

    /// A per-key release or delete (see [`Split::PerKey`]) whose keys span slots: the
    /// same script per slot, its codes put back in key order, then the wake-up signal on its
    /// own slot when the script would have sent it.
    async fn per_key(&self, cmd: &Routed, time: bool) -> Result<Reply, BackendError> {
        let numkeys = parse_usize(&cmd.args[2]).unwrap_or(0);
        let keys = &cmd.args[3..3 + numkeys];
        let argv = &cmd.args[3 + numkeys..];
        let n = argv
            .get(1)
            .and_then(|a| parse_usize(a))
            .unwrap_or(numkeys)
            .min(numkeys);
        let positions: Vec<usize> = (3..3 + n).collect();
        let mut codes = vec![Reply::Integer(0); n];
        let mut excluded = false;
        for (slot, group) in by_slot(&cmd.args, &positions) {
            let count = group.len().to_string();
            let mut args = vec![
                cmd.args[0].clone(),
                cmd.args[1].clone(),
                Bytes::from(count.clone()),
            ];
            args.extend(group.iter().map(|&i| cmd.args[i].clone()));
            for (j, a) in argv.iter().enumerate() {
                // ARGV[2], the number of lock keys, is this part's own.
                args.push(if j == 1 {
                    Bytes::from(count.clone())
                } else {
                    a.clone()
                });
            }
            match self.run_in(encode(&args), Some(slot), time).await {
                Ok(Reply::Array(part)) if part.len() == group.len() => {
                    for (&i, c) in group.iter().zip(part) {
                        codes[i - 3] = c;
                    }
                }
                Ok(other) => return Ok(other),
                Err(BackendError::Excluded) => excluded = true,
                Err(e) => return Err(e),
            }
        }
        let all = codes.iter().all(|c| *c == Reply::Integer(1));
        let always = argv.get(4).is_some_and(|a| a.as_ref() == b"1");
        if n < numkeys && !excluded && (all || always) {
            let (Some(ttl), Some(element)) = (argv.get(2), argv.get(3)) else {
                return Ok(Reply::Array(codes));
            };
            let signal = &keys[n];
            let args = [
                Bytes::from_static(b"EVAL"),
                Bytes::from_static(SIGNAL.as_bytes()),
                Bytes::from_static(b"1"),
                signal.clone(),
                element.clone(),
                ttl.clone(),
            ];
            // A lost wake-up only makes a waiter wait for its own timeout: not an error.
            let slot = slots::key_slot(signal);
            let _ = self.run_in(encode(&args), Some(slot), time).await;
        }
        if excluded {
            Err(BackendError::Excluded)
        } else {
            Ok(Reply::Array(codes))
        }
    }

    /// An all-or-nothing acquisition (see [`Split::Acquire`]) whose keys span slots: the same
    /// script per slot, one after the other. When every part wrote, the codes are joined in
    /// key order; when one did not, what the others created is deleted again (compare and
    /// delete on the token) and its answer (0, or -1 when a key held the token itself) is the
    /// whole answer, as one Redis would have written nothing. A key that already held the token
    /// keeps the TTL the part gave it: only that same holder's lock lives longer.
    async fn acquire(&self, cmd: &Routed, time: bool) -> Result<Reply, BackendError> {
        let numkeys = parse_usize(&cmd.args[2]).unwrap_or(0);
        let argv = &cmd.args[3 + numkeys..];
        let positions: Vec<usize> = (3..3 + numkeys).collect();
        let mut codes = vec![Reply::Integer(0); numkeys];
        let mut done: Vec<(u16, Vec<usize>)> = Vec::new();
        let mut refusal = None;
        let mut failure = None;
        for (slot, group) in by_slot(&cmd.args, &positions) {
            let mut args = vec![
                cmd.args[0].clone(),
                cmd.args[1].clone(),
                Bytes::from(group.len().to_string()),
            ];
            args.extend(group.iter().map(|&i| cmd.args[i].clone()));
            args.extend(argv.iter().cloned());
            match self.run_in(encode(&args), Some(slot), time).await {
                Ok(Reply::Array(part)) if part.len() == group.len() => {
                    for (&i, c) in group.iter().zip(part) {
                        codes[i - 3] = c;
                    }
                    done.push((slot, group));
                }
                Ok(other) => {
                    refusal = Some(other);
                    break;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        // `ARGV[3] = "2"`: keys that hold the token count only when all of them do.
        let mode_all = argv.get(2).is_some_and(|m| m.as_ref() == b"2");
        if refusal.is_none() && failure.is_none() && mode_all {
            let mixed = codes.iter().any(|c| *c == Reply::Integer(1))
                && codes.iter().any(|c| *c == Reply::Integer(2));
            if mixed {
                refusal = Some(Reply::Integer(-1));
            }
        }
        if refusal.is_none() && failure.is_none() {
            return Ok(Reply::Array(codes));
        }
        // Undo what the parts that wrote created (a failed part may have written too).
        let token = argv.first().cloned().unwrap_or_default();
        let mut undo: Vec<(u16, Vec<usize>)> = done
            .into_iter()
            .map(|(slot, g)| {
                let created = g
                    .into_iter()
                    .filter(|&i| codes[i - 3] == Reply::Integer(1))
                    .collect();
                (slot, created)
            })
            .collect();
        if failure.is_some() {
            undo = by_slot(&cmd.args, &positions);
        }
        for (slot, keys) in undo.into_iter().filter(|(_, k)| !k.is_empty()) {
            let mut args = vec![
                Bytes::from_static(b"EVAL"),
                Bytes::from_static(self.scripts.release().as_bytes()),
                Bytes::from(keys.len().to_string()),
            ];
            args.extend(keys.iter().map(|&i| cmd.args[i].clone()));
            args.push(token.clone());
            let _ = self.run_in(encode(&args), Some(slot), false).await;
        }
        match (failure, refusal) {
            (Some(e), _) => Err(e),
            (None, Some(r)) => Ok(r),
            (None, None) => Ok(Reply::Integer(0)),
        }
    }
}

fn parse_usize(b: &[u8]) -> Option<usize> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The key positions grouped by slot, in the order each slot first appears.
fn by_slot(args: &[Bytes], keys: &[usize]) -> Vec<(u16, Vec<usize>)> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for &i in keys {
        let slot = slots::key_slot(&args[i]);
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, g)) => g.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_grouped_by_slot_in_first_seen_order() {
        let args: Vec<Bytes> = ["DEL", "{a}1", "b", "{a}2", "c", "b"]
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect();
        let groups = by_slot(&args, &[1, 2, 3, 4, 5]);
        let slot = |k: &str| slots::key_slot(k.as_bytes());
        assert_eq!(
            groups,
            vec![
                (slot("a"), vec![1, 3]),
                (slot("b"), vec![2, 5]),
                (slot("c"), vec![4]),
            ]
        );
        assert_eq!(
            encode(&args[..2]),
            crate::wire::master::command(&[b"DEL", b"{a}1"])
        );
        assert_eq!(parse_usize(b"12"), Some(12));
        assert_eq!(parse_usize(b"x"), None);
    }
}
