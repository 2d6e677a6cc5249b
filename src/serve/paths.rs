//! Request paths -> what they name: the index (`/`), or a view and the path components inside
//! it. Everything a client sends is untrusted: each segment is percent-decoded once and must
//! then be one plain name (no `/`, no NUL, not `..`, UTF-8), so no spelling of a path reaches
//! outside the view's root; empty and `.` segments (`//`, `/./`) are dropped.

use crate::views::ViewKind;

/// What a request path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/`: the list of the served views.
    Index,
    /// A path inside a view: its components (none for the view's root) and whether the path
    /// was written with a trailing slash (a directory's canonical URL has one).
    View { view: ViewKind, components: Vec<String>, slash: bool },
}

/// Why a path was refused (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad path: {0}")]
pub struct BadPath(pub &'static str);

/// Every view, by its URL prefix (the view's name, as `--view` spells it).
pub const ALL_VIEWS: [ViewKind; 6] = [
    ViewKind::Raw,
    ViewKind::Unsharded,
    ViewKind::Decoded,
    ViewKind::V2,
    ViewKind::V2Decoded,
    ViewKind::Flat,
];

/// `raw_path` (the request target's path, still percent-encoded) -> a target. `Ok(None)`:
/// a first segment that names no view (404).
pub fn parse(raw_path: &str) -> Result<Option<Target>, BadPath> {
    if !raw_path.starts_with('/') {
        return Err(BadPath("not an absolute path"));
    }
    let mut names = Vec::new();
    for segment in raw_path.split('/') {
        let name = decode(segment)?;
        match name.as_str() {
            "" | "." => continue,
            ".." => return Err(BadPath("a '..' segment")),
            _ => names.push(name),
        }
    }
    let slash = raw_path.ends_with('/');
    let Some(first) = names.first() else { return Ok(Some(Target::Index)) };
    let Some(view) = ALL_VIEWS.into_iter().find(|v| v.name() == first) else { return Ok(None) };
    names.remove(0);
    Ok(Some(Target::View { view, components: names, slash }))
}

/// One percent-decoded segment, refused when it is not a plain name once decoded.
fn decode(segment: &str) -> Result<String, BadPath> {
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(segment).collect();
    let name = String::from_utf8(bytes).map_err(|_| BadPath("not UTF-8"))?;
    if name.contains('/') || name.contains('\\') {
        return Err(BadPath("an encoded slash"));
    }
    if name.contains('\0') {
        return Err(BadPath("a NUL byte"));
    }
    Ok(name)
}

/// A name as it goes into a URL path: everything but unreserved characters encoded.
pub fn encode(name: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const KEEP: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    utf8_percent_encode(name, KEEP).to_string()
}

/// The URL path of `components` in `view` (with a trailing slash for a directory).
pub fn url_path(view: ViewKind, components: &[String], dir: bool) -> String {
    let mut url = format!("/{}/", view.name());
    for (i, c) in components.iter().enumerate() {
        url.push_str(&encode(c));
        if i + 1 < components.len() || dir {
            url.push('/');
        }
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(path: &str) -> (ViewKind, Vec<String>, bool) {
        match parse(path).unwrap().unwrap() {
            Target::View { view, components, slash } => (view, components, slash),
            Target::Index => panic!("{path}: the index"),
        }
    }

    #[test]
    fn views_and_components() {
        assert_eq!(parse("/").unwrap(), Some(Target::Index));
        assert_eq!(parse("//").unwrap(), Some(Target::Index));
        assert_eq!(view("/v2"), (ViewKind::V2, vec![], false));
        assert_eq!(view("/v2-decoded/"), (ViewKind::V2Decoded, vec![], true));
        assert_eq!(
            view("/raw/a/b/zarr.json"),
            (ViewKind::Raw, vec!["a".into(), "b".into(), "zarr.json".into()], false)
        );
        assert_eq!(
            view("/flat//a/./b.npy"),
            (ViewKind::Flat, vec!["a".into(), "b.npy".into()], false)
        );
        assert_eq!(
            view("/unsharded/a%20b/c%25d/"),
            (ViewKind::Unsharded, vec!["a b".into(), "c%d".into()], true)
        );
        assert_eq!(parse("/nope/x").unwrap(), None);
        assert_eq!(
            parse("/%76%32/x").unwrap(),
            Some(Target::View { view: ViewKind::V2, components: vec!["x".into()], slash: false })
        );
    }

    #[test]
    fn nothing_leaves_the_root() {
        for bad in [
            "/raw/..",
            "/raw/../etc/passwd",
            "/raw/a/%2e%2e/%2e%2e/x",
            "/raw/%2E%2E",
            "/raw/a%2fb",
            "/raw/a%2F..%2Fb",
            "/raw/a%5cb",
            "/raw/a%00b",
            "/raw/%ff",
            "raw/x",
            "/../raw/x",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted: {:?}", parse(bad));
        }
    }

    #[test]
    fn urls_round_trip() {
        let names = vec!["a b".to_string(), "c#?%d".to_string(), "é".to_string()];
        let url = url_path(ViewKind::Decoded, &names, true);
        assert_eq!(url, "/decoded/a%20b/c%23%3F%25d/%C3%A9/");
        assert_eq!(view(&url), (ViewKind::Decoded, names, true));
        assert_eq!(url_path(ViewKind::Raw, &[], true), "/raw/");
        assert_eq!(url_path(ViewKind::Raw, &["x".into()], false), "/raw/x");
    }
}
