//! The "Security" section: who may read and write through the mount, what it shows as owners
//! and modes, and which virtual-chunk locations a store may point to.

use crate::perms::ShownPerms;
use crate::source::Source;

use super::{usage, UsageError};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Security")]
pub struct SecurityFlags {
    /// Refuse every write with EROFS.
    #[arg(long, alias = "ro")]
    pub read_only: bool,
    /// Let users other than the mounting user see the mount (needs user_allow_other in /etc/fuse.conf when not root).
    #[arg(long)]
    pub allow_other: bool,
    /// Owner shown for every file and directory (default: a local directory's own owners;
    /// the mounting user for other sources).
    #[arg(long)]
    pub uid: Option<u32>,
    /// Group shown for every file and directory (default: a local directory's own groups;
    /// the mounting user's group for other sources).
    #[arg(long)]
    pub gid: Option<u32>,
    /// Mode shown for every file, in octal, e.g. 0640 (default: a local directory's own
    /// modes; 0644 for other sources).
    #[arg(long, value_name = "MODE", value_parser = crate::perms::parse_mode)]
    pub file_mode: Option<u16>,
    /// Mode shown for every directory, in octal, e.g. 0750 (default: a local directory's own
    /// modes; 0755 for other sources).
    #[arg(long, value_name = "MODE", value_parser = crate::perms::parse_mode)]
    pub dir_mode: Option<u16>,
    /// Read virtual chunks from the repository's containers under this URL prefix that need
    /// authorizing: local files (file:///data/), S3 on an endpoint of the repository's own
    /// choosing other than --endpoint-url (s3://bucket/), and http(s) on a loopback, private or
    /// link-local host (http://10.0.0.5:8080/); `all`: every container. Other remote
    /// containers are always read, with credentials from the environment. For reference
    /// (kerchunk) sources: local files outside the reference file's own directory
    /// (file:///data/), and http(s) targets on such hosts, other than the reference file's own
    /// origin (repeatable).
    #[arg(long, value_name = "URL_PREFIX")]
    pub authorize_virtual: Vec<String>,
}

impl SecurityFlags {
    /// The owners and modes shown: the flags over the mounting user's defaults.
    pub(super) fn perms(&self) -> ShownPerms {
        ShownPerms {
            uid: self.uid,
            gid: self.gid,
            file_mode: self.file_mode,
            dir_mode: self.dir_mode,
            ..ShownPerms::of_this_process()
        }
    }

    /// `--authorize-virtual`, for the sources that have virtual chunks.
    pub(super) fn authorize_virtual(self, source: &Source) -> Result<Vec<String>, UsageError> {
        if !self.authorize_virtual.is_empty()
            && !matches!(source, Source::Icechunk(_) | Source::Reference(_))
        {
            return Err(usage(
                "--authorize-virtual applies only to Icechunk and reference (kerchunk) sources",
            ));
        }
        Ok(self.authorize_virtual)
    }

    /// Zip archives, references, Icechunk and the decoded and v2 views are served read-only
    /// (the kernel mount flag too): there is no exact way back from what they show to stored
    /// bytes.
    pub(super) fn read_only(&self, source: &Source, view: crate::views::ViewKind) -> bool {
        self.read_only
            || matches!(source, Source::Zip(_) | Source::Reference(_) | Source::Icechunk(_))
            || view.is_read_only()
    }
}
