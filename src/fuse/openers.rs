//! Which process opened each file handle that is open for writing. FLUSH uses it to tell
//! the opener's close() apart from the close of a copy of the descriptor.
//!
//! The kernel sends FLUSH for every close() of a descriptor. That includes the copies a child
//! process gets: a started program closes them at exec (close-on-exec), and a forked child
//! closes them when it exits. If each FLUSH wrote the buffer back, then any thread of a writer's
//! process that started a program while a file was half-written would store the half-written
//! file. Readers on other machines would see a torn chunk until the real close. So a FLUSH
//! from another process writes nothing back. The opener's own close writes back as before.
//! When a child holds the last copy (a shell redirect, `Popen(stdout=f)`), RELEASE writes
//! back what is left once the last copy closes.
//!
//! Processes are compared by thread group, because the kernel gives the pid of the calling
//! thread. A pid of 0 (the caller is in a pid namespace this daemon cannot see) or a process
//! already gone counts as the opener, which keeps the old behaviour: write back at close.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::locks::lock;

/// The process that opened a handle: the calling thread's pid and its thread group.
#[derive(Debug, Clone, Copy)]
struct Opener {
    pid: u32,
    tgid: Option<u32>,
}

#[derive(Default)]
pub struct Openers {
    by_fh: Mutex<HashMap<u64, Opener>>,
}

impl Openers {
    /// Handle `fh` was opened for writing by thread `pid`.
    pub fn opened(&self, fh: u64, pid: u32) {
        let opener = Opener { pid, tgid: thread_group(pid) };
        lock(&self.by_fh).insert(fh, opener);
    }

    /// Whether a close of `fh` by thread `pid` is the opener's own, which writes back. True
    /// for a handle with no recorded opener: a reader, or one opened before this map knew it.
    pub fn closed_by_opener(&self, fh: u64, pid: u32) -> bool {
        let Some(opener) = lock(&self.by_fh).get(&fh).copied() else { return true };
        if pid == opener.pid {
            return true;
        }
        match (opener.tgid, thread_group(pid)) {
            (Some(opened_by), Some(closed_by)) => opened_by == closed_by,
            _ => true,
        }
    }

    /// The handle is released: forget its opener.
    pub fn released(&self, fh: u64) {
        lock(&self.by_fh).remove(&fh);
    }
}

/// The thread group (process id) of thread `pid`, from `/proc/<pid>/status`.
fn thread_group(pid: u32) -> Option<u32> {
    if pid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_tgid(&status)
}

fn parse_tgid(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_group_is_read_from_proc() {
        assert_eq!(parse_tgid("Name:\tx\nUmask:\t0022\nTgid:\t4242\nNgid:\t0\n"), Some(4242));
        assert_eq!(parse_tgid("Name:\tx\n"), None);
        let me = std::process::id();
        assert_eq!(thread_group(me), Some(me));
        assert_eq!(thread_group(0), None);
    }

    #[test]
    fn only_another_live_process_is_not_the_opener() {
        let openers = Openers::default();
        let me = std::process::id();
        openers.opened(7, me);
        assert!(openers.closed_by_opener(7, me));
        assert!(openers.closed_by_opener(8, 12345), "unknown handles close as before");

        // A thread of the same process that is still running.
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            stop_rx.recv().ok();
        });
        let tid = rx.recv().unwrap();
        assert!(openers.closed_by_opener(7, tid), "another thread of the opener");
        stop_tx.send(()).unwrap();
        t.join().unwrap();

        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(!openers.closed_by_opener(7, child.id()), "a child process is not the opener");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(openers.closed_by_opener(7, child.id()), "a process gone counts as the opener");
        assert!(openers.closed_by_opener(7, 0), "pid 0: outside our pid namespace");

        openers.released(7);
        assert!(openers.closed_by_opener(7, 12345));
    }
}
