//! `elastic-run`: torchrun under gangway. See `gangway_launcher` and `elastic-run --help`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::ValueEnum;
use gangway_launcher::cli::{self, Backend, CliError, Options};
use gangway_launcher::daemon;
use gangway_launcher::executor::{EXIT_FILE_VAR, ExitReport};
use gangway_launcher::inherit::{self, Inherited};
use gangway_launcher::local::{self, Ending, Target};
use gangway_launcher::process::{GUARD_FLAG, GUARD_SLURM, Guardian};
use gangway_launcher::{slurm, spawn};

fn main() {
    // SAFETY: first in main, before any other thread exists.
    let mut inherited = unsafe { Inherited::from_env() };
    // The daemon asks which hand-over this elastic-run speaks before it launches any job through it.
    if std::env::args().nth(1).as_deref() == Some(inherit::HANDOVER_FLAG) {
        println!("{}", inherit::HANDOVER);
        return;
    }
    // Where the daemon that launched it said: the job's directory and log, entered as its user.
    if let Err(e) = inherited.enter() {
        eprintln!("elastic-run: {}", e.why);
        // A user error (never retried), or worth placing again (75, as a stop's).
        let code = if e.lasting { 2 } else { 75 };
        finish(Ok(Ending::Failed { code, why: e.why }), &inherited);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some(spawn::SPAWN_FLAG) => spawn::run(&args[1..], inherited.program(), spawn::Mode::Direct),
        Some(spawn::POOL_FLAG) => spawn::run(&args[1..], inherited.program(), spawn::Mode::Pool),
        _ => {}
    }
    if args.first().map(String::as_str) == Some(GUARD_FLAG) {
        gangway_launcher::process::guard(
            args.get(1).map_or("", String::as_str),
            args.get(2).map(String::as_str) == Some(GUARD_SLURM),
        );
    }
    gangway::cli::init_logging();
    let mut inv = match cli::parse(&args) {
        Ok(inv) => inv,
        // --help and --version.
        Err(CliError::Clap(e)) if !e.use_stderr() => e.exit(),
        // A bad command line is a user error, reported like any other ending (a scheduler that
        // launched it reads the exit file).
        Err(e) => {
            eprintln!("elastic-run: {e}");
            finish(
                Ok(Ending::Failed {
                    code: 2,
                    why: format!("bad command line: {e}"),
                }),
                &inherited,
            );
        }
    };
    // Under --no-python, the script the daemon checked, not another its name finds on PATH.
    if let Some(script) = inherited.script().and_then(|s| s.to_str()) {
        inv.script = script.to_owned();
    }
    // SIGTERM or SIGINT: checkpoint and stop (a scheduler's preemption, or Ctrl-C).
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).expect("a signal handler");
    }
    if let Some(addr) = &inv.options.daemon {
        if inv.options.backend == Backend::Slurm {
            let why = "--daemon runs the job on the daemon's GPUs; leave out --backend slurm";
            eprintln!("elastic-run: {why}");
            finish(
                Ok(Ending::Failed {
                    code: 2,
                    why: why.into(),
                }),
                &inherited,
            );
        }
        finish(
            daemon::submit_and_follow(&inv, &args, addr, &stop),
            &inherited,
        );
    }
    if inv.options.spawn.is_agentless()
        && (inv.options.backend == Backend::Slurm || !inv.torchrun.is_empty())
    {
        let why = format!(
            "--spawn {} starts this machine's workers without torchrun: it takes no torchrun \
             options ({}) and not --backend slurm",
            inv.options
                .spawn
                .to_possible_value()
                .map(|v| v.get_name().to_owned())
                .unwrap_or_default(),
            inv.torchrun.join(" ")
        );
        eprintln!("elastic-run: {why}");
        finish(Ok(Ending::Failed { code: 2, why }), &inherited);
    }
    let target = match target(&inv.options) {
        Ok(target) => target,
        Err(why) => {
            eprintln!("elastic-run: {why}");
            finish(Ok(Ending::Failed { code: 2, why }), &inherited);
        }
    };
    let token = run_token();
    let slurm = matches!(target, Target::Slurm(_));
    let _guardian = std::env::current_exe()
        .and_then(|exe| Guardian::start(&exe, &token, slurm))
        .map_err(|e| eprintln!("elastic-run: no guardian ({e}); workers may outlive a SIGKILL"))
        .ok();
    let result = local::run(&inv, &target, &stop, &token, &mut inherited);
    finish(result, &inherited);
}

/// This run's token, also its Slurm job name: unique across the machines a user launches from. Under
/// the daemon, named after the attempt, so that a restarted daemon finds its steps in `squeue`.
fn run_token() -> String {
    if let Ok(marker) = std::env::var(gangway_launcher::executor::ATTEMPT_VAR)
        && !marker.is_empty()
    {
        return gangway_launcher::executor::slurm_job_name(&marker);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("elastic-run-{}-{}", host.trim(), std::process::id())
}

/// Where the workers go: Slurm nodes, given GPUs, fake ones, or the GPUs NVML finds.
fn target(options: &Options) -> Result<Target, String> {
    if options.backend == Backend::Local && (options.nodes != 1 || options.nodelist.is_some()) {
        return Err("--nodes and --nodelist need --backend slurm".into());
    }
    if options.backend == Backend::Slurm {
        if options.devices.is_some() || options.fake_gpus.is_some() {
            return Err("--backend slurm takes GPUs from Slurm's nodes: leave out --devices and --fake-gpus".into());
        }
        let nodes = options.nodes.max(1);
        if !options.gpus.1.is_multiple_of(nodes) {
            return Err(format!(
                "--gpus {} does not split evenly over --nodes {nodes}",
                options.gpus.1
            ));
        }
        let all = slurm::nodes().map_err(|e| e.to_string())?;
        let wanted = match &options.nodelist {
            Some(list) => Some(slurm::expand(list).map_err(|e| e.to_string())?),
            None => None,
        };
        return slurm::choose(&all, wanted.as_deref(), nodes, options.gpus.1 / nodes)
            .map(Target::Slurm)
            .map_err(|e| e.to_string());
    }
    Ok(Target::Local(match (&options.devices, options.fake_gpus) {
        (Some(devices), _) => devices.0.clone(),
        (None, Some(n)) => (0..n).collect(),
        (None, None) => gangway_topology::discover::discover()
            .map_err(|e| format!("{e}; pass --fake-gpus N to run without GPUs"))?
            .gpus
            .iter()
            .map(|g| g.index)
            .collect(),
    }))
}

/// Exits with the run's code, after writing it where a scheduler asked for it: the descriptor the
/// daemon handed over, else `$GANGWAY_EXIT_FILE`.
fn finish(result: Result<Ending, local::LaunchError>, inherited: &Inherited) -> ! {
    let (code, why) = match result {
        Ok(ending) => (ending.exit_code(), ending.to_string()),
        Err(e) => {
            eprintln!("elastic-run: {e}");
            (e.exit_code(), e.to_string())
        }
    };
    let report = ExitReport { code, why };
    match inherited.report_exit(&report) {
        Ok(true) => {}
        Ok(false) => write_exit_file(&report),
        Err(e) => eprintln!("elastic-run: cannot report how it ended to the daemon: {e}"),
    }
    std::process::exit(code)
}

/// Writes `report` to `$GANGWAY_EXIT_FILE`, where a scheduler asked for it.
fn write_exit_file(report: &ExitReport) {
    if let Some(path) = std::env::var_os(EXIT_FILE_VAR)
        && let Err(e) = report.write(std::path::Path::new(&path))
    {
        eprintln!(
            "elastic-run: cannot write the exit file {}: {e}",
            path.to_string_lossy()
        );
    }
}
