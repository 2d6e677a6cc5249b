//! Text inside HTML or XML (a directory page, an OME-XML attribute): the five markup characters
//! as entities, and control and non-ASCII characters as numeric references, so the document
//! stays ASCII whatever names a store holds.

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => out.push_str(&format!("&#{};", c as u32)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn markup_characters_and_non_ascii_become_references() {
        assert_eq!(super::escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&#39;");
        assert_eq!(super::escape("µm\u{7}x"), "&#181;m&#7;x");
    }
}
