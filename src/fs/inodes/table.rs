//! Inode numbers for paths. An inode lives while the kernel holds a lookup reference to it,
//! while a directory listing that handed its number out is open (a plain READDIR entry is no
//! lookup: the kernel never forgets it), or while it is the root; numbers are never reused
//! within a mount. So the table holds what the kernel and open listings hold, not every name
//! ever listed.
//!
//! Memory per inode matters: a walk of 1,000,000 keys makes the kernel hold an inode for each.
//! Inodes live in a slab (a `Vec`, no hash map): the number is the slot in its low 32 bits and
//! the slot's generation above, so a freed slot is reused under a new number. The path is
//! stored once, in the slot; the path index is a hash table of slot numbers (4 bytes each)
//! whose keys are looked up through the slab. About 48 bytes a slot, 5 an index entry and the
//! path's own allocation, against ~130 for two hash maps of shared paths.
//!
//! A file's slot also keeps which version (size and content) the kernel was last told of
//! (`tell`) and how many readers have it open (`open_reader`): the kernel reads an open file
//! up to the size it was told and shares its cached pages between all readers of the inode,
//! whichever version each reader's handle holds, so the two must never disagree (see
//! `fs::sizes`).
//!
//! Listings pin every name they hand out, so hashing is on the path of every `find` entry:
//! the index uses hashbrown's default hasher (foldhash, seeded per process), several times
//! faster than SipHash on short paths and the resizes re-hash every path.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

pub const ROOT_INO: u64 = 1;

/// Slot 0 is never used (inode 0 means "none" to the kernel); the root is slot 1.
const ROOT_SLOT: u32 = 1;

struct Slot {
    /// None: free (then `lookups` is the next free slot, 0 for none).
    path: Option<Box<str>>,
    lookups: u64,
    /// Open directory listings that contain this inode.
    pins: u32,
    /// Bumped each time the slot is freed, so its next inode gets another number.
    generation: u32,
    /// The version the kernel was last told of this file, as a fingerprint of its size and
    /// content version (`UNTOLD`: none yet).
    told: u64,
    /// Open read handles holding this inode at version `told`.
    readers: u32,
    /// `told` changed since the kernel's attributes were last invalidated: replies in flight
    /// may have left the kernel with the size before.
    told_moved: bool,
}

/// Nothing told yet (a directory, or a file the kernel has not been handed).
const UNTOLD: u64 = u64::MAX;

impl Slot {
    fn free() -> Self {
        Slot {
            path: None,
            lookups: 0,
            pins: 0,
            generation: 0,
            told: UNTOLD,
            readers: 0,
            told_moved: false,
        }
    }
}

/// `InodeTable::open_reader`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderOpened {
    /// The kernel holds the reader's version.
    Consistent,
    /// The kernel may hold another version's size: its attributes must be invalidated before
    /// the open is answered, so that it asks again (and is told the reader's) before reading
    /// past it.
    InvalidateAttrs,
    /// Other readers hold the inode at another version: the name needs a new inode (ESTALE
    /// makes the kernel look it up again).
    Stale,
}

pub struct InodeTable {
    slots: Vec<Slot>,
    /// Slot numbers of the linked inodes, by their path (an unlinked or replaced inode keeps
    /// its slot for open handles but is not in here).
    by_path: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// First free slot (0: none); the free slots are chained through `lookups`.
    free: u32,
    live: usize,
}

impl Default for InodeTable {
    fn default() -> Self {
        let mut t = InodeTable {
            slots: Vec::new(),
            by_path: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            free: 0,
            live: 0,
        };
        t.slots.push(Slot::free());
        let root = t.alloc("".into());
        debug_assert_eq!(root, ROOT_INO);
        t.slots[ROOT_SLOT as usize].lookups = 1;
        t
    }
}

impl InodeTable {
    /// The live slot of `ino` (its generation current).
    fn slot(&self, ino: u64) -> Option<&Slot> {
        let s = self.slots.get((ino & 0xffff_ffff) as usize)?;
        (s.path.is_some() && u64::from(s.generation) == ino >> 32).then_some(s)
    }

    fn slot_mut(&mut self, ino: u64) -> Option<&mut Slot> {
        let s = self.slots.get_mut((ino & 0xffff_ffff) as usize)?;
        (s.path.is_some() && u64::from(s.generation) == ino >> 32).then_some(s)
    }

    fn ino_of(&self, slot: u32) -> u64 {
        u64::from(self.slots[slot as usize].generation) << 32 | u64::from(slot)
    }

    /// The slot indexed under `path`, if any.
    fn find(&self, path: &str) -> Option<u32> {
        let slots = &self.slots;
        self.by_path
            .find(self.hasher.hash_one(path), |&s| slots[s as usize].path.as_deref() == Some(path))
            .copied()
    }

    /// Take `path` out of the index (the inode keeps its slot).
    fn unindex(&mut self, path: &str) -> Option<u32> {
        let slots = &self.slots;
        let hash = self.hasher.hash_one(path);
        let entry = self
            .by_path
            .find_entry(hash, |&s| slots[s as usize].path.as_deref() == Some(path))
            .ok()?;
        Some(entry.remove().0)
    }

    /// Take `slot` out of the index, if it is in under its path (not if unlinked or replaced).
    fn unindex_slot(&mut self, slot: u32) {
        let path = self.slots[slot as usize].path.as_deref().expect("live slot");
        if let Ok(entry) = self.by_path.find_entry(self.hasher.hash_one(path), |&s| s == slot) {
            entry.remove();
        }
    }

    fn index(&mut self, slot: u32) {
        let path = self.slots[slot as usize].path.as_deref().expect("live slot");
        let hash = self.hasher.hash_one(path);
        self.by_path.insert_unique(hash, slot, rehash(&self.slots, &self.hasher));
    }

    /// A new inode for `path`, indexed under it.
    fn alloc(&mut self, path: Box<str>) -> u64 {
        let slot = if self.free != 0 {
            let slot = self.free;
            self.free = self.slots[slot as usize].lookups as u32;
            slot
        } else {
            let slot = u32::try_from(self.slots.len()).expect("fewer than 2^32 live inodes");
            self.slots.push(Slot::free());
            slot
        };
        let s = &mut self.slots[slot as usize];
        s.path = Some(path);
        s.lookups = 0;
        s.pins = 0;
        s.told = UNTOLD;
        s.readers = 0;
        s.told_moved = false;
        self.live += 1;
        self.index(slot);
        self.ino_of(slot)
    }

    pub fn path(&self, ino: u64) -> Option<&str> {
        self.slot(ino).and_then(|s| s.path.as_deref())
    }

    /// Whether the inode's name still leads to it: false once it was unlinked, or replaced by
    /// a rename over it (the inode lives on for open handles and until the kernel forgets it).
    pub fn is_linked(&self, ino: u64) -> bool {
        self.path(ino).is_some_and(|p| self.find(p).map(|s| self.ino_of(s)) == Some(ino))
    }

    /// How many inodes exist now (the root included).
    pub fn count(&self) -> usize {
        self.live
    }

    /// The inode for `path`, created if needed; `lookup` adds a kernel reference.
    pub fn get_or_insert(&mut self, path: &str, lookup: bool) -> u64 {
        let ino = match self.find(path) {
            Some(slot) => self.ino_of(slot),
            None => self.alloc(path.into()),
        };
        if lookup {
            if let Some(s) = self.slot_mut(ino) {
                s.lookups += 1;
            }
        }
        ino
    }

    /// Add a kernel reference to `ino`.
    pub fn add_lookup(&mut self, ino: u64) {
        if let Some(s) = self.slot_mut(ino) {
            s.lookups += 1;
        }
    }

    /// The kernel is about to be told that file `ino` is at version `told` (a fingerprint).
    /// False (and nothing recorded) when readers hold it at another version: the reply must
    /// not carry it, the name needs a new inode instead (`renumber`).
    pub fn tell(&mut self, ino: u64, told: u64) -> bool {
        let Some(s) = self.slot_mut(ino) else { return true };
        if s.told == told {
            return true;
        }
        if s.readers > 0 {
            return false;
        }
        s.told_moved |= s.told != UNTOLD;
        s.told = told;
        true
    }

    /// The version the kernel was last told of file `ino`, if any.
    pub fn told(&self, ino: u64) -> Option<u64> {
        self.slot(ino).map(|s| s.told).filter(|&t| t != UNTOLD)
    }

    /// `path` gets a new inode (without a kernel reference yet); the old one keeps its slot
    /// for the readers that have it open, as a file replaced by a rename does.
    pub fn renumber(&mut self, path: &str) -> u64 {
        self.unindex(path);
        self.alloc(path.into())
    }

    /// A reader opens file `ino` at version `told` (a fingerprint).
    pub fn open_reader(&mut self, ino: u64, told: u64) -> ReaderOpened {
        let Some(s) = self.slot_mut(ino) else { return ReaderOpened::Stale };
        if s.readers > 0 && s.told != told {
            return ReaderOpened::Stale;
        }
        let answer = if s.told != told || s.told_moved {
            ReaderOpened::InvalidateAttrs
        } else {
            ReaderOpened::Consistent
        };
        s.told = told;
        s.told_moved = false;
        s.readers += 1;
        answer
    }

    /// A reader of `ino` closed its handle.
    pub fn close_reader(&mut self, ino: u64) {
        if let Some(s) = self.slot_mut(ino) {
            s.readers = s.readers.saturating_sub(1);
        }
    }

    /// The inode for `path`, created if needed, held by an open listing until `unpin`.
    pub fn pin(&mut self, path: &str) -> u64 {
        let ino = self.get_or_insert(path, false);
        self.pin_ino(ino);
        ino
    }

    /// `pin` for a path the caller built: a new inode keeps its allocation (no copy).
    pub fn pin_path(&mut self, path: String) -> u64 {
        let ino = match self.find(&path) {
            Some(slot) => self.ino_of(slot),
            None => self.alloc(path.into_boxed_str()),
        };
        self.pin_ino(ino);
        ino
    }

    /// Hold an existing inode for an open listing (no-op for an unknown one).
    pub fn pin_ino(&mut self, ino: u64) {
        if let Some(s) = self.slot_mut(ino) {
            s.pins += 1;
        }
    }

    /// A listing that held `ino` is gone. True when nothing holds it any more and it is gone.
    pub fn unpin(&mut self, ino: u64) -> bool {
        let Some(s) = self.slot_mut(ino) else { return false };
        s.pins = s.pins.saturating_sub(1);
        self.drop_if_unused(ino)
    }

    /// The kernel dropped `n` references. True when nothing holds the inode any more and it is
    /// gone.
    pub fn forget(&mut self, ino: u64, n: u64) -> bool {
        let Some(s) = self.slot_mut(ino) else { return false };
        s.lookups = s.lookups.saturating_sub(n);
        self.drop_if_unused(ino)
    }

    fn drop_if_unused(&mut self, ino: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let Some(s) = self.slot(ino) else { return false };
        if s.lookups > 0 || s.pins > 0 {
            return false;
        }
        let slot = (ino & 0xffff_ffff) as u32;
        self.unindex_slot(slot);
        let s = &mut self.slots[slot as usize];
        s.path = None;
        s.generation = s.generation.wrapping_add(1);
        s.lookups = u64::from(self.free);
        self.free = slot;
        self.live -= 1;
        self.shrink_if_sparse();
        true
    }

    /// Give back the index's memory once most of it is empty. Shrinking to twice what is left
    /// keeps the cost amortized: the next shrink needs four times fewer entries. The slab keeps
    /// its length (a slot's number must stay valid while the kernel may still hold it); its free
    /// slots (48 bytes each) are what a next walk reuses first.
    fn shrink_if_sparse(&mut self) {
        const MIN_CAPACITY: usize = 4096;
        let len = self.by_path.len();
        if self.by_path.capacity() > MIN_CAPACITY && len * 4 < self.by_path.capacity() {
            self.by_path.shrink_to(len * 2, rehash(&self.slots, &self.hasher));
        }
    }

    /// The name `path` is gone (unlink, rmdir): the inode stays for open handles but the
    /// path resolves to a fresh inode from now on.
    pub fn unlink_path(&mut self, path: &str) {
        self.unindex(path);
    }

    /// `from` (a file or a whole directory tree) is now at `to`.
    pub fn rename(&mut self, from: &str, to: &str) {
        self.unindex(to);
        let prefix = format!("{from}/");
        let moved: Vec<u32> = self
            .by_path
            .iter()
            .copied()
            .filter(|&s| {
                let p = self.slots[s as usize].path.as_deref().expect("indexed slots are live");
                p == from || p.starts_with(&prefix)
            })
            .collect();
        for slot in moved {
            self.unindex_slot(slot);
            let s = &mut self.slots[slot as usize];
            let old = s.path.as_deref().expect("indexed slots are live");
            s.path = Some(format!("{to}{}", &old[from.len()..]).into());
            self.index(slot);
        }
    }
}

/// The index's hash of an indexed slot, for the table to move its entries when it resizes.
fn rehash<'a>(slots: &'a [Slot], hasher: &'a DefaultHashBuilder) -> impl Fn(&u32) -> u64 + 'a {
    |&s| hasher.hash_one(slots[s as usize].path.as_deref().expect("indexed slots are live"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forget_drops_inode_and_rename_moves_subtree() {
        let mut t = InodeTable::default();
        let a = t.get_or_insert("a", true);
        let ab = t.get_or_insert("a/b", true);
        assert_eq!(t.get_or_insert("a", false), a);
        t.rename("a", "x");
        assert!(t.is_linked(a) && t.is_linked(ab));
        assert_eq!(t.path(a), Some("x"));
        assert_eq!(t.path(ab), Some("x/b"));
        assert!(t.forget(ab, 1));
        assert_eq!(t.path(ab), None);
        assert_ne!(t.get_or_insert("x/b", false), ab);
        t.forget(ROOT_INO, 5);
        assert_eq!(t.path(ROOT_INO), Some(""));
    }

    /// Numbers handed out by a plain listing live as long as the listing (or longer, if the
    /// kernel looked them up meanwhile); then the table is back to what it was.
    #[test]
    fn listed_inodes_go_with_their_listing() {
        let mut t = InodeTable::default();
        let d = t.get_or_insert("d", true);
        let listed: Vec<u64> = (0..1000).map(|i| t.pin(&format!("d/{i}"))).collect();
        let again = t.pin("d/7"); // a second listing open at the same time
        assert_eq!(again, listed[7]);
        let looked_up = t.get_or_insert("d/5", true);
        assert_eq!(looked_up, listed[5]);
        assert_eq!(t.count(), 1002);
        for &ino in &listed {
            t.unpin(ino);
        }
        assert_eq!(t.count(), 4, "root, d, d/5 (looked up), d/7 (still listed)");
        assert_eq!(t.path(listed[7]), Some("d/7"));
        assert!(t.unpin(again));
        assert!(t.forget(looked_up, 1));
        assert_eq!(t.count(), 2);
        assert!(t.forget(d, 1));
        t.unpin(ROOT_INO);
        assert_eq!(t.path(ROOT_INO), Some(""));
    }

    #[test]
    fn the_tables_shrink_once_the_kernel_forgot_most_names() {
        let mut t = InodeTable::default();
        let inos: Vec<u64> =
            (0..100_000).map(|i| t.get_or_insert(&format!("d/{i}"), true)).collect();
        let full = t.by_path.capacity();
        let slab = t.slots.len();
        for &ino in &inos[..99_000] {
            t.forget(ino, 1);
        }
        assert_eq!(t.count(), 1001);
        assert!(t.by_path.capacity() <= full / 16, "{} of {full} kept", t.by_path.capacity());
        assert_eq!(t.path(inos[99_500]), Some("d/99500"), "what is left is still there");
        assert_eq!(t.get_or_insert("d/99999", false), inos[99_999]);
        // A second walk reuses the freed slots (under new numbers): the slab does not grow.
        let again: Vec<u64> =
            (0..99_000).map(|i| t.get_or_insert(&format!("e/{i}"), true)).collect();
        assert_eq!(t.slots.len(), slab);
        let first: std::collections::HashSet<u64> = inos.iter().copied().collect();
        assert!(again.iter().all(|i| !first.contains(i)), "numbers are never reused");
        assert!(inos[..99_000].iter().all(|&i| t.path(i).is_none()), "old numbers are stale");
        assert_eq!(t.path(again[123]), Some("e/123"));
    }

    #[test]
    fn unlinked_and_replaced_inodes_are_detached_from_their_names() {
        let mut t = InodeTable::default();
        let f = t.get_or_insert("f", true);
        let g = t.get_or_insert("g", true);
        t.unlink_path("f");
        assert!(!t.is_linked(f));
        assert_eq!(t.path(f), Some("f"), "kept for open handles");
        let f2 = t.get_or_insert("f", true);
        assert_ne!(f2, f);
        t.rename("f", "g"); // over g
        assert!(t.is_linked(f2) && !t.is_linked(g));
        assert_eq!(t.path(f2), Some("g"));
    }
}
