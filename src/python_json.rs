//! JSON as Python's `json` module reads and writes it: strict JSON plus the bare tokens `NaN`,
//! `Infinity` and `-Infinity` for non-finite floats. zarr-python (2 and 3) writes attributes
//! with them, kerchunk and VirtualiZarr write them into references, and every Zarr reader
//! accepts them; serde_json does neither.
//!
//! [`parse`] gives a `serde_json::Value` in which such a number is a reserved string (a NUL
//! and the token, which a document can only hold as an escape, and which [`parse`] refuses in
//! the input); [`non_finite`] and [`as_f64`] read it, [`to_vec`] and [`to_vec_pretty`] write
//! it back as the bare token. Every other value is serde_json's own, byte for byte.
//!
//! Used for the Zarr documents the mount reads and the ones its views write; a document
//! written with plain serde_json would show the reserved strings.

use std::fmt;

use memchr::{memchr2, memchr3, memmem};
use serde_json::Value;

/// Python's bare tokens and the reserved string each stands for in a parsed [`Value`].
const TOKENS: [(&str, &str, f64); 3] = [
    ("NaN", "\0NaN", f64::NAN),
    ("Infinity", "\0Infinity", f64::INFINITY),
    ("-Infinity", "\0-Infinity", f64::NEG_INFINITY),
];

/// How serde_json writes a reserved string's first character: the only spelling of a NUL in
/// a JSON string (a raw one is invalid), so a cheap test for a reserved string in a text.
const NUL_ESCAPE: &[u8] = b"\\u0000";

/// A reserved string as a JSON literal is this much longer than the bare token.
const LITERAL_EXTRA: usize = NUL_ESCAPE.len() + 2;

/// A document that is not JSON as Python reads it, with the position in the original text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error(e.to_string())
    }
}

/// Parse a document; bare `NaN`, `Infinity` and `-Infinity` (case as written, nothing else)
/// become values that [`non_finite`] reads.
pub fn parse(doc: &[u8]) -> Result<Value, Error> {
    let tokens = bare_tokens(doc)?;
    if tokens.is_empty() {
        return Ok(serde_json::from_slice(doc)?);
    }
    let text = with_literals(doc, &tokens);
    let value: Value =
        serde_json::from_slice(&text).map_err(|e| mapped(&e, doc, &text, &tokens))?;
    if let Some(token) = token_key(&value) {
        return Err(Error(format!("{token} where an object key belongs")));
    }
    Ok(value)
}

/// [`parse`] for a document that must stay small in memory: one of more than `max_containers`
/// objects and arrays is refused before anything is parsed. A parsed object costs several
/// hundred bytes however short its text (`{"a":0}` is 7 bytes), so the text's length alone
/// bounds nothing.
pub fn parse_bounded(doc: &[u8], max_containers: usize) -> Result<Value, Error> {
    let mut count = 0usize;
    let mut i = 0;
    while let Some(at) = memchr3(b'"', b'{', b'[', &doc[i..]) {
        let at = i + at;
        if doc[at] == b'"' {
            let Some(end) = string_end(doc, at) else { break }; // unterminated: serde says so
            i = end;
            continue;
        }
        count += 1;
        if count > max_containers {
            return Err(Error(format!(
                "more than {max_containers} JSON objects and arrays (the limit for a metadata document)"
            )));
        }
        i = at + 1;
    }
    parse(doc)
}

/// The value of a non-finite number that [`parse`] read, `None` for anything else.
pub fn non_finite(v: &Value) -> Option<f64> {
    let Value::String(s) = v else { return None };
    TOKENS.iter().find(|(_, reserved, _)| reserved == s).map(|&(_, _, x)| x)
}

/// A number as f64, non-finite ones included.
pub fn as_f64(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| non_finite(v))
}

/// serde_json's compact form, non-finite numbers as Python's bare tokens.
pub fn to_vec(v: &Value) -> Vec<u8> {
    with_bare_tokens(serde_json::to_vec(v).expect("a Value serializes"))
}

/// serde_json's pretty form (2-space indent, as Python's `indent=2` too), non-finite numbers
/// as Python's bare tokens.
pub fn to_vec_pretty(v: &Value) -> Vec<u8> {
    with_bare_tokens(serde_json::to_vec_pretty(v).expect("a Value serializes"))
}

/// [`to_vec`] as a string, for messages.
pub fn to_string(v: &Value) -> String {
    String::from_utf8(to_vec(v)).expect("serde_json writes UTF-8")
}

/// A bare token found outside strings: its offset and index in [`TOKENS`].
type Found = (usize, usize);

/// The bare tokens of `doc` outside strings, in order. A string that is one of the reserved
/// ones is an error: it would read as a number.
fn bare_tokens(doc: &[u8]) -> Result<Vec<Found>, Error> {
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(at) = memchr3(b'"', b'N', b'I', &doc[i..]) {
        let at = i + at;
        match doc[at] {
            b'"' => {
                let Some(end) = string_end(doc, at) else { break }; // unterminated: serde says so
                if let Some(token) = reserved_string(&doc[at..end]) {
                    let (line, column) = position(doc, at + 1);
                    let literal = String::from_utf8_lossy(&doc[at..end]);
                    return Err(Error(format!(
                        "unsupported string {literal} (it stands for a bare {token}) at line {line} column {column}"
                    )));
                }
                i = end;
                continue;
            }
            _ => {
                let start = if at > 0 && doc[at - 1] == b'-' { at - 1 } else { at };
                let hit =
                    TOKENS.iter().position(|(t, _, _)| doc[start..].starts_with(t.as_bytes()));
                if let Some(k) = hit {
                    found.push((start, k));
                    i = start + TOKENS[k].0.len();
                    continue;
                }
            }
        }
        i = at + 1;
    }
    Ok(found)
}

/// The offset just past the string literal opening at `open`, `None` if it never closes.
fn string_end(text: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    loop {
        i += memchr2(b'"', b'\\', &text[i..])?;
        if text[i] == b'"' {
            return Some(i + 1);
        }
        i += 2; // an escape: the next byte never ends the string
        if i > text.len() {
            return None;
        }
    }
}

/// The token whose reserved string this string literal (quotes included) spells.
fn reserved_string(literal: &[u8]) -> Option<&'static str> {
    if !literal[1..].starts_with(NUL_ESCAPE) {
        return None;
    }
    let s = serde_json::from_slice::<String>(literal).ok()?;
    TOKENS.iter().find(|(_, reserved, _)| *reserved == s).map(|(t, _, _)| *t)
}

/// `doc` with each bare token replaced by its reserved string's literal.
fn with_literals(doc: &[u8], tokens: &[Found]) -> Vec<u8> {
    let mut out = Vec::with_capacity(doc.len() + tokens.len() * LITERAL_EXTRA);
    let mut from = 0;
    for &(at, k) in tokens {
        out.extend_from_slice(&doc[from..at]);
        out.push(b'"');
        out.extend_from_slice(NUL_ESCAPE);
        out.extend_from_slice(TOKENS[k].0.as_bytes());
        out.push(b'"');
        from = at + TOKENS[k].0.len();
    }
    out.extend_from_slice(&doc[from..]);
    out
}

/// A bare token used as an object key (the literal made it a valid key), anywhere in `v`.
fn token_key(v: &Value) -> Option<&'static str> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            TOKENS
                .iter()
                .find(|(_, reserved, _)| reserved == k)
                .map(|(t, _, _)| *t)
                .or_else(|| token_key(v))
        }),
        Value::Array(items) => items.iter().find_map(token_key),
        _ => None,
    }
}

/// serde_json's error in `text` (with literals) told at its place in `doc`.
fn mapped(e: &serde_json::Error, doc: &[u8], text: &[u8], tokens: &[Found]) -> Error {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let Some(what) = message.strip_suffix(&suffix) else { return Error(message) };
    // serde_json's place is just past the offending byte. Each literal before that byte moved
    // it by LITERAL_EXTRA; a byte inside a literal is told as the token's first.
    let end = line_start(text, e.line()) + e.column();
    let mut shift = 0;
    for &(start, k) in tokens {
        let literal_start = start + shift;
        if end <= literal_start {
            break;
        }
        if end < literal_start + TOKENS[k].0.len() + LITERAL_EXTRA {
            shift = end - (start + 1);
            break;
        }
        shift += LITERAL_EXTRA;
    }
    let (line, column) = position(doc, end - shift);
    Error(format!("{what} at line {line} column {column}"))
}

/// The offset of the first byte of 1-based line `line`.
fn line_start(text: &[u8], line: usize) -> usize {
    if line <= 1 {
        return 0;
    }
    memchr::memchr_iter(b'\n', text).nth(line - 2).map_or(text.len(), |nl| nl + 1)
}

/// serde_json's (line, column) of an offset: 1-based line, and the offset's distance in bytes
/// from the line's start (serde_json tells the offset just past the byte it means).
fn position(text: &[u8], at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let line = 1 + memchr::memchr_iter(b'\n', &text[..at]).count();
    (line, at - line_start(text, line))
}

/// serde_json's output with each reserved string (not a key) as its bare token.
fn with_bare_tokens(json: Vec<u8>) -> Vec<u8> {
    if memmem::find(&json, NUL_ESCAPE).is_none() {
        return json;
    }
    let mut out = Vec::with_capacity(json.len());
    let mut from = 0;
    let mut i = 0;
    while let Some(at) = memchr::memchr(b'"', &json[i..]) {
        let at = i + at;
        let end = string_end(&json, at).expect("serde_json closes its strings");
        let literal = &json[at..end];
        let is_key = json[end..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b':');
        let token = TOKENS.iter().find(|(t, _, _)| {
            literal.len() == t.len() + LITERAL_EXTRA
                && literal[1..].starts_with(NUL_ESCAPE)
                && &literal[1 + NUL_ESCAPE.len()..literal.len() - 1] == t.as_bytes()
        });
        if let (Some((t, _, _)), false) = (token, is_key) {
            out.extend_from_slice(&json[from..at]);
            out.extend_from_slice(t.as_bytes());
            from = end;
        }
        i = end;
    }
    out.extend_from_slice(&json[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_parse_counts_objects_and_arrays_outside_strings() {
        let doc = br#"{"a": [1, {"b": "{[{[{["}], "c": {}}"#; // 4 containers, 6 in a string
        assert!(parse_bounded(doc, 4).is_ok());
        let err = parse_bounded(doc, 3).unwrap_err().to_string();
        assert!(err.contains("more than 3 JSON objects and arrays"), "{err}");
        // An escaped quote does not end a string: the brackets after it are still inside.
        assert!(parse_bounded(br#"["\"[[[[", 1]"#, 1).is_ok());
        assert_eq!(parse_bounded(br#"["x", NaN]"#, 1).unwrap(), parse(br#"["x", NaN]"#).unwrap());
    }
    use proptest::prelude::*;
    use serde_json::json;

    /// A float as [`parse`] gives it.
    fn float(x: f64) -> Value {
        match TOKENS
            .iter()
            .find(|(_, _, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        {
            Some((_, reserved, _)) => Value::String(reserved.to_string()),
            None => json!(x),
        }
    }

    /// `json.dumps({"a": float("nan"), "b": [float("inf"), -float("inf")]})` and the same with
    /// `indent=2`, as Python 3.11 writes them.
    const PYTHON: &str = r#"{"a": NaN, "b": [Infinity, -Infinity]}"#;
    const PYTHON_INDENTED: &str =
        "{\n  \"a\": NaN,\n  \"b\": [\n    Infinity,\n    -Infinity\n  ]\n}";

    #[test]
    fn python_documents_round_trip() {
        for doc in [PYTHON, PYTHON_INDENTED] {
            let v = parse(doc.as_bytes()).unwrap();
            assert!(non_finite(&v["a"]).unwrap().is_nan());
            assert_eq!(non_finite(&v["b"][0]), Some(f64::INFINITY));
            assert_eq!(as_f64(&v["b"][1]), Some(f64::NEG_INFINITY));
            assert_eq!(to_vec(&v), br#"{"a":NaN,"b":[Infinity,-Infinity]}"#);
            assert_eq!(String::from_utf8(to_vec_pretty(&v)).unwrap(), PYTHON_INDENTED);
        }
        for (doc, want) in
            [("NaN", f64::NAN), ("Infinity", f64::INFINITY), ("-Infinity", -f64::INFINITY)]
        {
            let x = non_finite(&parse(doc.as_bytes()).unwrap()).unwrap();
            assert_eq!(x.to_bits(), want.to_bits(), "{doc}");
        }
    }

    #[test]
    fn tokens_inside_strings_stay_strings() {
        let doc = br#"{"NaN": "NaN", "t": "x NaN y", "u": "say \"NaN\" -Infinity", "v": "\\", "w": NaN, "Infinity": ["\"Infinity", "\\\"NaN"]}"#;
        let v = parse(doc).unwrap();
        assert_eq!(v["NaN"], json!("NaN"));
        assert_eq!(non_finite(&v["NaN"]), None);
        assert_eq!(v["t"], json!("x NaN y"));
        assert_eq!(v["u"], json!("say \"NaN\" -Infinity"));
        assert_eq!(v["v"], json!("\\"));
        assert!(non_finite(&v["w"]).unwrap().is_nan());
        assert_eq!(v["Infinity"], json!(["\"Infinity", "\\\"NaN"]));
        assert_eq!(parse(&to_vec(&v)).unwrap(), v);
    }

    #[test]
    fn strict_json_is_serde_json_byte_for_byte() {
        for doc in [
            r#"{"a\\": "b\\\"", "c": [1, 2.5, -0.0, 1e300, null, true, "\u0000x", "\u0000NaNx"]}"#,
            r#"[]"#,
            r#""Infinity""#,
            "{\"k\": {\"nested\": [[], {}]}, \"n\": -12}",
        ] {
            let v = parse(doc.as_bytes()).unwrap();
            assert_eq!(v, serde_json::from_str::<Value>(doc).unwrap(), "{doc}");
            assert_eq!(to_vec(&v), serde_json::to_vec(&v).unwrap(), "{doc}");
            assert_eq!(to_vec_pretty(&v), serde_json::to_vec_pretty(&v).unwrap(), "{doc}");
            assert_eq!(as_f64(&v), v.as_f64());
        }
    }

    /// Python accepts `NaN`, `Infinity` and `-Infinity` only, and only where a value belongs.
    #[test]
    fn malformed_documents_are_errors() {
        for doc in [
            "Nan",
            "nan",
            "NAN",
            "NaNx",
            "-NaN",
            "+NaN",
            "inf",
            "infinity",
            "+Infinity",
            "- Infinity",
            "--Infinity",
            "Infinit",
            "[NaN,]",
            "[NaN NaN]",
            "{NaN: 1}",
            r#"{"a": {Infinity: 1}}"#,
            r#"{"a": NaN"#,
            "[1, NaN",
            r#"["abc\"#,
            r#"["abc"#,
            "NaN NaN",
            "",
            "[Infinity]x",
        ] {
            assert!(parse(doc.as_bytes()).is_err(), "{doc}");
        }
    }

    /// An error names the place in the document as written: where serde_json puts it for the
    /// same document with a number of the same length in place of each token.
    #[test]
    fn errors_point_into_the_original_document() {
        for doc in [
            "[NaN 1]",
            "[NaN, Infinity, -Infinity x]",
            "{\n  \"a\": NaN,\n  \"b\": [Infinity, -Infinity}\n}",
            "[NaN, \"s\"\n, -Infinity,\n -Infinity\n NaN]",
            "[1, NaN",
            "NaNx",
            "[NaN, -Infinit]",
        ] {
            let same_length = doc
                .replace("-Infinity", "-12345678")
                .replace("Infinity", "12345678")
                .replace("NaN", "1.0");
            let want = serde_json::from_str::<Value>(&same_length).unwrap_err().to_string();
            assert_eq!(parse(doc.as_bytes()).unwrap_err().to_string(), want, "{doc}");
        }
        let e = parse(b"[NaN, -NaN]").unwrap_err().to_string();
        assert_eq!(e, "invalid number at line 1 column 8");
        let e = parse(br#"{"a": 1, NaN: 2}"#).unwrap_err().to_string();
        assert_eq!(e, "NaN where an object key belongs");
    }

    /// The strings that stand for the tokens cannot come from a document, escaped or not.
    #[test]
    fn reserved_strings_in_documents_are_refused() {
        for doc in
            [r#"["\u0000NaN"]"#, r#"{"a": "\u0000\u0049nfinity"}"#, r#"{"\u0000-Infinity": 1}"#]
        {
            let e = parse(doc.as_bytes()).unwrap_err().to_string();
            assert!(e.starts_with("unsupported string"), "{doc}: {e}");
        }
        assert_eq!(
            parse(b"[1,\n \"\\u0000NaN\"]").unwrap_err().to_string(),
            r#"unsupported string "\u0000NaN" (it stands for a bare NaN) at line 2 column 2"#
        );
        // Strings that merely start like them are strings.
        let v = parse(br#"["\u0000NaN ", "\u0000nan", NaN]"#).unwrap();
        assert_eq!(v[0], json!("\u{0}NaN "));
        assert_eq!(to_vec(&v), br#"["\u0000NaN ","\u0000nan",NaN]"#);
    }

    /// A reserved string a caller made a key of is written as a string: the output stays JSON.
    #[test]
    fn reserved_keys_are_written_as_strings() {
        let mut m = serde_json::Map::new();
        m.insert("\0NaN".into(), float(f64::NAN));
        let v = Value::Object(m);
        assert_eq!(to_vec(&v), br#"{"\u0000NaN":NaN}"#);
        assert_eq!(to_vec_pretty(&v), b"{\n  \"\\u0000NaN\": NaN\n}");
    }

    fn values() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<f64>().prop_map(float),
            prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)]
                .prop_map(float),
            "[\\PC\"\\\\]{0,6}|NaN|Infinity|-Infinity".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-zA-Z\"NaN ]{0,5}", inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever is written parses back to itself, compact and pretty, and is what
        /// Python's `json.loads` accepts (strict JSON but for the three tokens).
        #[test]
        fn written_values_parse_back(v in values()) {
            prop_assert_eq!(parse(&to_vec(&v)).unwrap(), v.clone());
            prop_assert_eq!(parse(&to_vec_pretty(&v)).unwrap(), v.clone());
        }
    }
}
