//! What runs beside the soak's cluster while it is loaded: the sampler's ticks, the
//! workload at a steady rate, the watch on Cassandra's answers, executors joining and
//! leaving, and redrives of recent dead letters.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        atomic::{AtomicBool, AtomicU8, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use rand::{rngs::StdRng, seq::IndexedRandom, Rng, SeedableRng};
use rebound_proto::v1::{self as pb, admin_service_client::AdminServiceClient};
use tokio::sync::Mutex as AsyncMutex;

use super::{sample, PHASES};
use crate::chaos::{
    call, dur,
    executors::executor,
    history::{now_ms, Answer, Event, FaultKind, Kind},
    ops::OpGen,
    ts, ts_ms,
    workload::perform,
    Shared, REQUEST_TIMEOUT_MS, SERVICES,
};

/// Samples every `every` (the first `every` after the start) until `stop`.
pub(super) async fn sample_every(
    sampler: Arc<AsyncMutex<sample::Sampler>>,
    every: Duration,
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let p = PHASES[usize::from(phase.load(Ordering::SeqCst)).min(1)];
        sampler.lock().await.sample(p).await;
    }
}

/// The chaos workload at `rate` operations per second for `duration` from `t0`, each
/// operation concurrent with the others. Returns the operations by kind and every
/// transaction touched.
pub(super) async fn workload(
    shared: &Arc<Shared>,
    seed: u64,
    rate: f64,
    duration: Duration,
    t0: i64,
) -> (BTreeMap<&'static str, usize>, BTreeSet<(String, String)>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut draw = OpGen::new(shared.nodes.len());
    let n = (duration.as_secs_f64() * rate).max(1.0) as usize;
    let mut counts = BTreeMap::new();
    let mut touched = BTreeSet::new();
    let mut calls = tokio::task::JoinSet::new();
    for k in 0..n {
        let at = t0 + (k as f64 * 1000.0 / rate) as i64;
        let wait = at - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let op = draw.next(&mut rng);
        op.count(&mut counts, &mut touched);
        calls.spawn(perform(shared.clone(), op));
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
    (counts, touched)
}

/// How often [`watch_cassandra`] asks.
const PROBE_EVERY_MS: i64 = 500;

/// Asks Cassandra the time every 0.5 s until `stop`, and returns each span in which an
/// answer took longer than the nodes' request timeout (from half a second before the slow
/// question, consecutive ones merged). Cassandra is shared: another run on this machine may
/// SIGSTOP it, a compaction or a garbage collection may stall it, and what the nodes then do
/// (time out, lose leases, deliver late or twice) is what the checker allows of a fault.
pub(super) async fn watch_cassandra(
    cql: scylla::client::session::Session,
    stop: Arc<AtomicBool>,
) -> Vec<(i64, i64)> {
    let mut stalls: Vec<(i64, i64)> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let start = now_ms();
        let _ = tokio::time::timeout(
            Duration::from_secs(30),
            cql.query_unpaged("SELECT release_version FROM system.local", ()),
        )
        .await;
        note_stall(&mut stalls, start, now_ms());
        tokio::time::sleep(Duration::from_millis(PROBE_EVERY_MS as u64)).await;
    }
    stalls
}

/// Adds a probe from `start` to `end` to `stalls` if it took longer than the nodes' request
/// timeout: from a probe period before it (the stall may have begun just after the last
/// answer), merged with the previous stall if they meet.
fn note_stall(stalls: &mut Vec<(i64, i64)>, start: i64, end: i64) {
    if end - start <= REQUEST_TIMEOUT_MS as i64 {
        return;
    }
    let from = start - PROBE_EVERY_MS;
    match stalls.last_mut() {
        Some(last) if from <= last.1 + PROBE_EVERY_MS => last.1 = end,
        _ => stalls.push((from, end)),
    }
}

/// Records in the history, as Cassandra pauses, the stalls no injected pause explains (they
/// count as faults for the checker and the lateness); returns how many.
pub(super) fn record_stalls(shared: &Shared, stalls: Vec<(i64, i64)>) -> usize {
    let injected: Vec<(i64, i64)> = shared
        .history
        .snapshot()
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                Kind::Fault {
                    kind: FaultKind::CassandraPause,
                    ..
                }
            )
        })
        .map(|e| (e.start_ms, e.end_ms))
        .collect();
    let mut n = 0;
    for (from, to) in stalls {
        if injected
            .iter()
            .any(|&(a, b)| from < b + 1_000 && to > a - 1_000)
        {
            continue;
        }
        n += 1;
        shared.history.push(Event {
            start_ms: from,
            end_ms: to,
            kind: Kind::Fault {
                kind: FaultKind::CassandraPause,
                node: None,
                detail: format!(
                    "stalled {} ms, not injected (seen by a probe of Cassandra)",
                    to - from
                ),
            },
        });
    }
    n
}

/// Sleeps about `mean` (half to one and a half of it) unless `stop` comes first; false then.
async fn pause(rng: &mut StdRng, mean: Duration, stop: &AtomicBool) -> bool {
    let ms = mean.as_millis() as u64;
    let until = Instant::now() + Duration::from_millis(ms / 2 + rng.random_range(0..=ms));
    while Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    !stop.load(Ordering::SeqCst)
}

/// Executors joining and leaving: every ~`every` one more subscribes to a random node for a
/// random service and leaves 1-4 periods later (its stream closes; the node hands what it had
/// in flight to another executor). When `stop` comes, those still there leave. Returns how
/// many joined and left.
pub(super) async fn churn(
    shared: Arc<Shared>,
    seed: u64,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> (usize, usize) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xC4_C4C4);
    let mut live = tokio::task::JoinSet::new();
    let (mut joined, mut left) = (0, 0);
    while pause(&mut rng, every, &stop).await {
        while live.try_join_next().is_some() {
            left += 1;
        }
        let node = rng.random_range(0..shared.nodes.len());
        let service = SERVICES[rng.random_range(0..SERVICES.len())].to_string();
        let life = every * rng.random_range(1..=4);
        joined += 1;
        let id = format!("soak-t{joined}-n{}-{service}", node + 1);
        let run = executor(shared.clone(), node, service, id);
        live.spawn(async move {
            let _ = tokio::time::timeout(life, run).await;
        });
    }
    while live.try_join_next().is_some() {
        left += 1;
    }
    left += live.len();
    live.abort_all();
    while live.join_next().await.is_some() {}
    (joined, left)
}

/// Redrives of recent dead letters: every ~`every`, up to 3 letters of a random service that
/// died in the last 2 minutes, each by a RedriveDeadLetters call that matches it alone (its
/// error text, which the executors make unique, within the millisecond it died), recorded
/// in the history for the checker. Returns the calls by answer.
pub(super) async fn redrive(
    shared: Arc<Shared>,
    seed: u64,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> BTreeMap<&'static str, usize> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x2ED_2ED2);
    let mut counts = BTreeMap::new();
    while pause(&mut rng, every, &stop).await {
        let node = rng.random_range(0..shared.nodes.len());
        let service = SERVICES[rng.random_range(0..SERVICES.len())];
        let mut admin = AdminServiceClient::new(shared.channels[node].clone());
        const PAGE: u32 = 200;
        let listed = call(admin.list_dead_letters(pb::ListDeadLettersRequest {
            service: service.into(),
            from: Some(ts(now_ms() - 120_000)),
            page_size: PAGE,
            ..Default::default()
        }))
        .await;
        let Ok(listed) = listed else {
            *counts.entry("list failed").or_default() += 1;
            continue;
        };
        let letters = redrivable(
            &listed.dead_letters,
            listed.dead_letters.len() == PAGE as usize,
        );
        for &l in letters.choose_multiple(&mut rng, 3) {
            let dead_at_ms = ts_ms(&l.dead_at).unwrap_or(0);
            let delay = rng.random_range(0..=2_000);
            let start = now_ms();
            let r = call(admin.redrive_dead_letters(pb::RedriveDeadLettersRequest {
                service: service.into(),
                from: l.dead_at,
                to: Some(ts(dead_at_ms + 1)),
                error_contains: l.last_error.clone(),
                delay: Some(dur(delay)),
                max_items: 1,
                ..Default::default()
            }))
            .await;
            let answer = match r {
                Ok(x) => Answer::Ok(x.redriven > 0),
                Err(s) => Answer::from_status(&s),
            };
            *counts
                .entry(match &answer {
                    Answer::Ok(true) => "redriven",
                    Answer::Ok(false) => "skipped",
                    Answer::Refused(_) => "refused",
                    Answer::Unknown(_) => "unknown",
                })
                .or_default() += 1;
            shared.history.push(Event {
                start_ms: start,
                end_ms: now_ms(),
                kind: Kind::Redrive {
                    node,
                    service: service.into(),
                    tx: l.transaction_id.clone(),
                    dead_at_ms,
                    answer,
                },
            });
        }
    }
    counts
}

/// The letters a redrive can name alone: an executor's error (unique: it holds the ack's
/// history index) and no other letter listed in the same millisecond (one error text may
/// hold another, "#12" in "#123"). When the page was full, its last millisecond may go on
/// past it, so not that one either.
fn redrivable(letters: &[pb::DeadLetter], page_full: bool) -> Vec<&pb::DeadLetter> {
    let ms = |l: &pb::DeadLetter| ts_ms(&l.dead_at).unwrap_or(0);
    let last = if page_full {
        letters.last().map(ms)
    } else {
        None
    };
    letters
        .iter()
        .filter(|l| l.last_error.starts_with("chaos-"))
        .filter(|l| letters.iter().filter(|o| ms(o) == ms(l)).count() == 1)
        .filter(|l| Some(ms(l)) != last)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(tx: &str, ms: i64, error: &str) -> pb::DeadLetter {
        pb::DeadLetter {
            service: "pay".into(),
            transaction_id: tx.into(),
            dead_at: Some(ts(ms)),
            last_error: error.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_redrive_names_only_letters_it_can_match_alone() {
        let letters = vec![
            letter("a", 1_000, "chaos-Failed-#12"),
            letter("b", 1_000, "chaos-Failed-#123"),
            letter("c", 2_000, "not acknowledged after 3 deliveries"),
            letter("d", 3_000, "chaos-Retry-#7"),
            letter("e", 4_000, "chaos-Failed-#9"),
        ];
        let ids = |v: Vec<&pb::DeadLetter>| -> Vec<String> {
            v.iter().map(|l| l.transaction_id.clone()).collect()
        };
        assert_eq!(ids(redrivable(&letters, false)), ["d", "e"]);
        assert_eq!(ids(redrivable(&letters, true)), ["d"]);
    }

    #[test]
    fn slow_probes_make_stalls_and_consecutive_ones_merge() {
        let mut s = Vec::new();
        note_stall(&mut s, 1_000, 1_900); // fast enough
        note_stall(&mut s, 2_000, 5_000); // 3 s: a client timeout
        note_stall(&mut s, 5_500, 7_000); // the stall goes on
        note_stall(&mut s, 20_000, 21_500);
        assert_eq!(s, vec![(1_500, 7_000), (19_500, 21_500)]);
    }
}
