//! Schema migrations: the numbered files of `schema/`, embedded at build time, applied in order.
//! The keyspace is created with the configured replication when it is missing, and the table
//! `schema_migrations` records which versions ran. Every statement is `IF NOT EXISTS` (tables
//! and added columns alike), so two nodes migrating at once, or a migration interrupted
//! half-way and run again, is harmless.

use scylla::client::session::Session;

use super::{cassandra::map_execution_error, StoreError, StoreResult};

/// Client-side timeout of one schema statement.
const DDL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// One numbered migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub cql: &'static str,
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_directory.cql",
        cql: include_str!("../../../schema/0001_directory.cql"),
    },
    Migration {
        version: 2,
        name: "0002_state.cql",
        cql: include_str!("../../../schema/0002_state.cql"),
    },
    Migration {
        version: 3,
        name: "0003_ring.cql",
        cql: include_str!("../../../schema/0003_ring.cql"),
    },
    Migration {
        version: 4,
        name: "0004_progress.cql",
        cql: include_str!("../../../schema/0004_progress.cql"),
    },
    Migration {
        version: 5,
        name: "0005_services.cql",
        cql: include_str!("../../../schema/0005_services.cql"),
    },
    Migration {
        version: 6,
        name: "0006_state_compaction.cql",
        cql: include_str!("../../../schema/0006_state_compaction.cql"),
    },
    Migration {
        version: 7,
        name: "0007_state_body.cql",
        cql: include_str!("../../../schema/0007_state_body.cql"),
    },
    Migration {
        version: 8,
        name: "0008_cancel.cql",
        cql: include_str!("../../../schema/0008_cancel.cql"),
    },
];

/// Splits a migration file into statements: drops `--` comment lines, splits on `;`.
pub fn statements(cql: &str) -> Vec<String> {
    let code: String = cql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    code.split(';')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// FNV-1a of the file, recorded so that an edited, already-applied migration is noticed.
fn checksum(cql: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in cql.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Brings `keyspace` up to date; returns the versions applied by this call.
pub async fn migrate(
    session: &Session,
    keyspace: &str,
    replication: &str,
    now_ms: i64,
) -> StoreResult<Vec<i32>> {
    let run = |cql: String| async move {
        // Schema changes wait for agreement across the cluster and can take far longer than
        // the request timeout meant for reads and writes, more so on a loaded machine.
        let mut stmt = scylla::statement::unprepared::Statement::new(cql.clone());
        stmt.set_request_timeout(Some(DDL_TIMEOUT));
        session
            .query_unpaged(stmt, ())
            .await
            .map_err(|e| match map_execution_error(&e) {
                StoreError::Internal(m) => StoreError::Internal(format!("{m} (in {cql:?})")),
                other => other,
            })
    };
    run(format!(
        "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication}"
    ))
    .await?;
    run(format!(
        "CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations (\
         version int PRIMARY KEY, name text, checksum text, applied_at timestamp)"
    ))
    .await?;
    let rows = run(format!(
        "SELECT version, checksum FROM {keyspace}.schema_migrations"
    ))
    .await?
    .into_rows_result()
    .map_err(|e| StoreError::Internal(format!("schema_migrations: {e}")))?;
    let mut applied = std::collections::HashMap::new();
    for row in rows
        .rows::<(i32, Option<String>)>()
        .map_err(|e| StoreError::Internal(format!("schema_migrations: {e}")))?
    {
        let (v, sum) = row.map_err(|e| StoreError::Internal(format!("schema_migrations: {e}")))?;
        applied.insert(v, sum.unwrap_or_default());
    }
    session
        .use_keyspace(keyspace, false)
        .await
        .map_err(|e| StoreError::Internal(format!("USE {keyspace}: {e}")))?;
    let mut done = Vec::new();
    for m in MIGRATIONS {
        if let Some(sum) = applied.get(&m.version) {
            if *sum != checksum(m.cql) {
                tracing::warn!(
                    version = m.version,
                    name = m.name,
                    "applied migration differs from the embedded file; migrations are append-only"
                );
            }
            continue;
        }
        tracing::info!(
            version = m.version,
            name = m.name,
            keyspace,
            "applying migration"
        );
        for stmt in statements(m.cql) {
            run(stmt).await?;
        }
        // Literal values, not bind markers: a statement with values is prepared first, and
        // under concurrent schema changes (other nodes creating keyspaces) Cassandra can drop a
        // fresh prepared statement before it runs ("Prepared query ... not found"), which made
        // a starting node exit. The values are ours: a version, a file name, a hex checksum.
        run(format!(
            "INSERT INTO {keyspace}.schema_migrations (version, name, checksum, applied_at) \
             VALUES ({}, '{}', '{}', {now_ms})",
            m.version,
            m.name.replace('\'', "''"),
            checksum(m.cql),
        ))
        .await?;
        done.push(m.version);
    }
    Ok(done)
}

/// The versions recorded in `schema_migrations`, ascending.
pub async fn applied(session: &Session, keyspace: &str) -> StoreResult<Vec<i32>> {
    let rows = session
        .query_unpaged(
            format!("SELECT version FROM {keyspace}.schema_migrations"),
            (),
        )
        .await
        .map_err(|e| map_execution_error(&e))?
        .into_rows_result()
        .map_err(|e| StoreError::Internal(format!("schema_migrations: {e}")))?;
    let mut versions = Vec::new();
    for row in rows
        .rows::<(i32,)>()
        .map_err(|e| StoreError::Internal(format!("schema_migrations: {e}")))?
    {
        versions.push(
            row.map_err(|e| StoreError::Internal(format!("schema_migrations: {e}")))?
                .0,
        );
    }
    versions.sort_unstable();
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_splits_into_idempotent_statements() {
        let mut versions = Vec::new();
        for m in MIGRATIONS {
            let stmts = statements(m.cql);
            assert!(!stmts.is_empty(), "{}", m.name);
            for s in stmts {
                // Table options (`ALTER TABLE t WITH ...`) are idempotent too: setting them
                // again changes nothing.
                let options_only = s.starts_with("ALTER TABLE ")
                    && s.contains(" WITH ")
                    && ![" ADD ", " DROP ", " RENAME ", " ALTER "]
                        .iter()
                        .any(|k| s["ALTER TABLE ".len()..].contains(k));
                assert!(
                    s.starts_with("CREATE TABLE IF NOT EXISTS")
                        || (s.starts_with("ALTER TABLE ") && s.contains(" ADD IF NOT EXISTS "))
                        || options_only,
                    "{}: {s}",
                    m.name
                );
            }
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
            versions.push(m.version);
        }
        let mut sorted = versions.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(versions, sorted);
    }
}
