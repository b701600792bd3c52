//! Tiers 1-5 and the low water, as the Cassandra tables lay them out: a partition is a key
//! prefix, a clustering order is byte order.

use async_trait::async_trait;

use super::{
    keys::{Dec, Enc, Key, KeyReader, Table},
    EmbeddedStore,
};
use rebound_store::{
    window::WindowId, DirectoryStore, InstanceRow, Location, Pointer, StoreResult, TokenRange,
};

impl EmbeddedStore {
    fn window_key(&self, table: Table, w: WindowId) -> Key {
        self.key(table).i32(w.day).u32(w.index)
    }

    fn bucket_partition(&self, w: WindowId, service: &str, instance: &str) -> Key {
        self.window_key(Table::Buckets, w)
            .str(service)
            .str(instance)
    }

    fn pointer_partition(&self, service: &str, loc: &Location) -> Key {
        self.window_key(Table::Pointers, loc.window)
            .str(service)
            .str(&loc.instance)
            .u32(loc.bucket)
    }

    fn pointer_payload(p: &Pointer) -> Vec<u8> {
        Enc::new()
            .i64(p.generation)
            .u32(p.attempt)
            .i64(p.enqueued_at_ms)
            .opt_i64(p.due_at_ms)
            .into_bytes()
    }
}

fn decode_pointer(prefix_len: usize, key: &[u8], value: &[u8]) -> StoreResult<Pointer> {
    let transaction_id = KeyReader::after(key, prefix_len)?.str()?;
    let mut d = Dec::new(value);
    Ok(Pointer {
        transaction_id,
        generation: d.i64()?,
        attempt: d.u32()?,
        enqueued_at_ms: d.i64()?,
        // Pointers written before the due time was kept end here.
        due_at_ms: if d.is_empty() { None } else { d.opt_i64()? },
    })
}

#[async_trait]
impl DirectoryStore for EmbeddedStore {
    async fn put_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.put_row(self.key(Table::Days).i32(year).i32(day), Vec::new(), None)
            .await
    }

    async fn put_window(&self, w: WindowId) -> StoreResult<()> {
        self.put_row(self.window_key(Table::Windows, w), Vec::new(), None)
            .await
    }

    async fn put_instance(&self, w: WindowId, row: &InstanceRow) -> StoreResult<()> {
        let key = self
            .window_key(Table::Instances, w)
            .i64(row.instance_token)
            .str(&row.service)
            .str(&row.instance);
        self.put_row(key, Vec::new(), None).await
    }

    async fn put_bucket(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        let key = self.bucket_partition(w, service, instance).u32(bucket);
        self.put_row(key, Vec::new(), None).await
    }

    async fn put_pointer(&self, service: &str, loc: &Location, p: &Pointer) -> StoreResult<()> {
        let key = self.pointer_partition(service, loc).str(&p.transaction_id);
        self.put_row(key, Self::pointer_payload(p), None).await
    }

    async fn put_pointers(
        &self,
        service: &str,
        loc: &Location,
        pointers: &[Pointer],
    ) -> StoreResult<()> {
        let part = self.pointer_partition(service, loc);
        let rows: Vec<(Vec<u8>, Vec<u8>)> = pointers
            .iter()
            .map(|p| {
                (
                    part.clone().str(&p.transaction_id).into_bytes(),
                    Self::pointer_payload(p),
                )
            })
            .collect();
        self.blocking(move |i| {
            i.write(|w| {
                for (k, v) in &rows {
                    w.put(k, v, super::NEVER)?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn list_years(&self) -> StoreResult<Vec<i32>> {
        let prefix = self.key(Table::Days);
        let n = prefix.as_bytes().len();
        let mut years = Vec::new();
        for (k, _) in self.scan_partition(prefix).await? {
            let y = KeyReader::after(&k, n)?.i32()?;
            if years.last() != Some(&y) {
                years.push(y);
            }
        }
        Ok(years)
    }

    async fn list_days(&self, year: i32) -> StoreResult<Vec<i32>> {
        let prefix = self.key(Table::Days).i32(year);
        let n = prefix.as_bytes().len();
        self.scan_partition(prefix)
            .await?
            .iter()
            .map(|(k, _)| KeyReader::after(k, n)?.i32())
            .collect()
    }

    async fn list_instances(&self, w: WindowId, r: TokenRange) -> StoreResult<Vec<InstanceRow>> {
        if r.start > r.end {
            return Ok(Vec::new());
        }
        let part = self.window_key(Table::Instances, w);
        let n = part.as_bytes().len();
        let from = part.clone().i64(r.start);
        let to = if r.end == i64::MAX {
            part.prefix_end()
        } else {
            Some(part.i64(r.end + 1).into_bytes())
        };
        let rows = self
            .blocking(move |i| i.scan(from.as_bytes(), to.as_deref(), usize::MAX))
            .await?;
        rows.iter()
            .map(|(k, _)| {
                let mut r = KeyReader::after(k, n)?;
                Ok(InstanceRow {
                    instance_token: r.i64()?,
                    service: r.str()?,
                    instance: r.str()?,
                })
            })
            .collect()
    }

    async fn list_buckets(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
    ) -> StoreResult<Vec<u32>> {
        let prefix = self.bucket_partition(w, service, instance);
        let n = prefix.as_bytes().len();
        self.scan_partition(prefix)
            .await?
            .iter()
            .map(|(k, _)| KeyReader::after(k, n)?.u32())
            .collect()
    }

    async fn stream_pointers(
        &self,
        service: &str,
        loc: &Location,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<Pointer>>> {
        let prefix = self.pointer_partition(service, loc);
        let n = prefix.as_bytes().len();
        Ok(self.stream_partition(prefix, move |k, v| decode_pointer(n, k, v)))
    }

    async fn delete_pointer_partition(&self, service: &str, loc: &Location) -> StoreResult<()> {
        self.delete_partition(self.pointer_partition(service, loc))
            .await
    }

    async fn delete_late_pointer(
        &self,
        service: &str,
        loc: &Location,
        transaction_id: &str,
    ) -> StoreResult<()> {
        self.delete_row(self.pointer_partition(service, loc).str(transaction_id))
            .await
    }

    async fn delete_bucket(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        self.delete_row(self.bucket_partition(w, service, instance).u32(bucket))
            .await
    }

    async fn delete_instance(&self, w: WindowId, row: &InstanceRow) -> StoreResult<()> {
        let key = self
            .window_key(Table::Instances, w)
            .i64(row.instance_token)
            .str(&row.service)
            .str(&row.instance);
        self.delete_row(key).await
    }

    async fn window_has_instances(&self, w: WindowId) -> StoreResult<bool> {
        let part = self.window_key(Table::Instances, w);
        let end = part.prefix_end();
        let rows = self
            .blocking(move |i| i.scan(part.as_bytes(), end.as_deref(), 1))
            .await?;
        Ok(!rows.is_empty())
    }

    async fn delete_window_instances(&self, w: WindowId) -> StoreResult<()> {
        self.delete_partition(self.window_key(Table::Instances, w))
            .await
    }

    async fn delete_window(&self, w: WindowId) -> StoreResult<()> {
        self.delete_row(self.window_key(Table::Windows, w)).await
    }

    async fn delete_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.delete_row(self.key(Table::Days).i32(year).i32(day))
            .await
    }

    async fn count_pointers(&self, service: &str, loc: &Location) -> StoreResult<u64> {
        Ok(self
            .scan_partition(self.pointer_partition(service, loc))
            .await?
            .len() as u64)
    }

    async fn day_listed(&self, year: i32, day: i32) -> StoreResult<bool> {
        Ok(self
            .get_row(self.key(Table::Days).i32(year).i32(day))
            .await?
            .is_some())
    }

    async fn window_listed(&self, w: WindowId) -> StoreResult<bool> {
        Ok(self
            .get_row(self.window_key(Table::Windows, w))
            .await?
            .is_some())
    }

    async fn low_water(&self, day: i32) -> StoreResult<u32> {
        match self.get_row(self.key(Table::LowWater).i32(day)).await? {
            Some(v) => Dec::new(&v).u32(),
            None => Ok(0),
        }
    }

    async fn set_low_water(&self, day: i32, window: u32) -> StoreResult<()> {
        self.put_row(
            self.key(Table::LowWater).i32(day),
            Enc::new().u32(window).into_bytes(),
            None,
        )
        .await
    }

    async fn delete_low_water(&self, day: i32) -> StoreResult<()> {
        self.delete_row(self.key(Table::LowWater).i32(day)).await
    }

    async fn list_windows_from(&self, day: i32, from: u32) -> StoreResult<Vec<u32>> {
        let part = self.key(Table::Windows).i32(day);
        let n = part.as_bytes().len();
        let start = part.clone().u32(from);
        let end = part.prefix_end();
        let rows = self
            .blocking(move |i| i.scan(start.as_bytes(), end.as_deref(), usize::MAX))
            .await?;
        rows.iter()
            .map(|(k, _)| KeyReader::after(k, n)?.u32())
            .collect()
    }
}
