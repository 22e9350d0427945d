//! `elastic-run --spawn direct`: on one machine, `elastic-run` starts the workers itself, with the
//! environment torchrun gives them, instead of through torchrun's agent.
//!
//! torchrun's agent is a Python process that imports torch before its workers do, and unloads it
//! after they exit: on CPU, about 3 s at every launch and 2.5 s at every stop (`docs/PERFORMANCE.md`),
//! paid again at each resize. The spawner here is this binary, re-run with [`SPAWN_FLAG`]: it starts
//! `python -u SCRIPT ARGS` once per rank, rank 0 hosting the rendezvous store (`env://`), and ends as
//! torchrun does: 0 when every worker succeeded; else 1, with each failed worker's `exitcode : N` (what
//! [`crate::exit::classify`] reads), after stopping the others. It takes no torchrun options and does
//! not span machines: Slurm launches keep torchrun.

use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::inherit::{Program, python_command};

/// The first argument that makes `elastic-run` the spawner: `elastic-run SPAWN_FLAG NPROC PYTHON
/// SCRIPT [ARGS...]`.
pub const SPAWN_FLAG: &str = "--gangway-spawn-workers";
/// The same, with the workers forked by the warm pool ([`crate::pool`]).
pub const POOL_FLAG: &str = "--gangway-spawn-pool-workers";

/// How long the other workers get to exit after one failed, before they are killed.
const FAILURE_GRACE: Duration = Duration::from_secs(30);

/// The command line that runs `nproc` workers of `python script args` through the spawner.
pub fn command(
    exe: &Path,
    mode: Mode,
    nproc: u32,
    python: &Path,
    script: &str,
    args: &[String],
) -> Command {
    let mut command = Command::new(exe);
    command
        .arg(match mode {
            Mode::Direct => SPAWN_FLAG,
            Mode::Pool => POOL_FLAG,
        })
        .arg(nproc.to_string())
        .arg(python)
        .arg(script)
        .args(args);
    command
}

/// What torchrun sets for worker `rank` of `world` on one machine, with the rendezvous store on
/// `port` (rank 0 hosts it: no agent store).
pub fn worker_env(rank: u32, world: u32, port: u16, run_id: &str) -> Vec<(&'static str, String)> {
    let (rank, world) = (rank.to_string(), world.to_string());
    vec![
        ("RANK", rank.clone()),
        ("LOCAL_RANK", rank.clone()),
        ("ROLE_RANK", rank),
        ("GROUP_RANK", "0".into()),
        ("ROLE_NAME", "default".into()),
        ("WORLD_SIZE", world.clone()),
        ("LOCAL_WORLD_SIZE", world.clone()),
        ("ROLE_WORLD_SIZE", world),
        ("GROUP_WORLD_SIZE", "1".into()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", port.to_string()),
        ("TORCHELASTIC_RUN_ID", run_id.to_owned()),
        ("TORCHELASTIC_RESTART_COUNT", "0".into()),
        ("TORCHELASTIC_MAX_RESTARTS", "0".into()),
        ("TORCHELASTIC_USE_AGENT_STORE", "False".into()),
    ]
}

/// The signal the spawner last received (0: none yet), for a pool launch to relay.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(signal: libc::c_int) {
    RECEIVED.store(signal, Ordering::Relaxed);
}

/// How a launch started its workers: `Direct`, or through the warm pool ([`crate::pool`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Fresh interpreters, children of the spawner.
    Direct,
    /// Forked by this user's warm pool; direct when the pool cannot serve the launch.
    Pool,
}

/// One worker's end: its rank, pid and exit code (negative: killed by that signal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The worker's rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// Its exit code, or minus the signal that killed it.
    pub code: i32,
}

/// A launch's running workers, however they were started.
pub trait Workers {
    /// How many have not exited.
    fn running(&self) -> usize;
    /// Those that exited, waiting up to `timeout` for the first.
    fn wait_exits(&mut self, timeout: Duration) -> Vec<Exit>;
    /// Sends `signal` to those still running.
    fn signal(&mut self, signal: i32);
    /// Passes on a signal the spawner received (direct workers got it from the process group).
    fn relay(&mut self, signal: i32);
}

/// Direct workers: the spawner's children.
struct Children(Vec<Option<Child>>);

impl Workers for Children {
    fn running(&self) -> usize {
        self.0.iter().flatten().count()
    }

    fn wait_exits(&mut self, timeout: Duration) -> Vec<Exit> {
        let began = Instant::now();
        loop {
            let mut exits = Vec::new();
            for (rank, slot) in self.0.iter_mut().enumerate() {
                let Some(child) = slot else { continue };
                let status = match child.try_wait() {
                    Ok(Some(status)) => status,
                    Ok(None) => continue,
                    Err(_) => ExitStatus::from_raw(0),
                };
                exits.push(Exit {
                    rank,
                    pid: child.id(),
                    code: status
                        .code()
                        .unwrap_or_else(|| -status.signal().unwrap_or(0)),
                });
                *slot = None;
            }
            if !exits.is_empty() || began.elapsed() >= timeout {
                return exits;
            }
            std::thread::sleep(POLL.min(timeout));
        }
    }

    fn signal(&mut self, signal: i32) {
        for child in self.0.iter().flatten() {
            // SAFETY: signals our own child, which has not been reaped.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    fn relay(&mut self, _: i32) {}
}

/// How often the spawner looks at its workers.
const POLL: Duration = Duration::from_millis(20);

/// What each rank gets on top of the spawner's environment: torchrun's variables, and
/// OMP_NUM_THREADS=1 for several workers unless it is set, as torchrun does.
fn rank_envs(nproc: u32, port: u16, run_id: &str) -> Vec<Vec<(&'static str, String)>> {
    let threads = nproc > 1 && std::env::var_os("OMP_NUM_THREADS").is_none();
    (0..nproc)
        .map(|rank| {
            let mut env = worker_env(rank, nproc, port, run_id);
            if threads {
                env.push(("OMP_NUM_THREADS", "1".into()));
            }
            env
        })
        .collect()
}

/// Runs the spawner on `args` (after [`SPAWN_FLAG`]) and exits with the workers' outcome; `program`,
/// when its `elastic-run` was handed one, runs in place of the Python named.
pub fn run(args: &[String], program: Option<&Program>, mode: Mode) -> ! {
    let (nproc, python, script) = match args {
        [n, python, script, ..] => match n.parse::<u32>() {
            Ok(n) if n > 0 => (n, python, script),
            _ => usage(),
        },
        _ => usage(),
    };
    // A stop is the workers' to carry out (they see the stop file, or the same signal from the
    // process group, relayed to a pool's): the spawner waits for them. A handler, not SIG_IGN,
    // which exec would keep.
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(signal, record as *const () as libc::sighandler_t) };
    }
    let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(e) => fail(&format!("no free port for the rendezvous: {e}")),
    };
    let run_id = format!("gangway-{}", std::process::id());
    let envs = rank_envs(nproc, port, &run_id);
    let (python, rest) = (Path::new(python), &args[3..]);
    if mode == Mode::Pool {
        match crate::pool::launch(python, program, script, rest, &envs) {
            Ok(workers) => std::process::exit(supervise(workers)),
            Err(why) => {
                eprintln!("elastic-run: no warm pool ({why}): starting the workers directly")
            }
        }
    }
    let mut workers = Children(Vec::with_capacity(nproc as usize));
    for (rank, env) in envs.into_iter().enumerate() {
        let mut command = python_command(python, program);
        command.arg("-u").arg(script).args(rest).envs(env);
        match command.spawn() {
            Ok(child) => workers.0.push(Some(child)),
            Err(e) => {
                stop_all(&mut workers);
                // A Python that cannot be run fails every try alike: a user error, not retried.
                eprintln!(
                    "elastic-run: starting worker {rank} with --python {}: {e}",
                    python.display()
                );
                std::process::exit(2);
            }
        }
    }
    std::process::exit(supervise(workers))
}

/// Waits for the workers: 0 when all succeed; at the first failure, stops the others and returns 1.
fn supervise(mut workers: impl Workers) -> i32 {
    while workers.running() > 0 {
        let signal = RECEIVED.swap(0, Ordering::Relaxed);
        if signal != 0 {
            workers.relay(signal);
        }
        let exits = workers.wait_exits(POLL);
        if let Some(failed) = exits.iter().find(|e| e.code != 0) {
            report(failed);
            let others = stop_all(&mut workers);
            for exit in exits.iter().chain(&others) {
                if exit.code != 0 && exit != failed {
                    report(exit);
                }
            }
            return 1;
        }
    }
    0
}

/// A failed worker, as torchrun's summary shows it (negative: killed by that signal).
fn report(exit: &Exit) {
    eprintln!(
        "elastic-run: worker rank {} failed\n  exitcode  : {} (pid: {})",
        exit.rank, exit.code, exit.pid
    );
}

/// SIGTERM to the workers still running, then SIGKILL to those left after [`FAILURE_GRACE`]; their
/// exits.
fn stop_all(workers: &mut impl Workers) -> Vec<Exit> {
    workers.signal(libc::SIGTERM);
    let began = Instant::now();
    let mut exits = Vec::new();
    while workers.running() > 0 {
        if began.elapsed() > FAILURE_GRACE {
            workers.signal(libc::SIGKILL);
        }
        exits.extend(workers.wait_exits(POLL));
    }
    exits
}

fn usage() -> ! {
    fail(&format!(
        "usage: elastic-run {SPAWN_FLAG} NPROC PYTHON SCRIPT [ARGS...]"
    ))
}

fn fail(why: &str) -> ! {
    eprintln!("elastic-run: {why}");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_get_torchruns_variables_with_rank_zero_hosting_the_store() {
        let env: std::collections::BTreeMap<_, _> =
            worker_env(2, 4, 29500, "run").into_iter().collect();
        for (key, value) in [
            ("RANK", "2"),
            ("LOCAL_RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "False"),
        ] {
            assert_eq!(env[key], value, "{key}");
        }
    }
}
