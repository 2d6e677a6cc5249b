//! Daemonizing with a readiness pipe: the parent returns only when the child reports that the
//! mount is live (exit 0) or why it could not mount (exit 1, the child's one-line reason).

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a failure went up the pipe: the parent prints it, so the child must not as well.
static FAILURE_REPORTED: AtomicBool = AtomicBool::new(false);

/// Did this process hand its failure to a waiting parent (which prints it)?
pub fn failure_reported() -> bool {
    FAILURE_REPORTED.load(Ordering::SeqCst)
}

/// The child's end: report readiness or failure exactly once.
pub struct Readiness {
    pipe: Option<std::fs::File>,
}

impl Readiness {
    /// For `--foreground`: nobody waits.
    pub fn none() -> Self {
        Readiness { pipe: None }
    }

    pub fn ready(&mut self) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(b"OK\n");
        }
    }

    pub fn failed(&mut self, msg: &str) {
        if let Some(mut p) = self.pipe.take() {
            FAILURE_REPORTED
                .store(writeln!(p, "ERR {}", msg.replace('\n', " ")).is_ok(), Ordering::SeqCst);
        }
    }

    /// Like `failed`, for a wrong source (endpoint, credentials, bucket): the parent exits 2.
    pub fn refused(&mut self, msg: &str) {
        if let Some(mut p) = self.pipe.take() {
            FAILURE_REPORTED
                .store(writeln!(p, "REFUSED {}", msg.replace('\n', " ")).is_ok(), Ordering::SeqCst);
        }
    }

    pub fn is_daemon(&self) -> bool {
        self.pipe.is_some()
    }
}

/// Fork. In the parent this waits and exits the process; in the child it returns the
/// readiness handle. Must run before any thread is started.
pub fn daemonize() -> Readiness {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        eprintln!("zarr-mount: cannot create a pipe: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    // SAFETY: both fds are fresh and owned by us from here on.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no threads exist yet, so fork is safe.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!("zarr-mount: cannot fork: {}", std::io::Error::last_os_error());
            std::process::exit(1);
        }
        0 => {
            drop(rd);
            // SAFETY: setsid in the fresh child detaches from the terminal's session.
            unsafe { libc::setsid() };
            Readiness { pipe: Some(std::fs::File::from(wr)) }
        }
        _child => {
            drop(wr);
            let mut msg = String::new();
            let _ = std::fs::File::from(rd).read_to_string(&mut msg);
            match msg.lines().next() {
                Some("OK") => std::process::exit(0),
                Some(line) if line.starts_with("REFUSED ") => {
                    eprintln!("zarr-mount: {}", &line["REFUSED ".len()..]);
                    std::process::exit(2);
                }
                Some(line) => {
                    eprintln!("zarr-mount: {}", line.strip_prefix("ERR ").unwrap_or(line));
                    std::process::exit(1);
                }
                None => {
                    eprintln!("zarr-mount: the daemon exited before the mount was ready (run with --foreground to see why)");
                    std::process::exit(1);
                }
            }
        }
    }
}

/// After readiness: stdin from /dev/null, stdout and stderr to the log file or /dev/null, so
/// the daemon holds no pipe of whoever started it.
pub fn detach_stdio(log_file: Option<&std::path::Path>) {
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null");
    let log =
        log_file.and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    use std::os::fd::AsRawFd;
    if let Ok(null) = &null {
        // SAFETY: dup2 onto the standard descriptors with valid source fds.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            let out = log.as_ref().map(|l| l.as_raw_fd()).unwrap_or(null.as_raw_fd());
            libc::dup2(out, 1);
            libc::dup2(out, 2);
        }
    }
}
