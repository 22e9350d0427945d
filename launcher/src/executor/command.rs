//! A submitted command's checks: at its submission, and again at each of its launches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gangway_protocol::command::{
    CheckedProgram, Invalid, LIBRARY_PATH_VAR, Refused, Submitter, check_library_path, open_program,
};
use gangway_protocol::worker::RunCommand;

use super::launch::SpawnError;
use crate::apart::{Apart, NotDone};

/// Checks a submitted command as the process executor will run it (its GPUs first): `elastic-run`
/// must accept the command line, on this machine's GPUs (no `--backend slurm`), with a `--grace` of
/// at most `max_grace`, and the programs it names to run (the `--python` interpreter, or the script
/// under torchrun's `--no-python`) must be ones the submitter may run: see [`open_program`].
pub fn check_command(
    run: &RunCommand,
    submitter: &Submitter,
    max_grace: Duration,
) -> Result<(), Refused> {
    let grace = checked(run, submitter)?.0.options.grace();
    if grace > max_grace {
        return Err(Refused::from(Invalid {
            field: "run.args",
            problem: format!(
                "--grace {} s is longer than this daemon allows ({} s, gangway serve --max-grace): \
                 a stopped job's GPUs wait for it",
                grace.as_secs_f64(),
                max_grace.as_secs_f64()
            ),
        }));
    }
    Ok(())
}

/// What [`check_command`] found a command runs, held as checked.
#[derive(Debug)]
pub struct CheckedCommand {
    /// The program `elastic-run` runs its workers with (its `--python`), open.
    pub program: CheckedProgram,
    /// Under torchrun's `--no-python`, where the script the workers run was found (absolute): the
    /// workers run this path rather than search their `PATH` again, which as their user could find
    /// another file than the one checked.
    pub script: Option<PathBuf>,
}

/// [`check_command`]'s checks, made again at every launch (what was fine at submission may not be
/// any more), with the directories of the command's `LD_LIBRARY_PATH` if `library_path_checked`
/// ([`check_library_path`]; the control plane checked them at its submission). A refusal says
/// whether the file system did not answer ([`Refused::unanswered`]): the same check may pass later.
pub fn checked_command(
    run: &RunCommand,
    submitter: &Submitter,
    library_path_checked: bool,
) -> Result<CheckedCommand, Refused> {
    if library_path_checked && let Some(value) = run.env.get(LIBRARY_PATH_VAR) {
        check_library_path(value, submitter)?;
    }
    checked(run, submitter).map(|(_, command)| command)
}

/// [`checked_command`], with the command line as `elastic-run` reads it.
fn checked(
    run: &RunCommand,
    submitter: &Submitter,
) -> Result<(crate::cli::Invocation, CheckedCommand), Refused> {
    const FIELD: &str = "run.args";
    let mut args = vec!["--devices".to_owned(), "0".to_owned()];
    args.extend(run.args.iter().cloned());
    let inv = crate::cli::parse(&args).map_err(|e| {
        let text = e.to_string();
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_owned();
        Invalid {
            field: FIELD,
            problem: format!("elastic-run refuses this command line: {first}"),
        }
    })?;
    let options = &inv.options;
    if options.backend != crate::cli::Backend::Local
        || options.nodes != 1
        || options.nodelist.is_some()
    {
        return Err(Invalid {
            field: FIELD,
            problem: "the daemon places jobs on its own GPUs and nodes: leave out --backend, \
                      --nodes and --nodelist"
                .into(),
        }
        .into());
    }
    if let Some((variable, option)) = (run.env.keys())
        .find_map(|v| crate::cli::hidden_program_option(v).map(|option| (v, option)))
    {
        return Err(Invalid {
            field: "run.env",
            problem: format!(
                "{variable} sets torchrun's {option} where elastic-run cannot see it (it changes \
                 the program that runs, which the daemon checks): give {option} on the command line"
            ),
        }
        .into());
    }
    if run.env.contains_key(crate::cli::WORKER_PROGRAM_VAR) {
        return Err(Invalid {
            field: "run.env",
            problem: format!(
                "{} makes torchrun start its workers with another program than the one the \
                 daemon checks: leave it out, and give the interpreter as --python",
                crate::cli::WORKER_PROGRAM_VAR
            ),
        }
        .into());
    }
    let program = open_program(FIELD, &inv.options.python, run, submitter)?;
    let script = if inv
        .torchrun
        .iter()
        .any(|a| a == "--no-python" || a == "--no_python")
    {
        Some(open_program(FIELD, Path::new(&inv.script), run, submitter)?.path)
    } else {
        None
    };
    Ok((inv, CheckedCommand { program, script }))
}

/// [`checked_command`] for `submitter`, apart ([`Apart`]): a file system of theirs that never
/// answers holds that check's thread, neither the executor nor another user's launch.
pub(super) fn check_apart(
    checks: &Apart,
    run: &RunCommand,
    submitter: Submitter,
    patience: Duration,
    library_path_checked: bool,
) -> Result<CheckedCommand, SpawnError> {
    let run = run.clone();
    let checked = checks.run(submitter.uid, "gangway-launch-check", patience, move || {
        checked_command(&run, &submitter, library_path_checked)
    });
    match checked {
        // This machine out of descriptors or threads: not the job's doing.
        Ok(Err(e)) if e.host => Err(SpawnError::Host(format!("its program's check: {e}"))),
        // A file system that did not answer says nothing of the program: the job pauses and
        // tries again, where a refusal ends it.
        Ok(Err(e)) if e.unanswered => Err(SpawnError::Failed(format!(
            "its program's check: {e}; it is checked again at its next try"
        ))),
        Ok(checked) => {
            checked.map_err(|e| SpawnError::Refused(format!("its program may not run: {e}")))
        }
        // Every API user reads why a job waits: its user's id is not said.
        Err(e @ NotDone::Resting { left, .. }) => {
            Err(SpawnError::Later(format!("its program's check: {e}"), left))
        }
        Err(e @ NotDone::NoThread(_)) => Err(SpawnError::Host(format!("its program's check: {e}"))),
        Err(e) => Err(SpawnError::Failed(format!(
            "its program's check: {e}; its user's jobs wait until it comes back"
        ))),
    }
}
