//! Placement rules of a policy's own, beyond the placer: a grant may name a [`PlacementStep`] that
//! places its gang (Hadar's gangs across GPU types, Pollux's baselines on the servers with the most
//! free GPUs) or that revisits it while it runs (Gandiva's defragmenting migration).
//!
//! A step lives in its policy's room, and the engine only ever sees the trait: a user's policy names
//! a step of its own exactly as the built-in ones do. Every placement a step makes goes through the
//! same free GPUs (those whose servers can feed the gang's CPUs and memory), and it may ask the
//! engine's placer for any part of it through its [`StepContext`].
//!
//! ```
//! use gangway_core::placement::{PlaceRequest, Placed, PlacementStep, StepContext, Unplaced};
//!
//! /// Places every gang on one server, or not at all.
//! #[derive(Debug)]
//! struct OneServer;
//!
//! impl PlacementStep for OneServer {
//!     fn name(&self) -> &'static str {
//!         "one_server"
//!     }
//!
//!     fn place(&self, cx: &mut StepContext<'_>, request: &PlaceRequest<'_>) -> Result<Placed, Unplaced> {
//!         cx.place(&PlaceRequest { consolidate: true, ..*request })
//!     }
//! }
//!
//! static ONE_SERVER: OneServer = OneServer;
//! // A policy's grant names it: `Grant::new(job, gpu_type, gpus).placed_by(&ONE_SERVER)`.
//! ```

use std::fmt;

use super::{FreeGpus, PlaceRequest, Placed, Placer, Unplaced};
use crate::cluster::{Cluster, GpuId, GpuTypeId};

/// A placement rule a grant names (see the module's doc). Steps are shared, immutable values
/// (usually a `static`): the engine calls them from every pass.
pub trait PlacementStep: Send + Sync + fmt::Debug {
    /// Its name, for logs and listings.
    fn name(&self) -> &'static str;

    /// Places a new gang for a grant that names it. The default asks the placer.
    fn place(
        &self,
        cx: &mut StepContext<'_>,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        cx.place(request)
    }

    /// Whether gangs it places may span GPU types. A running gang is kept for an unchanged grant only
    /// while whether it spans types is what its grant's step says; CPU and memory mechanisms leave the
    /// allotments of such gangs at their shares.
    fn spans_types(&self) -> bool {
        false
    }

    /// Whether it revisits the runs it names while they keep their GPUs ([`PlacementStep::revisit`]).
    fn revisits(&self) -> bool {
        false
    }

    /// After a pass has placed its new grants, for each run that kept its GPUs under a grant naming
    /// this step (alone, on one GPU type): where it should move now, or `None` to stay. `request`
    /// asks for its type and size, with its GPUs as `previous`; `current` are the GPUs it holds, which
    /// stay held until it moves, so a move never overlaps them.
    fn revisit(
        &self,
        _cx: &mut StepContext<'_>,
        _request: &PlaceRequest<'_>,
        _current: &[GpuId],
    ) -> Option<Placed> {
        None
    }
}

/// What a step may use to place a gang: the cluster, the free GPUs it may use, the engine's placer,
/// and the job's speed on each GPU type.
pub struct StepContext<'a> {
    cluster: &'a Cluster,
    free: &'a FreeGpus,
    placer: &'a mut dyn Placer,
    rate: &'a dyn Fn(GpuTypeId, u32) -> f64,
}

impl<'a> StepContext<'a> {
    /// A context over `free` GPUs of `cluster` with `placer`, for a job whose steps per second on `n`
    /// GPUs of a type `rate` gives.
    pub fn new(
        cluster: &'a Cluster,
        free: &'a FreeGpus,
        placer: &'a mut dyn Placer,
        rate: &'a dyn Fn(GpuTypeId, u32) -> f64,
    ) -> Self {
        StepContext {
            cluster,
            free,
            placer,
            rate,
        }
    }

    /// The cluster.
    pub fn cluster(&self) -> &'a Cluster {
        self.cluster
    }

    /// The GPUs the gang may take.
    pub fn free(&self) -> &'a FreeGpus {
        self.free
    }

    /// What the engine's placer answers for `request` over those GPUs.
    pub fn place(&mut self, request: &PlaceRequest<'_>) -> Result<Placed, Unplaced> {
        self.placer.place(self.cluster, self.free, request)
    }

    /// The job's steps per second on `gpus` GPUs of type `gpu_type` (0: it cannot run there).
    pub fn rate(&self, gpu_type: GpuTypeId, gpus: u32) -> f64 {
        (self.rate)(gpu_type, gpus)
    }

    /// How many GPU types the cluster has.
    pub fn gpu_types(&self) -> usize {
        self.cluster.num_gpu_types()
    }
}

/// A grant's step, compared by identity (two grants name the same step when they name the same
/// value).
#[derive(Clone, Copy)]
pub struct Step(pub &'static dyn PlacementStep);

impl PartialEq for Step {
    fn eq(&self, other: &Step) -> bool {
        std::ptr::addr_eq(self.0, other.0)
    }
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl std::ops::Deref for Step {
    type Target = dyn PlacementStep;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}
