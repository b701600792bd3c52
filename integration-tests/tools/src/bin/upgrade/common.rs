//! What both scenarios of the upgrade check share: the two builds, the node settings (the
//! chaos cluster's), starting a node of either build, the enqueues, the executor that acks
//! every delivery SUCCEEDED on the node that sent it, and the tally at the end (deliveries
//! per id, final states, the directory).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    path::PathBuf,
    sync::atomic::AtomicBool,
    time::{Duration, Instant},
};

use futures::StreamExt;
use rebound_integration_tests::{ack, ack_req, enqueue_req};
use rebound_proto::v1::{self as pb, retry_service_client::RetryServiceClient};
use rebound_tools::chaos::{
    cluster::{free_port, Node, NodeSettings},
    directory, fmt_counts,
    history::{now_ms, AckOk, Answer, Event, History, Kind, Outcome},
    record_deliveries, ts_ms, StreamSpec,
};
use scylla::client::session::Session;
use tonic::transport::Channel;

/// The one service of both scenarios (each has a keyspace of its own).
pub const SERVICE: &str = "upgrade";
/// Every unary call gives up after this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the executors stay subscribed after the last id was delivered: duplicates that
/// come late (a window scan after a memory delivery, a redelivery) are counted too.
pub const SETTLE: Duration = Duration::from_secs(5);
/// A node gets this long to answer after its start (the first node of a keyspace creates it).
const READY_WITHIN: Duration = Duration::from_secs(90);

// The chaos cluster's settings (`chaos::start_cluster`); `Node::start` adds 8 slots.
const WINDOW_SECONDS: u32 = 1;
const SKEW_MARGIN_MS: u64 = 500;
const LEASE_TTL_MS: u64 = 2_000;
const REQUEST_TIMEOUT_MS: u64 = 1_000;

/// One build of rebound-server: its binary and the commit it was built from.
#[derive(Clone, Debug)]
pub struct Build {
    pub bin: PathBuf,
    pub rev: String,
}

/// What the scenarios share: the builds, Cassandra, where node logs go.
pub struct Ctx {
    pub old: Build,
    pub new: Build,
    pub contact_point: String,
    pub log_dir: PathBuf,
    /// Keep every keyspace (by default one is kept only when its scenario fails).
    pub keep: bool,
    pub seed: u64,
}

impl Ctx {
    /// The settings of a node of `build` on `keyspace`.
    pub fn settings(&self, build: &Build, keyspace: &str) -> NodeSettings {
        NodeSettings {
            bin: build.bin.clone(),
            contact_point: self.contact_point.clone(),
            keyspace: keyspace.to_string(),
            log_dir: self.log_dir.clone(),
            window_seconds: WINDOW_SECONDS,
            skew_margin_ms: SKEW_MARGIN_MS,
            lease_ttl_ms: LEASE_TTL_MS,
            request_timeout_ms: REQUEST_TIMEOUT_MS,
        }
    }
}

/// A node named `id` (not started) on a free port.
pub fn node(index: usize, id: &str) -> Node {
    let mut n = Node::new(index, free_port());
    n.id = id.to_string();
    n
}

/// Starts `node` as `s` says and waits until it answers.
pub async fn start(node: &mut Node, s: &NodeSettings) -> anyhow::Result<()> {
    node.start(s, 0)?;
    if !node.wait_ready(READY_WITHIN).await {
        anyhow::bail!(
            "node {} ({}) did not start; see {}",
            node.id,
            s.bin.display(),
            s.log_dir.join(format!("{}.log", node.id)).display()
        );
    }
    Ok(())
}

/// Seconds since `t0`.
pub fn secs_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------
// Enqueues.

/// The enqueues of a scenario: the ids accepted, the others by answer, and how far each
/// answered due time lies past the one asked for.
#[derive(Default)]
pub struct Enqueued {
    pub accepted: BTreeSet<String>,
    /// Enqueues not answered OK (their outcome may be unknown), by answer.
    pub errors: BTreeMap<String, usize>,
    /// Answered due time minus asked due time (ms), per accepted id.
    pub due_lag_ms: Vec<i64>,
    pub batched: usize,
    pub single: usize,
}

impl Enqueued {
    /// Records the answer to one enqueue.
    pub fn record(&mut self, (id, asked_ms, r): Answered) {
        match r {
            Ok(x) => {
                self.due_lag_ms
                    .push(ts_ms(&x.due_time).unwrap_or(asked_ms) - asked_ms);
                self.accepted.insert(id);
            }
            Err(e) => {
                *self.errors.entry(e).or_default() += 1;
            }
        }
    }

    /// "2000 accepted (1000 in batches, 1000 single)", the refusals, the answered due times.
    pub fn summary(&self) -> String {
        let mut lag = self.due_lag_ms.clone();
        lag.sort_unstable();
        let pick = |q: f64| lag.get(((lag.len() as f64 - 1.0) * q) as usize).copied();
        let refused = none_or(&self.errors);
        format!(
            "{} accepted ({} in batches, {} single), not accepted: {refused}; answered due - asked due: p50 {} ms, max {} ms",
            self.accepted.len(),
            self.batched,
            self.single,
            pick(0.5).unwrap_or(0),
            pick(1.0).unwrap_or(0),
        )
    }
}

/// The answer to the enqueue of an id: the id, the due time asked for (ms, Cassandra's
/// clock), and the response or the name of the error.
pub type Answered = (String, i64, Result<pb::EnqueueRetryResponse, String>);

/// `id` due in `delay_ms`, on its own.
pub async fn enqueue_one(ch: Channel, id: String, delay_ms: u64) -> Answered {
    let asked = now_ms() + delay_ms as i64;
    let mut client = RetryServiceClient::new(ch);
    let r = call(client.enqueue_retry(enqueue_req(SERVICE, &id, delay_ms))).await;
    (id, asked, r.map_err(|s| status_name(&s)))
}

/// The `items` (id, delay) in one EnqueueRetryBatch, each with its answer.
pub async fn enqueue_batch(ch: Channel, items: &[(String, u64)]) -> Vec<Answered> {
    let now = now_ms();
    let requests = items
        .iter()
        .map(|(id, delay)| enqueue_req(SERVICE, id, *delay))
        .collect();
    let mut client = RetryServiceClient::new(ch);
    let r = call(client.enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })).await;
    items
        .iter()
        .enumerate()
        .map(|(i, (id, delay))| {
            let answer = match &r {
                Err(s) => Err(status_name(s)),
                Ok(b) => match b.results.get(i).and_then(|x| x.result.as_ref()) {
                    Some(pb::enqueue_retry_result::Result::Response(x)) => Ok(x.clone()),
                    Some(pb::enqueue_retry_result::Result::Error(e)) => {
                        Err(format!("{:?}", tonic::Code::from(e.code)))
                    }
                    None => Err("no result".into()),
                },
            };
            (id.clone(), now + *delay as i64, answer)
        })
        .collect()
}

async fn call<T>(
    f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded("client timeout (upgrade)")),
    }
}

fn status_name(s: &tonic::Status) -> String {
    format!("{:?}", s.code())
}

// ---------------------------------------------------------------------------------------
// The executors.

/// Subscribes to [`SERVICE`] on `channel` (node `node`) until aborted, again after every
/// break, records each delivery in `history` and acks it SUCCEEDED on the same node (the
/// ack is recorded too).
pub fn spawn_executor(
    channel: Channel,
    node: usize,
    history: History,
    max_in_flight: u32,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stop = AtomicBool::new(false);
        let spec = StreamSpec {
            node,
            service: SERVICE,
            executor_id: format!("upgrade-{node}"),
            max_in_flight,
            subscribe_timeout: Duration::from_secs(3),
        };
        let (ch, h) = (channel.clone(), history.clone());
        record_deliveries(&stop, &channel, &history, spec, move |idx, d| {
            tokio::spawn(ack_succeeded(ch.clone(), h.clone(), node, idx, d));
        })
        .await;
    })
}

/// Acks `d` (history index `idx`) SUCCEEDED on `channel` and records the answer.
async fn ack_succeeded(
    channel: Channel,
    history: History,
    node: usize,
    idx: usize,
    d: pb::Delivery,
) {
    let start = now_ms();
    let answer = match call_ack(&channel, &d).await {
        Ok(x) => Answer::Ok(AckOk {
            next_due_ms: ts_ms(&x.next_due_time),
            dead_lettered: x.dead_lettered,
            snoozed: x.snoozed,
        }),
        Err(s) => Answer::from_status(&s),
    };
    history.push(Event {
        start_ms: start,
        end_ms: now_ms(),
        kind: Kind::Ack {
            node,
            service: d.service,
            tx: d.transaction_id,
            delivery_id: d.delivery_id,
            delivery: idx,
            attempt: d.attempt,
            outcome: Outcome::Succeeded,
            retry_after_ms: None,
            error: String::new(),
            answer,
        },
    });
}

async fn call_ack(channel: &Channel, d: &pb::Delivery) -> Result<pb::AckResponse, tonic::Status> {
    match tokio::time::timeout(
        CALL_TIMEOUT,
        ack(channel, ack_req(d, pb::AckOutcome::Succeeded)),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(tonic::Status::deadline_exceeded("client timeout (upgrade)")),
    }
}

// ---------------------------------------------------------------------------------------
// The tally.

/// One delivery as the history has it: node, attempt, when (ms, Cassandra's clock).
#[derive(Clone, Debug)]
pub struct Seen {
    pub node: usize,
    pub attempt: u32,
    pub at_ms: i64,
}

/// The deliveries and acks of a history, by transaction id.
#[derive(Default)]
pub struct Tally {
    pub deliveries: HashMap<String, Vec<Seen>>,
    /// Ids with a SUCCEEDED ack answered OK.
    pub acked: HashSet<String>,
    /// Acks not answered OK, by answer.
    pub ack_errors: BTreeMap<String, usize>,
}

impl Tally {
    /// How many deliveries each node made (`nodes`: the names by index), up to `until_ms`.
    pub fn by_node_until(&self, nodes: &[&str], until_ms: i64) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for s in self.deliveries.values().flatten() {
            if s.at_ms < until_ms {
                let name = nodes.get(s.node).copied().unwrap_or("?");
                *out.entry(name.to_string()).or_default() += 1;
            }
        }
        out
    }

    /// How many deliveries each node made.
    pub fn by_node(&self, nodes: &[&str]) -> BTreeMap<String, usize> {
        self.by_node_until(nodes, i64::MAX)
    }

    pub fn of(history: &History) -> Tally {
        let mut t = Tally::default();
        for e in history.snapshot() {
            match e.kind {
                Kind::Delivery {
                    node, tx, attempt, ..
                } => t.deliveries.entry(tx).or_default().push(Seen {
                    node,
                    attempt,
                    at_ms: e.start_ms,
                }),
                Kind::Ack { tx, answer, .. } => match answer {
                    Answer::Ok(_) => {
                        t.acked.insert(tx);
                    }
                    Answer::Refused(s) | Answer::Unknown(s) => {
                        let code = s.split(':').next().unwrap_or_default().to_string();
                        *t.ack_errors.entry(code).or_default() += 1;
                    }
                },
                _ => {}
            }
        }
        t
    }
}

/// Waits until every id of `ids` has a delivery acked OK, or `within` passes; prints how
/// far it got every 10 s. True when all were.
pub async fn wait_delivered(
    name: &str,
    history: &History,
    ids: &BTreeSet<String>,
    within: Duration,
) -> bool {
    let started = Instant::now();
    let mut said = Instant::now();
    loop {
        let t = Tally::of(history);
        let done = ids.iter().filter(|id| t.acked.contains(*id)).count();
        if done == ids.len() {
            println!(
                "{name}: all {done} delivered and acked {:.1} s after the wait began",
                secs_since(started)
            );
            return true;
        }
        if started.elapsed() >= within {
            println!(
                "{name}: gave up after {:.0} s: {done} of {} delivered and acked",
                within.as_secs_f64(),
                ids.len()
            );
            return false;
        }
        if said.elapsed() >= Duration::from_secs(10) {
            println!(
                "{name}: {done} of {} delivered and acked after {:.0} s",
                ids.len(),
                secs_since(started)
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the deliveries of the accepted ids came to.
pub struct Counts {
    pub enqueued: usize,
    pub delivered: usize,
    /// Ids delivered more than once, with their deliveries.
    pub duplicates: BTreeMap<String, Vec<Seen>>,
    /// Accepted ids never delivered.
    pub lost: Vec<String>,
    /// Deliveries of ids that were not accepted (an enqueue with no OK answer may still have
    /// been written).
    pub others: usize,
}

impl Counts {
    pub fn of(t: &Tally, accepted: &BTreeSet<String>) -> Counts {
        let mut c = Counts {
            enqueued: accepted.len(),
            delivered: 0,
            duplicates: BTreeMap::new(),
            lost: Vec::new(),
            others: 0,
        };
        for id in accepted {
            match t.deliveries.get(id) {
                None => c.lost.push(id.clone()),
                Some(d) => {
                    c.delivered += 1;
                    if d.len() > 1 {
                        c.duplicates.insert(id.clone(), d.clone());
                    }
                }
            }
        }
        c.others = t
            .deliveries
            .iter()
            .filter(|(id, _)| !accepted.contains(*id))
            .map(|(_, d)| d.len())
            .sum();
        c
    }

    /// Most deliveries of one id (0: none delivered).
    pub fn max_per_id(&self) -> usize {
        self.duplicates
            .values()
            .map(Vec::len)
            .max()
            .unwrap_or(usize::from(self.delivered > 0))
    }

    /// "enqueued 2000, delivered 2000, duplicates 0, lost 0".
    pub fn line(&self) -> String {
        let extra: usize = self.duplicates.values().map(|d| d.len() - 1).sum();
        format!(
            "enqueued {}, delivered {}, duplicates {} ({extra} extra deliveries, at most {} per id), lost {}",
            self.enqueued,
            self.delivered,
            self.duplicates.len(),
            self.max_per_id(),
            self.lost.len()
        )
    }

    /// One line per duplicated id (at most `max`): each delivery's node, attempt and time
    /// from `t0_ms`.
    pub fn duplicate_lines(&self, nodes: &[&str], t0_ms: i64, max: usize) -> Vec<String> {
        let mut out: Vec<String> = self
            .duplicates
            .iter()
            .take(max)
            .map(|(id, d)| {
                let each: Vec<String> = d
                    .iter()
                    .map(|s| {
                        format!(
                            "{} attempt {} at {:.2} s",
                            nodes.get(s.node).copied().unwrap_or("?"),
                            s.attempt,
                            (s.at_ms - t0_ms) as f64 / 1000.0
                        )
                    })
                    .collect();
                format!("  duplicate {id}: {}", each.join("; "))
            })
            .collect();
        if self.duplicates.len() > max {
            out.push(format!("  ... and {} more", self.duplicates.len() - max));
        }
        out
    }
}

/// GetRetry of every id of `ids` (16 at a time) on `channel`: how many answered each status,
/// and the ids that did not answer SUCCEEDED, with what they answered.
pub async fn final_states(
    channel: &Channel,
    ids: &BTreeSet<String>,
) -> (BTreeMap<String, usize>, Vec<(String, String)>) {
    let answers: Vec<(String, String)> = futures::stream::iter(ids.iter().cloned())
        .map(|id| {
            let mut client = RetryServiceClient::new(channel.clone());
            async move {
                let r = call(client.get_retry(pb::GetRetryRequest {
                    service: SERVICE.into(),
                    transaction_id: id.clone(),
                }))
                .await;
                let status = match r {
                    Ok(x) => pb::RetryStatus::try_from(x.status)
                        .map(|s| {
                            s.as_str_name()
                                .trim_start_matches("RETRY_STATUS_")
                                .to_string()
                        })
                        .unwrap_or_else(|_| format!("status {}", x.status)),
                    Err(s) => format!("error {}", status_name(&s)),
                };
                (id, status)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    let mut unfinished = Vec::new();
    for (id, status) in answers {
        *counts.entry(status.clone()).or_default() += 1;
        if status != "SUCCEEDED" {
            unfinished.push((id, status));
        }
    }
    unfinished.sort();
    (counts, unfinished)
}

/// What a scenario found: its counts line and what failed (empty: it passed).
pub struct Verdict {
    pub name: &'static str,
    pub counts: String,
    pub failures: Vec<String>,
}

/// What [`judge`] looks at once a scenario's executors are stopped.
pub struct Judge<'a> {
    /// Prefix of the lines printed ("A", "B").
    pub tag: &'static str,
    pub name: &'static str,
    /// A node to ask GetRetry.
    pub channel: &'a Channel,
    pub cql: &'a Session,
    pub keyspace: &'a str,
    pub accepted: &'a BTreeSet<String>,
    pub history: &'a History,
    /// Node names by index, as the duplicates are printed.
    pub nodes: &'a [&'a str],
    /// When the scenario started (ms, Cassandra's clock): the duplicates' times count from it.
    pub t0_ms: i64,
    /// Deliveries of one id that are still no failure (1: a duplicate is one).
    pub allowed_per_id: usize,
}

/// Prints the counts of a scenario and judges them: a failure is an accepted id never
/// delivered, one delivered more than `allowed_per_id` times, a state other than SUCCEEDED
/// (GetRetry), or something left in the directory once compaction had 30 s.
pub async fn judge(j: Judge<'_>) -> Verdict {
    let tag = j.tag;
    let tally = Tally::of(j.history);
    let counts = Counts::of(&tally, j.accepted);
    let (states, unfinished) = final_states(j.channel, j.accepted).await;
    let left = directory::wait_end_state(j.cql, j.keyspace, Duration::from_secs(30)).await;
    println!("{tag}: {}", counts.line());
    for l in counts.duplicate_lines(j.nodes, j.t0_ms, 20) {
        println!("{l}");
    }
    println!(
        "{tag}: GetRetry: {}; deliveries by node: {}; acks not answered OK: {}; deliveries of ids not accepted: {}",
        fmt_counts(&states),
        fmt_counts(&tally.by_node(j.nodes)),
        none_or(&tally.ack_errors),
        counts.others
    );
    println!(
        "{tag}: directory: {}",
        if left.is_empty() {
            "empty".to_string()
        } else {
            left.join("; ")
        }
    );
    let mut failures = Vec::new();
    if !counts.lost.is_empty() {
        failures.push(format!(
            "lost {}: {}",
            counts.lost.len(),
            sample(&counts.lost)
        ));
    }
    let over: Vec<String> = counts
        .duplicates
        .iter()
        .filter(|(_, d)| d.len() > j.allowed_per_id)
        .map(|(id, d)| format!("{id} x{}", d.len()))
        .collect();
    if !over.is_empty() {
        failures.push(format!(
            "delivered more than {} time(s) {}: {}",
            j.allowed_per_id,
            over.len(),
            sample(&over)
        ));
    }
    if !unfinished.is_empty() {
        let ids: Vec<String> = unfinished
            .iter()
            .map(|(id, s)| format!("{id} {s}"))
            .collect();
        failures.push(format!("not SUCCEEDED {}: {}", ids.len(), sample(&ids)));
    }
    if !left.is_empty() {
        failures.push(format!("directory not empty: {}", left.join("; ")));
    }
    Verdict {
        name: j.name,
        counts: counts.line(),
        failures,
    }
}

/// "none", or the counts.
pub fn none_or(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        "none".into()
    } else {
        fmt_counts(m)
    }
}

/// The first ten of `ids`, joined.
fn sample(ids: &[String]) -> String {
    let mut s = ids.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if ids.len() > 10 {
        s.push_str(", ...");
    }
    s
}

/// Drops `keyspace` (its nodes stopped), unless `ctx.keep` or the scenario failed.
pub async fn drop_keyspace(ctx: &Ctx, cql: &Session, keyspace: &str, v: &Verdict) {
    if ctx.keep || !v.failures.is_empty() {
        println!("keyspace {keyspace} kept");
        return;
    }
    let _ = cql
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
        .await;
}
