//! A record as the log stores it: its absolute expiry (unix milliseconds, 8 bytes big endian)
//! followed by `Record::encode()`. Keeping the expiry inside the value means one read answers
//! both "is there a record?" and "is it still alive?", and the two can never disagree. The
//! layout is the previous release's, so its records convert as they are.

const EXPIRY_LEN: usize = 8;

/// A stored value with room for its expiry, which is stamped when the write is applied.
pub(super) fn unstamped(record: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(EXPIRY_LEN + record.len());
    value.extend_from_slice(&[0; EXPIRY_LEN]);
    value.extend_from_slice(record);
    value
}

pub(super) fn stamp(value: &mut [u8], expiry: u64) {
    value[..EXPIRY_LEN].copy_from_slice(&expiry.to_be_bytes());
}

/// The expiry of a value; a value too short to hold one counts as long expired.
pub(super) fn expiry(value: &[u8]) -> u64 {
    value
        .get(..EXPIRY_LEN)
        .and_then(|raw| raw.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// The encoded record inside a value.
pub(super) fn record(value: &[u8]) -> &[u8] {
    value.get(EXPIRY_LEN..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_value_gives_back_its_expiry_and_record() {
        let mut value = unstamped(b"record");
        stamp(&mut value, 1_234_567);
        assert_eq!(expiry(&value), 1_234_567);
        assert_eq!(record(&value), b"record");
        assert_eq!(expiry(b"short"), 0);
        assert_eq!(record(b"short"), b"");
    }
}
