//! Synergy's mechanisms (Mohan et al., OSDI'22): CPUs and memory sized per job beside its GPUs, under
//! any ordering policy.
//!
//! [`Resourced`] wraps a policy the way `Cadenced` does: the policy decides who runs, in which order,
//! on how many GPUs; the wrapper gives each grant an [`Allotment`] of CPUs and memory per GPU, sketching
//! the round's packing server by server. The policy does not know. Spelled `POLICY+MECHANISM`
//! (`srtf+tune`, `las+opt`, `fifo:...+proportional`):
//! - `proportional`: CPUs and memory in proportion to GPUs (what every policy does alone);
//! - `tune`: Synergy's greedy: in the policy's order each job asks for its best case, on the server
//!   with the fewest free GPUs that can feed it; else its proportional share; else peers on the
//!   server holding more than their share give it back. It never gives up on a job (Synergy's code exits
//!   the process there): a gang that still does not fit keeps its share and waits for the engine;
//! - `opt` ([`choose_points`], [`assign_servers`]): Synergy's two-phase program on HiGHS: a MILP
//!   choosing one CPU x memory point per job to maximize total speed with every job at least as
//!   fast as at its share (cluster-wide CPUs and memory), then an integer program assigning the
//!   gangs to servers.
//!
//! Allotments need a model that knows how jobs respond to them (`throughput::resources`); without one
//! every mechanism leaves the grants as they are.

mod opt;
mod shadow;
mod tune;

use std::str::FromStr;

use smallvec::SmallVec;

use super::{Grant, Intent, Needs, Policy, RoundInput};
use crate::cluster::{Cluster, GpuId, GpuTypeId};
use crate::job::JobId;
use crate::placement::PlaceRequest;
use crate::resources::Allotment;
use crate::throughput::resources::ResourceAware;

pub use opt::{OptStats, assign_servers, choose_points};
use shadow::{Shadow, Spread, fair, spread_of};

/// How CPUs and memory are sized beside GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// CPUs and memory in proportion to GPUs: grants keep no allotment, and each gang holds its
    /// servers' GPU-proportional share.
    Proportional,
    /// Synergy's greedy: each job's best case where a server can feed it, else its share.
    Tune,
    /// Synergy's two-phase program: a CPU x memory point per job, then the gangs on servers.
    Opt,
}

impl Mechanism {
    /// Every mechanism, in the order listings and error messages show them.
    pub const ALL: [Mechanism; 3] = [Mechanism::Proportional, Mechanism::Tune, Mechanism::Opt];

    /// Its name in a spec: `proportional`, `tune` or `opt`, as in `srtf+tune`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Proportional => "proportional",
            Mechanism::Tune => "tune",
            Mechanism::Opt => "opt",
        }
    }

    /// One line on what it does, for listings.
    pub fn summary(self) -> &'static str {
        match self {
            Mechanism::Proportional => "in proportion to GPUs (what every policy does alone)",
            Mechanism::Tune => {
                "Synergy's greedy: each job's best case where a server can feed it, else its share"
            }
            Mechanism::Opt => "Synergy's two-phase program (points per job, then servers)",
        }
    }

    /// What it needs to size anything: `tune` and `opt` read the resource model, and `opt` solves an
    /// LP.
    pub fn needs(self) -> Needs {
        match self {
            Mechanism::Proportional => Needs::NOTHING,
            Mechanism::Tune => Needs::RESOURCES,
            Mechanism::Opt => Needs::RESOURCES | Needs::LP_SOLVER,
        }
    }
}

impl FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "unknown resource mechanism `{s}`; known: {}",
                    names.join(", ")
                )
            })
    }
}

/// Splits `srtf:knob=1+tune` into the policy's spec and its mechanism; an unknown mechanism is refused
/// with the known ones.
pub fn split(spec: &str) -> Result<(&str, Option<Mechanism>), String> {
    match spec.rsplit_once('+') {
        None => Ok((spec, None)),
        Some((policy, mechanism)) => mechanism.parse().map(|m| (policy, Some(m))),
    }
}

/// A policy whose grants carry CPUs and memory sized by a mechanism.
pub struct Resourced {
    inner: Box<dyn Policy>,
    mechanism: Mechanism,
    /// The latest `opt` solve's figures.
    pub opt_stats: OptStats,
    /// Whether it said that the model has no resources to size by.
    unmet_said: bool,
}

impl Resourced {
    /// `inner`'s grants, with CPUs and memory sized by `mechanism`.
    pub fn new(inner: Box<dyn Policy>, mechanism: Mechanism) -> Self {
        Resourced {
            inner,
            mechanism,
            opt_stats: OptStats::default(),
            unmet_said: false,
        }
    }
}

impl Policy for Resourced {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let mut grants = self.inner.allocate(input);
        let Some(model) = input.model.resources() else {
            // A registry refuses to build it so (`Needs::RESOURCES`); built by hand, it says so.
            if self.mechanism != Mechanism::Proportional && !self.unmet_said {
                self.unmet_said = true;
                tracing::error!(
                    mechanism = self.mechanism.name(),
                    "this mechanism needs resource profiles, and the model has none: CPUs and memory \
                     stay at their GPU-proportional shares"
                );
            }
            return grants;
        };
        match self.mechanism {
            Mechanism::Proportional => {}
            Mechanism::Tune => tune::size(input, model, &mut grants),
            Mechanism::Opt => self.opt_stats = opt::size(input, model, &mut grants),
        }
        grants
    }

    fn changes_with_time(&self) -> bool {
        self.inner.changes_with_time()
    }

    fn queue_order(&self, limit: usize) -> Option<Vec<JobId>> {
        self.inner.queue_order(limit)
    }
}

/// The share per GPU of a GPU type's servers (its first server's).
pub(crate) fn share_of(cluster: &Cluster, gpu_type: GpuTypeId) -> Allotment {
    cluster
        .nodes()
        .iter()
        .find(|n| n.gpu_type == gpu_type)
        .map_or(Allotment::new(0.0, 0.0), Allotment::share)
}

/// The GPUs each grant's gang runs on now, if the engine will keep it there (same type and size,
/// alone).
fn kept<'i>(input: &'i RoundInput<'_>, grants: &[Grant]) -> Vec<Option<&'i [GpuId]>> {
    grants
        .iter()
        .map(|g| {
            let view = input.jobs.iter().find(|v| v.id() == g.job)?;
            let running = view.running.as_ref()?;
            let keeps = running.gpu_type == g.gpu_type
                && running.gpus.len() == g.gpus as usize
                && g.partner().is_none()
                && !g.spans_types();
            keeps.then_some(running.gpus)
        })
        .collect()
}

/// A sketch of the round's GPUs (those in service, through the engine's placer) with the runs in
/// `kept` held, and the servers each kept run is on.
fn sketch<'i>(
    input: &'i RoundInput<'_>,
    kept: &[Option<&[GpuId]>],
) -> (Shadow<'i>, Vec<Option<Spread>>) {
    let mut shadow = Shadow::new(input.cluster, input.placement.scratch());
    for gpus in kept.iter().flatten() {
        shadow.hold(gpus);
    }
    let fixed = kept
        .iter()
        .map(|gpus| gpus.map(|gpus| spread_of(input.cluster, gpus)))
        .collect();
    (shadow, fixed)
}

/// How the engine will be asked to place grant `g`'s gang, as far as a policy can tell (it does not
/// see the job's last GPUs if it is not running, nor its placement sensitivity).
fn request_for<'i>(input: &'i RoundInput<'_>, g: &Grant) -> Option<PlaceRequest<'i>> {
    let view = input.jobs.iter().find(|v| v.id() == g.job)?;
    Some(PlaceRequest {
        job: view.job,
        gpu_type: g.gpu_type,
        gpus: g.gpus,
        previous: view.running.as_ref().map_or(&[], |r| r.gpus),
        waited: (input.now - view.queued_since).max(0.0),
        sensitivity: 0.0,
        consolidate: g.intent == Intent::Consolidated,
    })
}

/// Sizes the grants in order, each asking for `wanted(k)` per GPU (`None`: its share, and no allotment
/// on its grant): where it fits, else its share, else with peers on its servers cut back to their
/// shares. Single-server gangs are pinned to the server they were sketched on. Returns whether every
/// gang got what it asked for.
fn pack(
    input: &RoundInput<'_>,
    grants: &mut [Grant],
    wanted: impl Fn(usize) -> Option<Allotment>,
) -> bool {
    let mut everyone = true;
    let cluster = input.cluster;
    let (mut shadow, fixed) = sketch(input, &kept(input, grants));
    // Packed pairs and gangs across types run on their shares.
    let sized = |g: &Grant| g.partner().is_none() && !g.spans_types();
    let mut sized_grants = vec![false; grants.len()];
    for (k, g) in grants.iter().enumerate() {
        let share = share_of(cluster, g.gpu_type);
        let want = if sized(g) { wanted(k) } else { None };
        let ask = want.unwrap_or(share);
        let mut tries: SmallVec<[Allotment; 2]> = SmallVec::from_slice(&[ask]);
        if fair(ask, share) != ask {
            tries.push(fair(ask, share));
        }
        let request = request_for(input, g);
        let fitted = tries.iter().find_map(|a| {
            let nodes = match (&fixed[k], &request) {
                (Some(nodes), _) => shadow.feeds_all(nodes, a).then(|| nodes.clone()),
                (None, Some(request)) => shadow.find(request, Some(a)),
                (None, None) => None,
            };
            nodes.map(|n| (n, *a))
        });
        everyone &= fitted.as_ref().is_some_and(|(_, a)| *a == ask);
        let (nodes, allotment) = match fitted {
            Some((nodes, a)) => (nodes, Some(a)),
            None => {
                // Peers give back what they hold beyond their share on the servers it takes.
                let Some(nodes) = fixed[k].clone().or_else(|| {
                    request
                        .as_ref()
                        .and_then(|request| shadow.find(request, None))
                }) else {
                    // No GPUs for it: the engine will not place it either.
                    everyone = false;
                    continue;
                };
                let a = fair(ask, share);
                for &(node, count) in &nodes {
                    shadow.cut_peers(node, count, Some(&a));
                }
                if shadow.feeds_all(&nodes, &a) {
                    (nodes, Some(a))
                } else {
                    // Servers of different shares: each server's own share, with every peer there
                    // cut to its share, always fits.
                    for &(node, count) in &nodes {
                        shadow.cut_peers(node, count, None);
                    }
                    (nodes, None)
                }
            }
        };
        sized_grants[k] = want.is_some();
        shadow.commit(k, nodes, allotment);
    }
    for s in &shadow.sketched {
        if !sized_grants[s.grant] {
            continue;
        }
        // A peer cut back to its servers' shares, or a gang on them: no allotment, unless pinned.
        let single = match s.nodes.as_slice() {
            [(node, _)] if fixed[s.grant].is_none() => Some(*node),
            _ => None,
        };
        grants[s.grant].allotment = match (s.allotment, single) {
            (Some(a), Some(node)) => Some(a.on(node)),
            (Some(a), None) => Some(a),
            (None, Some(node)) => Some(Allotment::share(cluster.node(node)).on(node)),
            (None, None) => None,
        };
    }
    everyone
}

/// The job of a grant, if active.
fn job_of<'a>(input: &'a RoundInput<'_>, g: &Grant) -> Option<&'a crate::job::Job> {
    input.jobs.iter().find(|v| v.id() == g.job).map(|v| v.job)
}

/// What a job's profile asks for at best, or `None` for jobs without one; no more than one server
/// can feed (Synergy clips a gang's demand to a server's CPUs and memory the same way).
fn best(input: &RoundInput<'_>, model: &dyn ResourceAware, g: &Grant) -> Option<Allotment> {
    let wanted = job_of(input, g).and_then(|job| model.best(job))?;
    let node = input
        .cluster
        .nodes()
        .iter()
        .find(|n| n.gpu_type == g.gpu_type)?;
    let per_server = f64::from(g.gpus.min(node.gpus).max(1));
    Some(wanted.min(&Allotment::new(
        f64::from(node.cpus) / per_server,
        node.memory_gb / per_server,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeId;
    use crate::job::{Job, JobId};
    use crate::placement::{EngineProbe, PackingPlacer, PlacementProbe};
    use crate::policy::JobView;
    use crate::throughput::DurationModel;

    /// Sizes one 4-GPU gang asking for 6 CPUs per GPU on two servers of 4 GPUs, with the GPUs
    /// `out_of_service`: the server its allotment is pinned to.
    fn pinned_server(out_of_service: &[bool]) -> Option<NodeId> {
        let cluster = Cluster::from_nodes([("v100", 4, 24, 250.0), ("v100", 4, 24, 250.0)]);
        let job = Job::new(JobId(0), 0.0, 4, 3600.0);
        let rates = [1.0];
        let views = [JobView::arrived(&job, &rates)];
        let model = DurationModel::uniform(1);
        let mut placer = PackingPlacer;
        let probe = EngineProbe::new(&cluster, out_of_service, &mut placer);
        let input = RoundInput {
            now: 0.0,
            round_length: 300.0,
            cluster: &cluster,
            capacity: cluster.capacity(),
            jobs: &views,
            backlog: None,
            placement: &probe as &dyn PlacementProbe,
            jobs_changed: true,
            type_order: &[GpuTypeId(0)],
            model: &model,
            usage: &[],
            paused: &[],
        };
        let mut grants = [Grant::new(JobId(0), GpuTypeId(0), 4)];
        assert!(pack(&input, &mut grants, |_| Some(Allotment::new(
            6.0, 62.5
        ))));
        grants[0].allotment.and_then(|a| a.server)
    }

    /// The sketch places as the engine will: on the server with all its GPUs in service. (A copy of
    /// best fit over every GPU pinned the gang to server 0, where the engine could not place it, and
    /// it waited with four GPUs free.)
    #[test]
    fn a_gang_is_pinned_to_a_server_the_engine_can_place_it_on() {
        let all_in_service = [false; 8];
        assert_eq!(pinned_server(&all_in_service), Some(NodeId(0)));
        let mut one_out = [false; 8];
        one_out[1] = true;
        assert_eq!(pinned_server(&one_out), Some(NodeId(1)));
    }
}
