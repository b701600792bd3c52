//! ListRetries end to end on a node and Cassandra (docs/architecture.md, "Listing retries"):
//! 1,000 retries over 3 services with attributes, errors and dependencies; every filter
//! combination checked against a model, in due-time order; pages that cover the scheduled set
//! exactly once while other retries of the same service are delivered and acked; then the
//! succeeded, dead and cancelled ones listed from where the store keeps them. Needs the
//! Cassandra of `scripts/cassandra start`.

use std::collections::{BTreeMap, BTreeSet};

use rebound_integration_tests::{
    ack, ack_req, batch_accepted, dispatch_config, enqueue_req, next_delivery, subscribe, ts,
    ts_ms, TestNode,
};
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use tonic::transport::Channel;

const SERVICES: [&str; 3] = ["pay", "ship", "mail"];
const N: usize = 1_000;
/// Retries of "pay" due at once, delivered and acked while the listing runs.
const DUE_NOW: usize = 90;

/// What the model knows of a scheduled retry.
#[derive(Debug, Clone)]
struct Known {
    service: &'static str,
    attributes: BTreeMap<String, String>,
    error: String,
    dependency: String,
    due_ms: i64,
}

/// Every page of `r`, `page_size` at a time.
async fn all_pages(ch: &Channel, mut r: pb::ListRetriesRequest) -> Vec<pb::RetrySummary> {
    let mut rows = Vec::new();
    for _ in 0..10_000 {
        let page = RetryServiceClient::new(ch.clone())
            .list_retries(r.clone())
            .await
            .expect("a page")
            .into_inner();
        assert!(page.retries.len() <= r.page_size.max(1) as usize);
        rows.extend(page.retries);
        if page.next_page_token.is_empty() {
            return rows;
        }
        r.page_token = page.next_page_token;
    }
    panic!("the listing does not end");
}

fn request(service: &str, page_size: u32) -> pb::ListRetriesRequest {
    pb::ListRetriesRequest {
        service: service.into(),
        page_size,
        ..Default::default()
    }
}

/// The rows of retries the model knows: all but the ones due now ("now00" on), which are being
/// delivered and acked while the listing runs.
fn modelled(rows: Vec<pb::RetrySummary>) -> Vec<pb::RetrySummary> {
    rows.into_iter()
        .filter(|r| !r.transaction_id.starts_with("now"))
        .collect()
}

/// Due time, then transaction id, strictly ascending.
fn assert_ordered(rows: &[pb::RetrySummary], what: &str) {
    let key = |r: &pb::RetrySummary| {
        (
            ts_ms(r.due_time.as_ref().unwrap()),
            r.transaction_id.clone(),
        )
    };
    for pair in rows.windows(2) {
        assert!(
            key(&pair[0]) < key(&pair[1]),
            "{what}: {:?} then {:?}",
            key(&pair[0]),
            key(&pair[1])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_match_a_model_and_cover_the_set_once_while_retries_are_acked() {
    let n = TestNode::with_system_clock(dispatch_config("list_e2e")).await;
    let addr = n.node.as_ref().unwrap().local_addr();
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RetryServiceClient::new(ch.clone());

    // 1,000 retries due in 1 to 2 hours, over about 60 one-second windows, several of a
    // window's in an order other than their ids'.
    let mut model: BTreeMap<String, Known> = BTreeMap::new();
    let mut batches: BTreeMap<&str, Vec<pb::EnqueueRetryRequest>> = BTreeMap::new();
    for i in 0..N {
        let service = SERVICES[i % 3];
        let id = format!("r{i:04}");
        let delay = 3_600_000 + ((i * 7_919) % 60_000) as u64;
        let mut r = enqueue_req(service, &id, delay);
        r.attributes.insert("customer".into(), format!("{}", i % 5));
        if i % 3 == 0 {
            r.attributes.insert("region".into(), "eu".into());
        }
        r.last_error = if i % 4 == 0 {
            "card declined".into()
        } else {
            format!("gateway: 50{}", i % 3)
        };
        if i % 7 == 0 {
            r.dependency = "ledger".into();
        }
        model.insert(
            id.clone(),
            Known {
                service,
                attributes: r.attributes.clone().into_iter().collect(),
                error: r.last_error.clone(),
                dependency: r.dependency.clone(),
                due_ms: 0,
            },
        );
        batches.entry(service).or_default().push(r);
    }
    for (_, requests) in batches {
        for chunk in requests.chunks(200) {
            let resp = client
                .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
                    requests: chunk.to_vec(),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(batch_accepted(&resp));
            for (req, res) in chunk.iter().zip(resp.results) {
                let Some(pb::enqueue_retry_result::Result::Response(ok)) = res.result else {
                    unreachable!("accepted");
                };
                model.get_mut(&req.transaction_id).unwrap().due_ms =
                    ts_ms(ok.due_time.as_ref().unwrap());
            }
        }
    }

    // Meanwhile: retries of "pay" due now, delivered and acked (SUCCEEDED, RETRY in an hour,
    // or FAILED) while "pay" is listed.
    let now_ids: Vec<String> = (0..DUE_NOW).map(|i| format!("now{i:02}")).collect();
    let resp = client
        .enqueue_retry_batch(pb::EnqueueRetryBatchRequest {
            requests: now_ids.iter().map(|id| enqueue_req("pay", id, 0)).collect(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(batch_accepted(&resp));
    let mut stream = subscribe(&ch, "pay", 20).await;
    let acker_ch = ch.clone();
    let acker = tokio::spawn(async move {
        let mut outcomes: BTreeMap<String, pb::AckOutcome> = BTreeMap::new();
        while outcomes.len() < DUE_NOW {
            let Some(d) = next_delivery(&mut stream, std::time::Duration::from_secs(60)).await
            else {
                panic!("{} of {DUE_NOW} delivered", outcomes.len());
            };
            let i: usize = d.transaction_id[3..].parse().unwrap();
            let outcome = match i % 3 {
                0 => pb::AckOutcome::Succeeded,
                1 => pb::AckOutcome::Retry,
                _ => pb::AckOutcome::Failed,
            };
            let mut r = ack_req(&d, outcome);
            if outcome == pb::AckOutcome::Retry {
                r.retry_after = Some(rebound_integration_tests::secs(7_200));
            }
            r.error = "boom".into();
            ack(&acker_ch, r).await.expect("acked");
            outcomes.insert(d.transaction_id, outcome);
        }
        outcomes
    });
    // Pages of 37 of "pay" while that runs: every retry of the model once, in order. The ones
    // due now may be listed or not, and twice: a RETRY moves one to a window after the
    // listing's position, where it is listed again.
    let mut rounds = 0;
    while !acker.is_finished() || rounds == 0 {
        rounds += 1;
        let future = modelled(all_pages(&ch, request("pay", 37)).await);
        let mut seen = BTreeSet::new();
        for r in &future {
            assert!(
                seen.insert(r.transaction_id.clone()),
                "listed twice: {}",
                r.transaction_id
            );
        }
        let want: BTreeSet<String> = model
            .iter()
            .filter(|(_, k)| k.service == "pay")
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(seen, want, "round {rounds}");
        assert_ordered(&future, "pay");
    }
    let outcomes = acker.await.unwrap();

    // Every filter, alone and combined, against the model, in every service.
    type Filter = (pb::ListRetriesRequest, Box<dyn Fn(&Known) -> bool>);
    let from = model.values().map(|k| k.due_ms).min().unwrap() + 20_000;
    let to = from + 20_000;
    let attrs = |pairs: &[(&str, &str)]| -> std::collections::HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let has = |k: &Known, key: &str, v: &str| k.attributes.get(key).map(String::as_str) == Some(v);
    for service in SERVICES {
        let filters: Vec<Filter> = vec![
            (request(service, 100), Box::new(|_| true)),
            (
                pb::ListRetriesRequest {
                    attributes: attrs(&[("customer", "3")]),
                    ..request(service, 100)
                },
                Box::new(move |k| has(k, "customer", "3")),
            ),
            (
                pb::ListRetriesRequest {
                    attributes: attrs(&[("customer", "1"), ("region", "eu")]),
                    ..request(service, 100)
                },
                Box::new(move |k| has(k, "customer", "1") && has(k, "region", "eu")),
            ),
            (
                pb::ListRetriesRequest {
                    error_contains: "declined".into(),
                    ..request(service, 100)
                },
                Box::new(|k| k.error.contains("declined")),
            ),
            (
                pb::ListRetriesRequest {
                    error_contains: "gateway: 502".into(),
                    dependency: "ledger".into(),
                    ..request(service, 100)
                },
                Box::new(|k| k.error.contains("gateway: 502") && k.dependency == "ledger"),
            ),
            (
                pb::ListRetriesRequest {
                    due_after: Some(ts(from)),
                    due_before: Some(ts(to)),
                    ..request(service, 100)
                },
                Box::new(move |k| k.due_ms >= from && k.due_ms < to),
            ),
            (
                pb::ListRetriesRequest {
                    due_after: Some(ts(from)),
                    attributes: attrs(&[("region", "eu")]),
                    error_contains: "card".into(),
                    ..request(service, 9)
                },
                Box::new(move |k| {
                    k.due_ms >= from && has(k, "region", "eu") && k.error.contains("card")
                }),
            ),
        ];
        for (i, (r, keep)) in filters.iter().enumerate() {
            let rows = all_pages(&ch, r.clone()).await;
            let got: Vec<String> = modelled(rows.clone())
                .into_iter()
                .map(|r| r.transaction_id)
                .collect();
            let want: BTreeSet<String> = model
                .iter()
                .filter(|(_, k)| k.service == service && keep(k))
                .map(|(id, _)| id.clone())
                .collect();
            assert_eq!(got.len(), want.len(), "{service} filter {i}: listed twice?");
            assert_eq!(
                got.into_iter().collect::<BTreeSet<_>>(),
                want,
                "{service} filter {i}"
            );
            assert_ordered(&rows, &format!("{service} filter {i}"));
        }
    }

    // Finished: the SUCCEEDED and DEAD ones of "pay" where they are kept; ten cancelled.
    let of = |statuses: &[pb::RetryStatus]| pb::ListRetriesRequest {
        statuses: statuses.iter().map(|s| *s as i32).collect(),
        ..request("pay", 13)
    };
    let ids_with = |o: pb::AckOutcome| -> BTreeSet<String> {
        outcomes
            .iter()
            .filter(|(_, x)| **x == o)
            .map(|(id, _)| id.clone())
            .collect()
    };
    let listed = |rows: Vec<pb::RetrySummary>| -> BTreeSet<String> {
        let n = rows.len();
        let set: BTreeSet<String> = rows.into_iter().map(|r| r.transaction_id).collect();
        assert_eq!(set.len(), n, "listed twice");
        set
    };
    assert_eq!(
        listed(all_pages(&ch, of(&[pb::RetryStatus::Succeeded])).await),
        ids_with(pb::AckOutcome::Succeeded)
    );
    assert_eq!(
        listed(all_pages(&ch, of(&[pb::RetryStatus::Dead])).await),
        ids_with(pb::AckOutcome::Failed)
    );
    let cancel: Vec<String> = model
        .iter()
        .filter(|(_, k)| k.service == "pay")
        .map(|(id, _)| id.clone())
        .take(10)
        .collect();
    for id in &cancel {
        let r = client
            .cancel_retry(pb::CancelRetryRequest {
                service: "pay".into(),
                transaction_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.cancelled);
    }
    let cancelled = all_pages(&ch, of(&[pb::RetryStatus::Cancelled])).await;
    assert!(cancelled
        .iter()
        .all(|r| r.status == pb::RetryStatus::Cancelled as i32));
    assert_eq!(listed(cancelled), cancel.into_iter().collect());
    // The RETRY ones are scheduled again: listed there, not as finished.
    let scheduled = listed(all_pages(&ch, request("pay", 100)).await);
    assert!(ids_with(pb::AckOutcome::Retry).is_subset(&scheduled));
    n.finish().await;
}
