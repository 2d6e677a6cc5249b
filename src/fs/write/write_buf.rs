//! The write buffer of a file open for writing, shared by every handle on its path, and the
//! state machine that decides what becomes of it. Each transition is a method of `BufState`
//! that changes the state and returns the I/O to do (a put, a removal, nothing); `ZarrFs` does
//! that I/O and reports its outcome back. `BufState` holds no data and does no I/O, so every
//! transition is tested below without a store. The content is a `spill::Buffer`.

use std::sync::Arc;
use std::time::SystemTime;

use crate::fs::write::spill;
use crate::store::split_key;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Backing, Node};
use crate::views::shared::namespace::is_staged_name;

/// How a write-back stores a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Replace whatever the store has under the path (from memory or the spill file).
    Replace,
    /// Create the key only if the store has none, from memory: the file was made with
    /// `O_CREAT|O_EXCL` and is not stored yet, and another daemon may have made the key since.
    Create,
}

/// Where a buffer stands with respect to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The store has this content (or it was not changed since it was read).
    Clean,
    /// Changed since it was last stored: the next write-back stores it.
    Dirty(Put),
    /// Dirty, and the last write-back failed: every writer's close tries again.
    Failed(Put),
    /// A temp file (`*.partial`): kept in memory until renamed, never written to the backend
    /// under its own name.
    Staged,
    /// Unlinked while open, replaced by a rename, or lost an exclusive create: never written
    /// back.
    Unlinked,
}

/// What to do after a write-back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterPut {
    /// Nothing more (the write-back failed, or was refused for good).
    Nothing,
    /// Stored: drop what is cached of the path.
    Invalidate,
    /// The exclusive create lost to another writer: the name now means the winner's file, so
    /// forget this buffer as the path's and drop what is cached of the path.
    Forget,
}

/// What an unlink does with the name in the store, or a rename with the source name once the
/// buffer is put under the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldName {
    /// Stored under the old name: remove it.
    Remove,
    /// Changed since stored, so the old name may or may not be in the store: remove it if it is.
    RemoveIfPresent,
    /// A temp file: the store never had the old name.
    Keep,
}

/// The state of a buffer and the handles open for writing on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufState {
    state: State,
    handles: usize,
    /// Its last handle closed it for good (`close_handle` said so): it is leaving the open
    /// files, and no handle may join it any more (an open racing that close makes a new
    /// buffer instead, or it would write to one no path finds).
    retired: bool,
}

impl BufState {
    /// A buffer for `path` with one writer handle; `dirty` when it must be written back even
    /// unchanged (a new or truncated file).
    pub fn new(path: &str, dirty: bool) -> BufState {
        let state = if is_staged_name(split_key(path).1) {
            State::Staged
        } else if dirty {
            State::Dirty(Put::Replace)
        } else {
            State::Clean
        };
        BufState { state, handles: 1, retired: false }
    }

    #[cfg(test)]
    pub fn state(&self) -> State {
        self.state
    }

    #[cfg(test)]
    pub fn handles(&self) -> usize {
        self.handles
    }

    pub fn is_unlinked(&self) -> bool {
        self.state == State::Unlinked
    }

    /// No writer handle holds it (a temp file made by link()).
    pub fn without_handles(mut self) -> BufState {
        self.handles = 0;
        self
    }

    /// Another writer handle opens the buffer; false (and nothing changes) when it was
    /// retired.
    pub fn join(&mut self) -> bool {
        if self.retired {
            return false;
        }
        self.handles += 1;
        true
    }

    /// The content changed (a write or a truncation).
    pub fn changed(&mut self) {
        if self.state == State::Clean {
            self.state = State::Dirty(Put::Replace);
        }
    }

    /// Made with `O_CREAT|O_EXCL`: the first write-back creates the key only if the store has
    /// none. A temp file never reaches the store under its own name, so it stays as it is.
    pub fn exclusive(&mut self) {
        if let State::Clean | State::Dirty(_) = self.state {
            self.state = State::Dirty(Put::Create);
        }
    }

    /// Whether a close (or with `whole_file`, an fsync) writes back: when its handle changed the
    /// buffer since its last flush, or an earlier write-back failed.
    pub fn wants_write_back(&self, handle_dirty: bool, whole_file: bool) -> bool {
        handle_dirty || whole_file || matches!(self.state, State::Failed(_))
    }

    /// The put a write-back does now, if any.
    pub fn write_back(&self) -> Option<Put> {
        match self.state {
            State::Dirty(put) | State::Failed(put) => Some(put),
            State::Clean | State::Staged | State::Unlinked => None,
        }
    }

    /// The outcome of the write-back `put`.
    pub fn stored(&mut self, put: Put, result: &FsResult<()>) -> AfterPut {
        match (put, result) {
            (_, Ok(())) => {
                self.state = State::Clean;
                AfterPut::Invalidate
            }
            (Put::Create, Err(FsError::Exists)) => {
                self.state = State::Unlinked;
                AfterPut::Forget
            }
            // Refused for its shape, not for a passing fault: trying again at every close
            // would only repeat the error (and its log line).
            (Put::Replace, Err(e)) if is_too_large(e) => {
                self.state = State::Clean;
                AfterPut::Nothing
            }
            (put, Err(_)) => {
                self.state = State::Failed(put);
                AfterPut::Nothing
            }
        }
    }

    /// A writer handle closes, after its write-back ended `ok` (or had nothing to do). Returns
    /// whether the buffer is to be forgotten: once the last handle is gone, unless it is a
    /// staged temp file (kept until renamed) or its write-back failed (kept so that a retry
    /// still finds the data).
    pub fn close_handle(&mut self, ok: bool) -> bool {
        self.handles = self.handles.saturating_sub(1);
        let last = match self.state {
            State::Unlinked => self.handles == 0,
            State::Staged => false,
            _ => self.handles == 0 && ok,
        };
        self.retired |= last;
        last
    }

    /// unlink() of the path: the changes are dropped, and what becomes of the name in the
    /// store is returned (as for the old name of a rename).
    pub fn unlink(&mut self) -> OldName {
        let old = self.rename_source();
        self.state = State::Unlinked;
        old
    }

    /// Another file was renamed over this one's path: it now writes nowhere (its close must not
    /// bring the old content back).
    pub fn replaced(&mut self) {
        self.state = State::Unlinked;
    }

    /// What a rename does with the old name once the content is put under the new one.
    pub fn rename_source(&self) -> OldName {
        match self.state {
            State::Clean => OldName::Remove,
            State::Staged => OldName::Keep,
            State::Dirty(_) | State::Failed(_) | State::Unlinked => OldName::RemoveIfPresent,
        }
    }

    /// The rename stored the content under `to`. Returns whether the buffer stays open (as an
    /// open file follows its rename, later writes go to the new name); with no handle left it
    /// is done with.
    pub fn renamed(&mut self, to: &str) -> bool {
        if self.handles == 0 {
            self.state = State::Unlinked;
            return false;
        }
        if self.state != State::Unlinked {
            // The rename has stored it: later closes replace it, also after an exclusive create.
            self.state = if is_staged_name(split_key(to).1) { State::Staged } else { State::Clean };
        }
        true
    }

    /// At unmount a temp file is kept under its own name (nothing written through the mount is
    /// lost).
    pub fn unstage(&mut self) {
        if self.state == State::Staged {
            self.state = State::Dirty(Put::Replace);
        }
    }
}

pub fn is_too_large(e: &FsError) -> bool {
    match e {
        FsError::TooLarge(_) => true,
        FsError::Shared(e) => is_too_large(e),
        _ => false,
    }
}

/// A spill-file error (e.g. ENOSPC in the spill directory) as the writer sees it.
pub fn io_err(path: &str, e: std::io::Error) -> FsError {
    FsError::Store(crate::store::StoreError::from_io(path, e))
}

/// Buffered content of a file open for writing (shared by every handle on that path).
pub struct WriteBuf {
    pub path: String,
    /// In memory while small, else in a spill file (see `spill`).
    pub data: spill::Buffer,
    pub st: BufState,
    pub modified: SystemTime,
    /// Those of the file it replaces (the store keeps them at the write-back), shown
    /// meanwhile; `None` for a new file.
    pub perms: Option<crate::perms::Perms>,
}

pub type SharedBuf = Arc<tokio::sync::Mutex<WriteBuf>>;

impl WriteBuf {
    /// A buffer for `path` holding `data`, with one writer handle (see `BufState::new`).
    pub fn new(
        spill: &Arc<spill::Spill>,
        path: &str,
        data: Vec<u8>,
        dirty: bool,
    ) -> FsResult<Self> {
        let data = spill::Buffer::new(spill.clone(), data).map_err(|e| io_err(path, e))?;
        Ok(WriteBuf {
            path: path.to_string(),
            data,
            st: BufState::new(path, dirty),
            modified: SystemTime::now(),
            perms: None,
        })
    }

    /// A buffer replacing a file with `perms`.
    pub fn with_perms(self, perms: Option<crate::perms::Perms>) -> Self {
        WriteBuf { perms, ..self }
    }

    /// The buffer of a temp file that no writer holds open (made by link()).
    pub fn without_handles(mut self) -> Self {
        self.st = self.st.without_handles();
        self
    }

    pub fn into_shared(self) -> SharedBuf {
        Arc::new(tokio::sync::Mutex::new(self))
    }

    pub fn is_unlinked(&self) -> bool {
        self.st.is_unlinked()
    }

    /// What the buffer shows as a file.
    pub fn node(&self) -> Node {
        Node {
            size: self.data.len(),
            modified: self.modified,
            perms: self.perms,
            backing: Backing::Object { key: self.path.clone(), version: "pending".into() },
        }
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> FsResult<()> {
        self.data.write(offset, data).map_err(|e| io_err(&self.path, e))?;
        self.st.changed();
        self.modified = SystemTime::now();
        Ok(())
    }

    pub fn truncate(&mut self, size: u64) -> FsResult<()> {
        self.data.truncate(size).map_err(|e| io_err(&self.path, e))?;
        self.st.changed();
        self.modified = SystemTime::now();
        Ok(())
    }

    /// Another writer handle on the buffer, emptying it for `O_TRUNC`; false (and nothing
    /// changes) when the buffer was retired (`BufState::join`).
    pub fn join(&mut self, truncating: bool) -> bool {
        if !self.st.join() {
            return false;
        }
        if truncating {
            self.data.clear();
            self.st.changed();
        }
        true
    }

    /// See `BufState::renamed`; the buffer's path follows.
    pub fn renamed(&mut self, to: &str) -> bool {
        let open = self.st.renamed(to);
        if open {
            self.path = to.to_string();
        }
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> FsResult<()> {
        Err(FsError::Store(crate::store::StoreError::from_io(
            "k",
            std::io::Error::other("connection reset"),
        )))
    }

    #[test]
    fn a_new_file_is_put_once_and_then_clean() {
        let mut s = BufState::new("d/c/0", true);
        assert_eq!(s.write_back(), Some(Put::Replace));
        assert_eq!(s.stored(Put::Replace, &Ok(())), AfterPut::Invalidate);
        assert_eq!(s.state(), State::Clean);
        assert_eq!(s.write_back(), None, "stored content is put again");
        assert!(!s.wants_write_back(false, false));
        s.changed();
        assert_eq!(s.write_back(), Some(Put::Replace));
        assert!(s.close_handle(true), "the last handle forgets a stored buffer");
    }

    #[test]
    fn an_opened_file_is_clean_until_changed() {
        let mut s = BufState::new("k", false);
        assert_eq!((s.state(), s.write_back()), (State::Clean, None));
        assert!(s.join());
        assert!(!s.close_handle(true), "another handle is still open");
        assert!(s.close_handle(true));
        // Closed for good: no handle joins it any more (an open racing that close opens anew).
        assert!(!s.join());
        assert_eq!(s.handles(), 0);
    }

    #[test]
    fn a_failed_write_back_is_retried_by_every_close_and_kept() {
        let mut s = BufState::new("k", true);
        assert_eq!(s.stored(Put::Replace, &failure()), AfterPut::Nothing);
        assert_eq!(s.state(), State::Failed(Put::Replace));
        assert!(s.wants_write_back(false, false), "a clean handle's close retries");
        s.changed();
        assert_eq!(s.state(), State::Failed(Put::Replace), "a write keeps the failure");
        assert!(!s.close_handle(false), "the data is kept for a retry");
        assert_eq!(s.write_back(), Some(Put::Replace));
        assert_eq!(s.stored(Put::Replace, &Ok(())), AfterPut::Invalidate);
        assert!(!s.wants_write_back(false, false));
        assert!(s.wants_write_back(true, false) && s.wants_write_back(false, true));
    }

    #[test]
    fn a_refused_size_is_not_retried() {
        let mut s = BufState::new("k", true);
        let refused = Err(FsError::Shared(Arc::new(FsError::TooLarge("5 TB".into()))));
        assert_eq!(s.stored(Put::Replace, &refused), AfterPut::Nothing);
        assert_eq!((s.state(), s.write_back()), (State::Clean, None));
        assert!(s.close_handle(true));
    }

    #[test]
    fn an_exclusive_create_is_put_if_absent_once() {
        let mut s = BufState::new("k", true);
        s.exclusive();
        assert_eq!(s.write_back(), Some(Put::Create));
        assert_eq!(s.stored(Put::Create, &failure()), AfterPut::Nothing);
        assert_eq!(s.write_back(), Some(Put::Create), "a failed create stays a create");
        assert_eq!(s.stored(Put::Create, &Ok(())), AfterPut::Invalidate);
        s.changed();
        assert_eq!(s.write_back(), Some(Put::Replace), "the winner's later closes replace");
    }

    #[test]
    fn an_exclusive_create_that_lost_is_forgotten_and_never_stored() {
        let mut s = BufState::new("k", true);
        s.exclusive();
        assert_eq!(s.stored(Put::Create, &Err(FsError::Exists)), AfterPut::Forget);
        assert!(s.is_unlinked());
        s.changed();
        assert_eq!(s.write_back(), None);
        assert!(s.close_handle(false), "forgotten even though its write-back failed");
    }

    #[test]
    fn a_temp_file_stays_in_memory_until_renamed() {
        let mut s = BufState::new("d/x.1.partial", true);
        s.exclusive();
        assert_eq!(s.state(), State::Staged, "a temp file never reaches the store");
        s.changed();
        assert_eq!(s.write_back(), None);
        assert!(!s.close_handle(true), "kept after its last close, until renamed");
        assert_eq!(s.rename_source(), OldName::Keep);
        assert!(!s.renamed("d/x"), "no handle: the buffer is done with");
        assert!(s.is_unlinked());
    }

    #[test]
    fn a_file_renamed_while_open_follows_its_new_name() {
        let mut s = BufState::new("k", true);
        s.exclusive();
        assert_eq!(s.rename_source(), OldName::RemoveIfPresent);
        assert!(s.renamed("j"));
        assert_eq!(s.state(), State::Clean, "the rename stored it");
        s.changed();
        assert_eq!(s.write_back(), Some(Put::Replace), "no longer exclusive");
        assert_eq!(s.stored(Put::Replace, &Ok(())), AfterPut::Invalidate);
        assert_eq!(s.rename_source(), OldName::Remove);
        assert!(s.renamed("j.9.partial"));
        assert_eq!(s.state(), State::Staged, "renamed to a temp name: in memory again");
    }

    #[test]
    fn unlink_removes_the_stored_object_unless_a_temp_file() {
        let mut clean = BufState::new("k", false);
        assert_eq!(clean.unlink(), OldName::Remove);
        let mut dirty = BufState::new("k", true);
        assert_eq!(dirty.unlink(), OldName::RemoveIfPresent, "it may be stored from before");
        let mut staged = BufState::new("k.partial", false);
        assert_eq!(staged.unlink(), OldName::Keep);
        for mut s in [clean, dirty, staged] {
            assert!(s.is_unlinked());
            s.changed();
            assert_eq!(s.write_back(), None, "an unlinked file is never written back");
            s.unstage();
            assert_eq!(s.write_back(), None, "nor at unmount");
            assert!(s.close_handle(false));
        }
    }

    #[test]
    fn a_replaced_file_writes_nowhere() {
        let mut s = BufState::new("k", true);
        s.join();
        s.replaced();
        assert_eq!(s.write_back(), None);
        assert!(s.renamed("j"), "still open");
        assert!(s.is_unlinked(), "but it stays unlinked");
    }

    #[test]
    fn temp_files_are_kept_under_their_own_name_at_unmount() {
        let mut s = BufState::new("x.partial", true).without_handles();
        assert_eq!(s.handles(), 0);
        s.unstage();
        assert_eq!(s.write_back(), Some(Put::Replace));
        let mut clean = BufState::new("k", false);
        clean.unstage();
        assert_eq!(clean.write_back(), None, "only temp files are unstaged");
    }
}
