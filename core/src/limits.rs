//! The ranges every number read from input must fall in: traces, application profiles, throughput
//! tables, cluster files and the command line's options. Each range is far beyond any real job or
//! cluster, and finite: a value outside one is a unit mistake or an attack (a duration of 1e300 s, a
//! batch of 1e20, a round of 1e300 s), refused where it is read with the range it broke, instead of
//! a job that never runs or figures with hundreds of digits.

use std::fmt;

use crate::engine::EngineConfig;

pub use crate::cluster::MAX_GPUS;
pub use crate::engine::MAX_JOB_SECONDS;
pub use crate::error::MAX_INPUT_BYTES;
pub use crate::job::MAX_ARRIVAL_SECONDS;

/// Most steps (iterations) a job may take: a thousand a second for about 30 years. Gavel's longest
/// trace job has 3.9e8.
pub const MAX_STEPS: f64 = 1e12;
/// The smallest priority weight (the API's bound).
pub const MIN_WEIGHT: f64 = 1e-6;
/// The largest priority weight: a million times the default 1 (the API's bound).
pub const MAX_WEIGHT: f64 = 1e6;
/// The largest batch, global or per replica, in samples (the API's bound); the peers' largest is
/// 32,768.
pub const MAX_BATCH: u32 = 1 << 24;
/// The longest one training step may take: a day. Pollux's slowest measured step takes 13 s.
pub const MAX_STEP_SECONDS: f64 = 86_400.0;
/// The fastest a throughput table may say a job runs, in steps per second (Gavel's fastest: 700).
pub const MAX_STEPS_PER_SECOND: f64 = 1e6;
/// Gradient statistics (Pollux's `grad_sqr`, `grad_var`) beyond this overflow its gain's arithmetic;
/// the profiles' largest is 7.4e15.
pub const MAX_GRAD_STAT: f64 = 1e100;
/// The longest scheduling round: a day (Gavel's is 360 s, Pollux's and Sia's 60 s).
pub const MAX_ROUND_SECONDS: f64 = 86_400.0;
/// The longest a checkpoint, a restore or a move may cost: a day.
pub const MAX_COST_SECONDS: f64 = 86_400.0;
/// The highest job rate, in jobs per hour (Gavel's experiments: 0.4 to 6).
pub const MAX_RATE: f64 = 1e6;
/// The most a load factor may compress (or stretch) arrivals.
pub const MAX_LOAD_FACTOR: f64 = 1e6;
/// The most a control plane's clock may run ahead of the wall clock (simulated workers).
pub const MAX_TIME_SCALE: f64 = 1e6;

/// What a range counts, singular and plural, as messages say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The unit after 1, as in `1 second`.
    pub one: &'static str,
    /// The unit after any other number, as in `0.5 seconds`.
    pub many: &'static str,
}

impl Unit {
    /// Seconds: arrivals, work, step times, rounds and costs.
    pub const SECONDS: Unit = Unit {
        one: "second",
        many: "seconds",
    };
    /// Steps (iterations): a job's work, or its training progress.
    pub const STEPS: Unit = Unit {
        one: "step",
        many: "steps",
    };
    /// Samples: batch sizes, global or per replica.
    pub const SAMPLES: Unit = Unit {
        one: "sample",
        many: "samples",
    };
    /// GPUs: how many a job asks for.
    pub const GPUS: Unit = Unit {
        one: "GPU",
        many: "GPUs",
    };
    /// Jobs per hour: an input job rate (`--rate`).
    pub const JOBS_PER_HOUR: Unit = Unit {
        one: "job per hour",
        many: "jobs per hour",
    };
    /// Steps per second: a throughput table's rates.
    pub const STEPS_PER_SECOND: Unit = Unit {
        one: "step per second",
        many: "steps per second",
    };
    /// A plain number.
    pub const NONE: Unit = Unit { one: "", many: "" };
}

/// A range of values and its unit: `at least 0 steps and at most 1e12 steps`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    /// The least value in range or, with `above_min`, the bound values must exceed.
    pub min: f64,
    /// The largest value in range, always included.
    pub max: f64,
    /// `min` itself is out of range (a step time must be above 0).
    pub above_min: bool,
    /// What the values count, for messages.
    pub unit: Unit,
}

impl Range {
    /// From `min` to `max`, both in.
    pub const fn new(min: f64, max: f64, unit: Unit) -> Range {
        Range {
            min,
            max,
            above_min: false,
            unit,
        }
    }

    /// Above `min`, up to `max`.
    pub const fn above(min: f64, max: f64, unit: Unit) -> Range {
        Range {
            min,
            max,
            above_min: true,
            unit,
        }
    }

    /// Whether `value` is in range (NaN and infinities never are).
    pub fn contains(&self, value: f64) -> bool {
        let low = if self.above_min {
            value > self.min
        } else {
            value >= self.min
        };
        value.is_finite() && low && value <= self.max
    }

    /// `value` if it is in range, else what is wrong with it: `1e300 is out of range (...)`.
    pub fn check(&self, value: f64) -> Result<f64, String> {
        if self.contains(value) {
            Ok(value)
        } else {
            Err(format!("{} is out of range: {self}", number(value)))
        }
    }

    /// Checks a command-line option: `--round must be at least 1 second and at most 86400 seconds
    /// (got 1e300)`.
    pub fn check_option(&self, option: &str, value: f64) -> Result<f64, String> {
        if self.contains(value) {
            Ok(value)
        } else {
            Err(format!("{option} {self} (got {})", number(value)))
        }
    }

    fn amount(&self, value: f64) -> String {
        let unit = if value == 1.0 {
            self.unit.one
        } else {
            self.unit.many
        };
        match unit {
            "" => number(value),
            unit => format!("{} {unit}", number(value)),
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let low = if self.above_min {
            "more than"
        } else {
            "at least"
        };
        write!(
            f,
            "must be {low} {} and at most {}",
            self.amount(self.min),
            self.amount(self.max)
        )
    }
}

/// A number as people read it (`86400`, `1e300`; never 300 digits): the topology files' readers
/// say numbers so too.
pub use gangway_topology::file::number;

/// A job's work in steps (Gavel's traces, and the iterations of Synergy's).
pub const STEPS: Range = Range::new(0.0, MAX_STEPS, Unit::STEPS);
/// A job's work in seconds at its requested GPUs (Philly's, Tiresias' and Synergy's traces).
pub const WORK_SECONDS: Range = Range::new(0.0, MAX_JOB_SECONDS, Unit::SECONDS);
/// A job's arrival, in seconds from the start of its trace.
pub const ARRIVAL_SECONDS: Range = Range::new(0.0, MAX_ARRIVAL_SECONDS, Unit::SECONDS);
/// A job's priority weight.
pub const WEIGHT: Range = Range::new(MIN_WEIGHT, MAX_WEIGHT, Unit::NONE);
/// A batch, global or per replica.
pub const BATCH: Range = Range::new(1.0, MAX_BATCH as f64, Unit::SAMPLES);
/// The GPUs one job asks for: no more than any cluster may have.
pub const JOB_GPUS: Range = Range::new(1.0, MAX_GPUS as f64, Unit::GPUS);
/// A measured step's time.
pub const STEP_SECONDS: Range = Range::above(0.0, MAX_STEP_SECONDS, Unit::SECONDS);
/// The part of a measured step spent synchronizing.
pub const SYNC_SECONDS: Range = Range::new(0.0, MAX_STEP_SECONDS, Unit::SECONDS);
/// Training progress in a validation profile (iterations at the application's initial batch).
pub const PROGRESS: Range = Range::new(0.0, MAX_STEPS, Unit::STEPS);
/// A gradient statistic in a validation profile.
pub const GRAD_STAT: Range = Range::new(0.0, MAX_GRAD_STAT, Unit::NONE);
/// A rate in a throughput table.
pub const STEPS_PER_SECOND: Range = Range::new(0.0, MAX_STEPS_PER_SECOND, Unit::STEPS_PER_SECOND);
/// A job's service in GPU-seconds (a Gittins distribution's values): its longest work on every GPU
/// a cluster may have.
pub const SERVICE_GPU_SECONDS: Range = Range::new(
    0.0,
    MAX_JOB_SECONDS * MAX_GPUS as f64,
    Unit {
        one: "GPU-second",
        many: "GPU-seconds",
    },
);
/// A scheduling round's length.
pub const ROUND_SECONDS: Range = Range::new(
    EngineConfig::MIN_ROUND_SECONDS,
    MAX_ROUND_SECONDS,
    Unit::SECONDS,
);
/// A preemption's, restore's or move's cost.
pub const COST_SECONDS: Range = Range::new(0.0, MAX_COST_SECONDS, Unit::SECONDS);
/// An input job rate.
pub const RATE: Range = Range::above(0.0, MAX_RATE, Unit::JOBS_PER_HOUR);
/// A load factor (arrival times are divided by it).
pub const LOAD_FACTOR: Range = Range::above(0.0, MAX_LOAD_FACTOR, Unit::NONE);
/// How much faster than the wall clock a control plane's time runs.
pub const TIME_SCALE: Range = Range::above(0.0, MAX_TIME_SCALE, Unit::NONE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_say_what_they_are_and_refuse_what_is_not_finite() {
        assert_eq!(
            ROUND_SECONDS.check_option("--round", 1e300),
            Err("--round must be at least 1 second and at most 86400 seconds (got 1e300)".into())
        );
        assert_eq!(
            STEP_SECONDS.check(0.0),
            Err("0 is out of range: must be more than 0 seconds and at most 86400 seconds".into())
        );
        assert_eq!(
            STEPS.check(1e23),
            Err("1e23 is out of range: must be at least 0 steps and at most 1e12 steps".into())
        );
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.5] {
            assert!(STEPS.check(bad).is_err(), "{bad}");
        }
        assert_eq!(STEPS.check(0.0), Ok(0.0));
        assert_eq!(ROUND_SECONDS.check(360.0), Ok(360.0));
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(1e-9), "1e-9");
        assert_eq!(number(86400.0), "86400");
    }
}
