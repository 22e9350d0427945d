//! The `gangway` command line, for a binary of one's own with one's own policies: [`run`] a parsed
//! [`Cli`] with a [`Registry`], or [`main`] for the whole binary.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[cfg(feature = "serve")]
use crate::control;
use crate::core::policy::Registry;

use super::simulate::{self, SimulateArgs};
use super::topology::{self, TopologyArgs};
use super::workload::{self, WorkloadArgs};

/// The `gangway` command line, parsed (`Cli::parse()`).
#[derive(Parser)]
#[command(
    name = "gangway",
    version,
    about = "Schedules deep-learning training jobs onto shared GPU clusters"
)]
pub struct Cli {
    /// With no command, `gangway` runs `simulate` on its bundled default.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Replays a trace under one or more policies and compares them.
    ///
    /// With no arguments it replays the bundled Gavel trace (continuous-single, seed 0) at 2 jobs/hour on
    /// 36 V100 + 36 P100 + 36 K80 GPUs, measuring jobs 4000..5000 as Gavel does.
    Simulate(Box<SimulateArgs>),
    /// Shows a cluster's GPU topology: the GPU-to-GPU matrix (as `nvidia-smi topo -m`) and bandwidths.
    Topology(TopologyArgs),
    /// Writes a goodput workload of any size, resampled from Pollux's or Sia's: their jobs, at their
    /// load per GPU, for a cluster of any size.
    Workload(WorkloadArgs),
    /// Runs the live control plane on this machine, with a local HTTP API.
    #[cfg(feature = "serve")]
    Serve(Box<control::ServeArgs>),
    /// Submits a job to a running `gangway serve`; prints its id.
    #[cfg(feature = "serve")]
    Submit(control::SubmitArgs),
    /// Lists the jobs of a running `gangway serve`.
    #[cfg(feature = "serve")]
    Jobs(control::JobsArgs),
    /// Cancels a job of a running `gangway serve`.
    #[cfg(feature = "serve")]
    Cancel(control::CancelArgs),
    /// Lists the servers of a running `gangway serve`: their GPUs, those out of service and why, and
    /// the jobs on them.
    #[cfg(feature = "serve")]
    Nodes(control::JobsArgs),
    /// Takes GPUs of a running `gangway serve` out of service: their jobs checkpoint and move.
    #[cfg(feature = "serve")]
    Cordon(control::CordonArgs),
    /// Puts cordoned GPUs back in service.
    #[cfg(feature = "serve")]
    Uncordon(control::CordonArgs),
    /// Prints a one-time link that logs a browser into a running `gangway serve`'s dashboard.
    #[cfg(feature = "serve")]
    Ui(control::UiArgs),
}

impl Cli {
    /// Whether it runs a simulation (the default command included), which frees large buffers
    /// between runs: a binary may tune its allocator for that.
    pub fn simulates(&self) -> bool {
        matches!(self.command, Some(Command::Simulate(_)) | None)
    }
}

/// Runs a parsed command line with the policies of `registry`: `gangway simulate` and
/// `gangway serve` run and list them exactly as they do the built-in ones.
pub fn run(cli: Cli, registry: &Registry) -> Result<()> {
    // Every command but the daemon only prints: it ends quietly when its reader goes away
    // (`gangway topology --list | head -5`).
    if !is_daemon(&cli.command) {
        super::exit_quietly_on_closed_output();
    }
    match cli.command {
        Some(Command::Simulate(args)) => simulate::simulate(*args, registry),
        Some(Command::Topology(args)) => topology::topology(args),
        Some(Command::Workload(args)) => workload::workload(args),
        #[cfg(feature = "serve")]
        Some(Command::Serve(args)) => control::serve(*args, registry.clone()),
        #[cfg(feature = "serve")]
        Some(Command::Submit(args)) => control::submit(args),
        #[cfg(feature = "serve")]
        Some(Command::Jobs(args)) => control::jobs(args),
        #[cfg(feature = "serve")]
        Some(Command::Cancel(args)) => control::cancel(args),
        #[cfg(feature = "serve")]
        Some(Command::Nodes(args)) => control::nodes(args),
        #[cfg(feature = "serve")]
        Some(Command::Cordon(args)) => control::cordon(args, true),
        #[cfg(feature = "serve")]
        Some(Command::Uncordon(args)) => control::cordon(args, false),
        #[cfg(feature = "serve")]
        Some(Command::Ui(args)) => control::ui(args),
        None => simulate::simulate(SimulateArgs::parse_from(["simulate"]), registry),
    }
}

/// Runs `cli` with the policies of `registry` as the `gangway` binary does: an error is reported on
/// stderr, with its causes, and ends the process with status 1.
pub fn run_and_report(cli: Cli, registry: &Registry) -> ExitCode {
    match run(cli, registry) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", super::error_report(&e));
            ExitCode::FAILURE
        }
    }
}

/// The whole `gangway` binary with the policies of `registry`: logs, the command line, and an
/// error report with exit status 1. A platform team's own binary is
/// `fn main() -> ExitCode { gangway::cli::main(registry_with_our_policies()) }`.
pub fn main(registry: Registry) -> ExitCode {
    super::init_logging();
    run_and_report(Cli::parse(), &registry)
}

/// Whether the command runs the daemon, which must outlive its clients' connections.
fn is_daemon(command: &Option<Command>) -> bool {
    #[cfg(feature = "serve")]
    if matches!(command, Some(Command::Serve(_))) {
        return true;
    }
    let _ = command;
    false
}
