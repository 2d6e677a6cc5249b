//! Reading a byte range of a local file. First on the async worker itself, with calls that
//! never wait for a disk: a descriptor kept open from an earlier read of the same inode
//! (`open_files`), found by one `statx` of the key (the names of a kept file stay in the
//! kernel's cache: its descriptor pins them), and the bytes only from the page cache
//! (`preadv2` with `RWF_NOWAIT`). Whatever would wait (nothing kept for the key, a key that
//! now names another inode or a changed one, a page not cached, a kernel without the flag,
//! any error) is done again in full on the blocking pool, which resolves the key beneath the
//! root with no symlink (`openat2`) and gives the answer. So a slow disk never stalls the
//! event loop, and a read the caches answer costs two system calls and no thread hop.
//!
//! The `statx` follows a symlink put in place of a directory of the key since the file was
//! kept, which `openat2` would refuse; it then finds another inode (and the read is done in
//! full), or the kept one itself, whose bytes were opened beneath the root: nothing outside
//! the store is read either way. Only files on the root's own filesystem are kept, so the
//! walk stays on it unless a mount appeared on the key's path since. A `statx` may read a
//! directory block from disk once, when the key's directories were replaced behind the store
//! (the kept descriptor pins only the old names); the kept file is then dropped, and the next
//! reads of the key go to the blocking pool until one keeps the new file.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::open_files::Identity;
use super::{read_full_at, to_meta, Inner};
use crate::store::{validate_key, ByteRange, ObjectMeta, StoreError, StoreResult};

/// Filesystems whose cached names, attributes and pages answer without any I/O. A network
/// filesystem may ask its server to revalidate a stat: not read on the worker.
const LOCAL_FILESYSTEMS: &[i64] = &[
    0xEF53,     // ext2/3/4
    0x58465342, // xfs
    0x9123683E, // btrfs
    0x01021994, // tmpfs
    0x858458F6, // ramfs
    0xF2F52010, // f2fs
    0x2FC12FC1, // zfs
    0x794C7630, // overlayfs
];

/// May reads of the directory `root` be tried on the worker (its filesystem is local)?
pub(super) fn worker_reads_allowed(root: &OwnedFd) -> bool {
    // SAFETY: fstatfs on a valid fd into a zeroed struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::fstatfs(root.as_raw_fd(), &mut st) };
    rc == 0 && LOCAL_FILESYSTEMS.contains(&(st.f_type as i64))
}

/// A read done, or one that would have had to wait.
pub(super) enum Tried<T> {
    Done(T),
    WouldWait,
}

/// How a read may go about it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// On the async worker: only calls the kernel answers from its caches.
    Cached,
    /// On the blocking pool: anything.
    Blocking,
}

impl Inner {
    /// `range` of the regular file `key` (clipped to its size) and its metadata, read through
    /// one inode so the bytes and the version belong together.
    pub(super) fn read_range(
        &self,
        key: &str,
        range: &ByteRange,
        mode: Mode,
    ) -> StoreResult<Tried<(Bytes, ObjectMeta)>> {
        let wait = |_| Ok(Tried::WouldWait);
        validate_key(key)?;
        let (file, md) = match mode {
            Mode::Cached => match self.kept_file(key) {
                Some(kept) => kept,
                None => return wait(()),
            },
            Mode::Blocking => self.open_to_read(key)?,
        };
        let r = range.clip(md.len());
        let mut buf = vec![0u8; (r.end - r.start) as usize];
        let n = match mode {
            Mode::Cached => match self.read_cached_pages(&file, &mut buf, r.start) {
                Some(n) => n,
                None => return wait(()),
            },
            Mode::Blocking => {
                read_full_at(&file, &mut buf, r.start).map_err(|e| StoreError::from_io(key, e))?
            }
        };
        buf.truncate(n);
        Ok(Tried::Done((Bytes::from(buf), to_meta(&md))))
    }

    /// The file kept open for `key` and its status, if the key names it still, unchanged.
    fn kept_file(&self, key: &str) -> Option<(Arc<File>, std::fs::Metadata)> {
        // Nothing kept: no lookup, whose names may not be cached.
        if !self.open_files.holds(key) {
            return None;
        }
        let name = std::ffi::CString::new(key).ok()?;
        let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_DONT_SYNC | libc::AT_NO_AUTOMOUNT;
        // SAFETY: statx of a NUL-terminated relative path under our root into a zeroed struct.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::statx(
                self.root.as_raw_fd(),
                name.as_ptr(),
                flags,
                libc::STATX_BASIC_STATS,
                &mut st,
            )
        };
        if rc != 0 || st.stx_mask & libc::STATX_BASIC_STATS != libc::STATX_BASIC_STATS {
            return None;
        }
        self.open_files.get(key, Identity::of_statx(&st))
    }

    /// The regular file `key` resolved beneath the root with no symlink, and its status: the
    /// file kept for it if that is the same unchanged inode, else the file opened (and kept,
    /// if it is on the root's filesystem).
    fn open_to_read(&self, key: &str) -> StoreResult<(Arc<File>, std::fs::Metadata)> {
        let (path, md) = self.resolve_file(key)?;
        if let Some((file, _)) = self.open_files.get(key, Identity::of(&md)) {
            return Ok((file, md));
        }
        let file = Arc::new(reopen(&path, key)?);
        // A file on another filesystem mounted below the root (which may be a network one)
        // is read here every time, never on the worker.
        if md.dev() == self.root_dev {
            self.open_files.keep(key, &md, file.clone());
        }
        Ok((file, md))
    }

    /// `buf` from `offset` of `file`, only as far as the page cache has it: the bytes read
    /// (fewer at the end of the file), or `None` if a page is not cached. A kernel or
    /// filesystem without `RWF_NOWAIT` turns worker reads off for good.
    fn read_cached_pages(&self, file: &File, buf: &mut [u8], offset: u64) -> Option<usize> {
        let mut done = 0;
        while done < buf.len() {
            let rest = &mut buf[done..];
            let iov = libc::iovec { iov_base: rest.as_mut_ptr().cast(), iov_len: rest.len() };
            // SAFETY: preadv2 into one iovec over `rest`, which lives across the call.
            let n = unsafe {
                libc::preadv2(
                    file.as_raw_fd(),
                    &iov,
                    1,
                    (offset + done as u64) as libc::off_t,
                    libc::RWF_NOWAIT,
                )
            };
            match n {
                0 => break, // end of file
                n if n > 0 => done += n as usize,
                _ => {
                    let e = std::io::Error::last_os_error().raw_os_error();
                    if matches!(e, Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENOSYS))
                    {
                        self.worker_reads.store(false, Ordering::Relaxed);
                    }
                    return None;
                }
            }
        }
        Some(done)
    }
}

/// `path` (an `O_PATH` descriptor of a regular file) opened for reading, through its
/// `/proc/self/fd` link: the same inode, with no second walk of the key to race against.
pub(super) fn reopen(path: &File, key: &str) -> StoreResult<File> {
    let proc_path =
        std::ffi::CString::new(format!("/proc/self/fd/{}", path.as_raw_fd())).expect("no NUL");
    // SAFETY: open(2) of a NUL-terminated path; the fd is owned on success.
    let fd = unsafe {
        libc::open(proc_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY)
    };
    if fd < 0 {
        return Err(StoreError::from_io(key, std::io::Error::last_os_error()));
    }
    // SAFETY: fresh fd from open.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::super::LocalStore;
    use super::*;
    use crate::store::ReadStore;
    use std::os::unix::fs::PermissionsExt;

    fn whole() -> ByteRange {
        ByteRange::Range(0..u64::MAX)
    }

    /// The bytes of a read that must have been answered, in `mode`.
    fn done(s: &LocalStore, key: &str, mode: Mode) -> StoreResult<(Bytes, ObjectMeta)> {
        match s.inner.read_range(key, &whole(), mode)? {
            Tried::Done(got) => Ok(got),
            Tried::WouldWait => panic!("{key}: a {} read would wait", mode == Mode::Cached),
        }
    }

    fn would_wait(s: &LocalStore, key: &str) -> bool {
        matches!(s.inner.read_range(key, &whole(), Mode::Cached), Ok(Tried::WouldWait))
    }

    /// A store whose root is on a filesystem where worker reads are tried (the test's
    /// temp dir must be on one: ext4, xfs, btrfs, tmpfs, ...).
    fn store(root: &std::path::Path) -> LocalStore {
        let s = LocalStore::open(root).unwrap();
        assert!(s.inner.worker_reads.load(Ordering::Relaxed), "temp dir on a network filesystem?");
        s
    }

    #[tokio::test]
    async fn a_kept_descriptor_is_not_used_for_a_file_replaced_by_rename() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("k"), b"old").unwrap();
        let s = store(tmp.path());
        assert!(would_wait(&s, "k"), "nothing kept open yet");
        let (old, old_meta) = s.get_ranged("k", whole()).await.unwrap().unwrap();
        assert_eq!(&old[..], b"old");
        // Kept open: the next read is answered on the worker, from the same version.
        let (again, meta) = done(&s, "k", Mode::Cached).unwrap();
        assert_eq!((&again[..], &meta.version), (&b"old"[..], &old_meta.version));

        std::fs::write(tmp.path().join("k.new"), b"new!").unwrap();
        std::fs::rename(tmp.path().join("k.new"), tmp.path().join("k")).unwrap();
        assert!(would_wait(&s, "k"), "the old file's descriptor must not be used");
        let (new, new_meta) = s.get_ranged("k", whole()).await.unwrap().unwrap();
        assert_eq!(&new[..], b"new!");
        assert_ne!(new_meta.version, old_meta.version);
        let (cached, meta) = done(&s, "k", Mode::Cached).unwrap();
        assert_eq!((&cached[..], meta.version), (&b"new!"[..], new_meta.version));
        // Deleted while kept open: gone for readers at once.
        std::fs::remove_file(tmp.path().join("k")).unwrap();
        assert!(s.get_ranged("k", whole()).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_directory_replaced_by_a_symlink_out_of_the_store_is_never_followed() {
        let (tmp, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/k"), b"inside").unwrap();
        std::fs::write(outside.path().join("k"), b"outside").unwrap();
        let s = store(tmp.path());
        assert_eq!(&s.get("d/k").await.unwrap()[..], b"inside"); // kept open
        assert_eq!(&done(&s, "d/k", Mode::Cached).unwrap().0[..], b"inside");

        std::fs::rename(tmp.path().join("d"), tmp.path().join("d.old")).unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("d")).unwrap();
        assert!(would_wait(&s, "d/k"), "the statx finds another inode: not the kept file");
        let refused = s.get("d/k").await;
        assert!(matches!(refused, Err(StoreError::NotFound(_))), "{refused:?}");
    }

    /// Switch this thread alone (raw syscalls: glibc's wrappers would switch every thread) to
    /// user and group `nobody` when running as root, so the kernel checks file modes.
    fn this_thread_as_nobody() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        // SAFETY: per-thread credential changes; the thread ends with the test.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()), 0);
            assert_eq!(libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534), 0);
        }
    }

    #[test]
    fn a_file_whose_mode_was_removed_is_refused_although_it_was_kept_open() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = tmp.path().join("k");
        std::fs::write(&path, b"secret").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let s = &store(tmp.path());
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    this_thread_as_nobody();
                    assert_eq!(&done(s, "k", Mode::Blocking).unwrap().0[..], b"secret");
                    assert_eq!(&done(s, "k", Mode::Cached).unwrap().0[..], b"secret");
                })
                .join()
                .unwrap();
        });
        // The owner (root, or this user) takes every permission away.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    this_thread_as_nobody();
                    assert!(would_wait(s, "k"), "the kept descriptor must not be used");
                    let refused = done(s, "k", Mode::Blocking);
                    assert!(matches!(refused, Err(StoreError::PermissionDenied(_))), "{refused:?}");
                })
                .join()
                .unwrap();
        });
    }

    /// Is every page of `file`'s first `len` bytes out of the page cache?
    fn none_cached(file: &File, len: usize) -> bool {
        // SAFETY: a private read-only mapping of an open file, unmapped before returning;
        // mincore fills one byte per page into a vector of that many.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            let pages = len.div_ceil(4096);
            let mut resident = vec![0u8; pages];
            let rc = libc::mincore(map, len, resident.as_mut_ptr());
            libc::munmap(map, len);
            assert_eq!(rc, 0);
            resident.iter().all(|p| p & 1 == 0)
        }
    }

    #[tokio::test]
    async fn a_read_of_pages_not_cached_falls_back_to_the_blocking_pool() {
        let tmp = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        let path = tmp.path().join("k");
        std::fs::write(&path, &data).unwrap();
        let s = store(tmp.path());
        assert_eq!(s.get("k").await.unwrap(), data); // keeps the file open
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: posix_fadvise on a valid fd: drops the file's clean pages from the cache.
        assert_eq!(
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) },
            0
        );
        if !none_cached(&file, data.len()) {
            // tmpfs keeps its pages: RWF_NOWAIT then never has to give up.
            eprintln!("the filesystem keeps the pages cached: fallback not exercised");
            assert_eq!(&done(&s, "k", Mode::Cached).unwrap().0[..], &data[..]);
            return;
        }
        assert!(would_wait(&s, "k"), "RWF_NOWAIT must not wait for the disk");
        assert!(s.inner.worker_reads.load(Ordering::Relaxed), "EAGAIN is no reason to stop");
        let range = ByteRange::Range(1000..300_000);
        let (part, _) = s.get_ranged("k", range).await.unwrap().unwrap();
        assert_eq!(&part[..], &data[1000..300_000]);
        assert_eq!(s.get("k").await.unwrap(), data);
    }
}
