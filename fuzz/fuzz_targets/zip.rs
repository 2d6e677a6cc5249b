//! Zip archives (`store::backends::zip::ZipStore`): open over a memory store, then list the whole tree
//! and read every entry, whole and by ranges, as the mount does.
//!
//! Input: the bytes of one archive.
//!
//! Invariants: no claim in the archive is allocated for before it is checked against the
//! bytes actually there (a zip claiming 2^40 entries or a huge entry is refused; the
//! allocation guard aborts otherwise); every listed file and directory can be looked up; a
//! successful read returns exactly the entry's size, and a ranged read is that slice of it.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::backends::zip::ZipStore;
use zarr_mount::store::prelude::*;

/// Directories and files visited per input (a hostile archive may list many).
const MAX_VISITS: usize = 512;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().expect("runtime"))
}

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    runtime().block_on(check(Bytes::copy_from_slice(data)));
});

async fn check(archive: Bytes) {
    let backing = Arc::new(MemoryStore::new());
    backing.put("a.zip", archive).await.expect("memory put");
    let Ok(zip) = ZipStore::open(backing, "a.zip").await else {
        return;
    };

    let mut dirs = vec![String::new()];
    let mut visits = 0;
    let mut files_seen = 0;
    while let Some(dir) = dirs.pop() {
        visits += 1;
        if visits > MAX_VISITS {
            return;
        }
        let lookup = zip.lookup(&dir).await.expect("lookup");
        assert!(lookup.dir || dir.is_empty(), "listed directory {dir:?} not found");
        let listing = zip.list(&dir).await.expect("list");
        for sub in listing.dirs {
            dirs.push(join(&dir, &sub));
        }
        for (leaf, meta) in listing.files {
            visits += 1;
            files_seen += 1;
            let key = join(&dir, &leaf);
            let head = zip.head(&key).await.expect("head").expect("listed file has metadata");
            assert_eq!(head.size, meta.size);
            let Ok(whole) = zip.get(&key).await else {
                continue;
            };
            assert_eq!(
                whole.len() as u64,
                meta.size,
                "{key}: read {} of {} bytes",
                whole.len(),
                meta.size
            );
            let len = whole.len() as u64;
            for (start, end) in
                [(0, 1), (1, len.saturating_sub(1)), (len / 2, len + 10), (len + 1, len + 2)]
            {
                let part =
                    zip.get_range(&key, start..end).await.expect("range of a readable entry");
                let (s, e) = (start.min(len) as usize, end.min(len) as usize);
                let want = if s < e { &whole[s..e] } else { &[][..] };
                assert_eq!(&part[..], want, "{key} {start}..{end}");
            }
        }
    }
    assert!(files_seen <= zip.len());
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}
