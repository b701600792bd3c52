//! The lease ring and its members. A lease change is a compare-and-set inside one write
//! transaction: redb runs one writer at a time, so of two changes expecting the same epoch
//! exactly one applies, as with Cassandra's LWT.

use async_trait::async_trait;

use super::{
    expiry,
    keys::{Dec, Enc, KeyReader, Table},
    EmbeddedStore, NEVER,
};
use rebound_store::{Cas, LeaseChange, LeaseRow, LeaseStore, Member, StoreResult};

fn encode_lease(l: &LeaseRow) -> Vec<u8> {
    Enc::new()
        .str(&l.owner)
        .i64(l.epoch)
        .i64(l.expires_at_ms)
        .str(&l.address)
        .i64(l.taken_at_ms)
        .i64(l.released_at_ms)
        .i64(l.released_epoch)
        .into_bytes()
}

fn decode_lease(slot: i32, v: &[u8]) -> StoreResult<LeaseRow> {
    let mut d = Dec::new(v);
    Ok(LeaseRow {
        slot,
        owner: d.str()?,
        epoch: d.i64()?,
        expires_at_ms: d.i64()?,
        address: d.str()?,
        taken_at_ms: d.i64()?,
        released_at_ms: d.i64()?,
        released_epoch: d.i64()?,
    })
}

#[async_trait]
impl LeaseStore for EmbeddedStore {
    async fn server_time_ms(&self) -> StoreResult<i64> {
        Ok(self.now_ms())
    }

    async fn heartbeat(&self, m: &Member, ttl_seconds: u32) -> StoreResult<()> {
        let key = self.key(Table::Members).str(&m.node_id);
        let m = m.clone();
        // The write time is the store's clock, as Cassandra's WRITETIME is its own.
        self.blocking(move |i| {
            i.write(|w| {
                let v = Enc::new()
                    .str(&m.address)
                    .i64(m.boot_epoch)
                    .i64(m.heartbeat_at_ms)
                    .i64(w.now_ms)
                    .into_bytes();
                let exp = expiry(w.now_ms, Some(ttl_seconds));
                w.put(key.as_bytes(), &v, exp)
            })
        })
        .await
    }

    async fn list_members(&self) -> StoreResult<Vec<Member>> {
        let prefix = self.key(Table::Members);
        let n = prefix.as_bytes().len();
        self.scan_partition(prefix)
            .await?
            .iter()
            .map(|(k, v)| {
                let mut d = Dec::new(v);
                Ok(Member {
                    node_id: KeyReader::after(k, n)?.str()?,
                    address: d.str()?,
                    boot_epoch: d.i64()?,
                    heartbeat_at_ms: d.i64()?,
                    written_at_ms: d.i64()?,
                })
            })
            .collect()
    }

    async fn read_lease(&self, slot: i32) -> StoreResult<Option<LeaseRow>> {
        self.get_row(self.key(Table::Leases).i32(slot))
            .await?
            .map(|v| decode_lease(slot, &v))
            .transpose()
    }

    async fn peek_leases(&self, slots: &[i32]) -> StoreResult<Vec<LeaseRow>> {
        let mut slots = slots.to_vec();
        // An IN query answers each partition once, in partition order.
        slots.sort_unstable();
        slots.dedup();
        let keys: Vec<(i32, Vec<u8>)> = slots
            .iter()
            .map(|&s| (s, self.key(Table::Leases).i32(s).into_bytes()))
            .collect();
        self.blocking(move |i| {
            let mut out = Vec::new();
            for (slot, k) in &keys {
                if let Some(v) = i.get(k)? {
                    out.push(decode_lease(*slot, &v)?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn create_lease(&self, l: &LeaseRow) -> StoreResult<Cas> {
        let key = self.key(Table::Leases).i32(l.slot);
        // INSERT ... IF NOT EXISTS writes these columns only: no hand-back yet.
        let new = LeaseRow {
            released_at_ms: 0,
            released_epoch: 0,
            ..l.clone()
        };
        self.blocking(move |i| {
            i.write(|w| match w.get(key.as_bytes())? {
                Some(v) => Ok(Cas::Rejected(Some(decode_lease(new.slot, &v)?))),
                None => {
                    w.put(key.as_bytes(), &encode_lease(&new), NEVER)?;
                    Ok(Cas::Applied)
                }
            })
        })
        .await
    }

    async fn replace_lease(
        &self,
        l: &LeaseRow,
        expected_epoch: i64,
        change: LeaseChange,
    ) -> StoreResult<Cas> {
        let key = self.key(Table::Leases).i32(l.slot);
        let l = l.clone();
        self.blocking(move |i| {
            i.write(|w| {
                let Some(v) = w.get(key.as_bytes())? else {
                    return Ok(Cas::Rejected(None));
                };
                let current = decode_lease(l.slot, &v)?;
                if current.epoch != expected_epoch {
                    // As Cassandra answers a failed `IF epoch = ?`: the epoch, nothing else.
                    return Ok(Cas::Rejected(Some(LeaseRow {
                        slot: current.slot,
                        epoch: current.epoch,
                        owner: String::new(),
                        expires_at_ms: 0,
                        address: String::new(),
                        taken_at_ms: 0,
                        released_at_ms: 0,
                        released_epoch: 0,
                    })));
                }
                // The columns each UPDATE sets; the others keep their values.
                let mut next = LeaseRow {
                    owner: l.owner.clone(),
                    epoch: l.epoch,
                    expires_at_ms: l.expires_at_ms,
                    address: l.address.clone(),
                    ..current
                };
                match change {
                    LeaseChange::Renew => {}
                    LeaseChange::Take => next.taken_at_ms = l.taken_at_ms,
                    LeaseChange::Release => {
                        next.released_at_ms = l.released_at_ms;
                        next.released_epoch = l.released_epoch;
                    }
                }
                w.put(key.as_bytes(), &encode_lease(&next), NEVER)?;
                Ok(Cas::Applied)
            })
        })
        .await
    }
}
