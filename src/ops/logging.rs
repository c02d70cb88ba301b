//! Log output on stderr (issue 10, item 9): `log_format = "text"` (colour only when stderr is
//! a terminal and `NO_COLOR` is unset) or `"json"` (one object per line, fields flattened,
//! for journald and log shippers). The level filter comes from `APPLIANCE_LOG` (default
//! `info`).

use std::io::IsTerminal;

use crate::config::LogFormat;

/// Installs the global subscriber (first call only; later calls are ignored).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("APPLIANCE_LOG")
        .unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(use_colour(std::io::stderr().is_terminal()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// Colour only on a terminal, and never with `NO_COLOR` set (https://no-color.org).
fn use_colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
