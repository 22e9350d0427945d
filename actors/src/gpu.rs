//! The GPU actor: one GPU's lease and health.
//!
//! A lease is taken in two phases, so that a gang is never half-placed: a gang first *reserves* each of
//! its GPUs, then *commits* all of them, or *discards* the reservations it got. Reserving never waits:
//! a GPU held by someone else refuses at once, so two gangs can never wait on each other.

use actix::prelude::*;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;
use serde::Serialize;
use smallvec::SmallVec;

use crate::health::{Health, HealthProbe};

/// Who holds a lease: one start (attempt) of one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Holder {
    pub job: JobId,
    pub attempt: u64,
}

/// A GPU's lease. A GPU has at most two holders, and two only when they are each other's packing
/// partner.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Lease {
    pub reserved: SmallVec<[(Holder, Option<JobId>); 2]>,
    pub committed: SmallVec<[(Holder, Option<JobId>); 2]>,
}

impl Lease {
    fn holders(&self) -> impl Iterator<Item = &(Holder, Option<JobId>)> {
        self.reserved.iter().chain(&self.committed)
    }

    pub fn is_free(&self) -> bool {
        self.reserved.is_empty() && self.committed.is_empty()
    }
}

/// Why a GPU refused a reservation or a commit.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LeaseError {
    #[error("GPU {gpu} is held by job {by}")]
    Busy { gpu: u32, by: JobId },
    #[error("GPU {gpu} is unhealthy")]
    Unhealthy { gpu: u32 },
    #[error("GPU {gpu}: job {job} has no reservation to commit")]
    NotReserved { gpu: u32, job: JobId },
}

/// Phase one: hold the GPU for `holder`, which may share it with `partner` only.
#[derive(Message)]
#[rtype(result = "Result<(), LeaseError>")]
pub struct Reserve {
    pub holder: Holder,
    pub partner: Option<JobId>,
}

/// Phase two: the whole gang got its reservations; the lease is the holder's.
#[derive(Message)]
#[rtype(result = "Result<(), LeaseError>")]
pub struct Commit(pub Holder);

/// Phase two, the other way: give the reservation back. Idempotent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Discard(pub Holder);

/// The holder is done with the GPU. Idempotent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release(pub Holder);

/// The GPU's state, for tests and the API.
#[derive(Message)]
#[rtype(result = "GpuInfo")]
pub struct Inspect;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuInfo {
    pub gpu: u32,
    pub lease: Lease,
    pub health: Health,
}

/// Told to the cluster when a GPU's health changes.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct HealthChanged {
    pub gpu: GpuId,
    pub health: Health,
}

pub struct GpuActor {
    gpu: GpuId,
    lease: Lease,
    health: Health,
    probe: Option<(Box<dyn HealthProbe>, std::time::Duration)>,
    watcher: Option<Recipient<HealthChanged>>,
}

impl GpuActor {
    pub fn new(gpu: GpuId) -> Self {
        GpuActor {
            gpu,
            lease: Lease::default(),
            health: Health::healthy(),
            probe: None,
            watcher: None,
        }
    }

    /// Polls `probe` every `every`, and tells `watcher` when the GPU's health changes.
    pub fn with_probe(
        mut self,
        probe: Box<dyn HealthProbe>,
        every: std::time::Duration,
        watcher: Recipient<HealthChanged>,
    ) -> Self {
        self.probe = Some((probe, every));
        self.watcher = Some(watcher);
        self
    }

    fn check_health(&mut self) {
        let Some((probe, _)) = self.probe.as_mut() else {
            return;
        };
        let health = probe.check(self.gpu);
        if health.healthy != self.health.healthy {
            tracing::warn!(gpu = self.gpu.0, ?health, "GPU health changed");
            if let Some(watcher) = &self.watcher {
                watcher.do_send(HealthChanged {
                    gpu: self.gpu,
                    health: health.clone(),
                });
            }
        }
        self.health = health;
    }
}

impl Actor for GpuActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some((_, every)) = &self.probe {
            // NVML calls take microseconds; polling on the actor's thread is fine at this cadence.
            ctx.run_interval(*every, |gpu, _| gpu.check_health());
        }
    }
}

impl Handler<Reserve> for GpuActor {
    type Result = Result<(), LeaseError>;

    fn handle(&mut self, msg: Reserve, _: &mut Context<Self>) -> Self::Result {
        let gpu = self.gpu.0;
        if !self.health.healthy {
            return Err(LeaseError::Unhealthy { gpu });
        }
        if self.lease.holders().any(|(h, _)| *h == msg.holder) {
            return Ok(()); // a replayed reservation
        }
        // Sharing is allowed only between two jobs that name each other as partners.
        let holders: SmallVec<[(Holder, Option<JobId>); 2]> =
            self.lease.holders().copied().collect();
        let shareable = match holders.as_slice() {
            [] => true,
            [(other, other_partner)] => {
                msg.partner == Some(other.job) && *other_partner == Some(msg.holder.job)
            }
            _ => false,
        };
        if !shareable {
            return Err(LeaseError::Busy {
                gpu,
                by: holders[0].0.job,
            });
        }
        self.lease.reserved.push((msg.holder, msg.partner));
        Ok(())
    }
}

impl Handler<Commit> for GpuActor {
    type Result = Result<(), LeaseError>;

    fn handle(&mut self, Commit(holder): Commit, _: &mut Context<Self>) -> Self::Result {
        if self.lease.committed.iter().any(|(h, _)| *h == holder) {
            return Ok(());
        }
        let Some(k) = self.lease.reserved.iter().position(|(h, _)| *h == holder) else {
            return Err(LeaseError::NotReserved {
                gpu: self.gpu.0,
                job: holder.job,
            });
        };
        let entry = self.lease.reserved.remove(k);
        self.lease.committed.push(entry);
        Ok(())
    }
}

impl Handler<Discard> for GpuActor {
    type Result = ();

    fn handle(&mut self, Discard(holder): Discard, _: &mut Context<Self>) {
        self.lease.reserved.retain(|(h, _)| *h != holder);
    }
}

impl Handler<Release> for GpuActor {
    type Result = ();

    fn handle(&mut self, Release(holder): Release, _: &mut Context<Self>) {
        self.lease.reserved.retain(|(h, _)| *h != holder);
        self.lease.committed.retain(|(h, _)| *h != holder);
    }
}

impl Handler<Inspect> for GpuActor {
    type Result = MessageResult<Inspect>;

    fn handle(&mut self, _: Inspect, _: &mut Context<Self>) -> Self::Result {
        MessageResult(GpuInfo {
            gpu: self.gpu.0,
            lease: self.lease.clone(),
            health: self.health.clone(),
        })
    }
}
