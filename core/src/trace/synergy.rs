//! Synergy's deployment traces (`deploy_trace/`; Synergy, Mohan et al., OSDI'22): CSV without a header,
//! `job_id,model,arrival_seconds,iterations,gpus`.
//!
//! Work is counted in seconds at the GPU-proportional share: `iterations x iter_time` of the model's
//! profile (`synergy_model_profiles.json`, found beside the trace or up to two folders above it, or
//! given with `--profiles`). The trace keeps the profiles' path, so that its throughput model scales
//! each run by the CPUs and memory it gets (`throughput::resources`).

use std::path::{Path, PathBuf};

use super::JobColumns;
use super::rows::{JobIds, finish, for_each_row};
use crate::error::{InputError, Source};
use crate::job::{Job, Trace, WorkUnit};
use crate::limits;
use crate::throughput::resources::ResourceProfiles;

/// The profiles file's name in Synergy's data.
pub const PROFILES_FILE: &str = "synergy_model_profiles.json";

const COLUMNS: [&str; 5] = ["job_id", "model", "arrival", "iterations", "gpus"];

/// Whether a first line looks like Synergy's: five fields, an id, a model name, then three numbers.
pub(crate) fn looks_like(line: &str) -> bool {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    fields.len() == 5
        && fields[0].parse::<u32>().is_ok()
        && fields[1]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && fields[2..].iter().all(|f| f.parse::<f64>().is_ok())
}

/// The profiles for a trace at `path`: `given` when given (a file, or a folder holding the file; the
/// reader says what is wrong with anything else), else Synergy's file beside the trace or up to two
/// folders above.
pub(crate) fn find_profiles(path: &Path, given: Option<&Path>) -> Option<PathBuf> {
    if let Some(given) = given {
        return Some(given.to_path_buf());
    }
    path.ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join(PROFILES_FILE))
        .find(|p| p.is_file())
}

pub(crate) fn parse(
    source: &Source,
    text: &str,
    profiles: &ResourceProfiles,
    profiles_path: &Path,
) -> Result<Trace, InputError> {
    let mut trace = Trace::new(source.to_string(), WorkUnit::Seconds);
    trace.profiles = Some(profiles_path.to_path_buf());
    let tenant = trace.intern_tenant("default");
    let mut ids = JobIds::default();
    let mut lines = Vec::new();
    for_each_row(source, text, b',', Some(&COLUMNS), |row| {
        let id = ids.take(row, "job_id")?;
        let model = row.text("model")?.trim();
        let Some(profile) = profiles.find(model).map(|p| &profiles.profiles[p]) else {
            let known: Vec<&str> = profiles.profiles.iter().map(|p| p.name.as_str()).collect();
            return Err(InputError::field(
                source,
                row.line,
                "model",
                format!(
                    "no profile for `{model}` in {} (it has {})",
                    profiles_path.display(),
                    known.join(", ")
                ),
            ));
        };
        let arrival = row.arrival("arrival", 1.0)?;
        let iterations = row.number_in("iterations", &limits::STEPS)?;
        // The work is in seconds at the share: the iterations must fit in the longest job.
        let seconds = iterations * profile.iter_time;
        if !limits::WORK_SECONDS.contains(seconds) {
            return Err(InputError::field(
                source,
                row.line,
                "iterations",
                format!(
                    "{} iterations of `{}` at {} s each are {} s of work, which {}",
                    limits::number(iterations),
                    profile.name,
                    profile.iter_time,
                    limits::number(seconds),
                    limits::WORK_SECONDS
                ),
            ));
        }
        let job_type = trace.intern_job_type(&profile.name);
        trace.jobs.push(
            Job::new(id, arrival, row.gpu_count("gpus")?, seconds)
                .with_type(job_type)
                .with_tenant(tenant),
        );
        lines.push(row.line);
        Ok(())
    })?;
    finish(
        &mut trace,
        lines,
        JobColumns {
            gpus: "gpus",
            work: "iterations",
            job_type: "model",
        },
        false,
    );
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles() -> (ResourceProfiles, PathBuf) {
        let path = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/synergy_profiles_small.json"
        ));
        (ResourceProfiles::load(&path, "models").unwrap(), path)
    }

    #[test]
    fn reads_jobs_in_seconds_at_the_share() {
        let (profiles, path) = profiles();
        let source = Source("t".into());
        let text = "1,gnmt,0.001,26435,1\n0,alexnet,0.0,3349,2\n";
        assert!(looks_like(text.lines().next().unwrap()));
        let trace = parse(&source, text, &profiles, &path).unwrap();
        assert_eq!(trace.work_unit(), WorkUnit::Seconds);
        let first = &trace.jobs[0];
        assert_eq!((first.id.0, first.gpus), (0, 2));
        assert!((first.total_steps - 3349.0 * 0.6).abs() < 1e-9);
        assert_eq!(trace.job_type_name(first.job_type), "alexnet");
        assert_eq!(trace.profiles.as_deref(), Some(path.as_path()));
    }

    #[test]
    fn bad_rows_name_file_line_and_field() {
        let (profiles, path) = profiles();
        let source = Source("t.csv".into());
        for (text, says) in [
            (
                "0,alexnet,0,10,1\n1,bert9,5,10,1\n",
                "t.csv:2: field `model`: no profile for `bert9`",
            ),
            ("0,alexnet,-1,10,1\n", "t.csv:1: field `arrival`"),
            ("0,alexnet,0,ten,1\n", "t.csv:1: field `iterations`"),
            ("0,alexnet,0,10,0\n", "t.csv:1: field `gpus`"),
            (
                "0,alexnet,0,10,1\n0,gnmt,0,10,1\n",
                "t.csv:2: field `job_id`: duplicate of line 1",
            ),
            ("0,alexnet,0,10\n", "t.csv:1: expected 5 fields, found 4"),
        ] {
            let err = parse(&source, text, &profiles, &path)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    /// Iterations of 1e300 (or 1e23) were accepted, and the job never ran.
    #[test]
    fn iterations_past_any_real_job_name_their_range() {
        let (profiles, path) = profiles();
        let source = Source("t.csv".into());
        for (text, says) in [
            (
                "0,alexnet,0,10,1\n1,gnmt,0,1e300,1\n",
                "t.csv:2: field `iterations`: 1e300 is out of range: must be at least 0 steps and at most 1e12 steps",
            ),
            // Within the steps, but 1e11 iterations of 0.6 s are past the longest job.
            (
                "0,alexnet,0,1e11,1\n",
                "t.csv:1: field `iterations`: 1e11 iterations of `alexnet` at 0.6 s each are 6e10 s of work, which must be at least 0 seconds and at most 1e9 seconds",
            ),
            (
                "0,alexnet,0,1e23,1\n",
                "t.csv:1: field `iterations`: 1e23 is out of range",
            ),
        ] {
            let err = parse(&source, text, &profiles, &path)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(says), "{text:?}: {err}");
        }
    }
}
