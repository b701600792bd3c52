//! What each command does: the calls it makes and what it prints.

use std::{
    collections::BTreeMap,
    future::Future,
    io::{IsTerminal, Read, Write},
    path::Path,
    time::Duration,
};

use indicatif::{ProgressBar, ProgressStyle};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient, retry_service_client::RetryServiceClient,
};
use serde_json::{json, Value};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::{
    args::{
        Cli, Command, DeadLetterFilter, DlqCommand, EnqueueArgs, LimitsCommand, PolicyCommand,
        PurgeArgs,
    },
    error::{chain, CliError},
    render::{self, duration_to_proto, time_cell, time_json, yes_no},
    table::{key_values, truncate, Table},
};

/// What a command prints: the JSON document for `--json`, the text otherwise.
struct Out {
    json: Value,
    text: String,
}

impl Out {
    fn new(json: Value, text: impl Into<String>) -> Self {
        Out {
            json,
            text: text.into(),
        }
    }
}

/// Runs the command line's command against its node.
pub async fn run(cli: &Cli) -> Result<(), CliError> {
    confirm(&cli.command)?;
    let authorization = match &cli.token {
        None => None,
        Some(t) => {
            let mut v: tonic::metadata::AsciiMetadataValue =
                format!("Bearer {t}").parse().map_err(|_| {
                    CliError::usage("--token must be printable ASCII without line breaks")
                })?;
            v.set_sensitive(true);
            Some(v)
        }
    };
    let ctx = Ctx {
        channel: connect(&cli.addr, cli.timeout, tls(cli)?).await?,
        timeout: cli.timeout,
        json: cli.json,
        authorization,
    };
    let out = match &cli.command {
        Command::Enqueue(a) => enqueue(&ctx, a).await?,
        Command::Get(a) => get(&ctx, &a.service, &a.transaction_id).await?,
        Command::Cancel(a) => cancel(&ctx, &a.service, &a.transaction_id).await?,
        Command::Stats { service } => stats(&ctx, service.as_deref()).await?,
        Command::Services => services(&ctx).await?,
        Command::Pause { service } => pause(&ctx, service, true).await?,
        Command::Resume { service } => pause(&ctx, service, false).await?,
        Command::Policy(PolicyCommand::Get { service }) => policy_get(&ctx, service).await?,
        Command::Policy(PolicyCommand::Set { service, policy }) => {
            policy_set(&ctx, service, policy.to_proto()).await?
        }
        Command::Limits(LimitsCommand::Get { service }) => limits_get(&ctx, service).await?,
        Command::Limits(LimitsCommand::Set {
            service,
            rate,
            burst,
            max_concurrent,
        }) => {
            let limits = pb::ServiceLimits {
                max_dispatch_per_second: *rate,
                dispatch_burst: *burst,
                max_concurrent: *max_concurrent,
            };
            limits_set(&ctx, service, limits).await?
        }
        Command::Purge(a) => purge(&ctx, a).await?,
        Command::Dlq(DlqCommand::List {
            filter,
            limit,
            include_redriven,
            page_token,
        }) => dlq_list(&ctx, filter, *limit, *include_redriven, page_token.clone()).await?,
        Command::Dlq(DlqCommand::Redrive {
            filter,
            delay,
            rate,
            batch,
        }) => dlq_redrive(&ctx, filter, *delay, *rate, *batch).await?,
        Command::Dlq(DlqCommand::Purge {
            service, from, to, ..
        }) => dlq_purge(&ctx, service, *from, *to).await?,
        Command::Ring => ring(&ctx).await?,
        Command::InspectWindow { day, window } => inspect_window(&ctx, day, *window).await?,
    };
    if cli.json {
        let doc = serde_json::to_string_pretty(&out.json)
            .map_err(|e| CliError::internal(format!("cannot encode the output: {e}")))?;
        emit(&format!("{doc}\n"))
    } else {
        emit(&out.text)
    }
}

/// Destructive commands need `--yes`; refused before anything is sent (exit code 2).
fn confirm(command: &Command) -> Result<(), CliError> {
    match command {
        Command::Purge(a) if !a.yes => Err(CliError::usage(format!(
            "purge cancels every pending retry of {:?} scheduled before the cut-off (now, or \
             --before) and deletes its buckets; it cannot be undone: pass --yes to confirm",
            a.service
        ))),
        Command::Dlq(DlqCommand::Purge { service, yes, .. }) if !yes => {
            Err(CliError::usage(format!(
                "dlq purge deletes the matching dead letters of {service:?}; it cannot be \
                 undone: pass --yes to confirm"
            )))
        }
        _ => Ok(()),
    }
}

/// Writes to stdout; a closed pipe (`rebound dlq list ... | head`) is not an error.
fn emit(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::internal(format!("cannot write the output: {e}"))),
    }
}

/// `1 retry`, `2 retries`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The TLS settings of the flags: None for plain text unless --addr is https:// or a TLS
/// file is given.
fn tls(cli: &Cli) -> Result<Option<ClientTlsConfig>, CliError> {
    let wanted = cli.addr.starts_with("https://")
        || cli.ca_file.is_some()
        || cli.cert_file.is_some()
        || cli.tls_server_name.is_some();
    if !wanted {
        return Ok(None);
    }
    let read = |flag: &str, p: &std::path::Path| {
        std::fs::read(p).map_err(|e| CliError::usage(format!("{flag} {}: {e}", p.display())))
    };
    let mut c = ClientTlsConfig::new();
    c = match &cli.ca_file {
        Some(p) => c.ca_certificate(Certificate::from_pem(read("--ca-file", p)?)),
        None => c.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&cli.cert_file, &cli.key_file) {
        c = c.identity(Identity::from_pem(
            read("--cert-file", cert)?,
            read("--key-file", key)?,
        ));
    }
    if let Some(name) = &cli.tls_server_name {
        c = c.domain_name(name.clone());
    }
    Ok(Some(c))
}

/// The channel to `addr` (a bare `host:port` is plain-text HTTP/2, or TLS when `tls` is
/// given).
async fn connect(
    addr: &str,
    timeout: Duration,
    tls: Option<ClientTlsConfig>,
) -> Result<Channel, CliError> {
    let uri = if addr.contains("://") {
        addr.to_string()
    } else if tls.is_some() {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    if tls.is_some() && uri.starts_with("http://") {
        return Err(CliError::usage(format!(
            "--addr {addr:?} is plain text (http://) but TLS flags are given: use https://"
        )));
    }
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(|e| CliError::usage(format!("--addr {addr:?} is not a valid address: {e}")))?
        .connect_timeout(timeout);
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| CliError::usage(format!("TLS: {}", chain(&e))))?;
    }
    match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(CliError::unavailable(format!(
            "cannot connect to {addr}: {}",
            chain(&e)
        ))),
        Err(_) => Err(CliError::unavailable(format!(
            "cannot connect to {addr}: no answer within {} (--timeout)",
            human(timeout)
        ))),
    }
}

/// The longest deadline the `grpc-timeout` header can carry (8 digits of hours); tonic panics
/// on a longer one, so `--timeout 20000y` is sent as this.
const MAX_GRPC_TIMEOUT: Duration = Duration::from_secs(99_999_999 * 3600);

/// The connection and the settings every call uses.
struct Ctx {
    channel: Channel,
    timeout: Duration,
    json: bool,
    /// `Bearer <token>` from --token, sent with every call.
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

impl Ctx {
    fn retry(&self) -> RetryServiceClient<Channel> {
        RetryServiceClient::new(self.channel.clone())
    }

    fn admin(&self) -> AdminServiceClient<Channel> {
        AdminServiceClient::new(self.channel.clone())
    }

    fn executor(&self) -> ExecutorServiceClient<Channel> {
        ExecutorServiceClient::new(self.channel.clone())
    }

    /// A request carrying the deadline, so the node gives up when the CLI does.
    fn req<T>(&self, message: T) -> tonic::Request<T> {
        self.req_within(message, self.timeout)
    }

    fn req_within<T>(&self, message: T, limit: Duration) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(limit.min(MAX_GRPC_TIMEOUT));
        if let Some(a) = &self.authorization {
            r.metadata_mut().insert("authorization", a.clone());
        }
        r
    }

    async fn call<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CliError> {
        self.call_within(self.timeout, call).await
    }

    async fn call_within<T>(
        &self,
        limit: Duration,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CliError> {
        let started = std::time::Instant::now();
        let timed_out =
            || CliError::deadline(format!("no answer within {} (--timeout)", human(limit)));
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            // tonic enforces the request's deadline itself and reports it as CANCELLED.
            Ok(Err(status))
                if status.code() == tonic::Code::Cancelled
                    && (is_timeout(&status) || started.elapsed() >= limit) =>
            {
                Err(timed_out())
            }
            Ok(Err(status)) => Err(CliError::status(&status)),
            Err(_) => Err(timed_out()),
        }
    }

    /// A progress bar (with a length) or spinner on stderr, only for people: hidden with
    /// `--json` and when stderr is not a terminal.
    fn progress(&self, len: Option<u64>) -> ProgressBar {
        if self.json || !std::io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let (bar, template) = match len {
            Some(n) => (
                ProgressBar::new(n),
                "{spinner} {msg} [{bar:30}] {pos}/{len} ({elapsed}, eta {eta})",
            ),
            None => (ProgressBar::new_spinner(), "{spinner} {msg} ({elapsed})"),
        };
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let bar = bar.with_style(style);
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    }
}

/// True when tonic gave up on the call because its deadline passed.
fn is_timeout(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = e.source();
    }
    false
}

fn malformed(what: &str) -> CliError {
    CliError::internal(format!("malformed answer from the node: {what}"))
}

// ---- RetryService ------------------------------------------------------------------------------

fn read_payload(path: &Path) -> Result<Vec<u8>, CliError> {
    let result = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(path)
    };
    result.map_err(|e| CliError::usage(format!("--payload-file {}: {e}", path.display())))
}

async fn enqueue(ctx: &Ctx, a: &EnqueueArgs) -> Result<Out, CliError> {
    let payload = match (&a.payload, &a.payload_file) {
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(path)) => read_payload(path)?,
        (None, None) => Vec::new(),
    };
    let mut attributes = std::collections::HashMap::new();
    for (k, v) in &a.attributes {
        if attributes.insert(k.clone(), v.clone()).is_some() {
            return Err(CliError::usage(format!("--attr {k}: given twice")));
        }
    }
    let schedule = match (a.delay, a.due) {
        (Some(d), _) => Some(pb::enqueue_retry_request::Schedule::Delay(
            duration_to_proto(d),
        )),
        (None, Some(t)) => Some(pb::enqueue_retry_request::Schedule::DueTime(t)),
        (None, None) => None,
    };
    let request = pb::EnqueueRetryRequest {
        service: a.service.clone(),
        transaction_id: a.transaction_id.clone(),
        payload,
        attributes,
        schedule,
        policy: (!a.policy.is_empty()).then(|| a.policy.to_proto()),
        attempt: a.attempt,
        last_error: a.last_error.clone().unwrap_or_default(),
        trace_context: None,
    };
    let r = ctx
        .call(ctx.retry().enqueue_retry(ctx.req(request)))
        .await?;
    let json = json!({
        "service": a.service,
        "transaction_id": r.transaction_id,
        "due_time": time_json(r.due_time.as_ref()),
        "generation": r.generation.to_string(),
        "deduplicated": r.deduplicated,
    });
    let text = key_values(&[
        ("service", a.service.clone()),
        ("transaction_id", r.transaction_id.clone()),
        ("due_time", time_cell(r.due_time.as_ref())),
        ("generation", r.generation.to_string()),
        ("deduplicated", yes_no(r.deduplicated)),
    ]);
    Ok(Out::new(json, text))
}

async fn get(ctx: &Ctx, service: &str, transaction_id: &str) -> Result<Out, CliError> {
    let request = pb::GetRetryRequest {
        service: service.into(),
        transaction_id: transaction_id.into(),
    };
    let r = ctx.call(ctx.retry().get_retry(ctx.req(request))).await?;
    Ok(Out::new(render::retry_json(&r), render::retry_text(&r)))
}

async fn cancel(ctx: &Ctx, service: &str, transaction_id: &str) -> Result<Out, CliError> {
    let request = pb::CancelRetryRequest {
        service: service.into(),
        transaction_id: transaction_id.into(),
    };
    let r = ctx.call(ctx.retry().cancel_retry(ctx.req(request))).await?;
    let status = render::status_name(r.status);
    let text = if r.cancelled {
        format!("cancelled {service} {transaction_id}: status {status}\n")
    } else {
        format!(
            "nothing to cancel: {service} {transaction_id} had already finished with status {status}\n"
        )
    };
    let json = json!({
        "service": service,
        "transaction_id": transaction_id,
        "status": status,
        "cancelled": r.cancelled,
    });
    Ok(Out::new(json, text))
}

// ---- AdminService: services, stats --------------------------------------------------------------

async fn stats(ctx: &Ctx, service: Option<&str>) -> Result<Out, CliError> {
    let request = pb::GetStatsRequest {
        service: service.unwrap_or_default().into(),
        local_only: false,
    };
    let r = ctx.call(ctx.admin().get_stats(ctx.req(request))).await?;
    let mut services = Table::new(&[
        "SERVICE",
        "PENDING",
        "OVERDUE",
        "≤1m",
        "≤1h",
        "≤1d",
        "LATER",
        "IN_FLIGHT",
        "DEAD",
        "OLDEST_OVERDUE",
        "PAUSED",
    ]);
    for s in &r.services {
        let b = s.bands.unwrap_or_default();
        services.row(vec![
            s.service.clone(),
            s.pending.to_string(),
            b.overdue.to_string(),
            b.within_minute.to_string(),
            b.within_hour.to_string(),
            b.within_day.to_string(),
            b.later.to_string(),
            s.in_flight.to_string(),
            s.dead_lettered.to_string(),
            s.oldest_due_age
                .as_ref()
                .map_or("-".into(), render::age_text),
            yes_no(s.paused),
        ]);
    }
    let mut nodes = Table::new(&[
        "NODE",
        "ADDRESS",
        "SLOTS",
        "COMPACTOR",
        "IN_FLIGHT",
        "SUBSCRIBERS",
        "REACHABLE",
    ]);
    for n in &r.nodes {
        nodes.row(vec![
            n.node_id.clone(),
            n.address.clone(),
            n.held_slots.to_string(),
            yes_no(n.compactor),
            n.in_flight.to_string(),
            n.subscribers.to_string(),
            yes_no(n.reachable),
        ]);
    }
    let mut text = if services.is_empty() {
        "no services with retries\n".to_string()
    } else {
        services.render()
    };
    text.push('\n');
    text.push_str(&nodes.render());
    let json = json!({
        "services": r.services.iter().map(render::service_stats_json).collect::<Vec<_>>(),
        "nodes": r.nodes.iter().map(render::node_stats_json).collect::<Vec<_>>(),
    });
    Ok(Out::new(json, text))
}

async fn services(ctx: &Ctx) -> Result<Out, CliError> {
    let r = ctx
        .call(
            ctx.admin()
                .list_services(ctx.req(pb::ListServicesRequest {})),
        )
        .await?;
    let mut t = Table::new(&[
        "SERVICE",
        "PAUSED",
        "PAUSED_AT",
        "POLICY",
        "LIMITS",
        "UPDATED_AT",
    ]);
    for s in &r.services {
        t.row(vec![
            s.service.clone(),
            yes_no(s.paused),
            time_cell(s.paused_at.as_ref()),
            render::policy_summary(s.policy.as_ref()),
            render::limits_summary(s.limits.as_ref()),
            time_cell(s.updated_at.as_ref()),
        ]);
    }
    let text = if t.is_empty() {
        "no services\n".to_string()
    } else {
        t.render()
    };
    let json = json!({
        "services": r.services.iter().map(render::service_info_json).collect::<Vec<_>>(),
    });
    Ok(Out::new(json, text))
}

async fn pause(ctx: &Ctx, service: &str, pause: bool) -> Result<Out, CliError> {
    let info = if pause {
        let request = pb::PauseServiceRequest {
            service: service.into(),
        };
        ctx.call(ctx.admin().pause_service(ctx.req(request)))
            .await?
            .service
    } else {
        let request = pb::ResumeServiceRequest {
            service: service.into(),
        };
        ctx.call(ctx.admin().resume_service(ctx.req(request)))
            .await?
            .service
    };
    let info = info.ok_or_else(|| malformed("no service in the answer"))?;
    let text = if info.paused {
        format!(
            "{} paused at {}: dispatch stops on every node within the settings refresh \
             interval; enqueues keep working\n",
            info.service,
            time_cell(info.paused_at.as_ref())
        )
    } else {
        format!("{} resumed: dispatch goes on\n", info.service)
    };
    Ok(Out::new(render::service_info_json(&info), text))
}

async fn get_service(ctx: &Ctx, service: &str) -> Result<pb::ServiceInfo, CliError> {
    let request = pb::GetServiceRequest {
        service: service.into(),
    };
    ctx.call(ctx.admin().get_service(ctx.req(request))).await
}

fn policy_out(
    service: &str,
    stored: Option<&pb::RetryPolicy>,
    effective: Option<&pb::RetryPolicy>,
) -> Out {
    let mut t = Table::new(&["FIELD", "STORED", "EFFECTIVE"]).left_aligned();
    let stored_fields = render::policy_fields(stored);
    let effective_fields = render::policy_fields(effective);
    for ((name, s), (_, e)) in stored_fields.into_iter().zip(effective_fields) {
        t.row(vec![
            name.to_string(),
            s.unwrap_or_else(|| "-".into()),
            e.unwrap_or_else(|| "-".into()),
        ]);
    }
    let text = format!(
        "policy of {service} (STORED: the service's own, - where unset; EFFECTIVE: with the node \
         defaults)\n{}",
        t.render()
    );
    let json = json!({
        "service": service,
        "policy": render::policy_json(stored),
        "effective_policy": render::policy_json(effective),
    });
    Out::new(json, text)
}

async fn policy_get(ctx: &Ctx, service: &str) -> Result<Out, CliError> {
    let info = get_service(ctx, service).await?;
    Ok(policy_out(
        service,
        info.policy.as_ref(),
        info.effective_policy.as_ref(),
    ))
}

async fn policy_set(ctx: &Ctx, service: &str, policy: pb::RetryPolicy) -> Result<Out, CliError> {
    let request = pb::SetServicePolicyRequest {
        service: service.into(),
        policy: Some(policy),
    };
    let r = ctx
        .call(ctx.admin().set_service_policy(ctx.req(request)))
        .await?;
    Ok(policy_out(
        service,
        r.policy.as_ref(),
        r.effective_policy.as_ref(),
    ))
}

fn limits_out(service: &str, limits: Option<&pb::ServiceLimits>) -> Out {
    let l = limits.copied().unwrap_or_default();
    let text = key_values(&[
        ("service", service.to_string()),
        (
            "rate",
            l.max_dispatch_per_second
                .map_or("unlimited".into(), |r| format!("{r}/s")),
        ),
        (
            "burst",
            l.dispatch_burst.map_or(
                if l.max_dispatch_per_second.is_some() {
                    "one second's worth".into()
                } else {
                    "-".into()
                },
                |b| b.to_string(),
            ),
        ),
        (
            "max_concurrent",
            l.max_concurrent
                .map_or("unlimited".into(), |c| c.to_string()),
        ),
    ]);
    let json = json!({
        "service": service,
        "limits": render::limits_json(limits),
    });
    Out::new(json, text)
}

async fn limits_get(ctx: &Ctx, service: &str) -> Result<Out, CliError> {
    let info = get_service(ctx, service).await?;
    Ok(limits_out(service, info.limits.as_ref()))
}

async fn limits_set(ctx: &Ctx, service: &str, limits: pb::ServiceLimits) -> Result<Out, CliError> {
    let request = pb::SetServiceLimitsRequest {
        service: service.into(),
        limits: Some(limits),
    };
    let r = ctx
        .call(ctx.admin().set_service_limits(ctx.req(request)))
        .await?;
    Ok(limits_out(service, r.limits.as_ref()))
}

// ---- AdminService: purge ------------------------------------------------------------------------

async fn purge(ctx: &Ctx, a: &PurgeArgs) -> Result<Out, CliError> {
    let bar = ctx.progress(None);
    bar.set_message(format!("purging {}", a.service));
    // The first call fixes the cut-off (the node's "now" unless --before); later calls repeat
    // it so that retries enqueued meanwhile are kept.
    let mut before = a.before;
    let (mut cancelled, mut deleted, mut kept, mut calls) = (0u64, 0u64, 0u64, 0u64);
    loop {
        let request = pb::PurgeServiceRequest {
            service: a.service.clone(),
            before,
            max_buckets: a.batch,
        };
        let r = ctx
            .call(ctx.admin().purge_service(ctx.req(request)))
            .await
            .inspect_err(|_| bar.finish_and_clear())?;
        calls += 1;
        cancelled += r.cancelled;
        deleted += r.buckets_deleted;
        kept += r.buckets_kept;
        if before.is_none() {
            before = r.before;
            if before.is_none() && !r.done {
                bar.finish_and_clear();
                return Err(malformed("PurgeService did not say which cut-off it used"));
            }
        }
        bar.set_message(format!(
            "purging {} (before {}): {cancelled} retries cancelled, {deleted} buckets deleted",
            a.service,
            time_cell(before.as_ref()),
        ));
        if r.done {
            break;
        }
    }
    bar.finish_and_clear();
    let text = format!(
        "purged {}: {} cancelled, {} deleted, {} kept (they hold retries scheduled at or after \
         {}), in {}\n",
        a.service,
        count(cancelled, "retry", "retries"),
        count(deleted, "bucket", "buckets"),
        count(kept, "bucket", "buckets"),
        time_cell(before.as_ref()),
        count(calls, "call", "calls"),
    );
    let json = json!({
        "service": a.service,
        "before": time_json(before.as_ref()),
        "cancelled": cancelled,
        "buckets_deleted": deleted,
        "buckets_kept": kept,
        "calls": calls,
    });
    Ok(Out::new(json, text))
}

// ---- AdminService: dead letters -----------------------------------------------------------------

fn list_request(
    f: &DeadLetterFilter,
    page_size: u32,
    page_token: String,
) -> pb::ListDeadLettersRequest {
    pb::ListDeadLettersRequest {
        service: f.service.clone(),
        from: f.from,
        to: f.to,
        error_contains: f.error_contains.clone().unwrap_or_default(),
        page_size,
        page_token,
        include_redriven: false,
    }
}

/// The largest page ListDeadLetters serves.
const MAX_PAGE: u64 = 1_000;

async fn dlq_list(
    ctx: &Ctx,
    f: &DeadLetterFilter,
    limit: u64,
    include_redriven: bool,
    page_token: Option<String>,
) -> Result<Out, CliError> {
    let limit = if limit == 0 { u64::MAX } else { limit };
    let mut token = page_token.unwrap_or_default();
    let mut letters: Vec<pb::DeadLetter> = Vec::new();
    loop {
        let want = limit - letters.len() as u64;
        if want == 0 {
            break;
        }
        let mut request = list_request(f, want.min(MAX_PAGE) as u32, std::mem::take(&mut token));
        request.include_redriven = include_redriven;
        let r = ctx
            .call(ctx.admin().list_dead_letters(ctx.req(request)))
            .await?;
        letters.extend(r.dead_letters.into_iter().take(want as usize));
        token = r.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    let mut t = Table::new(&[
        "TRANSACTION_ID",
        "ATTEMPT",
        "DEAD_AT",
        "REDRIVEN_AT",
        "LAST_ERROR",
    ]);
    for d in &letters {
        t.row(vec![
            d.transaction_id.clone(),
            d.attempt.to_string(),
            time_cell(d.dead_at.as_ref()),
            time_cell(d.redriven_at.as_ref()),
            truncate(&d.last_error, 80),
        ]);
    }
    let mut text = if t.is_empty() {
        format!("no dead letters of {} match\n", f.service)
    } else {
        t.render()
    };
    if !token.is_empty() {
        text.push_str(&format!(
            "(more match: raise --limit, or continue with --page-token {token})\n"
        ));
    }
    let json = json!({
        "service": f.service,
        "dead_letters": letters.iter().map(render::dead_letter_json).collect::<Vec<_>>(),
        "next_page_token": (!token.is_empty()).then_some(token),
    });
    Ok(Out::new(json, text))
}

async fn dlq_redrive(
    ctx: &Ctx,
    f: &DeadLetterFilter,
    delay: Duration,
    rate: u32,
    batch: u32,
) -> Result<Out, CliError> {
    // Count first, for the progress bar and the report.
    let counting = ctx.progress(None);
    counting.set_message(format!(
        "counting the dead letters of {} to redrive",
        f.service
    ));
    let mut matched = 0u64;
    let mut token = String::new();
    loop {
        let request = list_request(f, MAX_PAGE as u32, std::mem::take(&mut token));
        let r = ctx
            .call(ctx.admin().list_dead_letters(ctx.req(request)))
            .await
            .inspect_err(|_| counting.finish_and_clear())?;
        matched += r.dead_letters.len() as u64;
        counting.set_message(format!(
            "counting the dead letters of {} to redrive: {matched}",
            f.service
        ));
        token = r.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    counting.finish_and_clear();

    // A call handles up to `batch` letters at `rate` per second: allow for that on top of
    // the --timeout.
    let per_call = {
        let items = if batch == 0 { 1_000 } else { batch };
        let rate = if rate == 0 { 500 } else { rate };
        ctx.timeout
            .saturating_add(Duration::from_secs_f64(f64::from(items) / f64::from(rate)))
    };
    let bar = ctx.progress(Some(matched));
    bar.set_message(format!("redriving {}", f.service));
    let (mut redriven, mut skipped, mut calls) = (0u64, 0u64, 0u64);
    loop {
        let request = pb::RedriveDeadLettersRequest {
            service: f.service.clone(),
            from: f.from,
            to: f.to,
            error_contains: f.error_contains.clone().unwrap_or_default(),
            delay: Some(duration_to_proto(delay)),
            max_items: batch,
            max_per_second: rate,
        };
        let r = ctx
            .call_within(
                per_call,
                ctx.admin()
                    .redrive_dead_letters(ctx.req_within(request, per_call)),
            )
            .await
            .inspect_err(|_| bar.finish_and_clear())?;
        calls += 1;
        redriven += r.redriven;
        skipped += r.skipped;
        if redriven + skipped > matched {
            bar.set_length(redriven + skipped);
        }
        bar.set_position(redriven + skipped);
        if r.done {
            break;
        }
    }
    bar.finish_and_clear();
    let text = format!(
        "redrove {} of {} ({skipped} skipped: enqueued again meanwhile; {matched} matched when \
         counted), due in {} or the next window\n",
        count(redriven, "dead letter", "dead letters"),
        f.service,
        human(delay),
    );
    let json = json!({
        "service": f.service,
        "matched": matched,
        "redriven": redriven,
        "skipped": skipped,
        "calls": calls,
    });
    Ok(Out::new(json, text))
}

async fn dlq_purge(
    ctx: &Ctx,
    service: &str,
    from: Option<prost_types::Timestamp>,
    to: Option<prost_types::Timestamp>,
) -> Result<Out, CliError> {
    let request = pb::PurgeDeadLettersRequest {
        service: service.into(),
        from,
        to,
    };
    let r = ctx
        .call(ctx.admin().purge_dead_letters(ctx.req(request)))
        .await?;
    let text = format!(
        "purged {} of {service}\n",
        count(r.purged, "dead letter", "dead letters")
    );
    let json = json!({ "service": service, "purged": r.purged });
    Ok(Out::new(json, text))
}

// ---- ring and windows ---------------------------------------------------------------------------

async fn ring(ctx: &Ctx) -> Result<Out, CliError> {
    let r = ctx
        .call(ctx.executor().get_ring(ctx.req(pb::GetRingRequest {})))
        .await?;
    let mut nodes = Table::new(&["NODE", "ADDRESS", "COMPACTOR", "RANGES", "SHARE"]);
    let mut ranges = Table::new(&["NODE", "START", "END"]);
    for n in &r.nodes {
        nodes.row(vec![
            n.node_id.clone(),
            n.address.clone(),
            yes_no(n.compactor),
            n.ranges.len().to_string(),
            format!("{:.1}%", render::token_share(&n.ranges)),
        ]);
        let mut sorted = n.ranges.clone();
        sorted.sort_by_key(|t| t.start);
        for t in sorted {
            ranges.row(vec![
                n.node_id.clone(),
                t.start.to_string(),
                t.end.to_string(),
            ]);
        }
    }
    let text = if nodes.is_empty() {
        "no ring: the node runs without leases\n".to_string()
    } else {
        format!("{}\n{}", nodes.render(), ranges.render())
    };
    Ok(Out::new(render::ring_json(&r), text))
}

async fn inspect_window(ctx: &Ctx, day: &str, window: u32) -> Result<Out, CliError> {
    let request = pb::InspectWindowRequest {
        day: day.into(),
        window,
    };
    let r = ctx
        .call(ctx.admin().inspect_window(ctx.req(request)))
        .await?;
    let buckets: usize = r.instances.iter().map(|i| i.buckets.len()).sum();
    let pointers: u64 = r
        .instances
        .iter()
        .flat_map(|i| &i.buckets)
        .map(|b| b.pointers)
        .sum();
    let mut text = key_values(&[
        ("day", day.to_string()),
        (
            "window",
            format!("{window} ({}s windows)", r.window_seconds),
        ),
        (
            "span",
            format!(
                "{} .. {}",
                time_cell(r.window_start.as_ref()),
                time_cell(r.window_end.as_ref())
            ),
        ),
        ("readable", yes_no(r.readable)),
        (
            "low_water",
            format!("{} (windows below it were compacted)", r.low_water),
        ),
        ("tier 1 day listed", yes_no(r.day_listed)),
        ("tier 2 window listed", yes_no(r.window_listed)),
        ("tier 3 instances", r.instances.len().to_string()),
        ("tier 4 buckets", buckets.to_string()),
        ("tier 5 pointers", pointers.to_string()),
    ]);
    let mut t = Table::new(&[
        "SERVICE",
        "INSTANCE",
        "INSTANCE_TOKEN",
        "BUCKET",
        "POINTERS",
    ]);
    let mut instances: Vec<&pb::InstanceEntry> = r.instances.iter().collect();
    instances.sort_by(|a, b| (&a.service, &a.instance).cmp(&(&b.service, &b.instance)));
    for i in instances {
        if i.buckets.is_empty() {
            t.row(vec![
                i.service.clone(),
                i.instance.clone(),
                i.instance_token.to_string(),
                "-".into(),
                "-".into(),
            ]);
        }
        let by_bucket: BTreeMap<u32, u64> =
            i.buckets.iter().map(|b| (b.bucket, b.pointers)).collect();
        for (bucket, n) in by_bucket {
            t.row(vec![
                i.service.clone(),
                i.instance.clone(),
                i.instance_token.to_string(),
                bucket.to_string(),
                n.to_string(),
            ]);
        }
    }
    if !t.is_empty() {
        text.push('\n');
        text.push_str(&t.render());
    }
    Ok(Out::new(render::inspect_json(day, window, &r), text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(args).unwrap()
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1, "retry", "retries"), "1 retry");
        assert_eq!(count(0, "retry", "retries"), "0 retries");
        assert_eq!(count(2, "bucket", "buckets"), "2 buckets");
    }

    #[test]
    fn destructive_commands_need_yes() {
        let e = confirm(&parse(&["rebound", "purge", "orders"]).command).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(confirm(&parse(&["rebound", "purge", "orders", "--yes"]).command).is_ok());
        let e = confirm(&parse(&["rebound", "dlq", "purge", "orders"]).command).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(confirm(&parse(&["rebound", "dlq", "purge", "orders", "--yes"]).command).is_ok());
        assert!(confirm(&parse(&["rebound", "ring"]).command).is_ok());
    }

    #[tokio::test]
    async fn an_unreachable_node_is_exit_5_and_a_bad_address_exit_2() {
        // Port 1 on loopback is closed on any sane machine, so this fails fast.
        let e = connect("127.0.0.1:1", Duration::from_secs(5), None)
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), 5, "{e:?}");
        let e = connect("not a uri", Duration::from_secs(5), None)
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e:?}");
    }

    #[test]
    fn policy_output_lists_stored_and_effective() {
        let stored = pb::RetryPolicy {
            max_attempts: Some(3),
            ..Default::default()
        };
        let effective = pb::RetryPolicy {
            max_attempts: Some(3),
            jitter: Some(0.2),
            ..Default::default()
        };
        let out = policy_out("orders", Some(&stored), Some(&effective));
        assert!(
            out.text
                .contains("\nmax_attempts                 3       3\n"),
            "{}",
            out.text
        );
        assert!(
            out.text
                .contains("\njitter                       -       0.2\n"),
            "{}",
            out.text
        );
        assert_eq!(out.json["policy"]["max_attempts"], 3);
        assert_eq!(out.json["policy"]["jitter"], Value::Null);
        assert_eq!(out.json["effective_policy"]["jitter"], 0.2);
    }

    #[test]
    fn limits_output_says_unlimited() {
        let out = limits_out("orders", None);
        assert!(
            out.text.contains("rate            unlimited\n"),
            "{}",
            out.text
        );
        assert_eq!(out.json["limits"]["max_concurrent"], Value::Null);
        let l = pb::ServiceLimits {
            max_dispatch_per_second: Some(100.0),
            dispatch_burst: Some(20),
            max_concurrent: Some(50),
        };
        let out = limits_out("orders", Some(&l));
        assert!(out.text.contains("rate            100/s\n"), "{}", out.text);
        assert_eq!(out.json["limits"]["max_dispatch_per_second"], 100.0);
        assert_eq!(out.json["limits"]["dispatch_burst"], 20);
    }

    #[test]
    fn the_longest_timeout_fits_the_grpc_timeout_header() {
        // tonic panics on a deadline longer than 99999999 hours.
        let mut r = tonic::Request::new(());
        r.set_timeout(Duration::MAX.min(MAX_GRPC_TIMEOUT));
        let header = r.metadata().get("grpc-timeout").unwrap().to_str().unwrap();
        assert_eq!(header, "99999999H");
    }
}
