//! Log set-up: every line to stderr (stdout stays free for the operator's own use), ANSI colour
//! only when stderr is a terminal, and `log_format = "json"` for collectors: one JSON object a
//! line, with the span's fields (`backend.addr`, `client.addr`) alongside the event's. The level
//! filter comes from `RUST_LOG` (default `info`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber; called once, first thing in `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `try_init`: a second call (tests) keeps the first subscriber instead of panicking.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
