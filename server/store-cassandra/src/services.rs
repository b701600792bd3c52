//! Service settings: one small `services` partition per namespace.

use async_trait::async_trait;
use scylla::{statement::prepared::PreparedStatement, value::CqlTimestamp};

use super::{CassandraStore, Prep};
use rebound_store::{ServiceRow, ServiceStore, StoreResult};

/// The statements of this group, prepared once.
pub(super) struct Statements {
    list_services: PreparedStatement,
    touch_service: PreparedStatement,
    pause_service: PreparedStatement,
    resume_service: PreparedStatement,
    set_service_policy: PreparedStatement,
    set_service_limits: PreparedStatement,
    set_service_push: PreparedStatement,
}

impl Statements {
    pub(super) async fn prepare(p: &Prep) -> StoreResult<Self> {
        let ks = p.ks();
        Ok(Self {
            list_services: p
                .prepare(format!(
                    "SELECT service, seen_at, paused, paused_at, policy, limits, push, updated_at \
                 FROM {ks}.services WHERE region = ? AND cluster = ?"
                ))
                .await?,
            touch_service: p
                .prepare(format!(
                    "UPDATE {ks}.services SET seen_at = ? WHERE region = ? AND cluster = ? \
                 AND service = ?"
                ))
                .await?,
            pause_service: p
                .prepare(format!(
                    "UPDATE {ks}.services SET paused = true, paused_at = ?, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
                ))
                .await?,
            // Resuming keeps paused_at (the last pause) rather than writing a null cell.
            resume_service: p
                .prepare(format!(
                    "UPDATE {ks}.services SET paused = false, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
                ))
                .await?,
            set_service_policy: p
                .prepare(format!(
                    "UPDATE {ks}.services SET policy = ?, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
                ))
                .await?,
            set_service_limits: p
                .prepare(format!(
                    "UPDATE {ks}.services SET limits = ?, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
                ))
                .await?,
            // Schema 0009. Clearing writes an empty blob, not a null cell (no tombstone).
            set_service_push: p
                .prepare(format!(
                    "UPDATE {ks}.services SET push = ?, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
                ))
                .await?,
        })
    }
}

#[async_trait]
impl ServiceStore for CassandraStore {
    async fn list_services(&self) -> StoreResult<Vec<ServiceRow>> {
        type Row = (
            String,
            Option<CqlTimestamp>,
            Option<bool>,
            Option<CqlTimestamp>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<CqlTimestamp>,
        );
        let rows: Vec<Row> = self
            .collect(&self.services.list_services, (&self.region, &self.cluster))
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(service, seen, paused, paused_at, policy, limits, push, updated)| ServiceRow {
                    service,
                    seen_at_ms: seen.map(|t| t.0),
                    paused: paused.unwrap_or(false),
                    paused_at_ms: paused_at.map(|t| t.0),
                    policy: policy.unwrap_or_default(),
                    limits: limits.unwrap_or_default(),
                    push: push.unwrap_or_default(),
                    updated_at_ms: updated.map(|t| t.0),
                },
            )
            .collect())
    }

    async fn touch_service(&self, service: &str, now_ms: i64) -> StoreResult<()> {
        self.exec(
            &self.services.touch_service,
            (CqlTimestamp(now_ms), &self.region, &self.cluster, service),
        )
        .await
    }

    async fn set_service_paused(&self, service: &str, paused: bool, now: i64) -> StoreResult<()> {
        if paused {
            self.exec(
                &self.services.pause_service,
                (
                    CqlTimestamp(now),
                    CqlTimestamp(now),
                    &self.region,
                    &self.cluster,
                    service,
                ),
            )
            .await
        } else {
            self.exec(
                &self.services.resume_service,
                (CqlTimestamp(now), &self.region, &self.cluster, service),
            )
            .await
        }
    }

    async fn set_service_policy(&self, service: &str, policy: &[u8], now: i64) -> StoreResult<()> {
        self.exec(
            &self.services.set_service_policy,
            (
                policy,
                CqlTimestamp(now),
                &self.region,
                &self.cluster,
                service,
            ),
        )
        .await
    }

    async fn set_service_limits(&self, service: &str, limits: &[u8], now: i64) -> StoreResult<()> {
        self.exec(
            &self.services.set_service_limits,
            (
                limits,
                CqlTimestamp(now),
                &self.region,
                &self.cluster,
                service,
            ),
        )
        .await
    }

    async fn set_service_push(&self, service: &str, push: &[u8], now: i64) -> StoreResult<()> {
        self.exec(
            &self.services.set_service_push,
            (
                push,
                CqlTimestamp(now),
                &self.region,
                &self.cluster,
                service,
            ),
        )
        .await
    }
}
