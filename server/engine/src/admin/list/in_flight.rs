//! The in-flight part of a listing: the retries delivered and awaiting their ack. Only the
//! node that delivered one knows it, so the listing asks this node's hub and, unless it is a
//! peer's request (`local_only`), every other live member of the ring in parallel, with the
//! caller's `authorization` (`AskPeer::local_in_flight`). The rows are sorted by (due time,
//! transaction id) and paged after the token's pair; a member that does not answer is named
//! in `unreachable_nodes`. Each node gives at most `MAX_LOCAL` rows.

use rebound_proto::time::ts;
use rebound_proto::v1 as pb;

use super::{summary_of, token::in_flight_token, Page};
use crate::{error::Error, handle::Handle};

/// Most retries in flight one node lists for one request.
const MAX_LOCAL: usize = 5_000;

impl Handle {
    /// This node's retries in flight that match, as rows with their delivery.
    fn local_in_flight(&self, page: &Page) -> Vec<pb::RetrySummary> {
        let mut rows = Vec::new();
        self.hub
            .each_in_flight(&page.query.service, MAX_LOCAL, |s, delivered, deadline| {
                if !page.query.matches(s) {
                    return;
                }
                let mut row = summary_of(s);
                row.status = pb::RetryStatus::InFlight as i32;
                row.delivery = Some(pb::InFlightDelivery {
                    node_id: self.node_id.to_string(),
                    executor_id: delivered.map(|d| d.1.to_string()).unwrap_or_default(),
                    delivered_at: delivered.map(|d| ts(d.0)),
                    ack_deadline: Some(ts(deadline)),
                });
                rows.push(row);
            });
        rows
    }

    /// The in-flight part after `after`; the token to resume with, None once every row was
    /// listed. A peer's request (`local_only`) gets every row of this node at once.
    pub(super) async fn list_in_flight(
        &self,
        page: &mut Page,
        after: Option<(i64, String)>,
        authorization: Option<String>,
    ) -> Result<Option<String>, Error> {
        let mut rows = self.local_in_flight(page);
        if page.query.local_only {
            page.rows.extend(rows);
            return Ok(None);
        }
        if let (Some(ring), Some(peers)) = (&self.ring, &self.peers) {
            let members = ring.view().await?;
            let asks = members
                .into_iter()
                .filter(|(m, _, _)| *m.node_id != *self.node_id)
                .map(|(m, _, _)| {
                    let request = page.query.peer_request.clone();
                    let authorization = authorization.clone();
                    async move {
                        let got = peers
                            .local_in_flight(&m.address, request, authorization)
                            .await;
                        (m.node_id, got)
                    }
                });
            for (node, got) in futures::future::join_all(asks).await {
                match got {
                    Ok(r) => rows.extend(r.retries),
                    Err(e) => {
                        tracing::debug!(%node, error = %e, "peer did not answer for its retries in flight");
                        page.unreachable.push(node);
                    }
                }
            }
        }
        let key = |r: &pb::RetrySummary| {
            let due = r
                .due_time
                .as_ref()
                .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000);
            (due, r.transaction_id.clone())
        };
        let mut keyed: Vec<((i64, String), pb::RetrySummary)> = rows
            .into_iter()
            .map(|r| (key(&r), r))
            .filter(|(k, _)| after.as_ref().is_none_or(|a| k > a))
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        // One transaction delivered by two nodes at once (a handover) is listed once per
        // delivery: both are in flight.
        let room = page.query.page_size.saturating_sub(page.rows.len());
        let more = keyed.len() > room;
        let mut last = after;
        for (k, r) in keyed.into_iter().take(room) {
            page.rows.push(r);
            last = Some(k);
        }
        Ok(more.then(|| in_flight_token(last.as_ref())))
    }
}
