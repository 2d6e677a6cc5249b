//! The layering rule of `src/lib.rs`, checked on the source: no module imports from a layer
//! above its own, and the two leaves (`store`: bytes by key; `zarr`: the format, no I/O) know
//! nothing of each other. The shared pieces (clock, locks, metrics, caches, the JSON reader)
//! may be used by every layer and use only each other.
//! Test code (`#[cfg(test)]` modules and files) is exempt: a test may drive its module from above.

use std::path::{Path, PathBuf};

/// The layers a module may use besides its own and the shared pieces; `None` for a shared
/// piece (which may use only the other shared pieces).
fn may_use(module: &str) -> Option<&'static [&'static str]> {
    const ENTRY: &[&str] =
        &["cli", "mount", "serving", "daemon", "source", "fstab", "generated_docs", "main", "lib"];
    match module {
        "clock" | "locks" | "metrics" | "stats" | "flight_lru" | "ttl_cache" | "python_json"
        | "perms" => None,
        // The two leaves: bytes by key, and the format without I/O; neither knows the other.
        "store" | "zarr" => Some(&[]),
        // The read-ahead and prefetch policies: they ask the store to fetch what the format
        // says a reader wants next; the store's own layers keep only the fetching.
        "prefetch" => Some(&["zarr", "store"]),
        // Each view: its pure mapping and the namespace that serves it from the store.
        "views" => Some(&["prefetch", "zarr", "store"]),
        "fs" => Some(&["views", "prefetch", "zarr", "store"]),
        "fuse" => Some(&["fs", "views", "prefetch", "zarr", "store"]),
        // The second front door (HTTP), beside fuse: neither knows the other.
        "serve" => Some(&["fs", "views", "prefetch", "zarr", "store"]),
        m if ENTRY.contains(&m) => Some(&[
            "fuse", "serve", "fs", "views", "prefetch", "zarr", "store", "cli", "mount", "serving",
            "daemon", "source", "fstab",
        ]),
        other => panic!("src/{other}: a module the layering check does not know; give it a layer"),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The names of the files declared `#[cfg(test)] mod NAME;` in `text`.
fn test_only_files(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|w| w[0] == "#[cfg(test)]")
        .filter_map(|w| w[1].strip_prefix("mod ")?.strip_suffix(';').map(str::to_string))
        .collect()
}

/// `text` without its `#[cfg(test)] mod NAME { ... }` blocks (braces counted; the source keeps
/// braces inside strings balanced enough for this).
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let opens_test_block = line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| {
                let next = next.trim();
                next.starts_with("mod ") && next.ends_with('{')
            });
        if !opens_test_block {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let mut depth = 0i64;
        for inner in lines.by_ref() {
            depth += inner.matches('{').count() as i64 - inner.matches('}').count() as i64;
            if depth <= 0 {
                break;
            }
        }
    }
    out
}

/// Every `crate::MODULE` that `code` names.
fn crate_modules(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .filter(|(i, _)| !code[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, m)| {
            code[i + m.len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
        })
        .filter(|m: &String| !m.is_empty())
        .collect()
}

#[test]
fn no_module_imports_from_a_layer_it_may_not_use() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for file in &non_test_files(&src) {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        let code = without_test_modules(&std::fs::read_to_string(file).unwrap());
        for used in crate_modules(&code) {
            let used_is_shared = may_use(&used).is_none();
            let allowed = used == module
                || used_is_shared
                || may_use(&module).is_some_and(|layers| layers.contains(&used.as_str()));
            if !allowed {
                violations.push(format!("src/{}: uses crate::{used}", rel.display()));
            }
        }
    }
    violations.sort();
    violations.dedup();
    assert!(
        violations.is_empty(),
        "imports of a layer the module may not use:\n{}",
        violations.join("\n")
    );
}

/// The module path of a source file (`src/views/flat/mapping/npy.rs` -> views, flat, mapping,
/// npy; a `mod.rs` is its folder's module).
fn module_path(rel: &Path) -> Vec<String> {
    let mut path: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into())
        .collect();
    if path.last().is_some_and(|m| m == "mod") {
        path.pop();
    }
    path
}

/// Every path into the crate that `code` (the file of module `module`) names through
/// `crate::` or `super::`, as segments from the crate root (up to a brace or the last name).
fn crate_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        for (i, _) in code.match_indices(start) {
            let before = &code[..i];
            if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let segments: Vec<&str> = code[i..]
                .split("::")
                .map(|s| s.trim_start())
                .take_while(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
                .collect();
            let mut path: Vec<String> = Vec::new();
            let mut rest = &segments[..];
            if rest.first() == Some(&"crate") {
                rest = &rest[1..];
            } else {
                path = module.to_vec();
                while rest.first() == Some(&"super") {
                    path.pop();
                    rest = &rest[1..];
                }
            }
            path.extend(rest.iter().map(|s| s.to_string()));
            out.push(path);
        }
    }
    out
}

/// The pure half of a view (`mapping.rs`, or a file under a `mapping/` folder of
/// `src/views/`) does no I/O: it may use only `zarr`, the shared pieces and the other views'
/// mappings (`views::VIEW::mapping`), never a namespace, the store or prefetch.
fn pure_may_use(path: &[String]) -> bool {
    match path.first().map(String::as_str) {
        Some("zarr") => true,
        Some("views") => path.get(2).is_some_and(|m| m == "mapping"),
        Some(other) => may_use(other).is_none(),
        None => true,
    }
}

fn is_pure_half(module: &[String]) -> bool {
    module.first().is_some_and(|m| m == "views") && module.iter().any(|m| m == "mapping")
}

#[test]
fn the_pure_half_of_each_view_does_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join("views"), &mut files);
    files.sort();
    let mut checked = 0;
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let module = module_path(rel);
        if !is_pure_half(&module) {
            continue;
        }
        checked += 1;
        let code = without_test_modules(&std::fs::read_to_string(file).unwrap());
        for used in crate_paths(&code, &module) {
            if !pure_may_use(&used) {
                violations.push(format!("src/{}: uses {}", rel.display(), used.join("::")));
            }
        }
    }
    assert!(checked >= 20, "only {checked} files of pure mappings found under src/views");
    violations.sort();
    violations.dedup();
    assert!(violations.is_empty(), "a view's mapping does I/O:\n{}", violations.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let code = "use crate::store::Store;\nfn f() { crate::fs::x(); }\n#[cfg(test)]\nmod tests {\n    use crate::fuse::y;\n    fn g() { if true { } }\n}\nfn h() { crate::view::z(); }\n";
    assert_eq!(crate_modules(&without_test_modules(code)), ["store", "fs", "view"]);
    assert_eq!(test_only_files("#[cfg(test)]\nmod conditional_tests;\n"), ["conditional_tests"]);
}

#[test]
fn the_pure_check_resolves_super_and_crate_paths() {
    let module: Vec<String> = ["views", "raw", "mapping"].map(String::from).to_vec();
    let code = "use super::namespace::RawNamespace;\nuse crate::views::shared::mapping::node::Node;\nuse crate::zarr::x;\n";
    let paths = crate_paths(code, &module);
    let allowed: Vec<bool> = paths.iter().map(|p| pure_may_use(p)).collect();
    assert_eq!(paths[2], ["views", "raw", "namespace"]);
    assert_eq!(allowed, [true, true, false]);
    assert!(is_pure_half(&module_path(Path::new("views/flat/mapping/mod.rs"))));
    assert!(!is_pure_half(&module_path(Path::new("views/flat/namespace/mod.rs"))));
}

/// Files under `src/store/` whose format is a Zarr hierarchy of its own, so that their keys are
/// made from Zarr's names: an Icechunk repository (nodes and chunk indices, and the fetcher of
/// its virtual chunks) and kerchunk reference sets (`.zarray`, `.zmetadata` and chunk keys by
/// definition).
const ZARR_SHAPED_BACKENDS: &[&str] =
    &["backends/icechunk.rs", "backends/icechunk_http.rs", "backends/reference/"];

/// Zarr's metadata document names, as a store key's last segment or a part of one.
const ZARR_DOCUMENTS: &[&str] = &["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// Identifiers of the standard library and dependencies that say "chunk" of bytes, not of an
/// array.
const FOREIGN_CHUNK_NAMES: &[&str] =
    &["chunks", "chunks_mut", "chunks_exact", "new_with_chunk_size"];

/// What `code` (one file, test modules removed) names of Zarr: a metadata document or a
/// chunk key (`c`, `c/...`, `.../c/...`) in a string literal or in a comment's code span, an
/// identifier about chunks, shards or Zarr (the name of the Icechunk backend aside), or a path
/// into `crate::zarr`.
fn zarr_names(code: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut idents = String::new();
    for line in code.lines() {
        let (code_part, comment) = split_comment(line);
        let (literals, rest) = split_strings(code_part);
        idents.push_str(&rest);
        idents.push('\n');
        let spans = comment.split('`').skip(1).step_by(2).map(str::to_string);
        for name in literals.into_iter().chain(spans) {
            let lower = name.to_ascii_lowercase();
            let document = ZARR_DOCUMENTS.iter().any(|d| lower.contains(d));
            let chunk_key = name == "c" || name.starts_with("c/") || name.contains("/c/");
            if document || chunk_key {
                names.push(format!("{name:?}"));
            }
        }
    }
    for word in idents.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        let lower = word.to_ascii_lowercase().replace("icechunk", "");
        let zarr_word = ["chunk", "shard", "zarr"].iter().any(|w| lower.contains(w));
        if zarr_word && !FOREIGN_CHUNK_NAMES.contains(&word) {
            names.push(word.to_string());
        }
    }
    names.extend(
        crate_modules(&idents).into_iter().filter(|m| m == "zarr").map(|m| format!("crate::{m}")),
    );
    names
}

/// A line's code and its `//` comment (a `//` inside a string literal is code).
fn split_comment(line: &str) -> (&str, &str) {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '/' if !in_string && line[i + 1..].starts_with('/') => return (&line[..i], &line[i..]),
            _ => {}
        }
    }
    (line, "")
}

/// The contents of a line's string literals, and the line without them. (Raw strings spread
/// over lines are read as code; the store's hold no key names.)
fn split_strings(code: &str) -> (Vec<String>, String) {
    let (mut literals, mut rest) = (Vec::new(), String::new());
    let mut current: Option<String> = None;
    let mut chars = code.chars().peekable();
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        match (&mut current, c) {
            (Some(s), '\\') => {
                s.push(c);
                s.extend(chars.next());
            }
            (Some(_), '"') => literals.extend(current.take()),
            (Some(s), _) => s.push(c),
            // A char literal `'"'` is not the start of a string.
            (None, '"') if !(prev == '\'' && chars.peek() == Some(&'\'')) => {
                current = Some(String::new())
            }
            (None, _) => rest.push(c),
        }
        prev = c;
    }
    (literals, rest)
}

/// The store is a leaf that knows bytes by key: no file under `src/store/` names a Zarr
/// concept (see `zarr_names`), so a Zarr-aware policy (what a reader fetches next, which
/// names are documents) lives above it (`src/prefetch/`, `src/fs/`) and is handed down as
/// plain keys. Test code and the Zarr-shaped backends (`ZARR_SHAPED_BACKENDS`) are exempt.
#[test]
fn the_store_names_no_zarr_concept() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut violations = Vec::new();
    for file in &non_test_files(&root) {
        let rel = file.strip_prefix(&root).unwrap().to_string_lossy().to_string();
        if ZARR_SHAPED_BACKENDS.iter().any(|b| rel.starts_with(b)) {
            continue;
        }
        let code = without_test_modules(&std::fs::read_to_string(file).unwrap());
        for name in zarr_names(&code) {
            violations.push(format!("src/store/{rel}: {name}"));
        }
    }
    violations.dedup();
    assert!(violations.is_empty(), "Zarr named in the store layer:\n{}", violations.join("\n"));
}

/// The check sees what the disk cache once held: the guess of chunk directories ahead of a
/// reader, named in its comment, and document names, chunk identifiers and `crate::zarr` in
/// code; comments' prose, key rules and `chunks_mut` pass.
#[test]
fn the_zarr_check_sees_zarr_in_the_store() {
    let old = "    /// it (an array's `c/0/`, then `c/1/`, ...), each of which would cost it another round
    /// objects of: by number when the names are numbers (chunk coordinates, where `c/10`
    fn confirm_next_directories(self: &Arc<Self>, dir: &str) {
            match name.parse::<u64>() {\n";
    assert_eq!(zarr_names(old), [r#""c/0/""#, r#""c/1/""#, r#""c/10""#]);
    let code = "let k = join_key(dir, \"zarr.json\"); // a \"c/0\" in prose\nlet j = \".ZATTRS\";\nfn chunk_key() {}\nuse crate::zarr::x;\nlet p = \"a/c/1\"; let q = '\"'; let r = \"c\";\n";
    assert_eq!(
        zarr_names(code),
        [
            r#""zarr.json""#,
            r#"".ZATTRS""#,
            r#""a/c/1""#,
            r#""c""#,
            "chunk_key",
            "zarr",
            "crate::zarr"
        ]
    );
    let fine =
        "for p in out.chunks_mut(4) {} // cut in chunks, `a/b` `.json`\nlet s = \"abc/def\";\n";
    assert!(zarr_names(fine).is_empty(), "{:?}", zarr_names(fine));
}

/// The `.rs` files below `dir`, in order, less those declared `#[cfg(test)] mod NAME;`.
fn non_test_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    let mut exempt: Vec<PathBuf> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let parent = if file.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs") {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        exempt.extend(test_only_files(&text).iter().map(|m| parent.join(format!("{m}.rs"))));
    }
    files.retain(|f| !exempt.contains(f));
    files
}
