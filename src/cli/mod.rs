//! The command line as a library: what the binaries share around their commands (the log filter,
//! output to a reader that goes away, how an error is reported) and, with the simulator, the whole
//! `gangway` command line ([`run`], [`main`]) over any policy [`Registry`](crate::core::policy::Registry).

#[cfg(feature = "simulate")]
mod app;
#[cfg(feature = "simulate")]
mod simulate;
#[cfg(feature = "simulate")]
mod topology;
#[cfg(feature = "simulate")]
mod workload;

#[cfg(feature = "simulate")]
pub use app::{Cli, main, run, run_and_report};
#[cfg(feature = "simulate")]
pub use simulate::policy_listing;

use std::fmt::Write as _;

use tracing_subscriber::filter::{EnvFilter, LevelFilter};

/// The log level shown when `RUST_LOG` does not say: warnings and errors. Warnings are things a user
/// must see (a journal's torn tail dropped at recovery, a policy that stalled, an LP that fell back), so
/// they are on by default.
pub const DEFAULT_LOG_LEVEL: LevelFilter = LevelFilter::WARN;

/// Logs go to stderr, filtered by `RUST_LOG` (default: [`DEFAULT_LOG_LEVEL`]).
pub fn init_logging() {
    let filter = EnvFilter::builder()
        .with_default_directive(DEFAULT_LOG_LEVEL.into())
        .from_env_lossy();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Ends the process quietly, as `ls | head` does, when a reader of stdout or stderr goes away.
///
/// This is the one mechanism for all output, tables and JSON, `print!` and `eprint!` alike: the default
/// action of SIGPIPE, which Rust's runtime otherwise ignores (so that a write to a closed pipe returns an
/// error, on which `println!` panics). Call it first thing in commands that only print. A daemon must not
/// use it: a client that hangs up would kill it (Rust's TCP writes never raise SIGPIPE, but writes to
/// pipes and Unix sockets do).
pub fn exit_quietly_on_closed_output() {
    // SAFETY: signal(2) with SIG_DFL installs no handler; called before any thread that writes output
    // starts, and changes only what a write to a closed pipe does.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// An error and its causes, each said once: `what: why: deeper why`. A cause whose text the message so
/// far already contains is left out, so that an error that prints its source and also returns it as its
/// `source()` does not say the same thing twice.
pub fn error_report(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        let _ = write!(out, "{text}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that prints its source and also returns it, as `#[error("..: {0}")]` with
    /// `#[from]` does.
    #[derive(Debug)]
    struct Reading(std::io::Error);

    impl std::fmt::Display for Reading {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading x: {}", self.0)
        }
    }

    impl std::error::Error for Reading {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::from_raw_os_error(21);
        let e = anyhow::Error::new(Reading(io)).context("loading the trace");
        assert_eq!(
            error_report(&e),
            "loading the trace: reading x: Is a directory (os error 21)"
        );
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_report(&e), "outer: inner");
    }
}
