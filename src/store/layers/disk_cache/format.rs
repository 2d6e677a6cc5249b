//! The files of the disk cache: their names (a hash of store, key, version and size) and the
//! block file format, checked whole at every read.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::index::{BlockId, COPY};
use super::DiskCacheStore;
use crate::store::ObjectMeta;

pub(super) const MAGIC: &[u8; 8] = b"ZMDCBLK1";

/// Block file: MAGIC, header length (u32 LE), header, data, CRC-32C of all before it (u32 LE).
/// Header: key length (u32) + key, version length (u32) + version, object size, block index,
/// data length (u64 each, LE). This returns what comes before the data.
pub(super) fn encode_header(
    key: &str,
    version: &str,
    size: u64,
    index: u64,
    data_len: usize,
) -> Vec<u8> {
    let mut header = Vec::with_capacity(40 + key.len() + version.len());
    header.extend_from_slice(&(key.len() as u32).to_le_bytes());
    header.extend_from_slice(key.as_bytes());
    header.extend_from_slice(&(version.len() as u32).to_le_bytes());
    header.extend_from_slice(version.as_bytes());
    header.extend_from_slice(&size.to_le_bytes());
    header.extend_from_slice(&index.to_le_bytes());
    header.extend_from_slice(&(data_len as u64).to_le_bytes());
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out
}

/// A whole block file in memory (tests).
#[cfg(test)]
pub(super) fn encode_block(
    key: &str,
    version: &str,
    size: u64,
    index: u64,
    data: &[u8],
) -> Vec<u8> {
    let mut out = encode_header(key, version, size, index, data.len());
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Read a block file of `file_len` bytes, whose data is `out.len()` bytes, into `out`; true when
/// it holds exactly what it must: the bytes before the data as `encode_header` makes them for
/// the key, version, object size, index and length wanted, then the data, then the CRC-32C of
/// all before it, and nothing more. The data goes straight into `out`.
pub(super) fn read_block_into(
    mut file: impl Read,
    file_len: u64,
    before: &[u8],
    out: &mut [u8],
) -> bool {
    if file_len != (before.len() + out.len() + 4) as u64 {
        return false;
    }
    let mut head = vec![0u8; before.len()];
    let mut crc = [0u8; 4];
    if file.read_exact(&mut head).is_err() || head != before {
        return false;
    }
    if file.read_exact(out).is_err() || file.read_exact(&mut crc).is_err() {
        return false;
    }
    crc32c::crc32c_append(crc32c::crc32c(before), out) == u32::from_le_bytes(crc)
}

/// The CRC-32C of a whole file, read in pieces into one buffer per thread (a buffer of the
/// file's size would cost a page fault per 4 KiB, more than the checksum itself).
pub(super) fn crc_of(mut file: &File) -> Option<u32> {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 256 << 10]);
    }
    BUF.with_borrow_mut(|buf| {
        let mut crc = 0;
        loop {
            match file.read(buf) {
                Ok(0) => return Some(crc),
                Ok(n) => crc = crc32c::crc32c_append(crc, &buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    })
}

/// The files in the subdirectories of `dir` whose names `parse` takes, with their mtimes and
/// sizes; any other file there is deleted (a leftover of an older layout, or not ours).
pub(super) fn scan_files<T>(
    dir: &Path,
    parse: impl Fn(&str) -> Option<T>,
) -> std::io::Result<Vec<(SystemTime, T, u64)>> {
    let mut found = Vec::new();
    for sub in std::fs::read_dir(dir)? {
        let sub = sub?;
        if !sub.file_type()?.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(sub.path())? {
            let f = f?;
            let md = f.metadata()?;
            match f.file_name().to_str().and_then(&parse) {
                Some(t) if md.is_file() => {
                    found.push((md.modified().unwrap_or(UNIX_EPOCH), t, md.len()))
                }
                _ => {
                    let _ = std::fs::remove_file(f.path());
                }
            }
        }
    }
    Ok(found)
}

/// `<32 hex>.<rest>` -> the object's name and the rest.
pub(super) fn split_object_name(name: &str) -> Option<(String, &str)> {
    let (object, rest) = name.split_once('.')?;
    let hex = object.len() == 32 && object.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| (object.to_string(), rest))
}

/// `<32 hex>.<index>` -> the block it names.
pub(super) fn parse_block_name(name: &str) -> Option<BlockId> {
    let (object, index) = split_object_name(name)?;
    Some(BlockId { object, index: index.parse().ok().filter(|&i| i != COPY)? })
}

/// `<32 hex>.<8 hex>` -> the object a copy file holds, and its CRC-32C.
pub(super) fn parse_copy_name(name: &str) -> Option<(String, u32)> {
    let (object, crc) = split_object_name(name)?;
    (crc.len() == 8).then_some(())?;
    Some((object, u32::from_str_radix(crc, 16).ok()?))
}

impl DiskCacheStore {
    pub(super) fn object_id(&self, key: &str, meta: &ObjectMeta) -> String {
        let modified = meta.modified.duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [self.identity.as_bytes(), key.as_bytes(), meta.version.as_bytes()] {
            ctx.update(&(part.len() as u64).to_le_bytes());
            ctx.update(part);
        }
        ctx.update(&meta.size.to_le_bytes());
        // Without a version tag (some HTTP servers) the modification time has to stand in.
        if meta.version.is_empty() {
            ctx.update(&modified.to_le_bytes());
        }
        ctx.finish().as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    pub(super) fn block_path(&self, id: &BlockId) -> PathBuf {
        self.root.join("blocks").join(&id.object[..2]).join(format!("{}.{}", id.object, id.index))
    }

    pub(super) fn copy_path(&self, object: &str, crc: u32) -> PathBuf {
        self.root.join("copies").join(&object[..2]).join(format!("{object}.{crc:08x}"))
    }

    /// The expected payload length of block `index` of an object of `size` bytes.
    pub(super) fn block_len(&self, index: u64, size: u64) -> u64 {
        let start = index * self.cfg.block_size;
        size.saturating_sub(start).min(self.cfg.block_size)
    }
}
