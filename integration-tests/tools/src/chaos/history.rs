//! The history of a chaos run: every call with its start and end time, its request and its
//! answer, every delivery, and every fault. Times are milliseconds on Cassandra's clock (the
//! test's clock plus the offset measured at the start).

use std::{
    fmt,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, Mutex,
    },
};

use rebound_proto::v1 as pb;

/// The offset of Cassandra's clock from this process's, set once at the start.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

pub fn set_offset_ms(ms: i64) {
    OFFSET_MS.store(ms, Ordering::SeqCst);
}

/// Now, on Cassandra's clock (as the nodes see it when clock sync is on).
pub fn now_ms() -> i64 {
    local_ms() + OFFSET_MS.load(Ordering::SeqCst)
}

pub fn local_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// What a call came back with. `Unknown`: the outcome is not known (deadline, connection,
/// unavailable, internal): the call may or may not have taken effect.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer<T> {
    Ok(T),
    Refused(String),
    Unknown(String),
}

impl<T> Answer<T> {
    pub fn from_status(s: &tonic::Status) -> Answer<T> {
        use tonic::Code::*;
        let text = format!("{:?}: {}", s.code(), s.message());
        // The connection was refused: the request never left this process.
        if s.code() == Unavailable && s.message().contains("tcp connect error") {
            return Answer::Refused(text);
        }
        match s.code() {
            InvalidArgument | NotFound | AlreadyExists | PermissionDenied | FailedPrecondition
            | ResourceExhausted | OutOfRange | Unimplemented | Unauthenticated => {
                Answer::Refused(text)
            }
            _ => Answer::Unknown(text),
        }
    }
    pub fn from_item_error(code: i32, message: &str) -> Answer<T> {
        Self::from_status(&tonic::Status::new(tonic::Code::from(code), message))
    }
    pub fn ok(&self) -> Option<&T> {
        match self {
            Answer::Ok(t) => Some(t),
            _ => None,
        }
    }
    pub fn is_unknown(&self) -> bool {
        matches!(self, Answer::Unknown(_))
    }
}

#[derive(Clone, Debug)]
pub struct EnqueueOk {
    pub due_ms: i64,
    pub generation: u64,
    pub deduplicated: bool,
}

#[derive(Clone, Debug)]
pub struct AckOk {
    pub next_due_ms: Option<i64>,
    pub dead_lettered: bool,
    pub snoozed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Succeeded,
    Retry,
    RetryAfter,
    Failed,
    Snooze,
    /// RETRY with a hold on the retry's dependency (`AckRequest.hold`; `chaos::hold`).
    Hold,
}

/// What the harness's push receiver (`chaos::push`) answered one request with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// An HTTP status, with `Retry-After` in seconds when it was sent.
    Status {
        code: u16,
        retry_after_s: Option<u32>,
    },
    /// No answer before the target's timeout: the node's request times out (a RETRY).
    Stall,
}

impl Reply {
    pub fn is_2xx(&self) -> bool {
        matches!(self, Reply::Status { code, .. } if (200..300).contains(code))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    Kill,
    Stop,
    Skew,
    CassandraPause,
    /// A spare node joins the ring and, a few lease lifetimes later, leaves it (SIGTERM):
    /// the running nodes hand slots to it and take them back while they deliver and take
    /// acks for those slots' retries.
    Join,
}

#[derive(Clone, Debug)]
pub enum Kind {
    Enqueue {
        node: usize,
        service: String,
        tx: String,
        /// What was asked: "delay=…ms" or "due=…".
        asked: String,
        batch: bool,
        answer: Answer<EnqueueOk>,
    },
    Cancel {
        node: usize,
        service: String,
        tx: String,
        answer: Answer<(bool, i32)>,
    },
    Delivery {
        node: usize,
        service: String,
        tx: String,
        delivery_id: String,
        attempt: u32,
        due_ms: i64,
        deadline_ms: i64,
    },
    Ack {
        node: usize,
        service: String,
        tx: String,
        delivery_id: String,
        /// Index of the delivery event in the history.
        delivery: usize,
        attempt: u32,
        outcome: Outcome,
        retry_after_ms: Option<i64>,
        error: String,
        answer: Answer<AckOk>,
    },
    /// RedriveDeadLetters of the one dead letter of `tx` that died at `dead_at_ms`: Ok(true)
    /// when it started the retry again, Ok(false) when it skipped the letter (the retry was
    /// no longer that DEAD generation) or found none.
    Redrive {
        node: usize,
        service: String,
        tx: String,
        dead_at_ms: i64,
        answer: Answer<bool>,
    },
    /// ActOnRetries of the one retry `tx` (`transaction_ids = [tx]`, the selection its
    /// service's): Ok(true) when it changed it (`changed > 0`), Ok(false) when it skipped it
    /// (not SCHEDULED, or already as the action would leave it).
    Act {
        node: usize,
        service: String,
        tx: String,
        action: pb::RetryAction,
        /// The due time asked for (RESCHEDULE only).
        due_ms: Option<i64>,
        answer: Answer<bool>,
    },
    /// ListRetries of a service's scheduled retries, page after page (at most a few): the
    /// rows seen. Tied to no transaction.
    List {
        node: usize,
        service: String,
        answer: Answer<usize>,
    },
    /// A push request the harness's receiver got (docs/push.md): the delivery of a retry of
    /// a service with a push target, recorded when it arrived. Which node sent it is not
    /// known.
    Push {
        service: String,
        tx: String,
        /// `rebound-delivery-id` (and `webhook-id`).
        delivery_id: String,
        /// `rebound-attempt`.
        attempt: u32,
        /// `rebound-due-time`.
        due_ms: i64,
        /// What is wrong with the request (signature, headers, body), if anything.
        problem: Option<String>,
    },
    /// The receiver's answer to the push request `push` (its history index): from the
    /// request's arrival to the answer (for a stall: to when it was decided on).
    PushAnswer {
        service: String,
        tx: String,
        push: usize,
        attempt: u32,
        delivery_id: String,
        reply: Reply,
    },
    Fault {
        kind: FaultKind,
        /// None: Cassandra.
        node: Option<usize>,
        detail: String,
    },
}

#[derive(Clone, Debug)]
pub struct Event {
    pub start_ms: i64,
    pub end_ms: i64,
    pub kind: Kind,
}

impl Event {
    pub fn tx(&self) -> Option<(&str, &str)> {
        match &self.kind {
            Kind::Enqueue { service, tx, .. }
            | Kind::Cancel { service, tx, .. }
            | Kind::Delivery { service, tx, .. }
            | Kind::Ack { service, tx, .. }
            | Kind::Redrive { service, tx, .. }
            | Kind::Act { service, tx, .. }
            | Kind::Push { service, tx, .. }
            | Kind::PushAnswer { service, tx, .. } => Some((service, tx)),
            Kind::List { .. } | Kind::Fault { .. } => None,
        }
    }
}

/// Times printed relative to the start of the run.
pub struct Line<'a> {
    pub index: usize,
    pub event: &'a Event,
    pub t0: i64,
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.event;
        let (s, t) = (e.start_ms - self.t0, e.end_ms - self.t0);
        let rel = |ms: i64| ms - self.t0;
        write!(f, "#{:<6} [{:>7}..{:>7}] ", self.index, s, t)?;
        match &e.kind {
            Kind::Enqueue {
                node,
                service,
                tx,
                asked,
                batch,
                answer,
            } => {
                let b = if *batch { " (batch)" } else { "" };
                write!(f, "enqueue{b} n{} {service}/{tx} {asked} -> ", node + 1)?;
                match answer {
                    Answer::Ok(o) => write!(
                        f,
                        "OK due={} gen={} dedup={}",
                        rel(o.due_ms),
                        o.generation,
                        o.deduplicated
                    ),
                    Answer::Refused(m) => write!(f, "refused {m}"),
                    Answer::Unknown(m) => write!(f, "UNKNOWN {m}"),
                }
            }
            Kind::Cancel {
                node,
                service,
                tx,
                answer,
            } => {
                write!(f, "cancel n{} {service}/{tx} -> ", node + 1)?;
                match answer {
                    Answer::Ok((c, st)) => write!(f, "OK cancelled={c} status={st}"),
                    Answer::Refused(m) => write!(f, "refused {m}"),
                    Answer::Unknown(m) => write!(f, "UNKNOWN {m}"),
                }
            }
            Kind::Delivery {
                node,
                service,
                tx,
                delivery_id,
                attempt,
                due_ms,
                deadline_ms,
            } => write!(
                f,
                "delivery n{} {service}/{tx} attempt={attempt} due={} deadline={} id={delivery_id}",
                node + 1,
                rel(*due_ms),
                rel(*deadline_ms)
            ),
            Kind::Ack {
                node,
                service,
                tx,
                delivery,
                attempt,
                outcome,
                retry_after_ms,
                error,
                answer,
                ..
            } => {
                write!(
                    f,
                    "ack n{} {service}/{tx} of #{delivery} attempt={attempt} {outcome:?}",
                    node + 1
                )?;
                if let Some(a) = retry_after_ms {
                    write!(f, " after={a}ms")?;
                }
                if !error.is_empty() {
                    write!(f, " error={error:?}")?;
                }
                write!(f, " -> ")?;
                match answer {
                    Answer::Ok(o) => write!(
                        f,
                        "OK next_due={} dead={} snoozed={}",
                        o.next_due_ms.map_or("-".into(), |d| rel(d).to_string()),
                        o.dead_lettered,
                        o.snoozed
                    ),
                    Answer::Refused(m) => write!(f, "refused {m}"),
                    Answer::Unknown(m) => write!(f, "UNKNOWN {m}"),
                }
            }
            Kind::Redrive {
                node,
                service,
                tx,
                dead_at_ms,
                answer,
            } => {
                write!(
                    f,
                    "redrive n{} {service}/{tx} letter of {} -> ",
                    node + 1,
                    rel(*dead_at_ms)
                )?;
                match answer {
                    Answer::Ok(r) => write!(f, "OK redriven={r}"),
                    Answer::Refused(m) => write!(f, "refused {m}"),
                    Answer::Unknown(m) => write!(f, "UNKNOWN {m}"),
                }
            }
            Kind::Act {
                node,
                service,
                tx,
                action,
                due_ms,
                answer,
            } => {
                write!(
                    f,
                    "act n{} {service}/{tx} {}",
                    node + 1,
                    action.as_str_name().trim_start_matches("RETRY_ACTION_")
                )?;
                if let Some(d) = due_ms {
                    write!(f, " due={}", rel(*d))?;
                }
                write!(f, " -> ")?;
                match answer {
                    Answer::Ok(c) => write!(f, "OK changed={c}"),
                    Answer::Refused(m) => write!(f, "refused {m}"),
                    Answer::Unknown(m) => write!(f, "UNKNOWN {m}"),
                }
            }
            Kind::List {
                node,
                service,
                answer,
            } => {
                write!(f, "list n{} {service} -> ", node + 1)?;
                match answer {
                    Answer::Ok(n) => write!(f, "OK rows={n}"),
                    Answer::Refused(m) => write!(f, "REFUSED {m}"),
                    Answer::Unknown(m) => write!(f, "UNKNOWN {m}"),
                }
            }
            Kind::Push {
                service,
                tx,
                delivery_id,
                attempt,
                due_ms,
                problem,
            } => {
                write!(
                    f,
                    "push {service}/{tx} attempt={attempt} due={} id={delivery_id}",
                    rel(*due_ms)
                )?;
                match problem {
                    Some(p) => write!(f, " BAD REQUEST: {p}"),
                    None => Ok(()),
                }
            }
            Kind::PushAnswer {
                service,
                tx,
                push,
                attempt,
                reply,
                ..
            } => {
                write!(
                    f,
                    "push answer {service}/{tx} to #{push} attempt={attempt} -> "
                )?;
                match reply {
                    Reply::Status {
                        code,
                        retry_after_s: Some(s),
                    } => write!(f, "HTTP {code} retry-after={s}s"),
                    Reply::Status { code, .. } => write!(f, "HTTP {code}"),
                    Reply::Stall => write!(f, "stall (no answer before the timeout)"),
                }
            }
            Kind::Fault { kind, node, detail } => match node {
                Some(n) => write!(f, "FAULT {kind:?} n{} {detail}", n + 1),
                None => write!(f, "FAULT {kind:?} cassandra {detail}"),
            },
        }
    }
}

/// The shared, append-only record.
#[derive(Clone, Default)]
pub struct History {
    inner: Arc<Mutex<Vec<Event>>>,
}

impl History {
    /// Appends and returns the event's index.
    pub fn push(&self, e: Event) -> usize {
        let mut v = self.inner.lock().expect("history");
        v.push(e);
        v.len() - 1
    }

    pub fn snapshot(&self) -> Vec<Event> {
        self.inner.lock().expect("history").clone()
    }

    /// Deliveries received at or before `at` with no ack that returned before `at`.
    pub fn in_flight_at(&self, at: i64, node: Option<usize>) -> usize {
        let v = self.inner.lock().expect("history");
        let mut open = std::collections::HashMap::new();
        for (i, e) in v.iter().enumerate() {
            match &e.kind {
                Kind::Delivery { node: n, .. }
                    if e.end_ms <= at && node.is_none_or(|x| x == *n) =>
                {
                    open.insert(i, ());
                }
                Kind::Ack {
                    delivery, answer, ..
                } if e.end_ms <= at && !answer.is_unknown() => {
                    open.remove(delivery);
                }
                _ => {}
            }
        }
        open.len()
    }
}
