//! The Lua scripts behind the Redis store's inbox queues (`inbox/mod.rs`).
//!
//! Every script names all the keys it touches, and they are the keys of one queue shard (plus,
//! for `accept`, the record): on Redis Cluster one hash tag puts them in one slot, so each script
//! is atomic on one master. The keys of a shard, in the order scripts take them, are listed by
//! `ShardKeys` (`inbox/keys.rs`): the delivery hash, then the `due`, `lease`, `arrived` and
//! `dead` sorted sets.
//!
//! The delivery hash keeps, per delivery id (32 hex digits): the encoded delivery as accepted
//! under `id`, and beside it what attempts change, which a script can update without decoding
//! anything: `id:n` attempts, `id:s` last status (0 for none), `id:e` last error (absent for
//! none), `id:r` arrival (unix ms), `id:t` the current claim's token. A claim or a listing
//! answers rows of `{id, encoding, attempts, status, error}`.
//!
//! An error travels as one argument: `-` for none, `+` and the text for some.

use std::sync::LazyLock;

use crate::scripts::Lua;

/// Records the acknowledgement unless the key has a record (answering it), and queues the
/// delivery, due at its arrival. KEYS: record, hash, due, arrived. ARGV: ack, ttl ms, id,
/// encoding, arrival ms, attempts, status, error.
pub(crate) static ACCEPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local v = redis.call('GET', KEYS[1])
        if v then return v end
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        local id = ARGV[3]
        redis.call('HSET', KEYS[2], id, ARGV[4], id..':n', ARGV[6], id..':s', ARGV[7],
            id..':r', ARGV[5])
        if string.sub(ARGV[8], 1, 1) == '+' then
            redis.call('HSET', KEYS[2], id..':e', string.sub(ARGV[8], 2))
        end
        redis.call('ZADD', KEYS[3], ARGV[5], id)
        redis.call('ZADD', KEYS[4], ARGV[5], id)
        return false",
    )
});

/// Takes up to `max` deliveries due by `now`, earliest first: each is due again (and leased)
/// until `until`, counts one more attempt and carries `token`. A queued id whose encoding is
/// missing is dropped from the queue rather than handed out. KEYS: hash, due, lease, arrived.
/// ARGV: now ms, until ms, max, token.
pub(crate) static CLAIM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
        local out = {}
        for _, id in ipairs(ids) do
            local m = redis.call('HMGET', KEYS[1], id, id..':s', id..':e')
            if m[1] then
                redis.call('ZADD', KEYS[2], ARGV[2], id)
                redis.call('ZADD', KEYS[3], ARGV[2], id)
                redis.call('HSET', KEYS[1], id..':t', ARGV[4])
                local n = redis.call('HINCRBY', KEYS[1], id..':n', 1)
                out[#out + 1] = {id, m[1], n, m[2] or '0', m[3] or false}
            else
                redis.call('ZREM', KEYS[2], id)
                redis.call('ZREM', KEYS[3], id)
                redis.call('ZREM', KEYS[4], id)
            end
        end
        return out",
    )
});

/// Ends an attempt if `token` is still the delivery's claim: `delivered` deletes it, `retry`
/// makes it due at `due` with the failure, `dead` moves it to the dead set with the failure.
/// Answers 1 when applied, 0 when fenced off. KEYS: hash, due, lease, arrived, dead. ARGV: id,
/// token, outcome, due ms, status, error.
pub(crate) static SETTLE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local id = ARGV[1]
        if redis.call('HGET', KEYS[1], id..':t') ~= ARGV[2] then return 0 end
        redis.call('HDEL', KEYS[1], id..':t')
        redis.call('ZREM', KEYS[3], id)
        if ARGV[3] == 'delivered' then
            redis.call('HDEL', KEYS[1], id, id..':n', id..':s', id..':e', id..':r')
            redis.call('ZREM', KEYS[2], id)
            redis.call('ZREM', KEYS[4], id)
            return 1
        end
        redis.call('HSET', KEYS[1], id..':s', ARGV[5])
        if string.sub(ARGV[6], 1, 1) == '+' then
            redis.call('HSET', KEYS[1], id..':e', string.sub(ARGV[6], 2))
        else
            redis.call('HDEL', KEYS[1], id..':e')
        end
        if ARGV[3] == 'retry' then
            redis.call('ZADD', KEYS[2], ARGV[4], id)
        else
            redis.call('ZREM', KEYS[2], id)
            redis.call('ZREM', KEYS[4], id)
            redis.call('ZADD', KEYS[5], 0, id)
        end
        return 1",
    )
});

/// Counts as of `now`: `{live, in flight, dead, earliest arrival or nil}`, from the sorted
/// sets' sizes and one range lookup, never a scan. KEYS: due, lease, arrived, dead. ARGV: now.
pub(crate) static QUEUES: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
        return {redis.call('ZCARD', KEYS[1]),
            redis.call('ZCOUNT', KEYS[2], '(' .. ARGV[1], '+inf'),
            redis.call('ZCARD', KEYS[4]),
            oldest[2] or false}",
    )
});

/// Up to `limit` dead deliveries in id order from `start` (`-`, or `(` and an id to start
/// after). KEYS: hash, dead. ARGV: start, limit.
pub(crate) static DEAD: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local ids = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], '+', 'LIMIT', 0, ARGV[2])
        local out = {}
        for _, id in ipairs(ids) do
            local m = redis.call('HMGET', KEYS[1], id, id..':n', id..':s', id..':e')
            if m[1] then
                out[#out + 1] = {id, m[1], m[2] or '0', m[3] or '0', m[4] or false}
            end
        end
        return out",
    )
});

/// Makes a dead delivery due at `now` with no attempts counted; answers whether it was dead.
/// KEYS: hash, due, arrived, dead. ARGV: id, now ms.
pub(crate) static RETRY_DEAD: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local id = ARGV[1]
        if redis.call('ZREM', KEYS[4], id) == 0 then return 0 end
        local arrived = redis.call('HGET', KEYS[1], id..':r') or ARGV[2]
        redis.call('HSET', KEYS[1], id..':n', 0)
        redis.call('ZADD', KEYS[2], ARGV[2], id)
        redis.call('ZADD', KEYS[3], arrived, id)
        return 1",
    )
});

/// Deletes a dead delivery; answers whether it was dead. KEYS: hash, dead. ARGV: id.
pub(crate) static REMOVE_DEAD: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local id = ARGV[1]
        if redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
        redis.call('HDEL', KEYS[1], id, id..':n', id..':s', id..':e', id..':r', id..':t')
        return 1",
    )
});
