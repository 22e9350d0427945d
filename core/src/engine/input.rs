//! The one input every policy gets: the active jobs as views, the capacity, the type order, and what
//! ran since the last pass. A policy that keeps its own queue gets the running jobs and those that
//! changed, and asks the [`Backlog`] for the rest, so that a round costs what it can start.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;

use super::{Engine, PolicyPanic};
use crate::job::JobId;
use crate::placement::{EngineProbe, Placer};
use crate::policy::{Backlog, Grant, JobView, Policy, RoundInput, Running};

/// The active jobs a queue-keeping policy was not shown this round, answered from the engine.
struct Waiting<'e, 'm> {
    engine: &'e Engine<'m>,
    now: f64,
    left: &'e [JobId],
    /// The policy asked for every view: it rebuilt its queue, and what it said of when to look
    /// again at running jobs it was not shown may not hold any more.
    rebuilt: Cell<bool>,
}

impl Backlog for Waiting<'_, '_> {
    fn len(&self) -> usize {
        self.engine.active.len() - self.engine.deferred.len()
    }

    fn left(&self) -> &[JobId] {
        self.left
    }

    fn view(&self, id: JobId) -> Option<JobView<'_>> {
        let i = self.engine.index_of.get(id)?;
        self.engine.shown(i).then(|| self.engine.view(i, self.now))
    }

    fn views(&self) -> Vec<JobView<'_>> {
        self.rebuilt.set(true);
        self.engine.active_views(self.now)
    }
}

impl Engine<'_> {
    /// Job `i` as policies see it at `now`.
    fn view(&self, i: usize, now: f64) -> JobView<'_> {
        let types = self.types();
        let job = &self.jobs[i];
        let state = &self.states[i];
        JobView {
            job,
            rates: &self.rates[i * types..(i + 1) * types],
            steps_done: state.steps_done,
            remaining_steps: (job.total_steps - state.steps_done).max(0.0),
            attained_gpu_seconds: state.attained_gpu_seconds,
            attained_seconds: state.attained_seconds,
            running: state.run.as_ref().map(|r| Running {
                gpu_type: r.gpu_type,
                gpus: &r.gpus,
                batch: r.batch,
                restarting: r.progress_from > now,
            }),
            queued_since: state.queued_since,
            last_run_seconds: state.last_run_seconds,
            preemptions: self.records[i].preemptions,
            slot: i,
        }
    }

    /// Whether the policy sees job `i`: it is active and not paused ([`Engine::defer`]).
    fn shown(&self, i: usize) -> bool {
        let state = &self.states[i];
        state.active && state.deferred_until.is_none()
    }

    /// Every active job's view, in arrival order, but those paused ([`Engine::defer`]).
    fn active_views(&self, now: f64) -> Vec<JobView<'_>> {
        self.active
            .iter()
            .filter(|&&(_, i)| self.shown(i))
            .map(|&(_, i)| self.view(i, now))
            .collect()
    }

    /// The views of the `running` jobs the policy is to look at again by `now` (in arrival order)
    /// and of the waiting jobs touched since the policy's last call, in arrival order.
    fn changed_views(&self, running: &[usize], touched: &[usize], now: f64) -> Vec<JobView<'_>> {
        let mut waiting: Vec<(u64, usize)> = touched
            .iter()
            .filter_map(|&i| {
                let state = &self.states[i];
                (self.shown(i) && state.run.is_none()).then_some((state.order, i))
            })
            .collect();
        // A slot forgotten and reused since the last call may be listed twice.
        waiting.sort_unstable();
        waiting.dedup();
        // The running jobs are in arrival order already: merge the few waiting ones in.
        let mut views = Vec::with_capacity(running.len() + waiting.len());
        let mut waiting = waiting.into_iter().peekable();
        for &i in running {
            let state = &self.states[i];
            if state.run.as_ref().is_some_and(|r| r.look_again_at > now) {
                continue;
            }
            while let Some((_, w)) = waiting.next_if(|&(o, _)| o < state.order) {
                views.push(self.view(w, now));
            }
            views.push(self.view(i, now));
        }
        views.extend(waiting.map(|(_, w)| self.view(w, now)));
        views
    }

    /// Shows the policy every active job in this pass, as if each had changed (a running job
    /// whatever it said of when to look at it again), and that jobs changed.
    fn show_everything_again(&mut self) {
        let active: Vec<usize> = self.active.iter().map(|&(_, i)| i).collect();
        self.look_again_at_every_run(&active);
        for i in active {
            if self.states[i].run.is_none() {
                self.touch(i);
            }
        }
        self.jobs_changed = true;
    }

    /// Shows the policy those of `jobs` that run at its next pass, whatever it said of when to
    /// look at them again.
    fn look_again_at_every_run(&mut self, jobs: &[usize]) {
        for &i in jobs {
            if let Some(run) = self.states[i].run.as_mut() {
                run.look_again_at = f64::NEG_INFINITY;
            }
        }
    }

    /// The running jobs among `views` that a policy keeping its queue (`queued`) need not be shown
    /// before a later time, by slot, with that time ([`Policy::look_again_at`]).
    fn quiet_runs(
        policy: &dyn Policy,
        views: &[JobView<'_>],
        queued: bool,
        now: f64,
    ) -> Vec<(usize, f64)> {
        if !queued {
            return Vec::new();
        }
        (views.iter().filter(|v| v.running.is_some()))
            .map(|v| (v.slot, policy.look_again_at(v, now)))
            .filter(|&(_, at)| at > now)
            .collect()
    }

    /// Asks the policy for this pass's grants; its what-if placements go through `placer` (a fork of
    /// it). `running`: the running jobs, in arrival order.
    pub(super) fn decide(
        &mut self,
        policy: &mut dyn Policy,
        placer: &mut dyn Placer,
        running: &[usize],
        now: f64,
    ) -> Result<Vec<Grant>, PolicyPanic> {
        let usage = std::mem::take(&mut self.usage);
        // A run's `look_again_at` is the answer of the policy that gave it, and what a policy
        // keeping its queue knows of the waiting jobs is what its own passes showed it: another
        // policy (a driver may change it between passes) is shown every active job as changed.
        let asker = (policy as *const dyn Policy).cast::<()>() as usize;
        if std::mem::replace(&mut self.quiet_for, asker) != asker {
            self.show_everything_again();
        }
        let mut touched = std::mem::take(&mut self.touched);
        for &i in &touched {
            self.states[i].touched = false;
        }
        let mut left = std::mem::take(&mut self.left);
        let jobs_changed = std::mem::take(&mut self.jobs_changed);
        let queued = policy.keeps_queue();
        let views = if queued {
            self.changed_views(running, &touched, now)
        } else {
            self.active_views(now)
        };
        let mut paused: Vec<JobId> = (self.deferred.iter()).map(|&i| self.jobs[i].id).collect();
        paused.sort_unstable();
        let backlog = Waiting {
            engine: self,
            now,
            left: &left,
            rebuilt: Cell::new(false),
        };
        let probe = EngineProbe::new(&self.cluster, &self.disabled, placer);
        let input = RoundInput {
            now,
            round_length: self.config.round_length,
            cluster: &self.cluster,
            capacity: &self.capacity,
            jobs: &views,
            backlog: queued.then_some(&backlog as &dyn Backlog),
            placement: &probe,
            jobs_changed,
            type_order: self.type_order.order(),
            model: &*self.model,
            usage: &usage,
            paused: &paused,
        };
        let asked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let grants = policy.allocate(&input);
            (grants, Self::quiet_runs(policy, &views, queued, now))
        }));
        let rebuilt = backlog.rebuilt.get();
        drop(views);
        let grants = match asked {
            Ok((grants, quiet)) => {
                if rebuilt {
                    self.look_again_at_every_run(running);
                }
                for (i, at) in quiet {
                    if let Some(run) = self.states[i].run.as_mut() {
                        run.look_again_at = at;
                    }
                }
                grants
            }
            Err(payload) => {
                // Nothing of this round happened: what it would have seen is the next one's. The
                // policy's own state may have changed before it failed (a queue rebuilt, say), so
                // what it said of its running jobs holds no more.
                self.look_again_at_every_run(running);
                for &i in &touched {
                    self.states[i].touched = true;
                }
                self.touched = touched;
                self.left = left;
                self.usage = usage;
                self.jobs_changed |= jobs_changed;
                return Err(PolicyPanic::from_payload(payload));
            }
        };
        // Reuse the buffers.
        self.usage = usage;
        self.usage.clear();
        touched.clear();
        self.touched = touched;
        left.clear();
        self.left = left;
        Ok(grants)
    }
}
