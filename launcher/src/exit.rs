//! What a launch's end means: done, a user error (never retried), or a crash (retried within budget).
//!
//! torchrun exits 1 when any worker fails and prints each failed worker's `exitcode : N`; it exits 2
//! itself on bad arguments. A worker exit 2 is argparse's usage error, by convention a configuration
//! mistake. A Python syntax error, or a script that cannot be opened or imported, fails the same way on
//! every try.

use std::process::ExitStatus;

/// What a launch's end means, for the restart loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It exited 0 (and Slurm did not abort the step): the work is done.
    Completed,
    /// Retrying cannot help.
    UserError(String),
    /// Worth another try from the last checkpoint.
    Crashed(String),
}

/// How the final line of a traceback or an error message starts when only a broken script or command
/// line produces it. Matched at the start of a line, so that a script's own logs that mention them
/// (a warning about an optional import) do not count.
const USER_ERRORS: [&str; 4] = [
    "SyntaxError:",
    "IndentationError:",
    "ModuleNotFoundError:",
    "ImportError:",
];

/// Python's own messages for a script it cannot open, and argparse's usage errors: anywhere in a line.
const USER_ERRORS_ANYWHERE: [&str; 3] = [
    "can't open file",
    "error: unrecognized arguments",
    "error: the following arguments are required",
];

/// The user error `text` shows, if any, as the reason to give.
fn user_error(text: &str) -> Option<String> {
    // A module that is not installed, wherever Python says so: in a traceback's last line, or in
    // `python -m torch.distributed.run`'s own "Error while finding module specification for
    // 'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')".
    if let Some(module) = missing_module(text) {
        return Some(format!(
            "Python has no module `{module}` (ModuleNotFoundError); pass --python pointing at a \
             Python environment that has it{}",
            if module == "torch" || module.starts_with("torch.") {
                " (torch runs the workers: e.g. --python .venv/bin/python after `pip install torch` there)"
            } else {
                ""
            }
        ));
    }
    text.lines().find_map(|line| {
        let line = line.trim_start();
        USER_ERRORS
            .iter()
            .find(|m| line.starts_with(**m))
            .or_else(|| USER_ERRORS_ANYWHERE.iter().find(|m| line.contains(**m)))
            .map(|marker| format!("the script failed with `{marker}`"))
    })
}

/// The module in the first "ModuleNotFoundError: No module named 'X'" of `text`. Only the error
/// counts: torch warns "Failed to initialize NumPy: No module named 'numpy'" and carries on.
fn missing_module(text: &str) -> Option<&str> {
    const SAYS: &str = "ModuleNotFoundError: No module named '";
    let at = text.find(SAYS)? + SAYS.len();
    let rest = &text[at..];
    let module = &rest[..rest.find('\'')?];
    (!module.is_empty()).then_some(module)
}

/// Classifies a launch that ended with `status`, given the tail of its output.
pub fn classify(status: ExitStatus, output_tail: &str) -> Verdict {
    use std::os::unix::process::ExitStatusExt;
    if status.success() {
        // srun exits 0 when Slurm aborts a step because a node failed (Slurm 22.05): the workers
        // did not finish, they were lost.
        if let Some(line) = output_tail.lines().find(|l| {
            let l = l.trim();
            l.starts_with("srun: error: Node failure") || l == "srun: Job step aborted"
        }) {
            return Verdict::Crashed(format!("Slurm aborted the step ({})", line.trim()));
        }
        return Verdict::Completed;
    }
    if let Some(why) = user_error(output_tail) {
        return Verdict::UserError(why);
    }
    let worker_codes = worker_exit_codes(output_tail);
    if status.code() == Some(2) || worker_codes.contains(&2) {
        return Verdict::UserError("exit code 2: a usage or configuration error".into());
    }
    let how = match (status.code(), status.signal()) {
        (_, Some(signal)) => format!("killed by signal {signal}"),
        (Some(code), _) if !worker_codes.is_empty() => {
            format!("exit code {code}; worker exit codes {worker_codes:?}")
        }
        (Some(code), _) => format!("exit code {code}"),
        (None, None) => "ended".into(),
    };
    Verdict::Crashed(how)
}

/// The `exitcode : N` values of torchrun's failure summary (negative: killed by signal -N).
fn worker_exit_codes(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("exitcode")?;
            let value = rest
                .trim_start()
                .strip_prefix(':')?
                .split_whitespace()
                .next()?;
            value.parse().ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn crashes_are_retried_and_user_errors_are_not() {
        assert_eq!(classify(exited(0), ""), Verdict::Completed);
        let summary = "Root Cause (first observed failure):\n[0]:\n  exitcode  : -9 (pid: 12)\n";
        assert_eq!(
            classify(exited(1), summary),
            Verdict::Crashed("exit code 1; worker exit codes [-9]".into())
        );
        assert!(matches!(
            classify(
                exited(1),
                "  File \"train.py\", line 3\n    def f(:\nSyntaxError: invalid syntax"
            ),
            Verdict::UserError(_)
        ));
        assert!(matches!(
            classify(exited(1), "  exitcode  : 2 (pid: 7)"),
            Verdict::UserError(_)
        ));
        assert!(matches!(
            classify(exited(2), "usage: torchrun ..."),
            Verdict::UserError(_)
        ));
        assert_eq!(
            classify(ExitStatus::from_raw(9), ""),
            Verdict::Crashed("killed by signal 9".into())
        );
    }

    /// Without torch, `python -m torch.distributed.run` fails before any worker starts, and says so
    /// inside its own message, not at a line's start: never a crash to retry.
    /// A node failure once ended a Slurm job as completed: srun exits 0 when Slurm aborts its step.
    #[test]
    fn a_step_slurm_aborted_is_a_crash_even_when_srun_exits_0() {
        let aborted = "srun: error: Node failure on node1\nsrun: error: Node failure on node1\n\
                       srun: Job step aborted\n";
        assert_eq!(
            classify(exited(0), aborted),
            Verdict::Crashed("Slurm aborted the step (srun: error: Node failure on node1)".into())
        );
        assert_eq!(
            classify(exited(0), "epoch 3: srun: Job step aborted is a phrase\n"),
            Verdict::Completed
        );
    }

    #[test]
    fn a_missing_module_is_a_user_error_with_a_hint() {
        let no_torch = "/usr/bin/python3: Error while finding module specification for \
                        'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')\n";
        let Verdict::UserError(why) = classify(exited(1), no_torch) else {
            panic!("a crash")
        };
        assert!(
            why.contains("no module `torch`") && why.contains("--python"),
            "{why}"
        );
        let Verdict::UserError(why) = classify(
            exited(1),
            "Traceback (most recent call last):\n  File \"t.py\", line 1\nModuleNotFoundError: No module named 'numpy'\n",
        ) else {
            panic!("a crash")
        };
        assert!(why.contains("no module `numpy`"), "{why}");
        assert!(!why.contains("torch runs"), "{why}");
        // A warning about an optional module is not the failure: a worker's crash is retried.
        let warned = "UserWarning: Failed to initialize NumPy: No module named 'numpy'\n\
                      failed (exitcode: 13) local_rank: 0\n";
        assert!(
            !matches!(classify(exited(1), warned), Verdict::UserError(_)),
            "{:?}",
            classify(exited(1), warned)
        );
    }
}
