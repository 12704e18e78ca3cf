//! A real pseudo-terminal for the CLI's tests (`openpty(3)`): the program
//! runs as the leader of a session of its own with the terminal as its
//! controlling terminal and standard input, output and error, as in a shell
//! in tmux. Output processing is off (no `\n` to `\r\n`), and so is echo,
//! so the bytes read are exactly those the program wrote; typing Ctrl-C
//! (`\x03`) makes the terminal send `SIGINT` to it, as a keyboard does.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A program running on a pseudo-terminal, its output gathered as it comes.
pub struct Pty {
    child: Child,
    master: File,
    output: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Pty {
    /// Starts `cmd` on a new 120×40 terminal.
    pub fn spawn(mut cmd: Command) -> Self {
        let (mut master, mut slave) = (-1, -1);
        let size = libc::winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two descriptors it opened into the locals.
        let opened = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (master, slave) = unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        // SAFETY: a termios read and written back on a descriptor we own.
        unsafe {
            let mut modes: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(std::os::fd::AsRawFd::as_raw_fd(&slave), &mut modes), 0);
            modes.c_oflag &= !libc::OPOST;
            modes.c_lflag &= !(libc::ECHO | libc::ECHOCTL);
            assert_eq!(libc::tcsetattr(std::os::fd::AsRawFd::as_raw_fd(&slave), libc::TCSANOW, &modes), 0);
        }
        cmd.stdin(slave.try_clone().unwrap()).stdout(slave.try_clone().unwrap()).stderr(slave);
        cmd.env("TERM", "xterm-256color");
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("the program starts on the terminal");
        // The command holds our copies of the terminal's side: close them,
        // so that reading ends when the program is gone.
        drop(cmd);
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut from = master.try_clone().unwrap();
        let into = Arc::clone(&output);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // EIO once every holder of the terminal's side has closed it.
            while let Ok(n @ 1..) = from.read(&mut buf) {
                into.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Self { child, master, output, reader: Some(reader) }
    }

    /// What the program has written so far.
    pub fn output(&self) -> Vec<u8> {
        self.output.lock().unwrap().clone()
    }

    /// Whether the output so far contains `needle`.
    pub fn shows(&self, needle: &str) -> bool {
        self.output().windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    /// Types `keys` on the terminal's keyboard (`b"\x03"` is Ctrl-C).
    pub fn type_keys(&mut self, keys: &[u8]) {
        self.master.write_all(keys).unwrap();
    }

    /// Waits up to `deadline` for the program to end (polled; it is killed
    /// past the deadline), then returns its status and all of its output.
    pub fn wait(mut self, deadline: Duration) -> (ExitStatus, Vec<u8>) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the program did not end within {deadline:?}; it wrote: {:?}",
                    String::from_utf8_lossy(&self.output())
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader ends once it has read everything and the terminal's
        // last holder closed it.
        let reader = self.reader.take().unwrap();
        let start = Instant::now();
        while !reader.is_finished() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        (status, self.output())
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
