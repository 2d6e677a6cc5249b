//! Who may read, and what browsers are told: the bearer token (`--token-file`) and CORS
//! (`--cors-origin`). CORS is off unless asked for; a preflight (`OPTIONS`) needs no token,
//! since browsers send it without one.

use hyper::header::{self, HeaderMap, HeaderValue};

/// Which origins a browser may read from (`--cors-origin`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Cors {
    #[default]
    Off,
    /// `--cors-origin '*'`.
    Any,
    /// These origins exactly (`https://viewer.example.org`).
    Origins(Vec<String>),
}

/// The headers a browser script may read from a response.
const EXPOSED: &str = "Content-Range, Content-Length, ETag, Accept-Ranges, Last-Modified";
/// The request headers a browser script may send (Authorization is never covered by `*`).
const ALLOWED_HEADERS: &str =
    "Authorization, Range, If-None-Match, If-Modified-Since, If-Range, If-Match, Accept";
/// How long a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE: &str = "600";

#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The bearer token every request but a preflight must carry, if any.
    pub token: Option<String>,
    pub cors: Cors,
}

impl Access {
    /// Whether the request carries the token (always, without one).
    pub fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else { return true };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        given.is_some_and(|g| same_secret(g.as_bytes(), token.as_bytes()))
    }

    /// The `Access-Control-Allow-Origin` value for the request's `Origin`, if it may read.
    fn allowed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        match &self.cors {
            Cors::Off => None,
            Cors::Any => Some(HeaderValue::from_static("*")),
            Cors::Origins(list) => {
                let o = origin.to_str().ok()?;
                list.iter().any(|allowed| allowed == o).then(|| origin.clone())
            }
        }
    }

    /// CORS headers of an ordinary response to a request with these headers.
    pub fn add_cors(&self, request: &HeaderMap, response: &mut HeaderMap) {
        if self.cors == Cors::Off {
            return;
        }
        // The answer depends on the Origin: caches must key on it.
        response.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = self.allowed_origin(request) {
            response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            response
                .insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSED));
        }
    }

    /// The headers of the answer to a preflight (`OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method`); without an allowed origin, none, so the browser
    /// refuses the request.
    pub fn add_preflight(&self, request: &HeaderMap, response: &mut HeaderMap) {
        self.add_cors(request, response);
        if self.allowed_origin(request).is_none() {
            return;
        }
        response.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, HEAD, OPTIONS"),
        );
        response.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        response
            .insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(PREFLIGHT_MAX_AGE));
    }
}

/// A comparison whose time does not depend on where the two differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn bearer_tokens() {
        let open = Access::default();
        assert!(open.authorized(&headers(&[])));
        let locked = Access { token: Some("s3cret".into()), cors: Cors::Off };
        assert!(!locked.authorized(&headers(&[])));
        assert!(!locked.authorized(&headers(&[(header::AUTHORIZATION, "Bearer wrong")])));
        assert!(!locked.authorized(&headers(&[(header::AUTHORIZATION, "Bearer s3cre")])));
        assert!(!locked.authorized(&headers(&[(header::AUTHORIZATION, "Basic s3cret")])));
        assert!(locked.authorized(&headers(&[(header::AUTHORIZATION, "Bearer s3cret")])));
    }

    #[test]
    fn cors_only_for_allowed_origins() {
        let origin = |o| headers(&[(header::ORIGIN, o)]);
        let mut out = HeaderMap::new();
        Access::default().add_cors(&origin("https://a.example"), &mut out);
        assert!(out.is_empty(), "CORS is off by default");

        let some = Access { token: None, cors: Cors::Origins(vec!["https://a.example".into()]) };
        let mut out = HeaderMap::new();
        some.add_cors(&origin("https://a.example"), &mut out);
        assert_eq!(out[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://a.example");
        assert!(out[header::ACCESS_CONTROL_EXPOSE_HEADERS]
            .to_str()
            .unwrap()
            .contains("Content-Range"));
        let mut out = HeaderMap::new();
        some.add_preflight(&origin("https://b.example"), &mut out);
        assert!(out.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
        assert!(out.get(header::ACCESS_CONTROL_ALLOW_METHODS).is_none());

        let any = Access { token: None, cors: Cors::Any };
        let mut out = HeaderMap::new();
        any.add_preflight(&origin("https://b.example"), &mut out);
        assert_eq!(out[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert!(out[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap().contains("Range"));
    }
}
