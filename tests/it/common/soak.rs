//! A concurrency soak checked against a model, for any way of reaching the filesystem
//! (`ZarrFs` directly, or a real mount through std::fs).
//!
//! Threads write, rename, delete and read files in one directory (`d/`) and write, delete and
//! read inner chunks of one shard (array `a`, shard (0, 0)). Each thread owns some keys and
//! chunks and keeps an exact model of them; it reads everybody's. Every value says who wrote
//! it and carries a checksum, so any read can be judged. The store must only ever hold
//! complete values. Through the filesystem, keys and chunks written zarr-python's way (a
//! `.partial` temp file renamed over the key) must read as one complete value, never a mix of
//! two. Files written in place show the writer's progress to concurrent readers, as on any
//! POSIX file system: one read request sees a prefix of the new value, and a reader that needs
//! several requests may see pages of both. At the end every key must match the model, through
//! the filesystem and in the store. Meanwhile another thread keeps starting programs, which
//! inherit (and close) copies of the workers' open files.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zarr_mount::store::prelude::*;

use super::zfs::{local_of, stored_chunks};

pub const THREADS: usize = 4;
const KEYS_PER_THREAD: usize = 4;

/// What the soak needs from a filesystem; errors are errno values.
pub trait Target: Send + Sync {
    /// Create or truncate `path`, write `data` in pieces of `piece` bytes, close.
    fn write(&self, path: &str, data: &[u8], piece: usize) -> Result<(), i32>;
    fn read(&self, path: &str) -> Result<Vec<u8>, i32>;
    fn rename(&self, from: &str, to: &str) -> Result<(), i32>;
    fn remove(&self, path: &str) -> Result<(), i32>;
    fn list(&self, dir: &str) -> Result<Vec<String>, i32>;
    /// Whether `read` is one request however long the file (then a file being written in
    /// place reads as a prefix of the new value).
    fn reads_whole_files_at_once(&self) -> bool;
}

/// How long to run: `ZM_SOAK_SECS` (for longer runs), else `default_secs`.
pub fn duration(default_secs: f64) -> Duration {
    let secs = std::env::var("ZM_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(default_secs);
    Duration::from_secs_f64(secs)
}

/// xorshift64*: small, seedable, good enough to pick operations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A self-checking value: "ZV", writer, sequence number, length, then bytes derived from them.
pub fn value(writer: usize, seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(16);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(b"ZV");
    v.push(writer as u8);
    v.push(0);
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    let mut rng = Rng::new(seq ^ ((writer as u64) << 56));
    while v.len() < len {
        v.push(rng.next() as u8);
    }
    v
}

/// How a read may turn out besides "absent": only a complete value, also a prefix of one, or
/// anything (several reads of a file being written in place).
#[derive(Clone, Copy, PartialEq)]
pub enum Expect {
    Complete,
    CompleteOrPrefix,
    Any,
}

/// The writer of `bytes` (None for a prefix too short to say), or why they are not acceptable.
pub fn judge(bytes: &[u8], expect: Expect) -> Result<Option<usize>, String> {
    if expect == Expect::Any {
        return Ok(None);
    }
    if bytes.len() < 16 {
        let prefix_ok =
            expect == Expect::CompleteOrPrefix && b"ZV".starts_with(&bytes[..bytes.len().min(2)]);
        return if prefix_ok {
            Ok(None)
        } else {
            Err(format!("not a value: {} bytes", bytes.len()))
        };
    }
    let writer = bytes[2] as usize;
    let len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let seq = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let whole = value(writer, seq, len);
    let fits = if expect == Expect::Complete { whole == bytes } else { whole.starts_with(bytes) };
    if &bytes[..2] != b"ZV" || !fits {
        return Err(format!(
            "torn: header says writer {writer} seq {seq} len {len}, got {} bytes",
            bytes.len()
        ));
    }
    Ok(Some(writer))
}

pub fn dir_key(owner: usize, i: usize) -> String {
    format!("d/t{owner}k{i}")
}

/// Keys 0 and 1 of each thread, and half of its chunks, are only written zarr-python's way
/// (temp file + rename); the others in place.
fn staged(i: usize) -> bool {
    i < 2
}

fn staged_chunk(y: u64, x: u64) -> bool {
    (local_of(y, x) as usize / THREADS).is_multiple_of(2)
}

/// Inner chunks (y, x) of shard (0, 0) and their owners.
pub fn chunks() -> impl Iterator<Item = (u64, u64, usize)> {
    (0..4u64).flat_map(|y| (0..4u64).map(move |x| (y, x, (local_of(y, x) as usize) % THREADS)))
}

pub fn chunk_key(y: u64, x: u64) -> String {
    format!("a/c/{y}/{x}")
}

/// What one thread expects of the keys and chunks it owns.
#[derive(Default, Clone)]
pub struct Model {
    pub keys: BTreeMap<String, Option<Vec<u8>>>,
    pub chunks: BTreeMap<(u64, u64), Option<Vec<u8>>>,
    pub ops: u64,
    /// Reads of other threads' keys that got ESTALE (the file was replaced while open).
    pub stale: u64,
}

/// Our own key: exactly what the model says.
fn check_own(got: Result<Vec<u8>, i32>, path: &str, want: &Option<Vec<u8>>) {
    match (got, want) {
        (Ok(bytes), Some(want)) => assert!(
            bytes == *want,
            "{path}: own key does not read back ({:?})",
            judge(&bytes, Expect::Complete)
        ),
        (Err(e), Some(_)) => panic!("{path}: own key written but reading it gives errno {e}"),
        (Ok(bytes), None) => panic!("{path}: own key deleted but reads {} bytes", bytes.len()),
        (Err(e), None) => assert_eq!(e, libc::ENOENT, "{path}: own key deleted"),
    }
}

/// Another thread's key: absent, replaced while open (ESTALE), or a value of its owner.
fn check_other(got: Result<Vec<u8>, i32>, path: &str, owner: usize, expect: Expect, m: &mut Model) {
    match got {
        Ok(bytes) => match judge(&bytes, expect) {
            Ok(w) => assert!(
                w.is_none_or(|w| w == owner),
                "{path}: a value of writer {w:?} under a key of writer {owner}"
            ),
            Err(why) => panic!("{path}: {why}"),
        },
        Err(libc::ESTALE) => m.stale += 1,
        Err(e) => assert_eq!(e, libc::ENOENT, "{path}: reading another thread's key"),
    }
}

/// The store itself, read behind the filesystem's back: only complete values, ever.
fn check_store(store: &dyn Store, rt: &tokio::runtime::Handle, key: &str, owner: usize) {
    if let Ok(bytes) = rt.block_on(store.get(key)) {
        judge(&bytes, Expect::Complete).unwrap_or_else(|why| panic!("in the store, {key}: {why}"));
        assert_eq!(bytes[2] as usize, owner, "in the store, {key}: another writer's value");
    }
    for (local, bytes) in rt.block_on(stored_chunks(store, "a/c/0/0")).unwrap_or_default() {
        let w = judge(&bytes, Expect::Complete)
            .unwrap_or_else(|why| panic!("in the stored shard, chunk {local}: {why}"));
        assert_eq!(
            w,
            Some(local as usize % THREADS),
            "in the stored shard, chunk {local}: another writer's value"
        );
    }
}

/// Write `v` to `path`: through a temp file renamed over it (`staged`), or in place in
/// random pieces.
fn put(t: &dyn Target, path: &str, v: &[u8], staged: bool, rng: &mut Rng) {
    if staged {
        let tmp = format!("{path}.{}.partial", rng.below(1000));
        t.write(&tmp, v, v.len()).unwrap_or_else(|e| panic!("write {tmp}: errno {e}"));
        t.rename(&tmp, path).unwrap_or_else(|e| panic!("rename {tmp} -> {path}: errno {e}"));
    } else {
        t.write(path, v, 1 + rng.below(v.len() as u64) as usize)
            .unwrap_or_else(|e| panic!("write {path}: errno {e}"));
    }
}

/// What another thread's read of a key written `staged` or in place may show.
fn expect(t: &dyn Target, staged: bool) -> Expect {
    match (staged, t.reads_whole_files_at_once()) {
        (true, _) => Expect::Complete,
        (false, true) => Expect::CompleteOrPrefix,
        (false, false) => Expect::Any,
    }
}

/// Everything one worker needs.
struct Ctx<'a> {
    t: &'a dyn Target,
    store: &'a dyn Store,
    rt: &'a tokio::runtime::Handle,
    max_len: u64,
}

/// One thread's share of the soak.
fn worker(c: &Ctx, me: usize, seed: u64, until: Instant) -> Model {
    let t = c.t;
    let mut rng = Rng::new(seed ^ (me as u64 + 1));
    let mut m = Model::default();
    for i in 0..KEYS_PER_THREAD {
        m.keys.insert(dir_key(me, i), None);
    }
    for (y, x, _) in chunks().filter(|c| c.2 == me) {
        m.chunks.insert((y, x), None);
    }
    let mut seq = 0u64;
    let mut next = |len: u64| {
        seq += 1;
        value(me, seq, len as usize)
    };
    while Instant::now() < until {
        m.ops += 1;
        let i = rng.below(KEYS_PER_THREAD as u64) as usize;
        let key = dir_key(me, i);
        match rng.below(11) {
            0..=1 => {
                let limit = if rng.below(8) == 0 { c.max_len } else { 6000 };
                let v = next(16 + rng.below(limit));
                put(t, &key, &v, staged(i), &mut rng);
                m.keys.insert(key, Some(v));
            }
            2 => {
                let to = dir_key(me, i ^ 1); // the other key of the same kind
                let moved = m.keys.insert(key.clone(), None).flatten();
                match (t.rename(&key, &to), &moved) {
                    (Ok(()), Some(_)) => {
                        m.keys.insert(to, moved);
                    }
                    (Err(libc::ENOENT), None) => {}
                    (r, _) => panic!("rename {key} -> {to} (present: {}): {r:?}", moved.is_some()),
                }
            }
            3 => {
                let present = m.keys.insert(key.clone(), None).flatten().is_some();
                let r = t.remove(&key);
                assert!(
                    r == Ok(()) && present || r == Err(libc::ENOENT) && !present,
                    "remove {key} (present: {present}): {r:?}"
                );
            }
            4..=5 => {
                let (y, x, _) = chunks().filter(|c| c.2 == me).nth(rng.below(4) as usize).unwrap();
                let path = chunk_key(y, x);
                if rng.below(4) == 0 {
                    let present = m.chunks.insert((y, x), None).flatten().is_some();
                    let r = t.remove(&path);
                    assert!(
                        r == Ok(()) && present || r == Err(libc::ENOENT) && !present,
                        "remove {path} (present: {present}): {r:?}"
                    );
                } else {
                    let v = next(16 + rng.below(4000));
                    put(t, &path, &v, staged_chunk(y, x), &mut rng);
                    m.chunks.insert((y, x), Some(v));
                }
            }
            6 => {
                let (y, x, owner) = chunks().nth(rng.below(16) as usize).unwrap();
                let got = t.read(&chunk_key(y, x));
                match owner == me {
                    true => check_own(got, &chunk_key(y, x), &m.chunks[&(y, x)]),
                    false => check_other(
                        got,
                        &chunk_key(y, x),
                        owner,
                        expect(t, staged_chunk(y, x)),
                        &mut m,
                    ),
                }
            }
            7..=8 => {
                let (owner, j) = (
                    rng.below(THREADS as u64) as usize,
                    rng.below(KEYS_PER_THREAD as u64) as usize,
                );
                let path = dir_key(owner, j);
                let got = t.read(&path);
                match owner == me {
                    true => check_own(got, &path, &m.keys[&path]),
                    false => check_other(got, &path, owner, expect(t, staged(j)), &mut m),
                }
            }
            9 => {
                let owner = rng.below(THREADS as u64) as usize;
                check_store(
                    c.store,
                    c.rt,
                    &dir_key(owner, rng.below(KEYS_PER_THREAD as u64) as usize),
                    owner,
                );
            }
            _ => {
                for name in t.list("d").unwrap_or_else(|e| panic!("list d: errno {e}")) {
                    let stem = name.split('.').next().unwrap_or("");
                    assert!(
                        stem.starts_with('t') && stem.contains('k'),
                        "a stray name in the listing: {name}"
                    );
                }
            }
        }
    }
    m
}

/// Run `THREADS` workers against `t` for `length` (values up to `max_len` bytes), then check
/// every key through `t` and in `store`. Returns (operations, ESTALE reads).
pub fn run(
    t: Arc<dyn Target>,
    store: Arc<dyn Store>,
    rt: &tokio::runtime::Handle,
    length: Duration,
    max_len: u64,
) -> (u64, u64) {
    let seed =
        std::env::var("ZM_SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        });
    eprintln!("soak: {THREADS} threads for {length:?}, ZM_SOAK_SEED={seed}");
    let until = Instant::now() + length;
    let models: Vec<Model> = std::thread::scope(|s| {
        // Programs started meanwhile get copies of the workers' open files and close them at
        // exec: those closes must not store half-written files.
        s.spawn(move || {
            while Instant::now() < until {
                let _ = std::process::Command::new("true").status();
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|me| {
                let c = Ctx { t: &*t, store: &*store, rt, max_len };
                s.spawn(move || worker(&c, me, seed, until))
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a soak thread failed")).collect()
    });

    let mut want_shard = BTreeMap::new();
    for m in &models {
        for (key, want) in &m.keys {
            check_own(t.read(key), key, want);
            let stored = rt.block_on(store.get(key)).ok().map(|b| b.to_vec());
            assert!(stored == *want, "{key}: the store holds something else than the model");
        }
        for ((y, x), want) in &m.chunks {
            check_own(t.read(&chunk_key(*y, *x)), &chunk_key(*y, *x), want);
            if let Some(v) = want {
                want_shard.insert(local_of(*y, *x), v.clone());
            }
        }
    }
    let stored = rt.block_on(stored_chunks(&*store, "a/c/0/0")).unwrap_or_default();
    assert!(stored == want_shard, "the shard holds other chunks than the model");
    for (name, _) in rt.block_on(store.list("d")).unwrap().files {
        assert!(
            models.iter().any(|m| m.keys.get(&format!("d/{name}")).is_some_and(Option::is_some)),
            "stray object d/{name}"
        );
    }
    (models.iter().map(|m| m.ops).sum(), models.iter().map(|m| m.stale).sum())
}
