//! Read-ahead across files. A reader that reads the files of a directory one after another in
//! listing order (a chunk scan: zarr-python, `cp -r`, `tar`) gets the next files fetched while
//! it is still reading the current one, so it waits for one backend round trip at a time
//! instead of one per file.
//!
//! This module only decides *which* files to fetch; the filesystem does the fetching.

use std::sync::Mutex;

use lru::LruCache;

/// File names remembered over all directories (about 50 bytes each); the directories listed
/// least recently are forgotten first. A listing larger than this is not remembered (a scan of
/// it is still read, just not ahead).
const MAX_NAMES: usize = 500_000;

/// One directory: its files in listing order and where a scan of them has reached.
struct DirScan {
    files: Vec<String>,
    /// `files` is in name order. Sorted at the first read, not at listing: most listings
    /// (`find`, `ls`) are never scanned, and sorting 100,000 names is ~20 ms of the listing.
    sorted: bool,
    /// Index of the file read most recently from its start.
    last: Option<usize>,
    /// Files before this index were already handed out for fetching.
    fetched_until: usize,
}

pub struct ScanAhead {
    depth: usize,
    dirs: Mutex<Dirs>,
}

struct Dirs {
    scans: LruCache<String, DirScan>,
    /// Names held by `scans`.
    names: usize,
}

impl ScanAhead {
    /// `depth`: how many files ahead of the reader are fetched.
    pub fn new(depth: usize) -> Self {
        ScanAhead { depth, dirs: Mutex::new(Dirs { scans: LruCache::unbounded(), names: 0 }) }
    }

    /// `dir` was listed; `files` are the names of its files (each once, in any order).
    pub fn listed(&self, dir: &str, files: Vec<String>) {
        let mut dirs = crate::locks::lock(&self.dirs);
        if let Some(old) = dirs.scans.pop(dir) {
            dirs.names -= old.files.len();
        }
        if self.depth == 0 || files.len() < 2 || files.len() > MAX_NAMES {
            return;
        }
        while dirs.names + files.len() > MAX_NAMES {
            let Some((_, old)) = dirs.scans.pop_lru() else { break };
            dirs.names -= old.files.len();
        }
        dirs.names += files.len();
        dirs.scans
            .put(dir.to_string(), DirScan { files, sorted: false, last: None, fetched_until: 0 });
    }

    /// The file `name` of `dir` is being read from its start: the names of the files to fetch
    /// now. Only when the previous file read from its start was the one before it in the
    /// listing (a scan), and only files not handed out before.
    pub fn reading(&self, dir: &str, name: &str) -> Vec<String> {
        let mut dirs = crate::locks::lock(&self.dirs);
        let Some(scan) = dirs.scans.get_mut(dir) else { return Vec::new() };
        if !scan.sorted {
            // Names are unique: an unstable sort gives the one order, without a buffer.
            scan.files.sort_unstable();
            scan.sorted = true;
        }
        let Ok(i) = scan.files.binary_search_by(|n| n.as_str().cmp(name)) else {
            return Vec::new();
        };
        let in_order = scan.last.is_some_and(|last| last + 1 == i);
        scan.last = Some(i);
        if !in_order {
            // A jump: whatever was fetched ahead of the old position is no guide to the new one.
            scan.fetched_until = i + 1;
            return Vec::new();
        }
        let from = scan.fetched_until.max(i + 1);
        let to = (i + 1 + self.depth).min(scan.files.len());
        if from >= to {
            return Vec::new();
        }
        scan.fetched_until = to;
        scan.files[from..to].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` names, sorted: 000, 001, ... (wider past 999, which sorts after 999 as well).
    fn names(n: usize) -> Vec<String> {
        let mut v: Vec<String> = (0..n).map(|i| format!("{i:03}")).collect();
        v.sort();
        v
    }

    #[test]
    fn a_scan_in_listing_order_fetches_the_next_files_once_each() {
        let s = ScanAhead::new(3);
        s.listed("c", names(10));
        assert!(s.reading("c", "000").is_empty(), "one file is not a scan yet");
        assert_eq!(s.reading("c", "001"), ["002", "003", "004"]);
        assert_eq!(s.reading("c", "002"), ["005"]);
        assert_eq!(s.reading("c", "003"), ["006"]);
        // The end of the listing bounds the window.
        for n in ["004", "005", "006"] {
            s.reading("c", n);
        }
        assert_eq!(
            s.reading("c", "007"),
            Vec::<String>::new(),
            "008 and 009 were handed out already"
        );
        assert!(s.reading("c", "008").is_empty() && s.reading("c", "009").is_empty());
    }

    #[test]
    fn random_access_fetches_nothing_and_a_new_scan_starts_from_where_it_jumped() {
        let s = ScanAhead::new(2);
        s.listed("c", names(20));
        for n in ["007", "003", "015", "011"] {
            assert!(s.reading("c", n).is_empty(), "{n}");
        }
        assert_eq!(s.reading("c", "012"), ["013", "014"]);
        // Going back is a jump too; the scan from there fetches again.
        assert!(s.reading("c", "000").is_empty());
        assert_eq!(s.reading("c", "001"), ["002", "003"]);
    }

    #[test]
    fn a_listing_in_any_order_is_scanned_in_name_order() {
        let s = ScanAhead::new(2);
        let mut shuffled = names(10);
        shuffled.reverse();
        shuffled.swap(2, 7);
        s.listed("c", shuffled);
        s.reading("c", "004");
        assert_eq!(s.reading("c", "005"), ["006", "007"]);
    }

    #[test]
    fn unknown_directories_and_names_fetch_nothing() {
        let s = ScanAhead::new(4);
        assert!(s.reading("never-listed", "a").is_empty());
        s.listed("c", names(5));
        assert!(s.reading("c", "zzz").is_empty());
        assert!(s.reading("d", "001").is_empty());
    }

    #[test]
    fn a_new_listing_restarts_the_scan() {
        let s = ScanAhead::new(2);
        s.listed("c", names(10));
        s.reading("c", "000");
        assert_eq!(s.reading("c", "001"), ["002", "003"]);
        s.listed("c", names(10));
        assert!(s.reading("c", "002").is_empty());
        assert_eq!(s.reading("c", "003"), ["004", "005"]);
    }

    #[test]
    fn the_directories_listed_least_recently_are_forgotten_to_bound_memory() {
        let s = ScanAhead::new(2);
        let half = MAX_NAMES / 2;
        s.listed("a", names(half));
        s.listed("b", names(half));
        s.listed("a", names(half)); // a is now the most recent
        s.listed("c", names(10)); // over the bound: b goes
        s.reading("b", "000");
        assert!(s.reading("b", "001").is_empty(), "b was forgotten");
        s.reading("a", "000");
        assert_eq!(s.reading("a", "001"), ["002", "003"]);
        s.reading("c", "000");
        assert_eq!(s.reading("c", "001"), ["002", "003"]);
        assert!(s.dirs.lock().unwrap().names <= MAX_NAMES);
    }

    #[test]
    fn depth_zero_turns_it_off() {
        let s = ScanAhead::new(0);
        s.listed("c", names(10));
        s.reading("c", "000");
        assert!(s.reading("c", "001").is_empty());
    }
}
