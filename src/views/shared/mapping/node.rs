//! What a path in the mount resolves to.

use std::time::SystemTime;

use std::sync::Arc;

use bytes::Bytes;

use crate::perms::Perms;
use crate::views::flat::mapping::FlatFile;
use crate::views::presented::mapping::retile::Retiling;
use crate::zarr::codecs::{BytesChain, ChunkSpec};

/// The thing behind a file or directory of the mount.
#[derive(Debug, Clone, PartialEq)]
pub enum Backing {
    Dir,
    /// A whole store object, passed through.
    Object {
        key: String,
        version: String,
    },
    /// Bytes made by the view (e.g. rewritten metadata).
    Generated(Bytes),
    /// A byte range of a store object (an inner chunk inside a shard). `version` is the
    /// shard's version the range was read from; a read that finds another version re-resolves.
    Slice {
        key: String,
        offset: u64,
        len: u64,
        version: String,
    },
    /// A chunk served decoded: `encoded` is the stored chunk, at path `below` of the view
    /// below, and `spec` decodes it.
    Decoded {
        below: String,
        encoded: Box<Node>,
        spec: Arc<ChunkSpec>,
    },
    /// A stored chunk served with only its bytes->bytes codecs undone (a trailing crc32c
    /// checked and cut off, or the compressors after a vlen codec): `encoded` is the stored
    /// chunk at path `below` of the view below, and `chain` decodes it.
    Unwrapped {
        below: String,
        encoded: Box<Node>,
        chain: Arc<BytesChain>,
    },
    /// A tile of a re-tiled array, assembled from the decoded chunks it overlaps: `sources`
    /// are those of them the view below has (the others are the fill value).
    Retiled {
        tile: Vec<u64>,
        sources: Vec<SourceChunk>,
        retiling: Arc<Retiling>,
    },
    /// A file of the flat view, read from its layout (`views::flat::mapping`).
    Flat(Arc<FlatFile>),
}

/// A stored chunk of the view below: its grid coordinates, its path and what backs it.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceChunk {
    pub coords: Vec<u64>,
    pub below: String,
    pub node: Node,
}

/// A resolved path: what backs it, with the attributes the mount shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub backing: Backing,
    pub size: u64,
    pub modified: SystemTime,
    /// The mode, owner and group of what it is made of, where the store keeps them (a local
    /// directory): a stored file's own, a view's file that of its source (`with_perms`).
    /// `None`: the mount's defaults (`crate::perms::ShownPerms`).
    pub perms: Option<Perms>,
}

impl Node {
    pub fn dir(modified: SystemTime) -> Self {
        Node { backing: Backing::Dir, size: 0, modified, perms: None }
    }

    /// A file of bytes the view made (e.g. rewritten metadata).
    pub fn generated(bytes: &Bytes, modified: SystemTime) -> Self {
        Node {
            size: bytes.len() as u64,
            modified,
            backing: Backing::Generated(bytes.clone()),
            perms: None,
        }
    }

    /// This node showing `perms`: those of the stored object or directory it is made of.
    pub fn with_perms(self, perms: Option<Perms>) -> Self {
        Node { perms, ..self }
    }

    pub fn is_dir(&self) -> bool {
        matches!(self.backing, Backing::Dir)
    }

    /// Hash what `content_version` says, without building it for the common kinds (a stored
    /// file, an inner chunk): two nodes hash alike where their versions are alike.
    pub fn hash_content_version(&self, h: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        match &self.backing {
            Backing::Object { version, .. } => (0u8, version).hash(h),
            Backing::Slice { key, offset, len, version } => {
                (1u8, key, offset, len, version).hash(h)
            }
            _ => (2u8, self.content_version()).hash(h),
        }
    }

    /// A token that changes when the file's content may have changed (for the kernel page cache).
    pub fn content_version(&self) -> Option<String> {
        match &self.backing {
            Backing::Dir => None,
            Backing::Object { version, .. } => Some(version.clone()),
            Backing::Generated(b) => Some(format!("gen-{:08x}-{}", crc32c::crc32c(b), b.len())),
            Backing::Slice { key, offset, len, version } => {
                Some(format!("{key}@{offset}+{len}:{version}"))
            }
            Backing::Decoded { encoded, .. } => {
                encoded.content_version().map(|v| format!("decoded:{v}"))
            }
            Backing::Unwrapped { encoded, .. } => {
                encoded.content_version().map(|v| format!("unwrapped:{v}"))
            }
            Backing::Retiled { sources, .. } => {
                let versions: Vec<String> = sources
                    .iter()
                    .map(|s| {
                        format!("{}={}", s.below, s.node.content_version().unwrap_or_default())
                    })
                    .collect();
                let all = versions.join("\0");
                Some(format!("retiled-{:08x}-{}", crc32c::crc32c(all.as_bytes()), all.len()))
            }
            Backing::Flat(file) => Some(file.version()),
        }
    }
}
