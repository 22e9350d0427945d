//! The GPU actors: each holds the GPUs of one server, and for each GPU its lease and health.
//!
//! One actor per server rather than per GPU: a round that moves thousands of jobs hands each server's
//! GPUs over in one message ([`Handovers`]) rather than one per GPU. Every message names the GPU it
//! is about; leases, probes and health stay per GPU.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// A message about a GPU that is not this actor's.
    #[error("GPU {gpu} is not this actor's")]
    Elsewhere {
        /// The GPU's id.
        gpu: u32,
    },
}

/// Phase one: hold the GPU for `holder`, which may share it with `partner` only.
#[derive(Message)]
#[rtype(result = "Result<(), LeaseError>")]
pub struct Reserve {
    /// The GPU.
    pub gpu: GpuId,
    /// Who reserves it.
    pub holder: Holder,
    /// The only job it may share the GPU with (its packing partner), if any.
    pub partner: Option<JobId>,
}

/// Both phases at once, without waiting: the lease is the holder's if the GPU could be reserved for it
/// right now, else it is refused. A round takes its gangs' GPUs this way at once ([`Handover::Take`])
/// and falls back to [`Reserve`] in order for a gang refused anywhere (see [`crate::gang`]).
#[derive(Message)]
#[rtype(result = "Result<(), LeaseError>")]
pub struct Take {
    /// The GPU.
    pub gpu: GpuId,
    /// Who takes it.
    pub holder: Holder,
    /// The only job it may share the GPU with (its packing partner), if any.
    pub partner: Option<JobId>,
}

/// One GPU changing hands within a round: given back by a holder done with it, or taken (as by a
/// [`Take`]) by a new one, which answers on its batch's [`Tally`] rather than on a channel of its own.
pub enum Handover {
    /// `holder` gives the GPU back.
    Release {
        /// The GPU.
        gpu: GpuId,
        /// Its holder, done with it.
        holder: Holder,
    },
    /// `holder` takes the GPU, which may share it with `partner` only.
    Take {
        /// The GPU.
        gpu: GpuId,
        /// Who takes it.
        holder: Holder,
        /// The only job it may share the GPU with (its packing partner), if any.
        partner: Option<JobId>,
        /// Where it answers.
        answer: TallyAnswer,
    },
}

/// One actor's GPUs changing hands within one round, in one message, in order: a round gives back
/// the GPUs it stops before it takes them again. A round that moves thousands of jobs sends one per
/// server.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Handovers(pub Vec<Handover>);

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
pub struct Commit {
    /// The GPU.
    pub gpu: GpuId,
    /// Whose reservation it commits.
    pub holder: Holder,
}

/// Phase two, the other way: give the reservation back. Idempotent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Discard {
    /// The GPU.
    pub gpu: GpuId,
    /// Whose reservation it gives back.
    pub holder: Holder,
}

/// The holder is done with the GPU. Idempotent.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release {
    /// The GPU.
    pub gpu: GpuId,
    /// Its holder.
    pub holder: Holder,
}

/// The state of the actor's GPUs, in ascending id, for tests and the API.
#[derive(Message)]
#[rtype(result = "Vec<GpuInfo>")]
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

/// Told to the cluster when a GPU's health changes, and when its probe fails (with the health the
/// GPU keeps, `unwatched` set).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct HealthChanged {
    /// The GPU.
    pub gpu: GpuId,
    /// Its new health.
    pub health: Health,
    /// Set once its probe failed, with why: its health is no longer checked (the probe is not
    /// called again) and stays what `health` says.
    pub unwatched: Option<String>,
}

/// A reservation waiting for another gang's in-flight reservation to be committed or discarded.
struct Waiter {
    holder: Holder,
    partner: Option<JobId>,
    answer: oneshot::Sender<Result<(), LeaseError>>,
}

/// One GPU of an actor's: its lease, the reservations waiting for it, and its health.
struct Gpu {
    id: GpuId,
    lease: Lease,
    waiters: VecDeque<Waiter>,
    health: Health,
    /// Its probe, if it has one; away while a check runs.
    probe: Option<Box<dyn HealthProbe>>,
    probe_is_quick: bool,
    /// The check under way on a thread, if one is.
    checking: Option<Checking>,
    /// The health the probe last gave, while the GPU is out of service for its silence.
    before_silence: Option<Health>,
}

/// A check under way on a thread of its own.
struct Checking {
    since: Instant,
    /// Set by the thread as it answers: an answer waiting to be handled is no silence (the actor's
    /// thread may have been held up, and its ticks then come in a burst).
    answered: Arc<AtomicBool>,
}

/// The GPUs of one server (see the module's doc).
pub struct GpuActor {
    /// In ascending id.
    gpus: Vec<Gpu>,
    /// How often the probes are called, if any is.
    probe_every: Option<Duration>,
    watcher: Option<Recipient<HealthChanged>>,
}

impl GpuActor {
    /// The actor of `gpus`, each free and healthy, with no probe (see [`GpuActor::with_probes`]).
    pub fn new(gpus: impl IntoIterator<Item = GpuId>) -> Self {
        let mut gpus: Vec<Gpu> = gpus.into_iter().map(Gpu::new).collect();
        gpus.sort_unstable_by_key(|g| g.id);
        gpus.dedup_by_key(|g| g.id);
        GpuActor {
            gpus,
            probe_every: None,
            watcher: None,
        }
    }

    /// Polls each of `probes` (one of this actor's GPUs, and its probe; others are ignored) every
    /// `every`, and tells `watcher` when a GPU's health changes.
    pub fn with_probes(
        mut self,
        probes: impl IntoIterator<Item = (GpuId, Box<dyn HealthProbe>)>,
        every: Duration,
        watcher: Recipient<HealthChanged>,
    ) -> Self {
        for (id, probe) in probes {
            if let Ok(gpu) = self.gpu(id) {
                gpu.probe_is_quick = probe.quick();
                gpu.probe = Some(probe);
            }
        }
        self.probe_every = Some(every);
        self.watcher = Some(watcher);
        self
    }

    /// GPU `id`, if it is this actor's.
    fn gpu(&mut self, id: GpuId) -> Result<&mut Gpu, LeaseError> {
        match self.gpus.binary_search_by_key(&id, |g| g.id) {
            Ok(k) => Ok(&mut self.gpus[k]),
            Err(_) => Err(LeaseError::Elsewhere { gpu: id.0 }),
        }
    }

    /// Calls each GPU's probe: a quick one here, any other on a thread of its own, so that a probe
    /// that hangs (a wedged driver) holds up neither the GPUs' leases, nor the other actors on this
    /// thread, nor the runtime's blocking threads (rounds solve there), nor a shutdown. A check
    /// still under way is not started again, and one unanswered for [`UNANSWERED_CHECKS`] ticks'
    /// time takes its GPU out of service until the probe answers; a probe that panics is not called
    /// again, and its GPU keeps the health the probe last gave. Where no thread can be had, the
    /// check waits for the next tick.
    fn check_health(&mut self, ctx: &mut Context<Self>) {
        for k in 0..self.gpus.len() {
            self.check_gpu(k, ctx);
        }
    }

    /// Checks the `k`th GPU (see [`GpuActor::check_health`]).
    fn check_gpu(&mut self, k: usize, ctx: &mut Context<Self>) {
        let watcher = self.watcher.as_ref();
        let gpu = &mut self.gpus[k];
        let Some(probe) = gpu.probe.take() else {
            if let Some(every) = self.probe_every {
                gpu.note_silence(every, watcher);
            }
            return;
        };
        let id = gpu.id;
        if gpu.probe_is_quick {
            gpu.checked(check(probe, id), watcher);
            return;
        }
        // The probe goes to the thread once it runs, so that a thread refused leaves it here.
        let (give, given) = std::sync::mpsc::channel::<Box<dyn HealthProbe>>();
        let (answer, answered) = oneshot::channel();
        let done = Arc::new(AtomicBool::new(false));
        let done_there = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name(format!("gpu{}-probe", id.0))
            .spawn(move || {
                if let Ok(probe) = given.recv() {
                    let checked = check(probe, id);
                    done_there.store(true, Ordering::Release);
                    let _ = answer.send(checked);
                }
            });
        if let Err(e) = thread {
            tracing::warn!(gpu = id.0, error = %e, "no thread to check a GPU's health on");
            gpu.probe = Some(probe);
            return;
        }
        give.send(probe).expect("the probe's thread waits for it");
        gpu.checking = Some(Checking {
            since: Instant::now(),
            answered: done,
        });
        ctx.spawn(
            fut::wrap_future(answered).map(move |checked, actor: &mut Self, _| {
                let checked = checked.unwrap_or_else(|_| Err("its thread ended unanswered".into()));
                actor.gpus[k].checked(checked, actor.watcher.as_ref());
            }),
        );
    }
}

impl Gpu {
    fn new(id: GpuId) -> Self {
        Gpu {
            id,
            lease: Lease::default(),
            waiters: VecDeque::new(),
            health: Health::healthy(),
            probe: None,
            probe_is_quick: false,
            checking: None,
            before_silence: None,
        }
    }

    /// A tick found the last check still under way: once it has been for [`UNANSWERED_CHECKS`]
    /// ticks of `every`, unanswered, the GPU is unhealthy until the probe answers.
    fn note_silence(&mut self, every: Duration, watcher: Option<&Recipient<HealthChanged>>) {
        let Some(checking) = &self.checking else {
            return;
        };
        let silent = checking.since.elapsed();
        let answered = checking.answered.load(Ordering::Acquire);
        if answered || silent < every * UNANSWERED_CHECKS || self.before_silence.is_some() {
            return;
        }
        let silence = Health::unhealthy(format!(
            "its health probe has not answered for {:.1} s",
            silent.as_secs_f64()
        ));
        self.before_silence = Some(self.health.clone());
        self.note_health(silence, None, watcher);
    }

    /// Takes a check's outcome: the probe back and the health it found, or why it failed.
    fn checked(
        &mut self,
        checked: Result<(Box<dyn HealthProbe>, Health), String>,
        watcher: Option<&Recipient<HealthChanged>>,
    ) {
        self.checking = None;
        let before_silence = self.before_silence.take();
        match checked {
            Ok((probe, health)) => {
                self.probe = Some(probe);
                self.note_health(health, None, watcher);
            }
            Err(error) => {
                let gpu = self.id.0;
                tracing::error!(gpu, %error, "a GPU's health probe failed; it is not called again");
                // A probe's fault says nothing of its GPU: back to what the probe last said. But its
                // health is no longer watched, which the operator should see.
                let health = before_silence.unwrap_or_else(|| self.health.clone());
                let why = format!("its health probe failed ({error}) and is not called again");
                self.note_health(health, Some(why), watcher);
            }
        }
    }

    /// Takes the health a check found, and tells the watcher if the GPU turned healthy or not, or
    /// if it is `unwatched` from now on (its probe failed), in one message.
    fn note_health(
        &mut self,
        health: Health,
        unwatched: Option<String>,
        watcher: Option<&Recipient<HealthChanged>>,
    ) {
        let turned = health.healthy != self.health.healthy;
        if turned {
            tracing::warn!(gpu = self.id.0, ?health, "GPU health changed");
        }
        if let Some(watcher) = watcher.filter(|_| turned || unwatched.is_some()) {
            watcher.do_send(HealthChanged {
                gpu: self.id,
                health: health.clone(),
                unwatched,
            });
        }
        self.health = health;
    }

    /// Reserves for `holder` if it can have the GPU now; `None` if it must wait for an in-flight
    /// reservation.
    fn try_reserve(
        &mut self,
        holder: Holder,
        partner: Option<JobId>,
    ) -> Option<Result<(), LeaseError>> {
        let gpu = self.id.0;
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
    fn take(&mut self, holder: Holder, partner: Option<JobId>) -> Result<(), LeaseError> {
        let gpu = self.id.0;
        // Another gang mid-acquisition keeps its place: taking never jumps a queue.
        if !self.waiters.is_empty() || !self.lease.reserved.is_empty() {
            let by = (self.lease.reserved.first()).map_or(holder.job, |(h, _)| h.job);
            return Err(LeaseError::Busy { gpu, by });
        }
        self.try_reserve(holder, partner)
            .unwrap_or(Err(LeaseError::Busy {
                gpu,
                by: holder.job,
            }))?;
        self.commit(holder)
    }

    /// See [`Commit`].
    fn commit(&mut self, holder: Holder) -> Result<(), LeaseError> {
        if self.lease.committed.iter().any(|(h, _)| *h == holder) {
            return Ok(());
        }
        let Some(k) = self.lease.reserved.iter().position(|(h, _)| *h == holder) else {
            return Err(LeaseError::NotReserved {
                gpu: self.id.0,
                job: holder.job,
            });
        };
        let entry = self.lease.reserved.remove(k);
        self.lease.committed.push(entry);
        // The GPU is leased now: waiters that cannot share it are refused.
        self.wake();
        Ok(())
    }

    /// See [`Discard`].
    fn discard(&mut self, holder: Holder) {
        self.lease.reserved.retain(|(h, _)| *h != holder);
        self.wake();
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

    fn info(&self) -> GpuInfo {
        GpuInfo {
            gpu: self.id.0,
            lease: self.lease.clone(),
            health: self.health.clone(),
        }
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
        let probed = self.gpus.iter().any(|g| g.probe.is_some());
        if let (Some(every), true) = (self.probe_every, probed) {
            ctx.run_interval(every, |actor, ctx| actor.check_health(ctx));
        }
    }
}

impl Handler<Reserve> for GpuActor {
    type Result = ResponseFuture<Result<(), LeaseError>>;

    fn handle(&mut self, msg: Reserve, _: &mut Context<Self>) -> Self::Result {
        let gpu = match self.gpu(msg.gpu) {
            Ok(gpu) => gpu,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        if let Some(answer) = gpu.try_reserve(msg.holder, msg.partner) {
            return Box::pin(std::future::ready(answer));
        }
        let (answer, wait) = oneshot::channel();
        gpu.waiters.push_back(Waiter {
            holder: msg.holder,
            partner: msg.partner,
            answer,
        });
        let (gpu, holder) = (msg.gpu.0, msg.holder.job);
        Box::pin(async move {
            wait.await
                .unwrap_or(Err(LeaseError::Busy { gpu, by: holder }))
        })
    }
}

impl Handler<Take> for GpuActor {
    type Result = Result<(), LeaseError>;

    fn handle(&mut self, msg: Take, _: &mut Context<Self>) -> Self::Result {
        self.gpu(msg.gpu)?.take(msg.holder, msg.partner)
    }
}

impl Handler<Handovers> for GpuActor {
    type Result = ();

    fn handle(&mut self, Handovers(handovers): Handovers, _: &mut Context<Self>) {
        for handover in handovers {
            match handover {
                Handover::Release { gpu, holder } => {
                    if let Ok(gpu) = self.gpu(gpu) {
                        gpu.release(holder);
                    }
                }
                // A GPU not this actor's is refused, as a GPU taken by another is.
                Handover::Take {
                    gpu,
                    holder,
                    partner,
                    answer,
                } => {
                    let taken = self.gpu(gpu).and_then(|g| g.take(holder, partner));
                    answer.give(taken.is_ok());
                }
            }
        }
    }
}

impl Handler<Commit> for GpuActor {
    type Result = Result<(), LeaseError>;

    fn handle(&mut self, msg: Commit, _: &mut Context<Self>) -> Self::Result {
        self.gpu(msg.gpu)?.commit(msg.holder)
    }
}

impl Handler<Discard> for GpuActor {
    type Result = ();

    fn handle(&mut self, msg: Discard, _: &mut Context<Self>) {
        if let Ok(gpu) = self.gpu(msg.gpu) {
            gpu.discard(msg.holder);
        }
    }
}

impl Handler<Release> for GpuActor {
    type Result = ();

    fn handle(&mut self, msg: Release, _: &mut Context<Self>) {
        if let Ok(gpu) = self.gpu(msg.gpu) {
            gpu.release(msg.holder);
        }
    }
}

impl Handler<Inspect> for GpuActor {
    type Result = MessageResult<Inspect>;

    fn handle(&mut self, _: Inspect, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.gpus.iter().map(Gpu::info).collect())
    }
}
