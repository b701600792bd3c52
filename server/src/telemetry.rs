//! Structured logs through `tracing`. `RUST_LOG` filters (default `info`, driver at `warn`);
//! `REBOUND_LOG_FORMAT=json` switches to one JSON object per line.

use tracing_subscriber::{fmt, EnvFilter};

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,scylla=warn,h2=warn,tower=warn"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
