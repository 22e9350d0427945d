//! Goodput workloads of any size, resampled from reference ones in Pollux's and Sia's format
//! (`name,time,application,num_replicas,batch_size`): each job's application, GPUs and batch are
//! drawn from the reference rows, and arrivals are a Poisson process at the references' load per GPU,
//! scaled to the cluster the new workload is for. Sia's philly workloads bring 160 jobs in about 7.7
//! hours to 64 GPUs, about 0.33 jobs per GPU-hour; at 2,048 GPUs that is 660 jobs an hour.
//!
//! ChaCha8 keeps a workload identical on every machine for the same references and seed.

use std::path::Path;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::rows::for_each_row;
use super::synthetic::uniform;
use crate::error::{InputError, Source};

/// A job of a goodput workload, as its CSV row has it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadJob {
    /// Its name (`application-index`).
    pub name: String,
    /// Arrival, seconds from the start.
    pub time: f64,
    /// The application its profiles measure.
    pub application: String,
    /// The GPUs the workload tuned it to.
    pub num_replicas: u32,
    /// The global batch the workload tuned it to.
    pub batch_size: u32,
}

/// Reference workloads: their jobs and the load they put on their cluster.
#[derive(Clone, Debug)]
pub struct Reference {
    jobs: Vec<WorkloadJob>,
    /// Jobs per hour per GPU of the cluster they were made for.
    jobs_per_gpu_hour: f64,
}

impl Reference {
    /// Reads reference workloads made for a cluster of `gpus` GPUs. Each one's load is its jobs over
    /// its last arrival.
    pub fn read(paths: &[&Path], gpus: u32) -> Result<Self, InputError> {
        let mut jobs = Vec::new();
        let mut hours = 0.0;
        for path in paths {
            let source = Source::path(path);
            let text = crate::error::read_text(path)?;
            let mut last = 0.0f64;
            for_each_row(&source, &text, b',', None, |row| {
                let time = row.arrival("time", 1.0)?;
                last = last.max(time);
                jobs.push(WorkloadJob {
                    name: String::new(),
                    time,
                    application: row.text("application")?.to_owned(),
                    num_replicas: row.gpu_count("num_replicas")?,
                    batch_size: row.batch("batch_size")?,
                });
                Ok(())
            })?;
            hours += last / 3600.0;
        }
        let source = Source(
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        );
        if jobs.is_empty() || hours <= 0.0 || gpus == 0 {
            return Err(InputError::whole(
                &source,
                "the reference workloads need jobs arriving over some time, on some GPUs",
            ));
        }
        let jobs_per_gpu_hour = jobs.len() as f64 / hours / f64::from(gpus);
        Ok(Self {
            jobs,
            jobs_per_gpu_hour,
        })
    }

    /// Jobs per hour per GPU of the cluster the references were made for.
    pub fn jobs_per_gpu_hour(&self) -> f64 {
        self.jobs_per_gpu_hour
    }

    /// `jobs` jobs for a cluster of `gpus` GPUs, at the references' load per GPU, drawn with `seed`.
    pub fn resample(&self, jobs: u32, gpus: u32, seed: u64) -> Vec<WorkloadJob> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mean_gap = 3600.0 / (self.jobs_per_gpu_hour * f64::from(gpus.max(1)));
        let mut time = 0.0;
        (0..jobs)
            .map(|i| {
                let like = &self.jobs[(uniform(&mut rng) * self.jobs.len() as f64) as usize];
                time += -(1.0 - uniform(&mut rng)).ln() * mean_gap;
                WorkloadJob {
                    name: format!("{}-{i}", like.application),
                    time: (time * 1000.0).round() / 1000.0,
                    ..like.clone()
                }
            })
            .collect()
    }
}

/// Writes `jobs` as a workload CSV, in the references' format.
pub fn write_csv(jobs: &[WorkloadJob], out: impl std::io::Write) -> csv::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    writer.write_record(["name", "time", "application", "num_replicas", "batch_size"])?;
    for job in jobs {
        writer.write_record([
            job.name.as_str(),
            &job.time.to_string(),
            &job.application,
            &job.num_replicas.to_string(),
            &job.batch_size.to_string(),
        ])?;
    }
    writer.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> (tempfile::TempDir, Reference) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("workload-1.csv");
        std::fs::write(
            &path,
            "name,time,application,num_replicas,batch_size\n\
             cifar10-0,0,cifar10,4,2048\nbert-1,1800,bert,8,384\n\
             yolov3-2,3600,yolov3,2,64\nbert-3,7200,bert,8,384\n",
        )
        .unwrap();
        let reference = Reference::read(&[&path], 8).unwrap();
        (dir, reference)
    }

    #[test]
    fn the_load_per_gpu_is_the_references_scaled_to_the_cluster() {
        let (_dir, reference) = reference();
        // 4 jobs in 2 hours on 8 GPUs.
        assert_eq!(reference.jobs_per_gpu_hour(), 0.25);
        // On 32 GPUs: 8 jobs an hour, so 4,000 jobs take about 500 hours.
        let jobs = reference.resample(4000, 32, 7);
        let hours = jobs.last().unwrap().time / 3600.0;
        assert!((480.0..520.0).contains(&hours), "{hours} h");
        assert!(jobs.windows(2).all(|w| w[0].time <= w[1].time));
        // Every job is one of the references', under its own name.
        for job in &jobs {
            assert!(
                reference
                    .jobs
                    .iter()
                    .any(|r| r.application == job.application
                        && r.num_replicas == job.num_replicas
                        && r.batch_size == job.batch_size)
            );
        }
        assert_eq!(jobs[10].name, format!("{}-10", jobs[10].application));
    }

    #[test]
    fn one_seed_one_workload_and_it_reads_back() {
        let (dir, reference) = reference();
        assert_eq!(reference.resample(50, 64, 1), reference.resample(50, 64, 1));
        assert_ne!(reference.resample(50, 64, 1), reference.resample(50, 64, 2));
        let jobs = reference.resample(50, 64, 1);
        let path = dir.path().join("again.csv");
        write_csv(&jobs, std::fs::File::create(&path).unwrap()).unwrap();
        let again = Reference::read(&[&path], 64).unwrap();
        assert_eq!(again.jobs.len(), 50);
        assert_eq!(again.jobs[49].time, jobs[49].time);
    }

    #[test]
    fn a_bad_reference_names_its_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.csv");
        std::fs::write(
            &path,
            "name,time,application,num_replicas,batch_size\na,0,bert,many,384\n",
        )
        .unwrap();
        let e = Reference::read(&[&path], 64).unwrap_err().to_string();
        assert!(
            e.contains("w.csv") && e.contains('2') && e.contains("num_replicas"),
            "{e}"
        );
    }
}
