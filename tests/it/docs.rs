//! The documentation checked against the code, so that it cannot drift: every flag of
//! `zarr-mount --help` is in the flag tables of docs/CONFIGURATION.md and every option of
//! `src/fstab.rs` in its fstab table; the relative links (and anchors) of README.md,
//! BENCHMARKS.md and docs/ resolve; every path docs/ARCHITECTURE.md names exists and every
//! source file is named there; `zarr-mount` command lines and fstab lines in the docs parse;
//! the user docs carry no dates of work.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;
use zarr_mount::fstab;

use crate::common::BIN;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md, BENCHMARKS.md and every page of docs/, as paths relative to the repository.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string(), "BENCHMARKS.md".to_string()];
    let mut pages: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The lines of `md` outside fenced code blocks, with their text.
fn prose_lines(md: &str) -> Vec<&str> {
    let mut fenced = false;
    md.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The lines inside fenced code blocks, with lines continued by a trailing `\` joined.
fn code_lines(md: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            continue;
        }
        match line.trim_end().strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => out.push(std::mem::take(&mut pending) + line),
        }
    }
    out
}

/// The text of the section under the heading `title` (any level), up to the next heading of
/// the same or a higher level.
fn section(md: &str, title: &str) -> String {
    let lines = prose_lines(md);
    let level = |l: &str| l.chars().take_while(|&c| c == '#').count();
    let start = lines
        .iter()
        .position(|l| level(l) > 0 && l[level(l)..].trim() == title)
        .unwrap_or_else(|| panic!("no heading {title:?}"));
    let depth = level(lines[start]);
    lines[start + 1..]
        .iter()
        .take_while(|l| !(level(l) > 0 && level(l) <= depth))
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cells of each table row (header rows included, separator rows left out).
fn table_rows(md: &str) -> Vec<Vec<String>> {
    md.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| ---"))
        .map(|l| split_cells(l.trim_matches('|')))
        .collect()
}

/// Cells split on `|`, except `\|` and `|` inside a code span.
fn split_cells(row: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut in_code = false;
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().unwrap().push('|');
                chars.next();
            }
            '`' => {
                in_code = !in_code;
                cells.last_mut().unwrap().push(c);
            }
            '|' if !in_code => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The code spans of a piece of prose.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Command-line flags in a text: `-x` and `--long-name` tokens.
fn flags_in(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i] == b'-' && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric());
        if !starts || (i > 0 && bytes[i - 1] == b'-') {
            i += 1;
            continue;
        }
        let dashes = if bytes.get(i + 1) == Some(&b'-') { 2 } else { 1 };
        let name_start = i + dashes;
        let mut end = name_start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'-') {
            end += 1;
        }
        let name_ok = end > name_start && bytes[name_start].is_ascii_alphabetic();
        if name_ok && (dashes == 2 || end == name_start + 1) {
            out.push(text[i..end].to_string());
        }
        i = end.max(i + 1);
    }
    out
}

/// The flags `zarr-mount --help` lists: the option lines (indented by 2 or 6 spaces, where
/// descriptions are indented by 10).
fn help_flags() -> BTreeSet<String> {
    let out = Command::new(BIN).arg("--help").output().expect("zarr-mount --help");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    help.lines()
        .filter(|l| {
            let indent = l.len() - l.trim_start().len();
            indent <= 6 && l.trim_start().starts_with('-')
        })
        .flat_map(|l| flags_in(l.split('<').next().unwrap()))
        .collect()
}

/// Every name zarr-mount accepts for a flag: the long and short names and their aliases.
fn accepted_flags() -> BTreeSet<String> {
    flags_of(zarr_mount::cli::Args::command())
}

/// Every name `zarr-mount serve` accepts for a flag (the hidden mount-only ones, which it
/// refuses, left out).
fn serve_flags() -> BTreeSet<String> {
    let mut cmd = zarr_mount::cli::serve::command();
    cmd.build();
    let hidden: Vec<String> = cmd
        .get_arguments()
        .filter(|a| a.is_hide_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let mut names = flags_of(cmd);
    names.retain(|n| !hidden.contains(n) || n == "--read-only");
    names
}

fn flags_of(mut cmd: clap::Command) -> BTreeSet<String> {
    cmd.build();
    let mut names = BTreeSet::new();
    for arg in cmd.get_arguments() {
        names.extend(arg.get_short().map(|c| format!("-{c}")));
        names.extend(arg.get_long().map(|l| format!("--{l}")));
        for alias in arg.get_all_aliases().unwrap_or_default() {
            names.insert(format!("--{alias}"));
        }
        for alias in arg.get_all_short_aliases().unwrap_or_default() {
            names.insert(format!("-{alias}"));
        }
    }
    // Handled before clap parses (src/generated_docs.rs), for the installers.
    names.insert(zarr_mount::generated_docs::FLAG.to_string());
    names
}

#[test]
fn every_help_flag_is_in_the_flag_tables_of_configuration() {
    let flags = section(&read("docs/CONFIGURATION.md"), "Flags");
    let documented: BTreeSet<String> =
        table_rows(&flags).iter().flat_map(|row| flags_in(&row[0])).collect();
    let help = help_flags();
    assert!(help.len() > 30, "too few flags parsed from --help: {help:?}");
    let missing: Vec<_> = help.difference(&documented).collect();
    assert!(missing.is_empty(), "flags of --help missing from docs/CONFIGURATION.md: {missing:?}");
    let accepted = accepted_flags();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        unknown.is_empty(),
        "docs/CONFIGURATION.md documents flags zarr-mount lacks: {unknown:?}"
    );
}

/// `zarr-mount serve --help` and the flag table of docs/SERVING.md agree both ways (its own
/// flags; the mount's shared flags are CONFIGURATION's).
#[test]
fn every_serve_flag_is_in_the_flag_table_of_serving() {
    let table = section(&read("docs/SERVING.md"), "Flags");
    let documented: BTreeSet<String> =
        table_rows(&table).iter().flat_map(|row| flags_in(&row[0])).collect();
    let own: BTreeSet<String> = serve_flags().difference(&accepted_flags()).cloned().collect();
    assert!(own.len() >= 9, "too few serve flags: {own:?}");
    let missing: Vec<_> = own.difference(&documented).collect();
    assert!(missing.is_empty(), "serve flags missing from docs/SERVING.md: {missing:?}");
    let accepted = serve_flags();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(unknown.is_empty(), "docs/SERVING.md documents flags serve lacks: {unknown:?}");
}

#[test]
fn every_fstab_option_is_in_the_fstab_table() {
    let table = table_rows(&section(&read("docs/CONFIGURATION.md"), "fstab options"));
    // Option (with its `=` when it takes a value) -> the "becomes" cell of its row.
    let mut rows: HashMap<String, String> = HashMap::new();
    for row in table.iter().skip(1).filter(|r| !r[0].starts_with("any other")) {
        for span in code_spans(&row[0]) {
            rows.insert(span.to_string(), row.get(1).cloned().unwrap_or_default());
        }
    }
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    wanted.extend(fstab::SWITCHES.iter().map(|(name, _)| name.to_string()));
    wanted.extend(fstab::DROPPED.iter().map(|name| name.to_string()));
    wanted.extend(fstab::VALUE_FLAGS.iter().map(|key| format!("{key}=")));
    wanted.extend(fstab::DROPPED_KEYS.iter().map(|key| format!("{key}=")));
    wanted.insert(format!("{}*", fstab::DROPPED_PREFIX));
    let documented: BTreeSet<String> = rows
        .keys()
        .filter(|k| !k.starts_with(fstab::DROPPED_PREFIX) || k.ends_with('*'))
        .cloned()
        .collect();
    let missing: Vec<_> = wanted.difference(&documented).collect();
    assert!(missing.is_empty(), "fstab options missing from docs/CONFIGURATION.md: {missing:?}");
    let unknown: Vec<_> = documented.difference(&wanted).collect();
    assert!(
        unknown.is_empty(),
        "docs/CONFIGURATION.md lists fstab options src/fstab.rs lacks: {unknown:?}"
    );
    for key in fstab::VALUE_FLAGS {
        let flag = format!("--{}", key.replace('_', "-"));
        let becomes = &rows[&format!("{key}=")];
        assert!(
            becomes.contains(&format!("`{flag}`")),
            "{key}= becomes {flag}, the table says {becomes:?}"
        );
    }
    for (name, flags) in fstab::SWITCHES {
        let becomes = &rows[*name];
        for flag in *flags {
            assert!(
                becomes.contains(&format!("`{flag}`")),
                "{name} becomes {flag}, the table says {becomes:?}"
            );
        }
    }
}

/// The anchor GitHub gives a heading: lowercase, punctuation other than `-` and `_` dropped,
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(md) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` of a markdown file's prose.
fn link_targets(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(md) {
        // Code spans hold no links.
        let prose: String =
            line.split('`').enumerate().filter(|(i, _)| i % 2 == 0).map(|(_, s)| s).collect();
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn relative_links_and_their_anchors_resolve() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let dir = Path::new(&file).parent().unwrap().to_path_buf();
        for target in link_targets(&read(&file)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let rel: PathBuf = if path.is_empty() { PathBuf::from(&file) } else { dir.join(path) };
            let full = repo().join(&rel);
            if !full.exists() {
                broken.push(format!("{file}: {target} (no {})", rel.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let md = std::fs::read_to_string(&full).unwrap_or_default();
                if !anchors(&md).contains(anchor) {
                    broken.push(format!("{file}: {target} (no heading #{anchor})"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A code span that names a file or directory of the repository.
fn names_a_path(span: &str) -> bool {
    const TOP: [&str; 8] =
        ["src/", "tests/", "scripts/", "fuzz/", "systemd/", "examples/", "docs/", ".ci/"];
    !span.contains(' ') && TOP.iter().any(|t| span.starts_with(t))
}

#[test]
fn every_path_architecture_names_exists_and_every_source_file_is_named() {
    let text = read("docs/ARCHITECTURE.md");
    let named: BTreeSet<String> = prose_lines(&text)
        .into_iter()
        .flat_map(code_spans)
        .filter(|s| names_a_path(s))
        .map(str::to_string)
        .collect();
    assert!(named.len() > 80, "only {} paths found in docs/ARCHITECTURE.md", named.len());
    let missing: Vec<_> = named.iter().filter(|p| !repo().join(p).exists()).collect();
    assert!(missing.is_empty(), "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}");

    let mut unnamed = Vec::new();
    let mut dirs = vec![repo().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(repo()).unwrap().to_string_lossy().into_owned();
            if !named.contains(&rel) {
                unnamed.push(rel);
            }
        }
    }
    unnamed.sort();
    assert!(unnamed.is_empty(), "source files docs/ARCHITECTURE.md does not name: {unnamed:?}");
}

#[test]
fn paths_in_cargo_toml_comments_exist() {
    let text = read("Cargo.toml");
    let paths: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(|c: char| c.is_whitespace() || "(),;".contains(c)))
        .map(|w| w.trim_end_matches([':', '.']))
        .filter(|w| w.starts_with("src/") || w.starts_with("fuzz/"))
        .collect();
    assert!(!paths.is_empty());
    let missing: Vec<_> = paths.iter().filter(|p| !repo().join(p).exists()).collect();
    assert!(missing.is_empty(), "Cargo.toml comments name paths that do not exist: {missing:?}");
}

/// The tokens of a command line after leading `VAR=value` assignments and `sudo`.
fn command_words(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .skip_while(|w| *w == "sudo" || (w.contains('=') && !w.starts_with('-')))
        .collect()
}

#[test]
fn command_lines_and_fstab_lines_in_the_docs_parse() {
    let accepted = accepted_flags();
    let served = serve_flags();
    let mut bad = Vec::new();
    let (mut commands, mut fstab_lines) = (0, 0);
    for file in doc_files() {
        let md = read(&file);
        let spans = prose_lines(&md).into_iter().flat_map(code_spans).map(str::to_string);
        for line in code_lines(&md).into_iter().chain(spans) {
            let words = command_words(&line);
            if words.first() == Some(&"zarr-mount") {
                commands += 1;
                let comment = words.iter().position(|w| w.starts_with('#')).unwrap_or(words.len());
                let serve = words.get(1) == Some(&"serve");
                let known = if serve { &served } else { &accepted };
                for word in &words[1..comment] {
                    let flag = word.split('=').next().unwrap();
                    if flags_in(flag).first().map(String::as_str) == Some(flag)
                        && !known.contains(flag)
                    {
                        bad.push(format!("{file}: {flag} in `{}`", line.trim()));
                    }
                }
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() >= 4 && fields[2] == "fuse.zarr-mount" {
                fstab_lines += 1;
                if let Err(e) = fstab::to_args(fields[3]) {
                    bad.push(format!("{file}: fstab options {:?}: {e}", fields[3]));
                }
            }
        }
    }
    assert!(
        commands > 15 && fstab_lines > 3,
        "{commands} commands, {fstab_lines} fstab lines found"
    );
    assert!(
        bad.is_empty(),
        "command lines the docs show that zarr-mount refuses:\n{}",
        bad.join("\n")
    );
}

#[test]
fn user_docs_carry_no_dates_of_work() {
    let is_date = |w: &[u8]| {
        w.len() == 10
            && w.iter().enumerate().all(|(i, b)| {
                if i == 4 || i == 7 {
                    *b == b'-'
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    for file in doc_files().into_iter().filter(|f| f != "BENCHMARKS.md") {
        let text = read(&file);
        let dated = text.as_bytes().windows(10).any(is_date);
        assert!(!dated && !text.contains(" UTC"), "{file} carries a date of work");
    }
}
