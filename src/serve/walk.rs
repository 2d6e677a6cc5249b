//! A request's path walked through a view's `ZarrFs` the way the kernel walks a mount: one
//! lookup per component from the root, each taking a reference on its inode that the walk
//! gives back (`forget`) when the request is done and no longer keeps the walk (`walks`), so
//! the inode table holds only what requests in flight and kept walks hold. An open file is
//! closed the same way.

use std::sync::Arc;

use crate::fs::inodes::table::ROOT_INO;
use crate::fs::{Attr, FileKind, FsError, FsResult, ZarrFs};
use crate::views::shared::mapping::node::Node;

/// The inodes a walk looked up (forgotten on drop) and what the last one is.
pub struct Walked {
    fs: Arc<ZarrFs>,
    looked_up: Vec<u64>,
    pub attr: Attr,
}

impl Drop for Walked {
    fn drop(&mut self) {
        for &ino in self.looked_up.iter().rev() {
            self.fs.forget(ino, 1);
        }
    }
}

/// Look `components` up from the root of `fs`. A file in the middle of a path is a missing
/// name (NotFound), as for a key.
pub async fn walk(fs: &Arc<ZarrFs>, components: &[String]) -> FsResult<Walked> {
    let root = fs.getattr(ROOT_INO).await?;
    let mut walked = Walked { fs: fs.clone(), looked_up: Vec::new(), attr: root };
    for name in components {
        if walked.attr.kind != FileKind::Dir {
            return Err(FsError::NotFound);
        }
        let attr = fs.lookup(walked.attr.ino, name).await?;
        walked.looked_up.push(attr.ino);
        walked.attr = attr;
    }
    Ok(walked)
}

/// A file open for reading; closed (and its walk forgotten, unless kept) on drop.
pub struct OpenFile {
    fs: Arc<ZarrFs>,
    fh: u64,
    /// The version the handle reads: size, date and content version.
    pub node: Node,
    _walked: Arc<Walked>,
}

impl OpenFile {
    pub async fn open(walked: Arc<Walked>) -> FsResult<OpenFile> {
        let fs = walked.fs.clone();
        let opened = fs.open(walked.attr.ino, libc::O_RDONLY).await?;
        let file = |node| OpenFile { fs: fs.clone(), fh: opened.fh, node, _walked: walked };
        match fs.opened_node(opened.fh) {
            Some(node) => Ok(file(node)),
            None => {
                fs.release_reader(opened.fh);
                Err(FsError::BadHandle)
            }
        }
    }

    /// Up to `size` bytes at `offset`, as a read(2) through the mount gets them.
    pub async fn read(&self, offset: u64, size: u32) -> FsResult<bytes::Bytes> {
        self.fs.read(self.fh, offset, size).await
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        self.fs.release_reader(self.fh);
    }
}

/// The entries of the directory `walked` names, without `.` and `..`.
pub async fn list(walked: &Walked) -> FsResult<Vec<crate::fs::DirEntry>> {
    let fs = &walked.fs;
    let fh = fs.opendir(walked.attr.ino).await?;
    let listed = fs.readdir(fh);
    fs.releasedir(fh);
    Ok(listed?.iter().filter(|e| e.name != "." && e.name != "..").cloned().collect())
}
