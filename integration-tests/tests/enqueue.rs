//! The enqueue path against a real Cassandra: the five tiers hold exactly the expected rows,
//! buckets roll, the W+1 rule holds at every edge, re-enqueues are idempotent, and bad input
//! changes nothing.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use chrono::NaiveDate as CqlDate;
use rebound_integration_tests::{test_config, ts_ms, utc_ms, TestNode, DATA_TABLES};
use rebound_proto::v1 as pb;
use tonic::Code;

fn req(service: &str, txid: &str, delay_ms: u64) -> pb::EnqueueRetryRequest {
    pb::EnqueueRetryRequest {
        service: service.into(),
        transaction_id: txid.into(),
        payload: format!("payload of {txid}").into_bytes(),
        schedule: Some(pb::enqueue_retry_request::Schedule::Delay(
            prost_types::Duration {
                seconds: (delay_ms / 1000) as i64,
                nanos: ((delay_ms % 1000) * 1_000_000) as i32,
            },
        )),
        attempt: 1,
        last_error: "503 from downstream".into(),
        ..Default::default()
    }
}

fn date(d: CqlDate) -> String {
    d.to_string()
}

fn epoch_days(d: CqlDate) -> i64 {
    (d - CqlDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days()
}

/// Absolute window number (windows since the epoch) of a (day, index) pair.
fn abs_window(day: CqlDate, index: i32, window_ms: i64) -> i64 {
    epoch_days(day) * (86_400_000 / window_ms) + i64::from(index)
}

type PointerKey = (CqlDate, i32, String, String, i32);
type InstanceKey = (CqlDate, i32, String, String);

#[derive(Debug, Clone)]
struct PointerRow {
    day: CqlDate,
    window: i32,
    service: String,
    instance: String,
    bucket: i32,
    transaction_id: String,
    generation: i64,
}

async fn pointers(n: &TestNode) -> Vec<PointerRow> {
    let res = n
        .cql
        .query_unpaged(
            format!(
                "SELECT day, window, service, instance, bucket, transaction_id, generation \
                 FROM {}.retry_transactions_by_bucket",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    res.rows::<(CqlDate, i32, String, String, i32, String, i64)>()
        .unwrap()
        .map(|r| {
            let (day, window, service, instance, bucket, transaction_id, generation) = r.unwrap();
            PointerRow {
                day,
                window,
                service,
                instance,
                bucket,
                transaction_id,
                generation,
            }
        })
        .collect()
}

/// (service, transaction_id) -> (status, generation, loc_day, loc_window, loc_instance, loc_bucket)
type StateMap = BTreeMap<(String, String), (String, i64, CqlDate, i32, String, i32)>;

async fn states(n: &TestNode) -> StateMap {
    let res = n
        .cql
        .query_unpaged(
            format!(
                "SELECT service, transaction_id, status, generation, body FROM {}.transactions",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    res.rows::<(String, String, String, i64, Vec<u8>)>()
        .unwrap()
        .map(|r| {
            let (s, t, st, g, body) = r.unwrap();
            let loc = body_of(&body).location.expect("a state row has a location");
            (
                (s, t),
                (
                    st,
                    g,
                    cql_date(loc.day),
                    loc.window as i32,
                    loc.instance,
                    loc.bucket as i32,
                ),
            )
        })
        .collect()
}

/// The `body` cell of a state row, decoded.
fn body_of(bytes: &[u8]) -> rebound_server::store::body::Body {
    rebound_server::store::body::Body::decode_stored(bytes, "test row").unwrap()
}

fn cql_date(days_since_epoch: i32) -> CqlDate {
    CqlDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Duration::days(days_since_epoch.into())
}

#[tokio::test]
async fn tiers_hold_exactly_the_expected_rows() {
    let cfg = test_config("tiers");
    // 10:00:00.500 with 2 s windows: the current window is 18000.
    let now = utc_ms("2026-11-30 10:00:00.500");
    let (n, _clock) = TestNode::with_manual_clock(cfg, now).await;
    let mut c = n.client.clone();
    let mut expected_window: BTreeMap<String, i32> = BTreeMap::new();
    for i in 0..10 {
        c.enqueue_retry(req("orders", &format!("o-{i}"), 0))
            .await
            .unwrap();
        expected_window.insert(format!("o-{i}"), 18001);
    }
    for i in 0..3 {
        // Due 10:00:05.500: window 18002.
        c.enqueue_retry(req("orders", &format!("late-{i}"), 5_000))
            .await
            .unwrap();
        expected_window.insert(format!("late-{i}"), 18002);
    }
    for i in 0..2 {
        c.enqueue_retry(req("billing", &format!("b-{i}"), 0))
            .await
            .unwrap();
        expected_window.insert(format!("b-{i}"), 18001);
    }

    // Tier 5: one pointer per transaction, in the expected window, under this node's lanes.
    let ptrs = pointers(&n).await;
    assert_eq!(ptrs.len(), 15);
    let prefix = format!("node-a-{}-", n.node.as_ref().unwrap().boot_epoch);
    for p in &ptrs {
        assert_eq!(date(p.day), "2026-11-30");
        assert_eq!(p.window, expected_window[&p.transaction_id], "{p:?}");
        let lane: u32 = p
            .instance
            .strip_prefix(&prefix)
            .expect("instance name")
            .parse()
            .unwrap();
        assert!(lane < 2, "{p:?}");
    }
    let txids: BTreeSet<_> = ptrs.iter().map(|p| p.transaction_id.clone()).collect();
    assert_eq!(txids.len(), 15);

    // Buckets: per (window, service, instance), contiguous from 0, full but the last.
    let mut per_bucket: BTreeMap<PointerKey, usize> = BTreeMap::new();
    for p in &ptrs {
        *per_bucket
            .entry((
                p.day,
                p.window,
                p.service.clone(),
                p.instance.clone(),
                p.bucket,
            ))
            .or_default() += 1;
    }
    let mut per_instance: BTreeMap<InstanceKey, Vec<(i32, usize)>> = BTreeMap::new();
    for ((d, w, s, i, b), count) in &per_bucket {
        per_instance
            .entry((*d, *w, s.clone(), i.clone()))
            .or_default()
            .push((*b, *count));
    }
    for (key, buckets) in &per_instance {
        for (pos, (b, count)) in buckets.iter().enumerate() {
            assert_eq!(*b as usize, pos, "{key:?}: buckets {buckets:?}");
            if pos + 1 < buckets.len() {
                assert_eq!(*count, 4, "{key:?}: buckets {buckets:?}");
            } else {
                assert!((1..=4).contains(count), "{key:?}: buckets {buckets:?}");
            }
        }
    }

    // Tier 4 is exactly the set of bucket partitions.
    let res = n
        .cql
        .query_unpaged(
            format!(
                "SELECT day, window, service, instance, bucket FROM {}.buckets_by_instance",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let tier4: BTreeSet<PointerKey> = res
        .rows::<PointerKey>()
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(tier4, per_bucket.keys().cloned().collect::<BTreeSet<_>>());

    // Tier 3 is exactly the set of (window, service, instance), with Cassandra's own token of
    // (service, instance), checked through a scratch table keyed the same way.
    let res = n
        .cql
        .query_unpaged(
            format!(
                "SELECT day, window, instance_token, service, instance FROM {}.instances_by_window",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let tier3: Vec<(CqlDate, i32, i64, String, String)> =
        res.rows().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(
        tier3
            .iter()
            .map(|(d, w, _, s, i)| (*d, *w, s.clone(), i.clone()))
            .collect::<BTreeSet<_>>(),
        per_instance.keys().cloned().collect::<BTreeSet<_>>()
    );
    assert_eq!(tier3.len(), per_instance.len());
    n.cql
        .query_unpaged(
            format!(
                "CREATE TABLE IF NOT EXISTS {}.token_check (service text, instance text, \
                 PRIMARY KEY ((service, instance)))",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap();
    for (_, _, token, service, instance) in &tier3 {
        n.cql
            .query_unpaged(
                format!(
                    "INSERT INTO {}.token_check (service, instance) VALUES (?, ?)",
                    n.ks()
                ),
                (service, instance),
            )
            .await
            .unwrap();
        let (cassandra_token,): (i64,) = n
            .cql
            .query_unpaged(
                format!(
                    "SELECT token(service, instance) FROM {}.token_check WHERE service = ? AND instance = ?",
                    n.ks()
                ),
                (service, instance),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .single_row()
            .unwrap();
        assert_eq!(*token, cassandra_token, "{service}/{instance}");
    }

    // Tiers 2 and 1.
    let res = n
        .cql
        .query_unpaged(
            format!("SELECT day, window FROM {}.windows_by_day", n.ks()),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let tier2: BTreeSet<(String, i32)> = res
        .rows::<(CqlDate, i32)>()
        .unwrap()
        .map(|r| {
            let (d, w) = r.unwrap();
            (date(d), w)
        })
        .collect();
    assert_eq!(
        tier2,
        BTreeSet::from([
            ("2026-11-30".to_string(), 18001),
            ("2026-11-30".to_string(), 18002)
        ])
    );
    let tier1: Vec<(i32, String)> = n
        .select::<(i32, CqlDate)>("SELECT year, day FROM {ks}.days_by_year")
        .await
        .into_iter()
        .map(|(y, d)| (y, date(d)))
        .collect();
    assert_eq!(tier1, vec![(2026, "2026-11-30".to_string())]);

    // State rows: one per transaction, SCHEDULED, pointing at the one pointer with the same
    // generation.
    let st = states(&n).await;
    assert_eq!(st.len(), 15);
    for p in &ptrs {
        let (status, generation, d, w, i, b) = &st[&(p.service.clone(), p.transaction_id.clone())];
        assert_eq!(status, "SCHEDULED");
        assert_eq!(*generation, p.generation);
        assert_eq!((*d, *w, i, *b), (p.day, p.window, &p.instance, p.bucket));
    }
    assert_eq!(n.count("dead_letters").await, 0);
    n.finish().await;
}

#[tokio::test]
async fn bucket_rolls_at_bucket_size_and_per_window_and_boot() {
    let mut cfg = test_config("rolls");
    cfg.lanes = 1;
    cfg.bucket_size = 3;
    let now = utc_ms("2026-11-30 12:00:00.000");
    let (n, clock) = TestNode::with_manual_clock(cfg.clone(), now).await;
    let mut c = n.client.clone();
    for i in 0..7 {
        c.enqueue_retry(req("svc", &format!("t{i}"), 0))
            .await
            .unwrap();
    }
    let count_by_bucket = |ptrs: &[PointerRow], window: i32| {
        let mut m: BTreeMap<(String, i32), usize> = BTreeMap::new();
        for p in ptrs.iter().filter(|p| p.window == window) {
            *m.entry((p.instance.clone(), p.bucket)).or_default() += 1;
        }
        m
    };
    let epoch = n.node.as_ref().unwrap().boot_epoch;
    let inst = format!("node-a-{epoch}-0");
    let w1 = 21_601; // 12:00:00 is window 21600; W+1.
    assert_eq!(
        count_by_bucket(&pointers(&n).await, w1),
        BTreeMap::from([
            ((inst.clone(), 0), 3),
            ((inst.clone(), 1), 3),
            ((inst.clone(), 2), 1)
        ])
    );
    // The next window starts again at bucket 0.
    clock.advance(2_000);
    for i in 7..9 {
        c.enqueue_retry(req("svc", &format!("t{i}"), 0))
            .await
            .unwrap();
    }
    assert_eq!(
        count_by_bucket(&pointers(&n).await, w1 + 1),
        BTreeMap::from([((inst.clone(), 0), 2)])
    );
    // A restarted node writes under a new boot epoch: its counters start at 0 without reading
    // anything and without adding to the previous process's buckets.
    let keyspace = n.config.keyspace.clone();
    let node = n.node.unwrap();
    node.shutdown().await.unwrap();
    clock.advance(1);
    let mut cfg2 = cfg.clone();
    cfg2.keyspace = keyspace;
    let (n2, _clock2) = TestNode::with_manual_clock(cfg2, clock_now(&clock)).await;
    let mut c2 = n2.client.clone();
    for i in 9..13 {
        c2.enqueue_retry(req("svc", &format!("t{i}"), 0))
            .await
            .unwrap();
    }
    let epoch2 = n2.node.as_ref().unwrap().boot_epoch;
    assert_ne!(epoch, epoch2);
    let inst2 = format!("node-a-{epoch2}-0");
    assert_eq!(
        count_by_bucket(&pointers(&n2).await, w1 + 1),
        BTreeMap::from([((inst, 0), 2), ((inst2.clone(), 0), 3), ((inst2, 1), 1)])
    );
    n2.finish().await;
}

fn clock_now(c: &rebound_server::clock::ManualClock) -> i64 {
    use rebound_server::clock::Clock;
    c.now_ms()
}

#[tokio::test]
async fn never_the_current_or_a_past_window_at_every_edge() {
    let cfg = test_config("edges");
    let window_ms = 2_000;
    let (n, clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 00:00:00.000")).await;
    let mut c = n.client.clone();
    let mut k = 0;
    let edges = [
        "2026-11-30 00:00:00.000", // first instant of a window and of a day
        "2026-11-30 00:00:01.999", // last instant of a window
        "2026-11-30 23:59:58.000", // first instant of the last window of the day
        "2026-11-30 23:59:59.999", // last instant of the day
        "2026-12-31 23:59:59.999", // last instant of the year
        "2026-12-31 23:59:58.001",
        "2027-01-01 00:00:00.000",
    ];
    for edge in edges {
        let now = utc_ms(edge);
        clock.set(now);
        let current = now.div_euclid(window_ms);
        // Due now, due in the past, due an hour ago, due at the end of this window.
        let schedules = [
            pb::enqueue_retry_request::Schedule::Delay(prost_types::Duration::default()),
            pb::enqueue_retry_request::Schedule::DueTime(prost_types::Timestamp {
                seconds: (now - 1).div_euclid(1000),
                nanos: ((now - 1).rem_euclid(1000) * 1_000_000) as i32,
            }),
            pb::enqueue_retry_request::Schedule::DueTime(prost_types::Timestamp {
                seconds: now / 1000 - 3600,
                nanos: 0,
            }),
            pb::enqueue_retry_request::Schedule::DueTime(prost_types::Timestamp {
                seconds: ((current + 1) * window_ms - 1) / 1000,
                nanos: ((((current + 1) * window_ms - 1) % 1000) * 1_000_000) as i32,
            }),
        ];
        for s in schedules {
            k += 1;
            let mut r = req("edge", &format!("e{k}"), 0);
            r.schedule = Some(s);
            let resp = c.enqueue_retry(r).await.unwrap().into_inner();
            // The response's due time is the end of the chosen window: W+1 ends at +2 windows.
            assert_eq!(
                ts_ms(resp.due_time.as_ref().unwrap()),
                (current + 2) * window_ms,
                "{edge}"
            );
            let retry = c
                .get_retry(pb::GetRetryRequest {
                    service: "edge".into(),
                    transaction_id: format!("e{k}"),
                })
                .await
                .unwrap()
                .into_inner();
            let loc = retry.location.unwrap();
            let day = chrono::NaiveDate::parse_from_str(&loc.day, "%Y-%m-%d").unwrap();
            let days = (day - chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days();
            let abs = days * (86_400_000 / window_ms) + i64::from(loc.window);
            assert_eq!(abs, current + 1, "{edge}: landed in {loc:?}");
        }
    }
    // The year rolled over: Tier 1 lists 2027-01-01 under 2027.
    let tier1: BTreeSet<(i32, String)> = n
        .select::<(i32, CqlDate)>("SELECT year, day FROM {ks}.days_by_year")
        .await
        .into_iter()
        .map(|(y, d)| (y, date(d)))
        .collect();
    assert!(
        tier1.contains(&(2027, "2027-01-01".to_string())),
        "{tier1:?}"
    );
    assert!(
        tier1.contains(&(2026, "2026-12-01".to_string())),
        "{tier1:?}"
    );

    // And for many random instants and delays, the window is never the current or a past one.
    let mut rng_state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state
    };
    for _ in 0..150 {
        let now = utc_ms("2026-01-01 00:00:00.000") + (next() % (365 * 86_400_000)) as i64;
        clock.set(now);
        let delay = next() % 5_000;
        k += 1;
        c.enqueue_retry(req("edge", &format!("e{k}"), delay))
            .await
            .unwrap();
    }
    for p in pointers(&n).await {
        // The pointer's window must be after the window its enqueue happened in; the state row
        // records due_at = the end of that window, so check that instead of replaying clocks.
        let abs = abs_window(p.day, p.window, window_ms);
        assert!(abs > 0);
    }
    let res = n
        .cql
        .query_unpaged(format!("SELECT body FROM {}.transactions", n.ks()), ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    for r in res.rows::<(Vec<u8>,)>().unwrap() {
        let body = body_of(&r.unwrap().0);
        let loc = body.location.unwrap();
        let (d, w) = (cql_date(loc.day), loc.window as i32);
        let (due, enqueued) = (
            scylla::value::CqlTimestamp(body.due_at_ms),
            scylla::value::CqlTimestamp(body.last_enqueued_at_ms),
        );
        let abs = abs_window(d, w, window_ms);
        assert!(
            abs > enqueued.0.div_euclid(window_ms),
            "enqueued at {} landed in window {abs}",
            enqueued.0
        );
        assert_eq!(due.0, (abs + 1) * window_ms);
    }
    n.finish().await;
}

#[tokio::test]
async fn re_enqueue_is_idempotent() {
    let cfg = test_config("idem");
    let now = utc_ms("2026-11-30 08:00:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, now).await;
    let mut c = n.client.clone();

    // Same transaction, same window: confirmed, same generation, one pointer.
    let a = c
        .enqueue_retry(req("svc", "tx", 3_000))
        .await
        .unwrap()
        .into_inner();
    assert!(!a.deduplicated);
    clock.advance(100);
    let b = c
        .enqueue_retry(req("svc", "tx", 3_000))
        .await
        .unwrap()
        .into_inner();
    assert!(b.deduplicated);
    assert_eq!(b.generation, a.generation);
    assert_eq!(b.due_time, a.due_time);
    assert_eq!(pointers(&n).await.len(), 1);

    // A different due time: rescheduled under a new generation; the old pointer is stale.
    let d = c
        .enqueue_retry(req("svc", "tx", 30_000))
        .await
        .unwrap()
        .into_inner();
    assert!(d.deduplicated);
    assert!(d.generation > a.generation);
    let ptrs = pointers(&n).await;
    assert_eq!(ptrs.len(), 2);
    let st = states(&n).await;
    let (status, generation, ..) = &st[&("svc".to_string(), "tx".to_string())];
    assert_eq!(status, "SCHEDULED");
    assert_eq!(*generation as u64, d.generation);
    assert_eq!(
        ptrs.iter().filter(|p| p.generation == *generation).count(),
        1
    );
    let retry = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "tx".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(retry.enqueue_count, 3);
    assert_eq!(retry.status, pb::RetryStatus::Scheduled as i32);

    // Many concurrent enqueues of one transaction: exactly one live pointer.
    let mut handles = Vec::new();
    for i in 0..16u64 {
        let mut c = n.client.clone();
        handles.push(tokio::spawn(async move {
            c.enqueue_retry(req("svc", "race", 2_000 + i * 2_000))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let st = states(&n).await;
    let (_, live, ..) = &st[&("svc".to_string(), "race".to_string())];
    let race: Vec<_> = pointers(&n)
        .await
        .into_iter()
        .filter(|p| p.transaction_id == "race")
        .collect();
    assert!(!race.is_empty());
    assert_eq!(
        race.iter().filter(|p| p.generation == *live).count(),
        1,
        "{race:?}"
    );

    // Cancel: the state becomes CANCELLED; a second cancel reports it was already finished.
    let cancel = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "tx".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancel.cancelled);
    assert_eq!(cancel.status, pb::RetryStatus::Cancelled as i32);
    let again = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "tx".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.cancelled);
    // The terminal row carries a TTL.
    let (ttl,): (Option<i32>,) = n
        .cql
        .query_unpaged(
            format!(
                "SELECT TTL(status) FROM {}.transactions WHERE region = 'local' AND cluster = 'default' \
                 AND service = 'svc' AND transaction_id = 'tx'",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert!(ttl.is_some_and(|t| t > 3_000 && t <= 3_600), "ttl {ttl:?}");
    // A cancelled transaction may be enqueued again: a new retry.
    let e = c
        .enqueue_retry(req("svc", "tx", 0))
        .await
        .unwrap()
        .into_inner();
    assert!(!e.deduplicated);

    // A transaction that already succeeded is not run again by a late duplicate.
    n.cql
        .query_unpaged(
            format!(
                "UPDATE {}.transactions SET status = 'SUCCEEDED' WHERE region = 'local' \
                 AND cluster = 'default' AND service = 'svc' AND transaction_id = 'tx'",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap();
    let before = pointers(&n).await.len();
    let err = c.enqueue_retry(req("svc", "tx", 0)).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    assert_eq!(pointers(&n).await.len(), before);

    // Unknown transactions.
    let err = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    n.finish().await;
}

fn batch_outcomes(
    resp: pb::EnqueueRetryBatchResponse,
) -> Vec<Result<pb::EnqueueRetryResponse, pb::ItemError>> {
    resp.results
        .into_iter()
        .map(|r| match r.result.unwrap() {
            pb::enqueue_retry_result::Result::Response(r) => Ok(r),
            pb::enqueue_retry_result::Result::Error(e) => Err(e),
        })
        .collect()
}

/// A batch follows the rules of single enqueues item by item: confirm in the same window,
/// reschedule under a new generation otherwise, refuse a SUCCEEDED transaction and an
/// over-long delay (naming the item), and it shares the per-transaction lock with single
/// enqueues and other batches, so racing writers leave one live pointer and never deadlock.
#[tokio::test]
async fn batch_re_enqueue_follows_the_single_rules_and_races_safely() {
    let cfg = test_config("batchidem");
    let now = utc_ms("2026-11-30 08:10:00.100");
    let (n, clock) = TestNode::with_manual_clock(cfg, now).await;
    let mut c = n.client.clone();
    let batch =
        |items: Vec<pb::EnqueueRetryRequest>| pb::EnqueueRetryBatchRequest { requests: items };
    let first = batch_outcomes(
        c.enqueue_retry_batch(batch(vec![
            req("svc", "a", 3_000),
            req("svc", "b", 3_000),
            req("svc", "done", 3_000),
        ]))
        .await
        .unwrap()
        .into_inner(),
    );
    let first: Vec<_> = first.into_iter().map(Result::unwrap).collect();
    assert!(first.iter().all(|r| !r.deduplicated));
    n.cql
        .query_unpaged(
            format!(
                "UPDATE {}.transactions SET status = 'SUCCEEDED' WHERE region = 'local' \
                 AND cluster = 'default' AND service = 'svc' AND transaction_id = 'done'",
                n.ks()
            ),
            (),
        )
        .await
        .unwrap();
    clock.advance(100);
    let second = batch_outcomes(
        c.enqueue_retry_batch(batch(vec![
            req("svc", "a", 3_000),
            req("svc", "b", 30_000),
            req("svc", "c", 0),
            req("svc", "done", 3_000),
            req("svc", "far", 40 * 86_400_000),
        ]))
        .await
        .unwrap()
        .into_inner(),
    );
    let a = second[0].as_ref().unwrap();
    assert!(a.deduplicated);
    assert_eq!(
        (a.generation, &a.due_time),
        (first[0].generation, &first[0].due_time)
    );
    let b = second[1].as_ref().unwrap();
    assert!(b.deduplicated);
    assert!(b.generation > first[1].generation);
    assert!(!second[2].as_ref().unwrap().deduplicated);
    let done = second[3].as_ref().unwrap_err();
    assert_eq!(done.code, Code::AlreadyExists as i32, "{done:?}");
    let far = second[4].as_ref().unwrap_err();
    assert_eq!(far.code, Code::InvalidArgument as i32);
    assert!(far.message.contains("requests[4].delay"), "{}", far.message);
    let ptrs = pointers(&n).await;
    let count = |id: &str| ptrs.iter().filter(|p| p.transaction_id == id).count();
    assert_eq!(
        (
            count("a"),
            count("b"),
            count("c"),
            count("done"),
            count("far")
        ),
        (1, 2, 1, 1, 0)
    );
    let st = states(&n).await;
    assert!(!st.contains_key(&("svc".to_string(), "far".to_string())));
    let (status, generation, ..) = &st[&("svc".to_string(), "b".to_string())];
    assert_eq!(
        (status.as_str(), *generation as u64),
        ("SCHEDULED", b.generation)
    );
    assert_eq!(st[&("svc".to_string(), "done".to_string())].0, "SUCCEEDED");

    // Batches and single enqueues of the same transactions at once, in opposite orders.
    let mut handles = Vec::new();
    for i in 0..8u64 {
        let mut c = n.client.clone();
        handles.push(tokio::spawn(async move {
            let mut items = vec![
                req("svc", "race", 2_000 + i * 2_000),
                req("svc", "other", 4_000 + i * 2_000),
            ];
            if i % 2 == 1 {
                items.reverse();
            }
            let out = batch_outcomes(
                c.enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests: items })
                    .await
                    .unwrap()
                    .into_inner(),
            );
            assert!(out.iter().all(Result::is_ok), "{out:?}");
        }));
        let mut c = n.client.clone();
        handles.push(tokio::spawn(async move {
            c.enqueue_retry(req("svc", "race", 3_000 + i * 2_000))
                .await
                .unwrap();
        }));
    }
    tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(handles))
        .await
        .expect("racing batches finish (no lock cycle)")
        .into_iter()
        .for_each(|h| h.unwrap());
    let st = states(&n).await;
    let ptrs = pointers(&n).await;
    for id in ["race", "other"] {
        let (_, live, ..) = &st[&("svc".to_string(), id.to_string())];
        let mine: Vec<_> = ptrs.iter().filter(|p| p.transaction_id == id).collect();
        assert_eq!(
            mine.iter().filter(|p| p.generation == *live).count(),
            1,
            "{id}: {mine:?}"
        );
    }
    n.finish().await;
}

/// A state row written before schema 0007 (one column per field, no body) is read whole,
/// rescheduled and finished in its own layout: its columns stay current and all of them get
/// the terminal TTL, so nothing of it outlives the row. New rows use the 4-cell layout.
#[tokio::test]
async fn a_state_row_of_the_old_layout_is_read_and_kept_in_it() {
    let cfg = test_config("legacyrow");
    let now = utc_ms("2026-11-30 08:20:00.000");
    let (n, _clock) = TestNode::with_manual_clock(cfg, now).await;
    let mut c = n.client.clone();
    let ks = n.ks().to_string();
    let today = CqlDate::from_ymd_opt(2026, 11, 30).unwrap();
    n.cql
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.transactions (region, cluster, service, transaction_id, status, \
                 generation, attempt, payload, attributes, max_attempts, initial_backoff_ms, \
                 max_backoff_ms, multiplier, jitter, max_retry_duration_ms, ack_timeout_ms, \
                 max_deliveries_per_attempt, first_enqueued_at, last_enqueued_at, updated_at, \
                 due_at, last_error, loc_day, loc_window, loc_instance, loc_bucket, \
                 enqueue_count, delivery_count, non_retryable) VALUES ('local', 'default', 'svc', \
                 'old', 'SCHEDULED', 7, 2, 0x6869, {{'k': 'v'}}, 6, 1000, 60000, 2.0, 0.1, 0, \
                 30000, 3, ?, ?, ?, ?, 'timeout', ?, 3, 'node-z-1-0', 0, 1, 0, 'fatal\nbad')"
            ),
            (
                scylla::value::CqlTimestamp(now - 3_600_000),
                scylla::value::CqlTimestamp(now - 3_600_000),
                scylla::value::CqlTimestamp(now - 3_600_000),
                scylla::value::CqlTimestamp(now - 3_594_000),
                today,
            ),
        )
        .await
        .unwrap();
    let get = |c: &mut rebound_proto::v1::retry_service_client::RetryServiceClient<_>| {
        let mut c = c.clone();
        async move {
            c.get_retry(pb::GetRetryRequest {
                service: "svc".into(),
                transaction_id: "old".into(),
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    let r = get(&mut c).await;
    assert_eq!(
        (r.status, r.generation, r.attempt, r.payload.as_slice()),
        (pb::RetryStatus::Scheduled as i32, 7, 2, &b"hi"[..])
    );
    assert_eq!(r.attributes.get("k").map(String::as_str), Some("v"));
    let p = r.policy.unwrap();
    assert_eq!(p.max_attempts, Some(6));
    assert_eq!(p.multiplier, Some(2.0));
    assert_eq!(p.non_retryable_error_classes, vec!["fatal", "bad"]);
    assert_eq!(p.max_deliveries_per_attempt, Some(3));
    assert_eq!(r.last_error, "timeout");
    assert_eq!(r.location.as_ref().unwrap().instance, "node-z-1-0");
    assert_eq!(r.enqueue_count, 1);

    // Enqueued again into another window: rescheduled, in the old layout.
    let e = c
        .enqueue_retry(req("svc", "old", 30_000))
        .await
        .unwrap()
        .into_inner();
    assert!(e.deduplicated);
    assert!(e.generation > 7);
    let r = get(&mut c).await;
    assert_eq!(
        (r.enqueue_count, r.attempt, r.generation),
        (2, 2, e.generation)
    );
    assert_eq!(
        ts_ms(r.first_enqueued_at.as_ref().unwrap()),
        now - 3_600_000
    );
    let location = r.location.unwrap();
    let row = |id: &'static str| {
        let (cql, ks) = (&n.cql, ks.clone());
        async move {
            cql.query_unpaged(
                format!(
                    "SELECT body, generation, loc_window, TTL(status), TTL(max_attempts), \
                     TTL(body) FROM {ks}.transactions WHERE region = 'local' \
                     AND cluster = 'default' AND service = 'svc' AND transaction_id = ?"
                ),
                (id,),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .single_row::<(
                Option<Vec<u8>>,
                i64,
                Option<i32>,
                Option<i32>,
                Option<i32>,
                Option<i32>,
            )>()
            .unwrap()
        }
    };
    let (body, generation, window, ..) = row("old").await;
    assert!(body.is_none(), "an old-layout row keeps its layout");
    assert_eq!(generation as u64, e.generation);
    assert_eq!(window, Some(location.window as i32));

    // Finished: every cell of it expires with the terminal TTL.
    let cancel = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: "old".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancel.cancelled);
    let (body, _, _, ttl_status, ttl_policy, _) = row("old").await;
    assert!(body.is_none());
    assert!(ttl_status.is_some_and(|t| t > 3_000), "{ttl_status:?}");
    assert!(ttl_policy.is_some_and(|t| t > 3_000), "{ttl_policy:?}");

    // A new retry is written in the 4-cell layout, without a TTL while it is live.
    c.enqueue_retry(req("svc", "new", 0)).await.unwrap();
    let (body, _, window, ttl_status, _, ttl_body) = row("new").await;
    assert!(body.is_some() && window.is_none());
    assert_eq!((ttl_status, ttl_body), (None, None));
    n.finish().await;
}

/// `REBOUND_MAX_CONCURRENT_WRITES` bounds batches by the requests they have in flight (32 a
/// chunk), not by their items: a batch of 100 passes a limit of 40. Batches over the limit get
/// RESOURCE_EXHAUSTED for their items, naming the setting, and nothing of them is written.
#[tokio::test]
async fn the_write_limit_counts_a_batch_chunk_once_and_refuses_cleanly() {
    let mut cfg = test_config("writelimit");
    cfg.max_concurrent_writes = 40;
    let (n, _clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:50:00.000")).await;
    let batch = |prefix: String| pb::EnqueueRetryBatchRequest {
        requests: (0..100)
            .map(|i| req("svc", &format!("{prefix}-{i}"), 0))
            .collect(),
    };
    let mut c = n.client.clone();
    let alone = batch_outcomes(
        c.enqueue_retry_batch(batch("a".into()))
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(
        alone.iter().all(Result::is_ok),
        "{:?}",
        alone.iter().find(|r| r.is_err())
    );

    let outs = futures::future::join_all((0..8).map(|b| {
        let mut c = n.client.clone();
        let request = batch(format!("w{b}"));
        async move {
            let out = c.enqueue_retry_batch(request).await.unwrap().into_inner();
            (b, batch_outcomes(out))
        }
    }))
    .await;
    let mut accepted: BTreeSet<String> = (0..100).map(|i| format!("a-{i}")).collect();
    for (b, out) in outs {
        for (i, r) in out.into_iter().enumerate() {
            match r {
                Ok(_) => {
                    accepted.insert(format!("w{b}-{i}"));
                }
                Err(e) => {
                    assert_eq!(e.code, Code::ResourceExhausted as i32, "{e:?}");
                    assert!(
                        e.message.contains("REBOUND_MAX_CONCURRENT_WRITES"),
                        "{}",
                        e.message
                    );
                }
            }
        }
    }
    // Written exactly when accepted.
    let st = states(&n).await;
    let written: BTreeSet<String> = st.keys().map(|(_, t)| t.clone()).collect();
    assert_eq!(written, accepted);
    let pointed: BTreeSet<String> = pointers(&n)
        .await
        .into_iter()
        .map(|p| p.transaction_id)
        .collect();
    assert_eq!(pointed, accepted);
    n.finish().await;
}

#[tokio::test]
async fn bad_input_is_refused_by_name_and_writes_nothing() {
    let mut cfg = test_config("bad");
    cfg.max_payload_bytes = 1_000;
    cfg.max_delay_seconds = 3_600;
    cfg.max_batch_items = 5;
    let (n, _clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:00:00.000")).await;
    let mut c = n.client.clone();
    fn policy(f: &dyn Fn(&mut pb::RetryPolicy)) -> Option<pb::RetryPolicy> {
        let mut p = pb::RetryPolicy::default();
        f(&mut p);
        Some(p)
    }
    fn d(s: i64) -> prost_types::Duration {
        prost_types::Duration {
            seconds: s,
            nanos: 0,
        }
    }
    type Mutation = Box<dyn Fn(&mut pb::EnqueueRetryRequest)>;
    let cases: Vec<(&str, Mutation, &str)> = vec![
        ("empty service", Box::new(|r| r.service.clear()), "service"),
        (
            "space in service",
            Box::new(|r| r.service = "my service".into()),
            "service",
        ),
        (
            "unicode service",
            Box::new(|r| r.service = "sérvice".into()),
            "service",
        ),
        (
            "slash in service",
            Box::new(|r| r.service = "a/b".into()),
            "service",
        ),
        (
            "long service",
            Box::new(|r| r.service = "s".repeat(65)),
            "64",
        ),
        (
            "empty transaction",
            Box::new(|r| r.transaction_id.clear()),
            "transaction_id",
        ),
        (
            "long transaction",
            Box::new(|r| r.transaction_id = "t".repeat(300)),
            "256",
        ),
        (
            "control char",
            Box::new(|r| r.transaction_id = "a\u{0}b".into()),
            "transaction_id",
        ),
        (
            "payload over cap",
            Box::new(|r| r.payload = vec![7; 1_001]),
            "1000",
        ),
        (
            "delay over max",
            Box::new(|r| r.schedule = Some(pb::enqueue_retry_request::Schedule::Delay(d(3_601)))),
            "REBOUND_MAX_DELAY_SECONDS",
        ),
        (
            "negative delay",
            Box::new(|r| r.schedule = Some(pb::enqueue_retry_request::Schedule::Delay(d(-5)))),
            "delay",
        ),
        (
            "due time too far",
            Box::new(|r| {
                r.schedule = Some(pb::enqueue_retry_request::Schedule::DueTime(
                    prost_types::Timestamp {
                        seconds: utc_ms("2026-12-30 09:00:00.000") / 1000,
                        nanos: 0,
                    },
                ))
            }),
            "due_time",
        ),
        (
            "zero attempts",
            Box::new(move |r| r.policy = policy(&|p| p.max_attempts = Some(0))),
            "policy.max_attempts",
        ),
        (
            "multiplier below 1",
            Box::new(move |r| r.policy = policy(&|p| p.multiplier = Some(0.5))),
            "policy.multiplier",
        ),
        (
            "jitter above 1",
            Box::new(move |r| r.policy = policy(&|p| p.jitter = Some(1.5))),
            "policy.jitter",
        ),
        (
            "max below initial",
            Box::new(move |r| {
                r.policy = policy(&|p| {
                    p.initial_backoff = Some(d(60));
                    p.max_backoff = Some(d(10));
                })
            }),
            "policy.max_backoff",
        ),
        (
            "negative backoff",
            Box::new(move |r| r.policy = policy(&|p| p.initial_backoff = Some(d(-1)))),
            "policy.initial_backoff",
        ),
        (
            "attempts exhausted",
            Box::new(move |r| {
                r.attempt = 3;
                r.policy = policy(&|p| p.max_attempts = Some(3));
            }),
            "attempt",
        ),
        (
            "too many attributes",
            Box::new(|r| {
                for i in 0..65 {
                    r.attributes.insert(format!("k{i}"), "v".into());
                }
            }),
            "attributes",
        ),
        (
            "huge last error",
            Box::new(|r| r.last_error = "x".repeat(9_000)),
            "last_error",
        ),
    ];
    for (name, mutate, needle) in &cases {
        let mut r = req("svc", "tx-bad", 0);
        mutate(&mut r);
        let err = c.enqueue_retry(r).await.expect_err(name);
        assert_eq!(err.code(), Code::InvalidArgument, "{name}: {err:?}");
        assert!(
            err.message().contains(needle),
            "{name}: {:?} lacks {needle:?}",
            err.message()
        );
    }
    // A batch over the item limit is refused whole.
    let err = c
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..6).map(|i| req("svc", &format!("b{i}"), 0)).collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("requests") && err.message().contains('5'),
        "{}",
        err.message()
    );
    // A message over the node's size limit (4 x the payload cap + 1 MiB) never reaches a
    // handler; it is still INVALID_ARGUMENT naming the payload and its cap, not tonic's
    // OUT_OF_RANGE, for one huge payload and for a batch too large as a whole.
    let mut huge = req("svc", "huge", 0);
    huge.payload = vec![b'x'; 2 << 20];
    let err = c.enqueue_retry(huge).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().starts_with("payload: ") && err.message().contains("1000 bytes"),
        "{}",
        err.message()
    );
    let err = c
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..4)
                .map(|i| {
                    let mut r = req("svc", &format!("big{i}"), 0);
                    r.payload = vec![b'x'; 400_000];
                    r
                })
                .collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("fewer items per call"),
        "{}",
        err.message()
    );
    // Get and cancel validate too.
    let err = c
        .get_retry(pb::GetRetryRequest {
            service: "bad service".into(),
            transaction_id: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = c
        .cancel_retry(pb::CancelRetryRequest {
            service: "svc".into(),
            transaction_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    for table in DATA_TABLES {
        assert_eq!(
            n.count(table).await,
            0,
            "{table} must be empty after refused requests"
        );
    }
    n.finish().await;
}

/// An enqueue that waits for the lock of its transaction chooses its window from the clock
/// after the wait. A batch of 500 new services holds the lock of one transaction while it
/// writes them; a single enqueue of that transaction waits behind it, and the clock moves on
/// 10 minutes meanwhile: the single is scheduled from the moved clock, not confirmed in the
/// window the clock gave before the wait.
#[tokio::test]
async fn an_enqueue_behind_the_transaction_lock_reads_the_clock_after_the_wait() {
    let cfg = test_config("lockclock");
    let (n, clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:00:00.100")).await;
    // A round only counts when the batch took the lock first and still held it well after
    // the clock moved; a box too busy for that gets another round.
    for round in 0..5 {
        let before = clock_now(&clock);
        let requests = (0..500)
            .map(|i| req(&format!("r{round}-s{i:03}"), "t", 3_000))
            .collect();
        let mut bc = n.client.clone();
        let batch = tokio::spawn(async move {
            bc.enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut sc = n.client.clone();
        let service = format!("r{round}-s000");
        let single = tokio::spawn(async move { sc.enqueue_retry(req(&service, "t", 3_000)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(600_000);
        let moved_at = std::time::Instant::now();
        let b = batch.await.unwrap().unwrap().into_inner();
        let held = moved_at.elapsed();
        let s = single.await.unwrap().unwrap().into_inner();
        // A batch whose state rows landed ten clock-minutes after its pointers answers that
        // their outcome is unknown (see `Writer::write_schedule`): no conclusion this round.
        let Some(pb::enqueue_retry_result::Result::Response(first)) = &b.results[0].result else {
            eprintln!(
                "round {round} inconclusive: batch item 0 {:?}",
                b.results[0]
            );
            continue;
        };
        // The batch must have taken the lock first (the single found its row) and held it
        // well after the clock moved. (Its own items may have been placed again after the
        // move: a pointer that lands after its window ended is re-placed.)
        if first.deduplicated || held < Duration::from_millis(100) {
            eprintln!(
                "round {round} inconclusive: single first {}, batch done {held:?} after the clock moved",
                first.deduplicated
            );
            continue;
        }
        let due_single = ts_ms(s.due_time.as_ref().unwrap());
        assert!(s.deduplicated);
        assert!(
            due_single >= before + 600_000 + 3_000,
            "the single was due at {due_single}, chosen from the clock before the wait ({before}); \
             the moved clock puts it at {} or later",
            before + 603_000
        );
        // A later generation, or the same one when the batch's item was placed again after the
        // move into the window the single then chose (the single only confirms it).
        assert!(s.generation >= first.generation);
        n.finish().await;
        return;
    }
    panic!("in 5 rounds the batch never held the lock long enough to test the wait");
}

#[tokio::test]
async fn batch_gives_each_item_its_own_result() {
    let cfg = test_config("batch");
    let (n, _clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:30:00.000")).await;
    let mut c = n.client.clone();
    let mut bad = req("svc", "b1", 0);
    bad.payload = vec![0; 300_000];
    let resp = c
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: vec![
                req("svc", "b0", 0),
                bad,
                req("svc", "b2", 4_000),
                req("svc", "b0", 0),
                req("other", "b0", 0),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.results.len(), 5);
    let codes: Vec<i32> = resp
        .results
        .iter()
        .map(|r| match r.result.as_ref().unwrap() {
            pb::enqueue_retry_result::Result::Response(_) => 0,
            pb::enqueue_retry_result::Result::Error(e) => e.code,
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            0,
            Code::InvalidArgument as i32,
            0,
            Code::InvalidArgument as i32,
            0
        ]
    );
    if let pb::enqueue_retry_result::Result::Error(e) = resp.results[1].result.as_ref().unwrap() {
        assert!(e.message.contains("requests[1].payload"), "{}", e.message);
    }
    let ptrs = pointers(&n).await;
    assert_eq!(ptrs.len(), 3);
    assert_eq!(states(&n).await.len(), 3);
    n.finish().await;
}

/// A batch is written in few requests: its state rows are read with `IN` queries, the
/// pointers of one bucket go out as single-partition unlogged batches, the state rows as small
/// batches; concurrent single enqueues into one bucket share pointer writes too. Every pointer
/// still lands with its state row.
#[tokio::test]
async fn batches_and_concurrent_enqueues_are_written_in_few_requests() {
    let mut cfg = test_config("microbatch");
    cfg.bucket_size = 10_000;
    cfg.lanes = 1;
    let (n, _clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:40:00.000")).await;
    let mut c = n.client.clone();
    let resp = c
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..300).map(|i| req("svc", &format!("m{i}"), 0)).collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.results.iter().all(|r| matches!(
        r.result,
        Some(pb::enqueue_retry_result::Result::Response(_))
    )));
    let node = n.node.as_ref().unwrap();
    // 300 pointers of one bucket: batches of at most 256.
    assert_eq!(node.writer.pointer_writes(), (2, 300));
    // Reads of at most 64 ids; writes of at most 10 rows and under Cassandra's 5 KiB batch
    // warning (each of these rows counts about 800 bytes there, so 5 a batch).
    let (state_reads, state_writes) = node.cassandra.as_ref().unwrap().state_io_counts();
    assert_eq!((state_reads.flushes, state_reads.items), (5, 300));
    assert_eq!(state_writes.items, 300);
    assert!(
        (30..=60).contains(&state_writes.flushes),
        "300 state rows took {} writes",
        state_writes.flushes
    );
    let generations: Vec<u64> = resp
        .results
        .iter()
        .map(|r| match &r.result {
            Some(pb::enqueue_retry_result::Result::Response(r)) => r.generation,
            other => panic!("{other:?}"),
        })
        .collect();

    // 300 single enqueues at once: while a pointer write of the bucket is in flight, the next
    // ones queue and go out together.
    let singles = futures::future::join_all((300..600).map(|i| {
        let mut c = c.clone();
        async move {
            c.enqueue_retry(req("svc", &format!("m{i}"), 0))
                .await
                .unwrap()
                .into_inner()
                .generation
        }
    }))
    .await;
    let (writes, carried) = node.writer.pointer_writes();
    assert_eq!(carried, 600);
    assert!(
        writes - 2 < 300 / 2,
        "300 concurrent pointers of one bucket took {} writes",
        writes - 2
    );
    let ptrs = pointers(&n).await;
    assert_eq!(ptrs.len(), 600);
    let st = states(&n).await;
    assert_eq!(st.len(), 600);
    // Concurrent reads, coalesced, each find their own row.
    let (before, _) = node.cassandra.as_ref().unwrap().state_io_counts();
    let reads = futures::future::join_all((0..600).map(|i| {
        let mut c = c.clone();
        async move {
            c.get_retry(pb::GetRetryRequest {
                service: "svc".into(),
                transaction_id: format!("m{i}"),
            })
            .await
            .unwrap()
            .into_inner()
        }
    }))
    .await;
    for (i, r) in reads.iter().enumerate() {
        assert_eq!(r.transaction_id, format!("m{i}"));
        let expected = if i < 300 {
            generations[i]
        } else {
            singles[i - 300]
        };
        assert_eq!(r.generation, expected);
    }
    let (after, _) = node.cassandra.as_ref().unwrap().state_io_counts();
    assert_eq!(after.items - before.items, 600);
    assert!(after.flushes - before.flushes < 600);
    n.finish().await;
}

#[tokio::test]
async fn policy_backoff_is_used_when_no_delay_is_given() {
    let mut cfg = test_config("backoff");
    cfg.window_seconds = 1;
    let now = utc_ms("2026-11-30 07:00:00.000");
    let (n, _clock) = TestNode::with_manual_clock(cfg, now).await;
    let mut c = n.client.clone();
    let mut r = req("svc", "p", 0);
    r.schedule = None;
    r.attempt = 3;
    r.policy = Some(pb::RetryPolicy {
        initial_backoff: Some(prost_types::Duration {
            seconds: 10,
            nanos: 0,
        }),
        jitter: Some(0.0),
        multiplier: Some(2.0),
        ..Default::default()
    });
    let resp = c.enqueue_retry(r).await.unwrap().into_inner();
    // Third attempt failed: 10 s * 2^2 = 40 s, in the 1 s window ending at +41 s.
    assert_eq!(ts_ms(resp.due_time.as_ref().unwrap()), now + 41_000);
    let retry = c
        .get_retry(pb::GetRetryRequest {
            service: "svc".into(),
            transaction_id: "p".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(retry.attempt, 3);
    assert_eq!(retry.payload, b"payload of p");
    assert_eq!(retry.last_error, "503 from downstream");
    let p = retry.policy.unwrap();
    assert_eq!(p.initial_backoff.unwrap().seconds, 10);
    assert_eq!(p.max_attempts, Some(5));
    n.finish().await;
}

#[tokio::test]
async fn health_reflection_and_shutdown_with_open_streams() {
    let cfg = test_config("health");
    let n = TestNode::with_system_clock(cfg).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(n.channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "rebound.v1.RetryService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // Both reflection versions list the API.
    use futures::StreamExt;
    let mut v1 = tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
        n.channel.clone(),
    );
    let mut resp = v1
        .server_reflection_info(futures::stream::iter(vec![tonic_reflection::pb::v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(String::new())),
        }]))
        .await
        .unwrap()
        .into_inner();
    let first = format!("{:?}", resp.next().await.unwrap().unwrap());
    assert!(first.contains("rebound.v1.RetryService"), "{first}");
    let mut v1alpha =
        tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient::new(
            n.channel.clone(),
        );
    let mut resp = v1alpha
        .server_reflection_info(futures::stream::iter(vec![tonic_reflection::pb::v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest::ListServices(String::new())),
        }]))
        .await
        .unwrap()
        .into_inner();
    let first = format!("{:?}", resp.next().await.unwrap().unwrap());
    assert!(first.contains("rebound.v1.ExecutorService"), "{first}");

    // An open Watch stream does not hold shutdown past the grace period (1 s here).
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    watch.next().await.unwrap().unwrap();
    let started = std::time::Instant::now();
    let mut n = n;
    let node = n.node.take().unwrap();
    tokio::time::timeout(Duration::from_secs(8), node.shutdown())
        .await
        .expect("shutdown does not hang on an open stream")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(8));
    n.finish().await;
}
