//! Fetched bytes kept on disk: the blocks of one fetch go to the writer thread, which writes
//! each file through `tmp/` and a rename, after making room.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::format::encode_header;
use super::index::{BlockId, CopyFile, COPY};
use super::DiskCacheStore;
use crate::store::ObjectMeta;

/// Bytes of fetched data that may wait for their background write at once.
pub(super) const WRITE_BACKLOG: u64 = 64 << 20;

/// Bytes queued for the writer threads of every disk cache in this process. A daemon that
/// stops cleanly (SIGTERM, unmount) waits for them (`wait_for_queued_writes`): the writer is a
/// plain thread, which process exit would otherwise cut off with blocks still queued, and the
/// next daemon would fetch again what this one read.
pub(super) static QUEUED: AtomicU64 = AtomicU64::new(0);

/// Wait (up to `limit`) until every block queued for writing is on disk; false on timeout.
pub fn wait_for_queued_writes(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while QUEUED.load(Ordering::Acquire) > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Blocks of one fetch for the writer thread; the `Arc` keeps the store alive until written.
pub(super) struct WriteJob {
    pub(super) store: Arc<DiskCacheStore>,
    pub(super) key: String,
    pub(super) version: String,
    pub(super) size: u64,
    pub(super) blocks: Vec<(BlockId, Bytes)>,
    pub(super) bytes: u64,
    /// Told once the blocks are written (or given up); the reader waits for it.
    pub(super) done: tokio::sync::oneshot::Sender<()>,
}

/// One thread writes every block, in the order fetched: off the async runtime and its
/// blocking pool (which the reads use), and never more than one write competing with the
/// readers for the CPU. It ends when the store is dropped (the last sender goes with it).
pub(super) fn spawn_writer() -> std::io::Result<std::sync::mpsc::Sender<WriteJob>> {
    let (tx, rx) = std::sync::mpsc::channel::<WriteJob>();
    std::thread::Builder::new().name("disk-cache-writer".into()).spawn(move || {
        for job in rx {
            let WriteJob { store, key, version, size, blocks, bytes, done } = job;
            for (id, data) in &blocks {
                store.write_block(&key, &version, size, id, data);
            }
            store.backlog.fetch_sub(bytes, Ordering::AcqRel);
            QUEUED.fetch_sub(bytes, Ordering::AcqRel);
            // Let go of the data (and the store) before telling the reader, so that nothing
            // of it outlives the read.
            drop(blocks);
            drop(store);
            let _ = done.send(());
        }
    })?;
    Ok(tx)
}

/// What one fetch returned, placed in the object.
pub(super) struct Fetched {
    pub(super) start: u64,
    pub(super) data: Bytes,
}

/// Wait until the blocks `store_blocks` queued are written (or given up): see the module
/// comment (Memory), the blocks are on disk before the answer goes up.
pub(super) async fn blocks_written(
    writes: impl IntoIterator<Item = tokio::sync::oneshot::Receiver<()>>,
) {
    for w in writes {
        let _ = w.await;
    }
}

impl DiskCacheStore {
    /// Keep every whole block inside `fetched` (bytes `start..` of the object): queued for the
    /// writer thread; the answer says when they are written (`None`: nothing queued). Skipped
    /// when the write backlog is full.
    pub(super) fn store_blocks(
        self: &Arc<Self>,
        key: &str,
        meta: &ObjectMeta,
        f: &Fetched,
    ) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let bs = self.cfg.block_size;
        let end = f.start + f.data.len() as u64;
        let object = self.object_id(key, meta);
        let mut todo: Vec<(BlockId, Bytes)> = Vec::new();
        let mut index = f.start.div_ceil(bs);
        let whole = f.start == 0 && f.data.len() as u64 == meta.size && meta.size > 0;
        if whole && meta.size <= self.cfg.copy_max {
            if !self.state().copies.contains_key(&object) {
                todo.push((BlockId { object, index: COPY }, f.data.clone()));
            }
        } else {
            let st = self.state();
            while index * bs < meta.size {
                let len = self.block_len(index, meta.size);
                let (b0, b1) = (index * bs, index * bs + len);
                if b1 > end {
                    break;
                }
                let id = BlockId { object: object.clone(), index };
                if !st.blocks.contains(&id) {
                    let from = (b0 - f.start) as usize;
                    todo.push((id, f.data.slice(from..from + len as usize)));
                }
                index += 1;
            }
        }
        if todo.is_empty() {
            return None;
        }
        let bytes: u64 = todo.iter().map(|(_, d)| d.len() as u64).sum();
        if self
            .backlog
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b + bytes <= WRITE_BACKLOG).then_some(b + bytes)
            })
            .is_err()
        {
            return None;
        }
        let (done, written) = tokio::sync::oneshot::channel();
        let job = WriteJob {
            store: self.clone(),
            key: key.to_string(),
            version: meta.version.clone(),
            size: meta.size,
            blocks: todo,
            bytes,
            done,
        };
        QUEUED.fetch_add(bytes, Ordering::AcqRel);
        let sent = crate::locks::lock(&self.writer).send(job);
        if let Err(unsent) = sent {
            self.backlog.fetch_sub(unsent.0.bytes, Ordering::AcqRel);
            QUEUED.fetch_sub(unsent.0.bytes, Ordering::AcqRel);
            return None;
        }
        Some(written)
    }

    pub(super) fn write_block(
        &self,
        key: &str,
        version: &str,
        size: u64,
        id: &BlockId,
        data: &[u8],
    ) {
        if id.index == COPY {
            return self.write_copy(&id.object, data);
        }
        // Header, data and checksum are written in turn: the data is never copied.
        let header = encode_header(key, version, size, id.index, data.len());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&header), data);
        self.write_file_as(id, None, &self.block_path(id), &[&header, data, &crc.to_le_bytes()]);
    }

    /// Keep `data`, all of `object`, as its copy file.
    pub(super) fn write_copy(&self, object: &str, data: &[u8]) {
        let crc = crc32c::crc32c(data);
        let id = BlockId { object: object.to_string(), index: COPY };
        let copy = CopyFile { crc, checked: true }; // its bytes are the ones fetched
        self.write_file_as(&id, Some(copy), &self.copy_path(object, crc), &[data]);
    }

    /// Write `parts` as the file at `path` (through `tmp/` and a rename, after making room) and
    /// index it as `id` (a copy with its `copy` entry, under the same lock, so that eviction
    /// always finds its name).
    pub(super) fn write_file_as(
        &self,
        id: &BlockId,
        copy: Option<CopyFile>,
        path: &Path,
        parts: &[&[u8]],
    ) {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if len > self.cfg.max_bytes {
            return;
        }
        let victims = self.reserve(len);
        self.remove_files(&victims);
        let tmp = self.root.join("tmp").join(format!(
            "{}.{}",
            std::process::id(),
            self.tmp_seq.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            for part in parts {
                f.write_all(part)?;
            }
            drop(f);
            if let Err(e) = std::fs::rename(&tmp, path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(e);
                }
                std::fs::create_dir_all(path.parent().expect("has a parent"))?;
                std::fs::rename(&tmp, path)?;
            }
            Ok(())
        })();
        let mut st = self.state();
        match written {
            Ok(()) => {
                if let Some((old, _)) = st.blocks.put(id.clone(), (len, Instant::now())) {
                    st.used -= old; // the same block written twice by racing readers
                }
                if let Some(c) = copy {
                    let old = st.copies.insert(id.object.clone(), c);
                    if let Some(old) = old.filter(|o| o.crc != c.crc) {
                        let _ = std::fs::remove_file(self.copy_path(&id.object, old.crc));
                    }
                }
                drop(st);
                self.stats.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                st.used -= len;
                drop(st);
                let _ = std::fs::remove_file(&tmp);
                tracing::debug!(error = %e, "disk cache write failed; block not kept");
            }
        }
    }
}
