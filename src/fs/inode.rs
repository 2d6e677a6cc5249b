//! Inode numbers for paths. An inode lives while the kernel holds a lookup reference to it,
//! while a directory listing that handed its number out is open (a plain READDIR entry is no
//! lookup: the kernel never forgets it), or while it is the root; numbers are never reused
//! within a mount. So the table holds what the kernel and open listings hold, not every name
//! ever listed.

use std::collections::HashMap;
use std::sync::Arc;

pub const ROOT_INO: u64 = 1;

struct Entry {
    /// Shared with the `by_path` key: one allocation per inode.
    path: Arc<str>,
    lookups: u64,
    /// Open directory listings that contain this inode.
    pins: u64,
}

pub struct InodeTable {
    by_ino: HashMap<u64, Entry>,
    by_path: HashMap<Arc<str>, u64>,
    next: u64,
}

impl Default for InodeTable {
    fn default() -> Self {
        let mut t =
            InodeTable { by_ino: HashMap::new(), by_path: HashMap::new(), next: ROOT_INO + 1 };
        let root: Arc<str> = Arc::from("");
        t.by_ino.insert(ROOT_INO, Entry { path: root.clone(), lookups: 1, pins: 0 });
        t.by_path.insert(root, ROOT_INO);
        t
    }
}

impl InodeTable {
    pub fn path(&self, ino: u64) -> Option<&str> {
        self.by_ino.get(&ino).map(|e| &*e.path)
    }

    /// Whether the inode's name still leads to it: false once it was unlinked, or replaced by
    /// a rename over it (the inode lives on for open handles and until the kernel forgets it).
    pub fn is_linked(&self, ino: u64) -> bool {
        self.by_ino.get(&ino).is_some_and(|e| self.by_path.get(&e.path) == Some(&ino))
    }

    /// How many inodes exist now (the root included).
    pub fn count(&self) -> usize {
        self.by_ino.len()
    }

    /// The inode for `path`, created if needed; `lookup` adds a kernel reference.
    pub fn get_or_insert(&mut self, path: &str, lookup: bool) -> u64 {
        let ino = match self.by_path.get(path) {
            Some(&ino) => ino,
            None => {
                let ino = self.next;
                self.next += 1;
                let shared: Arc<str> = Arc::from(path);
                self.by_ino.insert(ino, Entry { path: shared.clone(), lookups: 0, pins: 0 });
                self.by_path.insert(shared, ino);
                ino
            }
        };
        if lookup {
            if let Some(e) = self.by_ino.get_mut(&ino) {
                e.lookups += 1;
            }
        }
        ino
    }

    /// The inode for `path`, created if needed, held by an open listing until `unpin`.
    pub fn pin(&mut self, path: &str) -> u64 {
        let ino = self.get_or_insert(path, false);
        self.pin_ino(ino);
        ino
    }

    /// Hold an existing inode for an open listing (no-op for an unknown one).
    pub fn pin_ino(&mut self, ino: u64) {
        if let Some(e) = self.by_ino.get_mut(&ino) {
            e.pins += 1;
        }
    }

    /// A listing that held `ino` is gone. True when nothing holds it any more and it is gone.
    pub fn unpin(&mut self, ino: u64) -> bool {
        let Some(e) = self.by_ino.get_mut(&ino) else { return false };
        e.pins = e.pins.saturating_sub(1);
        self.drop_if_unused(ino)
    }

    /// The kernel dropped `n` references. True when nothing holds the inode any more and it is
    /// gone.
    pub fn forget(&mut self, ino: u64, n: u64) -> bool {
        let Some(e) = self.by_ino.get_mut(&ino) else { return false };
        e.lookups = e.lookups.saturating_sub(n);
        self.drop_if_unused(ino)
    }

    fn drop_if_unused(&mut self, ino: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let Some(e) = self.by_ino.get_mut(&ino) else { return false };
        if e.lookups > 0 || e.pins > 0 {
            return false;
        }
        let path = e.path.clone();
        self.by_ino.remove(&ino);
        if self.by_path.get(&path) == Some(&ino) {
            self.by_path.remove(&path);
        }
        self.shrink_if_sparse();
        true
    }

    /// Give back the tables' memory once most of it is empty (a walk of 1,000,000 names
    /// leaves about 140 MB of table behind after the kernel forgot them). Shrinking to twice
    /// what is left keeps the cost amortized: the next shrink needs four times fewer entries.
    fn shrink_if_sparse(&mut self) {
        const MIN_CAPACITY: usize = 4096;
        let len = self.by_ino.len();
        if self.by_ino.capacity() > MIN_CAPACITY && len * 4 < self.by_ino.capacity() {
            self.by_ino.shrink_to(len * 2);
            self.by_path.shrink_to(self.by_path.len() * 2);
        }
    }

    /// The name `path` is gone (unlink, rmdir): the inode stays for open handles but the
    /// path resolves to a fresh inode from now on.
    pub fn unlink_path(&mut self, path: &str) {
        self.by_path.remove(path);
    }

    /// `from` (a file or a whole directory tree) is now at `to`.
    pub fn rename(&mut self, from: &str, to: &str) {
        self.by_path.remove(to);
        let prefix = format!("{from}/");
        let moved: Vec<(Arc<str>, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| &***p == from || p.starts_with(&prefix))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (old, ino) in moved {
            self.by_path.remove(&old);
            let new: Arc<str> = Arc::from(format!("{to}{}", &old[from.len()..]));
            if let Some(e) = self.by_ino.get_mut(&ino) {
                e.path = new.clone();
            }
            self.by_path.insert(new, ino);
        }
    }
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
        let full = t.by_ino.capacity();
        for &ino in &inos[..99_000] {
            t.forget(ino, 1);
        }
        assert_eq!(t.count(), 1001);
        assert!(t.by_ino.capacity() <= full / 16, "{} of {full} slots kept", t.by_ino.capacity());
        assert!(t.by_path.capacity() <= full / 16);
        assert_eq!(t.path(inos[99_500]), Some("d/99500"), "what is left is still there");
        assert_eq!(t.get_or_insert("d/99999", false), inos[99_999]);
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
