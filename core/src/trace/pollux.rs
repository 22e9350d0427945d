//! Pollux's and Sia's workload CSVs (`name,time,application,num_replicas,batch_size`): elastic jobs of
//! the applications their profiles measure.
//!
//! A job's work is its application's training progress (iterations at the application's initial batch
//! size, through all its epochs), not a duration: how fast it goes depends on the GPUs, placement and
//! batch size it runs with (see `throughput::goodput`). `num_replicas` and `batch_size` are the
//! configuration the workload tuned the job to: what policies that keep a job's size run it with.

use std::path::Path;

use super::JobColumns;
use super::rows::{finish, for_each_row};
use crate::error::{InputError, Source};
use crate::job::{Job, JobId, Trace, WorkUnit};
use crate::throughput::goodput::Profiles;

pub(crate) fn parse(
    source: &Source,
    text: &str,
    profiles: &Profiles,
    profiles_dir: &Path,
) -> Result<Trace, InputError> {
    let mut trace = Trace::new(source.to_string(), WorkUnit::Progress);
    trace.profiles = Some(profiles_dir.to_path_buf());
    let tenant = trace.intern_tenant("default");
    let mut lines = Vec::new();
    for_each_row(source, text, b',', None, |row| {
        let name = row.text("application")?;
        let Some(app) = profiles.apps.get(name) else {
            let known: Vec<&str> = profiles.apps.keys().map(String::as_str).collect();
            return Err(InputError::field(
                source,
                row.line,
                "application",
                format!(
                    "no profile for `{name}` in {} (it has {})",
                    profiles.source,
                    known.join(", ")
                ),
            ));
        };
        let batch = row.batch("batch_size")?;
        let job_type = trace.intern_job_type(name);
        trace.jobs.push(
            Job::new(
                JobId(0),
                row.arrival("time", 1.0)?,
                row.gpu_count("num_replicas")?,
                app.total_progress(),
            )
            .with_type(job_type)
            .with_tenant(tenant)
            .with_batch(batch),
        );
        lines.push(row.line);
        Ok(())
    })?;
    finish(
        &mut trace,
        lines,
        JobColumns {
            gpus: "num_replicas",
            work: "application",
            job_type: "application",
        },
        true,
    );
    Ok(trace)
}

/// Where a workload's profiles are: a `profiles/` folder beside the folder of workloads it is in (Pollux's
/// layout, `pollux/workloads/workload-1.csv`), or beside the one above (Sia's,
/// `sia/workloads/philly/workload-1.csv`).
pub(crate) fn find_profiles(workload: &Path) -> Option<std::path::PathBuf> {
    workload
        .ancestors()
        .skip(2)
        .take(2)
        .map(|dir| dir.join("profiles"))
        .find(|p| p.is_dir())
}

/// Where an application's statistical-efficiency profiles are when its own folder has none: Pollux's,
/// beside Sia's data (`sia/profiles` -> `pollux/profiles`).
pub(crate) fn find_validation(profiles: &Path) -> Option<std::path::PathBuf> {
    let theirs = profiles.parent()?.parent()?.join("pollux").join("profiles");
    theirs.is_dir().then_some(theirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_found_beside_either_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in [
            "pollux/profiles",
            "pollux/workloads",
            "sia/profiles",
            "sia/workloads/philly",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        assert_eq!(
            find_profiles(&root.join("pollux/workloads/workload-1.csv")),
            Some(root.join("pollux/profiles"))
        );
        assert_eq!(
            find_profiles(&root.join("sia/workloads/philly/workload-1.csv")),
            Some(root.join("sia/profiles"))
        );
        assert_eq!(
            find_validation(&root.join("sia/profiles")),
            Some(root.join("pollux/profiles"))
        );
    }
}
