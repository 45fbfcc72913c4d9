//! Which partition of a topic holds a message key: the partitioners of
//! librdkafka and of the Java clients, so a reader finds a key where its
//! producer put it.

/// How the producers of a topic chose a message's partition from its key
/// (`query.partitioner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Partitioner {
    /// librdkafka's default (`consistent_random`): CRC-32 of the key
    /// modulo the partition count. `strata topic load` writes with it.
    Consistent,
    /// The Java clients' default (Kafka Streams'): murmur2 of the key,
    /// made positive, modulo the partition count.
    Murmur2,
}

impl Partitioner {
    /// The partition of `partitions` that holds `key`.
    pub fn partition(self, key: &[u8], partitions: usize) -> i32 {
        let n = partitions.max(1) as u32;
        let hash = match self {
            Partitioner::Consistent => crc32fast::hash(key),
            Partitioner::Murmur2 => murmur2(key) & 0x7fff_ffff,
        };
        (hash % n) as i32
    }
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`): 32-bit
/// MurmurHash2 with seed 0x9747b28c, little-endian 4-byte blocks.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h = 0x9747_b28c_u32 ^ data.len() as u32;
    let mut blocks = data.chunks_exact(4);
    for block in blocks.by_ref() {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_is_kafkas() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, want) in cases {
            assert_eq!(
                murmur2(data) as i32,
                want,
                "{}",
                String::from_utf8_lossy(data)
            );
        }
    }
}
