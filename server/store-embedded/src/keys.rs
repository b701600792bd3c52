//! Order-preserving keys and a small value codec for the embedded store.
//!
//! A key is a table tag followed by its components, each encoded so that byte order is the
//! order Cassandra sorts them in: signed integers big-endian with the sign bit flipped (so
//! `i64::MIN` sorts first, as Murmur3 tokens do), strings with `0x00` escaped as `0x00 0xFF`
//! and closed by `0x00 0x00` (so "a" < "a\0" < "ab", and a string never runs into the next
//! component). A partition is then a key prefix, and a whole-partition delete is one range.
//!
//! Both decoders are total: a short or malformed buffer is an `Internal` error, never a panic.

use rebound_store::{StoreError, StoreResult};

/// Table tags: the first byte of every key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Table {
    Days = 1,
    Windows = 2,
    Instances = 3,
    Buckets = 4,
    Pointers = 5,
    State = 6,
    CancelCell = 7,
    SucceededCell = 8,
    DeadLetters = 9,
    Leases = 10,
    Members = 11,
    LowWater = 12,
    Services = 13,
    Meta = 14,
    Holds = 15,
    Probes = 16,
    Finished = 17,
}

/// A key under construction (or a partition prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl Key {
    /// A key of `table` in the namespace (region, cluster).
    pub fn ns(table: Table, region: &str, cluster: &str) -> Self {
        Key(vec![table as u8]).str(region).str(cluster)
    }

    /// A key with no table tag (the expiry index's).
    pub fn empty() -> Self {
        Key(Vec::new())
    }

    pub fn str(mut self, s: &str) -> Self {
        for &b in s.as_bytes() {
            self.0.push(b);
            if b == 0 {
                self.0.push(0xFF);
            }
        }
        self.0.extend_from_slice(&[0, 0]);
        self
    }

    pub fn i64(mut self, v: i64) -> Self {
        self.0
            .extend_from_slice(&((v as u64) ^ (1 << 63)).to_be_bytes());
        self
    }

    pub fn i32(mut self, v: i32) -> Self {
        self.0
            .extend_from_slice(&((v as u32) ^ (1 << 31)).to_be_bytes());
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The first key after every key that starts with this one: the exclusive end of the
    /// partition this key is the prefix of. None when there is none (all 0xFF).
    pub fn prefix_end(&self) -> Option<Vec<u8>> {
        let mut end = self.0.clone();
        while let Some(last) = end.pop() {
            if last < 0xFF {
                end.push(last + 1);
                return Some(end);
            }
        }
        None
    }
}

/// Reads the components of a key back, after a known prefix.
#[derive(Debug)]
pub struct KeyReader<'a> {
    rest: &'a [u8],
}

fn bad(what: &str) -> StoreError {
    StoreError::Internal(format!("embedded store: malformed {what}"))
}

impl<'a> KeyReader<'a> {
    /// Reads `key` after its first `skip` bytes (a prefix already known).
    pub fn after(key: &'a [u8], skip: usize) -> StoreResult<Self> {
        key.get(skip..)
            .map(|rest| KeyReader { rest })
            .ok_or_else(|| bad("key"))
    }

    fn take<const N: usize>(&mut self) -> StoreResult<[u8; N]> {
        let (head, rest) = self.rest.split_at_checked(N).ok_or_else(|| bad("key"))?;
        self.rest = rest;
        head.try_into().map_err(|_| bad("key"))
    }

    pub fn i64(&mut self) -> StoreResult<i64> {
        Ok((u64::from_be_bytes(self.take()?) ^ (1 << 63)) as i64)
    }

    pub fn i32(&mut self) -> StoreResult<i32> {
        Ok((u32::from_be_bytes(self.take()?) ^ (1 << 31)) as i32)
    }

    pub fn u32(&mut self) -> StoreResult<u32> {
        Ok(u32::from_be_bytes(self.take()?))
    }

    pub fn str(&mut self) -> StoreResult<String> {
        let mut out = Vec::new();
        let mut i = 0;
        loop {
            match (self.rest.get(i), self.rest.get(i + 1)) {
                (Some(0), Some(0)) => {
                    self.rest = &self.rest[i + 2..];
                    return String::from_utf8(out).map_err(|_| bad("key string"));
                }
                (Some(0), Some(0xFF)) => {
                    out.push(0);
                    i += 2;
                }
                (Some(&b), _) if b != 0 => {
                    out.push(b);
                    i += 1;
                }
                _ => return Err(bad("key string")),
            }
        }
    }
}

/// A value under construction: fixed-width integers and length-prefixed bytes.
#[derive(Debug, Default)]
pub struct Enc(Vec<u8>);

impl Enc {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn bool(mut self, v: bool) -> Self {
        self.0.push(u8::from(v));
        self
    }

    pub fn opt_i64(self, v: Option<i64>) -> Self {
        match v {
            Some(v) => self.bool(true).i64(v),
            None => self.bool(false),
        }
    }

    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.0
            .extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
        self.0.extend_from_slice(b);
        self
    }

    pub fn str(self, s: &str) -> Self {
        self.bytes(s.as_bytes())
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a value written by `Enc`, in the same order.
#[derive(Debug)]
pub struct Dec<'a> {
    rest: &'a [u8],
}

impl<'a> Dec<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Dec { rest: bytes }
    }

    fn take(&mut self, n: usize) -> StoreResult<&'a [u8]> {
        let (head, rest) = self.rest.split_at_checked(n).ok_or_else(|| bad("value"))?;
        self.rest = rest;
        Ok(head)
    }

    pub fn i64(&mut self) -> StoreResult<i64> {
        let b = self.take(8)?;
        Ok(i64::from_be_bytes(b.try_into().map_err(|_| bad("value"))?))
    }

    pub fn u32(&mut self) -> StoreResult<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes(b.try_into().map_err(|_| bad("value"))?))
    }

    pub fn bool(&mut self) -> StoreResult<bool> {
        Ok(self.take(1)?[0] != 0)
    }

    pub fn opt_i64(&mut self) -> StoreResult<Option<i64>> {
        Ok(if self.bool()? {
            Some(self.i64()?)
        } else {
            None
        })
    }

    pub fn bytes(&mut self) -> StoreResult<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    pub fn str(&mut self) -> StoreResult<String> {
        String::from_utf8(self.bytes()?).map_err(|_| bad("value string"))
    }
    /// Whether everything has been read (a value of an older layout may end early).
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn key_order_is_component_order(a: (i64, String, i32), b: (i64, String, i32)) {
            let ka = Key(vec![]).i64(a.0).str(&a.1).i32(a.2);
            let kb = Key(vec![]).i64(b.0).str(&b.1).i32(b.2);
            prop_assert_eq!(ka.as_bytes().cmp(kb.as_bytes()), (a.0, a.1.as_bytes(), a.2).cmp(&(b.0, b.1.as_bytes(), b.2)));
        }

        #[test]
        fn keys_read_back(t: i64, s: String, d: i32, w: u32) {
            let k = Key(vec![7]).i64(t).str(&s).i32(d).u32(w);
            let mut r = KeyReader::after(k.as_bytes(), 1).unwrap();
            prop_assert_eq!(r.i64().unwrap(), t);
            prop_assert_eq!(r.str().unwrap(), s);
            prop_assert_eq!(r.i32().unwrap(), d);
            prop_assert_eq!(r.u32().unwrap(), w);
        }

        #[test]
        fn decoders_are_total(bytes: Vec<u8>) {
            let mut r = KeyReader::after(&bytes, 0).unwrap();
            let _ = r.str();
            let _ = r.i64();
            let mut d = Dec::new(&bytes);
            let _ = d.opt_i64();
            let _ = d.str();
            let _ = d.bytes();
            let _ = d.u32();
        }

        #[test]
        fn a_prefix_end_bounds_every_extension(p: Vec<u8>, tail: Vec<u8>) {
            let k = Key(p.clone());
            let mut longer = p.clone();
            longer.extend_from_slice(&tail);
            if let Some(end) = k.prefix_end() {
                prop_assert!(longer < end);
                prop_assert!(p <= longer);
            }
        }
    }
}
