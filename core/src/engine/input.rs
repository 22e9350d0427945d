//! The one input every policy gets: the active jobs as views, the capacity, the type order, and what
//! ran since the last pass.

use super::Engine;
use crate::policy::{Grant, JobView, Policy, RoundInput, Running};

impl Engine<'_> {
    /// Asks the policy for this pass's grants.
    pub(super) fn decide(&mut self, policy: &mut dyn Policy, now: f64) -> Vec<Grant> {
        let types = self.types();
        let usage = std::mem::take(&mut self.usage);
        let views: Vec<JobView<'_>> = self
            .active
            .iter()
            .map(|&i| {
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
                    }),
                    queued_since: state.queued_since,
                    last_run_seconds: state.last_run_seconds,
                    preemptions: state.record.preemptions,
                }
            })
            .collect();
        let input = RoundInput {
            now,
            round_length: self.config.round_length,
            cluster: &self.cluster,
            capacity: &self.capacity,
            jobs: &views,
            jobs_changed: std::mem::take(&mut self.jobs_changed),
            type_order: self.type_order.order(),
            model: &*self.model,
            usage: &usage,
        };
        let grants = policy.allocate(&input);
        drop(views);
        // Reuse the buffer.
        self.usage = usage;
        self.usage.clear();
        grants
    }
}
