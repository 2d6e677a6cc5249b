//! The man page and the bash, zsh and fish completions, generated from the clap definition
//! (`zarr-mount --generate-docs DIR`, which scripts/install.sh and the packages run on the very
//! binary they install, so neither can drift from its flags).

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Args;

/// The argument that asks for them; handled before the mount's own parsing, and not in
/// `--help` (it is for packagers).
pub const FLAG: &str = "--generate-docs";

/// File names, as the installers expect them: the man page, then one completion per shell.
pub const MAN_PAGE: &str = "zarr-mount.1";
pub const COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "zarr-mount.bash"),
    (Shell::Zsh, "_zarr-mount"),
    (Shell::Fish, "zarr-mount.fish"),
];

/// The mount's command with `serve` as a subcommand (main() dispatches `serve` before clap
/// parses, so only the documentation sees it this way): its flags complete after `serve`.
fn documented() -> clap::Command {
    let full = crate::cli::serve::command();
    let mut serve = clap::Command::new("serve").about(crate::cli::serve::ABOUT);
    // Only what `serve` takes: the mount-only flags it refuses are hidden there.
    for arg in full.get_arguments().filter(|a| !a.is_hide_set()) {
        serve = serve.arg(arg.clone());
    }
    Args::command().subcommand(serve).disable_help_subcommand(true)
}

/// Write the man page and the completions into `dir` (created if missing); returns the files.
pub fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let cmd = documented();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    let man = dir.join(MAN_PAGE);
    std::fs::write(&man, page)?;
    let mut written = vec![man];
    for (shell, name) in COMPLETIONS {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "zarr-mount", &mut script);
        if shell == Shell::Bash {
            script = bash_hyphen_fix(script);
        }
        let path = dir.join(name);
        std::fs::write(&path, script)?;
        written.push(path);
    }
    Ok(written)
}

/// clap_complete's bash script spells the state of `zarr-mount serve` `zarr__mount__subcmd__serve`
/// in its loop but `zarr__subcmd__mount__subcmd__serve` in its arms, so nothing completes after
/// `serve` (clap-rs/clap#6421, a hyphen in the binary's name): spell the arms as the loop does.
fn bash_hyphen_fix(script: Vec<u8>) -> Vec<u8> {
    String::from_utf8(script)
        .map(|s| s.replace("zarr__subcmd__mount", "zarr__mount").into_bytes())
        .unwrap_or_else(|e| e.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_and_completions_name_every_long_flag() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_all(dir.path()).unwrap();
        assert_eq!(files.len(), 1 + COMPLETIONS.len());
        let longs: Vec<String> = Args::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect();
        assert!(longs.len() > 20, "{longs:?}");
        // serve's own flags, in the completions (the man page lists `serve` as a subcommand)
        let serve: Vec<String> = crate::cli::serve::command()
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(str::to_string))
            .filter(|l| !longs.contains(l))
            .collect();
        assert!(serve.contains(&"listen".to_string()), "{serve:?}");
        for file in files {
            // roff escapes '-' as '\-'; fish names a long flag `-l NAME`.
            let text = std::fs::read_to_string(&file).unwrap().replace("\\-", "-");
            let fish = file.extension().is_some_and(|e| e == "fish");
            for long in &longs {
                let flag = if fish { format!("-l {long}") } else { format!("--{long}") };
                assert!(text.contains(&flag), "{} lacks {flag}", file.display());
            }
            if file.extension().is_some_and(|e| e == "1") {
                assert!(text.contains("serve"), "{} lacks the serve subcommand", file.display());
                for heading in ["SOURCE", "VIEW", "SECURITY", "CACHE", "PERFORMANCE", "SERVICE"] {
                    assert!(text.contains(&format!(".SH {heading}")), "no section {heading}");
                }
                continue;
            }
            for long in &serve {
                let flag = if fish { format!("-l {long}") } else { format!("--{long}") };
                assert!(text.contains(&flag), "{} lacks serve's {flag}", file.display());
            }
        }
    }

    /// What bash completes for the words before the cursor and the word at it.
    fn bash_complete(words: &[&str], cur: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path()).unwrap();
        let script = format!(
            "source {}; COMP_WORDS=({} {cur}); COMP_CWORD={}; _zarr__mount zarr-mount '{cur}' {}; echo \"${{COMPREPLY[*]}}\"",
            dir.path().join("zarr-mount.bash").display(),
            words.join(" "),
            words.len(),
            words.last().unwrap(),
        );
        let out = std::process::Command::new("bash").arg("-c").arg(script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn bash_completes_the_flags_of_serve_and_of_the_mount() {
        assert_eq!(bash_complete(&["zarr-mount", "serve"], "--lis").trim(), "--listen");
        // mount-only flags are refused by serve: not offered
        assert_eq!(bash_complete(&["zarr-mount", "serve"], "--fore").trim(), "");
        assert_eq!(bash_complete(&["zarr-mount"], "--fore").trim(), "--foreground");
    }
}
