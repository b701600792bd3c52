//! Dependency holds: one small `dependency_holds` partition per namespace; and the probe that
//! follows each hold's end, a `dependency_probes` row claimed by one node with a lightweight
//! transaction.

use async_trait::async_trait;
use scylla::{
    response::query_result::QueryResult,
    statement::prepared::PreparedStatement,
    value::{CqlTimestamp, CqlValue},
};

use super::{map_execution_error, observed, CassandraStore, Prep};
use rebound_store::{HoldRow, HoldStore, ProbeClaim, ProbeRow, StoreError, StoreResult};

/// The statements of this group, prepared once.
pub(super) struct Statements {
    list_holds: PreparedStatement,
    put_hold: PreparedStatement,
    claim_probe: PreparedStatement,
    take_probe: PreparedStatement,
    answer_probe: PreparedStatement,
}

/// A lightweight transaction's statement: never retried blindly by the driver.
async fn lwt(p: &Prep, cql: String) -> StoreResult<PreparedStatement> {
    let mut ps = p.prepare(cql).await?;
    ps.set_is_idempotent(false);
    Ok(ps)
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
            claim_probe: lwt(
                p,
                format!(
                    "INSERT INTO {ks}.dependency_probes \
                     (region, cluster, dependency, until, owner, claimed_at) \
                     VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?"
                ),
            )
            .await?,
            take_probe: lwt(
                p,
                format!(
                    "UPDATE {ks}.dependency_probes USING TTL ? SET owner = ?, claimed_at = ? \
                     WHERE region = ? AND cluster = ? AND dependency = ? AND until = ? \
                     IF owner = ? AND claimed_at = ? AND answered_at = null"
                ),
            )
            .await?,
            answer_probe: lwt(
                p,
                format!(
                    "UPDATE {ks}.dependency_probes USING TTL ? SET answered_at = ? \
                     WHERE region = ? AND cluster = ? AND dependency = ? AND until = ? \
                     IF owner = ?"
                ),
            )
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

    async fn claim_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        now_ms: i64,
        stale_before_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<ProbeClaim> {
        let s = &self.holds;
        let (applied, current) = self
            .lwt(
                &s.claim_probe,
                (
                    &self.region,
                    &self.cluster,
                    dependency,
                    CqlTimestamp(until_ms),
                    owner,
                    CqlTimestamp(now_ms),
                    ttl(ttl_seconds),
                ),
            )
            .await?;
        let current = match (applied, current) {
            (true, _) => return Ok(ProbeClaim::Won),
            (false, Some(c)) => c,
            (false, None) => {
                return Err(StoreError::Internal(
                    "dependency_probes: INSERT IF NOT EXISTS not applied and no row".into(),
                ))
            }
        };
        // Answered: nobody probes again, its owner included (say after a restart).
        if current.answered_at_ms != 0 {
            return Ok(ProbeClaim::Lost(current));
        }
        if current.owner == owner {
            return Ok(ProbeClaim::Won);
        }
        if current.claimed_at_ms >= stale_before_ms {
            return Ok(ProbeClaim::Lost(current));
        }
        // The claim went stale unanswered: take it over, if it is still that claim.
        let (applied, now_current) = self
            .lwt(
                &s.take_probe,
                (
                    ttl(ttl_seconds),
                    owner,
                    CqlTimestamp(now_ms),
                    &self.region,
                    &self.cluster,
                    dependency,
                    CqlTimestamp(until_ms),
                    &current.owner,
                    CqlTimestamp(current.claimed_at_ms),
                ),
            )
            .await?;
        Ok(if applied {
            ProbeClaim::Won
        } else {
            ProbeClaim::Lost(now_current.unwrap_or(current))
        })
    }

    async fn answer_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        answered_at_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<bool> {
        let (applied, _) = self
            .lwt(
                &self.holds.answer_probe,
                (
                    ttl(ttl_seconds),
                    CqlTimestamp(answered_at_ms),
                    &self.region,
                    &self.cluster,
                    dependency,
                    CqlTimestamp(until_ms),
                    owner,
                ),
            )
            .await?;
        Ok(applied)
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

fn ttl(seconds: u32) -> i32 {
    i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
}

/// Reads a probe LWT's answer (`lwt_result`): the claim as it stands when not applied.
fn lwt_outcome(res: QueryResult) -> StoreResult<(bool, Option<ProbeRow>)> {
    let (applied, row) = super::lwt_result(res)?;
    let ms = |name: &str| match row.get(name) {
        Some(CqlValue::Timestamp(t)) => t.0,
        _ => 0,
    };
    let current = match row.get("owner") {
        Some(CqlValue::Text(owner)) => Some(ProbeRow {
            owner: owner.clone(),
            claimed_at_ms: ms("claimed_at"),
            answered_at_ms: ms("answered_at"),
        }),
        _ => None,
    };
    Ok((applied, current))
}

impl CassandraStore {
    /// Runs a probe LWT and reads its answer.
    async fn lwt(
        &self,
        ps: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<(bool, Option<ProbeRow>)> {
        let res = observed(ps.get_statement(), self.session.execute_unpaged(ps, values))
            .await
            .map_err(|e| map_execution_error(&e))?;
        lwt_outcome(res)
    }
}
