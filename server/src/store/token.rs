//! Murmur3 tokens as Cassandra computes them, so that `instance_token` splits the work exactly
//! like the lease ring's token ranges (docs/architecture.md, "Data model": instances).

use scylla::routing::partitioner::{Murmur3Partitioner, Partitioner, PartitionerHasher};

/// Token of a single-column partition key.
pub fn token_of(bytes: &[u8]) -> i64 {
    Murmur3Partitioner.hash_one(bytes).value()
}

/// Token of the composite key `(service, instance)`, encoded as Cassandra encodes composite
/// partition keys: for each part a big-endian u16 length, the bytes, and a zero byte.
pub fn instance_token(service: &str, instance: &str) -> i64 {
    let mut h = Murmur3Partitioner.build_hasher();
    for part in [service.as_bytes(), instance.as_bytes()] {
        let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
        h.write(&len.to_be_bytes());
        h.write(&part[..usize::from(len)]);
        h.write(&[0]);
    }
    h.finish().value()
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
