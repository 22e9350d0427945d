//! gangway-launcher: runs training jobs under torchrun for gangway (`elastic-run`).
//!
//! - [`cli`]: `elastic-run`'s command line: gangway's options, torchrun's passed through unchanged;
//! - [`confine`]: holding a job's workers to their allotted CPUs (pinned cores) and memory (cgroups);
//! - [`process`]: torchrun in its own process group with a parent-death signal, every worker marked
//!   with a run token, and a guardian that kills them all if the launcher is killed;
//! - [`exit`]: how a launch ended: completed, a user error (never retried), or a crash;
//! - [`local`]: the local backend's run loop: launch with the worker contract's environment, restart
//!   after crashes and hangs within the budget, stop cooperatively on request;
//! - [`spawn`]: `--spawn direct`: one machine's workers started without torchrun's agent (and its
//!   torch import);
//! - [`pool`]: `--spawn pool`: workers forked from a warm pool that has imported torch already;
//! - [`slurm`]: the Slurm backend: nodes from `scontrol`, one torchrun agent per node by `srun`, c10d
//!   rendezvous on the first node, `scancel` to clean up;
//! - [`daemon`]: `elastic-run --daemon`: submit the job to `gangway serve` and follow it;
//! - [`client`]: the daemon's API client (TCP with its token, or a Unix socket), shared with `gangway`;
//! - [`executor`]: the control plane's executor over `elastic-run` processes, so that `gangway serve`
//!   runs real jobs, preempts them, and moves or resizes them by checkpoint and relaunch.
//!
//! ```
//! let args: Vec<String> = ["--gpus", "2", "--standalone", "train.py", "--lr", "0.1"]
//!     .map(String::from)
//!     .to_vec();
//! let inv = gangway_launcher::cli::parse(&args).unwrap();
//! assert_eq!((inv.options.gpus, inv.script.as_str()), ((2, 2), "train.py"));
//! assert_eq!(inv.torchrun, ["--standalone"]);
//! ```
#![deny(missing_docs)]

pub mod apart;
pub mod cli;
pub mod client;
pub mod confine;
pub mod daemon;
pub mod executor;
pub mod exit;
pub mod inherit;
pub mod local;
pub mod pool;
pub mod process;
pub mod slurm;
pub mod spawn;
