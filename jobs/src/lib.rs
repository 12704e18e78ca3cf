#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod callback;
pub mod channel;
pub mod clock;
pub mod config;
pub mod draft;
pub mod effect;
pub mod failpoint;
pub mod fetch;
pub mod history;
pub mod id;
pub mod jobs;
pub mod logs;
pub mod metrics;
pub mod nix;
pub mod openbao;
pub mod openbao_token;
pub mod outbound;
pub mod precondition;
pub mod probe;
pub mod provenance;
pub mod read;
pub mod renames;
pub mod rollout;
pub mod safe_change;
pub mod sandbox;
pub mod sbom;
pub mod secrets;
pub mod source;
pub mod sqlite_wal;
pub mod state;
pub mod storage;
pub mod store;
pub mod submit;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod validate;
pub mod webhooks;

/// The exit status of a binary that cannot start until its configuration
/// or its database changes (`EX_CONFIG` of sysexits.h): a pooler in
/// transaction mode, a database a newer release migrated
/// ([`store::StoreError::is_configuration`]). The shipped systemd units say
/// `RestartPreventExitStatus=78`, so such a process is not restarted in a
/// loop.
pub const EX_CONFIG: u8 = 78;

/// The exit status for an error with these causes: [`EX_CONFIG`] when one
/// of them is a [`store::StoreError`] that restarting cannot cure, else 1.
pub fn exit_status<'a>(chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>) -> u8 {
    let configuration = chain
        .into_iter()
        .any(|cause| cause.downcast_ref::<store::StoreError>().is_some_and(store::StoreError::is_configuration));
    if configuration {
        EX_CONFIG
    } else {
        1
    }
}

/// An error and its causes on one line, `outer: cause: …`, skipping a cause
/// whose text is already in the line (sqlx repeats a database's message in
/// each layer). For the binaries' last words before they exit.
pub fn error_line<'a>(chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut line = String::new();
    for cause in chain {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// An HTTP request's error and its causes on one line ([`error_line`]),
/// without the URL (it may carry a token or a secret's path).
pub(crate) fn request_error_line(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut causes: Vec<&(dyn std::error::Error + 'static)> = vec![&e];
    while let Some(next) = causes.last().and_then(|c| c.source()) {
        causes.push(next);
    }
    error_line(causes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_line_names_each_cause_once() {
        let inner = std::io::Error::other("connection refused");
        let outer = crate::store::StoreError::Database(sqlx::Error::Io(inner));
        let chain: Vec<&(dyn std::error::Error + 'static)> = {
            let mut v: Vec<&(dyn std::error::Error + 'static)> = vec![&outer];
            while let Some(next) = v.last().unwrap().source() {
                v.push(next);
            }
            v
        };
        assert!(chain.len() > 2, "the test needs a chain that repeats itself");
        let line = super::error_line(chain);
        assert_eq!(line.matches("connection refused").count(), 1, "{line}");
    }
}
