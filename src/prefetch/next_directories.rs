//! Which directories a reader goes on to after the one it reads: an array's next chunk
//! directories in coordinate order (`c/0/`, `c/1/`, ...: `c/10` comes after `c/9`, where
//! name order puts it before `c/2`), any other directory's next siblings in name order. The
//! disk cache confirms their cached objects beside a directory it confirms (one listing each,
//! no object bytes), so a reader walking them waits for none of those listings
//! (`DiskCacheStore::with_next_dirs`).

use crate::store::{join_key, split_key, DirsAhead};

/// How many directories ahead of the reader are confirmed.
pub const DIRS_AHEAD: usize = 8;

/// The directories a reader of `dir` goes to next (a `store::NextDirs` policy).
pub fn next_directories(dir: &str) -> DirsAhead {
    let (parent, name) = split_key(dir);
    match name.parse::<u64>() {
        Ok(n) => DirsAhead::Named(
            (1..=DIRS_AHEAD as u64)
                .filter_map(|i| n.checked_add(i))
                .map(|next| join_key(parent, &next.to_string()))
                .collect(),
        ),
        Err(_) => DirsAhead::Siblings(DIRS_AHEAD),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_directories_go_on_by_number_others_by_name() {
        let DirsAhead::Named(dirs) = next_directories("a/c/9") else { panic!("by number") };
        assert_eq!(dirs.len(), DIRS_AHEAD);
        assert_eq!(&dirs[..2], ["a/c/10", "a/c/11"]);
        assert_eq!(next_directories("a/b"), DirsAhead::Siblings(DIRS_AHEAD));
        // A name at the end of the numbers (an untrusted listing) has nothing after it.
        let last = u64::MAX.to_string();
        assert_eq!(next_directories(&last), DirsAhead::Named(vec![]));
    }
}
