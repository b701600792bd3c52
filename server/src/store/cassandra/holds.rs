//! Dependency holds: one small `dependency_holds` partition per namespace.

use async_trait::async_trait;
use scylla::{statement::prepared::PreparedStatement, value::CqlTimestamp};

use super::{CassandraStore, Prep};
use crate::store::{HoldRow, HoldStore, StoreResult};

/// The statements of this group, prepared once.
pub(super) struct Statements {
    list_holds: PreparedStatement,
    put_hold: PreparedStatement,
}

impl Statements {
    pub(super) async fn prepare(p: &Prep) -> StoreResult<Self> {
        let ks = p.ks();
        Ok(Self {
            list_holds: p
                .prepare(format!(
                    "SELECT dependency, until, reason, held_at, source, renewals \
                     FROM {ks}.dependency_holds WHERE region = ? AND cluster = ?"
                ))
                .await?,
            put_hold: p
                .prepare(format!(
                    "INSERT INTO {ks}.dependency_holds \
                     (region, cluster, dependency, until, reason, held_at, source, renewals) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ))
                .await?,
        })
    }
}

#[async_trait]
impl HoldStore for CassandraStore {
    async fn put_hold(&self, h: &HoldRow, ttl_seconds: u32) -> StoreResult<()> {
        let ttl = i32::try_from(ttl_seconds.max(1)).unwrap_or(i32::MAX);
        self.exec(
            &self.holds.put_hold,
            (
                &self.region,
                &self.cluster,
                &h.dependency,
                CqlTimestamp(h.until_ms),
                &h.reason,
                CqlTimestamp(h.held_at_ms),
                &h.source,
                i32::try_from(h.renewals).unwrap_or(i32::MAX),
                ttl,
            ),
        )
        .await
    }

    async fn list_holds(&self) -> StoreResult<Vec<HoldRow>> {
        type Row = (
            String,
            Option<CqlTimestamp>,
            Option<String>,
            Option<CqlTimestamp>,
            Option<String>,
            Option<i32>,
        );
        let rows: Vec<Row> = self
            .collect(&self.holds.list_holds, (&self.region, &self.cluster))
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(dependency, until, reason, held_at, source, renewals)| HoldRow {
                    dependency,
                    until_ms: until.map_or(0, |t| t.0),
                    reason: reason.unwrap_or_default(),
                    held_at_ms: held_at.map_or(0, |t| t.0),
                    source: source.unwrap_or_default(),
                    renewals: renewals.map_or(0, |r| r.max(0) as u32),
                },
            )
            .collect())
    }
}
