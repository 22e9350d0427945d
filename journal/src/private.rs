//! The journal's files are private to the user that writes them: records hold what jobs were
//! submitted with, environment included (tokens, keys). Every file is created 0600, whatever the
//! umask, and the directory is 0700 ([`DIR_MODE`]); a journal written before this rule is made
//! private when it is opened.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use tracing::{debug, warn};

use crate::{At, JournalError, Result, parse};

/// The mode of every journal file.
pub(crate) const FILE_MODE: u32 = 0o600;
/// The mode of the journal's directory.
pub(crate) const DIR_MODE: u32 = 0o700;

/// This process's user, who owns the journal (besides root).
fn owner() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Whether this process is in group `gid` (its own, or a supplementary one): a directory that
/// group may write is one this process's user may write anyway.
fn in_group(gid: u32) -> bool {
    // SAFETY: getegid(2) cannot fail; getgroups(2) fills at most the buffer's length given.
    unsafe {
        if libc::getegid() == gid {
            return true;
        }
        let mut groups = [0 as libc::gid_t; 256];
        let n = libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr());
        groups[..usize::try_from(n).unwrap_or(0)].contains(&gid)
    }
}

/// Why `meta`'s owner may not own the journal's files or directories, if it may not: only root and
/// this process's user may.
fn foreign_owner(meta: &fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = owner();
    (![0, uid].contains(&meta.uid())).then(|| {
        format!(
            "belongs to uid {}, not to this user ({uid}) or root",
            meta.uid()
        )
    })
}

/// Refuses a journal directory that another user could change: its records are what the daemon
/// runs, often as root. `dir` and every directory above it must belong to root or to this
/// process's user; and none may be writable by other users, nor by a group this process is not in
/// (root's is fine), unless it is sticky (as `/tmp` is: there nobody may rename or delete what
/// another user made). Both the path as written and the one its links resolve to are checked, and
/// every link on the way must be root's or this user's too: then nobody else can change what the
/// path names after the check. Where `dir` is the journal's own directory (`journal`), its own
/// mode is not checked: it is made private next, and each of the journal's files in it must be the
/// owners' own regular file ([`prepare_dir`]). A `.gangway/journal` that another user made (or
/// linked) in a shared directory, or one under a directory they may write, is refused before
/// anything in it is read.
fn check_owners(dir: &Path, journal: bool) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let written = std::path::absolute(dir).at(dir)?;
    let real = dir.canonicalize().at(dir)?;
    for chain in [&written, &real] {
        for (depth, place) in chain.ancestors().enumerate() {
            let meta = fs::symlink_metadata(place).at(place)?;
            let mode = meta.mode();
            let open = (depth > 0 || !journal) && mode & 0o1000 == 0 && meta.is_dir();
            let why = if let Some(why) = foreign_owner(&meta) {
                why
            } else if open && mode & 0o002 != 0 {
                "is writable by every user".to_owned()
            } else if open && mode & 0o020 != 0 && meta.gid() != 0 && !in_group(meta.gid()) {
                format!("is writable by group {}", meta.gid())
            } else {
                continue;
            };
            return Err(JournalError::Unsafe {
                path: place.to_owned(),
                why,
            });
        }
    }
    Ok(())
}

/// The permission bits of `mode` (no file type).
fn bits(mode: u32) -> u32 {
    mode & 0o7777
}

/// Whether `name` is one of the journal's own files (not another program's file kept beside them,
/// such as the daemon's API token).
fn is_journal_file(name: &str) -> bool {
    matches!(name, "LOCK" | "MANIFEST")
        || parse(name, "segment-", ".log").is_some()
        || parse(name, "snapshot-", ".snap").is_some()
        || parse(name, "snapshot-", ".tmp").is_some()
}

/// Creates `dir` (and missing parents), and makes the journal in it private: the directory gets
/// exactly [`DIR_MODE`], and each journal file exactly [`FILE_MODE`]. Says so once, at
/// warn, when a journal that was there was open to other users. Refuses a directory another user
/// could change ([`check_owners`]), and journal files that are not its owners' own regular files.
pub(crate) fn prepare_dir(dir: &Path) -> Result<()> {
    let mode = DIR_MODE;
    // Where it is to be made first, so that nothing is made where another user could change it.
    let cwd = Path::new(".");
    let above = (dir.ancestors().skip(1))
        .map(|a| if a.as_os_str().is_empty() { cwd } else { a })
        .find(|a| a.exists())
        .unwrap_or(cwd);
    check_owners(above, false)?;
    DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .at(dir)?;
    check_owners(dir, true)?;
    let was = bits(fs::metadata(dir).at(dir)?.permissions().mode());
    if was != mode {
        fs::set_permissions(dir, Permissions::from_mode(mode)).at(dir)?;
    }
    let mut opened = Vec::new();
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_journal_file) {
            continue;
        }
        let path = entry.path();
        // Not through a link: the journal's files are its owners' own regular files, or the
        // journal is not opened (a link could point its appends, truncations and reads anywhere; a
        // FIFO would block the open).
        let meta = fs::symlink_metadata(&path).at(&path)?;
        let why = match foreign_owner(&meta) {
            Some(why) => Some(why),
            None if meta.file_type().is_symlink() => Some("is a symbolic link".to_owned()),
            None if !meta.is_file() => Some("is not a regular file".to_owned()),
            None => None,
        };
        if let Some(why) = why {
            return Err(JournalError::Unsafe { path, why });
        }
        let file_mode = bits(meta.permissions().mode());
        if meta.is_file() && file_mode != FILE_MODE {
            fs::set_permissions(&path, Permissions::from_mode(FILE_MODE)).at(&path)?;
            if file_mode & 0o077 != 0 {
                opened.push((path, file_mode));
            }
        }
    }
    if !opened.is_empty() {
        let files: Vec<String> = opened
            .iter()
            .map(|(path, mode)| {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                format!("{name} ({mode:o})")
            })
            .collect();
        let directory = if was == mode {
            String::new()
        } else {
            format!(", the directory {mode:o} (was {was:o})")
        };
        warn!(
            "{}: the journal was open to other users, who could read what jobs were submitted with; made it private: {} now {FILE_MODE:o}{directory}",
            dir.display(),
            files.join(", "),
        );
    } else if was != mode {
        debug!("{}: directory mode {was:o} -> {mode:o}", dir.display());
    }
    Ok(())
}

/// Opens `path` with `options`, creating it (if the options say so) with [`FILE_MODE`] exactly,
/// whatever the umask.
pub(crate) fn open(path: &Path, options: &mut OpenOptions) -> Result<File> {
    let file = options.mode(FILE_MODE).open(path).at(path)?;
    let mode = bits(file.metadata().at(path)?.permissions().mode());
    if mode != FILE_MODE {
        file.set_permissions(Permissions::from_mode(FILE_MODE))
            .at(path)?;
    }
    Ok(file)
}
