//! The journal's files are private to the user that writes them: records hold what jobs were
//! submitted with, environment included (tokens, keys). Every file is created 0600, whatever the
//! umask, and the directory is 0700 ([`DIR_MODE`]); a journal written before this rule is made
//! private when it is opened.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use tracing::{debug, warn};

use crate::{At, Result, parse};

/// The mode of every journal file.
pub(crate) const FILE_MODE: u32 = 0o600;
/// The mode of the journal's directory.
pub(crate) const DIR_MODE: u32 = 0o700;

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
/// warn, when a journal that was there was open to other users.
pub(crate) fn prepare_dir(dir: &Path) -> Result<()> {
    let mode = DIR_MODE;
    DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .at(dir)?;
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
        // Not through a link: only the journal's own regular files are changed.
        let meta = fs::symlink_metadata(&path).at(&path)?;
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
