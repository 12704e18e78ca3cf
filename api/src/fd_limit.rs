//! The api's open-file limit (`RLIMIT_NOFILE`). Every open connection,
//! and so every event stream a front-end holds, is a socket: one
//! descriptor. Linux starts a process at a soft limit of 1024 by default
//! (systemd too, whatever the hard limit), which caps an api at about 1,000
//! streams and fails `accept` past it. At start the api raises its soft
//! limit to the hard limit, which an operator sets (`LimitNOFILE=` in the
//! systemd unit, `ulimit -Hn` in a shell), and logs both; it warns when
//! the limit leaves no room for `SLIPWAY_STREAMS_PER_API` streams plus
//! [`ORDINARY_MARGIN`] other descriptors.

/// Descriptors kept for what is not an event stream: ordinary requests,
/// the database pool, the log, the keys file.
pub const ORDINARY_MARGIN: u64 = 1024;

/// The soft limit before and after [`raise_to_hard`], and the hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    /// The soft limit the process started with.
    pub before: u64,
    /// The soft limit now (the hard limit unless that is unlimited, when
    /// it stays as it was).
    pub now: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit. An
/// unlimited hard limit (`RLIM_INFINITY`, which Linux refuses as a soft
/// `RLIMIT_NOFILE`) leaves the soft limit as it was. Errors are those of
/// `getrlimit(2)` and `setrlimit(2)`.
pub fn raise_to_hard() -> std::io::Result<Raised> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the one struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_max != libc::RLIM_INFINITY && limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads the one struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit.rlim_cur = limit.rlim_max;
    }
    Ok(Raised { before, now: limit.rlim_cur, hard: limit.rlim_max })
}

/// Raises the limit ([`raise_to_hard`]) and logs the outcome: `info` with
/// both limits, `warn` when it cannot be read or raised, or when it is
/// below `streams_per_api` plus [`ORDINARY_MARGIN`].
pub fn raise_and_log(streams_per_api: u32) {
    let needed = u64::from(streams_per_api) + ORDINARY_MARGIN;
    match raise_to_hard() {
        Ok(r) => {
            tracing::info!(
                before = r.before,
                now = r.now,
                hard = r.hard,
                "open-file limit (RLIMIT_NOFILE) raised to its hard limit"
            );
            if r.now < needed {
                tracing::warn!(
                    limit = r.now,
                    needed,
                    "the open-file limit leaves no room for SLIPWAY_STREAMS_PER_API event streams and ordinary \
                     requests: connections past it fail; raise the hard limit (LimitNOFILE= in the systemd unit) or \
                     lower SLIPWAY_STREAMS_PER_API"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "the open-file limit (RLIMIT_NOFILE) could not be raised"),
    }
}
