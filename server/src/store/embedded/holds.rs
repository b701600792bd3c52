//! Dependency holds: one partition per namespace, a row per dependency, written whole with
//! its expiry (as the Cassandra table's `USING TTL`).

use async_trait::async_trait;

use super::{
    expiry,
    keys::{Dec, Enc, KeyReader, Table},
    EmbeddedStore,
};
use crate::store::{HoldRow, HoldStore, StoreResult};

fn encode(h: &HoldRow) -> Vec<u8> {
    Enc::new()
        .i64(h.until_ms)
        .str(&h.reason)
        .i64(h.held_at_ms)
        .str(&h.source)
        .u32(h.renewals)
        .into_bytes()
}

fn decode(dependency: String, v: &[u8]) -> StoreResult<HoldRow> {
    let mut d = Dec::new(v);
    Ok(HoldRow {
        dependency,
        until_ms: d.i64()?,
        reason: d.str()?,
        held_at_ms: d.i64()?,
        source: d.str()?,
        renewals: d.u32()?,
    })
}

#[async_trait]
impl HoldStore for EmbeddedStore {
    async fn put_hold(&self, h: &HoldRow, ttl_seconds: u32) -> StoreResult<()> {
        let key = self.key(Table::Holds).str(&h.dependency);
        let value = encode(h);
        self.blocking(move |i| {
            i.write(|w| {
                let exp = expiry(w.now_ms, Some(ttl_seconds.max(1)));
                w.put(key.as_bytes(), &value, exp)
            })
        })
        .await
    }

    async fn list_holds(&self) -> StoreResult<Vec<HoldRow>> {
        let prefix = self.key(Table::Holds);
        let n = prefix.as_bytes().len();
        self.scan_partition(prefix)
            .await?
            .iter()
            .map(|(k, v)| decode(KeyReader::after(k, n)?.str()?, v))
            .collect()
    }
}
