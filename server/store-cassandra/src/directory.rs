//! Tiers 1 to 5 of the directory (days, windows, Tier-3 instances, buckets, Tier-5 pointers)
//! and the compactor's low water.

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use scylla::{
    statement::{
        batch::{Batch, BatchType},
        prepared::PreparedStatement,
    },
    value::{CqlDate, CqlTimestamp, MaybeUnset},
};

use super::{
    batchable, cql_date, from_cql_date, map_execution_error, observed, CassandraStore, Prep,
};
use rebound_store::{
    window::WindowId, DirectoryStore, InstanceRow, Location, Pointer, StoreResult, TokenRange,
};

/// The statements of this group, prepared once.
pub(super) struct Statements {
    put_day: PreparedStatement,
    put_window: PreparedStatement,
    put_instance: PreparedStatement,
    put_bucket: PreparedStatement,
    put_pointer: PreparedStatement,
    list_days: PreparedStatement,
    list_years: PreparedStatement,
    list_instances: PreparedStatement,
    list_buckets: PreparedStatement,
    list_pointers: PreparedStatement,
    delete_pointer_partition: PreparedStatement,
    delete_pointer: PreparedStatement,
    delete_bucket: PreparedStatement,
    delete_instance: PreparedStatement,
    any_instance: PreparedStatement,
    delete_window_instances: PreparedStatement,
    delete_window: PreparedStatement,
    delete_day: PreparedStatement,
    get_low_water: PreparedStatement,
    set_low_water: PreparedStatement,
    delete_low_water: PreparedStatement,
    list_windows_from: PreparedStatement,
    count_pointers: PreparedStatement,
    day_listed: PreparedStatement,
    window_listed: PreparedStatement,
}

impl Statements {
    pub(super) async fn prepare(p: &Prep) -> StoreResult<Self> {
        let ks = p.ks();
        Ok(Self {
            put_day: p
                .prepare(format!(
                "INSERT INTO {ks}.days_by_year (region, cluster, year, day) VALUES (?, ?, ?, ?)"
            ))
                .await?,
            put_window: p
                .prepare(format!(
                "INSERT INTO {ks}.windows_by_day (region, cluster, day, window) VALUES (?, ?, ?, ?)"
            ))
                .await?,
            put_instance: p
                .prepare(format!(
                    "INSERT INTO {ks}.instances_by_window \
                 (region, cluster, day, window, instance_token, service, instance) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)"
                ))
                .await?,
            put_bucket: p
                .prepare(format!(
                    "INSERT INTO {ks}.buckets_by_instance \
                 (region, cluster, day, window, service, instance, bucket) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)"
                ))
                .await?,
            put_pointer: p
                .prepare(format!(
                    "INSERT INTO {ks}.retry_transactions_by_bucket \
                 (region, cluster, day, window, service, instance, bucket, transaction_id, \
                  generation, attempt, enqueued_at, due_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ))
                .await?,
            list_days: p
                .prepare(format!(
                "SELECT day FROM {ks}.days_by_year WHERE region = ? AND cluster = ? AND year = ?"
            ))
                .await?,
            // The years that hold a day: one partition key per (ns, year), a handful in all,
            // read by key only (DISTINCT cannot restrict part of a partition key).
            list_years: p
                .prepare(format!(
                    "SELECT DISTINCT region, cluster, year FROM {ks}.days_by_year"
                ))
                .await?,
            list_instances: p
                .prepare(format!(
                    "SELECT instance_token, service, instance FROM {ks}.instances_by_window \
                 WHERE region = ? AND cluster = ? AND day = ? AND window = ? \
                 AND instance_token >= ? AND instance_token <= ?"
                ))
                .await?,
            list_buckets: p
                .prepare(format!(
                    "SELECT bucket FROM {ks}.buckets_by_instance WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ?"
                ))
                .await?,
            list_pointers: p
                .prepare(format!(
                    "SELECT transaction_id, generation, attempt, enqueued_at, due_at \
                 FROM {ks}.retry_transactions_by_bucket WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ?"
                ))
                .await?,
            delete_pointer_partition: p
                .prepare(format!(
                "DELETE FROM {ks}.retry_transactions_by_bucket WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ?"
            ))
                .await?,
            delete_pointer: p
                .prepare(format!(
                "DELETE FROM {ks}.retry_transactions_by_bucket WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ? \
                 AND transaction_id = ?"
            ))
                .await?,
            delete_bucket: p
                .prepare(format!(
                    "DELETE FROM {ks}.buckets_by_instance WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ?"
                ))
                .await?,
            delete_instance: p
                .prepare(format!(
                "DELETE FROM {ks}.instances_by_window WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND instance_token = ? AND service = ? AND instance = ?"
            ))
                .await?,
            any_instance: p
                .prepare(format!(
                    "SELECT instance_token FROM {ks}.instances_by_window WHERE region = ? \
                 AND cluster = ? AND day = ? AND window = ? LIMIT 1"
                ))
                .await?,
            delete_window_instances: p
                .prepare(format!(
                    "DELETE FROM {ks}.instances_by_window WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ?"
                ))
                .await?,
            delete_window: p
                .prepare(format!(
                    "DELETE FROM {ks}.windows_by_day WHERE region = ? AND cluster = ? AND day = ? \
                 AND window = ?"
                ))
                .await?,
            delete_day: p
                .prepare(format!(
                    "DELETE FROM {ks}.days_by_year WHERE region = ? AND cluster = ? AND year = ? \
                 AND day = ?"
                ))
                .await?,
            get_low_water: p
                .prepare(format!(
                "SELECT low_window FROM {ks}.window_low_water WHERE region = ? AND cluster = ? \
                 AND day = ?"
            ))
                .await?,
            set_low_water: p
                .prepare(format!(
                    "INSERT INTO {ks}.window_low_water (region, cluster, day, low_window) \
                 VALUES (?, ?, ?, ?)"
                ))
                .await?,
            delete_low_water: p
                .prepare(format!(
                "DELETE FROM {ks}.window_low_water WHERE region = ? AND cluster = ? AND day = ?"
            ))
                .await?,
            list_windows_from: p
                .prepare(format!(
                    "SELECT window FROM {ks}.windows_by_day WHERE region = ? AND cluster = ? \
                 AND day = ? AND window >= ?"
                ))
                .await?,
            count_pointers: p
                .prepare(format!(
                    "SELECT COUNT(*) FROM {ks}.retry_transactions_by_bucket WHERE region = ? \
                 AND cluster = ? AND day = ? AND window = ? AND service = ? AND instance = ? \
                 AND bucket = ?"
                ))
                .await?,
            day_listed: p
                .prepare(format!(
                "SELECT day FROM {ks}.days_by_year WHERE region = ? AND cluster = ? AND year = ? \
                 AND day = ?"
            ))
                .await?,
            window_listed: p
                .prepare(format!(
                    "SELECT window FROM {ks}.windows_by_day WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ?"
                ))
                .await?,
        })
    }
}

impl CassandraStore {
    /// Pointers, each with its service and bucket, as one unlogged batch (one partition, or
    /// the few that `put_pointer_groups` packs).
    async fn pointer_batch(&self, rows: Vec<(&str, &Location, &Pointer)>) -> StoreResult<()> {
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        let mut values = Vec::with_capacity(rows.len());
        for (service, loc, p) in rows {
            batch.append_statement(self.directory.put_pointer.clone());
            values.push((
                &self.region,
                &self.cluster,
                cql_date(loc.window.day),
                loc.window.index as i32,
                service,
                &loc.instance,
                loc.bucket as i32,
                &p.transaction_id,
                p.generation,
                p.attempt as i32,
                CqlTimestamp(p.enqueued_at_ms),
                // Never a null (a cell tombstone): a pointer without a due time leaves it unset.
                p.due_at_ms
                    .map_or(MaybeUnset::Unset, |t| MaybeUnset::Set(CqlTimestamp(t))),
            ));
        }
        observed(
            self.directory.put_pointer.get_statement(),
            self.session.batch(&batch, values),
        )
        .await
        .map(|_| ())
        .map_err(|e| map_execution_error(&e))
    }
}

#[async_trait]
impl DirectoryStore for CassandraStore {
    async fn put_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.exec(
            &self.directory.put_day,
            (&self.region, &self.cluster, year, cql_date(day)),
        )
        .await
    }

    async fn put_window(&self, w: WindowId) -> StoreResult<()> {
        self.exec(
            &self.directory.put_window,
            (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
        )
        .await
    }

    async fn put_instance(&self, w: WindowId, row: &InstanceRow) -> StoreResult<()> {
        self.exec(
            &self.directory.put_instance,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                row.instance_token,
                &row.service,
                &row.instance,
            ),
        )
        .await
    }

    async fn put_bucket(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        self.exec(
            &self.directory.put_bucket,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                service,
                instance,
                bucket as i32,
            ),
        )
        .await
    }

    async fn put_pointer(&self, service: &str, loc: &Location, p: &Pointer) -> StoreResult<()> {
        self.exec(
            &self.directory.put_pointer,
            (
                &self.region,
                &self.cluster,
                cql_date(loc.window.day),
                loc.window.index as i32,
                service,
                &loc.instance,
                loc.bucket as i32,
                &p.transaction_id,
                p.generation,
                p.attempt as i32,
                CqlTimestamp(p.enqueued_at_ms),
                // Never a null (a cell tombstone): a pointer without a due time leaves it unset.
                p.due_at_ms
                    .map_or(MaybeUnset::Unset, |t| MaybeUnset::Set(CqlTimestamp(t))),
            ),
        )
        .await
    }

    async fn put_pointer_groups(
        &self,
        groups: &[(String, Location, Vec<Pointer>)],
    ) -> StoreResult<()> {
        if let [(service, loc, pointers)] = groups {
            return self.put_pointers(service, loc, pointers).await;
        }
        let all = || groups.iter().flat_map(|(_, _, ps)| ps.iter());
        // Two pointers of one transaction never share a batch (see `batchable`).
        if !batchable(
            all()
                .map(|p| &p.transaction_id)
                .collect::<Vec<_>>()
                .into_iter(),
        ) {
            for (service, loc, pointers) in groups {
                self.put_pointers(service, loc, pointers).await?;
            }
            return Ok(());
        }
        self.pointer_batch(
            groups
                .iter()
                .flat_map(|(service, loc, ps)| ps.iter().map(move |p| (service.as_str(), loc, p)))
                .collect(),
        )
        .await
    }

    async fn put_pointers(
        &self,
        service: &str,
        loc: &Location,
        pointers: &[Pointer],
    ) -> StoreResult<()> {
        // Two pointers of one transaction never share a batch (see `batchable`).
        if !batchable(pointers.iter().map(|p| &p.transaction_id)) {
            for p in pointers {
                self.put_pointer(service, loc, p).await?;
            }
            return Ok(());
        }
        self.pointer_batch(pointers.iter().map(|p| (service, loc, p)).collect())
            .await
    }

    async fn list_years(&self) -> StoreResult<Vec<i32>> {
        let rows: Vec<(String, String, i32)> = self.collect(&self.directory.list_years, ()).await?;
        let mut years: Vec<i32> = rows
            .into_iter()
            .filter(|(r, c, _)| *r == self.region && *c == self.cluster)
            .map(|(_, _, y)| y)
            .collect();
        years.sort_unstable();
        years.dedup();
        Ok(years)
    }

    async fn list_days(&self, year: i32) -> StoreResult<Vec<i32>> {
        let rows: Vec<(CqlDate,)> = self
            .collect(
                &self.directory.list_days,
                (&self.region, &self.cluster, year),
            )
            .await?;
        Ok(rows.into_iter().map(|(d,)| from_cql_date(d)).collect())
    }

    async fn list_instances(&self, w: WindowId, r: TokenRange) -> StoreResult<Vec<InstanceRow>> {
        let rows: Vec<(i64, String, String)> = self
            .collect(
                &self.directory.list_instances,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(w.day),
                    w.index as i32,
                    r.start,
                    r.end,
                ),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(instance_token, service, instance)| InstanceRow {
                instance_token,
                service,
                instance,
            })
            .collect())
    }

    async fn list_buckets(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
    ) -> StoreResult<Vec<u32>> {
        let rows: Vec<(i32,)> = self
            .collect(
                &self.directory.list_buckets,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(w.day),
                    w.index as i32,
                    service,
                    instance,
                ),
            )
            .await?;
        Ok(rows.into_iter().map(|(b,)| b.max(0) as u32).collect())
    }

    async fn stream_pointers(
        &self,
        service: &str,
        loc: &Location,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<Pointer>>> {
        let rows = self
            .pages::<(String, i64, i32, CqlTimestamp, Option<CqlTimestamp>)>(
                &self.directory.list_pointers,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(loc.window.day),
                    loc.window.index as i32,
                    service,
                    &loc.instance,
                    loc.bucket as i32,
                ),
            )
            .await?;
        Ok(rows
            .map_ok(|(transaction_id, generation, attempt, at, due)| Pointer {
                transaction_id,
                generation,
                attempt: attempt.max(0) as u32,
                enqueued_at_ms: at.0,
                due_at_ms: due.map(|t| t.0),
            })
            .boxed())
    }

    async fn delete_pointer_partition(&self, service: &str, loc: &Location) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_pointer_partition,
            (
                &self.region,
                &self.cluster,
                cql_date(loc.window.day),
                loc.window.index as i32,
                service,
                &loc.instance,
                loc.bucket as i32,
            ),
        )
        .await
    }

    async fn delete_late_pointer(
        &self,
        service: &str,
        loc: &Location,
        transaction_id: &str,
    ) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_pointer,
            (
                &self.region,
                &self.cluster,
                cql_date(loc.window.day),
                loc.window.index as i32,
                service,
                &loc.instance,
                loc.bucket as i32,
                transaction_id,
            ),
        )
        .await
    }

    async fn delete_bucket(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_bucket,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                service,
                instance,
                bucket as i32,
            ),
        )
        .await
    }

    async fn delete_instance(&self, w: WindowId, row: &InstanceRow) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_instance,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                row.instance_token,
                &row.service,
                &row.instance,
            ),
        )
        .await
    }

    async fn window_has_instances(&self, w: WindowId) -> StoreResult<bool> {
        let rows: Vec<(i64,)> = self
            .collect(
                &self.directory.any_instance,
                (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn delete_window_instances(&self, w: WindowId) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_window_instances,
            (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
        )
        .await
    }

    async fn delete_window(&self, w: WindowId) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_window,
            (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
        )
        .await
    }

    async fn delete_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_day,
            (&self.region, &self.cluster, year, cql_date(day)),
        )
        .await
    }

    async fn count_pointers(&self, service: &str, loc: &Location) -> StoreResult<u64> {
        let rows: Vec<(i64,)> = self
            .collect(
                &self.directory.count_pointers,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(loc.window.day),
                    loc.window.index as i32,
                    service,
                    &loc.instance,
                    loc.bucket as i32,
                ),
            )
            .await?;
        Ok(rows.first().map_or(0, |r| r.0.max(0) as u64))
    }

    async fn day_listed(&self, year: i32, day: i32) -> StoreResult<bool> {
        let rows: Vec<(CqlDate,)> = self
            .collect(
                &self.directory.day_listed,
                (&self.region, &self.cluster, year, cql_date(day)),
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn window_listed(&self, w: WindowId) -> StoreResult<bool> {
        let rows: Vec<(i32,)> = self
            .collect(
                &self.directory.window_listed,
                (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn low_water(&self, day: i32) -> StoreResult<u32> {
        let rows: Vec<(Option<i32>,)> = self
            .collect(
                &self.directory.get_low_water,
                (&self.region, &self.cluster, cql_date(day)),
            )
            .await?;
        Ok(rows
            .first()
            .and_then(|r| r.0)
            .map_or(0, |w| w.max(0) as u32))
    }

    async fn set_low_water(&self, day: i32, window: u32) -> StoreResult<()> {
        self.exec(
            &self.directory.set_low_water,
            (&self.region, &self.cluster, cql_date(day), window as i32),
        )
        .await
    }

    async fn delete_low_water(&self, day: i32) -> StoreResult<()> {
        self.exec(
            &self.directory.delete_low_water,
            (&self.region, &self.cluster, cql_date(day)),
        )
        .await
    }

    async fn list_windows_from(&self, day: i32, from: u32) -> StoreResult<Vec<u32>> {
        let rows: Vec<(i32,)> = self
            .collect(
                &self.directory.list_windows_from,
                (&self.region, &self.cluster, cql_date(day), from as i32),
            )
            .await?;
        Ok(rows.into_iter().map(|(w,)| w.max(0) as u32).collect())
    }
}
