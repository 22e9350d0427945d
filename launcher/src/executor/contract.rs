//! What the daemon and an attempt's `elastic-run` tell each other: the variables its processes are
//! started with, and the reports it writes back.

use std::path::Path;

use gangway_protocol::worker::Measured;
use serde::{Deserialize, Serialize};

/// Marks every process of one attempt: `INSTANCE-JOB.ATTEMPT` (see [`super::ProcessExecutor::attempt_marker`]).
pub const ATTEMPT_VAR: &str = "GANGWAY_ATTEMPT";

/// Where `elastic-run` writes its [`ExitReport`] before it exits, for a scheduler other than gangway's
/// daemon (which hands it a descriptor instead: [`crate::inherit::EXIT_FD_VAR`]).
pub const EXIT_FILE_VAR: &str = "GANGWAY_EXIT_FILE";

/// Where the workers report their progress: `{"step": N, "total_steps": T, ...}` (see the Python
/// helper's `report_progress`). `elastic-run` sets it for its workers, in the job's checkpoint
/// directory.
pub const PROGRESS_FILE_VAR: &str = "GANGWAY_PROGRESS_FILE";

/// The global batch the daemon's policy chose for this attempt of a job that adapts its batch
/// (`elastic-run --global-batch MIN:MAX`): `elastic-run` runs at it in place of MIN.
pub const POLICY_BATCH_VAR: &str = "GANGWAY_POLICY_BATCH";

/// The pipeline stages this attempt runs with, for a job whose stages differ by GPU type
/// (`elastic-run --pp-by-type`): `elastic-run` plans with it in place of `--pp`.
pub const POLICY_PP_VAR: &str = "GANGWAY_POLICY_PP";

/// What a job's workers last reported (a progress report's bytes): the fraction of its work done and,
/// when they measure it, their training's [`Measured`] figures (`"goodput"`; dropped when they do not
/// check out).
pub fn reported(progress: &[u8]) -> Option<(f64, Option<Measured>)> {
    let mut report: serde_json::Value = serde_json::from_slice(progress).ok()?;
    let step = report["step"].as_f64()?;
    let total = report["total_steps"].as_f64()?;
    let fraction = (step.is_finite() && total.is_finite() && step >= 0.0 && total > 0.0)
        .then(|| (step / total).min(1.0))?;
    let measured = serde_json::from_value::<Measured>(report["goodput"].take())
        .ok()
        .and_then(Measured::checked);
    Some((fraction, measured))
}

/// How an `elastic-run` ended, as it writes it to `$GANGWAY_EXIT_FILE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitReport {
    /// Its exit code: 0 completed, 2 user error, 75 preempted, 1 crashed beyond its budget.
    pub code: i32,
    /// How it ended, in words (the failure's reason, for a job that failed).
    pub why: String,
}

impl ExitReport {
    /// Writes the report atomically.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        write_atomically(
            path,
            &serde_json::to_vec(self).map_err(std::io::Error::other)?,
        )
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`: a reader sees the
/// old file or the new one, never a part. The temporary file is created afresh, never opened
/// through a link someone left at its name (some of these files are in a submitter's directory).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_as(path, bytes, 0o666)
}

/// [`write_atomically`], the file created with `mode` (less the umask) from the start.
pub(super) fn write_atomically_as(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(temp, path)
}
