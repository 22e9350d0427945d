//! Stops under way: SIGTERM, the wait for the workers' checkpoint, and past the deadline, SIGKILL
//! to every process of the attempt until none is left.

use std::time::Instant;

use gangway_protocol::ids::JobId;

use super::kills::Kills;
use super::{KILL_PATIENCE, ProcessExecutor, Run, Stopping, UNANSWERED_KILL_PATIENCE};

impl Stopping {
    /// Whether its attempt's processes are killed by a scan of its user's at `now`: it has no
    /// cgroup, its `elastic-run` was sent SIGTERM, and its deadline has passed (it may have been
    /// killed already).
    pub(super) fn kill_scanned(&self, now: Instant) -> bool {
        self.signalled
            && self.run.confinement.cgroup.is_none()
            && (self.killed_at.is_some() || now >= self.deadline)
    }

    /// Notes the SIGTERM sent `at`, after the stop was asked (an adopted run's processes did not
    /// answer until then): the workers get their whole grace from it to save their work.
    fn signalled_at(&mut self, at: Instant) {
        self.signalled = true;
        self.deadline = self.deadline.max(at + self.run.stop_timeout);
    }
}

impl ProcessExecutor {
    /// Asks `run` to stop: SIGTERM to its `elastic-run` (see `stop_is_over` for what follows).
    /// Whether it was sent.
    pub(super) fn signal_stop(run: &mut Run) -> bool {
        if run.child.is_none() {
            return run.signal_leader() == Some(true);
        }
        // SAFETY: kill(2) of our child, not reaped (its pid is still its own).
        unsafe { libc::kill(run.pid, libc::SIGTERM) };
        true
    }

    /// Moves `stops` on by one look each at most ([`ProcessExecutor::stop_is_over`]), those of a
    /// user's past their deadline by one scan of that user's processes ([`Kills`]): the jobs, attempts
    /// and saved work of those that are over (their files and leftovers gone), and the stops left.
    pub(super) fn move_stops_on(
        &mut self,
        stops: Vec<Stopping>,
    ) -> (Vec<(JobId, u64, f64)>, Vec<Stopping>) {
        let now = Instant::now();
        let mut kills = Kills::past_deadline(&stops, &self.kill_looks, now);
        let (mut over, mut left) = (Vec::new(), Vec::new());
        for mut stop in stops {
            if self.stop_is_over(&mut stop, &mut kills, now) {
                let (job, attempt) = (stop.run.launch.job, stop.run.attempt);
                over.push((
                    job,
                    attempt,
                    self.finish_stop(stop.run, stop.asked_at, &mut kills),
                ));
            } else {
                left.push(stop);
            }
        }
        // The next look waits from the end of this one.
        (self.kill_looks).looked(kills.scanned(), Instant::now());
        (over, left)
    }

    /// Moves `stop` on at `now` without waiting, with one look at its processes at most (from
    /// `kills`): whether it is over. Before its deadline, once its run exited (our child reaped, or
    /// an adopted run's pinned `elastic-run` ended: an `elastic-run` ends its workers before it
    /// exits). At the deadline every process of the attempt is killed, and the stop is over once
    /// none is left (its cgroup empty, or, without one, a scan of its user's processes, one every
    /// [`super::SCANNED_KILL_LOOK_EVERY`] per user, finding none). It is given up on (what is left is
    /// swept later) [`KILL_PATIENCE`] after the kill where what was left was seen not to end (or
    /// our child not to be reaped), [`UNANSWERED_KILL_PATIENCE`] after it where its processes did
    /// not answer.
    fn stop_is_over(&mut self, stop: &mut Stopping, kills: &mut Kills, now: Instant) -> bool {
        if !stop.signalled {
            // An adopted run whose elastic-run had not answered when the stop was asked: killed
            // without its SIGTERM it would lose its grace, so nothing is done until it answers.
            match stop.run.signal_leader() {
                Some(true) => stop.signalled_at(now),
                Some(false) => return true,
                None => {}
            }
            return false;
        }
        match stop.killed_at {
            None if now < stop.deadline => stop.run.ended() == Some(true),
            // The attempt is killed, and the stop ends or is given up on, only at a look.
            _ if !kills.look_due(stop) => false,
            None => Self::kill_at_deadline(stop, kills, now),
            Some(killed_at) => self.killed_stop_is_over(stop, kills, killed_at, now),
        }
    }

    /// SIGKILL to every process of `stop`'s attempt, its deadline passed: whether the stop is over
    /// (its run had ended), else what is left is looked at from the next look.
    fn kill_at_deadline(stop: &mut Stopping, kills: &mut Kills, now: Instant) -> bool {
        // Our child's end costs no scan; an adopted run's look goes to the kill.
        if stop.run.child.is_some() && stop.run.ended() == Some(true) {
            return true;
        }
        let found_none = kills.kill(&stop.run.marker, &stop.run.confinement);
        let run = &mut stop.run;
        match &mut run.child {
            Some(child) => {
                let _ = child.kill();
            }
            // Not our child: killed once its processes answer.
            None if found_none.is_none() => return false,
            None if found_none == Some(true) => return true,
            None => {}
        }
        tracing::warn!(
            job = run.launch.job.0,
            "the workers outlived the stop timeout; killed them"
        );
        stop.killed_at = Some(now);
        false
    }

    /// Whether `stop`, whose attempt was killed at `killed_at`, is over: once nothing of it is
    /// left, not once its elastic-run has ended. SIGKILL lands asynchronously, and workers tearing
    /// down their GPU contexts outlive their launcher, on GPUs the stop hands on.
    fn killed_stop_is_over(
        &mut self,
        stop: &mut Stopping,
        kills: &mut Kills,
        killed_at: Instant,
        now: Instant,
    ) -> bool {
        // While our child lives (held in the kernel), nothing else could end the stop. (Not our
        // child: nothing to reap, and the sweep is its look.)
        if stop.run.child.is_none() || stop.run.ended() == Some(true) {
            // Killed again at each look, which catches a process forked meanwhile.
            let found_none = kills.kill(&stop.run.marker, &stop.run.confinement);
            match found_none {
                Some(true) => return true,
                // A scan that did not answer tells nothing (its user's scans rest a while after
                // slow ones): the stop waits for one that does, for a while.
                None if now < killed_at + UNANSWERED_KILL_PATIENCE => return false,
                None | Some(false) => {}
            }
        }
        if now < killed_at + KILL_PATIENCE {
            return false;
        }
        let run = &mut stop.run;
        tracing::error!(
            job = run.launch.job.0,
            pid = run.pid,
            "the attempt's processes have not all been seen to end {} s after SIGKILL: the kernel \
             holds them, or their user's processes do not answer a look, most likely waiting on a \
             file system that does not answer (the job's own FUSE mount, say); the stop goes on \
             without them, and they are swept later",
            now.saturating_duration_since(killed_at).as_secs()
        );
        self.unreaped.extend(run.child.take());
        true
    }

    /// What a stop that is over comes to: the work its workers saved. Its files and whatever it
    /// left behind go.
    fn finish_stop(&mut self, mut run: Run, now: f64, kills: &mut Kills) -> f64 {
        // The workers' last report: their checkpoint on the way out.
        run.progressed();
        tracing::info!(
            job = run.launch.job.0,
            seconds = run.launched.elapsed().as_secs_f64(),
            "workers stopped"
        );
        run.forget();
        self.release_with(&run.marker, &run.confinement, kills);
        run.work_done(now)
    }

    /// Whether `job`'s last attempt is still stopping (in the background).
    pub(super) fn still_stopping(&self, job: JobId) -> bool {
        self.stopping.iter().any(|s| s.run.launch.job == job)
    }
}
