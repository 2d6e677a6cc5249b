//! Directory pages: an HTML index with one relative link per entry (directories with a
//! trailing slash, as fsspec's HTTP `ls` and static-site crawlers expect), or JSON for a client
//! that asks for `application/json`.

use hyper::header::{HeaderMap, ACCEPT};

use super::paths::encode;
use crate::views::shared::mapping::markup::escape;

/// One entry of a directory page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub dir: bool,
    /// The size when the listing knew it (a file), else nothing is said.
    pub size: Option<u64>,
}

/// Whether the client prefers JSON to HTML (`Accept: application/json` before any HTML type).
pub fn wants_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(ACCEPT).and_then(|v| v.to_str().ok()) else { return false };
    for item in accept.split(',') {
        let media = item.split(';').next().unwrap_or("").trim();
        match media {
            "application/json" => return true,
            "text/html" | "application/xhtml+xml" => return false,
            _ => {}
        }
    }
    false
}

/// The HTML page of `url_path` (the directory's URL path, ending in `/`).
pub fn html(url_path: &str, entries: &[Entry]) -> String {
    let title = escape(&percent_encoding::percent_decode_str(url_path).decode_utf8_lossy());
    let mut page = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1>\n<ul>\n"
    );
    for e in entries {
        let slash = if e.dir { "/" } else { "" };
        let href = format!("{}{slash}", encode(&e.name));
        let size = e.size.map(|s| format!(" ({s} bytes)")).unwrap_or_default();
        page.push_str(&format!(
            "<li><a href=\"{href}\">{}{slash}</a>{size}</li>\n",
            escape(&e.name)
        ));
    }
    page.push_str("</ul>\n</body></html>\n");
    page
}

/// The JSON document of a directory: `{"path": ..., "entries": [{"name", "type", "size"?}]}`.
pub fn json(url_path: &str, entries: &[Entry]) -> String {
    let entries: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            let mut o = serde_json::json!({
                "name": e.name,
                "type": if e.dir { "directory" } else { "file" },
            });
            if let Some(size) = e.size {
                o["size"] = size.into();
            }
            o
        })
        .collect();
    let doc = serde_json::json!({ "path": url_path, "entries": entries });
    format!("{doc}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn entries() -> Vec<Entry> {
        vec![
            Entry { name: "c".into(), dir: true, size: None },
            Entry { name: "zarr.json".into(), dir: false, size: Some(12) },
            Entry { name: "<a\"b>&#".into(), dir: false, size: None },
        ]
    }

    #[test]
    fn html_links_are_relative_and_escaped() {
        let page = html("/v2/a%20b/", &entries());
        assert!(page.contains("<title>Index of /v2/a b/</title>"));
        assert!(page.contains("<a href=\"c/\">c/</a>"));
        assert!(page.contains("<a href=\"zarr.json\">zarr.json</a> (12 bytes)"));
        assert!(page.contains("<a href=\"%3Ca%22b%3E%26%23\">&lt;a&quot;b&gt;&amp;#</a>"));
        assert!(!page.contains(".."), "no parent link: fsspec would follow it");
    }

    #[test]
    fn json_listing() {
        let doc: serde_json::Value = serde_json::from_str(&json("/raw/", &entries())).unwrap();
        assert_eq!(doc["path"], "/raw/");
        assert_eq!(doc["entries"][0], serde_json::json!({"name": "c", "type": "directory"}));
        assert_eq!(
            doc["entries"][1],
            serde_json::json!({"name": "zarr.json", "type": "file", "size": 12})
        );
    }

    #[test]
    fn accept_negotiation() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(ACCEPT, HeaderValue::from_str(v).unwrap());
            wants_json(&h)
        };
        assert!(!wants_json(&HeaderMap::new()));
        assert!(with("application/json"));
        assert!(with("application/json; q=1, text/html"));
        assert!(!with("text/html,application/xhtml+xml,application/json;q=0.9"));
        assert!(!with("*/*"));
    }
}
