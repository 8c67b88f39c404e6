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

    /// What the `record_decode` fuzz target found, read as values of this store: any bytes
    /// come apart into an expiry and a record without panicking, and a value long enough to
    /// hold an expiry is put back together byte for byte.
    #[test]
    fn every_kept_fuzz_input_comes_apart_and_back_together() {
        let corpus = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/record_decode"
        );
        let mut inputs = 0;
        for entry in std::fs::read_dir(corpus).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            let (at, kept) = (expiry(&data), record(&data));
            if data.len() >= EXPIRY_LEN {
                let mut again = unstamped(kept);
                stamp(&mut again, at);
                assert_eq!(again, data);
            } else {
                assert_eq!((at, kept), (0, &b""[..]), "too short for an expiry");
            }
            inputs += 1;
        }
        assert!(inputs > 0, "{corpus} holds no inputs");
    }

    proptest::proptest! {
        #[test]
        fn any_record_and_expiry_survive_a_value(at: u64, kept: Vec<u8>) {
            let mut value = unstamped(&kept);
            stamp(&mut value, at);
            proptest::prop_assert_eq!(expiry(&value), at);
            proptest::prop_assert_eq!(record(&value), &kept[..]);
        }
    }
}
