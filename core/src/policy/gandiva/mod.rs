//! Gandiva (Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning", OSDI'18), in the
//! form Gavel evaluates it (Narayanan et al., OSDI'20, `policies/gandiva.py`), so that it can be checked
//! against Gavel's published numbers.
//!
//! What it does, and where each of Gandiva's mechanisms lives here:
//! - **Time-slicing when oversubscribed.** Every active unit (a job, or two jobs packed together) gets an
//!   equal share of every GPU type, `capacity[t] / m / gpus`, scaled so that no row exceeds 1; the round
//!   mechanism rotates the units through the GPUs. Suspend and resume cost what the simulator's
//!   `preempt_cost` and `restore_cost` say (Gandiva suspends at a mini-batch boundary, in well under a
//!   second for most models; its migrations take seconds).
//! - **Packing.** Only when the jobs ask for more GPUs than the cluster has, jobs not already packed are
//!   paired at random (same gang size, at most as many draws as there are such jobs), as Gandiva's
//!   greedy packing does. A pair is kept only while it does not interfere: on some GPU type, the two
//!   jobs' packed rates, each normalized by its rate alone, must add up to at least 1 (packing must
//!   beat time-slicing the two). A pair that falls below is split again.
//! - **Migration to defragment.** A gang starts wherever it fits, spread over servers if it must; its
//!   grants name the [`defragment`] placement step, so that when a job leaves and a server can now hold
//!   a gang that runs spread, the engine moves the gang there (paying `migrate_cost`).
//! - **Heterogeneity.** Gandiva does not model GPU types. Like Gavel's version, the mechanism offers the
//!   types in a fixed order, fastest first (see `effective::FastestFirst`).
//!
//! - **Introspective grow-shrink** (knob `grow`, off by default because Gavel's version has none): GPUs
//!   that no unit uses this round go to running jobs that the throughput model says run at least 10%
//!   faster on twice the GPUs, doubling while that holds; when the GPUs are wanted again, the job shrinks
//!   back to its own gang (each resize costs a migration). It needs a model with rates at other gang
//!   sizes, such as Gavel's table (scale factors 1, 2, 4, 8).
//!
//! Knobs: `grow` = 0 (`gandiva:grow=1` turns it on). The packing threshold is 1.0, the paper's; the
//! seed of the random pairing comes from [`PolicyConfig::seed`](super::PolicyConfig::seed).
//!
//! Structure: [`Pairing`] answers with time shares, re-solved whenever the jobs change ([`Cadenced`]),
//! realized by Gavel's round mechanism ([`Realize`]); [`Gandiva`] then marks multi-GPU grants for
//! defragmentation and grows grants into idle GPUs.

pub mod defragment;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use super::{
    Cadenced, Grant, Intent, JobView, Knob, Policy, PolicyEntry, Realize, Registry, RegistryError,
    RoundInput, TimeSharePolicy, TimeShares, TypePreference,
};
use crate::cluster::GpuTypeId;
use crate::job::{IdMap, IdSet, JobId};

const GROW: Knob = Knob {
    name: "grow",
    default: 0.0,
    range: super::KnobRange::Flag,
    help: "1: grow jobs into idle GPUs where the throughput model says they speed up (off in Gavel's version)",
};

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("gandiva", |config| {
            Box::new(Gandiva::new(config.seed, config.knob("grow") != 0.0))
        })
        .summary(
            "Gandiva: time-slicing, random packing of pairs that do not interfere, \
             defragmenting migration (as Gavel evaluates it)",
        )
        .knob(GROW),
    )?;
    Ok(())
}

/// Gandiva: its pairing's shares through the round mechanism, then defragmenting and growing grants.
pub struct Gandiva {
    /// Reused until a job arrives or leaves (a cadence of 0).
    realize: Realize<Cadenced<Pairing>>,
    /// Grow jobs into GPUs nobody else uses.
    grow: bool,
}

impl Gandiva {
    /// Gandiva with its random pairing seeded by `seed`; with `grow`, jobs grow into GPUs nobody
    /// else uses (the `grow` knob).
    pub fn new(seed: u64, grow: bool) -> Self {
        Gandiva {
            realize: Realize::new(Cadenced::new(Pairing::new(seed), 0.0), seed),
            grow,
        }
    }
}

impl Policy for Gandiva {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let mut grants = self.realize.allocate(input);
        for grant in &mut grants {
            if grant.gpus > 1 && grant.intent == Intent::Anywhere && grant.step.is_none() {
                *grant = grant.placed_by(&defragment::DEFRAGMENT);
            }
        }
        if self.grow {
            grow(&mut grants, input);
        }
        grants
    }
}

/// The combined normalized rate a pair needs on some GPU type to stay packed.
const PACK_THRESHOLD: f64 = 1.0;

/// Which jobs are packed together: Gandiva's time shares.
pub struct Pairing {
    /// Each packed job's partner.
    partners: IdMap<JobId, JobId>,
    rng: ChaCha8Rng,
}

impl Pairing {
    /// No job packed yet; `seed` seeds the random choice of partners.
    pub fn new(seed: u64) -> Self {
        Pairing {
            partners: IdMap::default(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6761_6e64_6976_6121),
        }
    }

    /// Whether `a` and `b` packed together beat time-slicing them on some GPU type.
    fn packs_well(&self, a: &JobView<'_>, b: &JobView<'_>, input: &RoundInput<'_>) -> bool {
        (0..input.capacity.len()).any(|t| {
            let (alone_a, alone_b) = (a.rates[t], b.rates[t]);
            let packed =
                input
                    .model
                    .packed_steps_per_second(a.job, b.job, GpuTypeId(t as u16), a.job.gpus);
            match packed {
                Some((pa, pb)) if alone_a > 0.0 && alone_b > 0.0 && pa > 0.0 && pb > 0.0 => {
                    pa / alone_a + pb / alone_b >= PACK_THRESHOLD
                }
                _ => false,
            }
        })
    }

    /// Splits pairs that lost a member or interfere; then, when oversubscribed, pairs jobs at random.
    fn repack(&mut self, input: &RoundInput<'_>) {
        let views: IdMap<JobId, &JobView<'_>> = input.jobs.iter().map(|v| (v.id(), v)).collect();
        let broken: Vec<JobId> = self
            .partners
            .iter()
            .filter(|&(a, b)| match (views.get(a), views.get(b)) {
                (Some(va), Some(vb)) => !self.packs_well(va, vb, input),
                _ => true,
            })
            .map(|(a, _)| *a)
            .collect();
        for job in broken {
            if let Some(partner) = self.partners.remove(&job) {
                self.partners.remove(&partner);
            }
        }
        let requested: u64 = input.jobs.iter().map(|v| u64::from(v.job.gpus)).sum();
        let available: u64 = input.capacity.iter().map(|&c| u64::from(c)).sum();
        if requested <= available {
            self.partners.clear();
            return;
        }
        let mut single: Vec<&JobView<'_>> = input
            .jobs
            .iter()
            .filter(|v| !self.partners.contains_key(&v.id()))
            .collect();
        for _ in 0..single.len() {
            if single.len() < 2 {
                break;
            }
            let i = (self.rng.next_u64() % single.len() as u64) as usize;
            let mut j = (self.rng.next_u64() % (single.len() as u64 - 1)) as usize;
            if j >= i {
                j += 1;
            }
            let (a, b) = (single[i], single[j]);
            if a.job.gpus != b.job.gpus || !self.packs_well(a, b, input) {
                continue;
            }
            self.partners.insert(a.id(), b.id());
            self.partners.insert(b.id(), a.id());
            single.retain(|v| v.id() != a.id() && v.id() != b.id());
        }
    }

    fn equal_shares(&self, input: &RoundInput<'_>) -> TimeShares {
        let capacity = input.capacity;
        let order = TypePreference::Ordered(input.type_order.to_vec());
        let mut out = TimeShares::new(capacity.len(), order);
        // Each job once: alone, or in its pair (listed by its lower id).
        let units = input
            .jobs
            .iter()
            .filter(|v| self.partners.get(&v.id()).is_none_or(|p| v.id() < *p))
            .count()
            .max(1) as f64;
        let mut seen = IdSet::default();
        for view in input.jobs {
            if !seen.insert(view.id()) {
                continue;
            }
            let gpus = f64::from(view.job.gpus);
            let raw: Vec<f64> = capacity
                .iter()
                .map(|&c| f64::from(c) / units / gpus)
                .collect();
            let scale = raw.iter().sum::<f64>().max(1.0);
            let row = raw.into_iter().map(|x| x / scale);
            match self.partners.get(&view.id()) {
                Some(&partner) => {
                    seen.insert(partner);
                    out.push_pair(view.id(), partner, row);
                }
                None => out.push(view.id(), row),
            }
        }
        out
    }
}

impl TimeSharePolicy for Pairing {
    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
        self.repack(input);
        self.equal_shares(input)
    }
}

/// A job grows only when doubling its gang speeds it up by at least this much.
const GROW_SPEEDUP: f64 = 1.1;

/// Gandiva's introspective grow-shrink: GPUs no grant uses go to granted jobs that run faster on twice as
/// many, doubling while it pays. Jobs already running grown come first, so that growth is stable from
/// round to round; a job whose extra GPUs are needed again shrinks back to its own gang next round.
fn grow(grants: &mut [Grant], input: &RoundInput<'_>) {
    let index: IdMap<JobId, usize> = input
        .jobs
        .iter()
        .enumerate()
        .map(|(k, v)| (v.id(), k))
        .collect();
    // What no grant uses: a packed pair's GPUs count once.
    let mut left: Vec<u32> = input.capacity.to_vec();
    for g in grants.iter() {
        if g.partner().is_none_or(|p| g.job < p) {
            left[g.gpu_type.0 as usize] -= g.gpus;
        }
    }
    let view = |g: &Grant| &input.jobs[index[&g.job]];
    let running_size = |g: &Grant| view(g).running.map_or(0, |r| r.gpus.len());
    let mut order: Vec<usize> = (0..grants.len())
        .filter(|&k| grants[k].partner().is_none())
        .collect();
    order.sort_by_key(|&k| std::cmp::Reverse(running_size(&grants[k])));
    for k in order {
        let grant = &mut grants[k];
        let job = view(grant).job;
        let t = grant.gpu_type;
        let mut rate = view(grant).rates[t.0 as usize];
        while left[t.0 as usize] >= grant.gpus {
            let bigger = grant.gpus * 2;
            match input.model.steps_per_second(job, t, bigger) {
                Some(r) if r >= rate * GROW_SPEEDUP => {
                    left[t.0 as usize] -= grant.gpus;
                    grant.gpus = bigger;
                    rate = r;
                }
                _ => break,
            }
        }
    }
}
