//! The only way the control plane reaches workers: the [`Executor`] trait (in `gangway-protocol`, so
//! that the launcher implements it without depending on the actors), and [`SimExecutor`], which runs
//! jobs in virtual time at the throughput model's rates.

use crate::IdMap;
use gangway_core::job::JobId;

pub use gangway_protocol::worker::{
    Executor, ExecutorError, Launch, Measured, Resources, RunAs, RunCommand, Segment, WorkerEvent,
};

/// A simulated job's run.
#[derive(Clone, Debug)]
struct SimRun {
    attempt: u64,
    total_steps: f64,
    /// Work left when the current pace began (kept as given, so that the finish is computed from
    /// exactly the engine's figure).
    left_at_pace: f64,
    /// Steps start (again) here.
    progress_from: f64,
    steps_per_second: f64,
    /// Where the pace changes, as the job progresses: (work done, the rate from there on), in order.
    changes: Vec<(f64, f64)>,
    finish_at: f64,
    last_checkpoint: f64,
}

impl SimRun {
    /// Work left at `t`, running at `steps_per_second` and then at each change of pace in turn.
    fn left_at(&self, t: f64) -> f64 {
        let mut elapsed = (t - self.progress_from).max(0.0);
        let (mut left, mut rate) = (self.left_at_pace, self.steps_per_second);
        for &(at, next) in &self.changes {
            let to_change = (left - (self.total_steps - at)) / rate;
            if to_change >= elapsed {
                break;
            }
            elapsed -= to_change;
            left = self.total_steps - at;
            rate = next;
        }
        (left - elapsed * rate).max(0.0)
    }

    fn done_by(&self, t: f64) -> f64 {
        self.total_steps - self.left_at(t)
    }

    /// Takes `pace` (the engine's segments from the current one on): the first sets
    /// `steps_per_second`'s reach, the others the changes after it.
    fn follow(&mut self, pace: &[Segment]) {
        let done = self.total_steps - self.left_at_pace;
        self.changes = pace
            .windows(2)
            .map(|w| (w[0].until, w[1].rate))
            .filter(|&(at, rate)| at > done && at < self.total_steps && rate > 0.0)
            .collect();
    }

    fn reschedule(&mut self) {
        // The same expressions as the engine's, so that both predict the same instant: each segment
        // from where the last one ended.
        let (mut t, mut left, mut rate) =
            (self.progress_from, self.left_at_pace, self.steps_per_second);
        for &(at, next) in &self.changes {
            t += (left - (self.total_steps - at)) / rate;
            left = self.total_steps - at;
            rate = next;
        }
        self.finish_at = t + left / rate;
    }
}

/// Workers that exist only in virtual time: each job progresses at the pace it was launched with and
/// finishes when its remaining steps are done. Used by the sim/live parity test, the crash tests and
/// `gangway serve --fake-gpus`.
#[derive(Debug)]
pub struct SimExecutor {
    runs: IdMap<JobId, SimRun>,
    /// Seconds of (virtual) time between the checkpoints that running jobs report.
    checkpoint_every: f64,
}

impl SimExecutor {
    /// No jobs yet; running jobs report a checkpoint every `checkpoint_every` virtual seconds.
    pub fn new(checkpoint_every: f64) -> Self {
        SimExecutor {
            runs: IdMap::default(),
            checkpoint_every,
        }
    }

    /// How many jobs have running workers.
    pub fn running(&self) -> usize {
        self.runs.len()
    }
}

impl Default for SimExecutor {
    fn default() -> Self {
        SimExecutor::new(600.0)
    }
}

impl Executor for SimExecutor {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        if self
            .runs
            .get(&launch.job)
            .is_some_and(|r| r.attempt == launch.attempt)
        {
            return Ok(());
        }
        if launch.steps_per_second.is_nan() || launch.steps_per_second <= 0.0 {
            return Err(ExecutorError::Launch {
                job: launch.job,
                reason: format!("pace {} steps/s", launch.steps_per_second),
            });
        }
        let mut run = SimRun {
            attempt: launch.attempt,
            total_steps: launch.total_steps,
            left_at_pace: launch.remaining_steps,
            progress_from: now + launch.startup_seconds,
            steps_per_second: launch.steps_per_second,
            changes: Vec::new(),
            finish_at: f64::INFINITY,
            last_checkpoint: now,
        };
        run.follow(&launch.pace);
        run.reschedule();
        self.runs.insert(launch.job, run);
        Ok(())
    }

    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        let run = self
            .runs
            .remove(&job)
            .ok_or(ExecutorError::NotRunning(job))?;
        Ok(run.done_by(now))
    }

    fn retune(&mut self, job: JobId, steps_per_second: f64, pace: &[Segment], now: f64) {
        if let Some(run) = self.runs.get_mut(&job) {
            run.left_at_pace = run.left_at(now);
            run.progress_from = run.progress_from.max(now);
            run.steps_per_second = steps_per_second;
            run.follow(pace);
            run.reschedule();
        }
    }

    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        self.runs.get(&job).is_some_and(|r| r.attempt == attempt)
    }

    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        let mut finished: Vec<(f64, JobId, u64)> = Vec::new();
        let mut events = Vec::new();
        for (&job, run) in &mut self.runs {
            if run.finish_at <= now {
                finished.push((run.finish_at, job, run.attempt));
            } else if now - run.last_checkpoint >= self.checkpoint_every {
                run.last_checkpoint = now;
                events.push(WorkerEvent::Checkpointed {
                    job,
                    attempt: run.attempt,
                    steps_done: run.done_by(now),
                });
            }
        }
        finished.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        // The runs come in the map's order, which differs from run to run; the checkpoints are
        // journaled in the order they are told.
        events.sort_by_key(WorkerEvent::job);
        for &(at, job, attempt) in &finished {
            self.runs.remove(&job);
            events.push(WorkerEvent::Finished { job, attempt, at });
        }
        events
    }

    fn next_event(&self) -> Option<f64> {
        self.runs
            .values()
            .map(|r| r.finish_at)
            .min_by(f64::total_cmp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_core::cluster::{GpuId, GpuTypeId};

    fn launch(job: u32, attempt: u64, remaining: f64) -> Launch {
        Launch {
            job: JobId(job),
            attempt,
            gpu_type: GpuTypeId(0),
            gpus: [GpuId(0)].into_iter().collect(),
            steps_per_second: 2.0,
            pace: Vec::new(),
            startup_seconds: 10.0,
            remaining_steps: remaining,
            total_steps: 100.0,
            resources: None,
            run: None,
            batch: None,
            pp: None,
        }
    }

    #[test]
    fn a_job_finishes_after_its_startup_and_remaining_work() {
        let mut exec = SimExecutor::new(1e9);
        exec.launch(&launch(1, 7, 60.0), 100.0).unwrap();
        assert_eq!(exec.next_event(), Some(100.0 + 10.0 + 30.0));
        assert!(exec.poll(139.0).is_empty());
        assert_eq!(
            exec.poll(200.0),
            [WorkerEvent::Finished {
                job: JobId(1),
                attempt: 7,
                at: 140.0
            }]
        );
        assert_eq!(exec.running(), 0);
    }

    #[test]
    fn a_run_follows_its_pace_where_it_changes() {
        let mut exec = SimExecutor::new(1e9);
        // 60 of 100 steps left: 2 steps/s to step 60, then 4/s, then 1/s from step 80.
        let paced = Launch {
            pace: vec![
                Segment {
                    rate: 2.0,
                    until: 60.0,
                },
                Segment {
                    rate: 4.0,
                    until: 80.0,
                },
                Segment {
                    rate: 1.0,
                    until: f64::INFINITY,
                },
            ],
            ..launch(1, 7, 60.0)
        };
        exec.launch(&paced, 0.0).unwrap();
        // 10 s of startup, 10 s to step 60, 5 s to step 80, 20 s to the end.
        assert_eq!(exec.next_event(), Some(45.0));
        // Stopped at 22.5 s: 2.5 s at 4/s after step 60 reach step 70.
        assert_eq!(exec.stop(JobId(1), 22.5), Ok(70.0));
    }

    #[test]
    fn relaunching_the_same_attempt_is_a_no_op_and_stop_returns_the_work_saved() {
        let mut exec = SimExecutor::new(1e9);
        exec.launch(&launch(1, 7, 100.0), 0.0).unwrap();
        // A replayed decision launches the same attempt again: the run is not restarted.
        exec.launch(&launch(1, 7, 100.0), 20.0).unwrap();
        assert_eq!(exec.stop(JobId(1), 30.0), Ok(40.0));
        assert_eq!(
            exec.stop(JobId(1), 31.0),
            Err(ExecutorError::NotRunning(JobId(1)))
        );
        assert!(!exec.alive(JobId(1), 7));
    }

    #[test]
    fn retuning_keeps_the_work_done_and_moves_the_finish() {
        let mut exec = SimExecutor::new(1e9);
        exec.launch(&launch(1, 1, 100.0), 0.0).unwrap();
        exec.retune(JobId(1), 4.0, &[], 20.0); // 20 steps done, 80 left at 4/s
        assert_eq!(exec.next_event(), Some(40.0));
    }

    #[test]
    fn running_jobs_report_checkpoints() {
        let mut exec = SimExecutor::new(35.0);
        exec.launch(&launch(1, 1, 100.0), 0.0).unwrap();
        assert!(
            exec.poll(30.0).is_empty(),
            "no checkpoint before the interval"
        );
        assert_eq!(
            exec.poll(40.0),
            [WorkerEvent::Checkpointed {
                job: JobId(1),
                attempt: 1,
                steps_done: 60.0
            }]
        );
    }
}
