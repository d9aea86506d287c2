//! The proxy's own scripts, run on the masters: the texts sent with `EVAL` for each quorum
//! operation (acquire, extend, release, ...), and what a Redis Cluster member must know of
//! them to split one across slots. Kept apart from recognition (the client's scripts) and from
//! the cache: these are constants the proxy writes, never reads.

/// Acquire: `KEYS` = the keys, `ARGV` = token, TTL ms, `"1"` to accept keys that already hold
/// the token. All or nothing: answers 0 when it wrote nothing (-1 when the key that stopped it
/// holds the token itself, so a refused attempt knows a grant of its value may exist there),
/// else one code per key: 1 created, 2 already held the token (TTL reset), so a refused attempt
/// can undo exactly what it created. `ARGV[3] = "2"` accepts keys that hold the token only
/// when all of them do (a mix of missing keys and the token's answers -1). `ARGV[4]`, when
/// given, is the TTL in ms set where a key already held the token (a refresh whose TTL is
/// read in another unit, see [`crate::lockop::Op::AcquireOrRefreshSeconds`]).
pub const ACQUIRE: &str = "local done = {} \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then done[i] = 1 \
      elseif ARGV[3] ~= '0' and v == ARGV[1] then done[i] = 2 \
      elseif v == ARGV[1] then return -1 \
      else return 0 end \
    end \
    if ARGV[3] == '2' then for i = 2, #done do if done[i] ~= done[1] then return -1 end end end \
    for i, key in ipairs(KEYS) do \
      redis.call('set', key, ARGV[1], 'px', done[i] == 2 and ARGV[4] or ARGV[2]) end \
    return done";

/// Extend: `KEYS` = the keys, `ARGV` = token, ms, `"1"` to add to the TTL (else replace it),
/// max TTL. All or nothing: answers the smallest new TTL (> 0) when every key held the token,
/// 0 when some key did not (-3 when the one key is missing), -2 when the new TTL would exceed
/// the max. A key's fencing instance
/// (see the fencing commands) learns its new expiry, so the grant keeps its token.
pub const EXTEND: &str = "local ttl = {} local least = nil \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v ~= ARGV[1] then if v == false and #KEYS == 1 then return -3 end return 0 end \
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

/// Release all or nothing: `KEYS` = the keys, `ARGV[1]` = token. Deletes the keys only when
/// every one holds the token; answers one code per key as [`RELEASE`] does (1 deleted,
/// -1 missing, 0 not deleted: held by another token, or held by this one while another key
/// was not).
pub const RELEASE_ALL: &str = "local out = {} local all = true \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then out[i] = -1 all = false \
      elseif v == ARGV[1] then out[i] = 0 \
      else out[i] = 0 all = false end \
    end \
    if all then for i, key in ipairs(KEYS) do redis.call('del', key) out[i] = 1 end end \
    return out";

/// Remaining: `KEYS` = the keys, `ARGV[1]` = token. The smallest PTTL of the keys (-1 for a
/// key without a TTL) when every one holds the token, else -3.
pub const REMAINING: &str = "local least = nil \
    for i, key in ipairs(KEYS) do \
      if redis.call('get', key) ~= ARGV[1] then return -3 end \
      local t = redis.call('pttl', key) \
      if least == nil or t < least then least = t end \
    end \
    return least";

/// The end of [`RELEASE`] and [`DELETE`]: the wake-up signal (see [`Signal`]) on the list that
/// follows the `n` lock keys in `KEYS`, with `ARGV[3]` its TTL in ms, `ARGV[4]` its element and
/// `ARGV[5] == "1"` to signal whatever the outcome (else only where every key was deleted).
macro_rules! signal_then_return {
    () => {
        "if n < #KEYS and (all or ARGV[5] == '1') then \
          local s = KEYS[n + 1] \
          redis.call('del', s) redis.call('lpush', s, ARGV[4]) redis.call('pexpire', s, ARGV[3]) \
        end \
        return out"
    };
}

/// Release: `KEYS` = the keys, `ARGV[1]` = token. Answers one code per key: 1 deleted,
/// 0 held by another token, -1 missing. With a wake-up signal, the list follows the keys in
/// `KEYS` and `ARGV[2]` is the number of lock keys (see `signal_then_return`).
pub const RELEASE: &str = concat!(
    "local out = {} local n = tonumber(ARGV[2]) or #KEYS local all = true \
    for i = 1, n do \
      local key = KEYS[i] \
      local v = redis.call('get', key) \
      if v == false then out[i] = -1 all = false \
      elseif v == ARGV[1] then redis.call('del', key) out[i] = 1 \
      else out[i] = 0 all = false end \
    end ",
    signal_then_return!()
);

/// Release and publish: `KEYS` = the keys, `ARGV` = token, publish command, channel, message,
/// mode. Each key is released as [`RELEASE`] does, and the message is published once when
/// `mode` is `"1"` (always), `"0"` (every key was deleted) or `"2"` (every key was deleted or
/// already gone). Answers one code per key as [`RELEASE`].
pub const RELEASE_PUBLISH: &str = "local out = {} local all = true local done = true \
    for i, key in ipairs(KEYS) do \
      local v = redis.call('get', key) \
      if v == false then out[i] = -1 all = false \
      elseif v == ARGV[1] then redis.call('del', key) out[i] = 1 \
      else out[i] = 0 all = false done = false end \
    end \
    if ARGV[5] == '1' or all or (ARGV[5] == '2' and done) then \
      redis.call(ARGV[2], ARGV[3], ARGV[4]) \
    end \
    return out";

/// Delete: `KEYS` and `ARGV` as [`RELEASE`] with a signal (`ARGV[1]` is not read), but every key
/// is deleted whatever it holds. Answers one code per key: 1 deleted, -1 missing.
pub const DELETE: &str = concat!(
    "local out = {} local n = tonumber(ARGV[2]) local all = true \
    for i = 1, n do \
      if redis.call('del', KEYS[i]) == 1 then out[i] = 1 else out[i] = -1 all = false end \
    end ",
    signal_then_return!()
);

/// What a Redis Cluster member must know of the canonical scripts to split one whose keys
/// span slots (see [`crate::backend::cluster::Split`]): [`RELEASE`] and [`DELETE`] answer per
/// key, [`ACQUIRE`] is all or nothing; the others are refused.
pub struct ClusterScripts;

impl crate::backend::cluster::Scripts for ClusterScripts {
    fn split(&self, body: &[u8]) -> crate::backend::cluster::Split {
        use crate::backend::cluster::Split;
        if body == RELEASE.as_bytes() || body == DELETE.as_bytes() {
            Split::PerKey
        } else if body == ACQUIRE.as_bytes() {
            Split::Acquire
        } else {
            Split::No
        }
    }

    fn release(&self) -> &'static str {
        RELEASE
    }
}
