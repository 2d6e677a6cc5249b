//! File modes, owners and groups: a store's own (`Perms`, which only a local directory has)
//! and what the mount shows for each file and directory (`ShownPerms`, from `--uid`, `--gid`,
//! `--file-mode` and `--dir-mode`). With `default_permissions` on the mount (`--allow-other`)
//! the kernel enforces what is shown, so a local file's own mode must reach it unchanged.

/// The permission bits (`st_mode & 0o7777`), owner and group of a file or directory, as its
/// store keeps them. Small and `Copy`: it travels with every `ObjectMeta` and `Node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perms {
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
}

/// What a file shows where neither the store nor `--file-mode` gives a mode.
pub const DEFAULT_FILE_MODE: u16 = 0o644;
/// What a directory shows where neither the store nor `--dir-mode` gives a mode.
pub const DEFAULT_DIR_MODE: u16 = 0o755;

impl Perms {
    /// The permission bits, owner and group of a `stat`.
    pub fn of_stat(mode: u32, uid: u32, gid: u32) -> Self {
        Perms { mode: (mode & 0o7777) as u16, uid, gid }
    }

    /// These perms on a directory made of a file (an unsharded view shows a shard as the
    /// directory of its inner chunks): whoever may read the file may also enter the directory,
    /// as `chmod a+X` would have it; nobody gains more than reading.
    pub fn as_dir(self) -> Self {
        let read = self.mode & 0o444;
        Perms { mode: (self.mode & 0o7777 & !0o111) | read | (read >> 2), ..self }
    }
}

/// `--uid`, `--gid`, `--file-mode` and `--dir-mode`: each one given overrides what the store
/// has for every file (or directory); one not given leaves the store's own, and where the
/// store has none (object stores, zip, references, Icechunk, HTTP) the defaults: the mounting
/// user and group, 0644 and 0755.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShownPerms {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub file_mode: Option<u16>,
    pub dir_mode: Option<u16>,
    /// The mounting user and group: the owner of what the store has no owner for.
    pub default_uid: u32,
    pub default_gid: u32,
}

impl ShownPerms {
    /// Nothing overridden: the store's own, else the defaults with `uid`/`gid` as the owner.
    pub fn owned_by(uid: u32, gid: u32) -> Self {
        ShownPerms {
            uid: None,
            gid: None,
            file_mode: None,
            dir_mode: None,
            default_uid: uid,
            default_gid: gid,
        }
    }

    /// Nothing overridden, and this process's user and group as the owner.
    pub fn of_this_process() -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Self::owned_by(uid, gid)
    }

    /// What a file (or a directory: `is_dir`) with the store's perms `own` shows.
    pub fn shown(&self, is_dir: bool, own: Option<Perms>) -> Perms {
        let (flag, default) = if is_dir {
            (self.dir_mode, DEFAULT_DIR_MODE)
        } else {
            (self.file_mode, DEFAULT_FILE_MODE)
        };
        Perms {
            mode: flag.or(own.map(|p| p.mode)).unwrap_or(default),
            uid: self.uid.or(own.map(|p| p.uid)).unwrap_or(self.default_uid),
            gid: self.gid.or(own.map(|p| p.gid)).unwrap_or(self.default_gid),
        }
    }
}

/// An octal mode as `--file-mode` / `--dir-mode` take it: `644`, `0644` or `0o644`, at most
/// `7777`.
pub fn parse_mode(s: &str) -> Result<u16, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    let bad = || format!("{s:?} is not an octal mode such as 0644 (at most 7777)");
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad());
    }
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 => Ok(m as u16),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT_0600: Perms = Perms { mode: 0o600, uid: 0, gid: 0 };

    #[test]
    fn a_store_s_own_perms_are_shown_unchanged() {
        let shown = ShownPerms::owned_by(1000, 100);
        assert_eq!(shown.shown(false, Some(ROOT_0600)), ROOT_0600);
        let dir = Perms { mode: 0o700, uid: 7, gid: 8 };
        assert_eq!(shown.shown(true, Some(dir)), dir);
    }

    #[test]
    fn without_perms_of_its_own_a_file_shows_the_defaults() {
        let shown = ShownPerms::owned_by(1000, 100);
        assert_eq!(shown.shown(false, None), Perms { mode: 0o644, uid: 1000, gid: 100 });
        assert_eq!(shown.shown(true, None), Perms { mode: 0o755, uid: 1000, gid: 100 });
    }

    #[test]
    fn each_flag_overrides_only_its_own_part() {
        let flags =
            ShownPerms { uid: Some(5), file_mode: Some(0o640), ..ShownPerms::owned_by(1000, 100) };
        assert_eq!(flags.shown(false, Some(ROOT_0600)), Perms { mode: 0o640, uid: 5, gid: 0 });
        assert_eq!(flags.shown(false, None), Perms { mode: 0o640, uid: 5, gid: 100 });
        // --file-mode is for files: a directory keeps its own mode, or the directory default.
        assert_eq!(flags.shown(true, None), Perms { mode: 0o755, uid: 5, gid: 100 });
        let dirs = ShownPerms { dir_mode: Some(0o700), gid: Some(9), ..ShownPerms::owned_by(1, 2) };
        assert_eq!(dirs.shown(true, None), Perms { mode: 0o700, uid: 1, gid: 9 });
        assert_eq!(dirs.shown(false, Some(ROOT_0600)), Perms { mode: 0o600, uid: 0, gid: 9 });
    }

    #[test]
    fn a_file_as_a_directory_may_be_entered_by_whoever_may_read_it() {
        let dir = |mode| Perms { mode, uid: 1, gid: 2 }.as_dir().mode;
        assert_eq!(dir(0o600), 0o700);
        assert_eq!(dir(0o644), 0o755);
        assert_eq!(dir(0o640), 0o750);
        assert_eq!(dir(0o200), 0o200, "write alone gives no entry");
        assert_eq!(dir(0o711), 0o700, "execute without read is no entry");
        assert_eq!(Perms { mode: 0o600, uid: 1, gid: 2 }.as_dir().uid, 1);
    }

    #[test]
    fn modes_are_octal_and_at_most_7777() {
        assert_eq!(parse_mode("644"), Ok(0o644));
        assert_eq!(parse_mode("0644"), Ok(0o644));
        assert_eq!(parse_mode("0o750"), Ok(0o750));
        assert_eq!(parse_mode("7777"), Ok(0o7777));
        assert_eq!(parse_mode("0"), Ok(0));
        for bad in ["", "0o", "888", "644x", "-644", "10000", "rw-r--r--", " 644", "0x1a4"] {
            let e = parse_mode(bad).unwrap_err();
            assert!(e.contains("octal mode"), "{bad:?}: {e}");
        }
    }
}
