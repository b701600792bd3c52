//! The connection to the node: TLS from the flags, the channel, and the per-call context
//! (deadline, credential, progress bars).

use std::{future::Future, io::IsTerminal, time::Duration};

use indicatif::{ProgressBar, ProgressStyle};
use rebound_proto::v1::{
    admin_service_client::AdminServiceClient, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::human;
use crate::{
    args::Cli,
    error::{chain, CliError},
};

/// The TLS settings of the flags: None for plain text unless --addr is https:// or a TLS
/// file is given.
pub(super) fn tls(cli: &Cli) -> Result<Option<ClientTlsConfig>, CliError> {
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
pub(super) async fn connect(
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
pub(super) struct Ctx {
    pub(super) channel: Channel,
    pub(super) timeout: Duration,
    pub(super) json: bool,
    /// `Bearer <token>` from --token, sent with every call.
    pub(super) authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

impl Ctx {
    pub(super) fn retry(&self) -> RetryServiceClient<Channel> {
        RetryServiceClient::new(self.channel.clone())
    }

    pub(super) fn admin(&self) -> AdminServiceClient<Channel> {
        AdminServiceClient::new(self.channel.clone())
    }

    pub(super) fn executor(&self) -> ExecutorServiceClient<Channel> {
        ExecutorServiceClient::new(self.channel.clone())
    }

    /// A request carrying the deadline, so the node gives up when the CLI does.
    pub(super) fn req<T>(&self, message: T) -> tonic::Request<T> {
        self.req_within(message, self.timeout)
    }

    pub(super) fn req_within<T>(&self, message: T, limit: Duration) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(limit.min(MAX_GRPC_TIMEOUT));
        if let Some(a) = &self.authorization {
            r.metadata_mut().insert("authorization", a.clone());
        }
        r
    }

    pub(super) async fn call<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CliError> {
        self.call_within(self.timeout, call).await
    }

    pub(super) async fn call_within<T>(
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
    pub(super) fn progress(&self, len: Option<u64>) -> ProgressBar {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_longest_timeout_fits_the_grpc_timeout_header() {
        // tonic panics on a deadline longer than 99999999 hours.
        let mut r = tonic::Request::new(());
        r.set_timeout(Duration::MAX.min(MAX_GRPC_TIMEOUT));
        let header = r.metadata().get("grpc-timeout").unwrap().to_str().unwrap();
        assert_eq!(header, "99999999H");
    }
}
