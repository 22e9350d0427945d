//! One attempt's processes and record: how its `elastic-run` is found, pinned, signalled and seen
//! to end, how all of them are killed, and what a restarted daemon re-adopts it by.

use std::path::Path;

use gangway_protocol::worker::WorkerEvent;

use super::contract::write_atomically_as;
use super::{ATTEMPT_VAR, Confinement, Run, RunRecord, reported};
use crate::confine;
use crate::process::{Pinned, kill_with_any_env, pinned_with_env, processes_with_env, stat_fields};

/// An attempt's processes: those in its cgroup, where it has one (a job cannot leave it); else those
/// that carry its marker, or `None` where their environments did not answer
/// ([`processes_with_env`]).
pub(super) fn attempt_processes(marker: &str, confinement: &Confinement) -> Option<Vec<i32>> {
    match &confinement.cgroup {
        Some(cgroup) => Some(confine::processes(cgroup)),
        None => processes_with_env(ATTEMPT_VAR, marker, confinement.owner()),
    }
}

/// Writes an attempt's record, which a restarted daemon re-adopts it by (a daemon that cannot write
/// it still runs the attempt, but a restart will not find it). It holds the job's command and
/// environment (tokens, keys), so it is the daemon's alone (0600), as the journal is.
pub(super) fn write_run_file(path: &Path, record: &RunRecord) {
    if let Err(e) = serde_json::to_vec(record)
        .map_err(std::io::Error::other)
        .and_then(|bytes| write_atomically_as(path, &bytes, 0o600))
    {
        tracing::warn!(error = %e, "writing {}: a restarted daemon cannot re-adopt it", path.display());
    }
}

/// The attempt's `elastic-run` among the processes whose [`ATTEMPT_VAR`] is `marker`: the oldest
/// of those that lead their own group (the daemon starts it in one). Its guardian, torchrun, the
/// workers and a pool's ranks lead groups or sessions of their own too, but all start after it;
/// among those started in the same clock tick, one whose parent carries no marker goes first, then
/// the lowest pid. `Some(None)`: none leads one (its `elastic-run`, and what it started, are gone);
/// `None`: their environments did not answer.
fn marked_leader(marker: &str, confinement: &Confinement) -> Option<Option<i32>> {
    let pids = attempt_processes(marker, confinement)?;
    // A process whose stat cannot be read has ended.
    let age = |pid: i32| {
        let [parent, started] = stat_fields(&pid.to_string(), [4, 22])?;
        let (parent, started): (i32, u64) = (parent.parse().ok()?, started.parse().ok()?);
        Some((started, pids.contains(&parent), pid))
    };
    let leaders = pids.iter().copied().filter(|&pid| {
        // SAFETY: getpgid(2) reads another process's group id; it changes nothing.
        let group = unsafe { libc::getpgid(pid) };
        group == pid
    });
    Some(leaders.filter_map(age).min().map(|(_, _, pid)| pid))
}

impl Run {
    /// Work done by control-plane time `now`, as the scheduler counts it: what the workers last
    /// reported; without a report, the model's estimate from the launch.
    pub(super) fn work_done(&self, now: f64) -> f64 {
        let l = &self.launch;
        // Never all of it: only the workers' own exit finishes a job.
        let most = l.total_steps * 0.999;
        if let Some(fraction) = self.reported {
            return (fraction * l.total_steps).min(most);
        }
        let done_at_launch = l.total_steps - l.remaining_steps;
        let running = (now - self.launched_at - l.startup_seconds).max(0.0);
        (done_at_launch + running * l.steps_per_second).min(most)
    }

    /// A progress event when the workers reported something new since the last poll.
    pub(super) fn progressed(&mut self) -> Option<WorkerEvent> {
        let bytes = match self.files.progress() {
            Ok(bytes) => bytes?,
            Err(e) => {
                if !std::mem::replace(&mut self.unreadable, true) {
                    tracing::warn!(job = self.launch.job.0, error = %e, "the workers' progress is not readable");
                }
                return None;
            }
        };
        let (fraction, measured) = reported(&bytes)?;
        if self.reported == Some(fraction) {
            return None;
        }
        self.reported = Some(fraction);
        Some(WorkerEvent::Progressed {
            job: self.launch.job,
            attempt: self.attempt,
            steps_done: fraction * self.launch.total_steps,
            measured,
        })
    }

    pub(super) fn exited(&mut self) -> bool {
        // Taken to be alive while its processes do not answer.
        self.ended() == Some(true)
    }

    /// Whether its `elastic-run` has ended; `None` while an adopted run's processes do not answer.
    pub(super) fn ended(&mut self) -> Option<bool> {
        match &mut self.child {
            Some(child) => Some(!matches!(child.try_wait(), Ok(None))),
            None => self.leader_gone(),
        }
    }

    /// Whether a run that is not our child (re-adopted) is over: its `elastic-run` is no longer
    /// the process of the attempt its pid names; `None` while its processes do not answer. A run
    /// adopted without its pid (its daemon stopped between writing the record and learning the
    /// pid) looks for it by marker first, and keeps it in its run file once found.
    pub(super) fn leader_gone(&mut self) -> Option<bool> {
        self.live_leader().map(|leader| leader.is_none())
    }

    /// The `elastic-run` of a run that is not our child, pinned while it runs: `Some(None)` once it
    /// has ended (or, adopted without its pid, where no process of the attempt leads its group);
    /// `None` while its processes do not answer, or where it could not be pinned (tried again
    /// later). Found and checked by one look at its processes, then told apart by its pidfd alone
    /// (where the kernel offers none, looked at again each time).
    fn live_leader(&mut self) -> Option<Option<&Pinned>> {
        match self.leader.as_ref().and_then(Pinned::ended) {
            Some(true) => return Some(None),
            Some(false) => return Some(self.leader.as_ref()),
            None => {}
        }
        if !self.knows_leader()? {
            return Some(None);
        }
        let found = attempt_pinned(self.pid, &self.marker, &self.confinement, |found| found)?;
        self.leader = found
            .inspect_err(|error| {
                tracing::warn!(job = self.launch.job.0, pid = self.pid, %error, "pinning the adopted elastic-run");
            })
            .ok()?;
        Some(self.leader.as_ref())
    }

    /// Whether a run that is not our child knows its `elastic-run`'s pid: one adopted without it
    /// looks for it by marker (the attempt's process that leads its group), and keeps it in its
    /// run file once found. `Some(false)` where none was found (taken for ended); `None` while its
    /// processes do not answer.
    fn knows_leader(&mut self) -> Option<bool> {
        if self.pid != 0 {
            return Some(true);
        }
        let Some(pid) = marked_leader(&self.marker, &self.confinement)? else {
            return Some(false);
        };
        tracing::info!(
            job = self.launch.job.0,
            pid,
            "found the adopted attempt's elastic-run"
        );
        self.pid = pid;
        self.save_record();
        Some(true)
    }

    /// SIGTERM to the `elastic-run` of a run that is not our child, where it is still the
    /// attempt's: through its pidfd once pinned ([`Run::live_leader`]), else checked and signalled
    /// in one look at its processes. `Some(true)` sent; `Some(false)` it has ended (or,
    /// adopted without its pid, no process of the attempt leads its group); `None` while its
    /// processes do not answer, or where it could not be signalled (tried again later).
    pub(super) fn signal_leader(&mut self) -> Option<bool> {
        let job = self.launch.job.0;
        let warn = move |pid, error: &std::io::Error| {
            tracing::warn!(job, pid, %error, "signalling the adopted elastic-run");
        };
        // Held by its pidfd: the signal reaches it or, once it has ended, nothing.
        if let Some(leader) = &self.leader
            && let Some(ended) = leader.ended()
        {
            if ended {
                return Some(false);
            }
            return (leader.signal(libc::SIGTERM))
                .inspect_err(|error| warn(leader.pid(), error))
                .ok();
        }
        // Otherwise checked and signalled in one look: nothing else holds the pid between the two
        // where the kernel offers no pidfds.
        if !self.knows_leader()? {
            return Some(false);
        }
        let pid = self.pid;
        attempt_pinned(pid, &self.marker, &self.confinement, |found| {
            found?.map_or(Ok(false), |leader| leader.signal(libc::SIGTERM))
        })?
        .inspect_err(|error| warn(pid, error))
        .ok()
    }

    /// Removes the attempt's files once its ending is known.
    pub(super) fn forget(&self) {
        self.files.remove();
        let _ = std::fs::remove_file(&self.run_file);
    }

    /// Rewrites its run file after a change in place, so that a restarted daemon re-adopts it as
    /// it is now.
    pub(super) fn save_record(&self) {
        let record = RunRecord {
            pid: self.pid,
            launched_at: self.launched_at,
            stop_timeout: self.stop_timeout,
            launch: self.launch.clone(),
            confinement: self.confinement.clone(),
            marker: Some(self.marker.clone()),
            files: Some(self.files.clone()),
        };
        write_run_file(&self.run_file, &record);
    }
}

/// Process `pid` pinned ([`Pinned`]) where, once pinned, it is a live process of the attempt (its
/// pid may have passed to another process since it was read): in its cgroup, where it has one
/// (read from the cgroup, never from the job's own memory), else carrying its marker; handed to
/// `then` in the same look: `Ok(None)` where it is not (or has ended), `Err` where it could not be
/// pinned. What `then` answers, or `None` where its environment did not answer (see
/// [`processes_with_env`]).
fn attempt_pinned<T: Send + 'static>(
    pid: i32,
    marker: &str,
    confinement: &Confinement,
    then: impl FnOnce(std::io::Result<Option<Pinned>>) -> T + Send + 'static,
) -> Option<T> {
    if pid <= 0 {
        return Some(then(Ok(None)));
    }
    match &confinement.cgroup {
        Some(cgroup) => Some(then(Pinned::checked(pid, || {
            confine::processes(cgroup).contains(&pid)
        }))),
        None => pinned_with_env(pid, ATTEMPT_VAR, marker, confinement.owner(), then),
    }
}

/// SIGKILLs every process of an attempt, in one pass: its cgroup's, or without one those carrying
/// `marker` (its owner's: see [`processes_with_env`]). Whether none was found, and so the attempt
/// is over; `None` while they do not answer. A cgroup lists a process until late in its exit; a
/// marker scan, only until the process has let its memory go.
pub(super) fn kill_attempt(marker: &str, confinement: &Confinement) -> Option<bool> {
    match &confinement.cgroup {
        Some(cgroup) => Some(confine::kill(cgroup)),
        None => kill_with_any_env(ATTEMPT_VAR, &[marker.to_owned()], confinement.owner())
            .map(|found| found.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// An attempt's `elastic-run` is found by marker as the oldest marked process leading its
    /// group, not a process it started that leads a group or session of its own (its guardian,
    /// torchrun, a worker).
    #[test]
    fn the_marked_leader_is_the_oldest_group_leader_of_the_attempt() {
        use std::os::unix::process::CommandExt;
        let marker = format!("leader-test-{}", std::process::id());
        let mut elastic_run = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & wait"])
            .env(ATTEMPT_VAR, &marker)
            .process_group(0)
            .spawn()
            .unwrap();
        let confinement = Confinement {
            owner: Some(crate::inherit::this_user()),
            ..Confinement::default()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            let pids = attempt_processes(&marker, &confinement).unwrap_or_default();
            if pids.len() == 2 {
                break marked_leader(&marker, &confinement);
            }
            assert!(
                Instant::now() < deadline,
                "its child never started: {pids:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        for pid in attempt_processes(&marker, &confinement).unwrap_or_default() {
            // SAFETY: kill(2) of a process this test started (it carries the test's marker).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = elastic_run.wait();
        assert_eq!(found, Some(Some(elastic_run.id() as i32)));
    }
}
