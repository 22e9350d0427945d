//! Gang leases: all of a gang's GPUs or none of them.
//!
//! The control plane first takes every GPU of a round's gangs at once (reserve and commit in one
//! message per server, each GPU refused rather than kept waiting): that is how leases go when nothing
//! contends.
//! A gang refused anywhere gives back what it took, and a gang actor leases it in two phases: phase
//! one reserves every GPU, one at a time in ascending GPU id; phase two commits them all when every
//! reservation held, and discards them all otherwise. A leased GPU refuses a reservation at once; a
//! GPU only reserved by a gang still acquiring makes the next one wait for it (see [`crate::gpu`]).
//! Because every gang reserves in the same order, waits cannot form a cycle (no deadlock), and the
//! gang furthest along always completes.

use actix::prelude::*;
use futures::future::join_all;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;

use crate::gpu::{Commit, Discard, GpuActor, Holder, LeaseError, Release, Reserve};

/// A gang that could not be leased (its reservations are already given back).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GangError {
    /// A GPU refused its reservation or commit.
    #[error("job {job}: {cause}")]
    Lease {
        /// The gang's job.
        job: JobId,
        /// Why the GPU refused.
        cause: LeaseError,
    },
    /// A GPU actor stopped before it answered.
    #[error("job {job}: a GPU actor is gone")]
    Mailbox {
        /// The gang's job.
        job: JobId,
    },
}

/// Leases the gang: reserve all, then commit all or discard all.
#[derive(Message)]
#[rtype(result = "Result<(), GangError>")]
pub struct Acquire;

/// Gives every GPU back and stops the gang. Idempotent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Disband;

/// One gang's lease over its GPUs, all or nothing (see the module's doc).
pub struct GangActor {
    holder: Holder,
    partner: Option<JobId>,
    /// Its GPUs, in ascending id, each with its actor.
    gpus: Vec<(GpuId, Addr<GpuActor>)>,
}

impl GangActor {
    /// A gang of `gpus` (id, and the actor holding it), reserved in ascending id.
    pub fn new(
        holder: Holder,
        partner: Option<JobId>,
        mut gpus: Vec<(GpuId, Addr<GpuActor>)>,
    ) -> Self {
        gpus.sort_by_key(|(id, _)| *id);
        GangActor {
            holder,
            partner,
            gpus,
        }
    }
}

impl Actor for GangActor {
    type Context = Context<Self>;
}

/// The first error among `results`, if any.
fn first_error(
    job: JobId,
    results: Vec<Result<Result<(), LeaseError>, MailboxError>>,
) -> Result<(), GangError> {
    for result in results {
        match result {
            Err(_) => return Err(GangError::Mailbox { job }),
            Ok(Err(cause)) => return Err(GangError::Lease { job, cause }),
            Ok(Ok(())) => {}
        }
    }
    Ok(())
}

impl Handler<Acquire> for GangActor {
    type Result = ResponseFuture<Result<(), GangError>>;

    fn handle(&mut self, _: Acquire, _: &mut Context<Self>) -> Self::Result {
        let (holder, partner, gpus) = (self.holder, self.partner, self.gpus.clone());
        let job = holder.job;
        Box::pin(async move {
            let mut reserved = Ok(());
            for (gpu, actor) in &gpus {
                let reserve = Reserve {
                    gpu: *gpu,
                    holder,
                    partner,
                };
                reserved = first_error(job, vec![actor.send(reserve).await]);
                if reserved.is_err() {
                    break;
                }
            }
            if let Err(e) = reserved {
                // Discard is idempotent, so it goes to every GPU, reserved or not.
                let discards = gpus
                    .iter()
                    .map(|(gpu, a)| a.send(Discard { gpu: *gpu, holder }));
                join_all(discards).await;
                return Err(e);
            }
            let commits = gpus
                .iter()
                .map(|(gpu, a)| a.send(Commit { gpu: *gpu, holder }));
            if let Err(e) = first_error(job, join_all(commits).await) {
                let releases = gpus
                    .iter()
                    .map(|(gpu, a)| a.send(Release { gpu: *gpu, holder }));
                join_all(releases).await;
                return Err(e);
            }
            Ok(())
        })
    }
}

impl Handler<Disband> for GangActor {
    type Result = ();

    fn handle(&mut self, _: Disband, ctx: &mut Context<Self>) -> Self::Result {
        // Releases are queued on the GPUs' mailboxes before this answers, so anything sent to those
        // GPUs afterwards (the next gang's lease) finds them released: no need to wait for replies.
        for (gpu, actor) in &self.gpus {
            actor.do_send(Release {
                gpu: *gpu,
                holder: self.holder,
            });
        }
        ctx.stop();
    }
}
