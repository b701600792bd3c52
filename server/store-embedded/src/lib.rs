//! The embedded store: every storage trait on one local file, for a single node with no
//! database to run (`REBOUND_STORE=embedded`, and `rebound-server dev`).
//!
//! **Why redb.** It is pure Rust, has had a stable file format since 1.0 and is actively
//! maintained; it gives ACID write transactions (one writer at a time, serialisable, with an
//! fsync on commit) and MVCC snapshots for readers, which is what the lease ring's
//! compare-and-set needs, and its B-tree gives ordered range scans, which the directory's
//! token order and paging need. fjall (an LSM tree) would serve too, but its transactions are
//! younger and an LSM's background compaction buys nothing at a single node's volumes.
//! redb takes an exclusive lock on its file, so a second process on the same
//! `REBOUND_DATA_DIR` is refused instead of corrupting it.
//!
//! **Layout.** One table `rows` of byte keys (see `keys`): a table tag, the namespace
//! (region, cluster), then the Cassandra primary key's components in an order-preserving
//! encoding, so each Cassandra partition is a key prefix and each clustering order is byte
//! order. Every value starts with its expiry (`NEVER`, or milliseconds on the store's
//! clock): a row past its expiry reads as absent at once, as a Cassandra cell past its TTL
//! does, and a sweeper deletes it later through the `expiry` index (expiry, key). Settle
//! cells of a state row (`cancelled_generation`, `succeeded_generation`), which in Cassandra
//! are cells with their own TTL, are rows of their own here.
//!
//! Semantics follow the Cassandra store exactly (the conformance suite runs both): upserts,
//! whole-partition deletes as one range delete, lease changes as compare-and-set inside one
//! write transaction, `server_time_ms` and heartbeat write times from the store's clock,
//! which is injected, so TTLs follow a manual clock in tests.

mod dead_letters;
mod directory;
mod holds;
mod keys;
mod leases;
mod services;
mod state;

use std::{path::Path, sync::Arc, time::Duration};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use self::keys::{Enc, Key, Table};
use futures::future::BoxFuture;
use rebound_store::clock::SharedClock;
use rebound_store::{StoreError, StoreLifecycle, StoreResult};

const ROWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("rows");
const EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("expiry");

/// The expiry of a row without a TTL.
const NEVER: i64 = i64::MAX;
/// Rows per page of a streamed read.
const PAGE: usize = 1000;
/// Most expiry-index entries one sweep transaction handles.
const SWEEP_BATCH: usize = 2_000;
/// The layout version this build writes (`MigrationStore`).
const LAYOUT_VERSION: i32 = 1;
/// The file inside the data directory.
pub const FILE_NAME: &str = "rebound.redb";

/// The embedded store for one namespace (region, cluster).
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    region: String,
    cluster: String,
    clock: SharedClock,
    /// The write time of the last write transaction (microseconds): each one gets a later
    /// one, even on a manual clock that stands still (`Writer::written`).
    last_write_us: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("region", &self.inner.region)
            .field("cluster", &self.inner.cluster)
            .finish_non_exhaustive()
    }
}

fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(format!("embedded store: {e}"))
}

impl EmbeddedStore {
    /// Rows per page of a streamed read (`stream_pointers`, `stream_dead_letters`).
    pub const PAGE_SIZE: usize = PAGE;

    /// Opens (creating when missing) the store in `dir`, for the namespace (region,
    /// cluster), on `clock`. Fails with a clear error when another process holds the
    /// directory: the embedded store serves one node. Expired rows are deleted by `sweep`
    /// (`run_sweeper`, which the node runs).
    pub fn open(dir: &Path, region: &str, cluster: &str, clock: SharedClock) -> StoreResult<Self> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create the data directory {dir:?}: {e}"))
        })?;
        let path = dir.join(FILE_NAME);
        let db = Database::create(&path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Unavailable(format!(
                "{path:?} is already open (in use by another process, or still by this one): \
                 the embedded store serves one node \
                 (give each node its own REBOUND_DATA_DIR, or use REBOUND_STORE=cassandra for \
                 more than one)"
            )),
            e => StoreError::Unavailable(format!("cannot open {path:?}: {e}")),
        })?;
        let tx = db.begin_write().map_err(internal)?;
        tx.open_table(ROWS).map_err(internal)?;
        tx.open_table(EXPIRY).map_err(internal)?;
        tx.commit().map_err(internal)?;
        let inner = Arc::new(Inner {
            db,
            region: region.to_string(),
            cluster: cluster.to_string(),
            clock,
            last_write_us: std::sync::atomic::AtomicI64::new(0),
        });
        Ok(EmbeddedStore { inner })
    }

    /// Deletes every row past its expiry now; returns how many. The sweeper calls it every
    /// few seconds; reads never return an expired row whether it ran or not.
    pub async fn sweep(&self) -> StoreResult<usize> {
        self.blocking(|i| i.sweep()).await
    }

    /// The sweeper: `sweep` every `every` until `stop` turns true. The node owns it as one
    /// of its background loops.
    pub async fn run_sweeper(
        self: Arc<Self>,
        every: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if let Err(e) = self.sweep().await {
                tracing::warn!(error = %e, "embedded store: sweeping expired rows failed");
            }
        }
    }

    /// Runs `f` on a blocking thread: redb's calls are synchronous, and a commit waits for
    /// the disk.
    async fn blocking<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> StoreResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Internal(format!("embedded store task failed: {e}")))?
    }

    fn key(&self, table: Table) -> Key {
        Key::ns(table, &self.inner.region, &self.inner.cluster)
    }

    fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }
}

/// The expiry of a row written at `now_ms` with `ttl_seconds` (0 or None: never).
fn expiry(now_ms: i64, ttl_seconds: Option<u32>) -> i64 {
    match ttl_seconds {
        None | Some(0) => NEVER,
        Some(s) => now_ms.saturating_add(i64::from(s) * 1000),
    }
}

/// A write transaction over the rows, with TTL bookkeeping.
struct Writer<'t> {
    rows: redb::Table<'t, &'static [u8], &'static [u8]>,
    expiry: redb::Table<'t, &'static [u8], ()>,
    now_ms: i64,
    /// This transaction's write time (microseconds), later than every earlier one's: what
    /// Cassandra's `WRITETIME` is to a row (state rows keep it, see `state`).
    written: i64,
    /// Finished-log entries this transaction wrote: the index of the next in its chunk
    /// (the chunk is its write time).
    logged: u32,
}

fn envelope(expires_at: i64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&expires_at.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// The payload of a stored value, or None when it has expired at `now_ms`.
fn live(value: &[u8], now_ms: i64) -> StoreResult<Option<&[u8]>> {
    let (exp, payload) = value
        .split_at_checked(8)
        .ok_or_else(|| internal("a row without its expiry"))?;
    let exp = i64::from_be_bytes(exp.try_into().map_err(internal)?);
    Ok((exp > now_ms).then_some(payload))
}

/// An entry of the expiry index: the expiry (order-preserving), then the row's key.
fn expiry_key(expires_at: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Key::empty().i64(expires_at).into_bytes();
    k.extend_from_slice(key);
    k
}

impl Writer<'_> {
    fn put(&mut self, key: &[u8], payload: &[u8], expires_at: i64) -> StoreResult<()> {
        self.rows
            .insert(key, envelope(expires_at, payload).as_slice())
            .map_err(internal)?;
        if expires_at != NEVER {
            self.expiry
                .insert(expiry_key(expires_at, key).as_slice(), ())
                .map_err(internal)?;
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        match self.rows.get(key).map_err(internal)? {
            Some(v) => Ok(live(v.value(), self.now_ms)?.map(<[u8]>::to_vec)),
            None => Ok(None),
        }
    }

    /// The payload and expiry of a live row.
    fn get_with_expiry(&self, key: &[u8]) -> StoreResult<Option<(Vec<u8>, i64)>> {
        match self.rows.get(key).map_err(internal)? {
            Some(v) => {
                let v = v.value();
                Ok(live(v, self.now_ms)?.map(|p| {
                    let exp = v
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map_or(NEVER, i64::from_be_bytes);
                    (p.to_vec(), exp)
                }))
            }
            None => Ok(None),
        }
    }

    fn delete(&mut self, key: &[u8]) -> StoreResult<()> {
        self.rows.remove(key).map_err(internal)?;
        Ok(())
    }

    /// Deletes every row whose key starts with `prefix`: a whole partition.
    fn delete_prefix(&mut self, prefix: &Key) -> StoreResult<()> {
        self.delete_range(prefix.as_bytes(), prefix.prefix_end())
    }

    fn delete_range(&mut self, from: &[u8], to: Option<Vec<u8>>) -> StoreResult<()> {
        match to {
            Some(end) => self
                .rows
                .retain_in::<&[u8], _>(from..end.as_slice(), |_, _| false),
            None => self.rows.retain_in::<&[u8], _>(from.., |_, _| false),
        }
        .map_err(internal)
    }
}

/// One read snapshot (`Inner::read`).
struct Snapshot {
    rows: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    now_ms: i64,
}

impl Snapshot {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        match self.rows.get(key).map_err(internal)? {
            Some(v) => Ok(live(v.value(), self.now_ms)?.map(<[u8]>::to_vec)),
            None => Ok(None),
        }
    }
}

/// A key and payload read back.
type Row = (Vec<u8>, Vec<u8>);

impl Inner {
    fn write<T>(&self, f: impl FnOnce(&mut Writer<'_>) -> StoreResult<T>) -> StoreResult<T> {
        let tx = self.db.begin_write().map_err(internal)?;
        let out = {
            let now_ms = self.clock.now_ms();
            // redb runs one write transaction at a time, so this is the next write time.
            let last = self
                .last_write_us
                .load(std::sync::atomic::Ordering::Relaxed);
            // Even, and two above the last (docs/architecture.md, "A SUCCEEDED ack is one
            // write"): a settle goes at a read write time plus one, odd, so it never ties
            // with a write made after that read, whatever the clock does.
            let written = (now_ms.saturating_mul(1000) & !1).max(last.saturating_add(3) & !1);
            self.last_write_us
                .store(written, std::sync::atomic::Ordering::Relaxed);
            let mut w = Writer {
                rows: tx.open_table(ROWS).map_err(internal)?,
                expiry: tx.open_table(EXPIRY).map_err(internal)?,
                now_ms,
                written,
                logged: 0,
            };
            f(&mut w)?
        };
        tx.commit().map_err(internal)?;
        Ok(out)
    }

    /// Runs `f` on one read snapshot, at one instant of the clock: rows read together are
    /// read as of one commit, as Cassandra reads the cells of one row.
    fn read<T>(&self, f: impl FnOnce(&Snapshot) -> StoreResult<T>) -> StoreResult<T> {
        let tx = self.db.begin_read().map_err(internal)?;
        let rows = tx.open_table(ROWS).map_err(internal)?;
        f(&Snapshot {
            rows,
            now_ms: self.clock.now_ms(),
        })
    }

    fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let tx = self.db.begin_read().map_err(internal)?;
        let rows = tx.open_table(ROWS).map_err(internal)?;
        match rows.get(key).map_err(internal)? {
            Some(v) => Ok(live(v.value(), self.clock.now_ms())?.map(<[u8]>::to_vec)),
            None => Ok(None),
        }
    }

    /// The live rows with `from <= key < to`, at most `limit`, in key order.
    fn scan(&self, from: &[u8], to: Option<&[u8]>, limit: usize) -> StoreResult<Vec<Row>> {
        let now = self.clock.now_ms();
        let tx = self.db.begin_read().map_err(internal)?;
        let rows = tx.open_table(ROWS).map_err(internal)?;
        let iter = match to {
            Some(to) => rows.range::<&[u8]>(from..to),
            None => rows.range::<&[u8]>(from..),
        }
        .map_err(internal)?;
        let mut out = Vec::new();
        for entry in iter {
            if out.len() >= limit {
                break;
            }
            let (k, v) = entry.map_err(internal)?;
            if let Some(p) = live(v.value(), now)? {
                out.push((k.value().to_vec(), p.to_vec()));
            }
        }
        Ok(out)
    }

    /// Every live row of the partition `prefix`, in key order.
    fn scan_prefix(&self, prefix: &Key) -> StoreResult<Vec<Row>> {
        let end = prefix.prefix_end();
        self.scan(prefix.as_bytes(), end.as_deref(), usize::MAX)
    }

    /// Sweeps in transactions of at most `SWEEP_BATCH` index entries, so that writers
    /// (lease renewals among them) never wait behind a mass expiry for long.
    fn sweep(&self) -> StoreResult<usize> {
        let mut swept = 0;
        loop {
            let (n, more) = self.sweep_batch()?;
            swept += n;
            if !more {
                return Ok(swept);
            }
        }
    }

    /// One batch of the sweep: how many rows it deleted, and whether entries are left.
    fn sweep_batch(&self) -> StoreResult<(usize, bool)> {
        self.write(|w| {
            // Entries whose expiry is at or before now.
            let upto = Key::empty().i64(w.now_ms).prefix_end().unwrap_or_default();
            let due: Vec<Vec<u8>> = w
                .expiry
                .range::<&[u8]>(..upto.as_slice())
                .map_err(internal)?
                .take(SWEEP_BATCH + 1)
                .map(|e| e.map(|(k, _)| k.value().to_vec()).map_err(internal))
                .collect::<StoreResult<_>>()?;
            let more = due.len() > SWEEP_BATCH;
            let mut swept = 0;
            for entry in due.iter().take(SWEEP_BATCH) {
                w.expiry.remove(entry.as_slice()).map_err(internal)?;
                let Some(key) = entry.get(8..) else {
                    continue;
                };
                // The row may have been rewritten since, with a later expiry or none. A row
                // that cannot be read is left to its readers' errors, not swept, and its
                // index entry goes: one bad row never fails every later sweep.
                let expired = match w.rows.get(key).map_err(internal)? {
                    Some(v) => matches!(live(v.value(), w.now_ms), Ok(None)),
                    None => false,
                };
                if expired {
                    w.rows.remove(key).map_err(internal)?;
                    swept += 1;
                }
            }
            Ok((swept, more))
        })
    }
}

impl EmbeddedStore {
    async fn put_row(
        &self,
        key: Key,
        payload: Vec<u8>,
        ttl_seconds: Option<u32>,
    ) -> StoreResult<()> {
        self.blocking(move |i| {
            i.write(|w| {
                let exp = expiry(w.now_ms, ttl_seconds);
                w.put(key.as_bytes(), &payload, exp)
            })
        })
        .await
    }

    async fn get_row(&self, key: Key) -> StoreResult<Option<Vec<u8>>> {
        self.blocking(move |i| i.get(key.as_bytes())).await
    }

    async fn delete_row(&self, key: Key) -> StoreResult<()> {
        self.blocking(move |i| i.write(|w| w.delete(key.as_bytes())))
            .await
    }

    /// Deletes a whole partition: every row under `prefix`.
    async fn delete_partition(&self, prefix: Key) -> StoreResult<()> {
        self.blocking(move |i| i.write(|w| w.delete_prefix(&prefix)))
            .await
    }

    async fn scan_partition(&self, prefix: Key) -> StoreResult<Vec<Row>> {
        self.blocking(move |i| i.scan_prefix(&prefix)).await
    }

    /// The rows of the partition `prefix` as a stream read `PAGE` rows at a time, each page
    /// in a snapshot of its own (as Cassandra's paging reads each page afresh), resuming
    /// after the last key read.
    fn stream_partition<T, F>(
        &self,
        prefix: Key,
        decode: F,
    ) -> futures::stream::BoxStream<'static, StoreResult<T>>
    where
        T: Send + 'static,
        F: Fn(&[u8], &[u8]) -> StoreResult<T> + Send + Sync + 'static,
    {
        let end = prefix.prefix_end();
        self.stream_range(prefix.into_bytes(), end, decode)
    }

    /// The rows with `from <= key < end` (no end: to the last key), streamed as
    /// `stream_partition` streams a partition.
    fn stream_range<T, F>(
        &self,
        from: Vec<u8>,
        end: Option<Vec<u8>>,
        decode: F,
    ) -> futures::stream::BoxStream<'static, StoreResult<T>>
    where
        T: Send + 'static,
        F: Fn(&[u8], &[u8]) -> StoreResult<T> + Send + Sync + 'static,
    {
        use futures::StreamExt;
        let inner = self.inner.clone();
        let decode = Arc::new(decode);
        // The state: the next key to read from, or None once the range is read.
        futures::stream::unfold(Some(from), move |from| {
            let inner = inner.clone();
            let end = end.clone();
            let decode = decode.clone();
            async move {
                let from = from?;
                let page = tokio::task::spawn_blocking(move || {
                    let rows = inner.scan(&from, end.as_deref(), PAGE)?;
                    let next = (rows.len() == PAGE).then(|| {
                        let mut k = rows[PAGE - 1].0.clone();
                        k.push(0);
                        k
                    });
                    let items: Vec<StoreResult<T>> =
                        rows.iter().map(|(k, v)| decode(k, v)).collect();
                    Ok::<_, StoreError>((items, next))
                })
                .await
                .map_err(|e| StoreError::Internal(format!("embedded store task failed: {e}")))
                .and_then(|r| r);
                Some(match page {
                    Ok((items, next)) => (futures::stream::iter(items).left_stream(), next),
                    Err(e) => (futures::stream::iter(vec![Err(e)]).right_stream(), None),
                })
            }
        })
        .flatten()
        .boxed()
    }
}

#[async_trait::async_trait]
impl rebound_store::MigrationStore for EmbeddedStore {
    async fn migrate(&self, _now_ms: i64) -> StoreResult<Vec<i32>> {
        let key = Key::ns(Table::Meta, "", "").str("layout");
        self.blocking(move |i| {
            i.write(|w| match w.get(key.as_bytes())? {
                Some(v) => {
                    let version = keys::Dec::new(&v).u32()? as i32;
                    if version > LAYOUT_VERSION {
                        return Err(StoreError::Internal(format!(
                            "the data directory holds layout {version}, newer than this build's {LAYOUT_VERSION}: run a newer rebound-server"
                        )));
                    }
                    Ok(Vec::new())
                }
                None => {
                    w.put(key.as_bytes(), &Enc::new().u32(LAYOUT_VERSION as u32).into_bytes(), NEVER)?;
                    Ok(vec![LAYOUT_VERSION])
                }
            })
        })
        .await
    }

    async fn record_settings(
        &self,
        _node_id: &str,
        settings: &[(String, String)],
    ) -> StoreResult<Vec<String>> {
        let settings = settings.to_vec();
        self.blocking(move |i| {
            i.write(|w| {
                let mut recorded = Vec::with_capacity(settings.len());
                for (name, value) in &settings {
                    let key = Key::ns(Table::Meta, "", "").str("setting").str(name);
                    match w.get(key.as_bytes())? {
                        Some(v) => recorded.push(keys::Dec::new(&v).str()?),
                        None => {
                            w.put(key.as_bytes(), &Enc::new().str(value).into_bytes(), NEVER)?;
                            recorded.push(value.clone());
                        }
                    }
                }
                Ok(recorded)
            })
        })
        .await
    }

    async fn applied_migrations(&self) -> StoreResult<Vec<i32>> {
        let key = Key::ns(Table::Meta, "", "").str("layout");
        Ok(match self.get_row(key).await? {
            Some(v) => (1..=keys::Dec::new(&v).u32()? as i32).collect(),
            None => Vec::new(),
        })
    }
}

/// How often the embedded store deletes its expired rows (reads skip them regardless).
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The sweeper is the store's one loop; it owns no other task and coalesces nothing.
impl StoreLifecycle for EmbeddedStore {
    fn background(
        self: Arc<Self>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<BoxFuture<'static, ()>> {
        Some(Box::pin(self.run_sweeper(SWEEP_EVERY, stop)))
    }
}

#[cfg(test)]
mod tests;
