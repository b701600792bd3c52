//! EnqueueRetryBatch against a real Cassandra: each item gets its own result under the rules
//! of single enqueues, racing writers share the per-transaction lock, a batch is written in
//! few requests, and the write limit counts a batch chunk once.

use std::{collections::BTreeSet, time::Duration};

use rebound_integration_tests::{
    rows::{batch_outcomes, full_req as req, pointers, states},
    test_config, utc_ms, TestNode,
};
use rebound_proto::v1 as pb;
use tonic::Code;

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
    assert_eq!(
        {
            let io = node.engine().io_counts();
            (io.pointer_writes, io.pointers)
        },
        (2, 300)
    );
    // Reads of at most 64 ids; writes of at most 10 rows and under Cassandra's 5 KiB batch
    // warning (each of these rows counts about 800 bytes there, so 5 a batch).
    let (state_reads, state_writes) = {
        let io = node.engine().io_counts();
        (io.state_reads, io.state_writes)
    };
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
    let (writes, carried) = {
        let io = node.engine().io_counts();
        (io.pointer_writes, io.pointers)
    };
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
    let (before, _) = {
        let io = node.engine().io_counts();
        (io.state_reads, io.state_writes)
    };
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
    let (after, _) = {
        let io = node.engine().io_counts();
        (io.state_reads, io.state_writes)
    };
    assert_eq!(after.items - before.items, 600);
    assert!(after.flushes - before.flushes < 600);
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

/// `REBOUND_MAX_INFLIGHT_BYTES` bounds the request bytes a node holds at once: batches that
/// arrive while it is full are refused whole with RESOURCE_EXHAUSTED, naming the setting and
/// carrying a `grpc-retry-pushback-ms` hint, before anything of them is written; accepted
/// ones are written, and the node serves as before once the load is gone.
#[tokio::test]
async fn the_request_byte_budget_sheds_whole_requests_with_a_retry_hint() {
    let mut cfg = test_config("bytebudget");
    cfg.max_payload_bytes = 16 << 10;
    // Room for two of the ~0.9 MiB batches below at once, each byte counted six times (a
    // request alone always fits).
    cfg.max_inflight_bytes = 12 << 20;
    let (n, _clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:55:00.000")).await;
    let batch = |b: usize| pb::EnqueueRetryBatchRequest {
        requests: (0..56)
            .map(|i| {
                let mut r = req("svc", &format!("w{b}-{i}"), 0);
                r.payload = vec![b'x'; 16 << 10];
                r
            })
            .collect(),
    };
    let outs = futures::future::join_all((0..24).map(|b| {
        let mut c = n.client.clone();
        let request = batch(b);
        async move { (b, c.enqueue_retry_batch(request).await) }
    }))
    .await;
    let mut accepted = BTreeSet::new();
    let mut shed = 0;
    for (b, out) in outs {
        match out {
            Ok(out) => {
                for (i, r) in batch_outcomes(out.into_inner()).into_iter().enumerate() {
                    assert!(r.is_ok(), "{r:?}");
                    accepted.insert(format!("w{b}-{i}"));
                }
            }
            Err(e) => {
                assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                assert!(
                    e.message().contains("REBOUND_MAX_INFLIGHT_BYTES"),
                    "{}",
                    e.message()
                );
                assert_eq!(
                    e.metadata().get("grpc-retry-pushback-ms").unwrap(),
                    "250",
                    "{e:?}"
                );
                shed += 1;
            }
        }
    }
    assert!(
        shed > 0,
        "24 batches of 0.9 MiB at once against room for two: some are shed"
    );
    assert!(!accepted.is_empty());
    // Written exactly when accepted.
    let written: BTreeSet<String> = states(&n).await.keys().map(|(_, t)| t.clone()).collect();
    assert_eq!(written, accepted);
    // The budget was given back: one more batch alone goes through.
    let mut c = n.client.clone();
    let again = batch_outcomes(c.enqueue_retry_batch(batch(99)).await.unwrap().into_inner());
    assert!(again.iter().all(Result::is_ok));
    n.finish().await;
}

/// Saga steps whose compensations carry the most payload allowed, in a batch (their state rows
/// go out together): every one is written, and `GetRetry` gives the compensations back whole.
/// (CI then checks Cassandra's log for batch warnings: a state row's weight counts its
/// compensations, so such rows go in batches under `batch_size_warn_threshold`.)
#[tokio::test]
async fn saga_steps_with_the_largest_compensations_are_written_in_batches() {
    let cfg = test_config("batch_saga");
    let max = cfg.max_payload_bytes;
    let (n, _clock) = TestNode::with_manual_clock(cfg, utc_ms("2026-11-30 09:30:00.000")).await;
    let mut c = n.client.clone();
    let step = |i: usize| {
        let mut r = req("orders", &format!("step-{i}"), 0);
        r.compensations = (0..4)
            .map(|k| pb::Compensation {
                service: "undo".into(),
                transaction_id: format!("step-{i}/c{k}"),
                payload: vec![b'a' + k as u8; max / 4],
                ..Default::default()
            })
            .collect();
        r
    };
    let resp = c
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: (0..6).map(step).collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(batch_outcomes(resp).iter().filter(|o| o.is_ok()).count(), 6);
    let r = c
        .get_retry(pb::GetRetryRequest {
            service: "orders".into(),
            transaction_id: "step-5".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.compensations.len(), 4);
    assert_eq!(r.compensations[3].payload, vec![b'd'; max / 4]);
    let chain = r.chain.expect("a saga step shows its chain");
    assert_eq!(chain.position, 0);
    assert_eq!(chain.compensations.len(), 4);
    // One over: refused by name, nothing written.
    let mut over = step(99);
    over.compensations[0].payload.push(0);
    let e = c.enqueue_retry(over).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("compensations"), "{}", e.message());
    assert_eq!(states(&n).await.len(), 6);
    n.finish().await;
}
