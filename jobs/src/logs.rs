//! The log output of both binaries (docs/CONFIGURATION.md, "Logs"): which
//! events ([`crate::config::log_filter`]: `SLIPWAY_LOG`, `RUST_LOG`) and in
//! which format (`SLIPWAY_LOG_FORMAT`: `text` or `json`), to standard error.
//! Read from the environment before the configuration, so that loading it
//! can be logged.
//!
//! Spans carry dotted field names (`http.method`, `http.route`,
//! `deployment.id`, `build.id`, `worker.name`, `job.kind`); in JSON each line
//! is one object with the event's fields at the top level, `span` (the
//! innermost span's fields) and `spans` (every enclosing span's, outermost
//! first).

use crate::config::DEFAULT_LOG_FILTER;

/// How log lines are written (`SLIPWAY_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One line per event for people: time, level, spans, target, message
    /// and fields (the default).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The log format `SLIPWAY_LOG_FORMAT` names: unset or empty is
/// [`LogFormat::Text`]; `text` or `json` (any case, spaces around ignored);
/// anything else is an error naming the variable, the value and the two
/// accepted ones. `var` reads the environment (`|k| std::env::var(k).ok()`).
pub fn log_format(var: impl Fn(&str) -> Option<String>) -> Result<LogFormat, String> {
    let Some(value) = var("SLIPWAY_LOG_FORMAT") else { return Ok(LogFormat::Text) };
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("SLIPWAY_LOG_FORMAT: expected text or json (got {value:?})")),
    }
}

/// Sets up the process's logging from the environment. `binary` names the
/// process in the one line written when the filter does not parse (the
/// default is then used). `Err` when `SLIPWAY_LOG_FORMAT` is not a format:
/// the caller reports it and stops.
pub fn init(binary: &str) -> Result<(), String> {
    let var = |k: &str| std::env::var(k).ok();
    let format = log_format(var)?;
    let (source, filter) = crate::config::log_filter(var);
    let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("{binary}: {source} is not a log filter ({e}); using {DEFAULT_LOG_FILTER}");
        tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER)
    });
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        LogFormat::Json => {
            builder.json().flatten_event(true).with_current_span(true).with_span_list(true).with_ansi(false).init()
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(value: Option<&'static str>) -> impl Fn(&str) -> Option<String> {
        move |k| (k == "SLIPWAY_LOG_FORMAT").then_some(value).flatten().map(str::to_owned)
    }

    #[test]
    fn the_log_format_is_text_unless_json_is_asked_and_anything_else_is_refused_by_name() {
        assert_eq!(log_format(env(None)), Ok(LogFormat::Text));
        assert_eq!(log_format(env(Some(""))), Ok(LogFormat::Text));
        assert_eq!(log_format(env(Some("text"))), Ok(LogFormat::Text));
        assert_eq!(log_format(env(Some(" JSON "))), Ok(LogFormat::Json));
        let err = log_format(env(Some("yaml"))).unwrap_err();
        assert_eq!(err, "SLIPWAY_LOG_FORMAT: expected text or json (got \"yaml\")");
    }
}
