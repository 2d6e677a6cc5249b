//! The `fuser::Filesystem` implementation: each callback hands the work to a tokio task that
//! calls `ZarrFs` and replies from there, so the FUSE dispatch thread never waits on I/O.
//!
//! Every request is accounted here (`crate::metrics`: count, latency, in-flight, errors by
//! errno) and every failed one is logged once, with its operation, inode or handle and name.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tokio::runtime::Handle;

use super::io_modes::{IoModes, OpenMode};
use super::openers::Openers;
use crate::fs::listing::DirEntries;
use crate::fs::{Attr, FileKind, FsError, Opened, SetAttr, ZarrFs};
use crate::metrics::{CacheKind, Op};

/// Turns `fs::Attr` into what the kernel wants; small and owned so replies can carry it.
#[derive(Clone, Copy)]
struct AttrMaker {
    ttl: Duration,
}

impl AttrMaker {
    fn attr(&self, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(a.ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: a.mtime,
            mtime: a.mtime,
            ctime: a.mtime,
            crtime: a.mtime,
            kind: match a.kind {
                FileKind::Dir => FileType::Directory,
                FileKind::File => FileType::RegularFile,
            },
            perm: a.perm,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: 0,
            // What applications size their buffers by: stdio and Python allocate one of this size
            // per open file, and 1 MiB (mmapped, page-faulted, unmapped each time) made every
            // open of a small chunk file cost more than reading it. The kernel sizes FUSE reads by
            // its own read-ahead, not by this.
            blksize: 4096,
            flags: 0,
        }
    }
}

pub struct FuseAdapter {
    fs: Arc<ZarrFs>,
    rt: Handle,
    maker: AttrMaker,
    /// FUSE passthrough, when the kernel took it at INIT (see `init`).
    passthrough: Option<Arc<Passthrough>>,
    /// The process that opened each writer handle, for FLUSH (see `openers`).
    openers: Arc<Openers>,
}

/// Opens answered with a local copy for the kernel to read directly.
struct Passthrough {
    modes: IoModes<BackingId>,
    /// Cleared when the kernel refuses a backing file (e.g. a cache directory on a stacked
    /// filesystem): copies are no longer looked for.
    looking: AtomicBool,
}

impl FuseAdapter {
    pub fn new(fs: Arc<ZarrFs>, rt: Handle) -> Self {
        let ttl = fs.config().metadata_ttl;
        FuseAdapter { fs, rt, maker: AttrMaker { ttl }, passthrough: None, openers: Arc::default() }
    }

    /// OPEN on a passthrough connection: the first open of an inode with no open files looks
    /// for a local copy and, with one, answers with it as the backing file; later opens follow
    /// the first (the kernel's rule, see `io_modes`). Every open is counted until its RELEASE.
    fn open_passthrough(
        &self,
        req: Req,
        pt: Arc<Passthrough>,
        ino: u64,
        flags: i32,
        reply: ReplyOpen,
    ) {
        let looking = pt.looking.load(Ordering::Relaxed);
        self.spawn(
            req,
            move |fs| async move {
                let opened = fs.open(ino, flags).await?;
                let copy = if looking && pt.modes.undecided(ino) {
                    fs.local_copy(opened.fh).await
                } else {
                    None
                };
                let version = fs.handle_version(opened.fh).unwrap_or_default();
                Ok((opened, copy, version, pt))
            },
            move |r, _| match r {
                Ok((o, copy, version, pt)) => {
                    let replying = &reply;
                    let make = copy.map(|file| move || replying.open_backing(&file));
                    let (mode, err) = pt.modes.open(ino, &version, make);
                    if let Some(e) = err {
                        if pt.looking.swap(false, Ordering::Relaxed) {
                            tracing::warn!(error = %e, "the kernel refused a local copy as a backing file; reads go through the daemon");
                        }
                    }
                    match mode {
                        OpenMode::Passthrough(b) => {
                            crate::metrics::global().passthrough_opens.inc();
                            // The kernel refuses (EIO) any flag but these with a backing file:
                            // its page cache of the inode is not used (FOPEN_KEEP_CACHE).
                            let flags = fopen_flags(&o) & FopenFlags::FOPEN_NOFLUSH;
                            reply.opened_passthrough(FileHandle(o.fh), flags, &b)
                        }
                        OpenMode::Direct(b) => {
                            let flags = (fopen_flags(&o) & FopenFlags::FOPEN_NOFLUSH)
                                | FopenFlags::FOPEN_DIRECT_IO;
                            reply.opened_passthrough(FileHandle(o.fh), flags, &b)
                        }
                        OpenMode::Cached => reply.opened(FileHandle(o.fh), fopen_flags(&o)),
                    }
                }
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    /// Run `work` (request `req`) on the runtime and give its result to `done`, which replies.
    fn spawn<T, Fut, W, D>(&self, req: Req, work: W, done: D)
    where
        T: Send + 'static,
        Fut: std::future::Future<Output = Result<T, FsError>> + Send + 'static,
        W: FnOnce(Arc<ZarrFs>) -> Fut + Send + 'static,
        D: FnOnce(Result<T, FsError>, AttrMaker) + Send + 'static,
    {
        let fs = self.fs.clone();
        let maker = self.maker;
        self.rt.spawn(async move {
            let result = work(fs).await;
            req.outcome(&result);
            done(result, maker);
        });
    }
}

/// What a request was about, for its log line if it fails.
#[derive(Debug, Clone, Copy, Default)]
struct Target<'a> {
    ino: Option<u64>,
    fh: Option<u64>,
    name: Option<&'a OsStr>,
}

fn ino(i: INodeNo) -> Target<'static> {
    Target { ino: Some(i.0), ..Target::default() }
}

fn fh(h: FileHandle) -> Target<'static> {
    Target { fh: Some(h.0), ..Target::default() }
}

fn entry(parent: INodeNo, name: &OsStr) -> Target<'_> {
    Target { ino: Some(parent.0), name: Some(name), ..Target::default() }
}

/// One FUSE request from arrival to reply: counted when made, timed until dropped (after the
/// reply), its error (if any) counted by errno and logged once.
struct Req {
    op: Op,
    started: Instant,
    /// What the request was about, for its log line (printed escaped, only if it fails).
    ino: Option<u64>,
    fh: Option<u64>,
    name: Option<String>,
}

impl Req {
    fn new(op: Op, t: Target<'_>) -> Req {
        let m = &crate::metrics::global().fuse;
        m.requests(op).inc();
        m.in_flight.inc();
        Req {
            op,
            started: Instant::now(),
            ino: t.ino,
            fh: t.fh,
            // Names are copied (lossily: it is only for the log) because the reply may come
            // from another thread after the kernel's buffer is gone; one small allocation,
            // next to a FUSE round trip of several microseconds.
            name: t.name.map(|n| n.to_string_lossy().into_owned()),
        }
    }

    /// Count and log the error of a finished request.
    fn outcome<T>(&self, r: &Result<T, FsError>) {
        if let Err(e) = r {
            self.failed(e.errno(), e.is_notable(), e);
        }
    }

    /// A failure with `errno`. Ordinary answers (ENOENT, EEXIST, ENOTEMPTY, ...) are DEBUG;
    /// failures of the store or the data are WARN. Names print escaped (`{:?}`): they are
    /// untrusted and a newline in one must not forge a log line.
    fn failed(&self, errno: i32, notable: bool, e: &dyn std::fmt::Display) {
        crate::metrics::global().fuse.error(self.op, errno);
        let (op, errno_name) = (self.op.name(), crate::metrics::errno_name(errno));
        if notable {
            tracing::warn!(op, ino = self.ino, fh = self.fh, name = ?self.name, errno, errno_name, error = %e, "request failed");
        } else {
            tracing::debug!(op, ino = self.ino, fh = self.fh, name = ?self.name, errno, errno_name, error = %e, "request failed");
        }
    }

    /// Answered with a fixed errno by the adapter itself (not supported here).
    fn refused(self, errno: Errno) {
        self.failed(errno.code(), false, &"refused by the adapter");
    }
}

impl Drop for Req {
    fn drop(&mut self) {
        let m = &crate::metrics::global().fuse;
        m.in_flight.dec();
        m.duration(self.op).observe(self.started.elapsed().as_secs_f64());
    }
}

/// A lookup, getattr or open that the metadata cache answered (or could not).
fn metadata_cache(hit: bool) {
    let c = crate::metrics::global().cache(CacheKind::Metadata);
    if hit {
        c.hits.inc();
    } else {
        c.misses.inc();
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn fopen_flags(o: &Opened) -> FopenFlags {
    let mut flags = FopenFlags::empty();
    if o.keep_cache {
        flags |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if o.read_only {
        flags |= FopenFlags::FOPEN_NOFLUSH;
    }
    flags
}

fn name_of(name: &OsStr) -> Result<String, FsError> {
    name.to_str().map(str::to_string).ok_or(FsError::InvalidName("file names must be UTF-8"))
}

impl fuser::Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Bigger requests mean fewer round trips for chunk-sized reads and writes.
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ =
            config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS | InitFlags::FUSE_MAX_PAGES);
        // open(O_TRUNC) arrives as one OPEN with O_TRUNC, instead of an OPEN (which reads the
        // old content into the write buffer, only to drop it) followed by a SETATTR.
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        // `ls -l` gets the attributes with the names instead of one LOOKUP per entry; AUTO lets
        // the kernel fall back to plain READDIR for listings nobody stats (find).
        let _ = config
            .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // Files the disk cache keeps whole are read by the kernel straight from their copy, with
        // no round trip per read (FUSE passthrough). The backing file goes with the reply to
        // OPEN, so this mount answers OPEN. Depth 1: copies on a plain filesystem, and the
        // mount may still be a lower layer of overlayfs.
        if self.fs.wants_passthrough()
            && super::io_modes::may_pass_through()
            && config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH)
            && config.set_max_stack_depth(1).is_ok()
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
        {
            tracing::debug!("passthrough: whole objects in the disk cache are read by the kernel");
            self.passthrough = Some(Arc::new(Passthrough {
                modes: IoModes::default(),
                looking: AtomicBool::new(true),
            }));
        // A read-only mount needs no file handles: OPEN answers ENOSYS (see `open`), after which
        // the kernel sends no OPEN, RELEASE or FLUSH for any file, and keeps its page cache
        // across opens. Without this, every open() and close() of a chunk file is a round trip.
        } else if config.capabilities().contains(InitFlags::FUSE_NO_OPEN_SUPPORT)
            && self.fs.serve_without_open()
        {
            tracing::debug!("read-only: serving reads without OPEN/RELEASE");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let req = Req::new(Op::Lookup, entry(parent, name));
        let cached = name.to_str().and_then(|n| self.fs.lookup_cached(parent.0, n));
        metadata_cache(cached.is_some());
        if let Some(r) = cached {
            req.outcome(&r);
            return match r {
                Ok(a) => reply.entry(&self.maker.ttl, &self.maker.attr(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            };
        }
        let name = name_of(name);
        self.spawn(
            req,
            move |fs| async move { fs.lookup(parent.0, &name?).await },
            move |r, m| match r {
                Ok(a) => reply.entry(&m.ttl, &m.attr(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let req = Req::new(Op::Getattr, self::ino(ino));
        let cached = self.fs.getattr_cached(ino.0);
        metadata_cache(cached.is_some());
        if let Some(r) = cached {
            req.outcome(&r);
            return match r {
                Ok(a) => reply.attr(&self.maker.ttl, &self.maker.attr(&a)),
                Err(e) => reply.error(errno(&e)),
            };
        }
        self.spawn(
            req,
            move |fs| async move { fs.getattr(ino.0).await },
            move |r, m| match r {
                Ok(a) => reply.attr(&m.ttl, &m.attr(&a)),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Times are accepted and ignored: a store keeps its own modification time.
        let set = SetAttr { size, fh: fh.map(|f| f.0), mode, uid, gid };
        self.spawn(
            Req::new(Op::Setattr, self::ino(ino)),
            move |fs| async move { fs.setattr(ino.0, set).await },
            move |r, m| match r {
                Ok(a) => reply.attr(&m.ttl, &m.attr(&a)),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let req = Req::new(Op::Mkdir, entry(parent, name));
        let name = name_of(name);
        self.spawn(
            req,
            move |fs| async move { fs.mkdir(parent.0, &name?).await },
            move |r, m| match r {
                Ok(a) => reply.entry(&m.ttl, &m.attr(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let req = Req::new(Op::Unlink, entry(parent, name));
        let name = name_of(name);
        self.spawn(
            req,
            move |fs| async move { fs.unlink(parent.0, &name?).await },
            move |r, _| empty(r, reply),
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let req = Req::new(Op::Rmdir, entry(parent, name));
        let name = name_of(name);
        self.spawn(
            req,
            move |fs| async move { fs.rmdir(parent.0, &name?).await },
            move |r, _| empty(r, reply),
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let req = Req::new(Op::Rename, entry(parent, name));
        let (name, newname) = (name_of(name), name_of(newname));
        self.spawn(
            req,
            move |fs| async move {
                fs.rename(parent.0, &name?, newparent.0, &newname?, flags.bits()).await
            },
            move |r, _| empty(r, reply),
        );
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        Req::new(Op::Other, Target::default()).refused(Errno::EPERM);
        reply.error(Errno::EPERM);
    }

    /// An atomic create of `newname` with the file's content (see `ZarrFs::link`).
    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let req = Req::new(Op::Link, entry(newparent, newname));
        let newname = name_of(newname);
        self.spawn(
            req,
            move |fs| async move { fs.link(ino.0, newparent.0, &newname?).await },
            move |r, m| match r {
                Ok(a) => reply.entry(&m.ttl, &m.attr(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files are made with create(); devices, fifos and sockets have no place in a store.
        Req::new(Op::Other, Target::default()).refused(Errno::EPERM);
        reply.error(Errno::EPERM);
    }

    fn open(&self, request: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let req = Req::new(Op::Open, self::ino(ino));
        if self.fs.is_openless() {
            // The kernel remembers this and sends no more OPENs; reads then come with fh 0.
            req.refused(Errno::ENOSYS);
            return reply.error(Errno::ENOSYS);
        }
        if let Some(pt) = &self.passthrough {
            return self.open_passthrough(req, pt.clone(), ino.0, flags.0, reply);
        }
        let cached = self.fs.open_cached(ino.0, flags.0);
        metadata_cache(cached.is_some());
        if let Some(r) = cached {
            req.outcome(&r);
            return match r {
                Ok(o) => reply.opened(FileHandle(o.fh), fopen_flags(&o)),
                Err(e) => reply.error(errno(&e)),
            };
        }
        let (openers, pid) = (self.openers.clone(), request.pid());
        self.spawn(
            req,
            move |fs| async move {
                let opened = fs.open(ino.0, flags.0).await?;
                if !opened.read_only {
                    openers.opened(opened.fh, pid);
                }
                Ok(opened)
            },
            move |r, _| match r {
                Ok(o) => reply.opened(FileHandle(o.fh), fopen_flags(&o)),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn create(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let req = Req::new(Op::Create, entry(parent, name));
        let name = name_of(name);
        let (openers, pid) = (self.openers.clone(), request.pid());
        self.spawn(
            req,
            move |fs| async move {
                let (attr, opened) = fs.create(parent.0, &name?, flags).await?;
                openers.opened(opened.fh, pid);
                Ok((attr, opened))
            },
            move |r, m| match r {
                Ok((a, o)) => reply.created(
                    &m.ttl,
                    &m.attr(&a),
                    Generation(0),
                    FileHandle(o.fh),
                    fopen_flags(&o),
                ),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(
            Req::new(Op::Read, Target { ino: Some(ino.0), fh: Some(fh.0), name: None }),
            move |fs| async move {
                // Handles start at 1: 0 is a file the kernel opened without asking us.
                if fh.0 == 0 && fs.is_openless() {
                    fs.read_inode(ino.0, offset, size).await
                } else {
                    fs.read(fh.0, offset, size).await
                }
            },
            move |r, _| match r {
                Ok(data) => {
                    crate::metrics::global().fuse.read_bytes.inc_by(data.len() as u64);
                    reply.data(&data)
                }
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = data.to_vec();
        self.spawn(
            Req::new(Op::Write, self::fh(fh)),
            move |fs| async move { fs.write(fh.0, offset, &data).await },
            move |r, _| match r {
                Ok(n) => {
                    crate::metrics::global().fuse.written_bytes.inc_by(u64::from(n));
                    reply.written(n)
                }
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn flush(
        &self,
        request: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let req = Req::new(Op::Flush, self::fh(fh));
        if self.fs.is_openless() {
            // Nothing is ever written: ENOSYS makes the kernel stop sending FLUSH at close().
            req.refused(Errno::ENOSYS);
            return reply.error(Errno::ENOSYS);
        }
        let (openers, pid) = (self.openers.clone(), request.pid());
        self.spawn(
            req,
            move |fs| async move {
                // A copy of the descriptor closed in another process (a child at exec or
                // exit): the writer may be mid-file, so nothing is stored (see `openers`).
                if !openers.closed_by_opener(fh.0, pid) {
                    tracing::debug!(
                        fh = fh.0,
                        pid,
                        "close of an inherited descriptor: no write-back"
                    );
                    return Ok(());
                }
                writeback(fs.flush(fh.0).await)
            },
            move |r, _| empty(r, reply),
        );
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let req = Req::new(Op::Release, self::fh(fh));
        self.openers.released(fh.0);
        if let Some(pt) = &self.passthrough {
            pt.modes.release(ino.0);
        }
        if self.fs.release_reader(fh.0) {
            drop(req);
            return reply.ok();
        }
        self.spawn(
            req,
            move |fs| async move { writeback(fs.release(fh.0).await) },
            move |r, _| empty(r, reply),
        );
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(
            Req::new(Op::Fsync, self::fh(fh)),
            move |fs| async move { writeback(fs.fsync(fh.0).await) },
            move |r, _| empty(r, reply),
        );
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // No I/O here: the listing is taken at the first READDIR, which does not come while the
        // kernel's cached listing (FOPEN_CACHE_DIR) is kept.
        let req = Req::new(Op::Opendir, self::ino(ino));
        let r = self.fs.opendir_lazy(ino.0);
        req.outcome(&r);
        match r {
            Ok(o) => {
                let mut flags = FopenFlags::FOPEN_CACHE_DIR;
                if o.keep_cache {
                    flags |= FopenFlags::FOPEN_KEEP_CACHE;
                }
                reply.opened(FileHandle(o.fh), flags)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let req = Req::new(Op::Readdir, self::fh(fh));
        match self.fs.readdir_ready(fh.0, offset, false) {
            Ok(Some(entries)) => fill_dir(&entries, reply),
            Ok(None) => self.spawn(
                req,
                move |fs| async move { fs.readdir_at(fh.0, offset, false).await },
                move |r, _| match r {
                    Ok(entries) => fill_dir(&entries, reply),
                    Err(e) => reply.error(errno(&e)),
                },
            ),
            Err(e) => {
                req.failed(e.errno(), e.is_notable(), &e);
                reply.error(errno(&e))
            }
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let req = Req::new(Op::Readdirplus, self::fh(fh));
        match self.fs.readdir_ready(fh.0, offset, true) {
            Ok(Some(entries)) => fill_dir_plus(&self.fs, fh, &entries, self.maker, reply),
            Ok(None) => self.spawn(
                req,
                move |fs| async move { Ok((fs.readdir_at(fh.0, offset, true).await?, fs)) },
                move |r, m| match r {
                    Ok((entries, fs)) => fill_dir_plus(&fs, fh, &entries, m, reply),
                    Err(e) => reply.error(errno(&e)),
                },
            ),
            Err(e) => {
                req.failed(e.errno(), e.is_notable(), &e);
                reply.error(errno(&e))
            }
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (total, free) = self.fs.statfs();
        const BSIZE: u64 = 4096;
        reply.statfs(
            total / BSIZE,
            free / BSIZE,
            free / BSIZE,
            1 << 20,
            1 << 20,
            BSIZE as u32,
            255,
            BSIZE as u32,
        );
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        // No attributes: an empty list, so `ls -l` and `cp -a` do not complain.
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOTSUP);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Terminal and filesystem ioctls (Python probes TCGETS on open) mean nothing here. The
        // kernel forwards them all (there is no ENOSYS opt-out), so they are counted.
        Req::new(Op::Ioctl, ino(_ino)).refused(Errno::ENOTTY);
        reply.error(Errno::ENOTTY);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}

/// One READDIR reply from a listing, from the offset asked for on.
fn fill_dir(entries: &DirEntries, mut reply: ReplyDirectory) {
    for (next, e) in entries.iter() {
        let kind =
            if e.kind == FileKind::Dir { FileType::Directory } else { FileType::RegularFile };
        if reply.add(INodeNo(e.ino), next, kind, &e.name) {
            break;
        }
    }
    reply.ok();
}

/// One READDIRPLUS reply: like `fill_dir`, plus attributes; every entry sent (but `.` and
/// `..`) is a lookup the kernel will forget later.
fn fill_dir_plus(
    fs: &ZarrFs,
    fh: FileHandle,
    entries: &DirEntries,
    maker: AttrMaker,
    mut reply: ReplyDirectoryPlus,
) {
    let dir = match fs.dir_path(fh.0) {
        Ok(d) => d,
        Err(e) => return reply.error(errno(&e)),
    };
    for (next, e) in entries.iter() {
        let dot = e.name == "." || e.name == "..";
        let attr = if dot { e.attr } else { fs.readdirplus_entry(&dir, e) };
        // No attributes: gone since it was listed. Left out; the entries after it keep their
        // offsets, so the kernel resumes correctly.
        let Some(attr) = attr else { continue };
        if reply.add(
            INodeNo(attr.ino),
            next,
            &e.name,
            &maker.ttl,
            &maker.attr(&attr),
            Generation(0),
        ) {
            if !dot {
                fs.forget(attr.ino, 1); // did not fit: the kernel never saw it
            }
            break;
        }
    }
    reply.ok();
}

/// A flush, fsync or release: its store failure is a failed write-back.
fn writeback(r: Result<(), FsError>) -> Result<(), FsError> {
    if let Err(e) = &r {
        if e.is_notable() {
            crate::metrics::global().writeback_failures.inc();
        }
    }
    r
}

fn empty(r: Result<(), FsError>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}
