//! `elastic-run`: torchrun under gangway. See `gangway_launcher` and `elastic-run --help`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gangway_launcher::cli::{self, CliError};
use gangway_launcher::local;
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
    let gpus: Vec<u32> = match inv.options.fake_gpus {
        Some(n) => (0..n).collect(),
        None => match gangway_topology::discover::discover() {
            Ok(found) => found.gpus.iter().map(|g| g.index).collect(),
            Err(e) => {
                eprintln!("elastic-run: {e}; pass --fake-gpus N to run without GPUs");
                std::process::exit(2);
            }
        },
    };
    // SIGTERM or SIGINT: checkpoint and stop (a scheduler's preemption, or Ctrl-C).
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).expect("a signal handler");
    }
    let token = format!("elastic-run-{}", std::process::id());
    let _guardian = std::env::current_exe()
        .and_then(|exe| Guardian::start(&exe, &token))
        .map_err(|e| eprintln!("elastic-run: no guardian ({e}); workers may outlive a SIGKILL"))
        .ok();
    match local::run(&inv, &gpus, &stop, &token) {
        Ok(ending) => std::process::exit(ending.exit_code()),
        Err(e) => {
            eprintln!("elastic-run: {e}");
            std::process::exit(1);
        }
    }
}
