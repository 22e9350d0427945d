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
use std::path::Path;
use std::process::{Child, Command, ExitStatus};

use crate::inherit::{Program, python_command};
use std::time::{Duration, Instant};

/// The first argument that makes `elastic-run` the spawner: `elastic-run SPAWN_FLAG NPROC PYTHON
/// SCRIPT [ARGS...]`.
pub const SPAWN_FLAG: &str = "--gangway-spawn-workers";

/// How long the other workers get to exit after one failed, before they are killed.
const FAILURE_GRACE: Duration = Duration::from_secs(30);

/// The command line that runs `nproc` workers of `python script args` through the spawner.
pub fn command(exe: &Path, nproc: u32, python: &Path, script: &str, args: &[String]) -> Command {
    let mut command = Command::new(exe);
    command
        .arg(SPAWN_FLAG)
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

extern "C" fn ignore(_: libc::c_int) {}

/// Runs the spawner on `args` (after [`SPAWN_FLAG`]) and exits with the workers' outcome; `program`,
/// when its `elastic-run` was handed one, runs in place of the Python named.
pub fn run(args: &[String], program: Option<&Program>) -> ! {
    let (nproc, python, script) = match args {
        [n, python, script, ..] => match n.parse::<u32>() {
            Ok(n) if n > 0 => (n, python, script),
            _ => usage(),
        },
        _ => usage(),
    };
    // A stop is the workers' to carry out (they see the stop file, or the same signal from the
    // process group): the spawner waits for them. A handler, not SIG_IGN, which exec would keep.
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler does nothing.
        unsafe { libc::signal(signal, ignore as *const () as libc::sighandler_t) };
    }
    let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(e) => fail(&format!("no free port for the rendezvous: {e}")),
    };
    let run_id = format!("gangway-{}", std::process::id());
    // OMP_NUM_THREADS=1 for several workers unless set, as torchrun does.
    let threads = (nproc > 1 && std::env::var_os("OMP_NUM_THREADS").is_none()).then_some("1");
    let mut workers: Vec<Child> = Vec::with_capacity(nproc as usize);
    for rank in 0..nproc {
        let mut command = python_command(Path::new(python), program);
        command
            .arg("-u")
            .arg(script)
            .args(&args[3..])
            .envs(worker_env(rank, nproc, port, &run_id));
        if let Some(threads) = threads {
            command.env("OMP_NUM_THREADS", threads);
        }
        match command.spawn() {
            Ok(child) => workers.push(child),
            Err(e) => {
                stop_all(&mut workers);
                // A Python that cannot be run fails every try alike: a user error, not retried.
                eprintln!("elastic-run: starting worker {rank} with --python {python}: {e}");
                std::process::exit(2);
            }
        }
    }
    std::process::exit(supervise(workers))
}

/// Waits for the workers: 0 when all succeed; at the first failure, stops the others and returns 1.
fn supervise(mut workers: Vec<Child>) -> i32 {
    let mut running: Vec<usize> = (0..workers.len()).collect();
    while !running.is_empty() {
        let mut failed = None;
        running.retain(|&rank| match workers[rank].try_wait() {
            Ok(Some(status)) if status.success() => false,
            Ok(Some(status)) => {
                failed.get_or_insert((rank, status));
                false
            }
            Ok(None) => true,
            Err(_) => false,
        });
        if let Some((rank, status)) = failed {
            report(rank, workers[rank].id(), status);
            stop_all(&mut workers);
            for (other, worker) in workers.iter_mut().enumerate() {
                if other != rank
                    && let Ok(Some(status)) = worker.try_wait()
                    && !status.success()
                {
                    report(other, worker.id(), status);
                }
            }
            return 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    0
}

/// A failed worker, as torchrun's summary shows it (negative: killed by that signal).
fn report(rank: usize, pid: u32, status: ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0));
    eprintln!("elastic-run: worker rank {rank} failed\n  exitcode  : {code} (pid: {pid})");
}

/// SIGTERM to the workers still running, then SIGKILL to those left after [`FAILURE_GRACE`].
fn stop_all(workers: &mut [Child]) {
    for worker in workers.iter_mut() {
        if matches!(worker.try_wait(), Ok(None)) {
            // SAFETY: signals our own child, which has not been reaped.
            unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
        }
    }
    let began = Instant::now();
    while workers.iter_mut().any(|w| matches!(w.try_wait(), Ok(None))) {
        if began.elapsed() > FAILURE_GRACE {
            for worker in workers.iter_mut() {
                let _ = worker.kill();
                let _ = worker.wait();
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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
