//! CRC-32C (Castagnoli), the checksum of each write-ahead log entry.
//!
//! Computed eight bytes at a time from tables built at compile time ("slicing by 8"), which
//! keeps it at a few hundred nanoseconds for a typical batch without a dependency or
//! architecture-specific code. CRC-32C rather than a hash: it is what storage formats use for
//! torn and flipped bytes (ext4, iSCSI, RocksDB), and it detects every burst of up to 32 bits.

/// The reflected Castagnoli polynomial.
const POLYNOMIAL: u32 = 0x82F6_3B78;

const TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut tables = [[0u32; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLYNOMIAL
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut slice = 1;
    while slice < 8 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[slice - 1][byte];
            tables[slice][byte] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            byte += 1;
        }
        slice += 1;
    }
    tables
}

/// The running checksum of a sequence of byte slices.
#[derive(Clone, Copy)]
pub(super) struct Crc32c(u32);

impl Crc32c {
    pub(super) fn new() -> Self {
        Self(!0)
    }

    pub(super) fn update(mut self, bytes: &[u8]) -> Self {
        let mut crc = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let low = crc ^ u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            crc = TABLES[7][(low & 0xFF) as usize]
                ^ TABLES[6][((low >> 8) & 0xFF) as usize]
                ^ TABLES[5][((low >> 16) & 0xFF) as usize]
                ^ TABLES[4][(low >> 24) as usize]
                ^ TABLES[3][chunk[4] as usize]
                ^ TABLES[2][chunk[5] as usize]
                ^ TABLES[1][chunk[6] as usize]
                ^ TABLES[0][chunk[7] as usize];
        }
        for byte in chunks.remainder() {
            crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(*byte)) & 0xFF) as usize];
        }
        self.0 = crc;
        self
    }

    pub(super) fn finish(self) -> u32 {
        !self.0
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
