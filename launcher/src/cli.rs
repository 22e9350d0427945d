//! `elastic-run [gangway options] [torchrun options] script.py [args...]`: gangway's own options are
//! parsed with clap; every other option before the script passes to torchrun unchanged.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// gangway's options. Anything else before the script is torchrun's.
#[derive(Clone, Debug, Parser, PartialEq)]
#[command(
    name = "elastic-run",
    about = "Runs a torchrun job under gangway: scheduled placement, preemption without lost work, restarts.",
    override_usage = "elastic-run [GANGWAY OPTIONS] [TORCHRUN OPTIONS] SCRIPT [SCRIPT ARGS...]"
)]
pub struct Options {
    /// GPUs: `N`, or `MIN:MAX` for an elastic job (the world size is always a multiple of tp x pp).
    #[arg(long, default_value = "1", value_parser = parse_gpus)]
    pub gpus: (u32, u32),
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub pp: u32,
    /// With --daemon: pipeline stages on each GPU type where they differ from --pp
    /// (`rtx=8,a100=2`: a replica spans more small GPUs than large ones). The daemon's policy sizes
    /// the job in whole replicas of that type, and each launch runs with its type's stages (the
    /// daemon's executor sets GANGWAY_POLICY_PP; without it, --pp stands).
    #[arg(long, value_name = "TYPE=PP,...", value_parser = parse_pp_by_type)]
    pub pp_by_type: Option<BTreeMap<String, u32>>,
    /// Where the workers save checkpoints (default: ./checkpoints/JOB_ID).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Seconds the workers get to save and exit after a stop request, before they are killed.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub grace: f64,
    /// Worker crashes retried before the job fails (user errors are never retried).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_restarts: u32,
    /// Seconds without a new step in the progress file before the job counts as hung and restarts
    /// (ten times that before its first step, for startup).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub hang_timeout: Option<f64>,
    /// Exactly these GPUs (device indices, `0,1`), without discovery: what a scheduler gives the job.
    #[arg(long, value_name = "LIST", value_parser = parse_devices, conflicts_with = "fake_gpus")]
    pub devices: Option<DeviceList>,
    /// Submit the job to a running `gangway serve` at `HOST:PORT` or `unix:PATH` and follow it
    /// there: the daemon's policy decides when and on which GPUs it runs, and may preempt or move
    /// it. Over TCP the daemon's token is read from $GANGWAY_TOKEN_FILE (or $GANGWAY_TOKEN), else
    /// from .gangway/journal/api-token here or in a parent directory.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["devices", "fake_gpus"])]
    pub daemon: Option<String>,
    /// With --daemon: the job's type, as the daemon's models know it: a row of its --throughputs
    /// table, or a model of its Synergy --profiles (`res18`), which sizes the job's CPUs and memory.
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub job_type: String,
    /// With --daemon: the team or user the job counts against, for fairness (default: this user's
    /// account name). A daemon lets another user than its own name only that, or the tenants its
    /// operator gave them (`gangway serve --tenants`).
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// With --daemon: seconds the job is expected to run at its full size (for the daemon's policy).
    #[arg(long, default_value_t = 3600.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub expected_runtime: f64,
    /// Where to run: `local` (this machine's GPUs), or `slurm` (across nodes: one torchrun agent per
    /// node, started by `srun`).
    #[arg(long, value_enum, default_value = "local")]
    pub backend: Backend,
    /// How the workers start on this machine: `pool` forks them from this user's warm pool, which
    /// has imported torch already (under a second from a resize's decision to its first step);
    /// `direct` starts fresh interpreters itself, with torchrun's environment; `torchrun` through
    /// its agent. `pool` and `direct` take no torchrun options and not `--backend slurm`; `auto`
    /// is `pool` on one machine, and `torchrun` with torchrun options or `--backend slurm`.
    #[arg(long, value_enum, default_value = "auto")]
    pub spawn: Spawn,
    /// With `--backend slurm`: nodes to spread the GPUs over (the same number on each).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub nodes: u32,
    /// With `--backend slurm`: exactly these nodes (Slurm's syntax, `node[1-2]`), else free ones.
    #[arg(long, value_name = "LIST")]
    pub nodelist: Option<String>,
    /// N fake GPUs (when this machine has none): CUDA_VISIBLE_DEVICES still names them. At most
    /// 1024.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub fake_gpus: Option<u32>,
    /// The job's id, for checkpoints and logs (default: the script's name and a hash of the command
    /// line, so that running the same command again resumes it). It names a directory under
    /// `./checkpoints`, so it holds no `/` and no `..`.
    #[arg(long, value_name = "ID", value_parser = parse_job_id)]
    pub job_id: Option<String>,
    /// Samples per optimizer step, kept across resizes (passed to the workers): `N`, or `MIN:MAX` for
    /// a job that adapts its batch, which under `--daemon` a goodput policy (`sia`, `pollux`) chooses
    /// within the range at every launch (else MIN).
    #[arg(long, value_name = "N|MIN:MAX", value_parser = parse_batch)]
    pub global_batch: Option<(u32, u32)>,
    /// Largest micro-batch one replica fits, to split the global batch (default: the global batch).
    #[arg(long, value_name = "N")]
    pub max_micro_batch: Option<u32>,
    /// The Python that runs torchrun (`python -m torch.distributed.run`).
    #[arg(long, default_value = "python3", value_name = "PATH")]
    pub python: PathBuf,
}

/// A GPU count `N` or range `MIN:MAX` (each at least 1, MIN not above MAX).
pub fn parse_gpus(text: &str) -> Result<(u32, u32), String> {
    parse_range(text, "GPU count")
}

/// A global batch `N` or range `MIN:MAX` (each at least 1, MIN not above MAX).
pub fn parse_batch(text: &str) -> Result<(u32, u32), String> {
    parse_range(text, "batch size")
}

/// Pipeline stages by GPU type, `TYPE=PP,...`: each type named once, each count at least 1.
pub fn parse_pp_by_type(text: &str) -> Result<BTreeMap<String, u32>, String> {
    let mut stages = BTreeMap::new();
    for item in text.split(',').map(str::trim) {
        let Some((name, pp)) = item.split_once('=') else {
            return Err(format!("`{item}` is not TYPE=PP"));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("`{item}` names no GPU type"));
        }
        let pp = (pp.trim().parse::<u32>().ok())
            .filter(|&pp| pp > 0)
            .ok_or_else(|| format!("`{item}`: `{pp}` is not a stage count of at least 1"))?;
        if stages.insert(name.to_owned(), pp).is_some() {
            return Err(format!("`{name}` is named twice"));
        }
    }
    Ok(stages)
}

/// A count `N` or range `MIN:MAX` of `what`, each at least 1, MIN not above MAX.
fn parse_range(text: &str, what: &str) -> Result<(u32, u32), String> {
    let number = |s: &str| {
        s.parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("`{s}` is not a {what} of at least 1"))
    };
    let (min, max) = match text.split_once(':') {
        Some((min, max)) => (number(min)?, number(max)?),
        None => (number(text)?, number(text)?),
    };
    if min > max {
        return Err(format!("`{text}`: MIN is above MAX"));
    }
    Ok((min, max))
}

/// Longest job id: a file name.
const MAX_JOB_ID_BYTES: usize = 200;

/// A job id that is one plain directory name: not empty, no path separator, no `..`, no control
/// characters (it names the checkpoint directory and appears in logs).
fn parse_job_id(text: &str) -> Result<String, String> {
    let why = if text.is_empty() {
        "is empty"
    } else if text.contains('/') || text.contains('\\') {
        "holds a path separator"
    } else if text == "." || text.contains("..") {
        "holds `..` or is `.`"
    } else if text.chars().any(char::is_control) {
        "holds a control character"
    } else if text.len() > MAX_JOB_ID_BYTES {
        "is longer than 200 bytes"
    } else {
        return Ok(text.to_owned());
    };
    Err(format!(
        "`{}` {why}: a job id names one directory under the checkpoint root",
        text.escape_debug()
    ))
}

/// Where the workers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// This machine's GPUs.
    Local,
    /// Across Slurm nodes: one torchrun agent per node, started by `srun`.
    Slurm,
}

/// What starts the workers on a machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Spawn {
    /// `pool` on one machine; `torchrun` with torchrun options or `--backend slurm`.
    Auto,
    /// torchrun's agent starts them (it imports torch before they do).
    Torchrun,
    /// elastic-run starts them itself, with torchrun's environment (no torchrun options; local only).
    Direct,
    /// As `direct`, but forked from this user's warm pool, which has imported torch already
    /// (`direct` wherever the pool cannot serve the launch; see `gangway_launcher::pool`).
    Pool,
}

impl Spawn {
    /// Whether elastic-run starts the workers itself (no torchrun agent).
    pub fn is_agentless(self) -> bool {
        matches!(self, Spawn::Direct | Spawn::Pool)
    }

    /// What `auto` means for a launch on `backend`, with or without torchrun options; any other
    /// mode, as given.
    pub fn resolve(self, backend: Backend, torchrun_options: bool) -> Spawn {
        match self {
            Spawn::Auto if backend == Backend::Slurm || torchrun_options => Spawn::Torchrun,
            Spawn::Auto => Spawn::Pool,
            given => given,
        }
    }
}

/// GPU device indices, as `0,1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceList(pub Vec<u32>);

fn parse_devices(text: &str) -> Result<DeviceList, String> {
    let devices: Vec<u32> = text
        .split(',')
        .map(|d| {
            d.trim()
                .parse()
                .map_err(|_| format!("`{d}` in `{text}` is not a device index"))
        })
        .collect::<Result<_, _>>()?;
    let mut sorted = devices.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != devices.len() {
        return Err(format!("`{text}` names a device twice"));
    }
    Ok(DeviceList(devices))
}

/// Seconds: a finite number from 0.1 to a week.
fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.1..=604_800.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{text}` is not a number of seconds from 0.1 to 604800"
        )),
    }
}

impl Options {
    /// `--grace` as a duration.
    pub fn grace(&self) -> Duration {
        Duration::from_secs_f64(self.grace.max(0.0))
    }
}

/// A whole command line, split.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    /// gangway's options, parsed.
    pub options: Options,
    /// torchrun's options, as given.
    pub torchrun: Vec<String>,
    /// The training script: the first argument that is no option's.
    pub script: String,
    /// Everything after the script, passed to it unchanged.
    pub script_args: Vec<String>,
}

/// Why a command line was refused.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// clap refused gangway's options, or is answering `--help` or `--version`
    /// ([`clap::Error::exit`] prints either).
    #[error(transparent)]
    Clap(#[from] clap::Error),
    /// No training script was given.
    #[error("no training script given: elastic-run [OPTIONS] SCRIPT [ARGS...]")]
    NoScript,
    /// A torchrun option that elastic-run sets itself, and what sets it.
    #[error("`{0}` is set by elastic-run ({1}); leave it out")]
    Reserved(String, &'static str),
    /// A torchrun option shortened: torchrun would read it as the whole option, elastic-run reads
    /// options by their whole names.
    #[error("`{0}`: write torchrun's `{1}` in full")]
    Abbreviated(String, &'static str),
    /// Short torchrun options written together after a flag (`-mr3`).
    #[error("`{0}`: write torchrun's short options apart (`-m -r 3`)")]
    Combined(String),
}

/// Whether `name` (`--gpus`) is one of gangway's options, and whether it takes a value: read from
/// [`Options`] itself, so that a new option can never be passed to torchrun by mistake.
fn own_option(name: &str) -> Option<bool> {
    use clap::CommandFactory;
    static OWN: std::sync::OnceLock<Vec<(String, bool)>> = std::sync::OnceLock::new();
    let own = OWN.get_or_init(|| {
        Options::command()
            .get_arguments()
            .filter_map(|a| {
                let takes_value = a.get_action().takes_values();
                Some((format!("--{}", a.get_long()?), takes_value))
            })
            .collect()
    });
    own.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
}

/// torchrun's options that take no value; every other torchrun option takes one.
const TORCHRUN_FLAGS: [&str; 10] = [
    "--standalone",
    "-m",
    "--module",
    "--no-python",
    "--no_python",
    "--run-path",
    "--run_path",
    "--virtual-local-rank",
    "--virtual_local_rank",
    "--help",
];

/// What torchrun runs, other than a Python script, and the variables its parser also reads them
/// from (`PET_` and the option's name): a daemon checks the program a job runs, so these may be
/// set only where elastic-run sees them, on the command line.
const TORCHRUN_PROGRAM_VARIABLES: [(&str, &str); 3] = [
    ("PET_NO_PYTHON", "--no-python"),
    ("PET_MODULE", "--module"),
    ("PET_RUN_PATH", "--run-path"),
];

/// The variable whose program torchrun starts its workers with, in place of its own interpreter
/// (`os.getenv("PYTHON_EXEC", sys.executable)` in `torch.distributed.run`): a daemon checks the
/// program a job runs (`--python`), so a job may not name another here.
pub const WORKER_PROGRAM_VAR: &str = "PYTHON_EXEC";

/// The torchrun option `variable` sets behind the command line, if it sets one that changes what
/// torchrun runs (`PET_NO_PYTHON`, `PET_MODULE`, `PET_RUN_PATH`).
pub fn hidden_program_option(variable: &str) -> Option<&'static str> {
    (TORCHRUN_PROGRAM_VARIABLES.iter())
        .find(|(v, _)| *v == variable)
        .map(|(_, option)| *option)
}

/// torchrun options elastic-run decides itself, with why.
const RESERVED: [(&str, &str); 9] = [
    ("--nproc-per-node", "from --gpus"),
    ("--nproc_per_node", "from --gpus"),
    ("--nnodes", "from the placement"),
    ("--rdzv-id", "a new one for every launch"),
    ("--rdzv_id", "a new one for every launch"),
    ("--max-restarts", "gangway keeps the restart budget"),
    ("--max_restarts", "gangway keeps the restart budget"),
    ("--node-rank", "from the placement"),
    ("--node_rank", "from the placement"),
];

/// The option among those elastic-run reads by name (torchrun's flags, and those it sets itself)
/// that `name` shortens, if it does: torchrun (argparse) takes `--no-p` for `--no-python` and
/// `--max-r` for `--max-restarts`, which would slip a script past the daemon's check, or an option
/// past elastic-run's.
fn abbreviates(name: &str) -> Option<&'static str> {
    if !name.starts_with("--") || name.len() <= 2 {
        return None;
    }
    let known = TORCHRUN_FLAGS
        .iter()
        .copied()
        .chain(RESERVED.iter().map(|(r, _)| *r));
    let mut known = known.filter(|k| k.starts_with("--"));
    if known.clone().any(|k| k == name) {
        return None;
    }
    known.find(|k| k.starts_with(name))
}

/// Splits `args` (without the program name).
pub fn parse(args: &[String]) -> Result<Invocation, CliError> {
    let mut own = vec!["elastic-run".to_owned()];
    let mut torchrun = Vec::new();
    let mut k = 0;
    while k < args.len() {
        let arg = &args[k];
        let name = arg.split('=').next().unwrap_or(arg);
        let takes_value = !arg.contains('=');
        if let Some(with_value) = own_option(name) {
            // `--name value` becomes `--name=value`, so that a value that starts with `-`
            // (`--grace -1`) reaches the option's own check instead of looking like an option.
            if with_value && takes_value && k + 1 < args.len() {
                own.push(format!("{arg}={}", args[k + 1]));
                k += 1;
            } else {
                own.push(arg.clone());
            }
        } else if name == "-h" || name == "--help" || name == "-V" || name == "--version" {
            own.push(arg.clone());
        } else if arg.starts_with('-') {
            if let Some(full) = abbreviates(name) {
                return Err(CliError::Abbreviated(name.to_owned(), full));
            }
            if let Some((_, why)) = RESERVED.iter().find(|(r, _)| *r == name) {
                return Err(CliError::Reserved(name.to_owned(), why));
            }
            // A short option with its value attached (`-r3`) is whole; one after a flag (`-mr3`,
            // argparse's `-m -r 3`) is refused, as elastic-run reads options one by one.
            let attached = !arg.starts_with("--") && arg.len() > 2;
            if attached && TORCHRUN_FLAGS.contains(&&arg[..2]) {
                return Err(CliError::Combined(arg.clone()));
            }
            torchrun.push(arg.clone());
            if takes_value && !attached && !TORCHRUN_FLAGS.contains(&name) && k + 1 < args.len() {
                torchrun.push(args[k + 1].clone());
                k += 1;
            }
        } else {
            let mut options = Options::try_parse_from(own)?;
            options.spawn = options.spawn.resolve(options.backend, !torchrun.is_empty());
            return Ok(Invocation {
                options,
                torchrun,
                script: arg.clone(),
                script_args: args[k + 1..].to_vec(),
            });
        }
        k += 1;
    }
    // No script: let clap answer --help and --version, or report the missing script.
    Options::try_parse_from(own)?;
    Err(CliError::NoScript)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn by_default_one_machines_workers_come_from_the_pool_and_torchruns_options_keep_torchrun() {
        let spawn = |line: &str| parse(&args(line)).unwrap().options.spawn;
        assert_eq!(spawn("--gpus 2 train.py"), Spawn::Pool);
        assert_eq!(spawn("--gpus 2 --standalone train.py"), Spawn::Torchrun);
        assert_eq!(spawn("--gpus 2 --backend slurm train.py"), Spawn::Torchrun);
        assert_eq!(spawn("--gpus 2 --spawn direct train.py"), Spawn::Direct);
        assert_eq!(spawn("--spawn torchrun train.py"), Spawn::Torchrun);
    }

    #[test]
    fn gangway_and_torchrun_options_are_split_before_the_script() {
        let inv = parse(&args(
            "--gpus 2:4 --tp=2 --log-dir /tmp/logs --standalone --grace 5 train.py --lr 0.1 --gpus 9",
        ))
        .unwrap();
        assert_eq!(inv.options.gpus, (2, 4));
        assert_eq!(inv.options.tp, 2);
        assert_eq!(inv.options.grace(), Duration::from_secs(5));
        assert_eq!(inv.torchrun, args("--log-dir /tmp/logs --standalone"));
        assert_eq!(inv.script, "train.py");
        assert_eq!(
            inv.script_args,
            args("--lr 0.1 --gpus 9"),
            "the script's own args are untouched"
        );
    }

    /// `--job-type` was once passed to torchrun: gangway's options were listed by hand beside their
    /// definitions; they are read from `Options` now.
    #[test]
    fn every_option_of_gangways_stays_with_gangway() {
        let inv = parse(&args(
            "--job-type res18 --expected-runtime 60 --python python3 --log-dir /tmp train.py",
        ))
        .unwrap();
        assert_eq!(inv.options.job_type, "res18");
        assert_eq!(inv.torchrun, args("--log-dir /tmp"));
    }

    /// `--grace -1` once failed with "unexpected argument '-1'" while `--grace=-1` gave the range error.
    #[test]
    fn a_value_that_starts_with_a_dash_gets_the_options_own_error() {
        let spaced = parse(&args("--grace -1 train.py")).unwrap_err().to_string();
        let joined = parse(&args("--grace=-1 train.py")).unwrap_err().to_string();
        assert!(
            spaced.contains("`-1` is not a number of seconds from 0.1 to 604800"),
            "{spaced}"
        );
        assert_eq!(spaced, joined);
        let inv = parse(&args("--job-id -x --grace 5 train.py")).unwrap();
        assert_eq!(inv.options.job_id.as_deref(), Some("-x"));
    }

    /// `--job-id ../../../x` once wrote outside the checkpoint directory.
    #[test]
    fn job_ids_are_one_plain_directory_name() {
        for bad in ["../../../x", "a/b", "..", ".", "a..b", "x\u{1b}[31m", ""] {
            let err = parse(&[format!("--job-id={bad}"), "train.py".into()])
                .unwrap_err()
                .to_string();
            assert!(err.contains("a job id names one directory"), "{bad}: {err}");
        }
        let inv = parse(&args("--job-id resnet-50_v2.1 train.py")).unwrap();
        assert_eq!(inv.options.job_id.as_deref(), Some("resnet-50_v2.1"));
    }

    #[test]
    fn options_elastic_run_sets_itself_are_refused_with_the_reason() {
        let err = parse(&args("--nproc-per-node 4 train.py")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`--nproc-per-node` is set by elastic-run (from --gpus); leave it out"
        );
        assert!(matches!(parse(&args("--gpus 2")), Err(CliError::NoScript)));
        assert!(
            parse(&args("--gpus 0 train.py"))
                .unwrap_err()
                .to_string()
                .contains("at least 1")
        );
        assert!(
            parse(&args("--gpus 4:2 train.py"))
                .unwrap_err()
                .to_string()
                .contains("MIN is above MAX")
        );
    }

    #[test]
    fn stages_by_gpu_type_name_each_type_once_with_a_count() {
        let parsed = parse_pp_by_type("rtx=8, a100=2").unwrap();
        assert_eq!(parsed, [("a100".into(), 2), ("rtx".into(), 8)].into());
        for (bad, why) in [
            ("rtx", "is not TYPE=PP"),
            ("=2", "names no GPU type"),
            ("rtx=0", "not a stage count"),
            ("rtx=2:4", "not a stage count"),
            ("rtx=8,rtx=2", "named twice"),
        ] {
            let e = parse_pp_by_type(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    /// torchrun reads a shortened option as the whole one (`--no-p x train.sh` would run `x`,
    /// which nobody checked, and `--max-r` would set what elastic-run keeps): refused, naming it.
    #[test]
    fn a_shortened_torchrun_option_is_refused_naming_the_whole() {
        for (line, short, full) in [
            ("--no-p x train.sh", "--no-p", "--no-python"),
            ("--stand train.py", "--stand", "--standalone"),
            ("--max-r 9 train.py", "--max-r", "--max-restarts"),
            ("--node_r=1 train.py", "--node_r", "--node_rank"),
        ] {
            match parse(&args(line)) {
                Err(CliError::Abbreviated(got, whole)) => {
                    assert_eq!((got.as_str(), whole), (short, full))
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        // Whole names, and torchrun's other options, pass as they are; a short option's value may
        // be attached, but not after a flag.
        let inv = parse(&args("--no-python --rdzv-backend c10d train.sh")).unwrap();
        assert_eq!(inv.torchrun, ["--no-python", "--rdzv-backend", "c10d"]);
        assert_eq!(inv.script, "train.sh");
        let inv = parse(&args("--no-python -r3 --virtual-local-rank x job.sh")).unwrap();
        assert_eq!(inv.torchrun, ["--no-python", "-r3", "--virtual-local-rank"]);
        assert_eq!(
            (inv.script.as_str(), inv.script_args.as_slice()),
            ("x", &["job.sh".to_owned()][..])
        );
        assert!(matches!(parse(&args("-mr3 train")), Err(CliError::Combined(a)) if a == "-mr3"));
    }
}
