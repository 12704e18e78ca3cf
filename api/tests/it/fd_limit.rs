//! The api's open-file limit, against the real `slipway-api` binary: every
//! event stream is a socket, so at start it raises its soft
//! `RLIMIT_NOFILE` to the hard limit, logs both, and warns when the hard
//! limit leaves no room for `SLIPWAY_STREAMS_PER_API` streams.

use crate::common;

use common::process::{api_command, start_command_until};
use std::time::Duration;

/// This process's hard open-file limit.
fn hard_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the one struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
    limit.rlim_max
}

/// The soft and hard "Max open files" of process `pid`.
fn open_files(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].to_owned(), fields[4].to_owned())
}

#[tokio::test]
async fn the_api_started_under_a_low_soft_open_file_limit_raises_it_to_the_hard_one_and_warns_it_is_short() {
    let hard = hard_limit().min(4096);
    assert!(hard > 256, "this test needs a hard open-file limit above 256, not {hard}");
    let dir = tempfile::tempdir().unwrap();
    let mut command = api_command(dir.path(), None, &[("SLIPWAY_STREAMS_PER_API", "10000")]);
    // SAFETY: between fork and exec, only setrlimit, which is async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: 256, rlim_max: hard };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let api = start_command_until(command, "serving address=").await;
    assert_eq!(open_files(api.pid()), (hard.to_string(), hard.to_string()), "the soft limit was not raised");
    let line = api.wait_log(0, &["open-file limit", "raised"], Duration::from_secs(10)).await;
    assert!(line.contains("before=256") && line.contains(&format!("now={hard}")), "{line}");
    // 4,096 descriptors leave no room for 10,000 streams.
    api.wait_log(0, &["no room for SLIPWAY_STREAMS_PER_API", "needed=11024"], Duration::from_secs(10)).await;
    api.stop().await;
}
