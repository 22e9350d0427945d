//! The `gangway` command line: [`gangway::cli`] with the built-in policies.

use std::process::ExitCode;

use clap::Parser;
use gangway::cli::Cli;
use gangway::core::policy::Registry;

/// mimalloc: the control plane's rounds send thousands of small actor messages, and the system
/// allocator spent a third of a round in malloc and free (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_t`, the same in mimalloc 2 and 3):
/// how long freed pages stay resident before they go back to the system.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// A simulation frees its trace's parsing buffers and one run's engine before the next run grows
/// its own: returned at once, they are not counted twice in the process's peak memory (a million
/// jobs under the default command: 1.05 GB with the default 10 ms delay, 0.83 GB without). The
/// control plane keeps the default, which suits its many small messages.
fn return_freed_memory_at_once() {
    // SAFETY: mi_option_set only stores an integer option, read by later purges; the option
    // exists in every mimalloc the sys crate builds.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

fn main() -> ExitCode {
    gangway::cli::init_logging();
    let cli = Cli::parse();
    if cli.simulates() {
        return_freed_memory_at_once();
    }
    gangway::cli::run_and_report(cli, &Registry::with_builtins())
}
