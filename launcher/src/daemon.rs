//! `elastic-run --daemon ADDR`: submits the job to a running `gangway serve`, then follows it there,
//! like `sbatch --wait`: its output, where it runs, how it ends.
//!
//! The daemon runs the same command (without `--daemon`) through its process executor, on the GPUs
//! its policy picks, in this directory and with this environment. Interrupting `elastic-run` cancels
//! the job: its workers save a checkpoint first, so the same command resumes it.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gangway_protocol::api::{JobInfo, JobRequest};
use gangway_protocol::lifecycle::Phase;
use gangway_protocol::worker::RunCommand;

use crate::cli::Invocation;
use crate::client::{Client, TOKEN_VAR, new_idempotency_key};
use crate::local::{Ending, LaunchError, default_job_id};

fn daemon_error(what: impl Into<String>) -> LaunchError {
    LaunchError::Daemon(what.into())
}

/// The command the daemon runs: `args` without `--daemon`, with the job id made explicit so that
/// every launch of the job finds the same checkpoints.
fn daemon_args(args: &[String], job_id: &str, has_job_id: bool) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + 2);
    if !has_job_id {
        out.extend(["--job-id".to_owned(), job_id.to_owned()]);
    }
    let mut k = 0;
    let mut removed = false;
    while k < args.len() {
        // gangway's options come before the script, so the first --daemon is ours.
        if !removed && args[k] == "--daemon" {
            k += 2;
            removed = true;
            continue;
        }
        if !removed && args[k].starts_with("--daemon=") {
            k += 1;
            removed = true;
            continue;
        }
        out.push(args[k].clone());
        k += 1;
    }
    out
}

/// Submits `inv` (parsed from `args`) to the daemon at `addr` and follows it until it ends, or until
/// `stop` is raised, which cancels it.
pub fn submit_and_follow(
    inv: &Invocation,
    args: &[String],
    addr: &str,
    stop: &AtomicBool,
) -> Result<Ending, LaunchError> {
    let options = &inv.options;
    let job_id = options
        .job_id
        .clone()
        .unwrap_or_else(|| default_job_id(inv));
    let cwd =
        std::env::current_dir().map_err(|e| daemon_error(format!("current directory: {e}")))?;
    let checkpoint_dir = cwd.join(
        options
            .checkpoint_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("checkpoints").join(&job_id)),
    );
    std::fs::create_dir_all(&checkpoint_dir)
        .map_err(|e| daemon_error(format!("creating {}: {e}", checkpoint_dir.display())))?;
    let log = checkpoint_dir.join("elastic-run.log");
    std::fs::write(&log, b"")
        .map_err(|e| daemon_error(format!("creating {}: {e}", log.display())))?;
    // Its user's share unless it names another: a daemon lets another user name only theirs, or
    // the tenants its operator gave them.
    let tenant = gangway_protocol::command::tenant_to_submit(
        options.tenant.clone(),
        crate::inherit::this_user(),
    )
    .map_err(daemon_error)?;
    let request = JobRequest {
        id: None,
        job_type: options.job_type.clone(),
        tenant,
        gpus: options.gpus.1,
        min_gpus: (options.gpus.0 < options.gpus.1).then_some(options.gpus.0),
        tp: options.tp,
        pp: options.pp,
        pp_by_type: options.pp_by_type.clone().unwrap_or_default(),
        // Its global batch is what goodput policies price it at; a range, what they choose within.
        batch: options.global_batch.map(|(_, max)| max),
        min_batch: options
            .global_batch
            .and_then(|(min, max)| (min < max).then_some(min)),
        work: options.expected_runtime,
        weight: 1.0,
        run: Some(RunCommand {
            args: daemon_args(args, &job_id, options.job_id.is_some()),
            cwd,
            // As text: a variable that is not UTF-8 cannot travel in JSON, and is left out; so is the
            // daemon's token, which the job has no use for.
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .filter(|(k, _)| k != TOKEN_VAR)
                .collect(),
            log: Some(log.clone()),
            user: None,
        }),
    };
    let client = Client::new(addr, None).map_err(daemon_error)?;
    let submitted = client
        .post("/jobs", &request, Some(&new_idempotency_key()))
        .map_err(daemon_error)?;
    let id = submitted["id"]
        .as_u64()
        .ok_or_else(|| daemon_error(format!("{addr} answered {submitted} to a submission")))?;
    eprintln!(
        "elastic-run: submitted {job_id} to {addr} as job {id}; its output follows (Ctrl-C cancels it after a checkpoint)"
    );
    let mut tail = Tail::new(log);
    let mut last_phase: Option<Phase> = None;
    let mut cancelled = false;
    let job = format!("/jobs/{id}");
    // The daemon may be slow to answer (a round waiting for workers to checkpoint) or restarting:
    // the job goes on meanwhile, so keep following it for a while.
    let mut last_contact = Instant::now();
    let mut lost = false;
    loop {
        tail.copy_new(&mut std::io::stdout());
        let answered = if stop.load(Ordering::SeqCst) && !cancelled {
            eprintln!("elastic-run: cancelling job {id}; its workers save a checkpoint first");
            client.delete(&job).map(|_| {
                cancelled = true;
                None
            })
        } else {
            client.get(&job).and_then(|body| {
                serde_json::from_value::<JobInfo>(body)
                    .map_err(|e| format!("{addr} sent a job this elastic-run cannot read: {e}"))
                    .map(|info| follow(id, &info, &mut last_phase))
            })
        };
        match answered {
            Ok(None) => {}
            Ok(Some(phase)) => {
                tail.copy_new(&mut std::io::stdout());
                return Ok(ending(id, phase, cancelled));
            }
            Err(why) if last_contact.elapsed() < FOLLOW_PATIENCE => {
                if !std::mem::replace(&mut lost, true) {
                    eprintln!("elastic-run: {why}; retrying (the job goes on)");
                }
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            Err(why) => return Err(daemon_error(why)),
        }
        if std::mem::take(&mut lost) {
            eprintln!("elastic-run: the daemon answers again");
        }
        last_contact = Instant::now();
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// How long `--daemon` keeps following a job through a daemon that does not answer.
const FOLLOW_PATIENCE: Duration = Duration::from_secs(15 * 60);

/// Prints the job's moves; its phase once it has ended.
fn follow(id: u64, info: &JobInfo, last_phase: &mut Option<Phase>) -> Option<Phase> {
    if *last_phase != Some(info.phase) {
        let gpus: Vec<String> = info.placement.iter().map(u32::to_string).collect();
        eprintln!(
            "elastic-run: job {id} {}{}",
            info.phase,
            if gpus.is_empty() {
                String::new()
            } else {
                format!(" on GPUs {}", gpus.join(","))
            }
        );
        *last_phase = Some(info.phase);
    }
    info.phase.is_terminal().then_some(info.phase)
}

/// How `elastic-run --daemon` ends when its job ended in `phase`.
fn ending(id: u64, phase: Phase, cancelled: bool) -> Ending {
    match phase {
        Phase::Finished => Ending::Completed,
        Phase::Cancelled if cancelled => {
            eprintln!("elastic-run: cancelled; run the same command to resume");
            Ending::Preempted
        }
        Phase::Cancelled => Ending::Failed {
            code: 1,
            why: "cancelled at the daemon".into(),
        },
        _ => Ending::Failed {
            code: 1,
            why: format!("the daemon reports job {id} {phase}; see its output above"),
        },
    }
}

/// Follows a growing file.
struct Tail {
    path: PathBuf,
    offset: u64,
}

impl Tail {
    fn new(path: PathBuf) -> Self {
        Tail { path, offset: 0 }
    }

    fn copy_new(&mut self, out: &mut impl Write) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buffer = Vec::new();
        if let Ok(read) = file.read_to_end(&mut buffer) {
            self.offset += read as u64;
            let _ = out.write_all(&buffer);
            let _ = out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_daemon_runs_the_same_command_without_daemon_and_with_an_explicit_job_id() {
        let args = words("--gpus 2 --daemon 127.0.0.1:7 --standalone train.py --daemon x");
        assert_eq!(
            daemon_args(&args, "train-1", false),
            words("--job-id train-1 --gpus 2 --standalone train.py --daemon x")
        );
        let args = words("--job-id mine --daemon=127.0.0.1:7 train.py");
        assert_eq!(
            daemon_args(&args, "mine", true),
            words("--job-id mine train.py")
        );
    }
}
