//! Listing a service's scheduled retries (`ListRetries`), a page at a time.

use std::{collections::HashMap, time::SystemTime};

use rebound_proto::v1 as pb;

use crate::{
    error::Error,
    overload::call_shed_aware,
    retry::RetryStatus,
    time::{required_time, time_to_proto},
    Client,
};

/// What [`Client::list_retries`] filters on; every field set must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    /// Which retries, listed in this order: [`RetryStatus::Scheduled`] (empty: these alone),
    /// [`RetryStatus::InFlight`], [`RetryStatus::Dead`], [`RetryStatus::Succeeded`] and
    /// [`RetryStatus::Cancelled`] (in the order they finished).
    pub statuses: Vec<RetryStatus>,
    /// Every one of these attributes, with these values.
    pub attributes: HashMap<String, String>,
    /// A substring of the last error.
    pub error_contains: String,
    pub dependency: String,
    /// A saga's step (by its own id) and its compensations.
    pub saga_transaction_id: String,
    /// Due at or after, and before.
    pub due_after: Option<SystemTime>,
    pub due_before: Option<SystemTime>,
    /// Rows per call, 1-500 (0: the node's 100).
    pub page_size: u32,
}

/// One retry of a listing; [`Client::get`] gives the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySummary {
    pub transaction_id: String,
    pub status: RetryStatus,
    pub attempt: u32,
    pub due_time: SystemTime,
    pub last_error: String,
    pub dependency: String,
    /// Its place in a compensation chain (0: a saga step or none), and the chain's step.
    pub chain_position: u32,
    pub saga_transaction_id: String,
    pub enqueue_count: u32,
    pub delivery_count: u32,
    pub attributes: HashMap<String, String>,
}

impl TryFrom<pb::RetrySummary> for RetrySummary {
    type Error = Error;

    fn try_from(r: pb::RetrySummary) -> Result<Self, Error> {
        Ok(RetrySummary {
            status: RetryStatus::from_proto(r.status)?,
            due_time: required_time("due_time", r.due_time)?,
            transaction_id: r.transaction_id,
            attempt: r.attempt,
            last_error: r.last_error,
            dependency: r.dependency,
            chain_position: r.chain_position,
            saga_transaction_id: r.saga_transaction_id,
            enqueue_count: r.enqueue_count,
            delivery_count: r.delivery_count,
            attributes: r.attributes,
        })
    }
}

/// The pages of one listing ([`Client::list_retries`]): call [`RetryPages::next_page`] until it
/// answers `None`. A page may be empty and still not be the last (one call reads a bounded
/// part of the node's directory).
#[derive(Debug)]
pub struct RetryPages {
    client: Client,
    request: pb::ListRetriesRequest,
    done: bool,
}

impl RetryPages {
    /// The next page, or `None` once the listing is complete.
    pub async fn next_page(&mut self) -> Result<Option<Vec<RetrySummary>>, Error> {
        if self.done {
            return Ok(None);
        }
        let r = call_shed_aware(&self.client.retry, &self.request, |mut c, r| async move {
            c.list_retries(r).await
        })
        .await?
        .into_inner();
        self.done = r.next_page_token.is_empty();
        self.request.page_token = r.next_page_token;
        r.retries
            .into_iter()
            .map(RetrySummary::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Every remaining page, gathered.
    pub async fn all(mut self) -> Result<Vec<RetrySummary>, Error> {
        let mut out = Vec::new();
        while let Some(page) = self.next_page().await? {
            out.extend(page);
        }
        Ok(out)
    }
}

impl Client {
    /// The service's retries that match `filter` (scheduled ones unless it names other
    /// statuses), by due time (`ListRetries`), as pages.
    pub fn list_retries(&self, service: impl Into<String>, filter: ListFilter) -> RetryPages {
        RetryPages {
            client: self.clone(),
            request: pb::ListRetriesRequest {
                service: service.into(),
                statuses: filter
                    .statuses
                    .iter()
                    .map(|s| pb::RetryStatus::from(*s) as i32)
                    .collect(),
                due_after: filter.due_after.map(time_to_proto),
                due_before: filter.due_before.map(time_to_proto),
                attributes: filter.attributes,
                dependency: filter.dependency,
                error_contains: filter.error_contains,
                saga_transaction_id: filter.saga_transaction_id,
                page_size: filter.page_size,
                page_token: String::new(),
                local_only: false,
            },
            done: false,
        }
    }
}
