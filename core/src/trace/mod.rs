//! Trace readers. Each format is detected from its first line, or named with [`TraceFormat`].
//!
//! | format | first line | work |
//! |---|---|---|
//! | `gavel-continuous` | `job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps` | steps |
//! | `gavel-10` | 10 tab-separated columns, no header (Gavel's physical-cluster traces) | steps |
//! | `gavel-7` | 7 tab-separated columns, no header (Gavel's Philly-derived traces) | steps |
//! | `philly` | `timestamp,duration,num_gpus,gpu_time,cluster` | seconds |
//! | `tiresias` | `job_id,num_gpu,submit_time,...,duration,...` | seconds |
//! | `pollux` | `name,time,application,num_replicas,batch_size` | seconds, from Pollux's profiles |
//!
//! Every error names the file, the line and the field.

mod gavel;
mod philly;
mod pollux;
pub(crate) mod rows;
pub mod synthetic;
mod tiresias;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{InputError, Source};
use crate::job::Trace;

pub use synthetic::SyntheticSpec;

/// The trace formats gangway reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    GavelContinuous,
    Gavel10,
    Gavel7,
    Philly,
    Tiresias,
    Pollux,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 6] = [
        TraceFormat::GavelContinuous,
        TraceFormat::Gavel10,
        TraceFormat::Gavel7,
        TraceFormat::Philly,
        TraceFormat::Tiresias,
        TraceFormat::Pollux,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::GavelContinuous => "gavel-continuous",
            TraceFormat::Gavel10 => "gavel-10",
            TraceFormat::Gavel7 => "gavel-7",
            TraceFormat::Philly => "philly",
            TraceFormat::Tiresias => "tiresias",
            TraceFormat::Pollux => "pollux",
        }
    }

    /// Detects the format from the first line of a trace.
    pub fn detect(first_line: &str) -> Option<TraceFormat> {
        let line = first_line.trim_end_matches(['\r', '\n']);
        if line.contains('\t') {
            return match line.split('\t').count() {
                10 => Some(TraceFormat::Gavel10),
                7 => Some(TraceFormat::Gavel7),
                _ => None,
            };
        }
        let columns: Vec<&str> = line.split(',').map(str::trim).collect();
        let has = |names: &[&str]| names.iter().all(|n| columns.contains(n));
        if has(&[
            "job_id",
            "arrival_unit",
            "job_type",
            "scale_factor",
            "total_steps",
        ]) {
            Some(TraceFormat::GavelContinuous)
        } else if has(&["timestamp", "duration", "num_gpus"]) {
            Some(TraceFormat::Philly)
        } else if has(&["job_id", "num_gpu", "submit_time", "duration"]) {
            Some(TraceFormat::Tiresias)
        } else if has(&["name", "time", "application", "num_replicas", "batch_size"]) {
            Some(TraceFormat::Pollux)
        } else {
            None
        }
    }
}

impl FromStr for TraceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.name()).collect();
                format!("unknown trace format `{s}`; known: {}", names.join(", "))
            })
    }
}

/// Options that some formats need.
#[derive(Clone, Debug, Default)]
pub struct TraceOptions {
    /// Force a format instead of detecting it.
    pub format: Option<TraceFormat>,
    /// Input job rate in jobs/hour, for Gavel's continuous traces (arrival = unit x 3600 / rate).
    pub rate: Option<f64>,
    /// The application profiles of Pollux's or Sia's workloads; found beside the workload file when
    /// not given (see `pollux::find_profiles`).
    pub profiles: Option<PathBuf>,
}

/// Reads a trace file, detecting its format unless `options.format` names one.
pub fn load(path: &Path, options: &TraceOptions) -> Result<Trace, InputError> {
    let text = crate::error::read_text(path)?;
    let mut options = options.clone();
    if options.profiles.is_none() {
        options.profiles = pollux::find_profiles(path);
    }
    parse(&Source::path(path), &text, &options)
}

/// Reads the application profiles in `dir` (Pollux's or Sia's layout; Sia's takes its
/// statistical-efficiency files from Pollux's beside it).
pub fn load_profiles(dir: &Path) -> Result<crate::throughput::goodput::Profiles, InputError> {
    let validation = pollux::find_validation(dir);
    crate::throughput::goodput::Profiles::load(dir, validation.as_deref())
}

/// Parses trace text from `source` (used in messages).
pub fn parse(source: &Source, text: &str, options: &TraceOptions) -> Result<Trace, InputError> {
    let first = text.lines().next().unwrap_or("");
    let format = match options.format {
        Some(f) => f,
        None => TraceFormat::detect(first).ok_or_else(|| {
            InputError::whole(
                source,
                format!(
                    "cannot tell the trace format from its first line `{}`; pass --trace-format ({})",
                    first.chars().take(120).collect::<String>(),
                    TraceFormat::ALL.map(|f| f.name()).join(", ")
                ),
            )
        })?,
    };
    let trace = match format {
        TraceFormat::GavelContinuous => gavel::parse_continuous(source, text, options.rate)?,
        TraceFormat::Gavel10 => gavel::parse_tabbed(source, text, gavel::Columns::TEN)?,
        TraceFormat::Gavel7 => gavel::parse_tabbed(source, text, gavel::Columns::SEVEN)?,
        TraceFormat::Philly => philly::parse(source, text)?,
        TraceFormat::Tiresias => tiresias::parse(source, text)?,
        TraceFormat::Pollux => {
            let dir = options.profiles.as_deref().ok_or_else(|| {
                InputError::whole(
                    source,
                    "a Pollux or Sia workload needs its applications' profiles: pass --profiles DIR",
                )
            })?;
            pollux::parse(source, text, &load_profiles(dir)?, dir)?
        }
    };
    if trace.jobs.is_empty() {
        return Err(InputError::whole(source, "the trace has no jobs"));
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_every_format_from_its_first_line() {
        let cases = [
            (
                "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps",
                TraceFormat::GavelContinuous,
            ),
            ("a\tb\tc\td\te\tf\tg\th\ti\tj", TraceFormat::Gavel10),
            ("a\tb\tc\td\te\tf\tg", TraceFormat::Gavel7),
            (
                "timestamp,duration,num_gpus,gpu_time,cluster",
                TraceFormat::Philly,
            ),
            (
                "job_id,num_gpu,submit_time,iterations,model_name,duration,interval",
                TraceFormat::Tiresias,
            ),
            (
                "name,time,application,num_replicas,batch_size",
                TraceFormat::Pollux,
            ),
        ];
        for (line, format) in cases {
            assert_eq!(TraceFormat::detect(line), Some(format), "{line}");
            assert_eq!(format.name().parse::<TraceFormat>(), Ok(format));
        }
        assert_eq!(TraceFormat::detect("what,is,this"), None);
    }

    #[test]
    fn unknown_format_names_the_file_and_the_options() {
        let err = parse(
            &Source("t.csv".into()),
            "a,b\n1,2\n",
            &TraceOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("t.csv: cannot tell"), "{err}");
        assert!(err.contains("--trace-format"), "{err}");
    }
}
