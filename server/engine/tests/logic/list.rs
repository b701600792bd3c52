//! ListRetries: a service's scheduled retries from the directory, filtered on their state rows,
//! page after page, each live retry exactly once.

use std::collections::{BTreeMap, BTreeSet};

use rebound_engine::{engine::Settings, error::Error};
use rebound_proto::v1 as pb;

use crate::{config, expect_delivery, input, utc_ms, Rig};

const START: &str = "2026-12-06 09:00:00.100";

/// What the model knows of a retry: attributes, last error, dependency, due time.
type Known = (BTreeMap<String, String>, String, String, i64);
type Filter = Box<dyn Fn(&Known) -> bool>;

/// Every page of `r`, `page_size` at a time: the transaction ids in listing order and the
/// number of calls.
pub(crate) async fn all_pages(
    rig: &Rig,
    mut r: pb::ListRetriesRequest,
) -> (Vec<pb::RetrySummary>, usize) {
    let mut rows = Vec::new();
    let mut calls = 0;
    loop {
        calls += 1;
        let page = rig
            .executor
            .handle
            .list_retries(&r, None)
            .await
            .expect("a page");
        assert!(page.retries.len() <= r.page_size.max(1) as usize);
        rows.extend(page.retries);
        if page.next_page_token.is_empty() {
            return (rows, calls);
        }
        r.page_token = page.next_page_token;
        assert!(calls < 1_000, "the listing does not end");
    }
}

fn request(service: &str, page_size: u32) -> pb::ListRetriesRequest {
    pb::ListRetriesRequest {
        service: service.into(),
        page_size,
        ..Default::default()
    }
}

#[tokio::test]
async fn pages_cover_every_scheduled_retry_once_and_filters_match_a_model() {
    let rig = Rig::new(utc_ms(START)).await;
    // 60 retries over several windows, with attributes, errors and dependencies; a few in
    // another service.
    let mut model: BTreeMap<String, Known> = BTreeMap::new();
    for i in 0..60u64 {
        let txid = format!("t{i:02}");
        let mut inp = input("svc", &txid, 1_000 + (i % 6) * 40_000);
        let customer = format!("{}", i % 4);
        inp.attributes.insert("customer".into(), customer);
        if i % 3 == 0 {
            inp.attributes.insert("region".into(), "eu".into());
        }
        inp.last_error = if i % 5 == 0 {
            "card declined".into()
        } else {
            format!("gateway: 50{}", i % 3)
        };
        if i % 7 == 0 {
            inp.dependency = "payments-gateway".into();
        }
        let out = rig.writer.enqueue(inp.clone()).await.unwrap();
        model.insert(
            txid,
            (
                inp.attributes.clone(),
                inp.last_error.clone(),
                inp.dependency.clone(),
                out.due_at_ms,
            ),
        );
    }
    for i in 0..5 {
        rig.enqueue("other", &format!("o{i}"), 1_000).await;
    }
    // One rescheduled further off: its old pointer is stale and must not list it twice.
    let mut again = input("svc", "t00", 200_000);
    again.attributes = model["t00"].0.clone();
    again.last_error = model["t00"].1.clone();
    again.dependency = model["t00"].2.clone();
    let moved = rig.writer.enqueue(again).await.unwrap();
    assert!(moved.deduplicated);
    model.get_mut("t00").unwrap().3 = moved.due_at_ms;
    // Another cancelled: no longer listed.
    rig.writer.cancel("svc", "t01").await.unwrap();
    model.remove("t01");

    let (rows, calls) = all_pages(&rig, request("svc", 7)).await;
    let ids: Vec<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "listed twice: {ids:?}");
    assert_eq!(
        unique,
        model.keys().map(String::as_str).collect::<BTreeSet<_>>()
    );
    assert!(calls >= 59 / 7, "{calls} calls");
    for r in &rows {
        assert_eq!(r.status, pb::RetryStatus::Scheduled as i32);
        assert_eq!(r.attempt, 1);
    }
    // By due time, then transaction id: each window is sorted, and a retry due in the future
    // is in the window of its due time.
    assert_due_order(&rows, "pages of 7");

    // Every filter, alone and combined, against the model.
    let eu_42 = pb::ListRetriesRequest {
        attributes: [("region".to_string(), "eu".to_string())].into(),
        error_contains: "gateway".into(),
        ..request("svc", 5)
    };
    let dep = pb::ListRetriesRequest {
        dependency: "payments-gateway".into(),
        ..request("svc", 3)
    };
    let now = rig.now();
    let due_range = pb::ListRetriesRequest {
        due_after: Some(prost_types::Timestamp {
            seconds: (now + 40_000) / 1000,
            nanos: 0,
        }),
        due_before: Some(prost_types::Timestamp {
            seconds: (now + 130_000) / 1000,
            nanos: 0,
        }),
        ..request("svc", 4)
    };
    let declined_customer_0 = pb::ListRetriesRequest {
        attributes: [("customer".to_string(), "0".to_string())].into(),
        error_contains: "declined".into(),
        ..request("svc", 100)
    };
    for (r, want) in [
        (
            eu_42,
            Box::new(|(a, e, _, _): &Known| {
                a.get("region").is_some_and(|v| v == "eu") && e.contains("gateway")
            }) as Filter,
        ),
        (
            dep,
            Box::new(|(_, _, d, _): &Known| d == "payments-gateway"),
        ),
        (
            due_range,
            Box::new(move |(_, _, _, due): &Known| {
                *due >= (now + 40_000) / 1000 * 1000 && *due < (now + 130_000) / 1000 * 1000
            }),
        ),
        (
            declined_customer_0,
            Box::new(|(a, e, _, _): &Known| {
                a.get("customer").is_some_and(|v| v == "0") && e.contains("declined")
            }),
        ),
    ] {
        let what = format!("{r:?}");
        let (rows, _) = all_pages(&rig, r).await;
        let got: Vec<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
        let got_set: BTreeSet<&str> = got.iter().copied().collect();
        assert_eq!(got_set.len(), got.len(), "twice in {what}");
        let expected: BTreeSet<&str> = model
            .iter()
            .filter(|(_, v)| want(v))
            .map(|(k, _)| k.as_str())
            .collect();
        assert!(
            !expected.is_empty(),
            "a filter that matches nothing: {what}"
        );
        assert_eq!(got_set, expected, "{what}");
    }
    // A service with nothing scheduled lists nothing, in one call.
    let (rows, calls) = all_pages(&rig, request("nobody", 10)).await;
    assert!(rows.is_empty() && calls == 1);
}

#[tokio::test]
async fn bad_requests_are_refused_naming_the_field() {
    let rig = Rig::new(utc_ms(START)).await;
    rig.enqueue("svc", "t1", 1_000).await;
    let field_of = |e: Error| match e {
        Error::InvalidArgument { field, .. } => field,
        other => panic!("not INVALID_ARGUMENT: {other:?}"),
    };
    let ts = |seconds| Some(prost_types::Timestamp { seconds, nanos: 0 });
    for (r, field) in [
        (request("", 10), "service"),
        (request("svc", 501), "page_size"),
        (
            pb::ListRetriesRequest {
                statuses: vec![-1],
                ..request("svc", 10)
            },
            "statuses[0]",
        ),
        (
            pb::ListRetriesRequest {
                statuses: vec![pb::RetryStatus::Unspecified as i32],
                ..request("svc", 10)
            },
            "statuses[0]",
        ),
        (
            pb::ListRetriesRequest {
                statuses: vec![pb::RetryStatus::Scheduled as i32, 77],
                ..request("svc", 10)
            },
            "statuses[1]",
        ),
        (
            pb::ListRetriesRequest {
                due_after: ts(2_000_000_000),
                due_before: ts(1_000_000_000),
                ..request("svc", 10)
            },
            "due_after",
        ),
        (
            pb::ListRetriesRequest {
                attributes: [(String::new(), "x".to_string())].into(),
                ..request("svc", 10)
            },
            "attributes",
        ),
        (
            pb::ListRetriesRequest {
                dependency: "no spaces".into(),
                ..request("svc", 10)
            },
            "dependency",
        ),
        (
            pb::ListRetriesRequest {
                error_contains: "x".repeat(1025),
                ..request("svc", 10)
            },
            "error_contains",
        ),
    ] {
        let what = format!("{r:?}");
        let e = rig
            .executor
            .handle
            .list_retries(&r, None)
            .await
            .unwrap_err();
        assert!(field_of(e).starts_with(field), "{what}");
    }
    for token in [
        "junk",
        "l1.",
        "l1.1.2.3.zz.00",
        "l1.x.2.3.61.61",
        "l1.1.2.3.6.61",
        "l1.1.2.3.61.ff",
        "l1.1.2.3.61.é1",
        "v1.20000.0.74",
        "i1.x",
        "i1.12",
        "i1.x.61",
        "i1.1.6",
        "d1.junk",
    ] {
        let r = pb::ListRetriesRequest {
            page_token: token.into(),
            ..request("svc", 10)
        };
        let e = rig
            .executor
            .handle
            .list_retries(&r, None)
            .await
            .unwrap_err();
        assert_eq!(field_of(e), "page_token", "{token}");
    }
    // A token it gave back is taken.
    let first = rig
        .executor
        .handle
        .list_retries(&request("svc", 1), None)
        .await
        .unwrap();
    assert_eq!(first.retries.len(), 1);
    let next = pb::ListRetriesRequest {
        page_token: first.next_page_token,
        ..request("svc", 1)
    };
    let second = rig.executor.handle.list_retries(&next, None).await.unwrap();
    assert!(second.retries.is_empty());
}

#[tokio::test]
async fn dead_retries_are_listed_after_the_scheduled_ones_when_asked_for() {
    let rig = Rig::new(utc_ms(START)).await;
    let mut sub = rig.subscribe("svc", 10).await;
    // Four die (FAILED), two of them for customer 42; three stay scheduled.
    for i in 0..4 {
        let mut inp = input("svc", &format!("d{i}"), 500);
        inp.attributes
            .insert("customer".into(), if i < 2 { "42" } else { "7" }.into());
        rig.writer.enqueue(inp).await.unwrap();
    }
    rig.clock.advance(500);
    rig.dispatcher.fire_due();
    for _ in 0..4 {
        let d = expect_delivery(&mut sub).await;
        rig.ack(&d, pb::AckOutcome::Failed, None).await.unwrap();
    }
    for i in 0..3 {
        rig.enqueue("svc", &format!("s{i}"), 3_600_000).await;
    }
    let dead = pb::RetryStatus::Dead as i32;
    let scheduled = pb::RetryStatus::Scheduled as i32;
    let only_dead = pb::ListRetriesRequest {
        statuses: vec![dead],
        ..request("svc", 3)
    };
    let (rows, _) = all_pages(&rig, only_dead.clone()).await;
    let mut ids: Vec<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["d0", "d1", "d2", "d3"]);
    assert!(rows.iter().all(|r| r.status == dead && r.attempt == 2));
    let (rows, _) = all_pages(
        &rig,
        pb::ListRetriesRequest {
            attributes: [("customer".to_string(), "42".to_string())].into(),
            ..only_dead.clone()
        },
    )
    .await;
    let mut ids: Vec<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["d0", "d1"]);
    // Both statuses, two a page: every scheduled retry, then every dead one, each once.
    let (rows, _) = all_pages(
        &rig,
        pb::ListRetriesRequest {
            statuses: vec![scheduled, dead],
            ..request("svc", 2)
        },
    )
    .await;
    let statuses: Vec<i32> = rows.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [scheduled, scheduled, scheduled, dead, dead, dead, dead]
    );
    let unique: BTreeSet<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
    assert_eq!(unique.len(), 7);
    // A token of one listing is refused by a listing of other statuses.
    let first = rig
        .executor
        .handle
        .list_retries(&only_dead, None)
        .await
        .unwrap();
    let e = rig
        .executor
        .handle
        .list_retries(
            &pb::ListRetriesRequest {
                page_token: first.next_page_token,
                ..request("svc", 3)
            },
            None,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("page_token:"), "{e}");
    // A redriven retry is scheduled again, and no longer listed as dead.
    rig.executor
        .handle
        .redrive(&pb::RedriveDeadLettersRequest {
            service: "svc".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let (rows, _) = all_pages(&rig, only_dead).await;
    assert!(rows.is_empty(), "{rows:?}");
}

#[tokio::test]
async fn retries_in_flight_are_listed_with_their_delivery() {
    let rig = Rig::new(utc_ms(START)).await;
    let mut sub = rig.subscribe("svc", 50).await;
    for i in 0..6 {
        let mut inp = input("svc", &format!("f{i}"), 500 + i * 10);
        let c = if i % 2 == 0 { "42" } else { "7" };
        inp.attributes.insert("customer".into(), c.into());
        rig.writer.enqueue(inp).await.unwrap();
    }
    rig.enqueue("svc", "later", 3_600_000).await;
    rig.clock.advance(600);
    rig.dispatcher.fire_due();
    let mut delivered = Vec::new();
    for _ in 0..6 {
        delivered.push(expect_delivery(&mut sub).await);
    }
    let in_flight = pb::RetryStatus::InFlight as i32;
    // Two a page, by due time, each with its delivery.
    let (rows, calls) = all_pages(
        &rig,
        pb::ListRetriesRequest {
            statuses: vec![in_flight],
            ..request("svc", 2)
        },
    )
    .await;
    let ids: Vec<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
    assert_eq!(ids, ["f0", "f1", "f2", "f3", "f4", "f5"]);
    assert_eq!(calls, 3);
    for r in &rows {
        assert_eq!(r.status, in_flight);
        let d = r.delivery.as_ref().expect("its delivery");
        assert_eq!(
            (d.node_id.as_str(), d.executor_id.as_str()),
            ("node-a", "logic-test")
        );
        assert!(d.ack_deadline.unwrap().seconds * 1000 > rig.now());
    }
    // Filtered as the others are; the scheduled part still lists them (they are SCHEDULED).
    let (rows, _) = all_pages(
        &rig,
        pb::ListRetriesRequest {
            statuses: vec![in_flight],
            attributes: [("customer".to_string(), "7".to_string())].into(),
            ..request("svc", 100)
        },
    )
    .await;
    assert_eq!(rows.len(), 3);
    let (rows, _) = all_pages(&rig, request("svc", 100)).await;
    assert_eq!(rows.len(), 7);
    // Acked ones leave it.
    for d in &delivered[..4] {
        rig.ack(d, pb::AckOutcome::Succeeded, None).await.unwrap();
    }
    let (rows, _) = all_pages(
        &rig,
        pb::ListRetriesRequest {
            statuses: vec![in_flight],
            ..request("svc", 100)
        },
    )
    .await;
    let ids: Vec<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
    assert_eq!(ids, ["f4", "f5"]);
    // local_only is for an IN_FLIGHT listing alone.
    let e = rig
        .executor
        .handle
        .list_retries(
            &pb::ListRetriesRequest {
                local_only: true,
                ..request("svc", 10)
            },
            None,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("local_only:"), "{e}");
}

/// Many retries due within one window, in an order other than their ids': listed by due time,
/// pages of any size resuming inside the window.
#[tokio::test]
async fn a_window_is_listed_by_due_time() {
    let rig = Rig::new(utc_ms(START)).await;
    let window_ms = rig.grid.window_ms() as u64;
    let base = 10 * window_ms;
    for i in 0..50u64 {
        // Ids ascending, due times descending within the window (and two alike).
        let delay = base + window_ms / 2 - (i / 2) * (window_ms / 200);
        rig.enqueue("svc", &format!("w{i:02}"), delay).await;
    }
    for size in [1, 7, 50] {
        let (rows, _) = all_pages(&rig, request("svc", size)).await;
        assert_eq!(rows.len(), 50, "pages of {size}");
        assert_due_order(&rows, &format!("pages of {size}"));
        assert_eq!(rows[0].transaction_id, "w48");
    }
}

/// Buckets of 3: the directory alone shows the window too large to sort.
#[tokio::test]
async fn a_window_too_large_to_sort_is_listed_in_stored_order_once() {
    too_large_to_sort(Rig::new(utc_ms(START)).await).await;
}

/// Buckets larger than the window: its pointers are read, and the 20,001st stops the sort.
#[tokio::test]
async fn a_window_found_too_large_while_read_is_listed_in_stored_order_once() {
    let config = Settings {
        bucket_size: 1_000_000,
        ..config()
    };
    too_large_to_sort(Rig::with_config(utc_ms(START), config).await).await;
}

/// A window with more retries of the service than a listing sorts (20,000) is listed in the
/// order its pointers are stored, each once.
async fn too_large_to_sort(rig: Rig) {
    let n = 20_050;
    let inputs: Vec<_> = (0..n)
        .map(|i| {
            Ok(input(
                "svc",
                &format!("b{i:05}"),
                3_600_000 + ((n - i) % 400) as u64,
            ))
        })
        .collect();
    for r in rig.writer.enqueue_many(inputs).await {
        r.unwrap();
    }
    let (rows, calls) = all_pages(&rig, request("svc", 500)).await;
    let unique: BTreeSet<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
    assert_eq!((rows.len(), unique.len()), (n, n));
    assert!(calls >= n / 500, "{calls} calls");
}

/// Strictly by due time, then transaction id.
fn assert_due_order(rows: &[pb::RetrySummary], what: &str) {
    let key = |r: &pb::RetrySummary| {
        let t = r.due_time.unwrap();
        (t.seconds, t.nanos, r.transaction_id.clone())
    };
    for pair in rows.windows(2) {
        assert!(
            key(&pair[0]) < key(&pair[1]),
            "{what}: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
}
