//! Placement: turning "n GPUs of type t for job j" into concrete GPUs, or saying why not.
//!
//! - [`FreeGpus`]: which GPUs are free, indexed by node and free count.
//! - [`Placer`]: chooses GPUs for one gang; [`PackingPlacer`] (best fit, no topology) and
//!   [`TopologyPlacer`] (scores sets on the hardware graph). Any policy runs with any placer.
//! - What a grant asks beyond "ask the placer": its [`crate::policy::Intent`] (one server, packed
//!   pairs: [`packed`], for Gandiva and Gavel's `*_packed`), and a [`PlacementStep`] of its policy's
//!   own ([`step`]): Hadar's gangs across GPU types, Gandiva's defragmenting migration and Optimus'
//!   most-free order live in those policies' rooms and reach the engine through that trait alone.
//! - [`resources`]: CPUs and memory per server; gangs are placed only where their servers can feed them.
//!
//! A placer that cannot place answers with [`Unplaced`], which the engine keeps as the reason a job
//! waits, as `kubectl describe` shows why a pod is pending.

pub mod even;
pub mod free;
pub mod packed;
mod packing;
pub mod probe;
pub mod resources;
pub mod step;
mod topology;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, GpuId, GpuSet, GpuTypeId};
use crate::job::Job;

pub use free::FreeGpus;
pub use packing::PackingPlacer;
pub use probe::{EngineProbe, PackingProbe, PlacementProbe, Scratch};
pub use resources::Ledger;
pub use step::{PlacementStep, Step, StepContext};
pub use topology::{PlacementMode, TopologyPlacer};

/// How well a set of GPUs sits together, 0..=100: 100 is as good as the best set of its size on the
/// hardware graph. A poorly placed gang runs slower (see `throughput::locality`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Locality(f64);

impl Locality {
    /// The best placement of its size: no slowdown.
    pub const IDEAL: Locality = Locality(100.0);

    /// A score, clamped to 0..=100 (NaN counts as the worst).
    pub fn new(score: f64) -> Self {
        Locality(if score.is_nan() {
            0.0
        } else {
            score.clamp(0.0, 100.0)
        })
    }

    /// The score, 0 (worst) to 100 (the best set of its size).
    pub fn score(self) -> f64 {
        self.0
    }
}

/// What a placer is asked: `gpus` GPUs of type `gpu_type` for `job`.
#[derive(Clone, Copy, Debug)]
pub struct PlaceRequest<'a> {
    /// The job to place.
    pub job: &'a Job,
    /// The GPU type its grant names: a placer picks GPUs of this type (a step whose gangs span
    /// types may add others).
    pub gpu_type: GpuTypeId,
    /// How many GPUs, all at once (a gang).
    pub gpus: u32,
    /// Where the job last ran, for placers that prefer to return it there.
    pub previous: &'a [GpuId],
    /// Seconds the job has waited since it was last queued (for time-based relaxation of locality).
    pub waited: f64,
    /// How much the job slows down on a poorly placed set (0..1, see `throughput::locality`).
    pub sensitivity: f64,
    /// The gang must sit on one server where one could hold it (the placer waits rather than spread).
    pub consolidate: bool,
}

/// A placer's answer: the GPUs, and how good they are together.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    /// The GPUs chosen, free until now.
    pub gpus: GpuSet,
    /// How well they sit together, which sets how much the job slows down on them.
    pub locality: Locality,
}

/// Why a gang was not placed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Unplaced {
    /// The policy gave the job no GPUs this round (its queue position, share or priority).
    NotGranted,
    /// Fewer GPUs of the type are free than the gang needs.
    NoCapacity {
        /// The GPU type the gang asked for.
        gpu_type: GpuTypeId,
        /// GPUs the gang needs.
        wanted: u32,
        /// GPUs of that type free when the placer looked.
        free: u32,
    },
    /// As many are free, but GPUs out of service (failed, cordoned, or held by a stopping job) are among those it would need.
    Cordoned {
        /// The GPU type the gang asked for.
        gpu_type: GpuTypeId,
        /// GPUs the gang needs.
        wanted: u32,
        /// GPUs of that type free when the placer looked.
        free: u32,
        /// GPUs of that type out of service (failed or cordoned): with them, the gang would fit.
        out_of_service: u32,
    },
    /// The gang waits for one server with room (a consolidation rule), though enough GPUs are free
    /// spread over several.
    Consolidation {
        /// The GPU type the gang asked for.
        gpu_type: GpuTypeId,
        /// GPUs the gang needs.
        wanted: u32,
        /// GPUs of that type free when the placer looked.
        free: u32,
    },
    /// Enough GPUs are free, but no set the placer accepts (locality, topology).
    Fragmented {
        /// The GPU type the gang asked for.
        gpu_type: GpuTypeId,
        /// GPUs the gang needs.
        wanted: u32,
        /// GPUs of that type free when the placer looked.
        free: u32,
    },
    /// Enough GPUs are free, but not on servers with the CPUs and memory its allotment asks for.
    Resources {
        /// The GPU type the gang asked for.
        gpu_type: GpuTypeId,
        /// GPUs the gang needs.
        wanted: u32,
        /// GPUs of that type free when the placer looked.
        free: u32,
    },
    /// Its packing partner could not run with it this round.
    PartnerUnavailable,
    /// Its last run's workers have not stopped yet (they still checkpoint, or ignore the stop
    /// until they are killed): it may start again once they have.
    Stopping,
    /// It pauses before its next try to start, until `until` (its last starts failed).
    Deferred {
        /// When it may start again (the control plane's clock).
        until: f64,
    },
    /// It cannot run on this cluster at all (its gang is larger than any type's capacity, or the
    /// throughput model has no rate for it).
    Unschedulable,
}

impl Unplaced {
    /// A sentence for people, with the cluster's GPU type names.
    pub fn describe(&self, cluster: &Cluster) -> String {
        let name = |t: &GpuTypeId| {
            cluster
                .gpu_types()
                .get(t.0 as usize)
                .map_or("?", String::as_str)
                .to_owned()
        };
        match self {
            Unplaced::NotGranted => "the policy gave it no GPUs this round".into(),
            Unplaced::NoCapacity {
                gpu_type,
                wanted,
                free,
            } => format!("needs {wanted} {} GPUs, {free} free", name(gpu_type)),
            Unplaced::Cordoned {
                gpu_type,
                wanted,
                free,
                out_of_service,
            } => format!(
                "needs {wanted} {} GPUs, {free} free; {out_of_service} are out of service (failed, cordoned, or still held by a stopping job)",
                name(gpu_type)
            ),
            Unplaced::Consolidation {
                gpu_type,
                wanted,
                free,
            } => format!(
                "waits for one {} server with {wanted} free GPUs ({free} free, spread over servers)",
                name(gpu_type)
            ),
            Unplaced::Fragmented {
                gpu_type,
                wanted,
                free,
            } => format!(
                "needs {wanted} {} GPUs: {free} are free, but in no set the placer accepts",
                name(gpu_type)
            ),
            Unplaced::Resources {
                gpu_type,
                wanted,
                free,
            } => format!(
                "needs {wanted} {} GPUs: {free} are free, but not on servers with the CPUs and memory it was allotted",
                name(gpu_type)
            ),
            Unplaced::PartnerUnavailable => "its packing partner cannot run with it".into(),
            Unplaced::Stopping => {
                "its last run's workers have not stopped yet; it starts again once they have".into()
            }
            Unplaced::Deferred { .. } => "it pauses before its next try to start".into(),
            Unplaced::Unschedulable => "no GPU type can run its gang on this cluster".into(),
        }
    }
}

/// Chooses concrete GPUs for a gang.
pub trait Placer: Send {
    /// Picks free GPUs for `request`, or says why they cannot (or, by its rules, should not) be found.
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced>;

    /// How well `gpus` sit together (for a gang placed elsewhere, such as one re-adopted after a
    /// restart). Placers that know no topology answer [`Locality::IDEAL`].
    fn locality(&mut self, _cluster: &Cluster, _gpus: &[GpuId]) -> Locality {
        Locality::IDEAL
    }

    /// Whether time passing alone could change where (or whether) it places a gang, as a placer that
    /// relaxes locality after a wait does. The simulator skips rounds between events only when
    /// neither the policy nor the placer changes with time.
    fn changes_with_time(&self) -> bool {
        false
    }

    /// A copy of it, for the what-if placements policies make through the round's
    /// [`PlacementProbe`] without moving its state (a random stream, a cache). `None`, the default:
    /// what-ifs go through the placer itself.
    fn fork(&self) -> Option<Box<dyn Placer>> {
        None
    }

    /// Whether `gpus`, which a placement step chose (by itself, or from several of this placer's
    /// answers, as a gang across GPU types is placed one type at a time), keep the rules it holds a
    /// whole gang to ([`even::Even`]'s: as many GPUs on every server). Where they do not, the engine
    /// asks this placer to place the grant itself instead. The default, for placers with no rule
    /// over a whole gang: they do.
    fn accepts(&self, _cluster: &Cluster, _request: &PlaceRequest<'_>, _gpus: &[GpuId]) -> bool {
        true
    }
}

impl<P: Placer + ?Sized> Placer for Box<P> {
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        (**self).place(cluster, free, request)
    }

    fn locality(&mut self, cluster: &Cluster, gpus: &[GpuId]) -> Locality {
        (**self).locality(cluster, gpus)
    }

    fn changes_with_time(&self) -> bool {
        (**self).changes_with_time()
    }

    fn fork(&self) -> Option<Box<dyn Placer>> {
        (**self).fork()
    }

    fn accepts(&self, cluster: &Cluster, request: &PlaceRequest<'_>, gpus: &[GpuId]) -> bool {
        (**self).accepts(cluster, request, gpus)
    }
}

/// The answer when fewer GPUs of the type are free than wanted (`None` when enough are): what a placer
/// or a step says first.
pub fn no_capacity(free: &FreeGpus, request: &PlaceRequest<'_>) -> Option<Unplaced> {
    let available = free.free_of_type(request.gpu_type);
    (available < request.gpus).then_some(Unplaced::NoCapacity {
        gpu_type: request.gpu_type,
        wanted: request.gpus,
        free: available,
    })
}
