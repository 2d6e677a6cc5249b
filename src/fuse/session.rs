//! Mounting and the life of a mount: mount, tell whoever waits that we are ready, wait for a
//! signal or an external unmount, write back pending data, unmount.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};

use super::adapter::FuseAdapter;
use super::kernel_mount::{self, KernelMountOptions};
use super::notify;
use super::passed_fd;
use crate::fs::ZarrFs;
use crate::prefetch::kernel_window;

pub struct SessionOptions {
    pub mountpoint: PathBuf,
    pub fs_name: String,
    pub read_only: bool,
    pub allow_other: bool,
    pub threads: usize,
    /// `--read-ahead` (see `MountConfig::read_ahead`).
    pub read_ahead: Option<u64>,
}

/// Mount `fs` and serve it until SIGTERM/SIGINT or an external unmount. `on_ready` runs once
/// the kernel has completed the FUSE handshake (the mount is live).
pub fn serve(
    rt: &tokio::runtime::Runtime,
    fs: Arc<ZarrFs>,
    opts: &SessionOptions,
    on_ready: impl FnOnce(),
) -> Result<(), SessionError> {
    // For fuser's fusermount3 path; the direct mount is kernel_mount's.
    let mut mount_options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype("zarr-mount".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
    ];
    if opts.read_only {
        mount_options.push(MountOption::RO);
    }
    if opts.allow_other {
        mount_options.push(MountOption::DefaultPermissions);
    }
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(opts.threads.max(1));
    let passed = passed_fd::descriptor(&opts.mountpoint);
    // A descriptor per thread is a clone of /dev/fuse, which a daemon handed its connection
    // may not be allowed to open (0600 root on many hosts): then the threads share the one.
    config.clone_fd = opts.threads > 1 && (passed.is_none() || passed_fd::may_open_dev_fuse());

    // Signal handlers go in before the mount exists, so a SIGTERM that arrives while mounting
    // still ends in a clean unmount rather than a dead mount point.
    let signals = {
        let _guard = rt.enter();
        Signals::new().map_err(|e| SessionError(format!("cannot install signal handlers: {e}")))?
    };
    let adapter = FuseAdapter::new(fs.clone(), rt.handle().clone());
    let cannot_mount = |e: std::io::Error| {
        SessionError(format!("cannot mount on {}: {e}", opts.mountpoint.display()))
    };
    let kernel_opts = KernelMountOptions {
        fs_name: &opts.fs_name,
        read_only: opts.read_only,
        allow_other: opts.allow_other,
    };
    // Handed in mounted (`/dev/fd/N`), mounted here (root) or by fuser through fusermount3
    // (anyone else).
    let (session, own_mount) = if let Some(fd) = passed {
        let dev = passed_fd::take(fd)
            .map_err(|e| SessionError(format!("MOUNTPOINT {}: {e}", opts.mountpoint.display())))?;
        // The helper that mounted it chose who may enter; the kernel enforces that.
        let acl = SessionACL::All;
        (fuser::Session::from_fd(adapter, dev, acl, config).map_err(cannot_mount)?, false)
    } else {
        match kernel_mount::mount(&opts.mountpoint, &kernel_opts) {
            Ok(Some(dev)) => {
                let acl = config.acl;
                match fuser::Session::from_fd(adapter, dev, acl, config) {
                    Ok(session) => (session, true),
                    Err(e) => {
                        lazy_unmount(&opts.mountpoint);
                        return Err(cannot_mount(e));
                    }
                }
            }
            Ok(None) => (
                fuser::Session::new(adapter, &opts.mountpoint, &config).map_err(cannot_mount)?,
                false,
            ),
            Err(e) => return Err(cannot_mount(e)),
        }
    };
    // Page-cache invalidations go out from the blocking pool: the kernel may wait on pages
    // that a read in flight holds, and that read is answered from another thread.
    let notifier = session.notifier();
    let rt_handle = rt.handle().clone();
    fs.set_invalidator(Box::new(move |ino| {
        let notifier = notifier.clone();
        rt_handle.spawn_blocking(move || {
            if let Err(e) = notifier.inval_inode(fuser::INodeNo(ino), 0, 0) {
                // ENOENT: the kernel has no such inode cached; nothing to drop.
                if e.raw_os_error() != Some(libc::ENOENT) {
                    tracing::debug!(ino, error = %e, "page cache invalidation failed");
                }
            }
        });
    }));
    // Attributes only (a negative offset): the kernel drops no page, so it waits for nothing
    // and the notification is taken before the open that sends it is answered.
    let attr_notifier = session.notifier();
    fs.set_attr_invalidator(Box::new(move |ino| {
        if let Err(e) = attr_notifier.inval_inode(fuser::INodeNo(ino), -1, 0) {
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!(ino, error = %e, "attribute invalidation failed");
            }
        }
    }));
    let background =
        session.spawn().map_err(|e| SessionError(format!("cannot start the FUSE session: {e}")))?;
    tracing::info!(mountpoint = %opts.mountpoint.display(), "mounted");
    if passed.is_none() {
        // The kernel's read-ahead window is found through the mountpoint's device.
        set_read_ahead(&opts.mountpoint, opts.read_ahead);
    }
    on_ready();

    let ended_by_signal = rt.block_on(wait_for_end(&background, signals));
    notify::stopping(if ended_by_signal {
        "stopping: writing back pending data, then unmounting"
    } else {
        "unmounted from outside: writing back pending data"
    });
    let failed = rt.block_on(fs.flush_all());
    if failed > 0 {
        tracing::error!(failed, "some buffered writes could not be written back");
    }
    // Blocks read into the disk cache but not yet written would be lost with the process.
    if !crate::store::layers::disk_cache::wait_for_queued_writes(Duration::from_secs(10)) {
        tracing::warn!("disk cache: blocks still queued after 10 s are not kept");
    }
    if ended_by_signal && passed.is_some() {
        // Not ours to unmount: the connection closes with this process, and the mount reads
        // ENOTCONN until the helper that made it unmounts it.
        tracing::info!("signal received: closing the connection handed in; its owner unmounts");
        std::mem::forget(background);
    } else if ended_by_signal {
        tracing::info!("signal received: unmounting");
        let unmounted = if own_mount {
            kernel_mount::unmount(&opts.mountpoint).and_then(|()| background.join())
        } else {
            background.umount_and_join()
        };
        if let Err(e) = unmounted {
            // Busy mounts (a process has its cwd inside) fall back to a lazy unmount.
            tracing::warn!(error = %e, "unmount failed; detaching lazily");
            lazy_unmount(&opts.mountpoint);
        }
    } else if own_mount || passed.is_some() {
        // Unmounted from outside, or the connection failed: the session thread has ended.
        // Nothing unmounts on join here (the session holds no mount of fuser's).
        if let Err(e) = background.join() {
            tracing::error!(error = %e, "the FUSE session ended with an error");
        }
    } else {
        // Unmounted from outside: the session thread has ended. Dropping fuser's session would
        // unmount by path again, which could hit a new mount made there in the meantime.
        std::mem::forget(background);
    }
    tracing::info!("unmounted");
    if failed > 0 {
        return Err(SessionError(format!("{failed} buffered file(s) could not be written back")));
    }
    Ok(())
}

/// `--read-ahead`, once the mount is live. Not being allowed to is worth a warning only when
/// the user asked for a size; by default an unprivileged mount keeps the kernel's window.
fn set_read_ahead(mountpoint: &Path, asked: Option<u64>) {
    let bytes = asked.unwrap_or(kernel_window::DEFAULT_BYTES);
    if bytes == 0 {
        return;
    }
    match kernel_window::apply(mountpoint, bytes) {
        Ok(path) => tracing::debug!(path = %path.display(), bytes, "kernel read-ahead set"),
        Err(e) if asked.is_some() => tracing::warn!(
            error = %e,
            "--read-ahead not applied (the mount's read_ahead_kb is writable by root only); \
             the kernel's default stays"
        ),
        Err(e) => tracing::debug!(error = %e, "kernel read-ahead left at its default"),
    }
}

struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Needs a runtime context.
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// True when a signal ended the mount, false when the session ended by itself (unmounted).
/// SIGHUP is logged and ignored: settings cannot be reloaded into a live mount. With
/// `WatchdogSec=` in the unit, `WATCHDOG=1` goes out at half the interval.
async fn wait_for_end(bg: &fuser::BackgroundSession, mut sig: Signals) -> bool {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let watchdog_every = notify::watchdog_interval();
    let mut watchdog = tokio::time::interval(watchdog_every.unwrap_or(Duration::from_secs(3600)));
    loop {
        tokio::select! {
            _ = sig.term.recv() => { tracing::info!("SIGTERM received"); return true }
            _ = sig.int.recv() => { tracing::info!("SIGINT received"); return true }
            _ = sig.hup.recv() => tracing::info!("SIGHUP ignored: restart the service to change settings"),
            _ = watchdog.tick(), if watchdog_every.is_some() => notify::watchdog(),
            _ = tick.tick() => if bg.guard.is_finished() { return false },
        }
    }
}

fn lazy_unmount(mountpoint: &Path) {
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes())
        .expect("no NUL in mountpoint");
    // SAFETY: umount2 with a valid NUL-terminated path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

/// Why a mount could not start or end cleanly: one message, printed as one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SessionError(pub String);
