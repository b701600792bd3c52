//! Dependency holds: one partition per namespace, a row per dependency, written whole with
//! its expiry (as the Cassandra table's `USING TTL`); and the probe that follows each hold's
//! end, a row per (dependency, hold end) claimed inside one write transaction (redb runs one at
//! a time), as Cassandra's lightweight transactions claim it.

use async_trait::async_trait;

use super::{
    expiry,
    keys::{Dec, Enc, KeyReader, Table},
    EmbeddedStore,
};
use rebound_store::{HoldRow, HoldStore, ProbeClaim, ProbeRow, StoreResult};

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

fn encode_probe(p: &ProbeRow) -> Vec<u8> {
    Enc::new()
        .str(&p.owner)
        .i64(p.claimed_at_ms)
        .i64(p.answered_at_ms)
        .into_bytes()
}

fn decode_probe(v: &[u8]) -> StoreResult<ProbeRow> {
    let mut d = Dec::new(v);
    Ok(ProbeRow {
        owner: d.str()?,
        claimed_at_ms: d.i64()?,
        answered_at_ms: d.i64()?,
    })
}

#[async_trait]
impl HoldStore for EmbeddedStore {
    async fn claim_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        now_ms: i64,
        stale_before_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<ProbeClaim> {
        let key = self.key(Table::Probes).str(dependency).i64(until_ms);
        let owner = owner.to_string();
        self.blocking(move |i| {
            i.write(|w| {
                if let Some(v) = w.get(key.as_bytes())? {
                    let current = decode_probe(&v)?;
                    // Answered: nobody probes again, its owner included.
                    if current.answered_at_ms != 0 {
                        return Ok(ProbeClaim::Lost(current));
                    }
                    if current.owner == owner {
                        return Ok(ProbeClaim::Won);
                    }
                    if current.claimed_at_ms >= stale_before_ms {
                        return Ok(ProbeClaim::Lost(current));
                    }
                }
                let row = ProbeRow {
                    owner,
                    claimed_at_ms: now_ms,
                    answered_at_ms: 0,
                };
                let exp = expiry(w.now_ms, Some(ttl_seconds.max(1)));
                w.put(key.as_bytes(), &encode_probe(&row), exp)?;
                Ok(ProbeClaim::Won)
            })
        })
        .await
    }

    async fn answer_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        answered_at_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<bool> {
        let key = self.key(Table::Probes).str(dependency).i64(until_ms);
        let owner = owner.to_string();
        self.blocking(move |i| {
            i.write(|w| {
                let Some(v) = w.get(key.as_bytes())? else {
                    return Ok(false);
                };
                let mut row = decode_probe(&v)?;
                if row.owner != owner {
                    return Ok(false);
                }
                row.answered_at_ms = answered_at_ms;
                let exp = expiry(w.now_ms, Some(ttl_seconds.max(1)));
                w.put(key.as_bytes(), &encode_probe(&row), exp)?;
                Ok(true)
            })
        })
        .await
    }

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
