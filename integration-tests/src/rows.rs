//! The directory and state rows of a test keyspace read back through CQL, for tests that check
//! exactly what an enqueue wrote (the five tiers and the `transactions` table of
//! docs/architecture.md, "Data model").

use std::collections::BTreeMap;

pub use chrono::NaiveDate as CqlDate;

use crate::TestNode;

pub fn date(d: CqlDate) -> String {
    d.to_string()
}

pub fn epoch_days(d: CqlDate) -> i64 {
    (d - CqlDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days()
}

/// Absolute window number (windows since the epoch) of a (day, index) pair.
pub fn abs_window(day: CqlDate, index: i32, window_ms: i64) -> i64 {
    epoch_days(day) * (86_400_000 / window_ms) + i64::from(index)
}

pub type PointerKey = (CqlDate, i32, String, String, i32);
pub type InstanceKey = (CqlDate, i32, String, String);

#[derive(Debug, Clone)]
pub struct PointerRow {
    pub day: CqlDate,
    pub window: i32,
    pub service: String,
    pub instance: String,
    pub bucket: i32,
    pub transaction_id: String,
    pub generation: i64,
}

pub async fn pointers(n: &TestNode) -> Vec<PointerRow> {
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
pub type StateMap = BTreeMap<(String, String), (String, i64, CqlDate, i32, String, i32)>;

pub async fn states(n: &TestNode) -> StateMap {
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
pub fn body_of(bytes: &[u8]) -> rebound_store::body::Body {
    rebound_store::body::Body::decode_stored(bytes, "test", "row").unwrap()
}

pub fn cql_date(days_since_epoch: i32) -> CqlDate {
    CqlDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Duration::days(days_since_epoch.into())
}

/// A first attempt carrying a payload and a last error, so that every cell of its state row
/// has something to check.
pub fn full_req(
    service: &str,
    txid: &str,
    delay_ms: u64,
) -> rebound_proto::v1::EnqueueRetryRequest {
    rebound_proto::v1::EnqueueRetryRequest {
        payload: format!("payload of {txid}").into_bytes(),
        last_error: "503 from downstream".into(),
        ..crate::enqueue_req(service, txid, delay_ms)
    }
}

/// Each item's result of a batch, in order.
pub fn batch_outcomes(
    resp: rebound_proto::v1::EnqueueRetryBatchResponse,
) -> Vec<Result<rebound_proto::v1::EnqueueRetryResponse, rebound_proto::v1::ItemError>> {
    use rebound_proto::v1::enqueue_retry_result::Result as R;
    resp.results
        .into_iter()
        .map(|r| match r.result.unwrap() {
            R::Response(r) => Ok(r),
            R::Error(e) => Err(e),
        })
        .collect()
}
