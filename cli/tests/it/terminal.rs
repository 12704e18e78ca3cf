//! The built `slipway` on a real pseudo-terminal (as in tmux), against the
//! real api and worker: what a build's log says cannot drive the terminal
//! it is shown on, while a pipe and `--raw` get its bytes unchanged; Ctrl-C
//! while following clears the progress line and says how to follow again.

use crate::common;

use common::pty::Pty;
use common::{demo_file, failing_source, printing_source, wait_for, Fleet, RUN_DEADLINE};
use serde_json::Value;
use std::time::Duration;

/// A deploy whose log sets the window title (OSC 0), writes the clipboard
/// (OSC 52), clears the screen (CSI 2J), overwrites a line (CR), and
/// carries a C1 CSI (U+009B) and a right-to-left override (U+202E).
const HOSTILE: &str = r#"printf 'start of the log\n'
printf 'title \033]0;pwned-title\007 after\n'
printf 'clipboard \033]52;c;cHduZWQ=\007 after\n'
printf 'clear \033[2J\033[H after\n'
printf 'progress 10%%\rprogress 100%%\n'
printf 'c1 \302\23331m after\n'
printf 'bidi \342\200\256 reversed\n'
printf 'end of the log\n'"#;

/// The hostile sequences as the build wrote them.
const RAW: [&str; 6] = [
    "title \x1b]0;pwned-title\x07 after",
    "clipboard \x1b]52;c;cHduZWQ=\x07 after",
    "clear \x1b[2J\x1b[H after",
    "progress 10%\rprogress 100%",
    "c1 \u{9b}31m after",
    "bidi \u{202e} reversed",
];

/// The same, as a terminal shows them.
const SHOWN: [&str; 6] = [
    r"title \x1b]0;pwned-title\x07 after",
    r"clipboard \x1b]52;c;cHduZWQ=\x07 after",
    r"clear \x1b[2J\x1b[H after",
    r"progress 10%\x0dprogress 100%",
    r"c1 \u{9b}31m after",
    r"bidi \u{202e} reversed",
];

/// Panics when `out` holds a byte or character a terminal acts on, other
/// than newline and tab: C0 controls (ESC, BEL, CR…), DEL, C1, bidi controls.
fn assert_inert(what: &str, out: &[u8]) {
    let text = String::from_utf8(out.to_vec()).unwrap_or_else(|e| panic!("{what}: not UTF-8 ({e}): {out:?}"));
    let active = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    if let Some((at, c)) = text.char_indices().find(|&(_, c)| active(c)) {
        panic!("{what}: {c:?} at {at} reaches the terminal: {text:?}");
    }
}

#[tokio::test]
async fn a_build_log_cannot_drive_the_terminal_it_is_shown_on_but_a_pipe_and_raw_get_its_bytes() {
    let source = tempfile::tempdir().unwrap();
    printing_source(source.path(), HOSTILE);
    let fleet = Fleet::start(Some(source.path())).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let demo = demo.to_str().unwrap();
    let accepted = fleet.slipway(&user, &["--output", "json", "deploy", "hostile", "-f", demo]).await;
    assert_eq!(accepted.code, 0, "{accepted:#?}");
    let build = accepted.json()["build_id"].as_str().unwrap().to_owned();

    // Piped: the bytes as the build wrote them.
    let piped = fleet.slipway(&user, &["logs", "-f", &build]).await;
    assert_eq!(piped.code, 0, "{piped:#?}");
    for raw in RAW {
        assert!(piped.stdout.contains(raw), "{raw:?} not in {:?}", piped.stdout);
    }

    // On a terminal, followed and read whole: every control shown, none acted on.
    for args in [vec!["logs", "-f", &build], vec!["logs", &build]] {
        let (status, out) = Pty::spawn(fleet.command(&user, &args)).wait(RUN_DEADLINE);
        assert_eq!(status.code(), Some(0), "{args:?}: {:?}", String::from_utf8_lossy(&out));
        assert_inert(&format!("{args:?}"), &out);
        let text = String::from_utf8(out).unwrap();
        for shown in SHOWN {
            assert!(text.contains(shown), "{args:?}: {shown:?} not in {text:?}");
        }
    }

    // --raw on a terminal: the bytes as written.
    let (status, out) = Pty::spawn(fleet.command(&user, &["--raw", "logs", "-f", &build])).wait(RUN_DEADLINE);
    assert_eq!(status.code(), Some(0));
    let text = String::from_utf8_lossy(&out);
    for raw in RAW {
        assert!(text.contains(raw), "--raw: {raw:?} not in {text:?}");
    }

    // JSON lines on a terminal: the same texts, with no control left raw.
    let (status, out) =
        Pty::spawn(fleet.command(&user, &["--output", "json", "logs", "-f", &build])).wait(RUN_DEADLINE);
    assert_eq!(status.code(), Some(0));
    assert_inert("--output json logs -f", &out);
    let texts: String = String::from_utf8(out)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(texts, piped.stdout);

    // deploy --follow on a terminal: the log above the spinner, and the
    // spinner's own line, escaped; the spinner's own drawing is all that
    // writes escape sequences.
    let (status, out) =
        Pty::spawn(fleet.command(&user, &["deploy", "hostile", "-f", demo, "--follow"])).wait(RUN_DEADLINE);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(status.code(), Some(0), "{text:?}");
    for forbidden in ["\x1b]", "\x07", "\x1b[2J", "\x1b[H", "\u{9b}", "\u{202e}", "10%\rprogress"] {
        assert!(!text.contains(forbidden), "{forbidden:?} reaches the terminal: {text:?}");
    }
    for shown in SHOWN {
        assert!(text.contains(shown), "deploy --follow: {shown:?} not in {text:?}");
    }
}

/// `text` without CSI escape sequences and carriage returns: what remains
/// visible of a terminal's output.
fn visible(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' if chars.peek() == Some(&'[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

#[tokio::test]
async fn ctrl_c_while_following_clears_the_progress_line_and_says_how_to_follow_again() {
    let source = tempfile::tempdir().unwrap();
    failing_source(source.path());
    let fleet = Fleet::start(Some(source.path())).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let demo = demo.to_str().unwrap();

    // deploy --follow: a spinner whose line shows the latest log line.
    let mut pty = Pty::spawn(fleet.command(&user, &["deploy", "slow", "-f", demo, "--follow"]));
    wait_for("the spinner to show the log", Duration::from_secs(120), || {
        let seen = pty.shows(": a long deploy starts");
        async move { seen.then_some(()) }
    })
    .await;
    pty.type_keys(b"\x03");
    let (status, out) = pty.wait(Duration::from_secs(30));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}: {text:?}");
    let build = text.split("deployment slow: build ").nth(1).and_then(|t| t.split(' ').next()).unwrap().to_owned();
    let again = format!("slipway logs -f {build}");
    let said = format!("slipway: stopped following build {build} (the build goes on); follow it again with: {again}\n");
    assert!(text.ends_with(&said), "{text:?}");
    // Cleared: after the spinner's last line, its line is erased and
    // nothing of it is left visible before the sentence.
    let before = &text[..text.len() - said.len()];
    let spinner = before.rfind(": a long deploy starts").unwrap();
    let erased = before.rfind("\x1b[2K").unwrap_or(0);
    assert!(erased > spinner, "the progress line is not cleared: {text:?}");
    assert_eq!(visible(&before[erased..]), "", "{text:?}");

    // logs -f: the same, without a spinner.
    let mut pty = Pty::spawn(fleet.command(&user, &["logs", "-f", &build]));
    wait_for("the log on the terminal", Duration::from_secs(60), || {
        let seen = pty.shows("a long deploy starts");
        async move { seen.then_some(()) }
    })
    .await;
    pty.type_keys(b"\x03");
    let (status, out) = pty.wait(Duration::from_secs(30));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(status.code(), Some(130), "{text:?}");
    assert!(text.ends_with(&said), "{text:?}");

    // The build went on; the command shown follows it to its end.
    let view = fleet.slipway(&user, &["--output", "json", "logs", &build]).await.json();
    assert_eq!(view["status"], "running", "{view}");
    assert_eq!(fleet.slipway(&user, &["cancel", &build]).await.code, 0);
    let words: Vec<&str> = again.split(' ').collect();
    assert_eq!(words[0], "slipway");
    let followed = fleet.slipway(&user, &words[1..]).await;
    assert_eq!(followed.code, 4, "{followed:#?}");
    assert!(followed.stderr.contains(&format!("build {build} cancelled")), "{followed:#?}");
}
