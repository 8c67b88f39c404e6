//! CRC-32C (Castagnoli), the checksum of each write-ahead log entry: what storage formats use
//! against torn and flipped bytes (ext4, iSCSI, RocksDB), detecting every burst of up to 32
//! bits. The `crc32c` crate computes it with the CPU's CRC32 instruction where there is one.

/// The running checksum of a sequence of byte slices.
#[derive(Clone, Copy)]
pub(super) struct Crc32c(u32);

impl Crc32c {
    pub(super) fn new() -> Self {
        Self(0)
    }

    pub(super) fn update(self, bytes: &[u8]) -> Self {
        Self(crc32c::crc32c_append(self.0, bytes))
    }

    pub(super) fn finish(self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Crc32c;

    fn crc(bytes: &[u8]) -> u32 {
        Crc32c::new().update(bytes).finish()
    }

    #[test]
    fn matches_the_published_check_values() {
        // The standard check value, and the iSCSI test vectors (RFC 3720, B.4).
        assert_eq!(crc(b"123456789"), 0xE306_9283);
        assert_eq!(crc(&[0; 32]), 0x8A91_36AA);
        assert_eq!(crc(&[0xFF; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc(&ascending), 0x46DD_794E);
    }

    #[test]
    fn pieces_give_the_checksum_of_the_whole() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let (head, tail) = bytes.split_at(333);
        assert_eq!(
            Crc32c::new().update(head).update(tail).finish(),
            crc(&bytes)
        );
    }
}
