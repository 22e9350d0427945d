//! `elastic-run`: torchrun under gangway. See `gangway_launcher` and `elastic-run --help`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gangway_launcher::cli::{self, CliError};
use gangway_launcher::daemon;
use gangway_launcher::executor::{EXIT_FILE_VAR, ExitReport};
use gangway_launcher::local::{self, Ending};
use gangway_launcher::process::{GUARD_FLAG, Guardian};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(GUARD_FLAG) {
        gangway_launcher::process::guard(args.get(1).map_or("", String::as_str));
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let inv = match cli::parse(&args) {
        Ok(inv) => inv,
        Err(CliError::Clap(e)) => e.exit(),
        Err(e) => {
            eprintln!("elastic-run: {e}");
            std::process::exit(2);
        }
    };
    // SIGTERM or SIGINT: checkpoint and stop (a scheduler's preemption, or Ctrl-C).
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).expect("a signal handler");
    }
    if let Some(addr) = &inv.options.daemon {
        finish(daemon::submit_and_follow(&inv, &args, addr, &stop));
    }
    let gpus: Vec<u32> = match (&inv.options.devices, inv.options.fake_gpus) {
        (Some(devices), _) => devices.0.clone(),
        (None, Some(n)) => (0..n).collect(),
        (None, None) => match gangway_topology::discover::discover() {
            Ok(found) => found.gpus.iter().map(|g| g.index).collect(),
            Err(e) => {
                eprintln!("elastic-run: {e}; pass --fake-gpus N to run without GPUs");
                std::process::exit(2);
            }
        },
    };
    let token = format!("elastic-run-{}", std::process::id());
    let _guardian = std::env::current_exe()
        .and_then(|exe| Guardian::start(&exe, &token))
        .map_err(|e| eprintln!("elastic-run: no guardian ({e}); workers may outlive a SIGKILL"))
        .ok();
    finish(local::run(&inv, &gpus, &stop, &token));
}

/// Exits with the run's code, after writing it where a scheduler asked for it (`$GANGWAY_EXIT_FILE`).
fn finish(result: Result<Ending, local::LaunchError>) -> ! {
    let (code, why) = match result {
        Ok(ending) => (ending.exit_code(), ending.to_string()),
        Err(e) => {
            eprintln!("elastic-run: {e}");
            (1, e.to_string())
        }
    };
    if let Some(path) = std::env::var_os(EXIT_FILE_VAR) {
        let report = ExitReport { code, why };
        if let Err(e) = report.write(std::path::Path::new(&path)) {
            eprintln!(
                "elastic-run: cannot write the exit file {}: {e}",
                path.to_string_lossy()
            );
        }
    }
    std::process::exit(code)
}
