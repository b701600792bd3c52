//! Where an enqueue lands, against a real Cassandra: the five tiers hold exactly the expected
//! rows, buckets roll at their size and per window and boot, the placement rule (a near-term
//! retry in the current window while it has headroom, otherwise the W+1 rule: never the
//! current or a past window) holds at every edge, and with no delay the policy's backoff
//! places the retry.

use std::collections::{BTreeMap, BTreeSet};

use rebound_integration_tests::{
    clock_now,
    rows::{
        abs_window, body_of, cql_date, date, full_req as req, pointers, states, CqlDate,
        InstanceKey, PointerKey, PointerRow,
    },
    test_config, ts_ms, utc_ms, TestNode,
};
use rebound_proto::v1 as pb;

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
        // Due now, a near-term retry: the current window.
        expected_window.insert(format!("o-{i}"), 18000);
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
        expected_window.insert(format!("b-{i}"), 18000);
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
            ("2026-11-30".to_string(), 18000),
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
    let w1 = 21_600; // 12:00:00 is window 21600: due now, a near-term retry goes into it.
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

#[tokio::test]
async fn near_term_in_the_current_window_else_never_the_current_or_a_past_one_at_every_edge() {
    let cfg = test_config("edges");
    let window_ms = 2_000;
    let (n, clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 00:00:00.000")).await;
    let mut c = n.client.clone();
    let mut k = 0;
    let edges = [
        "2026-11-30 00:00:00.000", // first instant of a window and of a day
        "2026-11-30 00:00:01.499", // last instant with headroom for a near-term write
        "2026-11-30 00:00:01.500", // first instant without
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
        // Due when asked for, or now when that has passed.
        let answered = [now, now, now, (current + 1) * window_ms - 1];
        for (s, due) in schedules.into_iter().zip(answered) {
            k += 1;
            let mut r = req("edge", &format!("e{k}"), 0);
            r.schedule = Some(s);
            let resp = c.enqueue_retry(r).await.unwrap().into_inner();
            assert_eq!(ts_ms(resp.due_time.as_ref().unwrap()), due, "{edge}");
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
            // The timer fires at the due time, but no sooner than 500 ms after the write. A
            // retry that fires within the current window goes into it while a quarter of the
            // window (500 ms) is left; otherwise into its own window, never the current one.
            let fires = due.max(now + 500);
            let expected = if fires.div_euclid(window_ms) == current
                && now + window_ms / 4 < (current + 1) * window_ms
            {
                current
            } else {
                due.div_euclid(window_ms).max(current + 1)
            };
            assert_eq!(abs, expected, "{edge}: landed in {loc:?}");
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

    // And for many random instants and delays, the rule holds: never a past window, the current
    // one only for a near-term retry with headroom.
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
        let current = enqueued.0.div_euclid(window_ms);
        assert!(
            abs > current
                || (abs == current
                    && due.0.max(enqueued.0 + 500).div_euclid(window_ms) == current
                    && enqueued.0 + window_ms / 4 < (current + 1) * window_ms),
            "enqueued at {} due {} landed in window {abs}",
            enqueued.0,
            due.0
        );
        // Due when asked for; never in a window before its due time's, nor after it and the
        // next one.
        assert!(abs >= due.0.div_euclid(window_ms), "due {} in {abs}", due.0);
        assert!(
            abs <= due.0.div_euclid(window_ms).max(current + 1),
            "due {} in {abs}",
            due.0
        );
    }
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
    // Third attempt failed: 10 s * 2^2 = 40 s.
    assert_eq!(ts_ms(resp.due_time.as_ref().unwrap()), now + 40_000);
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
