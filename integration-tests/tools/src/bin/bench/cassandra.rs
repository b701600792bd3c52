//! `bench raw` and `bench naive`: the two baselines straight on Cassandra, with the same driver:
//! raw inserts of Rebound's pointer row (the floor of the write path) and the naive single-table
//! queue that Rebound's layout avoids.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::StreamExt;
use scylla::{
    client::{session::Session, session_builder::SessionBuilder},
    statement::{batch::Batch, batch::BatchType, prepared::PreparedStatement},
    value::{CqlDate, CqlTimestamp},
};

use super::*;

pub(crate) async fn session(a: &Args) -> anyhow::Result<Session> {
    let host = a.text("cassandra", "127.0.0.1:9042");
    SessionBuilder::new()
        .known_node(&host)
        .build()
        .await
        .with_context(|| format!("connecting to Cassandra at {host}"))
}

pub(crate) async fn fresh_keyspace(s: &Session, ks: &str) -> anyhow::Result<()> {
    s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), ())
        .await?;
    s.query_unpaged(
        format!(
            "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ),
        (),
    )
    .await?;
    Ok(())
}

pub(crate) async fn prepared(s: &Session, cql: String) -> anyhow::Result<PreparedStatement> {
    let mut p = s.prepare(cql).await?;
    p.set_is_idempotent(true);
    p.set_consistency(scylla::statement::Consistency::LocalQuorum);
    Ok(p)
}

/// Raw driver inserts of Rebound's Tier-5 pointer row: the ceiling of the write path.
pub(crate) async fn raw(a: &Args) -> anyhow::Result<J> {
    let n: usize = a.get("n", 100_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    let s = Arc::new(session(a).await?);
    let ks = "bench_raw";
    fresh_keyspace(&s, ks).await?;
    s.query_unpaged(
        format!(
            "CREATE TABLE {ks}.pointers (region text, cluster text, day date, window int, \
             service text, instance text, bucket int, transaction_id text, generation bigint, \
             attempt int, enqueued_at timestamp, PRIMARY KEY ((region, cluster, day, window, \
             service, instance, bucket), transaction_id))"
        ),
        (),
    )
    .await?;
    let ins = prepared(
        &s,
        format!(
            "INSERT INTO {ks}.pointers (region, cluster, day, window, service, instance, bucket, \
             transaction_id, generation, attempt, enqueued_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
    )
    .await?;
    let row = |i: usize| {
        (
            "r",
            "c",
            CqlDate(1 << 31),
            (i / 50_000) as i32,
            "bench",
            format!("lane-{}", i % 8),
            0i32,
            format!("tx-{i}"),
            i as i64,
            1i32,
            CqlTimestamp(now_ms()),
        )
    };
    let singles: usize = a.get("singles", n.min(20_000))?;
    // The floor of the costs: one request per insert, Cassandra's CPU and the driver's.
    let meter = Meter::from_args(a, 0)?;
    let quiet_s = quiesce(a, "raw").await?;
    eprintln!("raw: {singles} single inserts at concurrency {conc}");
    let before = meter.read().await;
    let (single_ops, single_lat) = closed_loop(singles, conc, |i| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            s.execute_unpaged(&ins, row(i)).await?;
            Ok(())
        }
    })
    .await?;
    let single_cost = meter.per_item(before, singles).await;
    eprintln!("raw: {n} inserts in single-partition unlogged batches of 500");
    let before = meter.read().await;
    let started = Instant::now();
    let batches = n.div_ceil(500);
    closed_loop(batches, 4, |b| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            let mut batch = Batch::new(BatchType::Unlogged);
            let mut values = Vec::new();
            for i in b * 500..((b + 1) * 500).min(n) {
                batch.append_statement(ins.clone());
                let mut r = row(i + 1_000_000);
                r.5 = format!("lane-{}", b % 8);
                r.3 = b as i32;
                values.push(r);
            }
            s.batch(&batch, values).await?;
            Ok(())
        }
    })
    .await?;
    let batch_ops = n as f64 / started.elapsed().as_secs_f64();
    let batch_cost = meter.per_item(before, n).await;
    // `--lwt N`: what a conditional first write of a state row would cost, one Paxos round
    // per new transaction (`INSERT ... IF NOT EXISTS`, a partition per transaction).
    let lwt: usize = a.get("lwt", 0)?;
    let mut extra = Vec::new();
    if lwt > 0 {
        let (ops, lat, cost) = lwt_singles(&s, ks, lwt, conc, &meter).await?;
        extra.push(("enqueue_single_lwt", single_json(ops, lat, conc)));
        extra.push(("cost_per_item_lwt", cost));
    }
    s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), ())
        .await?;
    let mut fields = vec![
        ("system", J::S("cassandra-raw".into())),
        ("version", J::S("Cassandra 5.0.8, scylla driver 1.x".into())),
        (
            "guarantees",
            J::S("Write ceiling only: one prepared INSERT per item at LOCAL_QUORUM, no state row, no directory, no delivery".into()),
        ),
        ("n", J::N(n as f64)),
        ("cassandra_quiet_after_s", J::N(quiet_s)),
        ("enqueue_single", single_json(single_ops, single_lat, conc)),
        (
            "enqueue_batch",
            J::O(vec![("ops_per_sec", J::N(batch_ops)), ("batch", J::N(500.0))]),
        ),
        ("drain", J::Null),
        (
            "cost_per_item",
            J::O(vec![
                ("enqueue_single", single_cost),
                ("enqueue_batch", batch_cost),
            ]),
        ),
        ("lateness_ms", J::Null),
        ("retry_ok", J::Null),
        ("peak_rss_mb", J::Null),
    ];
    fields.extend(extra);
    Ok(J::O(fields))
}

/// `n` single `INSERT ... IF NOT EXISTS` of a row per transaction, at concurrency `conc`:
/// the rate, the latencies and the cost per item.
async fn lwt_singles(
    s: &Arc<Session>,
    ks: &str,
    n: usize,
    conc: usize,
    meter: &Meter,
) -> anyhow::Result<(f64, serde_like::Pct, J)> {
    s.query_unpaged(
        format!(
            "CREATE TABLE {ks}.firsts (service text, transaction_id text, generation bigint, \
             PRIMARY KEY ((service, transaction_id)))"
        ),
        (),
    )
    .await?;
    let mut ins = prepared(
        s,
        format!(
            "INSERT INTO {ks}.firsts (service, transaction_id, generation) VALUES (?, ?, ?) \
             IF NOT EXISTS"
        ),
    )
    .await?;
    ins.set_serial_consistency(Some(scylla::statement::SerialConsistency::LocalSerial));
    eprintln!("raw: {n} single INSERT ... IF NOT EXISTS at concurrency {conc}");
    let before = meter.read().await;
    let (ops, lat) = closed_loop(n, conc, |i| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            s.execute_unpaged(&ins, ("bench", format!("tx-{i}"), i as i64))
                .await?;
            Ok(())
        }
    })
    .await?;
    Ok((ops, lat, meter.per_item(before, n).await))
}

/// The naive design that Rebound's directory avoids (docs/architecture.md, invariant 5,
/// "Tombstones stay bounded"): one table read by status and due time, with a row delete per
/// finished job. Its drain polls the head of the partition, where the deleted rows'
/// tombstones pile up.
pub(crate) async fn naive(a: &Args) -> anyhow::Result<J> {
    let n: usize = a.get("n", 100_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    let s = Arc::new(session(a).await?);
    let ks = "bench_naive";
    fresh_keyspace(&s, ks).await?;
    s.query_unpaged(
        format!(
            "CREATE TABLE {ks}.jobs (queue text, status text, due_at timestamp, id text, \
             payload blob, attempt int, PRIMARY KEY ((queue, status), due_at, id))"
        ),
        (),
    )
    .await?;
    let ins = prepared(
        &s,
        format!(
            "INSERT INTO {ks}.jobs (queue, status, due_at, id, payload, attempt) \
             VALUES (?, 'pending', ?, ?, ?, 1)"
        ),
    )
    .await?;
    let poll = prepared(
        &s,
        format!(
            "SELECT due_at, id FROM {ks}.jobs WHERE queue = ? AND status = 'pending' \
             AND due_at <= ? LIMIT 500"
        ),
    )
    .await?;
    let del = prepared(
        &s,
        format!("DELETE FROM {ks}.jobs WHERE queue = ? AND status = 'pending' AND due_at = ? AND id = ?"),
    )
    .await?;
    let singles = n.min(20_000);
    let tombstones_before = tombstone_lines(a);
    let t0 = now_ms();
    let quiet_s = quiesce(a, "naive").await?;
    eprintln!("naive: {singles} single inserts at concurrency {conc}");
    let (single_ops, single_lat) = closed_loop(singles, conc, |i| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            s.execute_unpaged(
                &ins,
                ("q", CqlTimestamp(t0), format!("s-{i}"), vec![b'x'; 64]),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    eprintln!("naive: {n} inserts in unlogged batches of 500");
    let started = Instant::now();
    closed_loop(n.div_ceil(500), 4, |b| {
        let s = s.clone();
        let ins = ins.clone();
        async move {
            let mut batch = Batch::new(BatchType::Unlogged);
            let mut values = Vec::new();
            for i in b * 500..((b + 1) * 500).min(n) {
                batch.append_statement(ins.clone());
                values.push(("q", CqlTimestamp(t0), format!("b-{i}"), vec![b'x'; 64]));
            }
            s.batch(&batch, values).await?;
            Ok(())
        }
    })
    .await?;
    let batch_ops = n as f64 / started.elapsed().as_secs_f64();

    // Drain: poll the due head, delete each job (the "ack"), until empty or the reads fail.
    eprintln!("naive: draining {} by polling and deleting", n + singles);
    let started = Instant::now();
    let mut drained = 0usize;
    let mut read_failures = 0usize;
    let mut poll_ms = Vec::new();
    let mut aborted = None;
    while drained < n + singles && started.elapsed() < Duration::from_secs(1800) {
        let t = Instant::now();
        let res = s
            .execute_unpaged(&poll, ("q", CqlTimestamp(now_ms())))
            .await;
        poll_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let rows: Vec<(CqlTimestamp, String)> = match res {
            Ok(r) => r.into_rows_result()?.rows()?.collect::<Result<_, _>>()?,
            Err(e) => {
                read_failures += 1;
                eprintln!("naive: poll failed after {drained} drained: {e}");
                if read_failures >= 3 {
                    aborted = Some(format!("{e}"));
                    break;
                }
                continue;
            }
        };
        if rows.is_empty() {
            break;
        }
        let k = rows.len();
        futures::stream::iter(rows)
            .map(|(due, id)| {
                let s = s.clone();
                let del = del.clone();
                async move { s.execute_unpaged(&del, ("q", due, id)).await }
            })
            .buffer_unordered(conc)
            .collect::<Vec<_>>()
            .await;
        drained += k;
    }
    let drain_secs = started.elapsed().as_secs_f64();
    let polls = percentiles(poll_ms.clone());
    let first_polls: Vec<f64> = poll_ms.iter().take(10).copied().collect();
    let last_polls: Vec<f64> = poll_ms.iter().rev().take(10).copied().collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    // Let Cassandra write its warnings before counting them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tombstones = tombstone_json(a, tombstones_before);
    let mut fields = vec![
        ("system", J::S("cassandra-naive".into())),
        ("version", J::S("Cassandra 5.0.8, scylla driver 1.x".into())),
        (
            "guarantees",
            J::S("One table (queue, status) by due_at with a row delete per job, LOCAL_QUORUM; single poller, so no double delivery here; tombstones accumulate at the read head".into()),
        ),
        ("n", J::N(n as f64)),
        ("cassandra_quiet_after_s", J::N(quiet_s)),
        ("enqueue_single", single_json(single_ops, single_lat, conc)),
        (
            "enqueue_batch",
            J::O(vec![("ops_per_sec", J::N(batch_ops)), ("batch", J::N(500.0))]),
        ),
        (
            "drain",
            J::O(vec![
                ("acked_per_sec", J::N(drained as f64 / drain_secs)),
                ("n", J::N(drained as f64)),
            ]),
        ),
        ("lateness_ms", J::Null),
        ("retry_ok", J::B(aborted.is_none() && drained >= n + singles)),
        ("peak_rss_mb", J::Null),
        (
            "poll_ms",
            J::O(vec![
                ("first10_mean", J::N(mean(&first_polls))),
                ("last10_mean", J::N(mean(&last_polls))),
                ("p99", J::N(polls.p99)),
                ("max", J::N(polls.max)),
            ]),
        ),
        ("read_failures", J::N(read_failures as f64)),
        ("aborted", aborted.map_or(J::Null, J::S)),
    ];
    fields.extend(tombstones);
    Ok(J::O(fields))
}
