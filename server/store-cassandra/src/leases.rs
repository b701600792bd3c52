//! The lease ring (`ring_leases`, compare-and-set by LWT at the serial level), its members
//! (`ring_members`) and the database's clock.

use async_trait::async_trait;
use scylla::{
    statement::{prepared::PreparedStatement, Consistency},
    value::CqlTimestamp,
};

use super::{map_execution_error, observed, CassandraStore, Prep};
use rebound_store::{Cas, LeaseChange, LeaseRow, LeaseStore, Member, StoreError, StoreResult};

/// The statements of this group, prepared once.
pub(super) struct Statements {
    /// None when the database has no `currentTimestamp()` (clock sync then reports an error
    /// and the node runs on its own clock).
    server_time: Option<PreparedStatement>,
    heartbeat: PreparedStatement,
    list_members: PreparedStatement,
    read_lease: PreparedStatement,
    peek_leases: PreparedStatement,
    create_lease: PreparedStatement,
    replace_lease: PreparedStatement,
    take_lease: PreparedStatement,
    release_lease: PreparedStatement,
}

impl Statements {
    pub(super) async fn prepare(p: &Prep, serial_read: Consistency) -> StoreResult<Self> {
        let ks = p.ks();
        Ok(Self {
            server_time: match p.prepare("SELECT currentTimestamp() FROM system.local".to_string()).await
            {
                Ok(ps) => Some(ps),
                Err(e) => {
                    tracing::warn!(error = %e, "this database cannot report its clock; clock sync is off");
                    None
                }
            },
            heartbeat: p.prepare(format!(
                "INSERT INTO {ks}.ring_members (region, cluster, node_id, address, boot_epoch, \
                 heartbeat_at) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            list_members: p.prepare(format!(
                "SELECT node_id, address, boot_epoch, heartbeat_at, WRITETIME(heartbeat_at) \
                 FROM {ks}.ring_members WHERE region = ? AND cluster = ?"
            ))
            .await?,
            read_lease: {
                let mut ps = p.prepare(format!(
                    "SELECT slot, owner, epoch, expires_at, address, taken_at, released_at, \
                     released_epoch FROM {ks}.ring_leases \
                     WHERE region = ? AND cluster = ? AND slot = ?"
                ))
                .await?;
                ps.set_consistency(serial_read);
                ps
            },
            peek_leases: p.prepare(format!(
                "SELECT slot, owner, epoch, expires_at, address, taken_at, released_at, \
                 released_epoch FROM {ks}.ring_leases WHERE region = ? AND cluster = ? AND slot IN ?"
            ))
            .await?,
            create_lease: {
                // A lightweight transaction: never retried blindly by the driver.
                let mut ps = p.prepare(format!(
                    "INSERT INTO {ks}.ring_leases (region, cluster, slot, owner, epoch, \
                     expires_at, address, taken_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
            replace_lease: {
                let mut ps = p.prepare(format!(
                    "UPDATE {ks}.ring_leases SET owner = ?, epoch = ?, expires_at = ?, address = ? \
                     WHERE region = ? AND cluster = ? AND slot = ? IF epoch = ?"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
            take_lease: {
                let mut ps = p.prepare(format!(
                    "UPDATE {ks}.ring_leases SET owner = ?, epoch = ?, expires_at = ?, address = ?, \
                     taken_at = ? WHERE region = ? AND cluster = ? AND slot = ? IF epoch = ?"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
            release_lease: {
                let mut ps = p.prepare(format!(
                    "UPDATE {ks}.ring_leases SET owner = ?, epoch = ?, expires_at = ?, address = ?, \
                     released_at = ?, released_epoch = ? \
                     WHERE region = ? AND cluster = ? AND slot = ? IF epoch = ?"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
        })
    }
}

#[async_trait]
impl LeaseStore for CassandraStore {
    async fn server_time_ms(&self) -> StoreResult<i64> {
        let ps = self.leases.server_time.as_ref().ok_or_else(|| {
            StoreError::Internal("the database has no currentTimestamp() function".into())
        })?;
        let rows: Vec<(CqlTimestamp,)> = self.collect(ps, ()).await?;
        rows.first()
            .map(|r| r.0 .0)
            .ok_or_else(|| StoreError::Internal("system.local returned no row".into()))
    }

    async fn heartbeat(&self, m: &Member, ttl_seconds: u32) -> StoreResult<()> {
        self.exec(
            &self.leases.heartbeat,
            (
                &self.region,
                &self.cluster,
                &m.node_id,
                &m.address,
                m.boot_epoch,
                CqlTimestamp(m.heartbeat_at_ms),
                ttl_seconds.min(i32::MAX as u32) as i32,
            ),
        )
        .await
    }

    async fn list_members(&self) -> StoreResult<Vec<Member>> {
        type Row = (
            String,
            Option<String>,
            Option<i64>,
            Option<CqlTimestamp>,
            Option<i64>,
        );
        let rows: Vec<Row> = self
            .collect(&self.leases.list_members, (&self.region, &self.cluster))
            .await?;
        Ok(rows
            .into_iter()
            .map(|(node_id, address, boot_epoch, at, written)| Member {
                node_id,
                address: address.unwrap_or_default(),
                boot_epoch: boot_epoch.unwrap_or(0),
                heartbeat_at_ms: at.map_or(0, |t| t.0),
                written_at_ms: written.map_or(0, |us| us.div_euclid(1000)),
            })
            .collect())
    }

    async fn read_lease(&self, slot: i32) -> StoreResult<Option<LeaseRow>> {
        let rows: Vec<LeaseTuple> = self
            .collect(&self.leases.read_lease, (&self.region, &self.cluster, slot))
            .await?;
        Ok(rows.into_iter().next().map(lease_row))
    }

    async fn peek_leases(&self, slots: &[i32]) -> StoreResult<Vec<LeaseRow>> {
        let rows: Vec<LeaseTuple> = self
            .collect(
                &self.leases.peek_leases,
                (&self.region, &self.cluster, slots),
            )
            .await?;
        Ok(rows.into_iter().map(lease_row).collect())
    }

    async fn create_lease(&self, l: &LeaseRow) -> StoreResult<Cas> {
        let res = observed(
            self.leases.create_lease.get_statement(),
            self.session.execute_unpaged(
                &self.leases.create_lease,
                (
                    &self.region,
                    &self.cluster,
                    l.slot,
                    &l.owner,
                    l.epoch,
                    CqlTimestamp(l.expires_at_ms),
                    &l.address,
                    CqlTimestamp(l.taken_at_ms),
                ),
            ),
        )
        .await
        .map_err(|e| map_execution_error(&e))?;
        cas_outcome(res, l.slot)
    }

    async fn replace_lease(
        &self,
        l: &LeaseRow,
        expected_epoch: i64,
        change: LeaseChange,
    ) -> StoreResult<Cas> {
        let (owner, epoch, exp, addr) =
            (&l.owner, l.epoch, CqlTimestamp(l.expires_at_ms), &l.address);
        let key = (&self.region, &self.cluster, l.slot, expected_epoch);
        let ps = match change {
            LeaseChange::Renew => &self.leases.replace_lease,
            LeaseChange::Take => &self.leases.take_lease,
            LeaseChange::Release => &self.leases.release_lease,
        };
        let res = observed(ps.get_statement(), async {
            match change {
                LeaseChange::Renew => {
                    self.session
                        .execute_unpaged(
                            &self.leases.replace_lease,
                            (owner, epoch, exp, addr, key.0, key.1, key.2, key.3),
                        )
                        .await
                }
                LeaseChange::Take => {
                    self.session
                        .execute_unpaged(
                            &self.leases.take_lease,
                            (
                                owner,
                                epoch,
                                exp,
                                addr,
                                CqlTimestamp(l.taken_at_ms),
                                key.0,
                                key.1,
                                key.2,
                                key.3,
                            ),
                        )
                        .await
                }
                LeaseChange::Release => {
                    self.session
                        .execute_unpaged(
                            &self.leases.release_lease,
                            (
                                owner,
                                epoch,
                                exp,
                                addr,
                                CqlTimestamp(l.released_at_ms),
                                l.released_epoch,
                                key.0,
                                key.1,
                                key.2,
                                key.3,
                            ),
                        )
                        .await
                }
            }
        })
        .await
        .map_err(|e| map_execution_error(&e))?;
        cas_outcome(res, l.slot)
    }
}
type LeaseTuple = (
    i32,
    Option<String>,
    Option<i64>,
    Option<CqlTimestamp>,
    Option<String>,
    Option<CqlTimestamp>,
    Option<CqlTimestamp>,
    Option<i64>,
);

fn lease_row(
    (slot, owner, epoch, expires, address, taken, released, released_epoch): LeaseTuple,
) -> LeaseRow {
    LeaseRow {
        slot,
        owner: owner.unwrap_or_default(),
        epoch: epoch.unwrap_or(0),
        expires_at_ms: expires.map_or(0, |t| t.0),
        address: address.unwrap_or_default(),
        taken_at_ms: taken.map_or(0, |t| t.0),
        released_at_ms: released.map_or(0, |t| t.0),
        released_epoch: released_epoch.unwrap_or(0),
    }
}

/// Reads a lease LWT's answer (`lwt_result`): the lease as it stands when not applied.
fn cas_outcome(res: scylla::response::query_result::QueryResult, slot: i32) -> StoreResult<Cas> {
    use scylla::value::CqlValue;
    let (applied, row) = super::lwt_result(res)?;
    if applied {
        return Ok(Cas::Applied);
    }
    let col = |name: &str| row.get(name).cloned();
    let current = col("epoch").map(|epoch| LeaseRow {
        slot,
        owner: match col("owner") {
            Some(CqlValue::Text(s)) => s,
            _ => String::new(),
        },
        epoch: match epoch {
            CqlValue::BigInt(v) => v,
            _ => 0,
        },
        expires_at_ms: match col("expires_at") {
            Some(CqlValue::Timestamp(t)) => t.0,
            _ => 0,
        },
        address: match col("address") {
            Some(CqlValue::Text(s)) => s,
            _ => String::new(),
        },
        taken_at_ms: 0,
        released_at_ms: 0,
        released_epoch: 0,
    });
    Ok(Cas::Rejected(current))
}
