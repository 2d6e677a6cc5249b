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

/// Write the man page and the completions into `dir` (created if missing); returns the files.
pub fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let cmd = Args::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    let man = dir.join(MAN_PAGE);
    std::fs::write(&man, page)?;
    let mut written = vec![man];
    for (shell, name) in COMPLETIONS {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "zarr-mount", &mut script);
        let path = dir.join(name);
        std::fs::write(&path, script)?;
        written.push(path);
    }
    Ok(written)
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
        for file in files {
            // roff escapes '-' as '\-'; fish names a long flag `-l NAME`.
            let text = std::fs::read_to_string(&file).unwrap().replace("\\-", "-");
            let fish = file.extension().is_some_and(|e| e == "fish");
            for long in &longs {
                let flag = if fish { format!("-l {long}") } else { format!("--{long}") };
                assert!(text.contains(&flag), "{} lacks {flag}", file.display());
            }
        }
    }
}
