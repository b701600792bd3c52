//! Following the cluster ring: one subscription per live node, started and stopped as the
//! ring changes, or one to the given address when there is no ring.

use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    sync::Arc,
    time::Duration,
};

use rebound_proto::v1 as pb;
use tokio::{
    sync::{mpsc, watch},
    task::{JoinError, JoinSet},
    time::{sleep, timeout, Instant},
};
use tonic::{transport::ClientTlsConfig, Code, Status};
use tracing::Instrument;

use crate::transport::Credentials;

use super::{
    backoff::Backoff,
    lazy_client,
    subscription::{run_subscription, Mode},
    ExecClient, IntoOutcome, Job, Shared,
};

/// Bound on each `GetRing` call.
const RING_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest interval between two rounds of `GetRing`.
pub(super) const MIN_RING_REFRESH: Duration = Duration::from_millis(50);

/// What a round of `GetRing` found.
#[derive(Debug, Clone)]
pub(super) enum RingAnswer {
    /// The nodes listed, by address with their node ids; addresses are trimmed and blank ones
    /// left out, so this may be empty.
    Listed(BTreeMap<String, String>),
    /// The node has no `GetRing`.
    Unimplemented,
    /// No node answered; the last error.
    Failed(Status),
}

/// What the executor last made of the ring, to log changes rather than every refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RingAnswerKind {
    Ring,
    NoRing,
    Failed,
}

/// Asks each of `sources` in turn for the ring, until one answers.
pub(super) async fn ask_ring(sources: Vec<(String, ExecClient)>) -> RingAnswer {
    let mut last = Status::unavailable("no node to ask for the ring");
    for (node, mut client) in sources {
        let status = match timeout(RING_TIMEOUT, client.get_ring(pb::GetRingRequest {})).await {
            Ok(Ok(ring)) => return RingAnswer::Listed(listed(ring.into_inner())),
            Ok(Err(status)) if status.code() == Code::Unimplemented => {
                return RingAnswer::Unimplemented
            }
            Ok(Err(status)) => status,
            Err(_) => Status::deadline_exceeded("GetRing did not answer in time"),
        };
        tracing::debug!(
            %node,
            code = ?status.code(),
            message = status.message(),
            "GetRing failed"
        );
        last = status;
    }
    RingAnswer::Failed(last)
}

/// [`ask_ring`] after `delay`.
pub(super) async fn ask_ring_after(
    delay: Duration,
    sources: Vec<(String, ExecClient)>,
) -> RingAnswer {
    sleep(delay).await;
    ask_ring(sources).await
}

fn listed(ring: pb::Ring) -> BTreeMap<String, String> {
    ring.nodes
        .into_iter()
        .filter_map(|node| {
            let address = node.address.trim();
            (!address.is_empty()).then(|| (address.to_owned(), node.node_id))
        })
        .collect()
}

/// Where a subscription goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Source {
    /// The address (or client) the executor was given, when there is no ring to follow.
    Given,
    /// A ring node, by its address.
    Node(String),
}

struct Active {
    client: ExecClient,
    mode: watch::Sender<Mode>,
}

/// The subscriptions of one executor.
pub(super) struct Subscriptions<H> {
    shared: Arc<Shared<H>>,
    request: pb::SubscribeRequest,
    reconnect: Backoff,
    given: ExecClient,
    /// Sent to every ring node, as to the given one.
    credentials: Credentials,
    /// TLS for the ring nodes' connections.
    tls: Option<ClientTlsConfig>,
    given_label: String,
    fatal: mpsc::UnboundedSender<Status>,
    tasks: JoinSet<()>,
    active: HashMap<Source, Active>,
    /// Subscriptions told to stop that may still be finishing their handlers.
    retiring: Vec<watch::Sender<Mode>>,
    last_ring: Option<BTreeMap<String, String>>,
    last_kind: Option<RingAnswerKind>,
}

impl<H, F> Subscriptions<H>
where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future + Send + 'static,
    F::Output: IntoOutcome,
{
    pub(super) fn new(
        shared: Arc<Shared<H>>,
        request: pb::SubscribeRequest,
        reconnect: Backoff,
        (given, credentials): (ExecClient, Credentials),
        tls: Option<ClientTlsConfig>,
        given_label: String,
        fatal: mpsc::UnboundedSender<Status>,
    ) -> Self {
        Subscriptions {
            shared,
            request,
            reconnect,
            given,
            credentials,
            tls,
            given_label,
            fatal,
            tasks: JoinSet::new(),
            active: HashMap::new(),
            retiring: Vec::new(),
            last_ring: None,
            last_kind: None,
        }
    }

    /// Whom to ask for the ring: the given address first, as it is what the user configured
    /// (possibly a load balancer), then the ring nodes subscribed to, so that the ring is
    /// still followed while the given address is down.
    pub(super) fn ring_sources(&self) -> Vec<(String, ExecClient)> {
        let mut sources = vec![(self.given_label.clone(), self.given.clone())];
        let mut nodes: Vec<_> = self
            .active
            .iter()
            .filter_map(|(source, active)| match source {
                Source::Node(address) => Some((address.clone(), active.client.clone())),
                Source::Given => None,
            })
            .collect();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        sources.extend(nodes);
        sources
    }

    /// Subscribes according to `answer`: to every listed node that has a usable address, or
    /// else to the given address. A failed `GetRing` keeps the current subscriptions (or
    /// starts with the given address).
    pub(super) fn apply(&mut self, answer: RingAnswer) {
        self.retiring.retain(|mode| !mode.is_closed());
        match answer {
            RingAnswer::Listed(ring) => {
                let changed = self.last_ring.as_ref() != Some(&ring);
                if changed {
                    tracing::info!(
                        nodes = ?ring.iter().map(|(a, id)| format!("{id}@{a}")).collect::<Vec<_>>(),
                        "the ring changed"
                    );
                }
                let mut wanted = BTreeMap::new();
                for (address, node_id) in &ring {
                    let source = Source::Node(address.clone());
                    if self.active.contains_key(&source) {
                        wanted.insert(address.clone(), None);
                        continue;
                    }
                    match lazy_client(address, &self.credentials, self.tls.as_ref()) {
                        Ok(client) => {
                            wanted.insert(address.clone(), Some((node_id.clone(), client)));
                        }
                        Err(e) if changed => {
                            tracing::warn!(
                                %node_id,
                                %address,
                                error = %e,
                                "ignoring a ring node whose address is not usable"
                            );
                        }
                        Err(_) => {}
                    }
                }
                self.last_ring = Some(ring);
                if wanted.is_empty() {
                    self.fall_back("the ring lists no nodes");
                } else {
                    self.last_kind = Some(RingAnswerKind::Ring);
                    self.follow(wanted);
                }
            }
            RingAnswer::Unimplemented => {
                self.last_ring = None;
                self.fall_back("the node has no GetRing");
            }
            RingAnswer::Failed(status) => {
                let first = self.last_kind != Some(RingAnswerKind::Failed);
                self.last_kind = Some(RingAnswerKind::Failed);
                if self.active.is_empty() {
                    tracing::warn!(
                        code = ?status.code(),
                        message = status.message(),
                        "cannot get the ring; subscribing to the given address until it answers"
                    );
                    self.start(Source::Given, "", self.given.clone());
                } else if first {
                    tracing::warn!(
                        code = ?status.code(),
                        message = status.message(),
                        "cannot get the ring; keeping the current subscriptions"
                    );
                } else {
                    tracing::debug!(
                        code = ?status.code(),
                        message = status.message(),
                        "cannot get the ring; keeping the current subscriptions"
                    );
                }
            }
        }
    }

    /// Subscribes to the given address only, without asking for the ring.
    pub(super) fn subscribe_given(&mut self) {
        self.start(Source::Given, "", self.given.clone());
    }

    fn fall_back(&mut self, why: &str) {
        if self.last_kind != Some(RingAnswerKind::NoRing) {
            tracing::info!(
                reason = why,
                address = %self.given_label,
                "no ring to follow; subscribing to the given address"
            );
        }
        self.last_kind = Some(RingAnswerKind::NoRing);
        let nodes: Vec<_> = self
            .active
            .keys()
            .filter(|source| matches!(source, Source::Node(_)))
            .cloned()
            .collect();
        for source in nodes {
            self.retire(&source);
        }
        if !self.active.contains_key(&Source::Given) {
            self.start(Source::Given, "", self.given.clone());
        }
    }

    /// Subscribes to the `wanted` nodes (those with a client are new) and to no others.
    fn follow(&mut self, wanted: BTreeMap<String, Option<(String, ExecClient)>>) {
        let gone: Vec<_> = self
            .active
            .keys()
            .filter(|source| match source {
                Source::Given => true,
                Source::Node(address) => !wanted.contains_key(address),
            })
            .cloned()
            .collect();
        for (address, new) in wanted {
            if let Some((node_id, client)) = new {
                self.start(Source::Node(address), &node_id, client);
            }
        }
        for source in gone {
            self.retire(&source);
        }
    }

    fn start(&mut self, source: Source, node_id: &str, client: ExecClient) {
        let span = match &source {
            Source::Given => tracing::info_span!(
                "rebound_subscription",
                node = %self.given_label,
                node_id = tracing::field::Empty,
            ),
            Source::Node(address) => tracing::info_span!(
                "rebound_subscription",
                node = %address,
                node_id = %node_id,
            ),
        };
        let (mode, mode_rx) = watch::channel(Mode::Run);
        let subscription = run_subscription(
            Arc::clone(&self.shared),
            client.clone(),
            self.request.clone(),
            self.reconnect,
            mode_rx,
            self.fatal.clone(),
        );
        self.tasks.spawn(subscription.instrument(span));
        self.active.insert(source, Active { client, mode });
    }

    fn retire(&mut self, source: &Source) {
        if let Some(active) = self.active.remove(source) {
            match source {
                Source::Given => tracing::info!(
                    address = %self.given_label,
                    "following the ring; unsubscribing from the given address"
                ),
                Source::Node(address) => {
                    tracing::info!(node = %address, "the node left the ring; unsubscribing");
                }
            }
            active.mode.send_replace(Mode::Retire);
            self.retiring.push(active.mode);
        }
    }

    /// Reaps subscriptions that have finished (retired ones, once their handlers are done).
    pub(super) async fn join_next(&mut self) -> Option<()> {
        let joined = self.tasks.join_next().await?;
        check_subscription(joined);
        Some(())
    }

    pub(super) fn is_idle(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Stops every subscription: running handlers get until `drain_timeout` to finish and ack.
    pub(super) async fn drain(mut self, drain_timeout: Duration) {
        let deadline = Instant::now() + drain_timeout;
        for mode in self
            .active
            .values()
            .map(|active| &active.mode)
            .chain(&self.retiring)
        {
            mode.send_replace(Mode::Drain(deadline));
        }
        while let Some(joined) = self.tasks.join_next().await {
            check_subscription(joined);
        }
    }
}

fn check_subscription(joined: Result<(), JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            tracing::error!(error = %e, "subscription task panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, address: &str) -> pb::RingNode {
        pb::RingNode {
            node_id: id.into(),
            address: address.into(),
            compactor: false,
            ranges: Vec::new(),
        }
    }

    #[test]
    fn listed_nodes_are_keyed_by_trimmed_address() {
        let ring = pb::Ring {
            nodes: vec![
                node("n1", "10.0.0.1:50051"),
                node("n2", " 10.0.0.2:50051 "),
                node("n3", ""),
                node("n4", "   "),
            ],
        };
        let listed = listed(ring);
        assert_eq!(
            listed.into_iter().collect::<Vec<_>>(),
            [
                ("10.0.0.1:50051".to_owned(), "n1".to_owned()),
                ("10.0.0.2:50051".to_owned(), "n2".to_owned()),
            ]
        );
        assert!(super::listed(pb::Ring::default()).is_empty());
    }
}
