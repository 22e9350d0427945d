//! Trace readers. Each format is detected from its first line, or named with [`TraceFormat`].
//!
//! | format | first line | work |
//! |---|---|---|
//! | `gavel-continuous` | `job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps` | steps |
//! | `gavel-10` | 10 tab-separated columns, no header (Gavel's physical-cluster traces) | steps |
//! | `gavel-7` | 7 tab-separated columns, no header (Gavel's Philly-derived traces) | steps |
//! | `philly` | `timestamp,duration,num_gpus,gpu_time,cluster` | seconds |
//! | `tiresias` | `job_id,num_gpu,submit_time,...,duration,...` | seconds |
//! | `pollux` | `name,time,application,num_replicas,batch_size` | progress, from Pollux's or Sia's profiles |
//! | `synergy` | `job_id,model,arrival,iterations,gpus`, no header (Synergy's deploy traces) | seconds at the proportional share, from Synergy's profiles |
//!
//! Every error names the file, the line and the field.

mod gavel;
mod philly;
mod pollux;
pub mod resample;
pub(crate) mod rows;
pub mod synergy;
pub mod synthetic;
mod tiresias;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use crate::cluster::Cluster;
use crate::engine::{Engine, EngineConfig, Unrunnable};
use crate::error::{InputError, Source};
use crate::job::{JobId, Trace};
use crate::throughput::ThroughputModel;

pub use synthetic::SyntheticSpec;

/// The trace formats gangway reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Gavel's continuous traces (`gavel-continuous`): arrivals in mean interarrival times, scaled
    /// by the job rate (`--rate`); work in steps.
    GavelContinuous,
    /// Gavel's physical-cluster traces (`gavel-10`): 10 tab-separated columns, work in steps.
    Gavel10,
    /// Gavel's Philly-derived traces (`gavel-7`): 7 tab-separated columns, work in steps.
    Gavel7,
    /// Microsoft's Philly trace (`philly`): durations in seconds.
    Philly,
    /// Tiresias' traces (`tiresias`): durations in seconds.
    Tiresias,
    /// Pollux's and Sia's workloads (`pollux`): elastic jobs of profiled applications, their work
    /// in training progress.
    Pollux,
    /// Synergy's deploy traces (`synergy`): iterations, as seconds at the proportional share from
    /// Synergy's profiles.
    Synergy,
}

impl TraceFormat {
    /// Every format, in the order listings and error messages show them.
    pub const ALL: [TraceFormat; 7] = [
        TraceFormat::GavelContinuous,
        TraceFormat::Gavel10,
        TraceFormat::Gavel7,
        TraceFormat::Philly,
        TraceFormat::Tiresias,
        TraceFormat::Pollux,
        TraceFormat::Synergy,
    ];

    /// Its name, as `--trace-format` takes it: `gavel-continuous`, `philly`, ...
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::GavelContinuous => "gavel-continuous",
            TraceFormat::Gavel10 => "gavel-10",
            TraceFormat::Gavel7 => "gavel-7",
            TraceFormat::Philly => "philly",
            TraceFormat::Tiresias => "tiresias",
            TraceFormat::Pollux => "pollux",
            TraceFormat::Synergy => "synergy",
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
        } else if synergy::looks_like(line) {
            Some(TraceFormat::Synergy)
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

/// Where a trace file's jobs were read: each job's line, and the columns that hold what can make a
/// job unable to run (its GPUs, its work, its type), for errors found after reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    /// The line of each job's row, by job id.
    pub lines: HashMap<JobId, u64>,
    /// The format's column names, for the field an error names.
    pub columns: JobColumns,
}

/// The columns of a trace format that hold a job's GPUs, its work and its type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobColumns {
    /// The column of its GPU count (`num_gpus`, `scale_factor`, ...).
    pub gpus: &'static str,
    /// The column of its work (`total_steps`, `duration`, ...).
    pub work: &'static str,
    /// The column that decides its rates (its model, or what stands for it).
    pub job_type: &'static str,
}

impl Rows {
    /// `job`'s line, as `file:line`-style errors name it.
    pub fn line_of(&self, job: JobId) -> Option<u64> {
        self.lines.get(&job).copied()
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
    let first = text.lines().next().unwrap_or("");
    let synergy = match options.format {
        Some(f) => f == TraceFormat::Synergy,
        None => TraceFormat::detect(first) == Some(TraceFormat::Synergy),
    };
    if synergy {
        options.profiles = synergy::find_profiles(path, options.profiles.as_deref());
    } else if options.profiles.is_none() {
        options.profiles = pollux::find_profiles(path);
    }
    parse(&Source::path(path), &text, &options)
}

/// The profiles of the Pollux or Sia workload at `path`: the `profiles/` folder beside its folder, or
/// beside the one above (where [`load`] looks when [`TraceOptions::profiles`] is not given).
pub fn profiles_beside(path: &Path) -> Option<PathBuf> {
    pollux::find_profiles(path)
}

/// The cluster and round length a workload was made for, when it names them by its kind: Pollux's
/// workloads ran on 16 servers of 4 T4s, Sia's (profiles per GPU type) on 6 servers of 4 T4s ("aws"), 3 of
/// 8 RTX 2080Ti and 2 of 8 A100s ("dgx-ext"), both with 60 s rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NativeSetup {
    /// A `--cluster` spec.
    pub cluster: &'static str,
    /// Its round length, in seconds.
    pub round_seconds: f64,
    /// Whose setup it is, for messages.
    pub origin: &'static str,
}

/// The setup `path`'s workload was made for, if it is a Pollux or Sia workload (read from its first
/// line and its profiles' layout); `None` for other traces or when it cannot be read.
pub fn native_setup(path: &Path, options: &TraceOptions) -> Option<NativeSetup> {
    use std::io::BufRead;
    let mut first = String::new();
    // Opened as every input is: a FIFO must not hang this look before the trace is read.
    std::io::BufReader::new(crate::error::open_input(path).ok()?)
        .read_line(&mut first)
        .ok()?;
    let format = options.format.or_else(|| TraceFormat::detect(&first))?;
    if format != TraceFormat::Pollux {
        return None;
    }
    let profiles = options
        .profiles
        .clone()
        .or_else(|| pollux::find_profiles(path))?;
    // Sia's profiles have one placements file per GPU type in each application's folder.
    let per_type = std::fs::read_dir(&profiles).ok()?.flatten().any(|app| {
        std::fs::read_dir(app.path()).is_ok_and(|files| {
            files.flatten().any(|f| {
                let name = f.file_name();
                let name = name.to_string_lossy();
                name.starts_with("placements-") && name.ends_with(".csv")
            })
        })
    });
    Some(if per_type {
        NativeSetup {
            cluster: "aws=6x4,rtx=3x8,dgx-ext=2x8",
            round_seconds: 60.0,
            origin: "Sia's heterogeneous cluster",
        }
    } else {
        NativeSetup {
            cluster: "t4=16x4",
            round_seconds: 60.0,
            origin: "Pollux's cluster",
        }
    })
}

/// Reads the application profiles in `dir` (Pollux's or Sia's layout; Sia's takes its
/// statistical-efficiency files from Pollux's beside it).
pub fn load_profiles(dir: &Path) -> Result<crate::throughput::goodput::Profiles, InputError> {
    let validation = pollux::find_validation(dir);
    crate::throughput::goodput::Profiles::load(dir, validation.as_deref())
}

/// Checks that every job of `trace` could run on `cluster` under `model`, as the engine admits jobs:
/// its gang fits some GPU type, the model has a rate for it there, and its work ends within
/// [`crate::limits::MAX_JOB_SECONDS`]. A job that never could is an error naming the file, the line
/// and the field that keeps it out (its GPUs, its type, its work), whichever cluster was chosen and
/// whenever: a run would only leave it waiting for ever.
pub fn check_runnable(
    trace: &Trace,
    cluster: &Arc<Cluster>,
    model: &dyn ThroughputModel,
) -> Result<(), InputError> {
    let engine = Engine::new(
        Arc::clone(cluster),
        Arc::new(model),
        EngineConfig::default(),
        trace.names.clone(),
        0.0,
    );
    let source = Source(trace.source.clone());
    for job in &trace.jobs {
        let Err(why) = engine.check(job) else {
            continue;
        };
        let message = format!(
            "job {} can never run on this cluster ({}): {why}",
            job.id,
            cluster.describe()
        );
        let at = trace
            .rows
            .as_ref()
            .and_then(|rows| Some((rows.line_of(job.id)?, rows.columns)));
        return Err(match at {
            Some((line, columns)) => {
                let field = match why {
                    Unrunnable::GangTooLarge { .. } => columns.gpus,
                    Unrunnable::NoRate { .. } => columns.job_type,
                    Unrunnable::TooLong { .. } => columns.work,
                };
                InputError::field(&source, line, field, message)
            }
            None => InputError::whole(&source, message),
        });
    }
    Ok(())
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
        TraceFormat::Synergy => {
            let path = options.profiles.as_deref().ok_or_else(|| {
                InputError::whole(
                    source,
                    format!(
                        "a Synergy trace needs Synergy's profiles: pass --profiles {}",
                        synergy::PROFILES_FILE
                    ),
                )
            })?;
            // A folder stands for the profiles file in it.
            let file = if path.is_dir() {
                let file = path.join(synergy::PROFILES_FILE);
                // Whatever is there is read as inputs are: a FIFO is refused, naming what it is.
                if !file.exists() {
                    return Err(InputError::whole(
                        source,
                        format!(
                            "a Synergy trace needs Synergy's profiles: {} has no {}",
                            path.display(),
                            synergy::PROFILES_FILE
                        ),
                    ));
                }
                file
            } else {
                path.to_path_buf()
            };
            let profiles = crate::throughput::resources::ResourceProfiles::load(&file, "models")?;
            synergy::parse(source, text, &profiles, &file)?
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
    fn a_folder_given_for_synergys_profiles_must_hold_them_and_the_error_names_the_trace() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("trace.log");
        std::fs::write(&trace, "0,res18,0,1000,1\n").unwrap();
        let options = TraceOptions {
            format: Some(TraceFormat::Synergy),
            profiles: Some(dir.path().to_path_buf()),
            ..TraceOptions::default()
        };
        let error = load(&trace, &options).unwrap_err().to_string();
        assert!(error.starts_with(&trace.display().to_string()), "{error}");
        assert!(
            error.contains("has no synergy_model_profiles.json"),
            "{error}"
        );
    }

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

    /// A job that could never run was a warning ("needs more GPUs than the cluster has", whatever
    /// the cause) and an exit code of 0; now it is the trace's error at the job's line, on whichever
    /// cluster is chosen after the trace is read.
    #[test]
    fn a_job_that_can_never_run_is_an_error_at_its_line() {
        use crate::throughput::{DurationModel, TableModel, ThroughputTable};
        let philly = "timestamp,duration,num_gpus,gpu_time,cluster\n\
            2017-10-09 07:01:55,66.0,64,66.0,a\n\
            2017-10-09 06:13:03,2951.0,4,11804.0,b\n";
        let trace = parse(&Source("p.csv".into()), philly, &TraceOptions::default()).unwrap();
        let small = Arc::new(Cluster::parse_spec("v100=2x8", 1).unwrap());
        let err = check_runnable(&trace, &small, &DurationModel::uniform(1))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "p.csv:2: field `num_gpus`: job 1 can never run on this cluster (16 v100 (2x8)): no GPU type has 64 GPUs (the largest has 16)"
        );
        let large = Arc::new(Cluster::parse_spec("v100=8x8", 1).unwrap());
        check_runnable(&trace, &large, &DurationModel::uniform(1)).unwrap();

        // Steps that would take past the longest job at the table's rate.
        let gavel = "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
            0,0,A,1,1,100\n1,0,A,1,1,1e11\n";
        let options = TraceOptions {
            rate: Some(1.0),
            ..TraceOptions::default()
        };
        let trace = parse(&Source("g.csv".into()), gavel, &options).unwrap();
        let table = ThroughputTable::parse(
            &Source("t.json".into()),
            r#"{"v100": {"('A', 1)": {"null": 10.0}}}"#,
        )
        .unwrap();
        let model = TableModel::new(&table, &trace, &large).unwrap();
        let err = check_runnable(&trace, &large, &model)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("g.csv:3: field `total_steps`: job 1 can never run on this cluster")
                && err.ends_with("longer than the 1e9 s (about 30 years) a job may take"),
            "{err}"
        );
        // A trace built without rows (synthetic) names the job.
        let mut bare = trace.clone();
        bare.rows = None;
        let err = check_runnable(&bare, &large, &model)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("g.csv: job 1 can never run"), "{err}");
        // A scale factor the table lacks is the trace's error too, at its row.
        let eight = gavel.replace("1,0,A,1,1,1e11", "1,0,A,8,1,10");
        let trace = parse(&Source("g.csv".into()), &eight, &options).unwrap();
        let err = TableModel::new(&table, &trace, &large)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "g.csv:3: field `scale_factor`: no throughput for job type `A` at scale factor 8"
            ) && err.ends_with("in t.json"),
            "{err}"
        );
    }
}
