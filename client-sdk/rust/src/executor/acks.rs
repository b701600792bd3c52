//! Acks of one node's deliveries, batched where they queue up: while an ack call is out,
//! the acks that arrive meanwhile wait and go out together as one `AckBatch` (or one `Ack`
//! when alone), each answered with its own result. At most `PARALLEL` calls are out at once.
//!
//! The task behind an [`Acks`] ends once every handle to it is dropped and its queue is empty
//! (the subscription and its delivery tasks hold the handles).

use rebound_proto::v1 as pb;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinSet,
    time::timeout,
};
use tonic::{Code, Status};

use super::{ExecClient, RPC_TIMEOUT};
use crate::overload::call_shed_aware;

/// Acks in one `AckBatch` at most (the server's limit is 1,000).
const MAX_BATCH: usize = 500;
/// Ack calls out at once per node.
const PARALLEL: usize = 4;

type Answer = Result<pb::AckResponse, Status>;

/// A handle to the ack queue of one node.
#[derive(Debug, Clone)]
pub(crate) struct Acks {
    tx: mpsc::UnboundedSender<(pb::AckRequest, oneshot::Sender<Answer>)>,
}

impl Acks {
    /// Starts the queue of the node behind `client`.
    pub(super) fn new(client: ExecClient) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client, rx));
        Acks { tx }
    }

    /// Sends one ack (alone or with others queued with it) and returns its answer.
    pub(super) async fn send(&self, request: pb::AckRequest) -> Answer {
        let (done, answer) = oneshot::channel();
        if self.tx.send((request, done)).is_err() {
            return Err(Status::unavailable("the ack queue is closed"));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(Status::unavailable("the ack queue stopped")))
    }
}

async fn run(
    client: ExecClient,
    mut rx: mpsc::UnboundedReceiver<(pb::AckRequest, oneshot::Sender<Answer>)>,
) {
    let mut calls = JoinSet::new();
    loop {
        if calls.len() >= PARALLEL {
            calls.join_next().await;
            continue;
        }
        let first = tokio::select! {
            biased;
            Some(_) = calls.join_next(), if !calls.is_empty() => continue,
            first = rx.recv() => first,
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        calls.spawn(call(client.clone(), batch));
    }
    while calls.join_next().await.is_some() {}
}

/// One `Ack`, made again while the node sheds it (`overload`), within `RPC_TIMEOUT`.
async fn ack(client: &ExecClient, request: pb::AckRequest) -> Answer {
    let call = call_shed_aware(client, &request, |mut c, r| async move { c.ack(r).await });
    match timeout(RPC_TIMEOUT, call).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded("Ack did not answer in time")),
    }
}

/// One `Ack` or `AckBatch` call for `batch`, each ack answered.
async fn call(client: ExecClient, batch: Vec<(pb::AckRequest, oneshot::Sender<Answer>)>) {
    if batch.len() == 1 {
        let (request, done) = batch.into_iter().next().expect("one");
        let _ = done.send(ack(&client, request).await);
        return;
    }
    let (acks, waiting): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let n = acks.len();
    // Kept to send one by one should the node not know AckBatch.
    let unbatched = acks.clone();
    let request = pb::AckBatchRequest { acks };
    let answer = timeout(
        RPC_TIMEOUT,
        call_shed_aware(
            &client,
            &request,
            |mut c, r| async move { c.ack_batch(r).await },
        ),
    )
    .await;
    match answer {
        Ok(Ok(r)) => {
            let results = r.into_inner().results;
            if results.len() != n {
                let status = Status::internal(format!(
                    "AckBatch answered {} results for {n} acks",
                    results.len()
                ));
                for done in waiting {
                    let _ = done.send(Err(status.clone()));
                }
                return;
            }
            for (done, result) in waiting.into_iter().zip(results) {
                let _ = done.send(match result.result {
                    Some(pb::ack_batch_result::Result::Response(r)) => Ok(r),
                    Some(pb::ack_batch_result::Result::Error(e)) => {
                        Err(Status::new(Code::from_i32(e.code), e.message))
                    }
                    None => Err(Status::internal("AckBatch answered an empty result")),
                });
            }
        }
        // A node without AckBatch: the acks one by one.
        Ok(Err(status)) if status.code() == Code::Unimplemented => {
            for (request, done) in unbatched.into_iter().zip(waiting) {
                let _ = done.send(ack(&client, request).await);
            }
        }
        Ok(Err(status)) => {
            for done in waiting {
                let _ = done.send(Err(status.clone()));
            }
        }
        Err(_) => {
            for done in waiting {
                let _ = done.send(Err(Status::deadline_exceeded(
                    "AckBatch did not answer in time",
                )));
            }
        }
    }
}
