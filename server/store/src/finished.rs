//! The finished log's rows as the contract carries them (`StateStore::list_finished`): its
//! places and entries, which statuses it logs and under which second, and the cell a chunk
//! of entries is stored in.

use crate::{Status, StoreError, StoreResult, TxState};

/// A place in the finished log: its entries are ordered by (second, chunk, index); a chunk is
/// one write's entries of one second, numbered by the store (no order among the chunks of a
/// second is promised but that it stays the same between reads). `FinishedAt::start(s)`
/// is before every entry of second `s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FinishedAt {
    pub second: i64,
    pub chunk: i64,
    pub index: u32,
}

impl FinishedAt {
    pub fn start(second: i64) -> Self {
        FinishedAt {
            second,
            chunk: i64::MIN,
            index: 0,
        }
    }
}

/// An entry of the finished log: a state row written SUCCEEDED or CANCELLED, under the second
/// of its `updated_at_ms`, with the generation it finished at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedEntry {
    pub at: FinishedAt,
    pub transaction_id: String,
    pub generation: i64,
}

/// Whether a status is logged in the finished log.
pub fn is_logged_finished(status: Status) -> bool {
    matches!(status, Status::Succeeded | Status::Cancelled)
}

/// The second a finished row is logged under.
pub fn finished_second(s: &TxState) -> i64 {
    s.updated_at_ms.div_euclid(1000)
}

/// One read of the finished log: entries in log order, and where the next read starts
/// (`None`: the log was read to the end asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedPage {
    pub entries: Vec<FinishedEntry>,
    /// The next read lists the entries at or after this place.
    pub next: Option<FinishedAt>,
}

/// The entries of one chunk of the finished log, encoded as a chunk's cell holds them: per
/// entry the transaction id's length (u16, big-endian), its bytes, the generation (i64).
pub fn encode_finished_chunk<'a>(entries: impl Iterator<Item = (&'a str, i64)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, generation) in entries {
        let bytes = id.as_bytes();
        let n = bytes.len().min(usize::from(u16::MAX));
        out.extend_from_slice(&(n as u16).to_be_bytes());
        out.extend_from_slice(&bytes[..n]);
        out.extend_from_slice(&generation.to_be_bytes());
    }
    out
}

/// Decodes a chunk's cell (`encode_finished_chunk`). Total: a malformed cell is an error.
pub fn decode_finished_chunk(mut cell: &[u8]) -> StoreResult<Vec<(String, i64)>> {
    let bad = || StoreError::Internal("malformed finished-log chunk".to_string());
    let mut out = Vec::new();
    while !cell.is_empty() {
        let (len, rest) = cell.split_first_chunk::<2>().ok_or_else(bad)?;
        let n = usize::from(u16::from_be_bytes(*len));
        let (id, rest) = rest.split_at_checked(n).ok_or_else(bad)?;
        let (generation, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let id = std::str::from_utf8(id).map_err(|_| bad())?;
        out.push((id.to_string(), i64::from_be_bytes(*generation)));
        cell = rest;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{decode_finished_chunk, encode_finished_chunk};

    proptest! {
        #[test]
        fn chunks_round_trip(entries in proptest::collection::vec(("\\PC{0,40}", any::<i64>()), 0..20)) {
            let cell = encode_finished_chunk(entries.iter().map(|(id, g)| (id.as_str(), *g)));
            prop_assert_eq!(decode_finished_chunk(&cell).unwrap(), entries);
        }

        #[test]
        fn decoding_is_total(cell in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_finished_chunk(&cell);
        }
    }
}
