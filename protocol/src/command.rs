//! Checks on a submitted command that both the control plane (before it journals a job) and the
//! launcher's process executor (before it runs one) apply: who submitted it, and whether a program it
//! would start may run.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::worker::RunCommand;

/// A field of a request that is wrong, and how.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Invalid {
    pub field: &'static str,
    pub problem: String,
}

/// An [`Invalid`] answer.
pub fn invalid<T>(field: &'static str, problem: impl Into<String>) -> Result<T, Invalid> {
    Err(Invalid {
        field,
        problem: problem.into(),
    })
}

/// Who submitted a request: the peer of a Unix socket, or, over TCP, the holder of the token (which
/// only the daemon's user can read, so the daemon's user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitter {
    pub uid: u32,
    pub gid: u32,
}

impl Submitter {
    /// This process's user.
    pub fn this_process() -> Submitter {
        // SAFETY: geteuid(2) and getegid(2) cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Submitter { uid, gid }
    }
}

/// Checks a program the command would start (an interpreter it names): absolute or found on the
/// submitted `PATH`, an executable regular file, owned by root or by the submitter, and not writable
/// by everyone (else anyone could change what runs). Returns where it is.
pub fn check_program(
    field: &'static str,
    program: &Path,
    run: &RunCommand,
    submitter: &Submitter,
) -> Result<PathBuf, Invalid> {
    let found = if program.components().count() > 1 || program.is_absolute() {
        Some(run.cwd.join(program))
    } else {
        // Without PATH, the C library searches its default one.
        let path = run.env.get("PATH").map_or("/bin:/usr/bin", String::as_str);
        path.split(':')
            .map(|dir| {
                run.cwd
                    .join(if dir.is_empty() { "." } else { dir })
                    .join(program)
            })
            .find(|candidate| candidate.is_file())
    };
    let Some(found) = found else {
        return invalid(
            field,
            format!("{} is not on the submitted PATH", program.display()),
        );
    };
    let meta = std::fs::metadata(&found)
        .or_else(|_| invalid(field, format!("{} does not exist", found.display())))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return invalid(
            field,
            format!("{} is not an executable file", found.display()),
        );
    }
    if meta.uid() != 0 && meta.uid() != submitter.uid {
        return invalid(
            field,
            format!(
                "{} belongs to uid {}: a program must belong to root or to the submitter (uid {})",
                found.display(),
                meta.uid(),
                submitter.uid
            ),
        );
    }
    if meta.permissions().mode() & 0o002 != 0 {
        return invalid(
            field,
            format!(
                "{} is writable by everyone: anyone could change what runs",
                found.display()
            ),
        );
    }
    Ok(found)
}
