//! Schema migrations: the numbered files of `schema/`, embedded at build time, applied in order.
//! The keyspace is created with the configured replication when it is missing, and the table
//! `schema_migrations` records which versions ran. Every statement is `IF NOT EXISTS` (tables
//! and added columns alike), so two nodes migrating at once, or a migration interrupted
//! half-way and run again, is harmless.

use scylla::client::session::Session;

use super::{map_execution_error, StoreError, StoreResult};

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
    Migration {
        version: 9,
        name: "0009_push.cql",
        cql: include_str!("../../../schema/0009_push.cql"),
    },
    Migration {
        version: 10,
        name: "0010_dependency_holds.cql",
        cql: include_str!("../../../schema/0010_dependency_holds.cql"),
    },
    Migration {
        version: 11,
        name: "0011_dependency_probes.cql",
        cql: include_str!("../../../schema/0011_dependency_probes.cql"),
    },
    Migration {
        version: 12,
        name: "0012_settings.cql",
        cql: include_str!("../../../schema/0012_settings.cql"),
    },
    Migration {
        version: 13,
        name: "0013_finished.cql",
        cql: include_str!("../../../schema/0013_finished.cql"),
    },
    Migration {
        version: 14,
        name: "0014_pointer_due.cql",
        cql: include_str!("../../../schema/0014_pointer_due.cql"),
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

/// FNV-1a of `text`, as 16 hex digits.
fn checksum(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The checksum recorded in `schema_migrations`, so that an edited, already-applied migration
/// is noticed: FNV-1a of the file's statements only (`statements`, without blank lines or
/// trailing spaces), so a comment of an applied migration can be edited safely.
fn statement_checksum(cql: &str) -> String {
    let stmts: Vec<String> = statements(cql)
        .iter()
        .map(|s| {
            s.lines()
                .map(str::trim_end)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    checksum(&stmts.join(";\n"))
}

/// The checksums that earlier releases recorded: `checksum` over the whole file, comments
/// included, of each migration as it was when statement checksums replaced them. A version
/// applied by such a release carries this value in `schema_migrations`, and is accepted as
/// unchanged, so that editing the file's comments since raises no warning. (On such a keyspace
/// an edit of the version's statements would go unnoticed too; migrations are append-only.)
/// Never change these values.
const LEGACY_FILE_CHECKSUMS: &[(i32, &str)] = &[
    (1, "ba78089fbf792e66"),
    (2, "98ed67caf27dbd30"),
    (3, "8d3f9c04dac890ee"),
    (4, "6956697bbaa60e5a"),
    (5, "bc3d2957758f27d6"),
    (6, "f69d093a2b3956c6"),
    (7, "64732f74370abb83"),
    (8, "8333e29f6e2ec408"),
];

/// Whether `recorded`, the checksum in `schema_migrations` for `m`'s version, says the applied
/// migration is the embedded one: its statement checksum, or the full-file checksum an earlier
/// release recorded for that version.
fn matches_applied(m: &Migration, recorded: &str) -> bool {
    recorded == statement_checksum(m.cql)
        || LEGACY_FILE_CHECKSUMS
            .iter()
            .any(|&(v, sum)| v == m.version && sum == recorded)
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
            if !matches_applied(m, sum) {
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
            statement_checksum(m.cql),
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

    #[test]
    fn legacy_checksums_are_the_full_file_checksums_of_unedited_files() {
        let legacy: Vec<i32> = LEGACY_FILE_CHECKSUMS.iter().map(|&(v, _)| v).collect();
        assert_eq!(legacy, (1..=8).collect::<Vec<_>>());
        // 0001-0004 had their first comment line edited since; 0005-0008 are as they were.
        for m in MIGRATIONS.iter().filter(|m| (5..=8).contains(&m.version)) {
            let (_, sum) = LEGACY_FILE_CHECKSUMS
                .iter()
                .find(|&&(v, _)| v == m.version)
                .unwrap();
            assert_eq!(checksum(m.cql), *sum, "{}", m.name);
            assert!(matches_applied(m, sum), "{}", m.name);
        }
        for m in MIGRATIONS {
            assert!(matches_applied(m, &statement_checksum(m.cql)), "{}", m.name);
            assert!(!matches_applied(m, "0000000000000000"), "{}", m.name);
        }
        // A legacy value is accepted for its own version only.
        let (_, one) = LEGACY_FILE_CHECKSUMS[0];
        assert!(!matches_applied(&MIGRATIONS[1], one));
    }

    #[test]
    fn statement_checksum_ignores_comments_and_blank_lines() {
        let a = "-- The lease ring (an old citation).\n--\nCREATE TABLE IF NOT EXISTS t (\n    k int PRIMARY KEY\n);\n";
        let b = "-- The lease ring (docs/architecture.md, \"The ring\").\n\n-- A new note.\nCREATE TABLE IF NOT EXISTS t (\n\n    k int PRIMARY KEY\n);\n\n";
        assert_ne!(checksum(a), checksum(b));
        assert_eq!(statement_checksum(a), statement_checksum(b));
        let c = "-- The lease ring (an old citation).\nCREATE TABLE IF NOT EXISTS t (\n    k bigint PRIMARY KEY\n);\n";
        assert_ne!(statement_checksum(a), statement_checksum(c));
        // Every embedded file: dropping or changing its comments keeps its statement checksum.
        for m in MIGRATIONS {
            let edited: String = m
                .cql
                .lines()
                .map(|l| {
                    if l.trim_start().starts_with("--") {
                        "-- (edited)\n".to_string()
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            assert_eq!(
                statement_checksum(&edited),
                statement_checksum(m.cql),
                "{}",
                m.name
            );
        }
    }
}
