//! One daemon per cache directory: an exclusive `flock` on `DIR/lock`, taken when the command
//! line is checked and held for the daemon's life.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// An exclusive lock on a cache directory, held for the daemon's life (the fd is inherited
/// across the daemonizing fork, and the lock with it).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Create `dir` if needed and lock it; the error is one line for the user.
    pub fn acquire(dir: &Path) -> Result<DirLock, String> {
        let shown = dir.display();
        std::fs::create_dir_all(dir).map_err(|e| format!("--cache-dir {shown}: {e}"))?;
        let dir = std::fs::canonicalize(dir).map_err(|e| format!("--cache-dir {shown}: {e}"))?;
        let path = dir.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("--cache-dir {shown}: {e}"))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who =
                    if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
                return Err(format!(
                    "--cache-dir {shown}: in use by another zarr-mount{who}; each mount needs its own cache directory"
                ));
            }
            return Err(format!("--cache-dir {shown}: cannot lock: {err}"));
        }
        let lock = DirLock { _file: file, dir };
        lock.note_pid();
        Ok(lock)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write our pid into the lock file, for the message a second daemon prints (the lock
    /// itself is what counts). Called again after the daemonizing fork.
    pub fn note_pid(&self) {
        use std::io::Seek;
        let mut f = &self._file;
        let _ = f.set_len(0);
        let _ = f.seek(std::io::SeekFrom::Start(0));
        let _ = writeln!(f, "{}", std::process::id());
    }
}
