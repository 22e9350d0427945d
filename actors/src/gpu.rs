//! The GPU actor: one GPU's lease and health.
//!
//! A lease is taken in two phases, so that a gang is never half-placed: a gang first *reserves* each of
//! its GPUs, then *commits* all of them, or *discards* the reservations it got.
//!
//! A GPU that is leased (committed) refuses a reservation at once. A GPU that is only reserved by a
//! gang still acquiring makes the next reservation wait until that gang commits (the waiter is then
//! refused) or discards (the waiter gets it). Every gang reserves in ascending GPU id, so a gang only
//! ever waits for one that holds a higher GPU than any it holds itself: waits cannot form a cycle, and
//! the gang furthest along always completes.

use actix::prelude::*;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use smallvec::SmallVec;
use tokio::sync::oneshot;

use crate::health::{Health, HealthProbe};

/// Who holds a lease: one start (attempt) of one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Holder {
    /// The job.
    pub job: JobId,
    /// Its start: each launch of the job holds its GPUs afresh.
    pub attempt: u64,
}

/// A GPU's lease. A GPU has at most two holders, and two only when they are each other's packing
/// partner.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Lease {
    /// Reservations not yet committed (phase one), each with the partner its holder may share with.
    pub reserved: SmallVec<[(Holder, Option<JobId>); 2]>,
    /// Leases committed (phase two), each with its holder's partner.
    pub committed: SmallVec<[(Holder, Option<JobId>); 2]>,
}

impl Lease {
    fn holders(&self) -> impl Iterator<Item = &(Holder, Option<JobId>)> {
        self.reserved.iter().chain(&self.committed)
    }

    /// Whether nobody holds or reserves the GPU.
    pub fn is_free(&self) -> bool {
        self.reserved.is_empty() && self.committed.is_empty()
    }
}

/// Why a GPU refused a reservation or a commit.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LeaseError {
    /// Another job leases the GPU (or, for a [`Take`], reserves or awaits it) and may not share it with
    /// the holder.
    #[error("GPU {gpu} is held by job {by}")]
    Busy {
        /// The GPU's id.
        gpu: u32,
        /// The job that holds it, as far as the GPU can tell (the asker's own where it cannot).
        by: JobId,
    },
    /// Its probe says it is unhealthy.
    #[error("GPU {gpu} is unhealthy")]
    Unhealthy {
        /// The GPU's id.
        gpu: u32,
    },
    /// A commit for a holder that reserved nothing here (its reservation was refused or discarded).
    #[error("GPU {gpu}: job {job} has no reservation to commit")]
    NotReserved {
        /// The GPU's id.
        gpu: u32,
        /// The holder's job.
        job: JobId,
    },
}

/// Phase one: hold the GPU for `holder`, which may share it with `partner` only.
#[derive(Message)]
#[rtype(result = "Result<(), LeaseError>")]
pub struct Reserve {
    /// Who reserves it.
    pub holder: Holder,
    /// The only job it may share the GPU with (its packing partner), if any.
    pub partner: Option<JobId>,
}

/// Both phases at once, without waiting: the lease is the holder's if the GPU could be reserved for it
/// right now, else it is refused. A gang takes all its GPUs this way at once and falls back to
/// [`Reserve`] in order when one refuses (see [`crate::gang`]).
#[derive(Message)]
#[rtype(result = "Result<(), LeaseError>")]
pub struct Take {
    /// Who takes it.
    pub holder: Holder,
    /// The only job it may share the GPU with (its packing partner), if any.
    pub partner: Option<JobId>,
}

/// A GPU changing hands within one round, in one message: its stopped holders give it back, then
/// the new one [`Take`]s it. It answers on its batch's [`Tally`], not on a channel of its own: a
/// round that moves thousands of jobs sends one per GPU.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Handover {
    /// The holders done with it (none: a free GPU simply taken).
    pub release: SmallVec<[Holder; 2]>,
    /// Who takes it.
    pub take: Take,
    /// Where it answers.
    pub answer: TallyAnswer,
}

/// The answers of a batch of [`Handover`]s: which of its gangs were refused a GPU, complete once
/// every GPU has answered.
pub struct Tally {
    state: Mutex<TallyState>,
}

struct TallyState {
    left: usize,
    refused: Vec<bool>,
    done: Option<oneshot::Sender<Vec<bool>>>,
}

impl Tally {
    /// A tally of `gangs` gangs holding `gpus` GPUs in all, and what it comes to: for each gang,
    /// whether it was refused. It expects `gpus` answers, one from each [`Tally::answer_for`].
    pub fn new(gangs: usize, gpus: usize) -> (Arc<Tally>, oneshot::Receiver<Vec<bool>>) {
        let (done, answered) = oneshot::channel();
        let mut state = TallyState {
            left: gpus,
            refused: vec![false; gangs],
            done: Some(done),
        };
        if gpus == 0 {
            state.complete();
        }
        let state = Mutex::new(state);
        (Arc::new(Tally { state }), answered)
    }

    /// Where one GPU of gang `gang` (its index in the batch) answers.
    pub fn answer_for(self: &Arc<Self>, gang: usize) -> TallyAnswer {
        TallyAnswer {
            tally: Arc::clone(self),
            gang,
            refused: true,
        }
    }

    fn count(&self, gang: usize, refused: bool) {
        let mut state = self.state.lock().expect("tally");
        state.refused[gang] |= refused;
        state.left -= 1;
        if state.left == 0 {
            state.complete();
        }
    }
}

impl TallyState {
    fn complete(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(std::mem::take(&mut self.refused));
        }
    }
}

/// One GPU's answer to its [`Tally`], counted when it is dropped: "refused" unless the GPU gave
/// it, so that a message dropped unhandled (its GPU actor gone) still answers and a tally always
/// completes.
pub struct TallyAnswer {
    tally: Arc<Tally>,
    gang: usize,
    refused: bool,
}

impl TallyAnswer {
    fn give(mut self, taken: bool) {
        self.refused = !taken;
    }
}

impl Drop for TallyAnswer {
    fn drop(&mut self) {
        self.tally.count(self.gang, self.refused);
    }
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

/// A GPU's state, as [`Inspect`] answers it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuInfo {
    /// The GPU's id.
    pub gpu: u32,
    /// Who holds or reserves it.
    pub lease: Lease,
    /// What its probe last saw.
    pub health: Health,
}

/// Told to the cluster when a GPU's health changes.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct HealthChanged {
    /// The GPU.
    pub gpu: GpuId,
    /// Its new health.
    pub health: Health,
}

/// A reservation waiting for another gang's in-flight reservation to be committed or discarded.
struct Waiter {
    holder: Holder,
    partner: Option<JobId>,
    answer: oneshot::Sender<Result<(), LeaseError>>,
}

/// One GPU: its lease, the reservations waiting for it, and its health.
pub struct GpuActor {
    gpu: GpuId,
    lease: Lease,
    waiters: VecDeque<Waiter>,
    health: Health,
    /// Its probe, and how often it is called; the probe is away while a check runs.
    probe: Option<Box<dyn HealthProbe>>,
    probe_every: Option<std::time::Duration>,
    probe_is_quick: bool,
    /// Ticks since the check under way on a thread began, if one is.
    unanswered: Option<u32>,
    /// The health the probe last gave, while the GPU is out of service for its silence.
    before_silence: Option<Health>,
    watcher: Option<Recipient<HealthChanged>>,
}

impl GpuActor {
    /// GPU `gpu`, free and healthy, with no probe (see [`GpuActor::with_probe`]).
    pub fn new(gpu: GpuId) -> Self {
        GpuActor {
            gpu,
            lease: Lease::default(),
            waiters: VecDeque::new(),
            health: Health::healthy(),
            probe: None,
            probe_every: None,
            probe_is_quick: false,
            unanswered: None,
            before_silence: None,
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
        self.probe_is_quick = probe.quick();
        self.probe = Some(probe);
        self.probe_every = Some(every);
        self.watcher = Some(watcher);
        self
    }

    /// Calls the probe: a quick one here, any other on a thread of its own, so that a probe that
    /// hangs (a wedged driver) holds up neither this GPU's leases, nor the other actors on this
    /// thread, nor the runtime's blocking threads (rounds solve there), nor a shutdown. A check still
    /// under way is not started again, and one unanswered for [`UNANSWERED_CHECKS`] ticks takes the
    /// GPU out of service until the probe answers; a probe that panics is not called again, and the
    /// GPU keeps the health it last had. Where no thread can be had, the check waits for the next
    /// tick.
    fn check_health(&mut self, ctx: &mut Context<Self>) {
        let Some(probe) = self.probe.take() else {
            self.note_silence();
            return;
        };
        let gpu = self.gpu;
        if self.probe_is_quick {
            self.checked(check(probe, gpu));
            return;
        }
        // The probe goes to the thread once it runs, so that a thread refused leaves it here.
        let (give, given) = std::sync::mpsc::channel::<Box<dyn HealthProbe>>();
        let (answer, answered) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("gpu{}-probe", gpu.0))
            .spawn(move || {
                if let Ok(probe) = given.recv() {
                    let _ = answer.send(check(probe, gpu));
                }
            });
        if let Err(e) = thread {
            tracing::warn!(gpu = gpu.0, error = %e, "no thread to check a GPU's health on");
            self.probe = Some(probe);
            return;
        }
        give.send(probe).expect("the probe's thread waits for it");
        self.unanswered = Some(0);
        ctx.spawn(
            fut::wrap_future(answered).map(|checked, actor: &mut Self, _| {
                actor
                    .checked(checked.unwrap_or_else(|_| Err("its thread ended unanswered".into())));
            }),
        );
    }

    /// A tick found the last check still under way: past [`UNANSWERED_CHECKS`] ticks, the GPU is
    /// unhealthy until the probe answers.
    fn note_silence(&mut self) {
        let (Some(every), Some(ticks)) = (self.probe_every, self.unanswered.as_mut()) else {
            return;
        };
        *ticks = ticks.saturating_add(1);
        if *ticks == UNANSWERED_CHECKS {
            let silent = every * *ticks;
            let silence = Health::unhealthy(format!(
                "its health probe has not answered for {:.1} s",
                silent.as_secs_f64()
            ));
            self.before_silence = Some(self.health.clone());
            self.note_health(silence);
        }
    }

    /// Takes a check's outcome: the probe back and the health it found, or why it failed.
    fn checked(&mut self, checked: Result<(Box<dyn HealthProbe>, Health), String>) {
        self.unanswered = None;
        let before_silence = self.before_silence.take();
        match checked {
            Ok((probe, health)) => {
                self.probe = Some(probe);
                self.note_health(health);
            }
            Err(error) => {
                let gpu = self.gpu.0;
                tracing::error!(gpu, %error, "a GPU's health probe failed; it is not called again");
                // A probe's fault says nothing of its GPU: back to what the probe last said.
                if let Some(health) = before_silence {
                    self.note_health(health);
                }
            }
        }
    }

    /// Takes the health a check found, and tells the watcher if the GPU turned healthy or not.
    fn note_health(&mut self, health: Health) {
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

/// Ticks a health check may stay unanswered before its GPU is taken out of service: a probe that hangs
/// (a wedged driver, a GPU fallen off the bus) vouches for nothing, as a node whose health check
/// times out is drained under Slurm. Its jobs move; the GPU is back once the probe answers healthy.
pub const UNANSWERED_CHECKS: u32 = 3;

/// One check of `probe` on `gpu`: the probe back and the health it found, or the panic it raised.
fn check(
    mut probe: Box<dyn HealthProbe>,
    gpu: GpuId,
) -> Result<(Box<dyn HealthProbe>, Health), String> {
    catch_unwind(AssertUnwindSafe(|| probe.check(gpu)))
        .map(|health| (probe, health))
        .map_err(|_| "it panicked".to_owned())
}

impl Actor for GpuActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(every) = self.probe_every {
            ctx.run_interval(every, |gpu, ctx| gpu.check_health(ctx));
        }
    }
}

impl GpuActor {
    /// Reserves for `holder` if it can have the GPU now; `None` if it must wait for an in-flight
    /// reservation.
    fn try_reserve(
        &mut self,
        holder: Holder,
        partner: Option<JobId>,
    ) -> Option<Result<(), LeaseError>> {
        let gpu = self.gpu.0;
        if !self.health.healthy {
            return Some(Err(LeaseError::Unhealthy { gpu }));
        }
        if self.lease.holders().any(|(h, _)| *h == holder) {
            return Some(Ok(())); // a replayed reservation
        }
        let holders: SmallVec<[(Holder, Option<JobId>); 2]> =
            self.lease.holders().copied().collect();
        // Sharing is allowed only between two jobs that name each other as partners.
        let shareable = match holders.as_slice() {
            [] => true,
            [(other, other_partner)] => {
                partner == Some(other.job) && *other_partner == Some(holder.job)
            }
            _ => false,
        };
        if shareable {
            self.lease.reserved.push((holder, partner));
            return Some(Ok(()));
        }
        if !self.lease.committed.is_empty() {
            return Some(Err(LeaseError::Busy {
                gpu,
                by: holders[0].0.job,
            }));
        }
        None
    }

    /// See [`Take`].
    fn take(&mut self, msg: Take) -> Result<(), LeaseError> {
        // Another gang mid-acquisition keeps its place: taking never jumps a queue.
        if !self.waiters.is_empty() || !self.lease.reserved.is_empty() {
            let by = self
                .lease
                .reserved
                .first()
                .map_or(msg.holder.job, |(h, _)| h.job);
            return Err(LeaseError::Busy {
                gpu: self.gpu.0,
                by,
            });
        }
        self.try_reserve(msg.holder, msg.partner)
            .unwrap_or(Err(LeaseError::Busy {
                gpu: self.gpu.0,
                by: msg.holder.job,
            }))?;
        let k = self
            .lease
            .reserved
            .iter()
            .position(|(h, _)| *h == msg.holder);
        if let Some(k) = k {
            let entry = self.lease.reserved.remove(k);
            self.lease.committed.push(entry);
        }
        Ok(())
    }

    /// See [`Release`].
    fn release(&mut self, holder: Holder) {
        self.lease.reserved.retain(|(h, _)| *h != holder);
        self.lease.committed.retain(|(h, _)| *h != holder);
        self.wake();
    }

    /// After a reservation ended: wake the waiters that can now be answered.
    fn wake(&mut self) {
        while let Some(waiter) = self.waiters.pop_front() {
            match self.try_reserve(waiter.holder, waiter.partner) {
                Some(answer) => {
                    let _ = waiter.answer.send(answer);
                }
                None => {
                    self.waiters.push_front(waiter);
                    break;
                }
            }
        }
    }
}

impl Handler<Reserve> for GpuActor {
    type Result = ResponseFuture<Result<(), LeaseError>>;

    fn handle(&mut self, msg: Reserve, _: &mut Context<Self>) -> Self::Result {
        if let Some(answer) = self.try_reserve(msg.holder, msg.partner) {
            return Box::pin(std::future::ready(answer));
        }
        let (answer, wait) = oneshot::channel();
        self.waiters.push_back(Waiter {
            holder: msg.holder,
            partner: msg.partner,
            answer,
        });
        let gpu = self.gpu.0;
        let holder = msg.holder.job;
        Box::pin(async move {
            wait.await
                .unwrap_or(Err(LeaseError::Busy { gpu, by: holder }))
        })
    }
}

impl Handler<Take> for GpuActor {
    type Result = Result<(), LeaseError>;

    fn handle(&mut self, msg: Take, _: &mut Context<Self>) -> Self::Result {
        self.take(msg)
    }
}

impl Handler<Handover> for GpuActor {
    type Result = ();

    fn handle(&mut self, msg: Handover, _: &mut Context<Self>) {
        for holder in msg.release {
            self.release(holder);
        }
        let taken = self.take(msg.take).is_ok();
        msg.answer.give(taken);
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
        // The GPU is leased now: waiters that cannot share it are refused.
        self.wake();
        Ok(())
    }
}

impl Handler<Discard> for GpuActor {
    type Result = ();

    fn handle(&mut self, Discard(holder): Discard, _: &mut Context<Self>) {
        self.lease.reserved.retain(|(h, _)| *h != holder);
        self.wake();
    }
}

impl Handler<Release> for GpuActor {
    type Result = ();

    fn handle(&mut self, Release(holder): Release, _: &mut Context<Self>) {
        self.release(holder);
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
