//! What reaches a terminal. Everything `slipway` prints that came from the
//! api or a build (log text, error messages, names, reasons, claims) goes
//! through [`Screen`]: on a terminal, the characters a terminal would act on
//! are shown as visible escapes instead ([`escape`]), so a build's output
//! cannot set the window title, write the clipboard, clear the screen or
//! overwrite lines. With `--raw`, or when the output is not a terminal (a
//! pipe, a file), the text is written unchanged.

use serde_json::Value;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};

/// Whether each output stream gets escaped text: `true` when it is a
/// terminal (`std::io::IsTerminal`, `isatty(3)`) and `--raw` was not given.
#[derive(Clone, Copy, Debug)]
pub struct Screen {
    /// Standard output is escaped.
    pub out: bool,
    /// Standard error is escaped.
    pub err: bool,
}

impl Screen {
    /// The streams of this process as they are now; `raw` (`--raw`) turns escaping off.
    pub fn detect(raw: bool) -> Self {
        Self { out: !raw && std::io::stdout().is_terminal(), err: !raw && std::io::stderr().is_terminal() }
    }

    /// `text` as it may be written to standard output.
    pub fn out<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.out {
            escape(text)
        } else {
            Cow::Borrowed(text)
        }
    }

    /// `text` as it may be written to standard error.
    pub fn err<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.err {
            escape(text)
        } else {
            Cow::Borrowed(text)
        }
    }

    /// Writes `text` and a newline to standard output.
    pub fn println(&self, text: &str) {
        self.print(&format!("{text}\n"));
    }

    /// Writes `text` to standard output and flushes it. A failed write is
    /// ignored: a reader that went away ends the process by `SIGPIPE`.
    pub fn print(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(self.out(text).as_bytes());
        let _ = out.flush();
    }

    /// Writes `text` and a newline to standard error.
    pub fn eprintln(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}", self.err(text));
    }

    /// `value` as one line of JSON for standard output. JSON already
    /// escapes C0 controls; on a terminal, DEL, C1 and bidirectional
    /// controls are written as `\u` escapes too (the document means the same).
    pub fn json(&self, value: &Value) -> String {
        let text = value.to_string();
        if !self.out || !text.chars().any(|c| c == '\u{7f}' || is_c1(c) || is_bidi_control(c)) {
            return text;
        }
        let mut safe = String::with_capacity(text.len() + 16);
        for c in text.chars() {
            if c == '\u{7f}' || is_c1(c) || is_bidi_control(c) {
                let _ = write!(safe, "\\u{:04x}", c as u32);
            } else {
                safe.push(c);
            }
        }
        safe
    }
}

/// A C1 control, U+0080 to U+009F (U+009B is a one-character CSI to some terminals).
fn is_c1(c: char) -> bool {
    ('\u{80}'..='\u{9f}').contains(&c)
}

/// The bidirectional embedding, override and isolate controls (U+202A to
/// U+202E, U+2066 to U+2069), which make text read differently from what it is.
fn is_bidi_control(c: char) -> bool {
    ('\u{202a}'..='\u{202e}').contains(&c) || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `text` with every character a terminal would act on shown visibly:
/// C0 controls but newline and tab, and DEL, as `\x` and two hex digits
/// (ESC is `\x1b`, a carriage return not followed by a newline `\x0d`,
/// BEL `\x07`); C1 and bidirectional controls as `\u{…}` (`\u{9b}`,
/// `\u{202e}`). A carriage return before a newline (CRLF) is kept. The
/// text is otherwise unchanged, so escaping twice changes nothing more.
pub fn escape(text: &str) -> Cow<'_, str> {
    let mut chars = text.char_indices().peekable();
    let mut escaped: Option<String> = None;
    while let Some((at, c)) = chars.next() {
        let visible = match c {
            '\n' | '\t' => None,
            '\r' if chars.peek().is_some_and(|&(_, next)| next == '\n') => None,
            '\u{0}'..='\u{1f}' | '\u{7f}' => Some(format!("\\x{:02x}", c as u32)),
            c if is_c1(c) || is_bidi_control(c) => Some(format!("\\u{{{:x}}}", c as u32)),
            _ => None,
        };
        match (visible, &mut escaped) {
            (Some(v), Some(out)) => out.push_str(&v),
            (Some(v), None) => {
                let mut out = String::with_capacity(text.len() + 16);
                out.push_str(&text[..at]);
                out.push_str(&v);
                escaped = Some(out);
            }
            (None, Some(out)) => out.push(c),
            (None, None) => {}
        }
    }
    escaped.map_or(Cow::Borrowed(text), Cow::Owned)
}

/// Bytes that should be UTF-8 (a document as the api sent it) as text:
/// each byte that is not part of valid UTF-8 as `\x` and two hex digits.
pub fn lossless_text(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_control_a_terminal_acts_on_is_shown_and_newlines_and_tabs_are_kept() {
        let hostile = "title\x1b]0;pwned\x07 clip\x1b]52;c;ZXZpbA==\x1b\\ clear\x1b[2J\x1b[H over\rwrite\r\n\
                       tab\there del\x7f csi\u{9b}31m rlo\u{202e}txt\u{2066} nul\0 end\n";
        let shown = escape(hostile);
        assert_eq!(
            shown,
            "title\\x1b]0;pwned\\x07 clip\\x1b]52;c;ZXZpbA==\\x1b\\ clear\\x1b[2J\\x1b[H over\\x0dwrite\r\n\
             tab\there del\\x7f csi\\u{9b}31m rlo\\u{202e}txt\\u{2066} nul\\x00 end\n"
        );
        assert!(!shown.chars().any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r'));
        assert_eq!(escape(&shown), shown, "escaping twice changes nothing more");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for text in ["", "building web…\n", "naïve ünïcode and 日本語\twith tabs\r\n", "C:\\path\\x1b"] {
            assert!(matches!(escape(text), Cow::Borrowed(t) if t == text), "{text:?}");
        }
    }

    #[test]
    fn a_lone_carriage_return_at_the_end_is_shown() {
        assert_eq!(escape("50%\r"), "50%\\x0d");
    }

    #[test]
    fn invalid_utf8_is_shown_as_hex_bytes() {
        assert_eq!(lossless_text(b"ok \xff\xfe end \xe2\x82"), "ok \\xff\\xfe end \\xe2\\x82");
        assert_eq!(lossless_text("fine ü".as_bytes()), "fine ü");
    }

    #[test]
    fn json_on_a_terminal_escapes_del_c1_and_bidi_controls_and_means_the_same() {
        let screen = Screen { out: true, err: true };
        let value = json!({ "text": "a\x1b[2Jb\x7fc\u{9b}d\u{202e}e" });
        let line = screen.json(&value);
        assert!(!line.chars().any(|c| c.is_control() || is_bidi_control(c)), "{line}");
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), value);
        let piped = Screen { out: false, err: false };
        assert_eq!(piped.json(&value), value.to_string());
    }
}
