//! Pollux's workload CSVs (`name,time,application,num_replicas,batch_size`).
//!
//! The workloads give no durations: a Pollux job runs until it reaches its target metric. Until the goodput
//! model lands, a job's duration is derived from Pollux's own profiles (measured on 4xT4 nodes): the
//! iterations its batch size needed to reach the end of its validation curve (`validation-<bsz>.csv`), times
//! the step time measured at the nearest replica count and per-replica batch size (`scalability.csv`).

use std::collections::BTreeMap;
use std::path::Path;

use super::rows::for_each_row;
use crate::error::{InputError, Source};
use crate::job::{Job, JobId, Trace, WorkUnit};

#[derive(Debug, Default)]
struct AppProfile {
    /// Batch size -> iterations to the end of the validation curve.
    iterations: BTreeMap<u32, f64>,
    /// (replicas, per-replica batch, step seconds).
    step_times: Vec<(u32, f64, f64)>,
}

/// The profiles of every application under a Pollux `profiles/` folder.
#[derive(Debug, Default)]
pub(crate) struct Profiles {
    apps: BTreeMap<String, AppProfile>,
}

impl Profiles {
    pub fn load(dir: &Path) -> Result<Profiles, InputError> {
        let entries = std::fs::read_dir(dir).map_err(|e| InputError::io(dir, e))?;
        let mut apps = BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(|e| InputError::io(dir, e))?;
            if entry.path().is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                apps.insert(name, load_app(&entry.path())?);
            }
        }
        Ok(Profiles { apps })
    }

    /// Seconds that `app` needs at `replicas` GPUs and global `batch` size.
    fn duration(&self, app: &str, replicas: u32, batch: u32) -> Result<f64, String> {
        let profile = self
            .apps
            .get(app)
            .ok_or_else(|| format!("no profile for application `{app}`"))?;
        let iterations = profile
            .iterations
            .get(&batch)
            .ok_or_else(|| format!("no validation-{batch}.csv profile for `{app}`"))?;
        let per_replica = f64::from(batch) / f64::from(replicas);
        let distance = |r: u32, b: f64| {
            let dr = (f64::from(r) / f64::from(replicas)).ln().abs();
            let db = (b / per_replica).ln().abs();
            (dr, db)
        };
        let step = profile
            .step_times
            .iter()
            .min_by(|a, b| {
                distance(a.0, a.1)
                    .partial_cmp(&distance(b.0, b.1))
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
            .map(|s| s.2)
            .ok_or_else(|| format!("empty scalability profile for `{app}`"))?;
        Ok(iterations * step)
    }
}

fn load_app(dir: &Path) -> Result<AppProfile, InputError> {
    let mut profile = AppProfile::default();
    let read = |path: &Path| crate::error::read_text(path);
    let entries = std::fs::read_dir(dir).map_err(|e| InputError::io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| InputError::io(dir, e))?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let Some(batch) = name
            .strip_prefix("validation-")
            .and_then(|s| s.strip_suffix(".csv"))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let mut last = 0.0f64;
        for_each_row(&Source::path(&path), &read(&path)?, b',', None, |row| {
            last = last.max(row.number_at_least("iteration", 0.0)?);
            Ok(())
        })?;
        profile.iterations.insert(batch, last);
    }
    let path = dir.join("scalability.csv");
    for_each_row(&Source::path(&path), &read(&path)?, b',', None, |row| {
        profile.step_times.push((
            row.gpu_count("num_replicas")?,
            row.number_at_least("local_bsz", 1.0)?,
            row.number_at_least("step_time", 0.0)?,
        ));
        Ok(())
    })?;
    Ok(profile)
}

pub(crate) fn parse(source: &Source, text: &str, profiles: &Profiles) -> Result<Trace, InputError> {
    let mut trace = Trace::new(source.to_string(), WorkUnit::Seconds);
    let tenant = trace.intern_tenant("default");
    for_each_row(source, text, b',', None, |row| {
        let app = row.text("application")?;
        let gpus = row.gpu_count("num_replicas")?;
        let batch: u32 = row.parse("batch_size")?;
        let seconds = profiles
            .duration(app, gpus, batch)
            .map_err(|m| InputError::field(source, row.line, "application", m))?;
        let job_type = trace.intern_job_type(app);
        trace.jobs.push(Job {
            id: JobId(0),
            arrival: row.arrival("time", 1.0)?,
            job_type,
            gpus,
            total_steps: seconds,
            weight: 1.0,
            tenant,
        });
        Ok(())
    })?;
    trace.sort_by_arrival();
    trace.renumber();
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles() -> Profiles {
        let mut apps = BTreeMap::new();
        apps.insert(
            "cifar10".to_owned(),
            AppProfile {
                iterations: BTreeMap::from([(2048, 1000.0)]),
                step_times: vec![(1, 32.0, 0.05), (4, 512.0, 0.2), (8, 256.0, 0.3)],
            },
        );
        Profiles { apps }
    }

    #[test]
    fn duration_uses_the_nearest_measured_configuration() {
        let text = "name,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,4,2048\n";
        let t = parse(&Source("w.csv".into()), text, &profiles()).unwrap();
        assert_eq!(t.jobs[0].gpus, 4);
        assert!((t.jobs[0].total_steps - 200.0).abs() < 1e-9);
        let err = parse(
            &Source("w.csv".into()),
            &text.replace("2048", "64"),
            &profiles(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "w.csv:2: field `application`: no validation-64.csv profile for `cifar10`"
        );
    }
}
