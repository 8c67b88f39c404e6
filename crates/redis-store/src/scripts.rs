//! The Lua scripts behind the Redis store's records, and how a script is run.
//!
//! Each record script reads and writes exactly one key, so on Redis Cluster it runs on the
//! master that owns the key's slot, and the same script serves a single Redis and a cluster.
//! Inbox scripts (`inbox/scripts.rs`) name several keys, all in one slot by their hash tag.
//!
//! A call goes out as `EVALSHA hash n keys… args…`, which the cluster client routes by its first
//! key.
//! When that node does not have the script cached (`NOSCRIPT`, after a restart, say) the call is
//! repeated as `EVAL code 1 key args…`, which runs it and caches it on that same node. Loading it
//! with `SCRIPT LOAD` instead would go to every node of a cluster and fail while any one of them
//! is down, taking the healthy nodes' keys with it.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind};

/// A script's source and its SHA1, hashed once.
pub(crate) struct Lua {
    code: &'static str,
    hash: String,
}

impl Lua {
    pub(crate) fn new(code: &'static str) -> Self {
        let hash = Script::new(code).get_hash().to_owned();
        Self { code, hash }
    }

    /// A call of this script on `key` with `args`, ready to run.
    pub(crate) fn on<'a>(&'static self, key: String, args: &'a [&'a [u8]]) -> Call<'a> {
        self.on_keys(vec![key], args)
    }

    /// A call of this script on `keys` (all in one slot, for a cluster) with `args`.
    pub(crate) fn on_keys<'a>(&'static self, keys: Vec<String>, args: &'a [&'a [u8]]) -> Call<'a> {
        Call {
            script: self,
            keys,
            args,
        }
    }
}

/// One script call on its keys.
pub(crate) struct Call<'a> {
    script: &'static Lua,
    keys: Vec<String>,
    args: &'a [&'a [u8]],
}

impl Call<'_> {
    /// Runs the call by hash, and by source when the node answers `NOSCRIPT`.
    pub(crate) async fn run<C, T>(&self, conn: &mut C) -> RedisResult<T>
    where
        C: ConnectionLike + Send,
        T: FromRedisValue,
    {
        match self
            .command("EVALSHA", &self.script.hash)
            .query_async(conn)
            .await
        {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.command("EVAL", self.script.code)
                    .query_async(conn)
                    .await
            }
            answer => answer,
        }
    }

    /// The call as `EVAL` with the script's source, for a call whose answer nobody awaits.
    pub(crate) fn by_source(&self) -> Cmd {
        self.command("EVAL", self.script.code)
    }

    fn command(&self, name: &str, script: &str) -> Cmd {
        // Sized for its arguments at once (the key count takes at most 20 digits): grown
        // argument by argument it reallocated five times.
        let count = 3 + self.keys.len() + self.args.len();
        let keys: usize = self.keys.iter().map(String::len).sum();
        let args: usize = self.args.iter().map(|arg| arg.len()).sum();
        let mut cmd = Cmd::with_capacity(count, name.len() + script.len() + 20 + keys + args);
        cmd.arg(name)
            .arg(script)
            .arg(self.keys.len())
            .arg(&self.keys);
        for arg in self.args {
            cmd.arg(*arg);
        }
        cmd
    }
}

pub(crate) static RESERVE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local v = redis.call('GET', KEYS[1])
        if v then return v end
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        return false",
    )
});

pub(crate) static RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"if redis.call('GETRANGE', KEYS[1], 0, 9) ~= ARGV[1] then return 0 end
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        return 1",
    )
});

pub(crate) static COMPLETE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"if redis.call('GETRANGE', KEYS[1], 0, 9) ~= ARGV[1] then return 0 end
        redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
        return 1",
    )
});

pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"if redis.call('GETRANGE', KEYS[1], 0, 9) ~= ARGV[1] then return 0 end
        redis.call('DEL', KEYS[1])
        return 1",
    )
});

/// Byte 1 of an encoded record is its state, 0 for in flight (`Record::encoded_in_flight`).
pub(crate) static REMOVE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"if ARGV[1] ~= '1' and redis.call('GETRANGE', KEYS[1], 1, 1) == '\0' then return -1 end
        return redis.call('DEL', KEYS[1])",
    )
});

pub(crate) static GET: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"local v = redis.call('GET', KEYS[1])
        if not v then return false end
        return {v, redis.call('PTTL', KEYS[1])}",
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_goes_out_as_evalsha_with_its_keys_and_args() {
        let args: [&[u8]; 2] = [b"holder", b"\x00record"];
        let call = RESERVE.on("idem:payments:-:k1".into(), &args);
        let mut plain = redis::cmd("EVALSHA");
        plain.arg(&RESERVE.hash).arg(1).arg("idem:payments:-:k1");
        plain.arg(args[0]).arg(args[1]);
        let sized = call.command("EVALSHA", &RESERVE.hash);
        assert_eq!(sized.get_packed_command(), plain.get_packed_command());
    }
}
