//! `Range` and the conditional headers (RFC 9110 sections 13 and 14) for one file: which bytes
//! to send, and whether to send them at all. Only single ranges are served; a header this does
//! not understand (another unit, several ranges, a malformed one) is ignored, as the RFC allows,
//! and the whole file is sent.

use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::header::{HeaderMap, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, RANGE};

/// What a `Range` header asks of a file of `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranged {
    /// No (usable) range: the whole file, 200.
    Whole,
    /// These bytes, 206.
    Part(Range<u64>),
    /// A range that starts past the end, 416.
    Unsatisfiable,
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` against `len` bytes.
pub fn parse_range(header: &str, len: u64) -> Ranged {
    let Some(spec) = header.trim().strip_prefix("bytes=") else { return Ranged::Whole };
    let spec = spec.trim();
    if spec.contains(',') {
        return Ranged::Whole;
    }
    let Some((first, last)) = spec.split_once('-') else { return Ranged::Whole };
    // The RFC's grammar has no whitespace inside a range.
    let num = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    match (first.is_empty(), num(first), num(last)) {
        // bytes=-n: the last n bytes.
        (true, _, Some(n)) => {
            if n == 0 || len == 0 {
                Ranged::Unsatisfiable
            } else {
                Ranged::Part(len.saturating_sub(n)..len)
            }
        }
        (false, Some(a), end) if last.is_empty() || end.is_some() => {
            if end.is_some_and(|b| b < a) {
                return Ranged::Whole; // invalid: ignored
            }
            if a >= len {
                return Ranged::Unsatisfiable;
            }
            let stop = end.map_or(len, |b| b.saturating_add(1).min(len));
            Ranged::Part(a..stop)
        }
        _ => Ranged::Whole,
    }
}

/// What the response is checked against: the file's entity tag and date.
#[derive(Debug, Clone)]
pub struct Validators {
    /// A strong tag, quoted (`"..."`), when the file has a content version.
    pub etag: Option<String>,
    pub modified: SystemTime,
}

/// The outcome of the preconditions for a GET or HEAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// 304: the client's copy is current.
    NotModified,
    /// 412: `If-Match` names no current tag.
    Failed,
    /// Send the file; `range` is what the `Range` header asks (`Whole` when `If-Range` says
    /// the client's copy is another version).
    Send { range: Ranged },
}

/// Evaluate the preconditions in the RFC's order (13.2.2) for a file of `len` bytes.
pub fn decide(headers: &HeaderMap, v: &Validators, len: u64) -> Decision {
    let text = |name| headers.get(name).and_then(|h: &hyper::header::HeaderValue| h.to_str().ok());
    if let Some(wanted) = text(IF_MATCH) {
        let strong = v.etag.as_deref().is_some_and(|tag| list_matches(wanted, tag, false));
        if !strong && wanted.trim() != "*" {
            return Decision::Failed;
        }
    }
    match text(IF_NONE_MATCH) {
        Some(wanted) => {
            if wanted.trim() == "*"
                || v.etag.as_deref().is_some_and(|tag| list_matches(wanted, tag, true))
            {
                return Decision::NotModified;
            }
        }
        None => {
            let since = text(IF_MODIFIED_SINCE).and_then(|d| httpdate::parse_http_date(d).ok());
            if since.is_some_and(|since| seconds(v.modified) <= seconds(since)) {
                return Decision::NotModified;
            }
        }
    }
    let Some(range) = text(RANGE) else { return Decision::Send { range: Ranged::Whole } };
    if let Some(condition) = text(IF_RANGE) {
        if !if_range_holds(condition, v) {
            return Decision::Send { range: Ranged::Whole };
        }
    }
    Decision::Send { range: parse_range(range, len) }
}

/// `If-Range`: a strong tag equal to the current one, or exactly the current date.
fn if_range_holds(condition: &str, v: &Validators) -> bool {
    let c = condition.trim();
    if c.starts_with('"') || c.starts_with("W/") {
        return !c.starts_with("W/") && v.etag.as_deref() == Some(c);
    }
    httpdate::parse_http_date(c).is_ok_and(|d| seconds(d) == seconds(v.modified))
}

/// Whether a comma-separated list of entity tags holds `tag`; `weak` compares without the
/// `W/` prefix (If-None-Match), otherwise only strong tags match (If-Match).
fn list_matches(list: &str, tag: &str, weak: bool) -> bool {
    list.split(',').map(str::trim).any(|t| match t.strip_prefix("W/") {
        Some(opaque) => weak && opaque == tag,
        None => t == tag,
    })
}

/// Whole seconds since the epoch: HTTP dates have no finer resolution.
fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs()
}

/// The entity tag of a content version: a hash, so that no character of the version (store
/// ETags carry quotes) needs escaping and the tag says nothing of the store's keys.
pub fn etag_of(version: &str, len: u64) -> String {
    // FNV-1a: stable across runs and builds (a cached tag stays valid over a restart).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in version.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    format!("\"{h:016x}-{len:x}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn single_ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Ranged::Part(0..10));
        assert_eq!(parse_range("bytes=90-200", 100), Ranged::Part(90..100));
        assert_eq!(parse_range("bytes=10-", 100), Ranged::Part(10..100));
        assert_eq!(parse_range("bytes=-10", 100), Ranged::Part(90..100));
        assert_eq!(parse_range("bytes=-500", 100), Ranged::Part(0..100));
        assert_eq!(parse_range("bytes=99-99", 100), Ranged::Part(99..100));
        assert_eq!(parse_range("bytes=100-", 100), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=100-200", 100), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 100), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), Ranged::Unsatisfiable);
        assert_eq!(parse_range("bytes=-1", 0), Ranged::Unsatisfiable);
        // Not understood: the whole file.
        for ignored in [
            "bytes=5-1",
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=a-b",
            "bytes=-",
            "bytes=1",
            "bytes=+1-2",
            "bytes= - 5",
        ] {
            assert_eq!(parse_range(ignored, 100), Ranged::Whole, "{ignored}");
        }
    }

    fn headers(pairs: &[(hyper::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn conditional_requests() {
        let date = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let v = Validators {
            etag: Some("\"abc\"".into()),
            modified: date + Duration::from_millis(400),
        };
        let http_date = httpdate::fmt_http_date(date);
        let earlier = httpdate::fmt_http_date(date - Duration::from_secs(1));
        let send = |range| Decision::Send { range };
        assert_eq!(decide(&headers(&[]), &v, 10), send(Ranged::Whole));
        assert_eq!(decide(&headers(&[(IF_NONE_MATCH, "\"abc\"")]), &v, 10), Decision::NotModified);
        assert_eq!(
            decide(&headers(&[(IF_NONE_MATCH, "\"x\", W/\"abc\"")]), &v, 10),
            Decision::NotModified
        );
        assert_eq!(decide(&headers(&[(IF_NONE_MATCH, "*")]), &v, 10), Decision::NotModified);
        assert_eq!(decide(&headers(&[(IF_NONE_MATCH, "\"x\"")]), &v, 10), send(Ranged::Whole));
        // If-None-Match rules over If-Modified-Since.
        assert_eq!(
            decide(&headers(&[(IF_NONE_MATCH, "\"x\""), (IF_MODIFIED_SINCE, &http_date)]), &v, 10),
            send(Ranged::Whole)
        );
        assert_eq!(
            decide(&headers(&[(IF_MODIFIED_SINCE, &http_date)]), &v, 10),
            Decision::NotModified
        );
        assert_eq!(decide(&headers(&[(IF_MODIFIED_SINCE, &earlier)]), &v, 10), send(Ranged::Whole));
        assert_eq!(
            decide(&headers(&[(IF_MODIFIED_SINCE, "garbage")]), &v, 10),
            send(Ranged::Whole)
        );
        assert_eq!(decide(&headers(&[(IF_MATCH, "\"x\"")]), &v, 10), Decision::Failed);
        assert_eq!(decide(&headers(&[(IF_MATCH, "W/\"abc\"")]), &v, 10), Decision::Failed);
        assert_eq!(decide(&headers(&[(IF_MATCH, "\"abc\"")]), &v, 10), send(Ranged::Whole));
        // If-Range: the range only for the current version.
        let r = (RANGE, "bytes=2-3");
        assert_eq!(decide(&headers(std::slice::from_ref(&r)), &v, 10), send(Ranged::Part(2..4)));
        assert_eq!(
            decide(&headers(&[r.clone(), (IF_RANGE, "\"abc\"")]), &v, 10),
            send(Ranged::Part(2..4))
        );
        assert_eq!(
            decide(&headers(&[r.clone(), (IF_RANGE, "\"old\"")]), &v, 10),
            send(Ranged::Whole)
        );
        assert_eq!(
            decide(&headers(&[r.clone(), (IF_RANGE, "W/\"abc\"")]), &v, 10),
            send(Ranged::Whole)
        );
        assert_eq!(
            decide(&headers(&[r.clone(), (IF_RANGE, &http_date)]), &v, 10),
            send(Ranged::Part(2..4))
        );
        assert_eq!(decide(&headers(&[r, (IF_RANGE, &earlier)]), &v, 10), send(Ranged::Whole));
        // No tag: If-None-Match never matches, a tag If-Range never holds.
        let untagged = Validators { etag: None, modified: date };
        assert_eq!(
            decide(&headers(&[(IF_NONE_MATCH, "\"abc\"")]), &untagged, 10),
            send(Ranged::Whole)
        );
    }

    #[test]
    fn tags_are_quoted_and_stable() {
        let t = etag_of("\"s3-etag\"", 42);
        assert!(t.starts_with('"') && t.ends_with('"') && !t[1..t.len() - 1].contains('"'));
        assert_eq!(t, etag_of("\"s3-etag\"", 42));
        assert_ne!(t, etag_of("\"s3-etag2\"", 42));
        assert_ne!(t, etag_of("\"s3-etag\"", 43));
    }
}
