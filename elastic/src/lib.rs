//! gangway-elastic: plans the parallel layout of an elastic hybrid-parallel training job on the GPUs
//! a scheduler offers it.
//!
//! Resizing is the simple kind: checkpoint, then relaunch at the new world size. The model fixes the
//! tensor-parallel degree `tp` and the pipeline-parallel degree `pp`; only the data-parallel degree
//! `dp` grows or shrinks. Resizing hybrid-parallel jobs this way, and weighing the throughput gained
//! against the cost of the restart, follows Sia (Suhas Jayaram Subramanya et al., "Sia:
//! Heterogeneity-aware, goodput-optimized ML-cluster scheduling", SOSP 2023). This crate is an
//! independent, simplified take on that planning step.
//!
//! # Planning rules
//!
//! - **Ranks.** Rank `r` has tensor index `r % tp`, data index `(r / tp) % dp` and pipeline stage
//!   `r / (tp * dp)`, so a tensor-parallel group is `tp` consecutive ranks.
//! - **World size.** `world = dp * tp * pp`, a multiple of `tp * pp`, within `[min_gpus, max_gpus]`.
//! - **Placement.** Every tensor-parallel group sits inside one host: tensor parallelism all-reduces
//!   in every layer and needs the intra-host links. Pipeline stages and data-parallel replicas may
//!   span hosts, since they talk far less often. A host with `g` offered GPUs holds `g / tp` groups.
//!   Hosts holding the most groups are filled first (fewer hosts, fewer slow links), lowest GPU index
//!   first, so each host gets a contiguous range of ranks.
//! - **Choice.** [`plan`] takes the largest world size that fits; if the global batch may not be
//!   rescaled, world sizes whose `dp` does not divide it are skipped.
//! - **Batch.** See [`BatchPlan::fit`]: `micro_batch * accum_steps * dp == global_batch` exactly.
//! - **Resize.** See [`ResizePolicy::worth_resizing`]: resize only when the time saved over the
//!   remaining work beats the restart cost by a margin.
//!
//! ```
//! use gangway_elastic::{HostOffer, JobSpec, plan};
//!
//! let spec = JobSpec {
//!     tp: 2, pp: 2, min_gpus: 4, max_gpus: 16,
//!     global_batch: 64, max_micro_batch: 4, rescale_batch: false,
//! };
//! let offer = [HostOffer::new("node1", [0, 1, 2, 3]), HostOffer::new("node2", [5, 6, 7])];
//! let p = plan(&spec, &offer).unwrap();
//! // node2's odd GPU cannot join a tp group, and the 6 usable GPUs are not a multiple of tp*pp = 4.
//! assert_eq!(p.world_size(), 4);
//! assert_eq!((p.parallel.dp, p.batch.micro_batch, p.batch.accum_steps), (1, 4, 16));
//! assert_eq!(p.cuda_visible_devices(), [("node1".to_string(), "0,1,2,3".to_string())]);
//! ```
#![deny(missing_docs)]

mod batch;
mod placement;
mod resize;

pub use batch::BatchPlan;
pub use placement::{GpuSlot, HostOffer, JobSpec, ParallelPlan, Plan, plan};
pub use resize::{Decision, ResizePolicy};

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The job spec contradicts itself (zero degrees, `min_gpus > max_gpus`, ...).
    #[error("invalid job spec: {0}")]
    InvalidSpec(&'static str),
    /// No multiple of `tp * pp` lies in `[min, max]`.
    #[error("no world size in [{min}, {max}] is a multiple of tp*pp={unit}")]
    NoWorldSizeInRange {
        /// `tp * pp`.
        unit: u32,
        /// The job's `min_gpus`.
        min: u32,
        /// The job's `max_gpus`.
        max: u32,
    },
    /// The offer lists the same GPU of a host twice.
    #[error("host {host} offers GPU {gpu} twice")]
    DuplicateGpu {
        /// The host.
        host: String,
        /// The repeated GPU index.
        gpu: u32,
    },
    /// No host offers enough GPUs for one tensor-parallel group.
    #[error("tp={tp} needs {tp} GPUs on one host; largest host offers {largest}")]
    TpGroupTooLarge {
        /// The tensor-parallel degree.
        tp: u32,
        /// The most GPUs any host offers.
        largest: u32,
    },
    /// The offer holds too few GPUs in whole tensor-parallel groups.
    #[error(
        "smallest valid world size is {needed}, but the offer has only {usable} GPUs in whole \
         tp={tp} groups ({offered} offered)"
    )]
    TooFewGpus {
        /// The smallest world size the spec allows.
        needed: u32,
        /// GPUs that can hold whole tensor-parallel groups.
        usable: u32,
        /// GPUs offered in total.
        offered: u32,
        /// The tensor-parallel degree.
        tp: u32,
    },
    /// The global batch may not be rescaled and no placeable `dp` divides it.
    #[error("global batch {global_batch} is not divisible by any placeable dp {dps:?}")]
    BatchIndivisible {
        /// The requested global batch.
        global_batch: u32,
        /// The data-parallel degrees tried, largest first.
        dps: Vec<u32>,
    },
}
