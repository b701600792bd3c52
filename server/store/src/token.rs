//! Murmur3 tokens as Cassandra computes them, so that `instance_token` splits the work exactly
//! like the lease ring's token ranges (docs/architecture.md, "Data model": instances).

/// Token of a single-column partition key.
pub fn token_of(bytes: &[u8]) -> i64 {
    murmur3_token(bytes)
}

/// Token of the composite key `(service, instance)`, encoded as Cassandra encodes composite
/// partition keys: for each part a big-endian u16 length, the bytes, and a zero byte.
pub fn instance_token(service: &str, instance: &str) -> i64 {
    let mut key = Vec::with_capacity(service.len() + instance.len() + 6);
    for part in [service.as_bytes(), instance.as_bytes()] {
        let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
        key.extend_from_slice(&len.to_be_bytes());
        key.extend_from_slice(&part[..usize::from(len)]);
        key.push(0);
    }
    murmur3_token(&key)
}

/// Cassandra's `Murmur3Partitioner` token: the first half of MurmurHash3 x64 128 with seed 0,
/// as Cassandra's Java port computes it (the bytes of the tail are sign-extended), with
/// `i64::MIN` moved to `i64::MAX` (the minimum token is reserved).
fn murmur3_token(key: &[u8]) -> i64 {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let fmix = |mut k: u64| {
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    };
    let (mut h1, mut h2) = (0u64, 0u64);
    let mut blocks = key.chunks_exact(16);
    for b in &mut blocks {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let (k1, k2) = (word(0), word(8));
        h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    // Java's `(long) byte`: sign-extended.
    let byte = |i: usize| tail[i] as i8 as i64 as u64;
    let (mut k1, mut k2) = (0u64, 0u64);
    for i in (8..tail.len()).rev() {
        k2 ^= byte(i) << ((i - 8) * 8);
    }
    for i in (0..tail.len().min(8)).rev() {
        k1 ^= byte(i) << (i * 8);
    }
    if tail.len() > 8 {
        h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    }
    if !tail.is_empty() {
        h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    }
    let len = key.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1 = h1.wrapping_add(h2);
    match h1 as i64 {
        i64::MIN => i64::MAX,
        t => t,
    }
}

/// The lane of a transaction: stable across processes, so re-enqueues of one transaction id
/// from any node land in the same lane number.
pub fn lane_of(transaction_id: &str, lanes: u32) -> u32 {
    (token_of(transaction_id.as_bytes()) as u64 % u64::from(lanes.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cassandra_vectors() {
        assert_eq!(token_of(b"test"), -6_017_608_668_500_074_083);
        assert_eq!(token_of(b"123"), -7_468_325_962_851_647_638);
        assert_eq!(token_of(&[0xfe; 8]), -8_927_430_733_708_461_935);
    }

    #[test]
    fn lanes_are_in_range_and_stable() {
        for id in ["a", "tx-1", "order/42", ""] {
            let l = lane_of(id, 8);
            assert!(l < 8);
            assert_eq!(l, lane_of(id, 8));
        }
    }
}
