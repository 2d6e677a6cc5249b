//! Which local files a reference set may make the mount read. A reference file is data: one in
//! a bucket, or one a user dropped in `/tmp`, must not show `/etc/shadow` through a mount that
//! root made with `--allow-other`. A local target is read only when it lies, after `..` and
//! symlinks are resolved, under one of these roots:
//! - the directory of the reference file itself, when that file is local (a reference set
//!   next to the NetCDF files it indexes);
//! - a directory the user authorized with `--authorize-virtual file:///DIR/` (`all`: `/`).
//!
//! The target is then read through a store rooted at that directory, by its resolved path
//! relative to it, which the local store opens with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`:
//! a symlink swapped in after the check is refused, not followed.

use std::path::{Path, PathBuf};

/// The directories local targets may lie under (canonical paths).
#[derive(Debug, Clone, Default)]
pub struct LocalRoots {
    roots: Vec<PathBuf>,
}

impl LocalRoots {
    /// `reference_dir`: the local reference file's directory (None for a remote one);
    /// `authorized`: the `--authorize-virtual` prefixes (only `file://` ones and `all` count).
    pub fn new(reference_dir: Option<&Path>, authorized: &[String]) -> Self {
        let mut roots = Vec::new();
        let mut add = |p: &Path| match std::fs::canonicalize(p) {
            Ok(c) => roots.push(c),
            Err(e) => tracing::warn!(dir = %p.display(), "local target directory unusable: {e}"),
        };
        if let Some(dir) = reference_dir {
            add(if dir.as_os_str().is_empty() { Path::new(".") } else { dir });
        }
        for a in authorized {
            if a == "all" {
                add(Path::new("/"));
            } else if let Some(p) = a.strip_prefix("file://").filter(|p| p.starts_with('/')) {
                add(Path::new(p));
            }
        }
        LocalRoots { roots }
    }

    /// The root to read the local file `path` through, and its key there; or why it may not be
    /// read (one line naming the flag that would allow it).
    pub fn place(&self, path: &Path) -> Result<(PathBuf, String), String> {
        let refused = |what: &str| {
            let dir = path.parent().unwrap_or(Path::new("/")).display().to_string();
            format!(
                "local file {} {what}; a reference set may read local files only under its own \
                 directory or where authorized: --authorize-virtual file://{}/",
                path.display(),
                dir.trim_end_matches('/')
            )
        };
        // A file that does not resolve is refused the same way whether it exists or not.
        let real = std::fs::canonicalize(path).map_err(|e| refused(&format!("({e})")))?;
        // The longest root wins: the store of a deeper root is the one its files share.
        let root = self
            .roots
            .iter()
            .filter(|r| real.starts_with(r) && real != **r)
            .max_by_key(|r| r.as_os_str().len())
            .ok_or_else(|| refused("is not under the reference file's directory"))?;
        let key = real
            .strip_prefix(root)
            .ok()
            .and_then(Path::to_str)
            .ok_or_else(|| refused("has a name that is not UTF-8"))?;
        Ok((root.clone(), key.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_under_their_roots_or_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let refs = base.join("refs");
        let other = base.join("other");
        std::fs::create_dir_all(refs.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(refs.join("sub/a.nc"), b"a").unwrap();
        std::fs::write(other.join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(other.join("secret"), refs.join("link_out")).unwrap();
        std::os::unix::fs::symlink("sub/a.nc", refs.join("link_in")).unwrap();

        let own = LocalRoots::new(Some(&refs), &[]);
        assert_eq!(own.place(&refs.join("sub/a.nc")).unwrap(), (refs.clone(), "sub/a.nc".into()));
        // A symlink is judged by what it points to, and read by that path.
        assert_eq!(own.place(&refs.join("link_in")).unwrap(), (refs.clone(), "sub/a.nc".into()));
        let err = own.place(&refs.join("link_out")).unwrap_err();
        assert!(err.contains("--authorize-virtual file://"), "{err}");
        assert!(own.place(&refs.join("sub/../../other/secret")).is_err());
        assert!(own.place(Path::new("/etc/hostname")).is_err());
        assert!(own.place(&refs.join("missing.nc")).is_err());
        assert!(own.place(&refs).is_err());

        // A remote reference file has no directory of its own here.
        let none = LocalRoots::new(None, &["s3://b/".into(), "http://h/".into()]);
        assert!(none.place(&refs.join("sub/a.nc")).is_err());
        let authorized = format!("file://{}/", other.display());
        let auth = LocalRoots::new(None, &[authorized]);
        assert_eq!(auth.place(&other.join("secret")).unwrap(), (other.clone(), "secret".into()));
        assert!(auth.place(&refs.join("sub/a.nc")).is_err());
        let all = LocalRoots::new(None, &["all".into()]);
        let (root, key) = all.place(&other.join("secret")).unwrap();
        assert_eq!(root.join(key), other.join("secret"));
    }
}
