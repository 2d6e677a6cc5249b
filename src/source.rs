//! SOURCE: where the store lives. `Source::parse` reads the text alone; `Source::locate`
//! then looks at a local source on disk (it exists, is what its name says, is readable; a
//! directory laid out as an Icechunk repository is one) before the store layer opens it.

use crate::store::location::{parse_location, LocationError};
pub use crate::store::location::{Cloud, Location};

/// A parsed SOURCE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A directory store (a local directory or a prefix of an object store).
    Directory(Location),
    /// A zip archive holding the store.
    Zip(Location),
    /// Virtual references: a kerchunk JSON file, or a directory holding a Parquet reference
    /// set (`.zmetadata` + `FIELD/refs.N.parq`). Chosen by a `.json`, `.parq` or `.parquet`
    /// name or a `reference+` prefix.
    Reference(Location),
    /// An Icechunk repository (`icechunk+<path or URL>`, or a local directory laid out as
    /// one: see `Source::locate`), shown at one branch, tag or snapshot.
    Icechunk(Location),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    #[error("SOURCE is empty")]
    Empty,
    #[error(transparent)]
    Location(#[from] LocationError),
}

const ZIP_SUFFIXES: [&str; 2] = [".zip", ".ozx"];
/// Names that are reference sets (kerchunk JSON files, Parquet reference directories).
const REFERENCE_SUFFIXES: [&str; 3] = [".json", ".parq", ".parquet"];

impl Source {
    pub fn parse(s: &str) -> Result<Source, SourceError> {
        if s.is_empty() {
            return Err(SourceError::Empty);
        }
        if let Some(rest) = s.strip_prefix("zip+") {
            return Ok(Source::Zip(parse_location(rest)?));
        }
        if let Some(rest) = s.strip_prefix("reference+") {
            return Ok(Source::Reference(parse_location(rest)?));
        }
        if let Some(rest) = s.strip_prefix("icechunk+") {
            return Ok(Source::Icechunk(parse_location(rest)?));
        }
        let loc = parse_location(s)?;
        let path_part = match &loc {
            Location::Local(p) => p.to_string_lossy().to_lowercase(),
            Location::Remote { url, .. } => {
                url.split(['?', '#']).next().unwrap_or("").to_lowercase()
            }
        };
        let path_part = path_part.trim_end_matches('/');
        if ZIP_SUFFIXES.iter().any(|z| path_part.ends_with(z)) {
            Ok(Source::Zip(loc))
        } else if REFERENCE_SUFFIXES.iter().any(|z| path_part.ends_with(z)) {
            Ok(Source::Reference(loc))
        } else {
            Ok(Source::Directory(loc))
        }
    }

    pub fn location(&self) -> &Location {
        match self {
            Source::Directory(l) | Source::Zip(l) | Source::Reference(l) | Source::Icechunk(l) => l,
        }
    }

    /// A local source as it is on disk, with an absolute path: a directory laid out as an
    /// Icechunk repository becomes one; a missing or unreadable path, or one of the wrong
    /// kind, is refused (one line). `writable`: warn when a local directory is not. Remote
    /// sources are returned as they are.
    pub fn locate(self, writable: bool) -> Result<Source, String> {
        let Location::Local(p) = self.location() else { return Ok(self) };
        let p = p.clone();
        let source = match self {
            Source::Directory(_) if crate::store::backends::icechunk::looks_like_repository(&p) => {
                Source::Icechunk(Location::Local(p.clone()))
            }
            other => other,
        };
        let why = |reason: &str| format!("SOURCE {}: {reason}", p.display());
        let md = std::fs::metadata(&p).map_err(|e| why(&io_reason(&e)))?;
        match &source {
            Source::Directory(_) | Source::Icechunk(_) if !md.is_dir() => {
                return Err(why("not a directory"))
            }
            Source::Zip(_) if !md.is_file() => return Err(why("not a zip file")),
            _ => {}
        }
        let access = match source {
            Source::Directory(_) | Source::Icechunk(_) => libc::R_OK | libc::X_OK,
            Source::Zip(_) => libc::R_OK,
            // Checked, with its own reasons, by the reference store below.
            Source::Reference(_) => libc::F_OK,
        };
        if !access_ok(&p, access) {
            return Err(why("permission denied"));
        }
        if writable && matches!(source, Source::Directory(_)) && !access_ok(&p, libc::W_OK) {
            tracing::warn!(source = %p.display(), "SOURCE is not writable; writes will fail (use --read-only)");
        }
        let abs = std::fs::canonicalize(&p).map_err(|e| why(&io_reason(&e)))?;
        if matches!(source, Source::Reference(_)) {
            crate::store::backends::reference::check_local(&abs).map_err(|e| why(&e))?;
        }
        Ok(source.with_location(Location::Local(abs)))
    }

    fn with_location(self, location: Location) -> Source {
        match self {
            Source::Directory(_) => Source::Directory(location),
            Source::Zip(_) => Source::Zip(location),
            Source::Reference(_) => Source::Reference(location),
            Source::Icechunk(_) => Source::Icechunk(location),
        }
    }
}

fn access_ok(path: &std::path::Path, mode: i32) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: access(2) with a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

/// The reason of an I/O error on a path the user gave, in the words of a one-line refusal.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(p: impl Into<std::path::PathBuf>) -> Location {
        Location::Local(p.into())
    }

    #[test]
    fn parses_every_kind_of_source() {
        use std::os::unix::ffi::OsStrExt;
        // A stray '%' stays; an escaped byte that is not UTF-8 is kept as that byte.
        let latin1 = std::ffi::OsStr::from_bytes(b"/d/caf\xe9");
        for (text, want) in [
            ("data.zarr", Source::Directory(local("data.zarr"))),
            ("file:///a/b%20c", Source::Directory(local("/a/b c"))),
            ("file:///a/100%/x%zz%4", Source::Directory(local("/a/100%/x%zz%4"))),
            ("file:///d/caf%E9", Source::Directory(local(latin1))),
            ("/x/y.zarr.zip", Source::Zip(local("/x/y.zarr.zip"))),
            ("a.OZX", Source::Zip(local("a.OZX"))),
            ("refs/combined.JSON", Source::Reference(local("refs/combined.JSON"))),
            ("/d/refs.parq/", Source::Reference(local("/d/refs.parq/"))),
            ("icechunk+file:///r/repo", Source::Icechunk(local("/r/repo"))),
        ] {
            assert_eq!(Source::parse(text).unwrap(), want, "{text}");
        }
        // Remote ones: the kind and the cloud.
        let kind = |s: &Source| std::mem::discriminant(s);
        let any = local("");
        for (text, want, cloud) in [
            ("s3://b/p.zarr", Source::Directory(any.clone()), Cloud::S3),
            ("gs://b/x.zip", Source::Zip(any.clone()), Cloud::Gcs),
            ("zip+https://h/data", Source::Zip(any.clone()), Cloud::Http),
            ("az://c/p", Source::Directory(any.clone()), Cloud::Azure),
            ("s3://b/x/refs.parquet", Source::Reference(any.clone()), Cloud::S3),
            ("icechunk+s3://b/repo", Source::Icechunk(any.clone()), Cloud::S3),
            ("reference+gs://b/kerchunk_refs", Source::Reference(any.clone()), Cloud::Gcs),
        ] {
            let got = Source::parse(text).unwrap();
            assert_eq!(kind(&got), kind(&want), "{text}: {got:?}");
            assert!(matches!(got.location(), Location::Remote { cloud: c, .. } if *c == cloud));
        }
        assert_eq!(Source::parse("file://rel"), Err(LocationError::RelativeFileUrl.into()));
        assert_eq!(
            Source::parse("ftp://h/x"),
            Err(LocationError::UnknownScheme("ftp".into()).into())
        );
        assert!(matches!(
            Source::parse("s3:///x"),
            Err(SourceError::Location(LocationError::NoBucket(_)))
        ));
        assert_eq!(Source::parse(""), Err(SourceError::Empty));
    }

    #[test]
    fn locate_checks_the_disk_and_finds_icechunk_repositories() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let at = |rel: &str| Source::parse(dir.join(rel).to_str().unwrap()).unwrap().locate(false);
        std::fs::create_dir_all(dir.join("store")).unwrap();
        std::fs::create_dir_all(dir.join("repo/snapshots")).unwrap();
        std::fs::create_dir_all(dir.join("repo/refs")).unwrap();
        std::fs::write(dir.join("file"), b"x").unwrap();
        std::fs::create_dir(dir.join("dir.zip")).unwrap();
        assert_eq!(at("store").unwrap(), Source::Directory(local(dir.join("store"))));
        assert_eq!(at("repo").unwrap(), Source::Icechunk(local(dir.join("repo"))));
        assert!(at("missing").unwrap_err().ends_with(": no such file or directory"));
        assert!(at("file").unwrap_err().ends_with(": not a directory"));
        assert!(at("dir.zip").unwrap_err().ends_with(": not a zip file"));
        let remote = Source::parse("s3://b/p").unwrap();
        assert_eq!(remote.clone().locate(true).unwrap(), remote);
    }
}
