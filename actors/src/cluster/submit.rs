//! Submissions: validated at once (a refused one changes nothing), journaled together with the
//! others waiting in the mailbox (one append and one fsync: group commit), then admitted and
//! answered; a repeated idempotency key answers the job it named.

use actix::prelude::*;
use gangway_core::engine::{Engine, Unrunnable};
use gangway_core::job::{Job, JobId};
use tokio::sync::oneshot;

use super::ClusterActor;
use super::messages::{JobRequest, Refusal, Submit};
use super::store::load_of;
use crate::ledger::{JobSpec, Record, Shape};
use crate::lifecycle::Phase;
use crate::request::same_request;

/// Distinct job types, and distinct tenants, a control plane keeps: names are never forgotten (ids
/// must stay stable), so a client that invents a new one per job is refused past this many.
pub(super) const MAX_NAMES: usize = 10_000;

/// Job types one user other than the daemon's may name that the control plane did not know: every
/// name is kept for good, so without this one user could take every one left, and no one, the
/// operator included, could name a new type again.
pub(super) const MAX_NEW_TYPES_PER_USER: u32 = 64;

/// The last of [`MAX_NAMES`] job types, which only the operator (the daemon's user, root) may name.
const TYPES_KEPT_FOR_THE_OPERATOR: usize = 1_000;

/// A submission validated and waiting for its journal records: the spec, what it asked beyond its
/// GPUs, the engine's job, and where to answer.
pub(super) type Unjournaled = (JobSpec, Shape, Job, oneshot::Sender<Result<JobId, Refusal>>);

impl ClusterActor {
    /// The job an idempotency key already names, and whether it is journaled yet; a refusal when
    /// that job was submitted with another request; `None` for a new key.
    fn keyed(&self, key: &str, request: &JobRequest) -> Option<Result<(JobId, bool), Refusal>> {
        // Its shape, while it is known (an ended job's is forgotten).
        let (spec, shape, journaled) = match self.store.ledger.keys.get(key) {
            Some(id) => {
                let entry = self.store.ledger.jobs.get(id)?;
                let shape = (!entry.standing.is_terminal()).then(|| {
                    let shaped = self.store.shapes.get(id).cloned();
                    shaped.unwrap_or(Shape::rigid(entry.spec.gpus))
                });
                (&entry.spec, shape, true)
            }
            None => {
                let (spec, shape, _, _) = self
                    .unjournaled
                    .iter()
                    .find(|(spec, ..)| spec.key.as_deref() == Some(key))?;
                (spec, Some(shape.clone()), false)
            }
        };
        let same_shape = shape.is_none_or(|s| s == crate::request::shape(request));
        Some(if same_request(spec, request) && same_shape {
            Ok((spec.id, journaled))
        } else {
            Err(Refusal::KeyReused {
                key: key.to_owned(),
                job: spec.id,
            })
        })
    }

    fn validate(&self, request: &JobRequest) -> Result<(), Refusal> {
        crate::request::validate(request)?;
        if let Some(id) = request.id
            && (self.store.ledger.jobs.contains_key(&id)
                || self.unjournaled.iter().any(|(spec, ..)| spec.id == id))
        {
            return Err(Refusal::Exists(id));
        }
        Ok(())
    }
}

/// A job of the engine's from a journaled spec and its shape (`None`: rigid), interning its names.
pub(super) fn job_of(engine: &mut Engine<'static>, spec: &JobSpec, shape: Option<&Shape>) -> Job {
    let rigid = Shape::rigid(spec.gpus);
    let shape = shape.unwrap_or(&rigid);
    Job {
        id: spec.id,
        arrival: spec.arrival,
        job_type: engine.intern_job_type(&spec.job_type),
        gpus: spec.gpus,
        total_steps: spec.total_steps,
        weight: spec.weight,
        tenant: engine.intern_tenant(&spec.tenant),
        batch: shape.batch,
        min_batch: shape.min_batch,
        sizes: Some(shape.sizes),
        group_by_type: shape.group_by_type(engine.cluster().gpu_types()),
    }
}

impl Handler<Submit> for ClusterActor {
    type Result = ResponseFuture<Result<JobId, Refusal>>;

    /// Validates the job now, and answers once it is journaled. Submissions that wait in the mailbox
    /// together are journaled together, with one fsync (group commit).
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) -> Self::Result {
        let refused = |r| -> Self::Result { Box::pin(std::future::ready(Err(r))) };
        let Submit { request, at, key } = msg;
        if let Err(r) = self.validate(&request) {
            return refused(r);
        }
        if let Some(key) = &key {
            // A retry: the job its key names, once that is journaled.
            match self.keyed(key, &request) {
                Some(Ok((id, true))) => return Box::pin(std::future::ready(Ok(id))),
                Some(Ok((id, false))) => {
                    let (answer, answered) = oneshot::channel();
                    self.key_waiters.push((id, answer));
                    return Box::pin(async move {
                        answered.await.unwrap_or(Err(Refusal::Invalid {
                            field: "job",
                            problem: "the control plane stopped before journaling it".into(),
                        }))
                    });
                }
                Some(Err(r)) => return refused(r),
                None => {}
            }
        }
        let at = at.unwrap_or_else(|| self.clock.now());
        let id = request.id.unwrap_or(JobId(self.next_job_id));
        let shape = crate::request::shape(&request);
        let spec = JobSpec {
            id,
            job_type: request.job_type,
            tenant: request.tenant,
            gpus: request.gpus,
            total_steps: request.work,
            weight: request.weight,
            arrival: at,
            run: request.run,
            key,
        };
        if let Some((uid, this)) = load_of(&spec) {
            // Theirs journaled, and theirs waiting to be.
            let mut theirs = (self.store.unfinished_by_user.get(&uid).copied()).unwrap_or_default();
            if let Some(&waiting) = self.unjournaled_by_user.get(&uid) {
                theirs.add(waiting);
            }
            if theirs.jobs >= self.settings.max_jobs_per_user {
                return refused(Refusal::TooMany {
                    uid,
                    unfinished: theirs.jobs,
                });
            }
            let limit = self.settings.max_command_bytes_per_user;
            if theirs.command_bytes + this.command_bytes > limit {
                return refused(Refusal::TooLarge {
                    uid,
                    bytes: theirs.command_bytes,
                    limit,
                });
            }
        }
        // Checked before its names are interned: a refused submission adds nothing to the engine.
        let another_user = spec.runs_as();
        let new_type = self.engine().job_type_id(&spec.job_type).is_none();
        if let Some(uid) = another_user.filter(|_| new_type) {
            let named = self.types_named_by.get(&uid).copied().unwrap_or(0);
            let known = self.engine().names().job_types.len();
            let refusal = if named >= MAX_NEW_TYPES_PER_USER {
                Some(format!(
                    "uid {uid} has named {named} job types this control plane did not know, the \
                     most one user may: name one it knows"
                ))
            } else if known >= MAX_NAMES - TYPES_KEPT_FOR_THE_OPERATOR {
                Some(format!(
                    "this control plane knows {known} job types; the last \
                     {TYPES_KEPT_FOR_THE_OPERATOR} it may keep are its operator's to name: name one \
                     it knows"
                ))
            } else {
                None
            };
            if let Some(problem) = refusal {
                return refused(Refusal::Invalid {
                    field: "job_type",
                    problem,
                });
            }
        }
        let engine = self.engine();
        let names = engine.names();
        for (field, known, count) in [
            (
                "job_type",
                engine.job_type_id(&spec.job_type).is_some(),
                names.job_types.len(),
            ),
            (
                "tenant",
                engine.tenant_id(&spec.tenant).is_some(),
                names.tenants.len(),
            ),
        ] {
            if count >= MAX_NAMES && !known {
                return refused(Refusal::Invalid {
                    field,
                    problem: format!(
                        "this control plane already knows {MAX_NAMES} names of that kind, the most it keeps"
                    ),
                });
            }
        }
        let types = engine.cluster().gpu_types();
        if let Some(unknown) = shape.pp_by_type.keys().find(|t| !types.contains(t)) {
            return refused(Refusal::Invalid {
                field: "pp_by_type",
                problem: format!(
                    "this cluster has no GPU type {unknown:?} (it has {})",
                    types.join(", ")
                ),
            });
        }
        let mut candidate = engine.candidate(spec.id, &spec.job_type, spec.gpus, spec.total_steps);
        candidate.sizes = Some(shape.sizes);
        candidate.group_by_type = shape.group_by_type(types);
        if let Err(why) = engine.check(&candidate) {
            let field = match why {
                Unrunnable::TooLong { .. } => "work",
                Unrunnable::GangTooLarge { .. } | Unrunnable::NoRate { .. } => "gpus",
            };
            return refused(Refusal::Invalid {
                field,
                problem: format!("job type {:?} cannot run here: {why}", spec.job_type),
            });
        }
        if let Some(uid) = another_user.filter(|_| new_type) {
            *self.types_named_by.entry(uid).or_default() += 1;
        }
        let job = job_of(self.engine(), &spec, Some(&shape));
        self.next_job_id = self.next_job_id.max(id.0 + 1);
        let (answer, answered) = oneshot::channel();
        if let Some((uid, load)) = load_of(&spec) {
            self.unjournaled_by_user.entry(uid).or_default().add(load);
        }
        self.unjournaled.push((spec, shape, job, answer));
        if self.unjournaled.len() == 1 {
            // Through the mailbox, behind the submissions already waiting there, so that they join
            // this batch (`notify` would run it before them).
            ctx.address().do_send(JournalSubmissions);
        }
        Box::pin(async move {
            answered.await.unwrap_or_else(|_| {
                Err(Refusal::Invalid {
                    field: "job",
                    problem: "the control plane stopped before journaling it".into(),
                })
            })
        })
    }
}

/// Journals the submissions validated so far, then admits and answers them.
#[derive(Message)]
#[rtype(result = "()")]
struct JournalSubmissions;

impl Handler<JournalSubmissions> for ClusterActor {
    type Result = ();

    fn handle(&mut self, _: JournalSubmissions, ctx: &mut Context<Self>) {
        let batch = std::mem::take(&mut self.unjournaled);
        self.unjournaled_by_user.clear();
        let records: Vec<Record> = batch
            .iter()
            .flat_map(|(spec, shape, _, _)| {
                let shaped = (*shape != Shape::rigid(spec.gpus)).then(|| Record::Shaped {
                    job: spec.id,
                    shape: shape.clone(),
                });
                std::iter::once(Record::Submitted(spec.clone())).chain(shaped)
            })
            .collect();
        self.persist(&records);
        let mut answers = Vec::with_capacity(batch.len());
        for (spec, _, job, answer) in batch {
            self.engine()
                .submit(job, spec.arrival)
                .expect("checked: new id, runnable");
            self.add_job(spec.id, Phase::Pending);
            self.stats.counters.submitted += 1;
            answers.push((spec.id, answer));
        }
        answers.append(&mut self.key_waiters);
        // Published before answering: a client reads its own submission.
        let submitted: Vec<JobId> = answers.iter().map(|&(id, _)| id).collect();
        self.publish_for_submissions(&submitted);
        for (id, answer) in answers {
            let _ = answer.send(Ok(id));
        }
        if self.settings.engine.schedule_on_arrival {
            self.queue_round(ctx);
        }
    }
}
