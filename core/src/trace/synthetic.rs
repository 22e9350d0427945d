//! A seeded generator with Gavel's job model (Narayanan et al., OSDI'20, and its `generate_job`):
//! - the job type is drawn uniformly from the throughput table's job types;
//! - the duration on one V100 is `60 * 10^U(1.5, 3)` seconds with probability 0.8, else `60 * 10^U(3, 4)`;
//! - with `multi=true`, the scale factor is 1, 2, 4 or 8 with probability 0.7, 0.1, 0.15, 0.05 (types that
//!   cannot run distributed stay at 1);
//! - interarrival times are exponential with mean `3600 / rate` seconds;
//! - total steps = duration x the type's isolated V100 throughput at its scale factor.
//!
//! Written as `synthetic:jobs=N,seed=S[,rate=R][,multi=true]`. ChaCha8 keeps it identical on every machine.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use crate::error::{InputError, Source};
use crate::job::{Job, JobId, MAX_ARRIVAL_SECONDS, Trace, WorkUnit};
use crate::throughput::ThroughputTable;

/// Most jobs a synthetic trace may have.
pub const MAX_SYNTHETIC_JOBS: u32 = 10_000_000;

/// Parameters of a synthetic trace.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    /// How many jobs, at most [`MAX_SYNTHETIC_JOBS`].
    pub jobs: u32,
    /// Seeds the draws of arrivals, job types and sizes: one seed, one trace.
    pub seed: u64,
    /// Jobs per hour.
    pub rate: f64,
    /// Draw multi-GPU scale factors.
    pub multi_gpu: bool,
}

impl SyntheticSpec {
    /// Parses `synthetic:jobs=N,seed=S[,rate=R][,multi=true]`; `rate` defaults to `default_rate`.
    pub fn parse(spec: &str, default_rate: Option<f64>) -> Result<Self, InputError> {
        let source = Source(spec.to_owned());
        let body = spec
            .strip_prefix("synthetic:")
            .ok_or_else(|| InputError::whole(&source, "expected `synthetic:jobs=N,seed=S`"))?;
        let mut out = SyntheticSpec {
            jobs: 0,
            seed: 0,
            rate: default_rate.unwrap_or(1.0),
            multi_gpu: false,
        };
        let mut given: Vec<&str> = Vec::new();
        for item in body.split(',').filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| InputError::whole(&source, format!("`{item}` is not KEY=VALUE")))?;
            if given.contains(&key) {
                return Err(InputError::whole(
                    &source,
                    format!("`{key}` is given twice"),
                ));
            }
            given.push(key);
            let bad = || InputError::whole(&source, format!("`{key}`: `{value}` is not valid"));
            match key {
                "jobs" => out.jobs = value.parse().map_err(|_| bad())?,
                "seed" => out.seed = value.parse().map_err(|_| bad())?,
                "rate" => out.rate = value.parse().map_err(|_| bad())?,
                "multi" => out.multi_gpu = value.parse().map_err(|_| bad())?,
                _ => {
                    return Err(InputError::whole(
                        &source,
                        format!("unknown key `{key}` (known: jobs, seed, rate, multi)"),
                    ));
                }
            }
        }
        if !(1..=MAX_SYNTHETIC_JOBS).contains(&out.jobs) {
            return Err(InputError::whole(
                &source,
                format!("`jobs` must be from 1 to {MAX_SYNTHETIC_JOBS}"),
            ));
        }
        if !(out.rate.is_finite() && out.rate > 0.0) {
            return Err(InputError::whole(&source, "`rate` must be positive"));
        }
        Ok(out)
    }

    /// Generates the trace. `reference_gpu` (Gavel: `v100`) sets how durations become steps.
    pub fn generate(
        &self,
        table: &ThroughputTable,
        reference_gpu: &str,
    ) -> Result<Trace, InputError> {
        let source = Source(format!(
            "synthetic:jobs={},seed={},rate={},multi={}",
            self.jobs, self.seed, self.rate, self.multi_gpu
        ));
        let types = table.job_types();
        if types.is_empty() {
            return Err(InputError::whole(
                &source,
                "the throughput table has no job types",
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut trace = Trace::new(source.to_string(), WorkUnit::Steps);
        let tenant = trace.intern_tenant("default");
        let mut arrival = 0.0;
        for i in 0..self.jobs {
            let (name, distributed) = &types[(uniform(&mut rng) * types.len() as f64) as usize];
            let draw = uniform(&mut rng);
            let gpus = match (self.multi_gpu && *distributed, draw) {
                (false, _) => 1,
                (true, r) if r < 0.7 => 1,
                (true, r) if r < 0.8 => 2,
                (true, r) if r < 0.95 => 4,
                (true, _) => 8,
            };
            let exponent = if uniform(&mut rng) >= 0.8 {
                3.0 + uniform(&mut rng)
            } else {
                1.5 + 1.5 * uniform(&mut rng)
            };
            let duration = 60.0 * 10f64.powf(exponent);
            let rate = table.alone(reference_gpu, name, gpus).ok_or_else(|| {
                InputError::whole(
                    &source,
                    format!("no `{reference_gpu}` throughput for `{name}` at scale factor {gpus}"),
                )
            })?;
            let job_type = trace.intern_job_type(name);
            trace.jobs.push(
                Job::new(JobId(i), arrival, gpus, duration * rate)
                    .with_type(job_type)
                    .with_tenant(tenant),
            );
            arrival += -(1.0 - uniform(&mut rng)).ln() * 3600.0 / self.rate;
            if i + 1 < self.jobs && arrival > MAX_ARRIVAL_SECONDS {
                return Err(InputError::whole(
                    &source,
                    format!(
                        "job {} would arrive at {arrival:e} s, after the latest gangway simulates ({MAX_ARRIVAL_SECONDS:e} s); raise the rate",
                        i + 1
                    ),
                ));
            }
        }
        Ok(trace)
    }
}

/// A uniform draw in [0, 1) with 53 random bits.
pub(super) fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> ThroughputTable {
        ThroughputTable::parse(
            &Source("t".into()),
            r#"{"v100": {"('A', 1)": {"null": 2.0}, "('A', 2)": {"null": 3.0}, "('A', 4)": {"null": 5.0},
               "('A', 8)": {"null": 9.0}, "('B', 1)": {"null": 1.0}}}"#,
        )
        .unwrap()
    }

    #[test]
    fn parses_and_rejects_specs() {
        let s = SyntheticSpec::parse("synthetic:jobs=10,seed=3,multi=true", Some(2.0)).unwrap();
        assert_eq!((s.jobs, s.seed, s.rate, s.multi_gpu), (10, 3, 2.0, true));
        for bad in [
            "synthetic:",
            "synthetic:jobs=x",
            "synthetic:jobs=3,colour=red",
            "jobs=3",
        ] {
            assert!(SyntheticSpec::parse(bad, None).is_err(), "{bad}");
        }
        let err = SyntheticSpec::parse("synthetic:jobs=10,jobs=20", None)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "synthetic:jobs=10,jobs=20: `jobs` is given twice");
        let err = SyntheticSpec::parse("synthetic:jobs=4294967295", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("from 1 to 10000000"), "{err}");
        let err = SyntheticSpec::parse("synthetic:jobs=3,rate=1e-300", None)
            .unwrap()
            .generate(&table(), "v100")
            .unwrap_err()
            .to_string();
        assert!(err.contains("raise the rate"), "{err}");
    }

    #[test]
    fn same_seed_same_trace_and_the_model_holds() {
        let spec =
            SyntheticSpec::parse("synthetic:jobs=4000,seed=7,rate=4,multi=true", None).unwrap();
        let a = spec.generate(&table(), "v100").unwrap();
        let b = spec.generate(&table(), "v100").unwrap();
        assert_eq!(a, b);
        let other = SyntheticSpec {
            seed: 8,
            ..spec.clone()
        }
        .generate(&table(), "v100")
        .unwrap();
        assert_ne!(a, other);
        // Mean interarrival is 3600/rate = 900 s.
        let last = a.jobs.last().unwrap().arrival;
        let mean = last / 3999.0;
        assert!((mean - 900.0).abs() < 60.0, "mean interarrival {mean}");
        // Type B cannot run distributed; type A gets about 30% multi-GPU jobs.
        let b_type = a
            .jobs
            .iter()
            .find(|j| a.job_type_name(j.job_type) == "B")
            .unwrap()
            .job_type;
        assert!(
            a.jobs
                .iter()
                .filter(|j| j.job_type == b_type)
                .all(|j| j.gpus == 1)
        );
        let a_jobs: Vec<&Job> = a.jobs.iter().filter(|j| j.job_type != b_type).collect();
        let multi = a_jobs.iter().filter(|j| j.gpus > 1).count() as f64 / a_jobs.len() as f64;
        assert!((multi - 0.3).abs() < 0.05, "multi-GPU share {multi}");
        // Durations are within Gavel's bounds: 60*10^1.5 .. 60*10^4 seconds.
        for j in &a.jobs {
            let rate = table()
                .alone("v100", a.job_type_name(j.job_type), j.gpus)
                .unwrap();
            let d = j.total_steps / rate;
            assert!(
                (60.0 * 10f64.powf(1.5) - 1e-6..=600_000.0).contains(&d),
                "{d}"
            );
        }
    }
}
