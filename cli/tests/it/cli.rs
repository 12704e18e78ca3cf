//! The built `slipway` binary against a running api and worker (real
//! binaries, SQLite, loopback HTTP): deploy with --follow, then every read
//! command, the operator commands with and without the operator claim,
//! delete; a failing deploy and a cancel; the exit codes of --help.

use crate::common;

use common::{demo_file, failing_source, free_port, printing_source, slipway, wait_for, Fleet};
use serde_json::Value;
use std::time::Duration;

#[tokio::test]
async fn deploy_follow_of_the_demo_succeeds_and_every_command_reads_what_it_made() {
    let fleet = Fleet::start(None).await;
    let (user, operator) = (fleet.token(false), fleet.token(true));
    let demo = demo_file();
    let demo = demo.to_str().unwrap();

    let deploy = fleet.slipway(&user, &["deploy", "demo", "-f", demo, "--follow"]).await;
    assert_eq!(deploy.code, 0, "{deploy:#?}");
    let build = deploy.stdout.lines().last().unwrap_or_default().to_owned();
    assert!(build.starts_with("build demo.") && build.contains(" succeeded"), "{deploy:#?}");
    let build_id = build.split_whitespace().nth(1).unwrap().to_owned();
    assert!(!deploy.stderr.trim().is_empty(), "the build's log is shown while it runs: {deploy:#?}");

    // status, in text and JSON.
    let status = fleet.slipway(&user, &["status", "demo"]).await;
    assert_eq!(status.code, 0, "{status:#?}");
    assert!(status.stdout.contains("state       active"), "{status:#?}");
    let status = fleet.slipway(&user, &["--output", "json", "status", "demo"]).await.json();
    assert_eq!((status["state"].as_str(), status["last_build"]["id"].as_str()), (Some("active"), Some(&*build_id)));

    // logs: the whole log at once, and streamed from a finished build.
    let logs = fleet.slipway(&user, &["logs", &build_id]).await;
    assert_eq!(logs.code, 0, "{logs:#?}");
    assert!(!logs.stdout.trim().is_empty(), "{logs:#?}");
    let json = fleet.slipway(&user, &["--output", "json", "logs", &build_id]).await.json();
    assert_eq!(json["status"], "succeeded");
    assert_eq!(json["log"].as_str().map(str::trim_end), Some(logs.stdout.trim_end()));
    let streamed = fleet.slipway(&user, &["logs", "-f", &build_id]).await;
    assert_eq!((streamed.code, streamed.stdout.trim_end()), (0, logs.stdout.trim_end()), "{streamed:#?}");
    let lines = fleet.slipway(&user, &["--output", "json", "logs", "-f", &build_id]).await.json_lines();
    assert_eq!(lines.last().unwrap()["event"], "end");
    assert_eq!(lines.last().unwrap()["status"], "succeeded");

    // sbom: the list, then each node's CycloneDX document.
    let list = fleet.slipway(&user, &["--output", "json", "sbom", "demo"]).await.json();
    let nodes: Vec<String> =
        list["nodes"].as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap().to_owned()).collect();
    assert!(!nodes.is_empty(), "{list}");
    let table = fleet.slipway(&user, &["sbom", "demo"]).await;
    assert!(table.stdout.starts_with("NODE") && nodes.iter().all(|n| table.stdout.contains(n.as_str())), "{table:#?}");
    for node in &nodes {
        let doc = fleet.slipway(&user, &["sbom", "demo", "--node", node]).await.json();
        assert_eq!(doc["bomFormat"], "CycloneDX", "{node}");
    }
    let missing = fleet.slipway(&user, &["sbom", "demo", "--node", "no-such-node"]).await;
    assert_eq!(missing.code, 1, "{missing:#?}");
    assert!(missing.stderr.contains("not_found") && missing.stderr.contains("404"), "{missing:#?}");

    // The fleet, for operators only.
    let queues = fleet.slipway(&operator, &["--output", "json", "queues"]).await.json();
    let builds = queues["queues"].as_array().unwrap().iter().find(|q| q["queue"] == "builds").unwrap().clone();
    assert_eq!((builds["waiting"].as_i64(), builds["running"].as_i64()), (Some(0), Some(0)), "{queues}");
    let table = fleet.slipway(&operator, &["queues"]).await;
    assert!(table.stdout.starts_with("QUEUE") && table.stdout.contains("builds"), "{table:#?}");
    let hostname = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or("host".into());
    let workers = wait_for("the worker in slipway workers", Duration::from_secs(30), || async {
        let w = fleet.slipway(&operator, &["--output", "json", "workers"]).await.json();
        (w["workers"].as_array().is_some_and(|l| l.len() == 1) && w["workers"][0]["alive"] == true).then_some(w)
    })
    .await;
    let worker = &workers["workers"][0];
    assert_eq!(worker["host"].as_str(), Some(hostname.as_str()), "{workers}");
    assert!(worker["name"].as_str().unwrap().starts_with("worker@"), "{workers}");
    let queues: Vec<&str> = worker["queues"].as_array().unwrap().iter().map(|q| q.as_str().unwrap()).collect();
    assert!(queues.contains(&"builds") && queues.contains(&"nix"), "{workers}");
    assert_eq!(worker["slots_in_use"], 0, "{workers}");
    let table = fleet.slipway(&operator, &["workers"]).await;
    assert!(table.stdout.starts_with("NAME") && table.stdout.contains(&hostname), "{table:#?}");
    for command in ["queues", "workers"] {
        let refused = fleet.slipway(&user, &[command]).await;
        assert_eq!(refused.code, 1, "{command}: {refused:#?}");
        assert!(refused.stderr.starts_with("slipway: error forbidden (HTTP 403): "), "{command}: {refused:#?}");
        let refused = fleet.slipway(&user, &["--output", "json", command]).await;
        let body: Value = serde_json::from_str(refused.stderr.trim()).unwrap();
        assert_eq!((body["error"].as_str(), body["status"].as_i64()), (Some("forbidden"), Some(403)), "{command}");
        // Only a refusal that passes with time says when to try again.
        assert!(body.get("retry_after").is_none(), "{command}: {body}");
    }

    // token: the claims of the token in use, the secret never needed.
    let claims = fleet.slipway(&operator, &["--output", "json", "token"]).await.json();
    assert_eq!((claims["claims"]["operator"].as_bool(), claims["expired"].as_bool()), (Some(true), Some(false)));
    let text = fleet.slipway(&user, &["token"]).await;
    assert!(text.stdout.contains("operator     no") && text.stdout.contains("(in "), "{text:#?}");

    // delete, followed to its end.
    let delete = fleet.slipway(&user, &["delete", "demo", "--follow"]).await;
    assert_eq!(delete.code, 0, "{delete:#?}");
    let status = fleet.slipway(&user, &["--output", "json", "status", "demo"]).await.json();
    assert_eq!(status["state"], "idle", "{status}");
    // Deleting it again queues nothing, and says so.
    let again = fleet.slipway(&user, &["delete", "demo"]).await;
    assert_eq!(again.code, 0, "{again:#?}");
    assert!(again.stdout.contains("already deleted") && !again.stdout.contains("queued"), "{again:#?}");
}

#[tokio::test]
async fn a_failing_deploy_exits_4_a_running_build_is_cancelled_and_a_refused_configuration_names_its_problems() {
    let source = tempfile::tempdir().unwrap();
    failing_source(source.path());
    let fleet = Fleet::start(Some(source.path())).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let demo = demo.to_str().unwrap();

    let failed = fleet.slipway(&user, &["deploy", "broken", "-f", demo, "--follow"]).await;
    assert_eq!(failed.code, 4, "{failed:#?}");
    assert!(failed.stdout.lines().last().is_some_and(|l| l.contains(" failed")), "{failed:#?}");
    assert!(failed.stderr.contains("fails on purpose"), "the log is shown: {failed:#?}");
    let lines = fleet.slipway(&user, &["--output", "json", "deploy", "broken", "-f", demo, "--follow"]).await;
    assert_eq!(lines.code, 4, "{lines:#?}");
    let last = lines.json_lines().pop().unwrap();
    assert_eq!((last["event"].as_str(), last["build"]["status"].as_str()), (Some("build"), Some("failed")));

    // A long deploy, cancelled while it runs.
    let accepted = fleet.slipway(&user, &["--output", "json", "deploy", "slow", "-f", demo]).await;
    assert_eq!(accepted.code, 0, "{accepted:#?}");
    let build = accepted.json()["build_id"].as_str().unwrap().to_owned();
    wait_for("the slow build to log its start", Duration::from_secs(60), || async {
        let b = fleet.slipway(&user, &["--output", "json", "logs", &build]).await.json();
        b["log"].as_str().is_some_and(|l| l.contains("a long deploy starts")).then_some(())
    })
    .await;
    let cancel = fleet.slipway(&user, &["--output", "json", "cancel", &build]).await;
    assert_eq!(cancel.code, 0, "{cancel:#?}");
    assert_eq!(cancel.json()["status"], "cancelling");
    let followed = fleet.slipway(&user, &["logs", "-f", &build]).await;
    assert_eq!(followed.code, 4, "{followed:#?}");
    assert!(followed.stderr.contains(&format!("build {build} cancelled")), "{followed:#?}");
    let again = fleet.slipway(&user, &["cancel", &build]).await;
    assert_eq!(again.code, 1, "{again:#?}");
    assert!(again.stderr.contains("error build_finished (HTTP 409)"), "{again:#?}");

    // A configuration the api refuses: its problems are listed.
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), r#"{"domain": 7, "applications": {"nosuchapp": {}}}"#).unwrap();
    let refused = fleet.slipway(&user, &["deploy", "demo", "-f", bad.path().to_str().unwrap()]).await;
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(refused.stderr.starts_with("slipway: error "), "{refused:#?}");
    assert!(refused.stderr.lines().filter(|l| l.starts_with("  - ")).count() >= 2, "{refused:#?}");
}

#[tokio::test]
async fn an_unreachable_api_is_named_and_exits_3_and_a_missing_token_exits_2() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = slipway(&[("SLIPWAY_URL", &url), ("SLIPWAY_TOKEN", "a.b.c")], &["status", "demo"]).await;
    assert_eq!(out.code, 3, "{out:#?}");
    assert!(out.stderr.contains(&format!("could not reach the Slipway api at {url}")), "{out:#?}");
    let out = slipway(&[("SLIPWAY_URL", &url)], &["queues"]).await;
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(out.stderr.contains("no token"), "{out:#?}");
    let help = slipway(&[], &["--help"]).await;
    for code in [
        "0  done",
        "1  the api refused",
        "2  bad usage",
        "3  the api could not be reached",
        "4  the followed build",
        "5  the api is busy",
        "130  stopped by Ctrl-C",
        "141  the reader of the output went away",
    ] {
        assert!(help.stdout.contains(code), "--help lacks exit code {code:?}: {}", help.stdout);
    }
    assert!(!help.stdout.contains(|c: char| c.is_control() && c != '\n'), "{:?}", help.stdout);
}

/// A reader that has gone (`slipway token | head -0`) ends `slipway`
/// quietly by SIGPIPE, as it ends `cat`: no panic, no backtrace.
#[test]
fn a_closed_output_pipe_ends_slipway_quietly() {
    use base64::Engine as _;
    use std::os::unix::process::ExitStatusExt;
    let part = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let token = format!(
        "{}.{}.c2lnbmF0dXJl",
        part(r#"{"alg":"HS256","typ":"JWT"}"#),
        part(r#"{"aud":"slipway","exp":4102444800,"deployments":["*"]}"#)
    );
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(["token"])
        .env_remove("SLIPWAY_URL")
        .env("SLIPWAY_TOKEN", &token)
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `slipway logs -f` follows a build across a restart of the api (as in a
/// rolling restart): the stream is resumed with `Last-Event-ID` once the
/// api answers again, and ends with the build (cancelled here: exit 4).
#[tokio::test]
async fn logs_follow_resumes_across_a_restart_of_the_api() {
    let source = tempfile::tempdir().unwrap();
    failing_source(source.path());
    let mut fleet = Fleet::start(Some(source.path())).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let accepted = fleet.slipway(&user, &["--output", "json", "deploy", "slow", "-f", demo.to_str().unwrap()]).await;
    assert_eq!(accepted.code, 0, "{accepted:#?}");
    let build = accepted.json()["build_id"].as_str().unwrap().to_owned();
    wait_for("the slow build to log its start", Duration::from_secs(60), || async {
        let b = fleet.slipway(&user, &["--output", "json", "logs", &build]).await.json();
        b["log"].as_str().is_some_and(|l| l.contains("a long deploy starts")).then_some(())
    })
    .await;
    let follower = tokio::process::Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(["logs", "-f", &build])
        .env("SLIPWAY_URL", &fleet.url)
        .env("SLIPWAY_TOKEN", &user)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The follower has the stream open once the api counts its request.
    // The access line (route template) is written when the stream's head is sent.
    wait_for("the follower to open the log stream", Duration::from_secs(30), || async {
        let log = std::fs::read_to_string(fleet.db.path("api.log")).unwrap_or_default();
        log.contains("/builds/{id}/log").then_some(())
    })
    .await;
    // Down for 3 s: the follower's first tries to resume are refused.
    fleet.restart_api(Duration::from_secs(3)).await;
    let cancel = fleet.slipway(&user, &["cancel", &build]).await;
    assert_eq!(cancel.code, 0, "{cancel:#?}");
    let out = tokio::time::timeout(Duration::from_secs(120), follower.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains(&format!("build {build} cancelled")), "{stderr}");
}

/// A token that expires while `slipway logs -f` follows a running build:
/// the api ends the stream with `token_expired`, and `slipway` exits 1
/// naming it and saying to follow again with a fresh token, instead of
/// resuming with a token that would be refused (or reporting the build's
/// end). The build goes on.
#[tokio::test]
async fn logs_follow_with_a_token_that_expires_exits_1_naming_token_expired() {
    let source = tempfile::tempdir().unwrap();
    failing_source(source.path());
    let fleet = Fleet::start(Some(source.path())).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let accepted = fleet.slipway(&user, &["--output", "json", "deploy", "slow", "-f", demo.to_str().unwrap()]).await;
    assert_eq!(accepted.code, 0, "{accepted:#?}");
    let build = accepted.json()["build_id"].as_str().unwrap().to_owned();
    wait_for("the slow build to log its start", Duration::from_secs(60), || async {
        let b = fleet.slipway(&user, &["--output", "json", "logs", &build]).await.json();
        b["log"].as_str().is_some_and(|l| l.contains("a long deploy starts")).then_some(())
    })
    .await;
    let short = fleet.token_for(false, "4s");
    let follower = tokio::process::Command::from(fleet.command(&short, &["logs", "-f", &build]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), follower.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("token_expired"), "{stderr}");
    assert!(stderr.contains("fresh SLIPWAY_TOKEN") && stderr.contains(&build), "{stderr}");
    let status = fleet.slipway(&user, &["--output", "json", "logs", &build]).await.json();
    assert_eq!(status["status"], "running", "the build goes on: {status}");
    assert_eq!(fleet.slipway(&user, &["cancel", &build]).await.code, 0);
}

/// 600 numbered lines, the second half written after a pause long enough
/// for the api to be away while the build runs.
const SIX_HUNDRED_LINES: &str = r#"i=1
while [ $i -le 300 ]; do echo "line $i of 600"; i=$((i+1)); done
sleep 20
while [ $i -le 600 ]; do echo "line $i of 600"; i=$((i+1)); done"#;

/// `slipway logs -f` outlives an api that is away far longer than a few
/// quick retries (15 s, killed, then started again on its port): it resumes
/// with backoff until the api answers, every line arrives exactly once and
/// in order, and the follow ends with the build (exit 0). A follower told
/// `--give-up-after 2s` gives up during the same outage with exit 3.
#[tokio::test]
async fn logs_follow_outlives_a_long_api_outage_and_shows_every_line_exactly_once() {
    use std::io::BufRead as _;
    use std::process::Stdio;
    let source = tempfile::tempdir().unwrap();
    printing_source(source.path(), SIX_HUNDRED_LINES);
    let mut fleet = Fleet::start(Some(source.path())).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let accepted = fleet.slipway(&user, &["--output", "json", "deploy", "chatty", "-f", demo.to_str().unwrap()]).await;
    assert_eq!(accepted.code, 0, "{accepted:#?}");
    let build = accepted.json()["build_id"].as_str().unwrap().to_owned();

    let mut follower =
        fleet.command(&user, &["logs", "-f", &build]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let quitter = fleet
        .command(&user, &["--give-up-after", "2s", "logs", "-f", &build])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _reap = KillOnDrop(follower.id());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let lines = std::sync::Arc::clone(&seen);
    let stdout = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            lines.lock().unwrap().push(line.unwrap());
        }
    });
    wait_for("the follower to show the first half", Duration::from_secs(120), || {
        let half = seen.lock().unwrap().iter().any(|l| l == "line 300 of 600");
        async move { half.then_some(()) }
    })
    .await;
    // Away for 15 s: three times what five quick resumes used to survive.
    fleet.restart_api(Duration::from_secs(15)).await;

    let quit = quitter.wait_with_output().unwrap();
    let quit_err = String::from_utf8_lossy(&quit.stderr);
    assert_eq!(quit.status.code(), Some(3), "{quit_err}");
    assert!(quit_err.contains("could not be resumed") && quit_err.contains("--give-up-after"), "{quit_err}");

    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = follower.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the follower did not end: {:?}", seen.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    reader.join().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut follower.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let numbered: Vec<String> = seen.lock().unwrap().iter().filter(|l| l.starts_with("line ")).cloned().collect();
    let expected: Vec<String> = (1..=600).map(|i| format!("line {i} of 600")).collect();
    assert_eq!(numbered, expected, "every line exactly once, in order");

    // A reader that stops early ends slipway quietly (SIGPIPE, 141) or
    // finds it done (0), never with a panic.
    let url = fleet.url.clone();
    let piped = tokio::process::Command::new("bash")
        .args(["-c", &format!("set -o pipefail; {:?} logs -f {build} | head -1", env!("CARGO_BIN_EXE_slipway"))])
        .env("SLIPWAY_URL", url)
        .env("SLIPWAY_TOKEN", &user)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(matches!(piped.status.code(), Some(0 | 141)), "{:?}: {stderr}", piped.status);
    assert_eq!(String::from_utf8_lossy(&piped.stdout).lines().count(), 1);
    assert!(!stderr.contains("panicked") && stderr.trim().is_empty(), "{stderr}");
}

/// Kills a process by id when the test ends, however it ends.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: a signal to a child of this test, by its id.
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

/// A submit refused because the queue is full exits 5, apart from other
/// refusals (1), and says when to try again (the answer's `Retry-After`).
#[tokio::test]
async fn a_full_queue_exits_5_and_shows_when_to_try_again() {
    let fleet = Fleet::start_with(None, &[("QUEUE_SIZE", "1")], false).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let demo = demo.to_str().unwrap();
    let first = fleet.slipway(&user, &["deploy", "first", "-f", demo]).await;
    assert_eq!(first.code, 0, "{first:#?}");
    let refused = fleet.slipway(&user, &["deploy", "second", "-f", demo]).await;
    assert_eq!(refused.code, 5, "{refused:#?}");
    assert!(refused.stderr.starts_with("slipway: error queue_full (HTTP 503): "), "{refused:#?}");
    assert!(refused.stderr.contains("(Retry-After: 30; try again in 30 s)"), "{refused:#?}");
    let refused = fleet.slipway(&user, &["--output", "json", "deploy", "second", "-f", demo]).await;
    assert_eq!(refused.code, 5, "{refused:#?}");
    let body: Value = serde_json::from_str(refused.stderr.trim()).unwrap();
    assert_eq!((body["error"].as_str(), body["retry_after"].as_str()), (Some("queue_full"), Some("30")), "{body}");
}

/// A loopback TCP proxy to `port` that can go silent as a vanished host
/// does: while silenced, the connections it holds pass nothing more and are
/// not closed, and new ones are accepted and never answered.
struct SilentProxy {
    url: String,
    silence: tokio::sync::watch::Sender<bool>,
    silenced: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SilentProxy {
    async fn start(port: u16) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (silence, quiet) = tokio::sync::watch::channel(false);
        let silenced = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = std::sync::Arc::clone(&silenced);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                if *quiet.borrow() {
                    held.push(client);
                    continue;
                }
                let mut quiet = quiet.clone();
                let count = std::sync::Arc::clone(&count);
                tokio::spawn(async move {
                    let Ok(upstream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut up_read, mut up_write) = upstream.into_split();
                    tokio::select! {
                        _ = async {
                            tokio::try_join!(
                                tokio::io::copy(&mut client_read, &mut up_write),
                                tokio::io::copy(&mut up_read, &mut client_write)
                            )
                        } => return,
                        _ = quiet.wait_for(|q| *q) => count.fetch_add(1, Ordering::SeqCst),
                    };
                    // Silent from now on, and open: the client hears nothing.
                    let _held = (client_read, client_write, up_read, up_write);
                    std::future::pending::<()>().await;
                });
            }
        });
        Self { url, silence, silenced }
    }
}

/// A log stream that goes silent without closing (the api's host gone from
/// the network: no FIN, no RST, no keep-alive) counts as cut after 45 s and
/// is resumed, instead of holding `logs -f` forever.
#[tokio::test]
async fn logs_follow_resumes_a_stream_that_went_silent_without_closing() {
    use std::io::BufRead as _;
    use std::process::Stdio;
    use std::sync::atomic::Ordering;
    let source = tempfile::tempdir().unwrap();
    printing_source(source.path(), SIX_HUNDRED_LINES);
    let fleet = Fleet::start(Some(source.path())).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let accepted = fleet.slipway(&user, &["--output", "json", "deploy", "quiet", "-f", demo.to_str().unwrap()]).await;
    assert_eq!(accepted.code, 0, "{accepted:#?}");
    let build = accepted.json()["build_id"].as_str().unwrap().to_owned();
    let port: u16 = fleet.url.rsplit(':').next().unwrap().parse().unwrap();
    let proxy = SilentProxy::start(port).await;

    let mut follower = fleet
        .command(&user, &["logs", "-f", &build])
        .env("SLIPWAY_URL", &proxy.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _reap = KillOnDrop(follower.id());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let lines = std::sync::Arc::clone(&seen);
    let stdout = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            lines.lock().unwrap().push(line.unwrap());
        }
    });
    wait_for("the follower to show the first half", Duration::from_secs(120), || {
        let half = seen.lock().unwrap().iter().any(|l| l == "line 300 of 600");
        async move { half.then_some(()) }
    })
    .await;
    // The follower's stream goes silent; new connections pass again.
    proxy.silence.send_replace(true);
    wait_for("the proxy to silence the stream", Duration::from_secs(10), || {
        let silent = proxy.silenced.load(Ordering::SeqCst) >= 1;
        async move { silent.then_some(()) }
    })
    .await;
    proxy.silence.send_replace(false);

    let deadline = std::time::Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(status) = follower.try_wait().unwrap() {
            break status;
        }
        let shown = seen.lock().unwrap().len();
        assert!(std::time::Instant::now() < deadline, "the follower is held by a silent stream ({shown} lines)");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    reader.join().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut follower.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let numbered: Vec<String> = seen.lock().unwrap().iter().filter(|l| l.starts_with("line ")).cloned().collect();
    let expected: Vec<String> = (1..=600).map(|i| format!("line {i} of 600")).collect();
    assert_eq!(numbered, expected, "every line exactly once, in order");
}
