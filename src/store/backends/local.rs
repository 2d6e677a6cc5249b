//! A directory on the local filesystem as a store.
//!
//! Every path is resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` relative to the
//! root directory's fd, so no key (and no symlink planted in the tree) can reach outside the
//! root. Writes go to a temp file beside the target and are renamed over it, so a reader or a
//! crash never sees half an object. Blocking syscalls run on tokio's blocking pool.
//!
//! Conditional writes, across threads, processes and daemons on one host:
//! - create-if-absent renames the temp file into place with `renameat2(RENAME_NOREPLACE)` (or,
//!   where the filesystem lacks it, `link(2)`s it): the kernel refuses an existing name, so of
//!   any number of racing creators exactly one succeeds, without any lock.
//! - update-if-version, delete-if-version, and also plain overwrites and deletes, hold an
//!   exclusive `flock(2)` on the key's parent directory while they check the version and
//!   rename (or unlink). Every writer going through this store takes the same lock, so a
//!   check and the replacement it allows cannot interleave with another writer's. No lock
//!   files are made (the directory itself is locked) and a crashed holder's lock is released
//!   by the kernel. Not covered: programs writing the directory directly without the lock,
//!   and network filesystems whose `flock` is not shared between hosts.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::Spill;
use crate::store::{
    split_key, validate_key, ByteRange, EntryListing, EntryPages, HiddenKeys, ListPages, Listing,
    Lookup, MetaWanted, ObjectMeta, Perms, PutMode, StoreError, StoreResult,
};
use crate::store::{ListStore, ReadStore, StoreHints, WriteStore};

mod open_files;
mod read;

/// Names of our own in-flight temp files; hidden from listings.
const TEMP_MARKER: &str = ".zarr-mount-tmp.";
/// Entries per page of a listing (`ListStore::list_pages`): small enough that the first page of a
/// large directory goes out in about a millisecond, large enough that a directory of up to
/// this many entries is one sorted page, as before listings were paged.
const LIST_PAGE: usize = 1024;
/// A prefetch hint asks the kernel to read at most this much of a file ahead.
const PREFETCH_BYTES: u64 = 8 << 20;

pub struct LocalStore {
    inner: Arc<Inner>,
}

struct Inner {
    root_path: PathBuf,
    root: OwnedFd,
    /// The root's device: only files on it are kept open (see `read::open_to_read`).
    root_dev: u64,
    temp_counter: AtomicU64,
    /// Entries left out of listings (symlinks, FIFOs, sockets, devices, non-UTF-8 names),
    /// each logged once.
    hidden: HiddenKeys,
    /// Files kept open between reads (see `open_files`).
    open_files: open_files::OpenFiles,
    /// Are reads tried on the async worker first (see `read`)? Off for a root on a network
    /// filesystem, and once the kernel turns out to lack the flags they need.
    worker_reads: AtomicBool,
}

impl LocalStore {
    /// Open `root`, which must be an existing directory.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        let c = CString::new(root.as_os_str().as_encoded_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
        // SAFETY: plain open(2) of a NUL-terminated path; the fd is owned on success.
        let fd =
            unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by open and is not owned elsewhere.
        let root_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let root_dev = File::from(root_fd.try_clone()?).metadata()?.dev();
        Ok(LocalStore {
            inner: Arc::new(Inner {
                root_path: root.to_path_buf(),
                temp_counter: AtomicU64::new(0),
                hidden: HiddenKeys::default(),
                open_files: open_files::OpenFiles::default(),
                worker_reads: AtomicBool::new(read::worker_reads_allowed(&root_fd)),
                root: root_fd,
                root_dev,
            }),
        })
    }

    async fn blocking<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> StoreResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner)).await.map_err(|e| StoreError::Backend {
            key: String::new(),
            message: format!("blocking task failed: {e}"),
        })?
    }
}

/// Only a regular file is read: a directory is `IsADirectory`, and anything else (a FIFO, a
/// socket, a device: not shown in listings, absent for lookups) is absent here too.
fn regular_file(key: &str, md: &std::fs::Metadata) -> StoreResult<()> {
    if md.is_dir() {
        return Err(StoreError::IsADirectory(key.into()));
    }
    if !md.is_file() {
        return Err(StoreError::NotFound(key.into()));
    }
    Ok(())
}

impl LocalStore {
    /// `range` of the object (clipped to its size) and its metadata, from one open file, so
    /// the bytes and the version always belong together: on the worker when the kernel's
    /// caches answer, else on the blocking pool (see `read`).
    async fn read(&self, key: &str, range: ByteRange) -> StoreResult<(Bytes, ObjectMeta)> {
        if self.inner.worker_reads.load(Ordering::Relaxed) {
            if let read::Tried::Done(got) =
                self.inner.read_range(key, &range, read::Mode::Cached)?
            {
                return Ok(got);
            }
        }
        let key = key.to_string();
        self.blocking(move |s| match s.read_range(&key, &range, read::Mode::Blocking)? {
            read::Tried::Done(got) => Ok(got),
            read::Tried::WouldWait => {
                Err(StoreError::Backend { key, message: "a blocking read gave up waiting".into() })
            }
        })
        .await
    }
}

impl LocalStore {
    /// Pages of `LIST_PAGE` entries of the directory at `prefix`, each read on the blocking
    /// pool when asked for; with metadata for every file unless `wanted` says it is not
    /// needed when the page is read.
    fn pages<'a>(&'a self, prefix: &'a str, wanted: Option<MetaWanted>) -> EntryPages<'a> {
        use futures::stream::{self, StreamExt};
        enum State {
            Start,
            Reading(std::fs::ReadDir),
            Done,
        }
        let prefix = prefix.to_string();
        Box::pin(
            stream::unfold(State::Start, move |state| {
                let prefix = prefix.clone();
                let meta = wanted.as_ref().is_none_or(MetaWanted::get);
                async move {
                    let dir = match state {
                        State::Done => return None,
                        State::Start => None,
                        State::Reading(dir) => Some(dir),
                    };
                    let page = self
                        .blocking(move |s| {
                            let mut dir = match dir {
                                Some(dir) => dir,
                                None => s.open_dir(&prefix)?,
                            };
                            let mut page = EntryListing::default();
                            let more =
                                s.read_page(&prefix, &mut dir, LIST_PAGE, meta, &mut page)?;
                            Ok((page, more.then_some(dir)))
                        })
                        .await;
                    Some(match page {
                        Ok((page, Some(dir))) => (Ok(page), State::Reading(dir)),
                        Ok((page, None)) => (Ok(page), State::Done),
                        Err(e) => (Err(e), State::Done),
                    })
                }
            })
            .boxed(),
        )
    }
}

/// A page read with metadata as a `Listing` (every file has its metadata then).
fn with_meta(page: EntryListing) -> Listing {
    let files = page.files.into_iter().filter_map(|(name, meta)| Some((name, meta?))).collect();
    Listing { files, dirs: page.dirs, dir_perms: page.dir_perms }
}

impl Inner {
    /// The directory at `prefix`, opened for reading its entries.
    fn open_dir(&self, prefix: &str) -> StoreResult<std::fs::ReadDir> {
        validate_key(prefix)?;
        let fd = self
            .open_beneath(prefix, libc::O_RDONLY | libc::O_DIRECTORY)
            .map_err(|e| StoreError::from_io(prefix, e))?;
        // The fd was resolved safely; reading it through /proc/self/fd follows no user symlink.
        std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| StoreError::from_io(prefix, e))
    }

    /// Up to `max` more entries of `dir` (the directory at `prefix`) into `out`, each part
    /// sorted by name. Returns whether the directory may have more. Without `meta`, files
    /// come without their metadata and no entry is `lstat`ed: the kind comes from the
    /// directory entry's `d_type` (std falls back to an `lstat` only where the filesystem
    /// leaves it unknown).
    fn read_page(
        &self,
        prefix: &str,
        dir: &mut std::fs::ReadDir,
        max: usize,
        meta: bool,
        out: &mut EntryListing,
    ) -> StoreResult<bool> {
        let mut seen = 0;
        let more = loop {
            if seen == max {
                break true;
            }
            let Some(entry) = dir.next() else { break false };
            seen += 1;
            let entry = entry.map_err(|e| StoreError::from_io(prefix, e))?;
            let name = match entry.file_name().into_string() {
                Ok(name) => name,
                Err(raw) => {
                    // Keys are UTF-8: no key can name this file.
                    let shown = crate::store::join_key(prefix, &raw.to_string_lossy());
                    self.hidden.report(&self.describe(), &shown, "file name is not UTF-8");
                    continue;
                }
            };
            if name.starts_with(TEMP_MARKER) {
                continue;
            }
            // lstat (or d_type): a symlink is reported as itself, never followed.
            let Ok(kind) = entry.file_type() else { continue }; // raced with a delete
                                                                // A directory's mode matters as much as a file's: the kernel checks it before
                                                                // letting anyone in, from the attributes a READDIRPLUS hands it.
            let (kind, md) = if meta && kind.is_dir() {
                // Listed even when its lstat fails (a race with its removal): it then shows the
                // mount's directory mode until a lookup reads its own.
                (kind, entry.metadata().ok().filter(|md| md.is_dir()))
            } else if meta && kind.is_file() {
                let Ok(md) = entry.metadata() else { continue };
                (md.file_type(), Some(md))
            } else {
                (kind, None)
            };
            if kind.is_dir() {
                if let Some(md) = &md {
                    out.dir_perms.insert(name.clone(), perms_of(md));
                }
                out.dirs.push(name);
            } else if kind.is_file() {
                out.files.push((name, md.as_ref().map(to_meta)));
            } else {
                // Not part of a store, and never opened (see open_file).
                let what = if kind.is_symlink() {
                    "a symlink (symlinks are never followed)"
                } else {
                    "a FIFO, socket or device node, not a regular file"
                };
                self.hidden.report(&self.describe(), &crate::store::join_key(prefix, &name), what);
            }
        };
        out.files.sort_by(|a, b| a.0.cmp(&b.0));
        out.dirs.sort();
        Ok(more)
    }

    fn describe(&self) -> String {
        format!("local:{}", self.root_path.display())
    }

    /// Open `key` (relative, validated) beneath the root without following any symlink.
    fn open_beneath(&self, key: &str, flags: i32) -> std::io::Result<OwnedFd> {
        let rel = if key.is_empty() { "." } else { key };
        let c = CString::new(rel).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: open_how is plain data; all-zero is a valid value before we fill it in.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (flags | libc::O_CLOEXEC) as u64;
        how.mode = if flags & libc::O_CREAT != 0 { 0o644 } else { 0 };
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
        // SAFETY: openat2 with a valid dirfd, NUL-terminated path and a correctly sized open_how.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            // ELOOP: a symlink in the path; treat it as absent rather than following it.
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::EXDEV) {
                return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
            }
            return Err(e);
        }
        // SAFETY: the syscall returned a fresh fd that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// Open the regular file at `key` for reading. Anything else is refused before it is
    /// opened: opening a FIFO for reading blocks until a writer appears (a FIFO named
    /// like a metadata document would hang every listing of its directory, and shutdown with it), and
    /// opening a device node can have side effects. So the name is resolved with `O_PATH`
    /// (which opens nothing), checked, and only a regular file is then opened, through its
    /// `/proc/self/fd` link: the same inode, with no second walk of the path to race against.
    fn open_file(&self, key: &str) -> StoreResult<File> {
        validate_key(key)?;
        let (path, _) = self.resolve_file(key)?;
        read::reopen(&path, key)
    }

    /// The regular file `key` (validated) resolved beneath the root with `O_PATH`, which opens
    /// nothing, and its status (see `open_file`).
    fn resolve_file(&self, key: &str) -> StoreResult<(File, std::fs::Metadata)> {
        let path_fd =
            self.open_beneath(key, libc::O_PATH).map_err(|e| StoreError::from_io(key, e))?;
        let path = File::from(path_fd);
        let md = path.metadata().map_err(|e| StoreError::from_io(key, e))?;
        regular_file(key, &md)?;
        Ok((path, md))
    }

    /// The parent directory of `key` as an fd, and the last name as a C string.
    fn parent_of(&self, key: &str) -> StoreResult<(OwnedFd, CString)> {
        validate_key(key)?;
        if key.is_empty() {
            return Err(StoreError::InvalidKey(key.into(), "the root has no parent"));
        }
        let (dir, name) = split_key(key);
        let fd = self
            .open_beneath(dir, libc::O_RDONLY | libc::O_DIRECTORY)
            .map_err(|e| StoreError::from_io(dir, e))?;
        let name =
            CString::new(name).map_err(|_| StoreError::InvalidKey(key.into(), "NUL byte"))?;
        Ok((fd, name))
    }

    fn stat(&self, key: &str) -> StoreResult<Option<std::fs::Metadata>> {
        validate_key(key)?;
        match self.open_beneath(key, libc::O_PATH) {
            Ok(fd) => File::from(fd).metadata().map(Some).map_err(|e| StoreError::from_io(key, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
            Err(e) => Err(StoreError::from_io(key, e)),
        }
    }

    /// Create the missing directories above `key`: a put creates any key, as on an object
    /// store (a shard's directory may be gone since its last shard was deleted and pruned).
    fn create_parents(&self, key: &str) -> StoreResult<()> {
        let mut done = String::new();
        for comp in split_key(key).0.split('/') {
            let parent = self
                .open_beneath(&done, libc::O_RDONLY | libc::O_DIRECTORY)
                .map_err(|e| StoreError::from_io(&done, e))?;
            let name =
                CString::new(comp).map_err(|_| StoreError::InvalidKey(key.into(), "NUL byte"))?;
            // SAFETY: mkdirat of a single name in a valid dirfd.
            if unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755) } < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(StoreError::from_io(key, e));
                }
            }
            done = crate::store::join_key(&done, comp);
        }
        Ok(())
    }

    /// The parent directory of `key`, made first if missing (see `create_parents`).
    fn parent_made(&self, key: &str) -> StoreResult<(OwnedFd, CString)> {
        match self.parent_of(key) {
            Err(StoreError::NotFound(_)) => {
                self.create_parents(key)?;
                self.parent_of(key)
            }
            found => found,
        }
    }

    /// A new temp file in `dirfd` holding `data`; its name is returned.
    fn write_temp(&self, dirfd: &OwnedFd, key: &str, data: Payload) -> StoreResult<CString> {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = CString::new(format!("{TEMP_MARKER}{}.{n}", std::process::id())).expect("no NUL");
        // SAFETY: openat on a valid dirfd with a NUL-terminated single-component name.
        let fd = unsafe {
            libc::openat(
                dirfd.as_raw_fd(),
                tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0o644 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(StoreError::from_io(key, std::io::Error::last_os_error()));
        }
        // SAFETY: fresh fd from openat.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let written = keep_perms_of(dirfd, &name_of(key), &file)
            .and_then(|_| data.write_to(&file))
            .and_then(|_| stamp_precise_mtime(&file));
        if let Err(e) = written {
            // SAFETY: removal of our own temp name.
            unsafe { libc::unlinkat(dirfd.as_raw_fd(), tmp.as_ptr(), 0) };
            return Err(StoreError::from_io(key, e));
        }
        Ok(tmp)
    }

    /// The version of the regular file `name` in `dirfd` (None: no such file), as `to_meta`
    /// gives it to readers.
    fn version_in(
        &self,
        dirfd: &OwnedFd,
        name: &CString,
        key: &str,
    ) -> StoreResult<Option<String>> {
        // SAFETY: openat(O_PATH | O_NOFOLLOW) of a single name in a valid dirfd opens nothing.
        let fd = unsafe {
            libc::openat(
                dirfd.as_raw_fd(),
                name.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::NotFound => Ok(None),
                _ => Err(StoreError::from_io(key, e)),
            };
        }
        // SAFETY: fresh fd from openat.
        let md = File::from(unsafe { OwnedFd::from_raw_fd(fd) })
            .metadata()
            .map_err(|e| StoreError::from_io(key, e))?;
        Ok(md.is_file().then(|| to_meta(&md).version))
    }

    /// Write `key` under `mode` (see the module comment for how each mode is made atomic).
    fn put_with_mode(&self, key: &str, data: Payload, mode: &PutMode) -> StoreResult<()> {
        // A kept descriptor of the file replaced would only hold its disk space.
        self.open_files.forget(key);
        // A directory pruned (after its last shard was deleted) between opening and locking it
        // is made again; a writer that keeps losing that race gives up after a few tries.
        for _ in 0..4 {
            let (dirfd, name) = self.parent_made(key)?;
            if *mode == PutMode::Create {
                let tmp = match self.write_temp(&dirfd, key, data) {
                    Err(StoreError::NotFound(_)) => continue, // the directory went meanwhile
                    r => r?,
                };
                return rename_noreplace(&dirfd, &tmp, &name, key);
            }
            let Some(_lock) = DirLock::acquire(&dirfd, key)? else { continue };
            if let PutMode::Update(want) = mode {
                if self.version_in(&dirfd, &name, key)?.as_deref() != Some(want.as_str()) {
                    return Err(StoreError::Conflict(key.into()));
                }
            }
            let tmp = self.write_temp(&dirfd, key, data)?;
            // SAFETY: renameat between names in the same valid dirfd.
            let rc = unsafe {
                libc::renameat(dirfd.as_raw_fd(), tmp.as_ptr(), dirfd.as_raw_fd(), name.as_ptr())
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                // SAFETY: best-effort removal of our own temp name.
                unsafe { libc::unlinkat(dirfd.as_raw_fd(), tmp.as_ptr(), 0) };
                return Err(StoreError::from_io(key, e));
            }
            return Ok(());
        }
        Err(StoreError::Conflict(key.into()))
    }

    /// Unlink `key`, under the directory lock, if it is at `version` (any version: `None`).
    fn delete_locked(&self, key: &str, version: Option<&str>) -> StoreResult<()> {
        self.open_files.forget(key);
        let (dirfd, name) = self.parent_of(key)?;
        let Some(_lock) = DirLock::acquire(&dirfd, key)? else {
            return Err(StoreError::NotFound(key.into())); // the directory itself is gone
        };
        if let Some(want) = version {
            match self.version_in(&dirfd, &name, key)? {
                None => return Err(StoreError::NotFound(key.into())),
                Some(v) if v != want => return Err(StoreError::Conflict(key.into())),
                Some(_) => {}
            }
        }
        // SAFETY: unlinkat of a single name in a valid dirfd.
        check_rc(unsafe { libc::unlinkat(dirfd.as_raw_fd(), name.as_ptr(), 0) }, key)
    }
}

/// What a put writes: bytes in memory, or the first bytes of a (spill) file.
#[derive(Clone, Copy)]
enum Payload<'a> {
    Mem(&'a [u8]),
    File(&'a File, u64),
}

impl Payload<'_> {
    fn write_to(self, out: &File) -> std::io::Result<()> {
        match self {
            Payload::Mem(data) => out.write_all_at(data, 0),
            Payload::File(src, len) => {
                let mut piece = vec![0; (1 << 20).min(len as usize)];
                let mut at = 0u64;
                while at < len {
                    let n = piece.len().min((len - at) as usize);
                    src.read_exact_at(&mut piece[..n], at)?;
                    out.write_all_at(&piece[..n], at)?;
                    at += n as u64;
                }
                Ok(())
            }
        }
    }
}

/// Set the file's mtime to the clock's full nanosecond precision. The version tag is inode,
/// mtime and size; the kernel's own timestamps are coarse (a timer tick, ~4 ms) and freed inode
/// numbers are reused at once (ext4), so two rewrites of one shard within a tick, with the same
/// size, could otherwise bring back a version tag an earlier reader holds, and its conditional
/// write would pass over both (ABA).
fn stamp_precise_mtime(file: &File) -> std::io::Result<()> {
    let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let times = [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        libc::timespec { tv_sec: now.as_secs() as libc::time_t, tv_nsec: now.subsec_nanos() as _ },
    ];
    // SAFETY: futimens on a valid fd with two timespecs.
    if unsafe { libc::futimens(file.as_raw_fd(), times.as_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// An exclusive `flock` on a directory, released on drop (and by the kernel if we die).
struct DirLock<'a>(&'a OwnedFd);

impl<'a> DirLock<'a> {
    /// Lock `dirfd`; `None` when the directory was removed before the lock was had (its
    /// name may now be another directory: the caller opens it again).
    fn acquire(dirfd: &'a OwnedFd, key: &str) -> StoreResult<Option<Self>> {
        loop {
            // SAFETY: flock on a valid fd.
            if unsafe { libc::flock(dirfd.as_raw_fd(), libc::LOCK_EX) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(StoreError::from_io(key, e));
            }
        }
        let lock = DirLock(dirfd);
        // SAFETY: fstat on a valid fd into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(dirfd.as_raw_fd(), &mut st) } < 0 {
            return Err(StoreError::from_io(key, std::io::Error::last_os_error()));
        }
        Ok((st.st_nlink > 0).then_some(lock))
    }
}

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        // SAFETY: flock on a valid fd.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Move temp file `tmp` to `name` (both in `dirfd`) unless `name` exists: AlreadyExists then,
/// and the temp file is removed either way.
fn rename_noreplace(dirfd: &OwnedFd, tmp: &CString, name: &CString, key: &str) -> StoreResult<()> {
    let fd = dirfd.as_raw_fd();
    // SAFETY: renameat2 between names in the same valid dirfd.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            fd,
            tmp.as_ptr(),
            fd,
            name.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let mut e = std::io::Error::last_os_error();
    if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
        // No RENAME_NOREPLACE on this filesystem: link(2) also refuses an existing name.
        // SAFETY: linkat between names in the same valid dirfd, following no symlink.
        let rc = unsafe { libc::linkat(fd, tmp.as_ptr(), fd, name.as_ptr(), 0) };
        e = std::io::Error::last_os_error();
        // SAFETY: removal of our own temp name (the object now lives under `name`, if linked).
        unsafe { libc::unlinkat(fd, tmp.as_ptr(), 0) };
        return if rc == 0 { Ok(()) } else { Err(StoreError::from_io(key, e)) };
    }
    // SAFETY: removal of our own temp name.
    unsafe { libc::unlinkat(fd, tmp.as_ptr(), 0) };
    Err(StoreError::from_io(key, e))
}

fn to_meta(md: &std::fs::Metadata) -> ObjectMeta {
    let modified = md.modified().unwrap_or(UNIX_EPOCH);
    let nanos = modified.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_nanos();
    // "ino-nanos-len", without format!: this runs for every file of a READDIRPLUS page.
    let mut buf = itoa::Buffer::new();
    let mut version = String::with_capacity(48);
    version.push_str(buf.format(md.ino()));
    version.push('-');
    version.push_str(buf.format(nanos));
    version.push('-');
    version.push_str(buf.format(md.len()));
    ObjectMeta { size: md.len(), modified, version, perms: Some(perms_of(md)) }
}

/// The last name of `key`, for `*at` calls in its parent directory.
fn name_of(key: &str) -> CString {
    CString::new(split_key(key).1).unwrap_or_default()
}

/// Give `file` (the temp file renamed over `name` in `dirfd`) the mode, owner and group of
/// the regular file it replaces, so a write through the mount changes the content alone. A
/// new file keeps what it was created with (0644 less the daemon's umask). The owner and
/// group are kept where the daemon may set them (as root, or its own); otherwise the file
/// is the daemon's, as with any program that replaces a file by renaming.
fn keep_perms_of(dirfd: &OwnedFd, name: &CString, file: &File) -> std::io::Result<()> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat of a single name in a valid dirfd into a zeroed struct; no symlink followed.
    let rc = unsafe {
        libc::fstatat(dirfd.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW)
    };
    if rc < 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(()); // nothing (regular) to keep: a new file
    }
    // SAFETY: fchown/fchmod on our own open fd. Owner first: chown may clear set-id bits.
    if unsafe { libc::fchown(file.as_raw_fd(), st.st_uid, st.st_gid) } < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    // SAFETY: as above.
    if unsafe { libc::fchmod(file.as_raw_fd(), st.st_mode & 0o7777) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn perms_of(md: &std::fs::Metadata) -> Perms {
    Perms::of_stat(md.mode(), md.uid(), md.gid())
}

fn check_rc(rc: libc::c_int, key: &str) -> StoreResult<()> {
    if rc < 0 {
        Err(StoreError::from_io(key, std::io::Error::last_os_error()))
    } else {
        Ok(())
    }
}

#[async_trait]
impl StoreHints for LocalStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn has_real_dirs(&self) -> bool {
        true
    }

    /// The kernel reads the file into its page cache in the background (`POSIX_FADV_WILLNEED`),
    /// so the read that follows finds it there instead of waiting for the disk.
    async fn prefetch(&self, key: &str, size: u64, _why: crate::metrics::Ahead) {
        let key = key.to_string();
        let len = size.min(PREFETCH_BYTES) as libc::off_t;
        let r = self
            .blocking(move |s| {
                let file = s.open_file(&key)?;
                // SAFETY: posix_fadvise on a valid fd; it only schedules reads.
                let rc = unsafe {
                    libc::posix_fadvise(file.as_raw_fd(), 0, len, libc::POSIX_FADV_WILLNEED)
                };
                if rc != 0 {
                    return Err(StoreError::from_io(&key, std::io::Error::from_raw_os_error(rc)));
                }
                Ok(())
            })
            .await;
        if let Err(e) = r {
            tracing::debug!(error = %e, "prefetch failed");
        }
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        // SAFETY: fstatvfs on a valid fd into a zeroed struct.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstatvfs(self.inner.root.as_raw_fd(), &mut st) };
        (rc == 0).then(|| (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
    }
}

#[async_trait]
impl ReadStore for LocalStore {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        Ok(self.read(key, ByteRange::Range(0..u64::MAX)).await?.0)
    }

    async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> StoreResult<Bytes> {
        Ok(self.read(key, ByteRange::Range(range)).await?.0)
    }

    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        crate::store::absent_if_not_found(self.read(key, range).await)
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        let key = key.to_string();
        self.blocking(move |s| match s.stat(&key)? {
            Some(md) if md.is_file() => Ok(Some(to_meta(&md))),
            _ => Ok(None),
        })
        .await
    }
}

#[async_trait]
impl ListStore for LocalStore {
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        let key = key.to_string();
        self.blocking(move |s| match s.stat(&key)? {
            Some(md) if md.is_file() => {
                Ok(Lookup { file: Some(to_meta(&md)), dir: false, dir_perms: None })
            }
            Some(md) if md.is_dir() => {
                Ok(Lookup { file: None, dir: true, dir_perms: Some(perms_of(&md)) })
            }
            _ => Ok(Lookup::default()),
        })
        .await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        let prefix = prefix.to_string();
        self.blocking(move |s| {
            let mut dir = s.open_dir(&prefix)?;
            let mut listing = EntryListing::default();
            while s.read_page(&prefix, &mut dir, usize::MAX, true, &mut listing)? {}
            Ok(with_meta(listing))
        })
        .await
    }

    /// Pages of `LIST_PAGE` entries, each read (readdir and an lstat per file) on the
    /// blocking pool when asked for: no thread waits between pages for a slow reader.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        use futures::StreamExt;
        Box::pin(self.pages(prefix, None).map(|page| page.map(with_meta)))
    }

    /// As `list_pages`, but a page read while no metadata is wanted costs no `lstat`.
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, wanted: MetaWanted) -> EntryPages<'a> {
        self.pages(prefix, Some(wanted))
    }
}

#[async_trait]
impl WriteStore for LocalStore {
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let key = key.to_string();
        self.blocking(move |s| s.put_with_mode(&key, Payload::Mem(&data), &mode)).await
    }

    /// Copied from the spill file into the temp file that is renamed over the key, a piece at
    /// a time: no more memory than one piece, whatever the size.
    async fn put_file(&self, key: &str, file: Spill, len: u64, mode: PutMode) -> StoreResult<()> {
        let key = key.to_string();
        self.blocking(move |s| s.put_with_mode(&key, Payload::File(&file, len), &mode)).await
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        let key = key.to_string();
        self.blocking(move |s| s.delete_locked(&key, None)).await
    }

    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        let (key, version) = (key.to_string(), version.to_string());
        self.blocking(move |s| s.delete_locked(&key, Some(&version))).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        let (from, to) = (from.to_string(), to.to_string());
        self.blocking(move |s| {
            s.open_files.forget(&from);
            s.open_files.forget(&to);
            let (fd1, n1) = s.parent_of(&from)?;
            let (fd2, n2) = s.parent_of(&to)?;
            // SAFETY: renameat between two valid dirfds with single-component names.
            check_rc(
                unsafe {
                    libc::renameat(fd1.as_raw_fd(), n1.as_ptr(), fd2.as_raw_fd(), n2.as_ptr())
                },
                &from,
            )
        })
        .await
    }

    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        self.rename(from, to).await
    }

    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        let key = key.to_string();
        self.blocking(move |s| {
            let (dirfd, name) = s.parent_of(&key)?;
            // SAFETY: mkdirat of a single name in a valid dirfd.
            check_rc(unsafe { libc::mkdirat(dirfd.as_raw_fd(), name.as_ptr(), 0o755) }, &key)
        })
        .await
    }

    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        let key = key.to_string();
        self.blocking(move |s| {
            let (dirfd, name) = s.parent_of(&key)?;
            // SAFETY: unlinkat(AT_REMOVEDIR) of a single name in a valid dirfd.
            check_rc(
                unsafe { libc::unlinkat(dirfd.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) },
                &key,
            )
        })
        .await
    }
}

/// pread until `buf` is full or end of file; returns the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    /// The version string is "inode-mtime nanoseconds-size", as it was with format!: a
    /// different string would count every cached file as changed after an upgrade.
    #[test]
    fn the_version_string_keeps_its_format() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        let md = std::fs::metadata(&f).unwrap();
        let nanos = md.modified().unwrap().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let meta = to_meta(&md);
        assert_eq!(meta.version, format!("{}-{}-{}", md.ino(), nanos, 10));
        assert_eq!(meta.size, 10);
    }

    /// Symlinks (out of the root, in it, looping, to a directory), a FIFO, a socket, a device
    /// node and a non-UTF-8 name: none is listed, none is opened, reading any is "not found",
    /// and a FIFO never blocks a read.
    #[tokio::test]
    async fn special_files_are_hidden_and_never_opened() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("root"), tmp.path().join("outside"));
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"secret").unwrap();
        std::fs::write(root.join("ok"), b"ok").unwrap();
        std::fs::write(root.join("new\nline"), b"nl").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("link_out")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("dir_link")).unwrap();
        std::os::unix::fs::symlink("ok", root.join("link_in")).unwrap();
        std::os::unix::fs::symlink("loop_b", root.join("loop_a")).unwrap();
        std::os::unix::fs::symlink("loop_a", root.join("loop_b")).unwrap();
        std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), b"x").unwrap();
        let fifo = CString::new(root.join("zarr.json").as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let _socket = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        let dev = CString::new(root.join("null").as_os_str().as_bytes()).unwrap();
        // SAFETY: mknod of a NUL-terminated path (only works as root; skipped otherwise).
        let have_dev =
            unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) } == 0;

        let s = LocalStore::open(&root).unwrap();
        let l = s.list("").await.unwrap();
        let files: Vec<&str> = l.files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(files, vec!["new\nline", "ok"]);
        assert_eq!(l.dirs, vec!["sub"]);
        let mut hidden = vec![
            "link_out",
            "dir_link",
            "link_in",
            "loop_a",
            "loop_b",
            "zarr.json",
            "sock",
            "bad\u{fffd}name",
        ];
        if have_dev {
            hidden.push("null");
        }
        for name in hidden {
            assert!(s.inner.hidden.was_reported(name), "{name:?} not reported");
            let Ok(read) = tokio::time::timeout(Duration::from_secs(5), s.get(name)).await else {
                // Release the blocked reader (or the runtime waits for it forever), then fail.
                // SAFETY: open(2) of a NUL-terminated path; the fd is closed right away.
                unsafe {
                    libc::close(libc::open(fifo.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK))
                };
                panic!("reading {name:?} hung");
            };
            assert!(matches!(read, Err(StoreError::NotFound(_))), "{name}: {read:?}");
            if tokio::time::timeout(
                Duration::from_secs(5),
                s.prefetch(name, 1 << 20, crate::metrics::Ahead::ScanAhead),
            )
            .await
            .is_err()
            {
                // SAFETY: as above.
                unsafe {
                    libc::close(libc::open(fifo.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK))
                };
                panic!("prefetching {name:?} hung");
            }
            assert!(s.head(name).await.unwrap().is_none(), "{name}");
            let found = s.lookup(name).await.unwrap();
            assert!(found.file.is_none() && !found.dir, "{name}");
        }
        for key in
            ["dir_link/secret", "link_out/x", "../outside/secret", "sub/../../outside/secret"]
        {
            assert!(s.get(key).await.is_err(), "{key} readable");
        }
        assert_eq!(s.get("new\nline").await.unwrap().as_ref(), b"nl");
        assert_eq!(s.get("ok").await.unwrap().as_ref(), b"ok");
        assert!(matches!(s.get("sub").await, Err(StoreError::IsADirectory(_))));
    }

    #[tokio::test]
    async fn listings_come_in_pages_that_add_up_to_the_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let n = 2 * LIST_PAGE + 10;
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        for i in 0..n {
            std::fs::write(tmp.path().join(format!("d/f{i}")), b"x").unwrap();
        }
        std::fs::create_dir(tmp.path().join("d/sub")).unwrap();
        let s = LocalStore::open(tmp.path()).unwrap();
        let pages: Vec<Listing> = s.list_pages("d").map(|p| p.unwrap()).collect().await;
        assert_eq!(pages.len(), 3, "pages of {LIST_PAGE}");
        assert!(pages.iter().all(|p| p.files.len() + p.dirs.len() <= LIST_PAGE));
        let mut files: Vec<String> =
            pages.iter().flat_map(|p| p.files.iter().map(|f| f.0.clone())).collect();
        files.sort();
        let whole = s.list("d").await.unwrap();
        assert_eq!(files, whole.files.iter().map(|f| f.0.clone()).collect::<Vec<_>>());
        let dirs: Vec<&String> = pages.iter().flat_map(|p| &p.dirs).collect();
        assert_eq!(dirs, [&"sub".to_string()]);
        // A missing directory: one error, then the end.
        let missing: Vec<_> = s.list_pages("nothing").collect().await;
        assert!(matches!(missing[..], [Err(StoreError::NotFound(_))]), "{missing:?}");
    }

    /// Run `f` on a new thread whose `lstat`s fail: a seccomp filter (inherited by the
    /// threads it starts, such as tokio's blocking pool) refuses `statx`/`newfstatat` of a
    /// name without following symlinks, which is what `lstat` and `DirEntry::metadata` are.
    /// Stats of an open fd (`AT_EMPTY_PATH`, glibc's `fstat`) still work.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn without_lstat<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        #[cfg(target_arch = "x86_64")]
        const AUDIT_ARCH: u32 = 0xc000_003e;
        #[cfg(target_arch = "aarch64")]
        const AUDIT_ARCH: u32 = 0xc000_00b7;
        // Offsets in `struct seccomp_data`: nr, arch, then args[i] at 16 + 8 i (the low half
        // first on these little-endian machines).
        const NR: u32 = 0;
        const ARCH: u32 = 4;
        const STATX_FLAGS: u32 = 16 + 8 * 2;
        const FSTATAT_FLAGS: u32 = 16 + 8 * 3;
        let ld = |k: u32| libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k,
        };
        let jump = |op: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
            code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
            jt,
            jf,
            k,
        };
        let ret = |k: u32| libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k,
        };
        // Jumps skip that many instructions; 11 is "allow".
        let program = [
            ld(ARCH),                                                     // 0
            jump(libc::BPF_JEQ, AUDIT_ARCH, 0, 9),                        // 1
            ld(NR),                                                       // 2
            jump(libc::BPF_JEQ, libc::SYS_statx as u32, 0, 2),            // 3
            ld(STATX_FLAGS),                                              // 4
            jump(libc::BPF_JA, 2, 0, 0),                                  // 5 -> 8
            jump(libc::BPF_JEQ, libc::SYS_newfstatat as u32, 0, 4),       // 6
            ld(FSTATAT_FLAGS),                                            // 7
            jump(libc::BPF_JSET, libc::AT_SYMLINK_NOFOLLOW as u32, 0, 2), // 8
            jump(libc::BPF_JSET, libc::AT_EMPTY_PATH as u32, 1, 0),       // 9
            ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),            // 10
            ret(libc::SECCOMP_RET_ALLOW),                                 // 11
        ];
        std::thread::spawn(move || {
            let prog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            // SAFETY: prctl with the documented arguments; `prog` outlives the call (the
            // kernel copies the program).
            unsafe {
                assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                assert_eq!(
                    libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &prog as *const libc::sock_fprog
                    ),
                    0,
                    "seccomp filter: {}",
                    std::io::Error::last_os_error()
                );
            }
            f()
        })
        .join()
        .expect("the filtered thread")
    }

    /// A listing for a reader that wants no metadata (a plain READDIR) reads names and kinds
    /// from the directory entries alone: it works where every `lstat` fails (and a listing
    /// with metadata, on the same thread, shows that they do fail), and symlinks, FIFOs and
    /// sockets stay hidden, known from `d_type`.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn a_listing_without_metadata_does_no_lstat() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let n = LIST_PAGE + 5;
        for i in 0..n {
            std::fs::write(root.join(format!("f{i:05}")), vec![b'x'; i % 7]).unwrap();
        }
        std::fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink("f00001", root.join("link")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("dir_link")).unwrap();
        let fifo = CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let _socket = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        let files: Vec<String> = (0..n).map(|i| format!("f{i:05}")).collect();

        let s = Arc::new(LocalStore::open(&root).unwrap());
        let filtered = s.clone();
        let (names_only, with_meta) = without_lstat(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let pages = filtered.list_entry_pages("", MetaWanted::new(false));
                let names_only: Vec<EntryListing> = pages.map(|p| p.unwrap()).collect().await;
                let with_meta = filtered.list("").await.unwrap();
                (names_only, with_meta)
            })
        });
        assert_eq!(names_only.len(), 2, "pages of {LIST_PAGE}");
        let mut listed: Vec<String> = Vec::new();
        for page in &names_only {
            for (name, meta) in &page.files {
                assert!(meta.is_none(), "{name} came with metadata");
                listed.push(name.clone());
            }
        }
        listed.sort();
        assert_eq!(listed, files, "every file, and nothing else");
        let dirs: Vec<&String> = names_only.iter().flat_map(|p| &p.dirs).collect();
        assert_eq!(dirs, [&"sub".to_string()]);
        for name in ["link", "dir_link", "fifo", "sock"] {
            assert!(s.inner.hidden.was_reported(name), "{name:?} not reported hidden");
        }
        // The filter does refuse lstat: a listing that needs it loses every file.
        assert!(with_meta.files.is_empty(), "lstat worked under the filter");
        assert_eq!(with_meta.dirs, ["sub"]);
    }

    /// The reader's wish is read before each page: a page read while metadata is wanted has
    /// it for every file (the right sizes), the next one, read after the wish changed, none.
    #[tokio::test]
    async fn metadata_is_read_for_the_pages_that_want_it() {
        let tmp = tempfile::tempdir().unwrap();
        let n = LIST_PAGE + 5;
        for i in 0..n {
            std::fs::write(tmp.path().join(format!("f{i:05}")), vec![b'x'; i % 7]).unwrap();
        }
        let s = LocalStore::open(tmp.path()).unwrap();
        let wanted = MetaWanted::new(true);
        let mut pages = s.list_entry_pages("", wanted.clone());
        let first = pages.next().await.unwrap().unwrap();
        assert_eq!(first.files.len(), LIST_PAGE);
        for (name, meta) in &first.files {
            let i: usize = name[1..].parse().unwrap();
            assert_eq!(meta.as_ref().map(|m| m.size), Some((i % 7) as u64), "{name}");
        }
        wanted.set(false);
        let second = pages.next().await.unwrap().unwrap();
        assert_eq!(second.files.len(), 5);
        assert!(second.files.iter().all(|(_, meta)| meta.is_none()), "{second:?}");
        assert!(pages.next().await.is_none());
    }

    #[tokio::test]
    async fn put_creates_missing_directories_and_leaves_no_temp_files() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalStore::open(tmp.path()).unwrap();
        s.put("a/c/0/0", Bytes::from_static(b"shard")).await.unwrap();
        assert_eq!(std::fs::read(tmp.path().join("a/c/0/0")).unwrap(), b"shard");
        s.put("a/c/0/1", Bytes::from_static(b"next")).await.unwrap();
        assert_eq!(s.list("a/c/0").await.unwrap().files.len(), 2);
        // A file where a directory should be is an error, not a replacement.
        s.put("f", Bytes::new()).await.unwrap();
        assert!(matches!(s.put("f/x", Bytes::new()).await, Err(StoreError::NotADirectory(_))));
        let names: Vec<_> = std::fs::read_dir(tmp.path().join("a/c/0"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
