//! Where the access log's lines go: standard error, in the layout of the daemon's other log
//! lines (tracing's: time, level, target, fields), gathered and written in batches. A request
//! pays for formatting its line into a shared buffer; a thread writes the buffer out at most
//! `FLUSH_DELAY` after the first line in it, and a request that fills it to `BATCH` writes it
//! at once. Formatting an event through tracing and writing each line on its own cost about a
//! fifth of a small request's CPU; nginx's `access_log ... buffer= flush=` is the same idea.
//! A daemon killed with SIGKILL loses at most the last `FLUSH_DELAY` of lines.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The target the lines name, as `tracing::info!(target: ...)` would: filters (`RUST_LOG`)
/// switch the access log on and off by it.
pub const TARGET: &str = "zarr_mount::serve::access";

/// The longest a line waits in the buffer.
const FLUSH_DELAY: Duration = Duration::from_millis(20);

/// Bytes of lines that are written at once, by the request that adds the last of them.
const BATCH: usize = 64 << 10;

/// What one line says.
pub struct Line<'a> {
    pub client: SocketAddr,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub bytes: u64,
    pub elapsed: Duration,
    /// False when the client left or a read failed before the body's end.
    pub complete: bool,
}

/// A buffer of formatted lines, the output they go to, and the thread that writes them.
pub struct Lines {
    pending: Mutex<Vec<u8>>,
    /// Held while a batch is written, so that batches reach the output in order.
    out: Mutex<Box<dyn Write + Send>>,
    flusher: OnceLock<std::thread::Thread>,
}

impl Lines {
    pub fn new(out: Box<dyn Write + Send>) -> Arc<Lines> {
        let lines = Arc::new(Lines {
            pending: Mutex::new(Vec::with_capacity(BATCH)),
            out: Mutex::new(out),
            flusher: OnceLock::new(),
        });
        let weak = Arc::downgrade(&lines);
        // Without the thread (no threads left?) lines are still written, a batch at a time.
        if let Ok(t) = std::thread::Builder::new()
            .name("zarr-mount-log".into())
            .spawn(move || flush_when_woken(weak))
        {
            let _ = lines.flusher.set(t.thread().clone());
        }
        lines
    }

    /// Add `line`, stamped `now`.
    pub fn push(&self, line: &Line<'_>, now: SystemTime) {
        thread_local! {
            /// One line, formatted before the shared buffer is locked: the HTTP threads
            /// queue on that lock only for a copy.
            static ONE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        ONE.with_borrow_mut(|one| {
            one.clear();
            format_line(one, line, now);
            let mut pending = lock(&self.pending);
            let was_empty = pending.is_empty();
            pending.extend_from_slice(one);
            if pending.len() >= BATCH {
                self.write_out(pending);
            } else if was_empty {
                drop(pending);
                if let Some(t) = self.flusher.get() {
                    t.unpark();
                }
            }
        })
    }

    /// Write every line added so far.
    pub fn flush(&self) {
        self.write_out(lock(&self.pending));
    }

    fn write_out(&self, mut pending: MutexGuard<'_, Vec<u8>>) {
        if pending.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut *pending, Vec::with_capacity(BATCH));
        // Taken before the buffer is let go: the next batch cannot overtake this one.
        let mut out = lock(&self.out);
        drop(pending);
        // A log that cannot be written (a closed stderr) must not fail the request.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        self.flush();
        if let Some(t) = self.flusher.get() {
            t.unpark(); // to find the lines gone and end
        }
    }
}

/// The flushing thread: woken by the first line of an empty buffer, it waits `FLUSH_DELAY` for
/// more and writes them all.
fn flush_when_woken(lines: Weak<Lines>) {
    loop {
        std::thread::park();
        std::thread::sleep(FLUSH_DELAY);
        match lines.upgrade() {
            Some(l) => l.flush(),
            None => return,
        }
    }
}

/// The daemon's access log, or None when the log filter leaves the access target out.
/// Decided once, at the first request: the filter does not change while serving.
pub fn global() -> Option<&'static Lines> {
    static GLOBAL: OnceLock<Option<Arc<Lines>>> = OnceLock::new();
    GLOBAL
        .get_or_init(|| {
            tracing::enabled!(target: TARGET, tracing::Level::INFO)
                .then(|| Lines::new(Box::new(std::io::stderr())))
        })
        .as_deref()
}

/// Write what the access log holds (at shutdown).
pub fn flush_global() {
    if let Some(lines) = global() {
        lines.flush();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `2026-11-29T01:29:53.805468Z  INFO zarr_mount::serve::access: client=... method=... path=...
/// status=... bytes=... ms=0.011 complete=true`: what tracing's default format writes for the
/// same event, so the access lines read like the rest of the log. Numbers are written by
/// `itoa`, not `fmt` (a fifth of the line's cost); `ms` is rounded half up to microseconds.
fn format_line(buf: &mut Vec<u8>, l: &Line<'_>, now: SystemTime) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    let mut n = itoa::Buffer::new();
    padded(buf, year.max(0) as u64, 4);
    buf.push(b'-');
    padded(buf, u64::from(month), 2);
    buf.push(b'-');
    padded(buf, u64::from(day), 2);
    buf.push(b'T');
    padded(buf, of_day / 3600, 2);
    buf.push(b':');
    padded(buf, of_day / 60 % 60, 2);
    buf.push(b':');
    padded(buf, of_day % 60, 2);
    buf.push(b'.');
    padded(buf, u64::from(since.subsec_micros()), 6);
    buf.extend_from_slice(b"Z  INFO ");
    buf.extend_from_slice(TARGET.as_bytes());
    buf.extend_from_slice(b": client=");
    match l.client {
        SocketAddr::V4(a) => {
            for (i, octet) in a.ip().octets().iter().enumerate() {
                if i > 0 {
                    buf.push(b'.');
                }
                buf.extend_from_slice(n.format(*octet).as_bytes());
            }
            buf.push(b':');
            buf.extend_from_slice(n.format(a.port()).as_bytes());
        }
        SocketAddr::V6(a) => {
            let _ = write!(buf, "{a}");
        }
    }
    buf.extend_from_slice(b" method=");
    buf.extend_from_slice(l.method.as_bytes());
    buf.extend_from_slice(b" path=");
    buf.extend_from_slice(l.path.as_bytes());
    buf.extend_from_slice(b" status=");
    buf.extend_from_slice(n.format(l.status).as_bytes());
    buf.extend_from_slice(b" bytes=");
    buf.extend_from_slice(n.format(l.bytes).as_bytes());
    buf.extend_from_slice(b" ms=");
    let micros = (l.elapsed.as_nanos() + 500) / 1000;
    buf.extend_from_slice(n.format(micros / 1000).as_bytes());
    buf.push(b'.');
    padded(buf, (micros % 1000) as u64, 3);
    buf.extend_from_slice(if l.complete { b" complete=true\n" } else { b" complete=false\n" });
}

/// `value` in decimal, zero-padded to `width` digits.
fn padded(buf: &mut Vec<u8>, value: u64, width: usize) {
    let mut n = itoa::Buffer::new();
    let digits = n.format(value).as_bytes();
    buf.resize(buf.len() + width.saturating_sub(digits.len()), b'0');
    buf.extend_from_slice(digits);
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (the "days from civil"
/// inverse from Howard Hinnant's date algorithms).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of the 400-year era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// An output that sends each batch to the test.
    struct Batches(mpsc::Sender<Vec<u8>>);

    impl Write for Batches {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.send(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn line(path: &str) -> Line<'_> {
        Line {
            client: "127.0.0.1:48102".parse().unwrap(),
            method: "GET",
            path,
            status: 200,
            bytes: 4689,
            elapsed: Duration::from_micros(11),
            complete: true,
        }
    }

    #[test]
    fn a_line_reads_as_tracing_writes_the_same_event() {
        let mut buf = Vec::new();
        let now = UNIX_EPOCH + Duration::from_micros(1_795_051_793_805_468);
        format_line(&mut buf, &line("/unsharded/a/c/9/12"), now);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "2026-11-19T01:29:53.805468Z  INFO zarr_mount::serve::access: client=127.0.0.1:48102 \
             method=GET path=/unsharded/a/c/9/12 status=200 bytes=4689 ms=0.011 complete=true\n"
        );
    }

    #[test]
    fn numbers_are_padded_and_rounded_as_tracing_writes_them() {
        let mut buf = Vec::new();
        let now = UNIX_EPOCH + Duration::from_micros(1_000_000_000_000_042);
        let slow = Line {
            client: "[::1]:8080".parse().unwrap(),
            status: 503,
            bytes: 0,
            elapsed: Duration::from_nanos(12_345_678_901),
            complete: false,
            ..line("/")
        };
        format_line(&mut buf, &slow, now);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "2001-09-09T01:46:40.000042Z  INFO zarr_mount::serve::access: client=[::1]:8080 \
             method=GET path=/ status=503 bytes=0 ms=12345.679 complete=false\n"
        );
        let mut buf = Vec::new();
        let fast = Line {
            client: "10.0.0.255:1".parse().unwrap(),
            elapsed: Duration::from_nanos(400),
            ..line("/")
        };
        format_line(&mut buf, &fast, now);
        assert!(String::from_utf8(buf).unwrap().contains(
            " client=10.0.0.255:1 method=GET path=/ status=200 bytes=4689 ms=0.000 complete=true\n"
        ));
    }

    #[test]
    fn dates_are_the_calendars() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(20_818), (2026, 12, 31));
        assert_eq!(civil_from_days(20_819), (2027, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn a_lone_line_is_written_after_the_flush_delay() {
        let (tx, rx) = mpsc::channel();
        let lines = Lines::new(Box::new(Batches(tx)));
        lines.push(&line("/a"), SystemTime::now());
        let batch = rx.recv_timeout(Duration::from_secs(10)).expect("written by the thread");
        assert!(String::from_utf8(batch).unwrap().contains(" path=/a status=200 "));
        // And again: the thread went back to waiting for the next first line.
        lines.push(&line("/b"), SystemTime::now());
        let batch = rx.recv_timeout(Duration::from_secs(10)).expect("written by the thread");
        assert!(String::from_utf8(batch).unwrap().contains(" path=/b status=200 "));
    }

    #[test]
    fn a_full_buffer_is_written_by_the_request_that_fills_it_in_order() {
        let (tx, rx) = mpsc::channel();
        let lines = Lines::new(Box::new(Batches(tx)));
        let now = SystemTime::now();
        let n = 3 * BATCH / 100; // lines of about 150 bytes: four or five batches
        let paths: Vec<String> = (0..n).map(|i| format!("/x/{i}")).collect();
        for p in &paths {
            lines.push(&line(p), now);
        }
        drop(lines); // writes the rest
        let text: String = rx.try_iter().map(|b| String::from_utf8(b).unwrap()).collect();
        let got: Vec<&str> = text
            .lines()
            .map(|l| l.split(" path=").nth(1).unwrap().split(' ').next().unwrap())
            .collect();
        assert_eq!(got, paths);
    }
}
