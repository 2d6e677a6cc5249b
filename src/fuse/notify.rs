//! The systemd notification protocol (sd_notify(3)) without libsystemd: one datagram per
//! message to the socket named by `$NOTIFY_SOCKET` (a path, or an abstract name written with a
//! leading '@'). Without `$NOTIFY_SOCKET` every call is a no-op, so a daemon started by hand,
//! by mount(8) or by a test behaves exactly as before.
//!
//! Messages sent by zarr-mount:
//! - `READY=1` (+ `STATUS=mounted SOURCE on MNT`, `MAINPID=`) once the FUSE mount is live;
//! - `STATUS=...` for progress and, with `--stats-interval`, a one-line counter summary;
//! - `STOPPING=1` when shutdown starts (signal or external unmount);
//! - `WATCHDOG=1` every half `$WATCHDOG_USEC` when the unit sets `WatchdogSec=`.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::OnceLock;
use std::time::Duration;

/// Where notifications go; `None` when `$NOTIFY_SOCKET` is unset, empty or unusable.
struct Target {
    sock: UnixDatagram,
    addr: SocketAddr,
}

static TARGET: OnceLock<Option<Target>> = OnceLock::new();

/// Parse a `$NOTIFY_SOCKET` value into a socket address.
pub fn socket_addr(value: &str) -> std::io::Result<SocketAddr> {
    if let Some(name) = value.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes())
    } else if value.starts_with('/') {
        SocketAddr::from_pathname(value)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "NOTIFY_SOCKET must be an absolute path or @abstract",
        ))
    }
}

fn target() -> Option<&'static Target> {
    TARGET
        .get_or_init(|| {
            let value = std::env::var("NOTIFY_SOCKET").ok().filter(|v| !v.is_empty())?;
            let addr = match socket_addr(&value) {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "NOTIFY_SOCKET ignored");
                    return None;
                }
            };
            match UnixDatagram::unbound() {
                Ok(sock) => Some(Target { sock, addr }),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot create the notification socket");
                    None
                }
            }
        })
        .as_ref()
}

/// True when a service manager is listening (`$NOTIFY_SOCKET` set).
pub fn enabled() -> bool {
    target().is_some()
}

/// Send one raw notification (newline-separated `KEY=VALUE` lines). Failures are logged at
/// debug level and otherwise ignored: notification is advisory.
pub fn send(msg: &str) {
    if let Some(t) = target() {
        if let Err(e) = t.sock.send_to_addr(msg.as_bytes(), &t.addr) {
            tracing::debug!(error = %e, "sd_notify failed");
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// The mount is live.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={}\nMAINPID={}", one_line(status), std::process::id()));
}

pub fn status(status: &str) {
    send(&format!("STATUS={}", one_line(status)));
}

/// Shutdown has begun.
pub fn stopping(status: &str) {
    send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
}

/// Half the watchdog interval the service manager asked for, if it asked us (`$WATCHDOG_USEC`,
/// with `$WATCHDOG_PID` absent or ours).
pub fn watchdog_interval() -> Option<Duration> {
    if !enabled() {
        return None;
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

pub fn watchdog() {
    send("WATCHDOG=1");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_abstract_addresses() {
        let a = socket_addr("/run/systemd/notify").unwrap();
        assert_eq!(a.as_pathname().unwrap(), std::path::Path::new("/run/systemd/notify"));
        let b = socket_addr("@zarr-mount-test").unwrap();
        use std::os::linux::net::SocketAddrExt;
        assert_eq!(b.as_abstract_name().unwrap(), b"zarr-mount-test");
        assert!(socket_addr("relative/path").is_err());
    }

    #[test]
    fn abstract_socket_round_trip() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("zarr-mount-notify-unit-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        let tx = UnixDatagram::unbound().unwrap();
        tx.send_to_addr(b"READY=1", &socket_addr(&format!("@{name}")).unwrap()).unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
