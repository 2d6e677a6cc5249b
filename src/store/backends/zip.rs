//! A read-only store over one zip archive that itself is one object in another store.
//!
//! The same code serves a local `.zip` (backing = a `LocalStore` of the parent directory) and a
//! zip in an object store. Opening costs one suffix request for the archive's tail (end of
//! central directory records and, usually, the whole central directory) plus, only when the
//! central directory is larger than that tail, one request for the missing part of it. The
//! central directory is parsed by the `zip` crate over a sparse in-memory view of exactly those
//! bytes, so no other part of the archive is ever read at open.
//!
//! Entry data offsets are only known from each entry's local header (its extra field may differ
//! from the central one), so they are resolved lazily: the first read of an entry fetches the
//! local header together with the wanted bytes in one request when the range starts near the
//! entry start, else it fetches the 30-byte fixed header first. Local headers that lie inside
//! the bytes fetched at open are resolved for free.
//!
//! Stored entries are served by one ranged read each. Deflated entries are inflated whole,
//! checked against their CRC-32 and kept in a small byte-bounded LRU.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::zip::read::{ArchiveOffset, Config};
use ::zip::CompressionMethod;
use async_trait::async_trait;
use bytes::Bytes;

use crate::store::read_only::ReadOnly;
use crate::store::StoreHints;
use crate::store::{
    validate_key, ByteRange, Listing, Lookup, ObjectMeta, Store, StoreError, StoreResult,
};
use crate::store::{ListStore, ReadStore};

/// Bytes fetched from the end of the archive at open: the largest EOCD (22 bytes + a 64 KiB
/// comment), the ZIP64 locator (20) and ZIP64 EOCD record (56), and some slack.
const TAIL_LEN: u64 = 64 * 1024 + 1024;
/// Bytes of a local file header before the name.
const LOCAL_HEADER_LEN: u64 = 30;
/// A central directory header is at least this long.
const CENTRAL_HEADER_MIN: u64 = 46;
/// Refuse central directories larger than this (about 10 million entries with short names).
const MAX_CENTRAL_DIRECTORY: u64 = 1 << 30;
/// Guess for a local header's extra field when fetching header and data in one request.
const LOCAL_EXTRA_GUESS: u64 = 64;
/// Fetch the local header together with the data when the range starts within this distance.
const COMBINE_LIMIT: u64 = 64 * 1024;
/// Bound of the inflated-entry cache.
const INFLATED_CACHE_BYTES: usize = 64 << 20;
/// Largest deflated entry read: one is inflated whole (to check its CRC-32) and held while it
/// is read, and one larger than the cache would be inflated again by every read. A bomb that
/// declares its huge size honestly (1 GiB from a 1 MiB stream) is refused here, one that
/// declares a small size stops inflating one byte past it.
const MAX_INFLATED_ENTRY: u64 = INFLATED_CACHE_BYTES as u64;

const SIG_EOCD: u32 = 0x0605_4b50;
const SIG_EOCD64_LOCATOR: u32 = 0x0706_4b50;
const SIG_EOCD64: u32 = 0x0606_4b50;
const SIG_LOCAL: u32 = 0x0403_4b50;

/// Why an archive cannot be opened. One line each; the mount prints it and exits.
#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    #[error("zip archive {0} not found")]
    NotFound(String),
    #[error("cannot read zip archive {key}: {source}")]
    Store {
        key: String,
        #[source]
        source: StoreError,
    },
    #[error("{key} is not a usable zip archive: {message}")]
    Invalid { key: String, message: String },
}

/// One file entry of the archive.
#[derive(Debug)]
struct Entry {
    /// Absolute offset of the local header in the archive.
    header_start: u64,
    /// Absolute offset of the data; known once the local header has been read.
    data_start: OnceLock<u64>,
    method: CompressionMethod,
    encrypted: bool,
    compressed_size: u64,
    size: u64,
    crc32: u32,
    name_len: u64,
    meta: ObjectMeta,
}

#[derive(Debug, Default)]
struct DirNode {
    files: BTreeSet<String>,
    dirs: BTreeSet<String>,
}

/// A read-only store over the entries of one zip archive.
pub struct ZipStore {
    backing: Arc<dyn Store>,
    key: String,
    archive_len: u64,
    files: HashMap<String, Entry>,
    dirs: HashMap<String, DirNode>,
    inflated: Mutex<InflatedCache<InflatedKey>>,
}

/// What identifies an inflated entry: its local header offset together with what the central
/// directory says about its data. A hostile archive may point several central entries (with
/// different sizes) at one local header, so the offset alone could hand one entry another's
/// content (found by fuzz/fuzz_targets/zip.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct InflatedKey {
    header_start: u64,
    compressed_size: u64,
    size: u64,
    crc32: u32,
}

impl InflatedKey {
    fn of(e: &Entry) -> Self {
        InflatedKey {
            header_start: e.header_start,
            compressed_size: e.compressed_size,
            size: e.size,
            crc32: e.crc32,
        }
    }
}

/// Inflated entries, least recently used first out, bounded by bytes.
struct InflatedCache<K> {
    lru: lru::LruCache<K, Bytes>,
    bytes: usize,
    limit: usize,
}

impl<K: std::hash::Hash + Eq> InflatedCache<K> {
    fn new(limit: usize) -> Self {
        InflatedCache { lru: lru::LruCache::unbounded(), bytes: 0, limit }
    }

    fn get(&mut self, k: K) -> Option<Bytes> {
        self.lru.get(&k).cloned()
    }

    fn insert(&mut self, k: K, v: Bytes) {
        if v.len() > self.limit {
            return;
        }
        self.bytes += v.len();
        if let Some(old) = self.lru.put(k, v) {
            self.bytes -= old.len();
        }
        while self.bytes > self.limit {
            match self.lru.pop_lru() {
                Some((_, old)) => self.bytes -= old.len(),
                None => break,
            }
        }
    }
}

/// What the end of central directory records say.
#[derive(Debug, PartialEq, Eq)]
struct CentralDirectoryEnd {
    /// Absolute start of the central directory (it ends where the end records begin).
    cd_start: u64,
    cd_size: u64,
    entries: u64,
    /// Bytes prepended to the archive (self-extractors); added to every recorded offset.
    archive_offset: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Find and check the end of central directory records in `tail`, the last bytes of an archive
/// of `archive_len` bytes. Only the fixed-size records are parsed here (so an absurd claim is
/// refused before anything is allocated for it); the central directory itself is left to the
/// `zip` crate.
fn find_end(tail: &[u8], archive_len: u64) -> Result<CentralDirectoryEnd, String> {
    let tail_start = archive_len - tail.len() as u64;
    if tail.len() < 22 {
        return Err("too short to be a zip archive (no end of central directory record)".into());
    }
    let mut first_error = None;
    // Scan backwards; the record nearest the end whose fields are consistent wins.
    for p in (0..=tail.len() - 22).rev() {
        if u32_at(tail, p) != SIG_EOCD {
            continue;
        }
        match parse_end_at(tail, tail_start, archive_len, p) {
            Ok(end) => return Ok(end),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| {
        "no end of central directory record (truncated or not a zip archive)".to_string()
    }))
}

fn parse_end_at(
    tail: &[u8],
    tail_start: u64,
    archive_len: u64,
    p: usize,
) -> Result<CentralDirectoryEnd, String> {
    let eocd_pos = tail_start + p as u64;
    let disk = u16_at(tail, p + 4);
    let cd_disk = u16_at(tail, p + 6);
    let mut entries = u64::from(u16_at(tail, p + 10));
    let mut cd_size = u64::from(u32_at(tail, p + 12));
    let mut cd_offset = u64::from(u32_at(tail, p + 16));
    let comment_len = u64::from(u16_at(tail, p + 20));
    if eocd_pos + 22 + comment_len > archive_len {
        return Err("end of central directory comment runs past the end of the archive".into());
    }
    let mut cd_end = eocd_pos;
    // A ZIP64 locator right before the EOCD means the ZIP64 record holds the real values.
    let has_locator = p >= 20 && u32_at(tail, p - 20) == SIG_EOCD64_LOCATOR;
    if has_locator {
        let loc = p - 20;
        if u32_at(tail, loc + 16) > 1 {
            return Err("multi-disk zip archives are not supported".into());
        }
        let recorded = u64_at(tail, loc + 8);
        // The ZIP64 record normally ends right at the locator; also accept its recorded position.
        let mut found = None;
        for at in [loc.checked_sub(56).map(|x| tail_start + x as u64), Some(recorded)]
            .into_iter()
            .flatten()
        {
            if at < tail_start || at.saturating_add(56) > tail_start + loc as u64 {
                continue;
            }
            let r = (at - tail_start) as usize;
            if u32_at(tail, r) == SIG_EOCD64 {
                found = Some(r);
                break;
            }
        }
        let Some(r) = found else {
            return Err(
                "ZIP64 end of central directory record not found where its locator points".into()
            );
        };
        if u32_at(tail, r + 16) != 0 || u32_at(tail, r + 20) != 0 {
            return Err("multi-disk zip archives are not supported".into());
        }
        entries = u64_at(tail, r + 32);
        cd_size = u64_at(tail, r + 40);
        cd_offset = u64_at(tail, r + 48);
        cd_end = tail_start + r as u64;
    } else {
        if entries == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_offset == 0xFFFF_FFFF {
            return Err("ZIP64 archive without its ZIP64 end of central directory locator".into());
        }
        if disk != 0 || cd_disk != 0 || u16_at(tail, p + 8) != u16_at(tail, p + 10) {
            return Err("multi-disk zip archives are not supported".into());
        }
    }
    let Some(cd_start) = cd_end.checked_sub(cd_size) else {
        return Err(format!(
            "central directory size {cd_size} is larger than the {cd_end} bytes before its end record"
        ));
    };
    let Some(archive_offset) = cd_start.checked_sub(cd_offset) else {
        return Err(format!(
            "central directory offset {cd_offset} lies past the central directory ({cd_start})"
        ));
    };
    if cd_size > MAX_CENTRAL_DIRECTORY {
        return Err(format!(
            "central directory of {cd_size} bytes is larger than the supported {MAX_CENTRAL_DIRECTORY}"
        ));
    }
    if entries.saturating_mul(CENTRAL_HEADER_MIN) > cd_size {
        return Err(format!(
            "central directory claims {entries} entries but has only {cd_size} bytes"
        ));
    }
    Ok(CentralDirectoryEnd { cd_start, cd_size, entries, archive_offset })
}

/// A `Read + Seek` view of an archive of `len` bytes of which only `buf` (starting at absolute
/// offset `base`) is present. Reads outside it fail, so the parser can never make us fetch more.
struct SparseReader<'a> {
    base: u64,
    buf: &'a [u8],
    len: u64,
    pos: u64,
}

impl Read for SparseReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if out.is_empty() || self.pos >= self.len {
            return Ok(0);
        }
        let end = self.base + self.buf.len() as u64;
        if self.pos < self.base || self.pos >= end {
            return Err(std::io::Error::other(format!(
                "the parser asked for byte {} outside the fetched range {}..{end}",
                self.pos, self.base
            )));
        }
        let at = (self.pos - self.base) as usize;
        let n = out.len().min(self.buf.len() - at);
        out[..n].copy_from_slice(&self.buf[at..at + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SparseReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let new = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before start")
        })?;
        Ok(self.pos)
    }
}

/// Seconds since the epoch of a DOS date and time (taken as UTC; zip has no time zone).
fn dos_time(dt: ::zip::DateTime) -> Option<SystemTime> {
    let (y, m, d) = (i64::from(dt.year()), i64::from(dt.month()), i64::from(dt.day()));
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400
        + i64::from(dt.hour()) * 3600
        + i64::from(dt.minute()) * 60
        + i64::from(dt.second());
    u64::try_from(secs).ok().map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

impl ZipStore {
    /// Open the zip archive stored at `key` in `backing`, reading its central directory once.
    /// The archive is read-only: the store refuses every write.
    pub async fn open(backing: Arc<dyn Store>, key: &str) -> Result<ReadOnly<ZipStore>, ZipError> {
        let invalid = |message: String| ZipError::Invalid { key: key.to_string(), message };
        let store_err = |source: StoreError| match source {
            StoreError::NotFound(_) => ZipError::NotFound(key.to_string()),
            source => ZipError::Store { key: key.to_string(), source },
        };

        let (tail, meta) = backing
            .get_ranged(key, ByteRange::Suffix(TAIL_LEN))
            .await
            .map_err(store_err)?
            .ok_or_else(|| ZipError::NotFound(key.to_string()))?;
        let archive_len = meta.size;
        if tail.len() as u64 != archive_len.min(TAIL_LEN) {
            return Err(invalid(format!(
                "short read: got {} bytes of the archive's last {}",
                tail.len(),
                archive_len.min(TAIL_LEN)
            )));
        }
        let tail_start = archive_len - tail.len() as u64;
        let end = find_end(&tail, archive_len).map_err(invalid)?;

        // The central directory plus the end records, contiguous from `base`.
        let (base, buf) = if end.cd_start < tail_start {
            let head = backing.get_range(key, end.cd_start..tail_start).await.map_err(store_err)?;
            if head.len() as u64 != tail_start - end.cd_start {
                return Err(invalid("short read of the central directory".into()));
            }
            let mut v = Vec::with_capacity(head.len() + tail.len());
            v.extend_from_slice(&head);
            v.extend_from_slice(&tail);
            (end.cd_start, Bytes::from(v))
        } else {
            (tail_start, tail)
        };

        let reader = SparseReader { base, buf: &buf, len: archive_len, pos: 0 };
        let config = Config { archive_offset: ArchiveOffset::Known(end.archive_offset) };
        let archive =
            ::zip::ZipArchive::with_config(config, reader).map_err(|e| invalid(e.to_string()))?;
        let parsed = archive.metadata();

        let archive_modified = meta.modified;
        let mut files = HashMap::new();
        let mut dirs: HashMap<String, DirNode> = HashMap::new();
        dirs.insert(String::new(), DirNode::default());
        // The crate keys entries by name: a duplicated name keeps its first position and its
        // last header, which is what zarr-python (Python's zipfile) reads too.
        for i in 0..parsed.len() {
            let e = parsed.entry(i).map_err(|e| invalid(e.to_string()))?;
            let raw_name = match e.name() {
                Ok(n) => n.into_owned(),
                Err(err) => {
                    tracing::warn!(
                        archive = key,
                        "skipping zip entry with an undecodable name: {err}"
                    );
                    continue;
                }
            };
            let is_dir = raw_name.ends_with('/');
            let name = raw_name.strip_suffix('/').unwrap_or(&raw_name);
            if name.is_empty() || validate_key(name).is_err() {
                tracing::warn!(archive = key, entry = ?raw_name, "skipping zip entry with a hostile or invalid name");
                continue;
            }
            if is_dir {
                add_dir(&mut dirs, name);
                continue;
            }
            let (parent, leaf) = crate::store::split_key(name);
            add_dir(&mut dirs, parent);
            dirs.get_mut(parent).expect("just added").files.insert(leaf.to_string());
            let header_start = e.header_start();
            let entry = Entry {
                header_start,
                data_start: OnceLock::new(),
                method: e.compression(),
                encrypted: e.encrypted(),
                compressed_size: e.compressed_size(),
                size: e.size(),
                crc32: e.crc32(),
                name_len: e.name_raw().len() as u64,
                meta: ObjectMeta {
                    size: e.size(),
                    modified: e.last_modified().and_then(dos_time).unwrap_or(archive_modified),
                    version: format!("zip-{:08x}-{:x}-{:x}", e.crc32(), header_start, e.size()),
                    perms: None,
                },
            };
            // Local headers inside the bytes we already hold are resolved for free.
            if header_start >= base && header_start + LOCAL_HEADER_LEN <= base + buf.len() as u64 {
                let at = (header_start - base) as usize;
                if let Ok(ds) =
                    parse_local_header(&buf[at..at + LOCAL_HEADER_LEN as usize], header_start)
                {
                    let _ = entry.data_start.set(ds);
                }
            }
            files.insert(name.to_string(), entry);
        }
        tracing::debug!(
            archive = key,
            entries = files.len(),
            central_directory = end.cd_size,
            "opened zip archive"
        );
        Ok(ReadOnly(ZipStore {
            backing,
            key: key.to_string(),
            archive_len,
            files,
            dirs,
            inflated: Mutex::new(InflatedCache::new(INFLATED_CACHE_BYTES)),
        }))
    }

    /// Number of file entries served.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    fn entry_error(&self, name: &str, message: impl Into<String>) -> StoreError {
        StoreError::Backend { key: format!("{}:{name}", self.key), message: message.into() }
    }

    fn backing_error(&self, e: StoreError) -> StoreError {
        match e {
            // The archive vanished under us: not the entry's absence.
            StoreError::NotFound(_) => {
                self.entry_error("", "the zip archive is gone from its backing store")
            }
            e => e,
        }
    }

    /// Bytes `range` (relative to the start of the entry's stored data, within it) of `name`'s
    /// stored data: one backing request once the data offset is known; on the first read one
    /// request covering header and data, or two when the range starts far into the entry.
    async fn read_data(&self, name: &str, e: &Entry, range: Range<u64>) -> StoreResult<Bytes> {
        let want = range.end - range.start;
        if let Some(&ds) = e.data_start.get() {
            self.check_data_end(name, e, ds)?;
            return self.fetch(name, ds + range.start..ds + range.end).await;
        }
        let hs = e.header_start;
        if hs + LOCAL_HEADER_LEN > self.archive_len {
            return Err(self.entry_error(name, "local header lies beyond the end of the archive"));
        }
        if range.start <= COMBINE_LIMIT {
            let end = (hs + LOCAL_HEADER_LEN + e.name_len + LOCAL_EXTRA_GUESS + range.end)
                .min(self.archive_len);
            let got = self.fetch_any(hs..end).await?;
            let ds = self.resolve(name, e, &got)?;
            let from = (ds - hs + range.start) as usize;
            if from + want as usize <= got.len() {
                return Ok(got.slice(from..from + want as usize));
            }
            return self.fetch(name, ds + range.start..ds + range.end).await;
        }
        let got = self.fetch_any(hs..hs + LOCAL_HEADER_LEN).await?;
        let ds = self.resolve(name, e, &got)?;
        self.fetch(name, ds + range.start..ds + range.end).await
    }

    /// Parse the local header at the start of `got`, record and check the data offset.
    fn resolve(&self, name: &str, e: &Entry, got: &[u8]) -> StoreResult<u64> {
        let ds = parse_local_header(got, e.header_start).map_err(|m| self.entry_error(name, m))?;
        let _ = e.data_start.set(ds);
        self.check_data_end(name, e, ds)?;
        Ok(ds)
    }

    fn check_data_end(&self, name: &str, e: &Entry, ds: u64) -> StoreResult<()> {
        match ds.checked_add(e.compressed_size) {
            Some(end) if end <= self.archive_len => Ok(()),
            _ => Err(self.entry_error(
                name,
                format!(
                    "entry data ({} bytes at offset {ds}) lies beyond the end of the archive ({} bytes)",
                    e.compressed_size, self.archive_len
                ),
            )),
        }
    }

    /// A ranged read of the archive that must return every byte.
    async fn fetch(&self, name: &str, r: Range<u64>) -> StoreResult<Bytes> {
        let n = r.end - r.start;
        let got = self.fetch_any(r).await?;
        if got.len() as u64 != n {
            return Err(self.entry_error(name, format!("short read: {} of {n} bytes", got.len())));
        }
        Ok(got)
    }

    async fn fetch_any(&self, r: Range<u64>) -> StoreResult<Bytes> {
        self.backing.get_range(&self.key, r).await.map_err(|e| self.backing_error(e))
    }

    fn file(&self, name: &str) -> StoreResult<&Entry> {
        match self.files.get(name) {
            Some(e) => Ok(e),
            None if self.dirs.contains_key(name) => Err(StoreError::IsADirectory(name.into())),
            None => Err(StoreError::NotFound(name.into())),
        }
    }

    /// The whole inflated content of a deflated entry, from the cache or fetched, inflated and
    /// checked against its CRC-32.
    async fn inflated(&self, name: &str, e: &Entry) -> StoreResult<Bytes> {
        let key = InflatedKey::of(e);
        if let Some(b) = crate::locks::lock(&self.inflated).get(key) {
            return Ok(b);
        }
        let compressed = self.read_data(name, e, 0..e.compressed_size).await?;
        let (size, crc) = (e.size, e.crc32);
        let result = tokio::task::spawn_blocking(move || inflate(&compressed, size, crc))
            .await
            .map_err(|err| self.entry_error(name, format!("inflate task failed: {err}")))?;
        let data = result.map_err(|m| self.entry_error(name, m))?;
        crate::locks::lock(&self.inflated).insert(key, data.clone());
        Ok(data)
    }

    async fn read(&self, name: &str, range: Range<u64>) -> StoreResult<Bytes> {
        let e = self.file(name)?;
        if e.encrypted {
            return Err(self.entry_error(name, "entry is encrypted"));
        }
        let end = range.end.min(e.size);
        let start = range.start.min(end);
        if e.method == CompressionMethod::STORE {
            if e.compressed_size != e.size {
                return Err(self.entry_error(
                    name,
                    "stored entry whose compressed and uncompressed sizes differ",
                ));
            }
            if start == end {
                return Ok(Bytes::new());
            }
            return self.read_data(name, e, start..end).await;
        }
        if e.method == CompressionMethod::DEFLATE {
            if e.size > MAX_INFLATED_ENTRY {
                return Err(self.entry_error(
                    name,
                    format!(
                        "deflated entry of {} bytes is larger than the {MAX_INFLATED_ENTRY} \
                         bytes the mount inflates",
                        e.size
                    ),
                ));
            }
            let data = self.inflated(name, e).await?;
            return Ok(data.slice(start as usize..end as usize));
        }
        Err(self.entry_error(
            name,
            format!(
                "compression method {:?} is not supported (only stored and deflated)",
                e.method
            ),
        ))
    }
}

fn add_dir(dirs: &mut HashMap<String, DirNode>, dir: &str) {
    // The missing ancestors, deepest first; the root always exists.
    let mut missing = Vec::new();
    let mut d = dir;
    while !dirs.contains_key(d) {
        missing.push(d);
        d = crate::store::split_key(d).0;
    }
    for d in missing.into_iter().rev() {
        let (parent, leaf) = crate::store::split_key(d);
        dirs.get_mut(parent).expect("parent added first").dirs.insert(leaf.to_string());
        dirs.insert(d.to_string(), DirNode::default());
    }
}

/// The absolute data offset from a local header starting at `header_start` (`got` holds at
/// least its first 30 bytes).
fn parse_local_header(got: &[u8], header_start: u64) -> Result<u64, String> {
    if got.len() < LOCAL_HEADER_LEN as usize {
        return Err("local header runs past the end of the archive".into());
    }
    if u32_at(got, 0) != SIG_LOCAL {
        return Err(format!("no local file header at offset {header_start}"));
    }
    let n = u64::from(u16_at(got, 26));
    let x = u64::from(u16_at(got, 28));
    Ok(header_start + LOCAL_HEADER_LEN + n + x)
}

/// Inflate a raw deflate stream that must yield exactly `size` bytes with CRC-32 `crc`.
fn inflate(compressed: &[u8], size: u64, crc: u32) -> Result<Bytes, String> {
    let mut out = Vec::with_capacity(size.min(INFLATED_CACHE_BYTES as u64) as usize);
    let mut dec = flate2::read::DeflateDecoder::new(compressed).take(size.saturating_add(1));
    dec.read_to_end(&mut out).map_err(|e| format!("corrupt deflate data: {e}"))?;
    if out.len() as u64 != size {
        return Err(format!("inflated to {} bytes, the central directory says {size}", out.len()));
    }
    let got = crc32fast::hash(&out);
    if got != crc {
        return Err(format!(
            "CRC-32 mismatch: data has {got:08x}, the central directory says {crc:08x}"
        ));
    }
    Ok(Bytes::from(out))
}

impl StoreHints for ZipStore {
    fn describe(&self) -> String {
        format!("zip:{}/{}", self.backing.describe(), self.key)
    }

    fn has_real_dirs(&self) -> bool {
        false
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        Some((self.archive_len, 0))
    }
}

#[async_trait]
impl ReadStore for ZipStore {
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.read(key, range).await
    }

    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let Some(e) = self.files.get(key) else { return Ok(None) };
        Ok(Some((self.read(key, range.clip(e.size)).await?, e.meta.clone())))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        Ok(self.files.get(key).map(|e| e.meta.clone()))
    }
}

#[async_trait]
impl ListStore for ZipStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        let Some(node) = self.dirs.get(prefix) else { return Ok(Listing::default()) };
        let files = node
            .files
            .iter()
            .filter_map(|leaf| {
                let full = crate::store::join_key(prefix, leaf);
                self.files.get(&full).map(|e| (leaf.clone(), e.meta.clone()))
            })
            .collect();
        Ok(Listing {
            files,
            dirs: node.dirs.iter().cloned().collect(),
            dir_perms: Default::default(),
        })
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        Ok(Lookup {
            file: self.files.get(key).map(|e| e.meta.clone()),
            dir: self.dirs.contains_key(key),
            dir_perms: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::prelude::*;

    /// `data` deflated (raw DEFLATE, as a zip entry holds it).
    fn deflate(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    /// A minimal stored zip: entries (name, data), optional comment. Hand-built so the tests
    /// control every field.
    fn build_zip(entries: &[(&str, &[u8])], comment: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data) in entries {
            let off = out.len() as u32;
            let crc = crc32fast::hash(data);
            let mut h = Vec::new();
            h.extend_from_slice(&SIG_LOCAL.to_le_bytes());
            h.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0x21, 0]); // version, flags, method, time, date
            h.extend_from_slice(&crc.to_le_bytes());
            h.extend_from_slice(&(data.len() as u32).to_le_bytes());
            h.extend_from_slice(&(data.len() as u32).to_le_bytes());
            h.extend_from_slice(&(name.len() as u16).to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(&h);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(data);
            central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            central.extend_from_slice(&[20, 3]);
            central.extend_from_slice(&h[4..28]);
            central.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // extra, comment, disk, attrs
            central.extend_from_slice(&off.to_le_bytes());
            central.extend_from_slice(name.as_bytes());
        }
        let cd_off = out.len() as u32;
        out.extend_from_slice(&central);
        out.extend_from_slice(&SIG_EOCD.to_le_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&(central.len() as u32).to_le_bytes());
        out.extend_from_slice(&cd_off.to_le_bytes());
        out.extend_from_slice(&(comment.len() as u16).to_le_bytes());
        out.extend_from_slice(comment);
        out
    }

    async fn open_bytes(bytes: Vec<u8>) -> Result<ReadOnly<ZipStore>, ZipError> {
        let mem = Arc::new(MemoryStore::new());
        mem.put("a.zip", Bytes::from(bytes)).await.unwrap();
        ZipStore::open(mem, "a.zip").await
    }

    #[tokio::test]
    async fn serves_a_hand_built_zip() {
        let z = open_bytes(build_zip(
            &[("g/zarr.json", b"{}"), ("g/c/0", b"0123456789"), ("top", b"t")],
            b"hi",
        ))
        .await
        .unwrap();
        assert_eq!(z.len(), 3);
        assert_eq!(z.get("g/c/0").await.unwrap(), Bytes::from_static(b"0123456789"));
        assert_eq!(z.get_range("g/c/0", 3..6).await.unwrap(), Bytes::from_static(b"345"));
        assert_eq!(z.get_range("g/c/0", 8..100).await.unwrap(), Bytes::from_static(b"89"));
        assert_eq!(z.get_range("g/c/0", 50..100).await.unwrap(), Bytes::new());
        let root = z.list("").await.unwrap();
        assert_eq!(root.dirs, vec!["g"]);
        assert_eq!(root.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["top"]);
        assert_eq!(z.list("g").await.unwrap().dirs, vec!["c"]);
        assert!(z.lookup("g/c").await.unwrap().dir);
        assert!(matches!(z.get("g").await, Err(StoreError::IsADirectory(_))));
        assert!(matches!(z.get("nope").await, Err(StoreError::NotFound(_))));
        assert!(matches!(z.put("x", Bytes::new()).await, Err(StoreError::ReadOnly)));
        assert!(matches!(z.delete("top").await, Err(StoreError::ReadOnly)));
        assert_eq!(z.describe(), "zip:memory/a.zip");
        // 1980-01-01 00:00:00 (DOS date 0x21 = day 1 month 1 year 0)
        assert_eq!(
            z.head("top").await.unwrap().unwrap().modified,
            UNIX_EPOCH + Duration::from_secs(315_532_800)
        );
    }

    #[tokio::test]
    async fn deep_paths_imply_every_ancestor() {
        let z = open_bytes(build_zip(&[("a/b/c/d", b"x"), ("a/b/e", b"y"), ("f/", b"")], b""))
            .await
            .unwrap();
        assert_eq!(z.list("").await.unwrap().dirs, vec!["a", "f"]);
        assert_eq!(z.list("a").await.unwrap().dirs, vec!["b"]);
        let ab = z.list("a/b").await.unwrap();
        assert_eq!(ab.dirs, vec!["c"]);
        assert_eq!(ab.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["e"]);
        assert_eq!(z.list("a/b/c").await.unwrap().files.len(), 1);
        assert!(z.lookup("f").await.unwrap().dir);
        assert_eq!(z.len(), 2);
    }

    #[tokio::test]
    async fn hostile_names_are_skipped() {
        let z = open_bytes(build_zip(
            &[
                ("../evil", b"x"),
                ("/abs", b"x"),
                ("a//b", b"x"),
                ("a/./b", b"x"),
                ("nul\0x", b"x"),
                ("ok", b"y"),
            ],
            b"",
        ))
        .await
        .unwrap();
        assert_eq!(z.len(), 1);
        let root = z.list("").await.unwrap();
        assert!(root.dirs.is_empty(), "{:?}", root.dirs);
        assert_eq!(root.files.len(), 1);
    }

    #[tokio::test]
    async fn rejects_garbage_and_absurd_claims() {
        assert!(matches!(
            open_bytes(b"not a zip at all, not even close".to_vec()).await,
            Err(ZipError::Invalid { .. })
        ));
        assert!(matches!(open_bytes(Vec::new()).await, Err(ZipError::Invalid { .. })));
        let good = build_zip(&[("a", b"1")], b"");
        // Entry count far beyond what the central directory can hold.
        let mut bad = good.clone();
        let e = bad.len() - 22;
        bad[e + 8..e + 12].copy_from_slice(&[0xfe, 0xff, 0xfe, 0xff]);
        let err = open_bytes(bad).await.err().unwrap().to_string();
        assert!(err.contains("claims 65534 entries"), "{err}");
        // Central directory size beyond the archive.
        let mut bad = good.clone();
        bad[e + 12..e + 16].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
        let err = open_bytes(bad).await.err().unwrap().to_string();
        assert!(err.contains("larger than"), "{err}");
        let missing = open_bytes_missing().await;
        assert!(matches!(missing, Err(ZipError::NotFound(_))));
    }

    async fn open_bytes_missing() -> Result<ReadOnly<ZipStore>, ZipError> {
        ZipStore::open(Arc::new(MemoryStore::new()), "none.zip").await
    }

    #[tokio::test]
    async fn entry_beyond_the_archive_fails_alone() {
        let mut z = build_zip(&[("a", b"0123456789"), ("b", b"xy")], b"");
        // Point entry "a"'s central header at a far offset.
        let cd = u32_at(&z, z.len() - 22 + 16) as usize;
        z[cd + 42..cd + 46].copy_from_slice(&0x00ff_0000u32.to_le_bytes());
        let s = open_bytes(z).await.unwrap();
        assert!(s.get("a").await.is_err());
        assert_eq!(s.get("b").await.unwrap(), Bytes::from_static(b"xy"));
    }

    #[test]
    fn sparse_reader_refuses_bytes_it_does_not_hold() {
        let buf = [1u8, 2, 3, 4];
        let mut r = SparseReader { base: 100, buf: &buf, len: 200, pos: 0 };
        assert_eq!(r.seek(SeekFrom::End(0)).unwrap(), 200);
        r.seek(SeekFrom::Start(101)).unwrap();
        let mut out = [0u8; 3];
        r.read_exact(&mut out).unwrap();
        assert_eq!(out, [2, 3, 4]);
        assert!(r.read(&mut out).is_err());
        r.seek(SeekFrom::Start(50)).unwrap();
        assert!(r.read(&mut out).is_err());
    }

    #[test]
    fn inflated_cache_is_bounded_by_bytes() {
        let mut c = InflatedCache::new(10);
        c.insert(1, Bytes::from(vec![0; 4]));
        c.insert(2, Bytes::from(vec![0; 3]));
        assert!(c.get(1).is_some());
        c.insert(3, Bytes::from(vec![0; 5]));
        assert!(c.get(2).is_none(), "least recently used goes first");
        assert!(c.get(1).is_some() && c.get(3).is_some());
        c.insert(4, Bytes::from(vec![0; 11]));
        assert!(c.get(4).is_none(), "too big to cache");
        assert!(c.bytes <= 10);
    }

    /// Two central entries sharing one local header (and its deflated data) but claiming
    /// different sizes: each is checked against its own claim, whichever is read first. The
    /// inflated cache used to be keyed by the header offset alone, so the second read got the
    /// first entry's bytes, and slicing them to its own size panicked.
    #[tokio::test]
    async fn entries_sharing_a_local_header_do_not_share_inflated_data() {
        let data = b"shared local header ".repeat(8);
        let deflated = deflate(&data);
        let crc = crc32fast::hash(&data);
        let fields = |crc: u32, size: u32| {
            let mut f = vec![20, 0, 0, 0, 8, 0, 0, 0, 0x21, 0]; // version, flags, deflate, time, date
            f.extend_from_slice(&crc.to_le_bytes());
            f.extend_from_slice(&(deflated.len() as u32).to_le_bytes());
            f.extend_from_slice(&size.to_le_bytes());
            f.extend_from_slice(&1u16.to_le_bytes()); // name length
            f
        };
        let mut z = SIG_LOCAL.to_le_bytes().to_vec();
        z.extend_from_slice(&fields(crc, data.len() as u32));
        z.extend_from_slice(&0u16.to_le_bytes());
        z.push(b'a');
        z.extend_from_slice(&deflated);
        let mut central = Vec::new();
        for (name, crc, size) in
            [(b'a', crc, data.len() as u32), (b'b', crc ^ 1, 10 * data.len() as u32)]
        {
            central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            central.extend_from_slice(&[20, 3]);
            central.extend_from_slice(&fields(crc, size));
            central.extend_from_slice(&[0; 12]); // extra, comment, disk, attributes
            central.extend_from_slice(&0u32.to_le_bytes()); // both at the one local header
            central.push(name);
        }
        let cd_off = z.len() as u32;
        z.extend_from_slice(&central);
        z.extend_from_slice(&SIG_EOCD.to_le_bytes());
        z.extend_from_slice(&[0, 0, 0, 0, 2, 0, 2, 0]);
        z.extend_from_slice(&(central.len() as u32).to_le_bytes());
        z.extend_from_slice(&cd_off.to_le_bytes());
        z.extend_from_slice(&[0, 0]);
        for first in ["a", "b"] {
            let s = open_bytes(z.clone()).await.unwrap();
            if first == "b" {
                assert!(s.get("b").await.is_err());
            }
            assert_eq!(s.get("a").await.unwrap(), Bytes::from(data.clone()));
            assert!(s.get("b").await.is_err(), "b read a's inflated bytes");
            assert!(s.get_range("b", 0..5).await.is_err());
        }
    }

    #[test]
    fn inflate_checks_size_and_crc() {
        let data = b"hello hello hello hello".repeat(10);
        let c = deflate(&data);
        let crc = crc32fast::hash(&data);
        assert_eq!(inflate(&c, data.len() as u64, crc).unwrap(), Bytes::from(data.clone()));
        assert!(inflate(&c, data.len() as u64, crc ^ 1).unwrap_err().contains("CRC-32"));
        assert!(inflate(&c, data.len() as u64 - 1, crc).is_err());
        assert!(inflate(b"\xff\xff\xff", 3, 0).is_err());
    }

    #[test]
    fn dos_times_convert() {
        let dt = ::zip::DateTime::from_date_and_time(2024, 5, 17, 12, 34, 56).unwrap();
        assert_eq!(dos_time(dt), Some(UNIX_EPOCH + Duration::from_secs(1_715_949_296)));
    }
}
