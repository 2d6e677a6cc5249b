//! Regression tests for the races and gaps the concurrency soak (tests/it/soak.rs) found, each
//! pinned down deterministically and named after the bug.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use common::zfs::{
    ino_of, local_of, put_sharded_array, raw_fs, read_file, remove_file, rename, stored_chunks,
    unsharded_fs, write_file,
};
use common::{dirs, Mount};
use zarr_mount::fs::inodes::table::ROOT_INO;
use zarr_mount::store::backends::local::LocalStore;
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::prelude::*;

#[tokio::test]
async fn a_reader_closing_does_not_store_a_writers_unfinished_data() {
    let store = Arc::new(MemoryStore::new());
    let fs = raw_fs(store.clone(), false);
    let (_, w) = fs.create(ROOT_INO, "f", libc::O_WRONLY).await.unwrap();
    fs.write(w.fh, 0, b"first half, ").await.unwrap();
    // Another process reads the file while it is being written, and closes it.
    let r = fs.open(ino_of(&fs, "f").await.unwrap(), libc::O_RDONLY).await.unwrap();
    assert_eq!(&fs.read(r.fh, 0, 100).await.unwrap()[..], b"first half, ");
    fs.flush(r.fh).await.unwrap();
    fs.fsync(r.fh).await.unwrap();
    fs.release(r.fh).await.unwrap();
    assert!(
        store.head("f").await.unwrap().is_none(),
        "a reader's close stored the writer's half-written file"
    );
    fs.write(w.fh, 12, b"second half").await.unwrap();
    fs.flush(w.fh).await.unwrap();
    fs.release(w.fh).await.unwrap();
    assert_eq!(store.get("f").await.unwrap(), Bytes::from_static(b"first half, second half"));
}

#[tokio::test]
async fn a_file_replaced_after_open_is_never_read_as_a_cut_of_the_new_content() {
    let store = Arc::new(MemoryStore::new());
    store.put("f", Bytes::from_static(b"old content")).await.unwrap();
    let fs = raw_fs(store.clone(), false);
    let h = fs.open(ino_of(&fs, "f").await.unwrap(), libc::O_RDONLY).await.unwrap();
    // Replaced behind the open file (another mount, another program) with other content.
    store.put("f", Bytes::from_static(b"new and longer content")).await.unwrap();
    let got = fs.read(h.fh, 0, 1 << 20).await;
    assert_eq!(got.unwrap_err().errno(), libc::ESTALE, "the old size cut the new content");
    fs.release(h.fh).await.unwrap();
    // Opened again, it reads the new content (the stale metadata was dropped).
    assert_eq!(read_file(&fs, "f").await.unwrap(), b"new and longer content");
}

/// A chunk rewritten in place through the same mount while a reader has it open: one inode has
/// one content, and the writes gave it the new size, so the reader reads the new chunk whole,
/// neither the old chunk's bytes nor ESTALE.
#[tokio::test]
async fn a_chunk_rewritten_in_place_after_open_reads_as_the_new_chunk() {
    let store = Arc::new(MemoryStore::new());
    let chunks: BTreeMap<u64, Vec<u8>> = [(local_of(0, 1), b"old chunk".to_vec())].into();
    put_sharded_array(&*store, "a", &chunks).await;
    let fs = unsharded_fs(store.clone());
    let ino = ino_of(&fs, "a/c/0/1").await.unwrap();
    let h = fs.open(ino, libc::O_RDONLY).await.unwrap();
    let new = b"the new chunk, longer than before";
    write_file(&fs, "a/c/0/1", new).await.unwrap();
    assert_eq!(fs.getattr(ino).await.unwrap().size, new.len() as u64);
    assert_eq!(&fs.read(h.fh, 0, 1 << 20).await.unwrap()[..], new);
    fs.release(h.fh).await.unwrap();
    assert_eq!(read_file(&fs, "a/c/0/1").await.unwrap(), new);
}

/// The same chunk rewritten through another daemon (its own filesystem over the same store):
/// the reader's inode knows the old size, and its read of the old chunk's range finds the
/// shard changed: ESTALE, never the new chunk cut to the old size.
#[tokio::test]
async fn a_chunk_rewritten_by_another_daemon_after_open_is_estale() {
    let store = Arc::new(MemoryStore::new());
    let chunks: BTreeMap<u64, Vec<u8>> = [(local_of(0, 1), b"old chunk".to_vec())].into();
    put_sharded_array(&*store, "a", &chunks).await;
    let fs = unsharded_fs(store.clone());
    let ino = ino_of(&fs, "a/c/0/1").await.unwrap();
    let old_size = fs.getattr(ino).await.unwrap().size;
    let h = fs.open(ino, libc::O_RDONLY).await.unwrap();
    let other = unsharded_fs(store.clone());
    write_file(&other, "a/c/0/1", b"the new chunk, longer than before").await.unwrap();
    let got = fs.read(h.fh, 0, old_size as u32).await;
    assert_eq!(got.unwrap_err().errno(), libc::ESTALE, "the new chunk was cut to the old size");
    fs.release(h.fh).await.unwrap();
    assert_eq!(read_file(&fs, "a/c/0/1").await.unwrap(), b"the new chunk, longer than before");
}

/// A chunk of the same size rewritten and moved within its shard by another daemon while a
/// reader has it open: the reader's first try (at the offset it opened with) finds the shard
/// changed, and every read, the first and the later ones, gives the new chunk.
#[tokio::test]
async fn a_chunk_moved_by_another_daemon_after_open_reads_as_the_new_chunk() {
    let store = Arc::new(MemoryStore::new());
    let chunks: BTreeMap<u64, Vec<u8>> =
        [(local_of(0, 0), b"aaaa".to_vec()), (local_of(0, 1), b"old chunk".to_vec())].into();
    put_sharded_array(&*store, "a", &chunks).await;
    let fs = unsharded_fs(store.clone());
    let ino = ino_of(&fs, "a/c/0/1").await.unwrap();
    let h = fs.open(ino, libc::O_RDONLY).await.unwrap();
    assert_eq!(&fs.read(h.fh, 0, 100).await.unwrap()[..], b"old chunk");
    let other = unsharded_fs(store.clone());
    write_file(&other, "a/c/0/0", b"a longer first chunk").await.unwrap();
    write_file(&other, "a/c/0/1", b"new chunk").await.unwrap();
    for _ in 0..2 {
        assert_eq!(&fs.read(h.fh, 0, 100).await.unwrap()[..], b"new chunk");
        assert_eq!(&fs.read(h.fh, 4, 5).await.unwrap()[..], b"chunk");
    }
    fs.release(h.fh).await.unwrap();
}

#[test]
fn reading_through_a_mount_while_the_file_is_renamed_over_gives_a_whole_value_or_estale() {
    let (_tmp, src, mnt) = dirs();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    std::fs::create_dir_all(src.join("a/c/0")).unwrap();
    let chunks: BTreeMap<u64, Vec<u8>> = [(local_of(0, 1), b"old chunk".to_vec())].into();
    rt.block_on(put_sharded_array(&LocalStore::open(&src).unwrap(), "a", &chunks));
    std::fs::write(src.join("f"), b"old file").unwrap();
    let m = Mount::start(&src, &mnt, &[]);
    for (path, old) in [("f", &b"old file"[..]), ("a/c/0/1", b"old chunk")] {
        let mut reader = std::fs::File::open(m.path(path)).unwrap();
        // zarr-python's write: a temp file renamed over the key, with content of another size.
        let new = b"the new content, longer than before";
        let tmp = m.path(&format!("{path}.1.partial"));
        std::fs::write(&tmp, new).unwrap();
        std::fs::rename(&tmp, m.path(path)).unwrap();
        let mut got = Vec::new();
        match reader.read_to_end(&mut got) {
            Ok(_) => assert!(
                got == old || got == new,
                "{path}: read {:?}",
                String::from_utf8_lossy(&got)
            ),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{path}: {e}"),
        }
        assert_eq!(std::fs::read(m.path(path)).unwrap(), new, "{path}: reopened");
    }
}

#[tokio::test]
async fn a_shard_whose_directory_was_pruned_can_be_written_again() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("a/c/0")).unwrap();
    let store = Arc::new(LocalStore::open(tmp.path()).unwrap());
    let one: BTreeMap<u64, Vec<u8>> = [(local_of(1, 1), b"only chunk".to_vec())].into();
    put_sharded_array(&*store, "a", &one).await;
    let fs = unsharded_fs(store.clone());
    // Deleting the last chunk deletes the shard and the directories it leaves empty.
    remove_file(&fs, "a/c/1/1").await.unwrap();
    assert!(!tmp.path().join("a/c").exists());
    write_file(&fs, "a/c/2/3", b"new chunk").await.unwrap();
    let want: BTreeMap<u64, Vec<u8>> = [(local_of(2, 3), b"new chunk".to_vec())].into();
    assert_eq!(stored_chunks(&*store, "a/c/0/0").await.unwrap(), want);
}

#[tokio::test]
async fn a_late_release_of_a_closed_writer_does_not_store_the_next_writers_half() {
    let store = Arc::new(MemoryStore::new());
    let fs = raw_fs(store.clone(), false);
    let (_, first) = fs.create(ROOT_INO, "f", libc::O_WRONLY).await.unwrap();
    fs.write(first.fh, 0, b"complete value").await.unwrap();
    fs.flush(first.fh).await.unwrap(); // close() returned; the kernel sends RELEASE later
    let ino = ino_of(&fs, "f").await.unwrap();
    let second = fs.open(ino, libc::O_WRONLY | libc::O_TRUNC).await.unwrap();
    fs.write(second.fh, 0, b"half").await.unwrap();
    fs.release(first.fh).await.unwrap();
    assert_eq!(store.get("f").await.unwrap(), Bytes::from_static(b"complete value"));
    fs.write(second.fh, 4, b" and the rest").await.unwrap();
    fs.flush(second.fh).await.unwrap();
    fs.release(second.fh).await.unwrap();
    assert_eq!(store.get("f").await.unwrap(), Bytes::from_static(b"half and the rest"));
}

#[tokio::test]
async fn a_file_unlinked_while_open_keeps_working_through_its_handle() {
    let store = Arc::new(MemoryStore::new());
    let fs = raw_fs(store.clone(), false);
    let (attr, h) = fs.create(ROOT_INO, "f", libc::O_RDWR).await.unwrap();
    remove_file(&fs, "f").await.unwrap();
    let after = fs.getattr(attr.ino).await.unwrap();
    assert_eq!((after.nlink, after.size), (0, 0), "fstat after unlink");
    fs.write(h.fh, 0, b"still here").await.unwrap();
    assert_eq!(&fs.read(h.fh, 0, 100).await.unwrap()[..], b"still here");
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 10);
    let truncate = zarr_mount::fs::SetAttr { size: Some(5), fh: Some(h.fh), ..Default::default() };
    assert_eq!(fs.setattr(attr.ino, truncate).await.unwrap().size, 5);
    fs.flush(h.fh).await.unwrap();
    fs.release(h.fh).await.unwrap();
    assert!(store.head("f").await.unwrap().is_none(), "an unlinked file was stored");
    assert_eq!(fs.getattr(attr.ino).await.unwrap_err().errno(), libc::ESTALE, "no handle left");
}

#[tokio::test]
async fn a_file_renamed_while_open_for_writing_keeps_its_later_writes() {
    let store = Arc::new(MemoryStore::new());
    let fs = raw_fs(store.clone(), false);
    let (_, h) = fs.create(ROOT_INO, "log", libc::O_WRONLY).await.unwrap();
    fs.write(h.fh, 0, b"first line\n").await.unwrap();
    rename(&fs, "log", "log.1").await.unwrap();
    assert_eq!(store.get("log.1").await.unwrap(), Bytes::from_static(b"first line\n"));
    fs.write(h.fh, 11, b"second line\n").await.unwrap();
    fs.flush(h.fh).await.unwrap();
    fs.release(h.fh).await.unwrap();
    assert_eq!(store.get("log.1").await.unwrap(), Bytes::from_static(b"first line\nsecond line\n"));
    assert!(store.head("log").await.unwrap().is_none());
}

#[tokio::test]
async fn a_writer_of_a_file_replaced_by_rename_does_not_bring_it_back() {
    let store = Arc::new(MemoryStore::new());
    store.put("k", Bytes::from_static(b"old")).await.unwrap();
    store.put("new", Bytes::from_static(b"new value")).await.unwrap();
    let fs = raw_fs(store.clone(), false);
    let w = fs.open(ino_of(&fs, "k").await.unwrap(), libc::O_WRONLY).await.unwrap();
    fs.write(w.fh, 0, b"OLD").await.unwrap();
    rename(&fs, "new", "k").await.unwrap();
    fs.flush(w.fh).await.unwrap();
    fs.release(w.fh).await.unwrap();
    assert_eq!(store.get("k").await.unwrap(), Bytes::from_static(b"new value"));
}

#[tokio::test]
async fn create_of_a_name_that_exists_does_not_truncate_unless_asked() {
    let store = Arc::new(MemoryStore::new());
    let fs = raw_fs(store.clone(), false);
    store.put("f", Bytes::from_static(b"kept content")).await.unwrap(); // behind the kernel's back
    let (attr, h) = fs.create(ROOT_INO, "f", libc::O_WRONLY).await.unwrap();
    assert_eq!(attr.size, 12);
    fs.release(h.fh).await.unwrap();
    assert_eq!(store.get("f").await.unwrap(), Bytes::from_static(b"kept content"));
    assert_eq!(
        fs.create(ROOT_INO, "f", libc::O_WRONLY | libc::O_EXCL).await.unwrap_err().errno(),
        libc::EEXIST
    );
    let (_, h) = fs.create(ROOT_INO, "f", libc::O_WRONLY | libc::O_TRUNC).await.unwrap();
    fs.release(h.fh).await.unwrap();
    assert_eq!(store.get("f").await.unwrap(), Bytes::new());
}
