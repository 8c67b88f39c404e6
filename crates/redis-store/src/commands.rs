//! The plain Redis commands the record operations are made of, beside the scripts
//! (`scripts.rs`): the native reserve, and how durations and answers are converted.

use std::time::Duration;

use bytes::Bytes;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};

use idempotency_core::backend::Record;
use idempotency_core::StoreError;

/// Reserve-or-read as one native command: `SET key value NX GET PX lease` sets the in-flight
/// record if the key is free and answers nil, or leaves the key alone and answers what is
/// there. One round trip, atomic in Redis, and cheaper for Redis than running a script.
pub(crate) fn set_if_absent(name: &str, encoded: &[u8], lease: &str) -> Cmd {
    // Sized for its arguments at once: grown argument by argument it reallocated five times.
    let words = "SET".len() + "NX".len() + "GET".len() + "PX".len();
    let mut cmd = Cmd::with_capacity(7, words + name.len() + encoded.len() + lease.len());
    cmd.arg("SET")
        .arg(name)
        .arg(encoded)
        .arg("NX")
        .arg("GET")
        .arg("PX")
        .arg(lease);
    cmd
}

/// Whether Redis refused a command's syntax (before 7.0, `SET` took `NX` and `GET` only apart).
pub(crate) fn refused_syntax(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && error.to_string().contains("syntax error")
}

/// A duration as Redis wants it: whole milliseconds, at least 1.
pub(crate) fn millis(duration: Duration) -> String {
    duration.as_millis().clamp(1, u64::MAX.into()).to_string()
}

pub(crate) fn decode(raw: Vec<u8>) -> Result<Record, StoreError> {
    Ok(Record::decode(Bytes::from(raw))?)
}

/// A record as the `GET` script answers it, with how long it has left.
pub(crate) fn with_time_left(
    found: Option<(Vec<u8>, i64)>,
) -> Result<Option<(Record, Duration)>, StoreError> {
    let Some((raw, pttl)) = found else {
        return Ok(None);
    };
    // PTTL is -1 only for a value someone wrote without an expiry: it never runs out.
    let left = u64::try_from(pttl).map_or(Duration::MAX, Duration::from_millis);
    Ok(Some((decode(raw)?, left)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_goes_out_as_the_set_command_it_names() {
        let sized = set_if_absent("idem:payments:-:k1", b"\x01in-flight", "30000");
        let mut plain = redis::cmd("SET");
        plain.arg("idem:payments:-:k1").arg(&b"\x01in-flight"[..]);
        plain.arg("NX").arg("GET").arg("PX").arg("30000");
        assert_eq!(sized.get_packed_command(), plain.get_packed_command());
        assert!(plain
            .get_packed_command()
            .starts_with(b"*7\r\n$3\r\nSET\r\n"));
    }
}
