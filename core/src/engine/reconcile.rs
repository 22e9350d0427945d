//! One scheduling pass: ask the policy, keep the runs its grants leave unchanged, preempt the others,
//! place the new grants in priority order (through the placer, or the placement step a grant names),
//! then let the steps that revisit their runs move them.

use std::sync::Arc;

use super::{Engine, PolicyPanic};
use crate::cluster::GpuTypeId;
use crate::placement::{self, PlaceRequest, Placed, Placer, Step, StepContext, Unplaced};
use crate::policy::{Grant, Intent, Policy};
use crate::resources::Allotment;

impl Engine<'_> {
    /// One scheduling pass at `now`: ask the policy, then preempt, migrate and place. A panic of
    /// the policy's goes on (the simulator's runs end with it); [`Engine::try_schedule`] contains
    /// it.
    pub fn schedule(&mut self, policy: &mut dyn Policy, placer: &mut dyn Placer, now: f64) {
        if let Err(failed) = self.try_schedule(policy, placer, now) {
            failed.resume();
        }
    }

    /// [`Engine::schedule`], except that a policy that panics fails this pass alone: nothing of it
    /// is applied, and the next pass asks the policy again (what a live control plane does).
    pub fn try_schedule(
        &mut self,
        policy: &mut dyn Policy,
        placer: &mut dyn Placer,
        now: f64,
    ) -> Result<(), PolicyPanic> {
        self.end_pauses(now);
        // Only running jobs have anything to settle.
        let running = self.running_now();
        for &i in &running {
            self.settle(i, now);
        }
        let grants = self.decide(policy, placer, &running, now)?;
        let preempt_costs = self.config.preempt_cost + self.config.restore_cost;

        // Which running jobs keep their GPUs, and which are displaced. Each grant's job is found
        // once; a job granted twice keeps its first grant.
        let mut granted: Vec<Option<usize>> = Vec::with_capacity(grants.len());
        for (k, g) in grants.iter().enumerate() {
            let i = self.index_of.get(g.job);
            granted.push(i.filter(|&i| {
                let state = &mut self.states[i];
                let first = state.grant.is_none();
                if first {
                    state.grant = Some(k as u32);
                }
                first
            }));
        }
        self.grants = grants;
        // Every waiting job is not granted until a placement below says otherwise; only those that
        // may say something else now are visited (the rest already say so).
        for i in std::mem::take(&mut self.unexplained) {
            let state = &self.states[i];
            if state.active && state.run.is_none() {
                match self.barred(i) {
                    // Whatever it is granted, that is why it waits.
                    Some(why) => self.explain_wait(i, why),
                    None => self.states[i].waiting = Some(Unplaced::NotGranted),
                }
            }
        }
        let mut displaced = Vec::with_capacity(running.len());
        // Runs that keep their GPUs under a step that revisits them, after the new grants are placed.
        let mut revisit = Vec::new();
        for i in running {
            let state = &self.states[i];
            let Some(run) = &state.run else {
                continue;
            };
            let partner = run.partner.map(|p| self.jobs[p].id);
            let grant = self.grant_of(i);
            let keep = grant.is_some_and(|g| {
                g.gpu_type == run.gpu_type
                    && g.gpus as usize == run.gpus.len()
                    && g.partner() == partner
                    // A gang across types needs a grant that allows it; one on the grant's type
                    // alone (a step's uneven gang re-placed by the placer) keeps either.
                    && (g.spans_types() || !run.mixed)
            });
            if keep && let Some(step) = grant.and_then(|g| g.step).filter(|s| s.revisits()) {
                revisit.push((i, step));
            }
            // A new batch plan for a run that keeps its GPUs changes its pace, not its place.
            let new_batch = grant
                .and_then(|g| g.batch)
                .filter(|b| keep && Some(*b) != self.states[i].run.as_ref().and_then(|r| r.batch));
            if let Some(batch) = new_batch {
                if let Some(run) = self.states[i].run.as_mut() {
                    run.batch = Some(batch);
                }
                self.rerate(i, now);
            }
            if keep {
                self.shrink_allotment(i, now);
            } else {
                self.stop(i, now);
                self.states[i].displaced = true;
                self.states[i].waiting = Some(Unplaced::NotGranted);
                displaced.push(i);
            }
        }
        // Place the grants in order; running jobs that keep their GPUs are already placed.
        for (k, i) in granted.iter().enumerate() {
            let (Some(i), g) = (*i, self.grants[k]) else {
                continue;
            };
            // A run that keeps its GPUs takes its new CPUs and memory in grant order, as new runs
            // are placed: the mechanism that chose them packed them in that order.
            if self.states[i].run.is_some() && self.states[i].grant.is_some() {
                self.reallot(i, g.allotment, now);
            }
            if self.states[i].grant.take().is_none()
                || self.states[i].run.is_some()
                || self.records[i].finish.is_some()
                || self.rate_at(i, g.gpu_type, g.gpus) <= 0.0
            {
                continue;
            }
            if let Some(why) = self.barred(i) {
                self.explain_wait(i, why);
                continue;
            }
            let partner = match g.partner() {
                None => None,
                Some(p) => match self.claim_partner(i, p, &g) {
                    Some(p) => Some(p),
                    None => {
                        self.explain_wait(i, Unplaced::PartnerUnavailable);
                        continue;
                    }
                },
            };
            let placed = self.place(i, &g, partner.is_some(), placer, now);
            match placed {
                Ok(placed) if placed.gpus.len() == g.gpus as usize => {
                    self.start(i, placed, g.gpu_type, partner, g.batch, g.allotment, now)
                }
                Ok(_) => {}
                Err(why) => {
                    let why = self.explain(why);
                    self.explain_wait(i, why);
                }
            }
        }
        // Each grant was taken above, or claimed as a partner's: none outlives its pass.
        debug_assert!(
            granted
                .iter()
                .flatten()
                .all(|&i| self.states[i].grant.is_none())
        );
        for (i, step) in revisit {
            self.revisit(i, step, placer, now);
        }
        // Displaced jobs that did not get GPUs back are preempted.
        for i in displaced {
            let state = &mut self.states[i];
            if std::mem::take(&mut state.displaced) {
                self.records[i].preemptions += 1;
                if state.progressed {
                    state.overhead_due += preempt_costs;
                }
                state.queued_since = now;
            }
        }
        self.note_utilization(now);
        Ok(())
    }

    /// Places job `i`'s grant through the placement step it names, or the placer (on one server when
    /// consolidated; a packed pair is placed as one gang, by the placer).
    fn place(
        &self,
        i: usize,
        g: &Grant,
        packed: bool,
        placer: &mut dyn Placer,
        now: f64,
    ) -> Result<Placed, Unplaced> {
        let request = PlaceRequest {
            job: &self.jobs[i],
            gpu_type: g.gpu_type,
            gpus: g.gpus,
            previous: &self.states[i].last_gpus,
            waited: (now - self.states[i].queued_since).max(0.0),
            sensitivity: self.sensitivity_of(i),
            consolidate: g.intent == Intent::Consolidated,
        };
        // Only GPUs whose servers can feed the gang's CPUs and memory (a packed pair shares shares).
        let allotment = if packed { None } else { g.allotment };
        let usable = self
            .ledger
            .usable(&self.cluster, &self.free, allotment.as_ref());
        let free = usable.as_ref().unwrap_or(&self.free);
        let placed = match g.step {
            Some(step) if !packed => {
                let rate = |t: GpuTypeId, gpus: u32| self.rate_at(i, t, gpus);
                let mut cx = StepContext::new(&self.cluster, free, placer, &rate);
                // A step may pick GPUs itself (Optimus' most free servers) or join several of the
                // placer's answers (Hadar's, one per GPU type): the whole gang must keep the
                // placer's rules too (an even one's, which torchrun's one agent per server needs).
                // Where it does not, the placer places the grant itself, on its own type.
                match step.place(&mut cx, &request) {
                    Ok(placed)
                        if placed.gpus.len() == g.gpus as usize
                            && !placer.accepts(&self.cluster, &request, &placed.gpus) =>
                    {
                        placer.place(&self.cluster, free, &request)
                    }
                    other => other,
                }
            }
            _ => placer.place(&self.cluster, free, &request),
        };
        match placed {
            // The GPUs are there; their servers' CPUs or memory are not.
            Err(Unplaced::NoCapacity { gpu_type, .. } | Unplaced::Fragmented { gpu_type, .. })
                if usable.is_some() && self.free.free_of_type(gpu_type) >= g.gpus =>
            {
                Err(Unplaced::Resources {
                    gpu_type,
                    wanted: g.gpus,
                    free: self.free.free_of_type(gpu_type),
                })
            }
            other => other,
        }
    }

    /// Before new runs are placed, a run that keeps its GPUs gives back what its new allotment no
    /// longer holds (its larger needs wait for its turn in grant order), so that room freed by the
    /// mechanism is there for the runs placed before it.
    fn shrink_allotment(&mut self, i: usize, now: f64) {
        let Some(run) = self.states[i].run.as_ref() else {
            return;
        };
        let Some(&first) = run.gpus.first() else {
            return;
        };
        let share = || Allotment::share(self.cluster.node(self.cluster.node_of(first)));
        let wanted = self.grant_of(i).and_then(|g| g.allotment);
        let smaller = match (run.allotment, wanted) {
            (None, None) => return,
            (Some(held), None) => held.min(&share()),
            (None, Some(new)) => new.min(&share()),
            (Some(held), Some(new)) => held.min(&new),
        };
        self.reallot(i, Some(smaller), now);
    }

    /// Job `i` waits because of `why` (until the next pass looks at it again).
    pub(super) fn explain_wait(&mut self, i: usize, why: Unplaced) {
        self.states[i].waiting = Some(why);
        self.unexplained.push(i);
    }

    /// Turns "not enough free" into "out of service" when GPUs out of service are what is missing.
    fn explain(&self, why: Unplaced) -> Unplaced {
        match why {
            Unplaced::NoCapacity {
                gpu_type,
                wanted,
                free,
            } => {
                let out_of_service = self.cluster.capacity()[gpu_type.0 as usize]
                    - self.capacity[gpu_type.0 as usize];
                if out_of_service > 0 && free + out_of_service >= wanted {
                    Unplaced::Cordoned {
                        gpu_type,
                        wanted,
                        free,
                        out_of_service,
                    }
                } else {
                    why
                }
            }
            other => other,
        }
    }

    /// Asks `step` where job `i`, which kept its GPUs under a grant naming it, should move now (a run
    /// alone, on one GPU type: packed pairs and gangs across types stay), and moves it there.
    fn revisit(&mut self, i: usize, step: Step, placer: &mut dyn Placer, now: f64) {
        let cluster = Arc::clone(&self.cluster);
        let Some(run) = &self.states[i].run else {
            return;
        };
        if run.partner.is_some() || run.mixed {
            return;
        }
        let (gpu_type, batch, allotment) = (run.gpu_type, run.batch, run.allotment);
        let request = PlaceRequest {
            job: &self.jobs[i],
            gpu_type,
            gpus: run.gpus.len() as u32,
            previous: &run.gpus,
            waited: 0.0,
            sensitivity: self.sensitivity_of(i),
            consolidate: false,
        };
        let usable = self.ledger.usable(&cluster, &self.free, allotment.as_ref());
        let free = usable.as_ref().unwrap_or(&self.free);
        let rate = |t: GpuTypeId, gpus: u32| self.rate_at(i, t, gpus);
        let mut cx = StepContext::new(&cluster, free, placer, &rate);
        let target = step.revisit(&mut cx, &request, &run.gpus);
        if let Some(placed) = target {
            // The new GPUs were free before the old ones are released, so the two sets never overlap.
            self.stop(i, now);
            self.states[i].displaced = true;
            self.start(i, placed, gpu_type, None, batch, allotment, now);
        }
    }

    /// Job `i`'s grant packs it with job `partner`: takes the partner's matching grant and returns its
    /// index when the pair can run (both waiting, same gang, a packed rate for both on the type).
    fn claim_partner(&mut self, i: usize, partner: crate::job::JobId, g: &Grant) -> Option<usize> {
        let p = self.index_of.get(partner)?;
        let state = &self.states[p];
        let runs = placement::packed::pair_runs(
            &*self.model,
            &self.jobs[i],
            &self.jobs[p],
            g,
            self.grant_of(p).as_ref(),
        );
        if !runs
            || state.run.is_some()
            || self.barred(p).is_some()
            || self.records[p].finish.is_some()
        {
            return None;
        }
        self.states[p].grant = None;
        Some(p)
    }

    /// Job `i`'s grant in this pass, unless placed or claimed already.
    fn grant_of(&self, i: usize) -> Option<Grant> {
        self.states[i].grant.map(|k| self.grants[k as usize])
    }
}
