//! The template language of kerchunk references (version 1): `{{ expr }}` placeholders in
//! `templates`, in reference URLs and in the `key`, `url`, `offset` and `length` of `gen`
//! entries. fsspec renders them with jinja2; the references kerchunk and VirtualiZarr write use
//! only names and integer arithmetic, which is what this evaluator accepts: integers, quoted
//! strings, names, `+ - * // %`, `~` (concatenation) and parentheses, with jinja2's
//! precedence (`~` between `+ -` and `* // %`). Whatever jinja2 would render differently is
//! refused with a message, never rendered: `/` (jinja2's true division gives `2.0`), filters,
//! calls, `{% %}` and `{# #}`, whitespace control (`{{-`), escapes in strings, the literals
//! `true`/`none`..., integers with leading zeros or `_`, undefined names (jinja2: empty) and
//! line breaks (jinja2 drops a trailing one). testdata/jinja_cases.json holds what jinja2
//! renders for a set of templates (scripts/gen_jinja_cases.py); the tests compare.

use std::collections::HashMap;

/// A value in a template expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    Int(i64),
    Str(String),
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Int(i) => write!(f, "{i}"),
            Val::Str(s) => f.write_str(s),
        }
    }
}

/// Names a template may use. Lookups go to `local` first (the `gen` dimensions), then `global`
/// (the `templates`).
pub struct Scope<'a> {
    pub global: &'a HashMap<String, String>,
    pub local: &'a [(String, i64)],
}

impl Scope<'_> {
    fn get(&self, name: &str) -> Option<Val> {
        if let Some((_, v)) = self.local.iter().find(|(n, _)| n == name) {
            return Some(Val::Int(*v));
        }
        self.global.get(name).map(|s| Val::Str(s.clone()))
    }
}

/// Render `text`, replacing every `{{ expr }}` by its value.
pub fn render(text: &str, scope: &Scope<'_>) -> Result<String, String> {
    for (what, name) in [("{%", "statements ({% %})"), ("{#", "comments ({# #})")] {
        if text.contains(what) {
            return Err(format!("template {text:?}: jinja {name} are not supported"));
        }
    }
    if text.contains(['\n', '\r']) {
        return Err(format!("template {text:?}: line breaks are not supported"));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or_else(|| format!("unclosed '{{{{' in {text:?}"))?;
        let expr = &after[..close];
        if expr.starts_with(['-', '+']) || expr.ends_with(['-', '+']) {
            return Err(format!("template {text:?}: whitespace control is not supported"));
        }
        let v = eval(expr, scope).map_err(|e| format!("template {text:?}: {e}"))?;
        out.push_str(&v.to_string());
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Str(String),
    Name(String),
    Op(&'static str),
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let digits = &s[start..i];
            // jinja2 refuses `010`, reads `00` as 0 and `1_000` as 1000: none of them here.
            if digits.len() > 1 && digits.starts_with('0') {
                return Err(format!("integer {digits:?} with a leading zero"));
            }
            if b.get(i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.') {
                return Err(format!("unsupported number after {digits:?}"));
            }
            let n = digits.parse().map_err(|_| format!("integer {digits:?} too large"))?;
            toks.push(Tok::Int(n));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let name = &s[start..i];
            // jinja2's literals, not names.
            if ["true", "false", "none", "True", "False", "None"].contains(&name) {
                return Err(format!("the literal {name} is not supported"));
            }
            toks.push(Tok::Name(name.to_string()));
        } else if c == b'\'' || c == b'"' {
            let end = s[i + 1..].find(c as char).ok_or("unterminated string")? + i + 1;
            if s[i + 1..end].contains('\\') {
                return Err("escapes in strings are not supported".into());
            }
            toks.push(Tok::Str(s[i + 1..end].to_string()));
            i = end + 1;
        } else if s[i..].starts_with("//") {
            toks.push(Tok::Op("//"));
            i += 2;
        } else {
            let op = match c {
                b'+' => "+",
                b'-' => "-",
                b'*' => "*",
                b'/' => return Err("'/' (jinja2 divides into a float) is not supported".into()),
                b'%' => "%",
                b'~' => "~",
                b'(' => "(",
                b')' => ")",
                _ => return Err(format!("unsupported character {:?}", c as char)),
            };
            toks.push(Tok::Op(op));
            i += 1;
        }
    }
    Ok(toks)
}

struct Parser<'a, 'b> {
    toks: Vec<Tok>,
    at: usize,
    scope: &'a Scope<'b>,
}

fn eval(expr: &str, scope: &Scope<'_>) -> Result<Val, String> {
    let mut p = Parser { toks: lex(expr)?, at: 0, scope };
    let v = p.add()?;
    if p.at != p.toks.len() {
        return Err(format!("unexpected {:?}", p.toks[p.at]));
    }
    Ok(v)
}

impl Parser<'_, '_> {
    fn peek_op(&self, ops: &[&'static str]) -> Option<&'static str> {
        match self.toks.get(self.at) {
            Some(Tok::Op(o)) if ops.contains(o) => Some(o),
            _ => None,
        }
    }

    fn concat(&mut self) -> Result<Val, String> {
        let mut v = self.mul()?;
        while self.peek_op(&["~"]).is_some() {
            self.at += 1;
            let r = self.mul()?;
            v = Val::Str(format!("{v}{r}"));
        }
        Ok(v)
    }

    fn add(&mut self) -> Result<Val, String> {
        let mut v = self.concat()?;
        while let Some(op) = self.peek_op(&["+", "-"]) {
            self.at += 1;
            let r = self.concat()?;
            v = match (op, v, r) {
                ("+", Val::Str(a), Val::Str(b)) => Val::Str(a + &b),
                (op, Val::Int(a), Val::Int(b)) => Val::Int(
                    if op == "+" { a.checked_add(b) } else { a.checked_sub(b) }
                        .ok_or("integer overflow")?,
                ),
                (op, a, b) => return Err(format!("cannot compute {a:?} {op} {b:?}")),
            };
        }
        Ok(v)
    }

    fn mul(&mut self) -> Result<Val, String> {
        let mut v = self.unary()?;
        while let Some(op) = self.peek_op(&["*", "//", "%"]) {
            self.at += 1;
            let r = self.unary()?;
            let (Val::Int(a), Val::Int(b)) = (&v, &r) else {
                return Err(format!("cannot compute {v:?} {op} {r:?}"));
            };
            let (a, b) = (*a, *b);
            if b == 0 && op != "*" {
                return Err("division by zero".into());
            }
            v = Val::Int(match op {
                "*" => a.checked_mul(b).ok_or("integer overflow")?,
                "//" => floor_div(a, b).ok_or("integer overflow")?,
                // `%`: Python's modulo takes the sign of the divisor.
                _ => floor_div(a, b)
                    .and_then(|q| b.checked_mul(q))
                    .and_then(|m| a.checked_sub(m))
                    .ok_or("integer overflow")?,
            });
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<Val, String> {
        if self.peek_op(&["-"]).is_some() {
            self.at += 1;
            return match self.unary()? {
                Val::Int(i) => Ok(Val::Int(i.checked_neg().ok_or("integer overflow")?)),
                v => Err(format!("cannot negate {v:?}")),
            };
        }
        let tok = self.toks.get(self.at).cloned().ok_or("expression ends too early")?;
        self.at += 1;
        match tok {
            Tok::Int(i) => Ok(Val::Int(i)),
            Tok::Str(s) => Ok(Val::Str(s)),
            Tok::Name(n) => self.scope.get(&n).ok_or_else(|| format!("unknown name {n:?}")),
            Tok::Op("(") => {
                let v = self.add()?;
                if self.peek_op(&[")"]).is_none() {
                    return Err("missing ')'".into());
                }
                self.at += 1;
                Ok(v)
            }
            Tok::Op(o) => Err(format!("unexpected {o:?}")),
        }
    }
}

/// Python's `//` (rounds toward negative infinity); `None` on overflow.
fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div_euclid(b)?;
    // div_euclid keeps the remainder >= 0, which rounds up for a negative divisor.
    Some(if b < 0 && a.rem_euclid(b) != 0 { q - 1 } else { q })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str, local: &[(&str, i64)]) -> Result<String, String> {
        let global: HashMap<String, String> =
            [("u".to_string(), "s3://b/f".to_string())].into_iter().collect();
        let local: Vec<(String, i64)> = local.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        render(text, &Scope { global: &global, local: &local })
    }

    #[test]
    fn renders_what_kerchunk_writes() {
        assert_eq!(r("{{u}}", &[]).unwrap(), "s3://b/f");
        assert_eq!(r("{{ u }}_{{i}}.nc", &[("i", 3)]).unwrap(), "s3://b/f_3.nc");
        assert_eq!(r("{{(i + 1) * 1000}}", &[("i", 4)]).unwrap(), "5000");
        assert_eq!(r("k{{i // 2}}.{{i % 2}}", &[("i", 5)]).unwrap(), "k2.1");
        assert_eq!(r("{{ 10 // 5 - -1 }}", &[]).unwrap(), "3");
        assert_eq!(r("{{ u ~ '.' ~ i }}", &[("i", 7)]).unwrap(), "s3://b/f.7");
        assert_eq!(r("{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -2 }}", &[]).unwrap(), "-4 1 -1");
        assert_eq!(r("no placeholders", &[]).unwrap(), "no placeholders");
    }

    #[test]
    fn refuses_what_it_cannot_render_exactly() {
        for bad in [
            "{{ u | upper }}",
            "{{ f(c=1) }}",
            "{{ 1 / 3 }}",
            "{{ 1 // 0 }}",
            "{{ nope }}",
            "{{ (1 }}",
            "{{ 1",
            "{% for x in y %}",
            "{{ u * 2 }}",
            "{{ 99999999999999999999 }}",
        ] {
            assert!(r(bad, &[]).is_err(), "{bad:?} rendered");
        }
    }

    /// jinja2's text for each template in testdata/jinja_cases.json (written by
    /// scripts/gen_jinja_cases.py with the real jinja2): ours is the same text or a refusal.
    #[test]
    fn renders_what_jinja2_renders_or_refuses() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("testdata/jinja_cases.json")).unwrap();
        let mut global = HashMap::new();
        let mut local = Vec::new();
        for (name, v) in doc["names"].as_object().unwrap() {
            match v.as_i64() {
                Some(n) => local.push((name.clone(), n)),
                None => {
                    global.insert(name.clone(), v.as_str().unwrap().to_string());
                }
            }
        }
        let scope = Scope { global: &global, local: &local };
        let mut rendered = 0;
        for case in doc["cases"].as_array().unwrap() {
            let text = case["template"].as_str().unwrap();
            match (render(text, &scope), case["jinja2"].as_str()) {
                (Ok(ours), Some(theirs)) => {
                    assert_eq!(ours, theirs, "{text:?}");
                    rendered += 1;
                }
                (Ok(ours), None) => panic!("{text:?}: rendered {ours:?}, jinja2 refuses it"),
                (Err(_), _) => {}
            }
        }
        // The templates kerchunk and VirtualiZarr write all render.
        assert!(rendered >= 18, "only {rendered} templates rendered");
    }
}
