//! Planning: what a batch of the engine's changes means for the journal and the workers, decided
//! without touching either (in the manner of Volcano's `Statement`: the plan is committed, by
//! journaling its records and carrying out its steps, or dropped whole).

use gangway_core::cluster::{GpuSet, GpuTypeId};
use gangway_core::engine::Change;
use gangway_core::job::JobId;
use gangway_core::throughput::BatchPlan;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::executor::{Executor, Launch, Resources, Segment};
use crate::ledger::{Ledger, Record, Shape, Standing, Start};
use crate::lifecycle::Phase;
use crate::{IdMap, IdSet};

/// A job to stop.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct StopPlan {
    pub job: JobId,
    /// Where the stop leaves it.
    pub next: Phase,
    /// Its workers must be stopped (not when they finished on their own).
    pub stop_workers: bool,
    /// Through `Checkpointing` (not when the job ends).
    pub checkpoint: bool,
}

/// A job to start.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct StartPlan {
    pub launch: Launch,
    pub partner: Option<JobId>,
    /// Through `Placing` (a queued job), or straight to `Starting` (a job being moved or resized).
    pub via_placing: bool,
}

/// What a batch of changes comes to.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Plan {
    /// To journal before anything is carried out.
    pub records: Vec<Record>,
    pub stops: Vec<StopPlan>,
    pub starts: Vec<StartPlan>,
    /// Jobs whose pace, CPUs or memory changed in place.
    pub retunes: Vec<Retune>,
}

/// A running job whose pace (a packing partner left), CPUs or memory (a resource mechanism moved
/// them), or global batch (its policy retuned it) changed in place.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Retune {
    pub job: JobId,
    pub steps_per_second: f64,
    /// Its pace to the end, where it changes as the job progresses.
    pub pace: Vec<Segment>,
    pub resources: Resources,
    /// The global batch its policy chose, for a job that adapts its batch.
    pub batch: Option<u32>,
}

impl Retune {
    /// Tells the executor.
    pub fn apply(&self, executor: &mut dyn Executor, now: f64) {
        executor.retune(self.job, self.steps_per_second, &self.pace, now);
        executor.reallot(self.job, self.resources);
        if let Some(batch) = self.batch {
            executor.rebatch(self.job, batch);
        }
    }
}

/// What `shape` asks of a run on `gpus` GPUs of `gpu_type` (named by the cluster's `gpu_types`) at
/// its policy's batch `plan`: the global batch, for a job that adapts its batch (split over the run's
/// replicas), and the pipeline stages, for one that names them by GPU type.
fn chosen(
    shape: Option<&Shape>,
    gpu_types: &[String],
    gpu_type: GpuTypeId,
    gpus: u32,
    plan: Option<BatchPlan>,
) -> (Option<u32>, Option<u32>) {
    let Some(shape) = shape else {
        return (None, None);
    };
    let name = gpu_types.get(usize::from(gpu_type.0)).map(String::as_str);
    let replicas = shape.replicas_on(name, gpus);
    let stages = name.and_then(|t| shape.stages_on(t));
    (shape.chosen_batch(plan, replicas), stages)
}

/// Plans `changes` made at `now`. `ending` names jobs whose stop ends them (finished, cancelled,
/// failed); `shapes`, what jobs asked beyond their GPUs (a job that adapts its batch is launched at
/// its policy's, one that names its pipeline stages by GPU type (`gpu_types`, the cluster's names)
/// with its launch's type's); `phase_of` gives a job's phase before the batch. Attempts are
/// numbered from the ledger's next one, in the order the starts come.
pub(super) fn plan(
    changes: Vec<Change>,
    now: f64,
    ending: &IdMap<JobId, Phase>,
    ledger: &Ledger,
    (shapes, gpu_types): (&BTreeMap<JobId, Shape>, &[String]),
    phase_of: impl Fn(JobId) -> Option<Phase>,
) -> Plan {
    let mut out = Plan::default();
    // Sized once for the round: a las round at 16,384 GPUs lists some 30,000 changes.
    out.records.reserve(changes.len());
    let mut stopped = Vec::with_capacity(changes.len());
    let mut launches = Vec::with_capacity(changes.len());
    // The GPUs each started job runs on before the batch, if it runs, read with its spec from its
    // ledger entry and used again where a move is told from a resize and where moves are folded:
    // the entry is found once (a las round at 16,384 GPUs starts some 9,000 jobs, whose entries,
    // about 6 MB, the cache does not keep from one pass over them to the next).
    let mut held: Vec<Option<&GpuSet>> = Vec::with_capacity(changes.len());
    let mut attempt = ledger.next_attempt;
    for change in changes {
        match change {
            Change::Stopped { job, .. } => {
                if !ending.contains_key(&job) {
                    out.records.push(Record::Stopped { job, at: now });
                }
                stopped.push(job);
            }
            Change::Started {
                job,
                gpu_type,
                gpus,
                partner,
                steps_per_second,
                pace,
                startup_seconds,
                remaining_steps,
                batch,
                resources,
            } => {
                out.records.push(Record::Started(Start {
                    job,
                    attempt,
                    gpu_type,
                    gpus: gpus.clone(),
                    partner,
                    at: now,
                }));
                let entry = ledger.jobs.get(&job);
                held.push(entry.and_then(|e| e.standing.gpus()));
                let spec = entry.map(|e| &e.spec);
                let size = gpus.len() as u32;
                let (batch, stages) = chosen(shapes.get(&job), gpu_types, gpu_type, size, batch);
                let launch = Launch {
                    job,
                    attempt,
                    gpu_type,
                    gpus,
                    steps_per_second,
                    pace,
                    startup_seconds,
                    remaining_steps,
                    total_steps: spec.map_or(0.0, |s| s.total_steps),
                    resources: Some(resources),
                    run: spec.and_then(|s| s.run.clone()),
                    batch,
                    pp: stages,
                };
                launches.push((launch, partner));
                attempt += 1;
            }
            Change::Retuned {
                job,
                steps_per_second,
                pace,
                batch,
                resources,
            } => {
                // Its batch, split over the replicas it runs on.
                let running = ledger.jobs.get(&job).and_then(|e| match &e.standing {
                    Standing::Running { gpu_type, gpus, .. } => Some((*gpu_type, gpus.len())),
                    _ => None,
                });
                let shape = shapes.get(&job);
                let batch = running.and_then(|(gpu_type, size)| {
                    chosen(shape, gpu_types, gpu_type, size as u32, batch).0
                });
                out.retunes.push(Retune {
                    job,
                    steps_per_second,
                    pace,
                    resources,
                    batch,
                });
            }
        }
    }
    // A stop followed by a start of the same size is a move; of another size, a resize.
    let restarting: IdMap<JobId, bool> = (launches.iter().zip(&held))
        .map(|((l, _), held)| (l.job, held.map(GpuSet::len) == Some(l.gpus.len())))
        .collect();
    let mut after_stops: IdMap<JobId, Phase> = IdMap::default();
    for job in stopped {
        let next = match (ending.get(&job), restarting.get(&job)) {
            (Some(&end), _) => end,
            (None, Some(true)) => Phase::Migrating,
            (None, Some(false)) => Phase::Resizing,
            (None, None) => Phase::Preempted,
        };
        after_stops.insert(job, next);
        out.stops.push(StopPlan {
            job,
            next,
            stop_workers: next != Phase::Finished,
            checkpoint: !next.is_terminal(),
        });
    }
    for (launch, partner) in launches {
        let phase = after_stops
            .get(&launch.job)
            .copied()
            .or_else(|| phase_of(launch.job));
        out.starts.push(StartPlan {
            via_placing: matches!(phase, Some(Phase::Pending | Phase::Preempted)),
            launch,
            partner,
        });
    }
    out.records = fold_moves(std::mem::take(&mut out.records), &held);
    out
}

/// A batch's records with each running job's stop and restart made one `Moved`, ordered so that the
/// ledger takes them one by one: the other stops first, then the starts and moves, each after the
/// moves that free its GPUs. Moves in a ring (each taking GPUs the next one leaves) cannot all come
/// after each other: one move of the ring stays a `Stopped` where the ring blocks and a `Started`
/// once its GPUs are free. Only a batch of one decision (every stop before every start, a job
/// stopped at most once, and so started at most once after it) is folded; any other is left as it is.
/// `held` gives, for each `Started` record in turn, the GPUs its job runs on before the batch.
fn fold_moves(mut records: Vec<Record>, held: &[Option<&GpuSet>]) -> Vec<Record> {
    let first_start = records
        .iter()
        .position(|r| matches!(r, Record::Started(_)))
        .unwrap_or(records.len());
    let (stops, starts) = records.split_at(first_start);
    let stopped: IdSet<JobId> = stops
        .iter()
        .filter(|r| matches!(r, Record::Stopped { .. }))
        .filter_map(Record::job)
        .collect();
    let one_decision =
        stopped.len() == stops.len() && starts.iter().all(|r| matches!(r, Record::Started(_)));
    if !one_decision {
        return records;
    }
    // Each mover's number, and the GPUs it leaves.
    let mut movers: IdMap<JobId, usize> = IdMap::default();
    let mut leaves: Vec<&GpuSet> = Vec::new();
    for (job, held) in starts.iter().filter_map(Record::job).zip(held) {
        if stopped.contains(&job)
            && let Some(gpus) = held
            && movers.insert(job, leaves.len()).is_none()
        {
            leaves.push(gpus);
        }
    }
    if movers.is_empty() {
        return records;
    }
    // The movers leaving each GPU (two, for a packed pair): only the GPUs movers leave (a round
    // moves a handful of jobs, or thousands), not a table of the whole cluster built each round.
    let mut left_by: IdMap<u32, [Option<usize>; 2]> = IdMap::default();
    left_by.reserve(leaves.iter().map(|gpus| gpus.len()).sum());
    for (m, gpus) in leaves.iter().enumerate() {
        for g in gpus.iter() {
            let holders = left_by.entry(g.0).or_default();
            holders[usize::from(holders[0].is_some())] = Some(m);
        }
    }
    // Each start or move, how many moves it waits for (those whose GPUs it takes), and, per mover,
    // the records that wait on it (as (mover, record) pairs sorted by mover).
    let starts = records.split_off(first_start);
    let mut blocked_by = vec![0usize; starts.len()];
    let mut waits: Vec<(usize, usize)> = Vec::new();
    let mut theirs: Vec<usize> = Vec::new();
    let mut pending: Vec<Option<Record>> = Vec::with_capacity(starts.len());
    for (k, record) in starts.into_iter().enumerate() {
        let Record::Started(Start { job, gpus, .. }) = &record else {
            unreachable!("checked: every start is a Started");
        };
        let own = movers.get(job).copied();
        theirs.clear();
        for g in gpus {
            let holders = left_by.get(&g.0).into_iter().flatten().flatten();
            theirs.extend(holders.filter(|&&m| Some(m) != own));
        }
        theirs.sort_unstable();
        theirs.dedup();
        blocked_by[k] = theirs.len();
        waits.extend(theirs.iter().map(|&m| (m, k)));
        pending.push(Some(restart(record, own.is_some())));
    }
    waits.sort_unstable();
    let waiters = |m: usize| {
        let from = waits.partition_point(|&(w, _)| w < m);
        let to = waits.partition_point(|&(w, _)| w <= m);
        waits[from..to].iter().map(|&(_, k)| k)
    };
    let mut out: Vec<Record> = records
        .into_iter()
        .filter(|r| r.job().is_none_or(|job| !movers.contains_key(&job)))
        .collect();
    // Ready records go in the order they came.
    let mut ready: BinaryHeap<Reverse<usize>> = (0..pending.len())
        .filter(|&k| blocked_by[k] == 0)
        .map(Reverse)
        .collect();
    // Mover `m`'s GPUs are free: whoever waited on it waits for one move fewer.
    let mut free = |m: usize, ready: &mut BinaryHeap<Reverse<usize>>| {
        for k in waiters(m) {
            blocked_by[k] -= 1;
            if blocked_by[k] == 0 {
                ready.push(Reverse(k));
            }
        }
    };
    // No record before this one is a move still pending: a move only ever leaves `pending`, or
    // becomes a start, so the search for a ring's first move goes on from where the last ended.
    let mut rings_from = 0;
    for _ in 0..pending.len() {
        while ready.is_empty() {
            // A ring: its first move still pending stops here, and starts once its GPUs are free.
            let k = (rings_from..pending.len())
                .find(|&k| matches!(pending[k], Some(Record::Moved(_))))
                .expect("only moves make others wait");
            rings_from = k + 1;
            let Some(moved @ Record::Moved(Start { job, at, .. })) = pending[k].take() else {
                unreachable!("found above");
            };
            out.push(Record::Stopped { job, at });
            pending[k] = Some(restart(moved, false));
            free(movers[&job], &mut ready);
        }
        let Reverse(k) = ready.pop().expect("filled above");
        let record = pending[k].take().expect("each record is ready once");
        if let Record::Moved(Start { job, .. }) = record {
            free(movers[&job], &mut ready);
        }
        out.push(record);
    }
    out
}

/// A `Started` or `Moved` record as a move (`moves`) or as a start: the same start, on the same GPUs.
fn restart(record: Record, moves: bool) -> Record {
    match record {
        Record::Started(start) | Record::Moved(start) if moves => Record::Moved(start),
        Record::Started(start) | Record::Moved(start) => Record::Started(start),
        other => other,
    }
}

/// Why a job went from `from` to `to` GPUs, from what else the same decision did: the jobs it started
/// from the queue (`arrived`), those that ended since the last decision that started one (`ended`),
/// and how many are active.
pub(super) fn resize_reason(
    from: u32,
    to: u32,
    arrived: &[JobId],
    ended: &[JobId],
    active: usize,
) -> String {
    let active = format!("{active} job{} active", if active == 1 { "" } else { "s" });
    let change = if to < from { "shrank" } else { "grew" };
    let base = format!("{change} from {from} to {to} GPUs");
    match (to < from, arrived, ended) {
        (true, [_, ..], _) => format!("{base} to make room for {} ({active})", jobs(arrived)),
        (false, _, [_, ..]) => format!("{base}, freed as {} ended ({active})", jobs(ended)),
        (false, _, []) => format!("{base}: its goodput gains from them ({active})"),
        (true, [], _) => format!("{base} ({active})"),
    }
}

/// `job 3`, `jobs 3, 5`, or `jobs 3, 5, 8, 9, 10 and 2 more`.
fn jobs(ids: &[JobId]) -> String {
    const SHOWN: usize = 5;
    let names: Vec<String> = ids.iter().take(SHOWN).map(JobId::to_string).collect();
    let more = match ids.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let s = if ids.len() == 1 { "" } else { "s" };
    format!("job{s} {}{more}", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{JobSpec, Violation};
    use gangway_core::cluster::{GpuId, GpuSet, GpuTypeId};
    use gangway_core::throughput::BatchPlan;

    fn gpus(ids: &[u32]) -> GpuSet {
        ids.iter().map(|&g| GpuId(g)).collect()
    }

    /// A ledger where job 1 runs on GPUs 0 and 1, job 2 waits, and the next attempt is 5.
    fn ledger() -> Ledger {
        let mut ledger = Ledger::default();
        for id in [1, 2] {
            let spec = JobSpec {
                id: JobId(id),
                job_type: "t".into(),
                tenant: "a".into(),
                gpus: 2,
                total_steps: 100.0,
                weight: 1.0,
                arrival: 0.0,
                run: None,
                key: None,
            };
            ledger
                .apply(u64::from(id), &Record::Submitted(spec))
                .unwrap();
        }
        let start = Record::Started(Start {
            job: JobId(1),
            attempt: 4,
            gpu_type: GpuTypeId(0),
            gpus: gpus(&[0, 1]),
            partner: None,
            at: 0.0,
        });
        ledger.apply(3, &start).unwrap();
        ledger
    }

    fn started(job: u32, on: &[u32]) -> Change {
        Change::Started {
            job: JobId(job),
            gpu_type: GpuTypeId(0),
            gpus: gpus(on),
            partner: None,
            steps_per_second: 1.0,
            pace: Vec::new(),
            startup_seconds: 0.0,
            remaining_steps: 50.0,
            batch: None,
            resources: Resources {
                cpus: 2.0,
                memory_gb: 8.0,
            },
        }
    }

    fn stopped(job: u32) -> Change {
        Change::Stopped {
            job: JobId(job),
            steps_done: 50.0,
        }
    }

    fn pending(_: JobId) -> Option<Phase> {
        Some(Phase::Pending)
    }

    #[test]
    fn a_stop_then_a_start_of_the_same_size_is_a_move_and_of_another_a_resize() {
        let ledger = ledger();
        let none = IdMap::default();
        let moved = plan(
            vec![stopped(1), started(1, &[2, 3])],
            10.0,
            &none,
            &ledger,
            (&BTreeMap::new(), &[]),
            pending,
        );
        assert_eq!(moved.stops[0].next, Phase::Migrating);
        assert!(moved.stops[0].checkpoint && moved.stops[0].stop_workers);
        // It is already past Pending: it starts without going through Placing.
        assert!(!moved.starts[0].via_placing);
        let resized = plan(
            vec![stopped(1), started(1, &[2, 3, 4, 5])],
            10.0,
            &none,
            &ledger,
            (&BTreeMap::new(), &[]),
            pending,
        );
        assert_eq!(resized.stops[0].next, Phase::Resizing);
        let preempted = plan(
            vec![stopped(1)],
            10.0,
            &none,
            &ledger,
            (&BTreeMap::new(), &[]),
            pending,
        );
        assert_eq!(preempted.stops[0].next, Phase::Preempted);
        assert_eq!(
            preempted.records,
            [Record::Stopped {
                job: JobId(1),
                at: 10.0
            }]
        );
    }

    #[test]
    fn starts_number_attempts_from_the_ledger_and_carry_the_spec() {
        let plan = plan(
            vec![started(2, &[2, 3]), started(1, &[4, 5])],
            7.0,
            &IdMap::default(),
            &ledger(),
            (&BTreeMap::new(), &[]),
            pending,
        );
        let attempts: Vec<u64> = plan.starts.iter().map(|s| s.launch.attempt).collect();
        assert_eq!(attempts, [5, 6]);
        assert!(plan.starts.iter().all(|s| s.via_placing));
        assert_eq!(plan.starts[0].launch.total_steps, 100.0);
        assert!(matches!(
            plan.records[0],
            Record::Started(Start {
                job: JobId(2),
                attempt: 5,
                ..
            })
        ));
    }

    #[test]
    fn a_job_that_adapts_its_batch_is_launched_at_its_policys_within_its_range() {
        let shape = |min_batch| Shape {
            batch: Some(256),
            min_batch,
            ..Shape::rigid(2)
        };
        let shapes = BTreeMap::from([(JobId(1), shape(Some(16))), (JobId(2), shape(None))]);
        let planned = |local| {
            let chosen = |job| {
                let mut change = started(job, &[2, 3]);
                if let Change::Started { batch, .. } = &mut change {
                    *batch = Some(BatchPlan { local, accum: 1 });
                }
                change
            };
            let plan = plan(
                vec![chosen(1), chosen(2)],
                7.0,
                &IdMap::default(),
                &ledger(),
                (&shapes, &[]),
                pending,
            );
            let batches: Vec<Option<u32>> = plan.starts.iter().map(|s| s.launch.batch).collect();
            batches
        };
        // 2 replicas x 24 x 2 micro-steps; a job that keeps its batch gets none.
        assert_eq!(planned(24), [Some(96), None]);
        // A split that rounds past the range is brought back into it.
        assert_eq!(planned(100), [Some(256), None]);
        assert_eq!(planned(2), [Some(16), None]);
    }

    #[test]
    fn a_pipeline_is_launched_with_its_types_stages_and_its_batch_split_over_its_replicas() {
        // Job 1: 2 stages on type `a` (its `pp` of 1 elsewhere); job 2 names no stages. The
        // launches are on type 0, named `a` in one cluster and `b` in another.
        let pipeline = Shape {
            batch: Some(256),
            min_batch: Some(16),
            pp_by_type: [("a".to_owned(), 2)].into(),
            ..Shape::rigid(2)
        };
        let shapes = BTreeMap::from([(JobId(1), pipeline), (JobId(2), Shape::rigid(2))]);
        let chosen = |job| {
            let mut change = started(job, &[2, 3]);
            if let Change::Started { batch, .. } = &mut change {
                *batch = Some(BatchPlan {
                    local: 24,
                    accum: 1,
                });
            }
            change
        };
        let launches = |types: &[String]| {
            let plan = plan(
                vec![chosen(1), chosen(2)],
                7.0,
                &IdMap::default(),
                &ledger(),
                (&shapes, types),
                pending,
            );
            let got: Vec<_> = (plan.starts.iter())
                .map(|s| (s.launch.pp, s.launch.batch))
                .collect();
            got
        };
        // On `a`: one pipeline of 2 stages on its 2 GPUs, 24 samples x 2 micro-steps.
        assert_eq!(launches(&["a".into()]), [(Some(2), Some(48)), (None, None)]);
        // Where it named no stages: its own pp, and 2 replicas.
        assert_eq!(launches(&["b".into()]), [(None, Some(96)), (None, None)]);
    }

    #[test]
    fn a_batch_retuned_in_place_is_passed_on_for_a_job_that_adapts_its_batch() {
        let adaptive = Shape {
            batch: Some(256),
            min_batch: Some(16),
            ..Shape::rigid(2)
        };
        let retuned = |job: u32| Change::Retuned {
            job: JobId(job),
            steps_per_second: 1.0,
            pace: Vec::new(),
            batch: Some(BatchPlan {
                local: 24,
                accum: 1,
            }),
            resources: Resources {
                cpus: 2.0,
                memory_gb: 8.0,
            },
        };
        let batch_of = |job: u32, shape: Shape| {
            let shapes = BTreeMap::from([(JobId(job), shape)]);
            let plan = plan(
                vec![retuned(job)],
                7.0,
                &IdMap::default(),
                &ledger(),
                (&shapes, &[]),
                pending,
            );
            plan.retunes[0].batch
        };
        // Job 1 runs on 2 GPUs: 2 replicas x 24 x 2 micro-steps.
        assert_eq!(batch_of(1, adaptive.clone()), Some(96));
        assert_eq!(batch_of(1, Shape::rigid(2)), None, "it keeps its own batch");
        assert_eq!(batch_of(2, adaptive), None, "job 2 does not run");
    }

    #[test]
    fn a_resize_says_which_jobs_it_made_room_for_or_which_freed_its_gpus() {
        let ids = |ids: &[u32]| ids.iter().map(|&j| JobId(j)).collect::<Vec<_>>();
        assert_eq!(
            resize_reason(8, 4, &ids(&[3]), &[], 2),
            "shrank from 8 to 4 GPUs to make room for job 3 (2 jobs active)"
        );
        assert_eq!(
            resize_reason(4, 8, &ids(&[9]), &ids(&[3, 5]), 1),
            "grew from 4 to 8 GPUs, freed as jobs 3, 5 ended (1 job active)"
        );
        assert_eq!(
            resize_reason(1, 2, &[], &[], 1),
            "grew from 1 to 2 GPUs: its goodput gains from them (1 job active)"
        );
        assert_eq!(
            resize_reason(8, 6, &[], &[], 3),
            "shrank from 8 to 6 GPUs (3 jobs active)"
        );
        let many = ids(&[1, 2, 3, 4, 5, 6, 7]);
        assert!(resize_reason(16, 2, &many, &[], 8).contains("jobs 1, 2, 3, 4, 5 and 2 more"));
    }

    #[test]
    fn an_ending_stop_is_not_journaled_as_a_stop_and_a_finish_stops_no_workers() {
        let ending = IdMap::from_iter([(JobId(1), Phase::Finished)]);
        let plan = plan(
            vec![stopped(1)],
            3.0,
            &ending,
            &ledger(),
            (&BTreeMap::new(), &[]),
            pending,
        );
        assert!(
            plan.records.is_empty(),
            "the ending is journaled by its caller"
        );
        assert_eq!(plan.stops[0].next, Phase::Finished);
        assert!(!plan.stops[0].stop_workers && !plan.stops[0].checkpoint);
        let cancelled = IdMap::from_iter([(JobId(1), Phase::Cancelled)]);
        let plan = super::plan(
            vec![stopped(1)],
            3.0,
            &cancelled,
            &ledger(),
            (&BTreeMap::new(), &[]),
            pending,
        );
        assert!(plan.stops[0].stop_workers && !plan.stops[0].checkpoint);
    }

    /// A ledger of `jobs` submitted jobs needing 2 GPUs each, the first `running` of them on GPUs
    /// `2k, 2k + 1` (job 1 on 0 and 1, ...).
    fn cluster_ledger(jobs: u32, running: u32) -> Ledger {
        let mut ledger = Ledger::default();
        let mut seq = 0;
        for id in 1..=jobs {
            let Record::Submitted(spec) = crate::ledger::tests::spec(id) else {
                unreachable!()
            };
            seq += 1;
            ledger.apply(seq, &Record::Submitted(spec)).unwrap();
        }
        for id in 1..=running {
            seq += 1;
            let on = [2 * id - 2, 2 * id - 1];
            ledger
                .apply(seq, &start_record(id, u64::from(id), &on))
                .unwrap();
        }
        ledger
    }

    fn start_record(job: u32, attempt: u64, on: &[u32]) -> Record {
        Record::Started(Start {
            job: JobId(job),
            attempt,
            gpu_type: GpuTypeId(0),
            gpus: gpus(on),
            partner: None,
            at: 1.0,
        })
    }

    fn stop_record(job: u32) -> Record {
        Record::Stopped {
            job: JobId(job),
            at: 1.0,
        }
    }

    /// For each `Started` record of `records` in turn, the GPUs `ledger` says its job runs on.
    fn held_before<'l>(ledger: &'l Ledger, records: &[Record]) -> Vec<Option<&'l GpuSet>> {
        (records.iter())
            .filter_map(|r| match r {
                Record::Started(start) => Some(start.job),
                _ => None,
            })
            .map(|job| ledger.jobs.get(&job).and_then(|e| e.standing.gpus()))
            .collect()
    }

    /// Applies `records` to a copy of `ledger`: the ledger after, or the first violation.
    fn applied(ledger: &Ledger, records: &[Record]) -> Result<Ledger, Violation> {
        let mut after = ledger.clone();
        for (seq, record) in records.iter().enumerate() {
            after.apply(1000 + seq as u64, record)?;
        }
        Ok(after)
    }

    #[test]
    fn a_move_onto_gpus_another_move_frees_is_one_record_after_it() {
        let ledger = cluster_ledger(3, 2);
        // Job 2 takes job 1's GPUs, job 1 takes free ones: job 2's start comes first from the engine.
        let records = vec![
            stop_record(1),
            stop_record(2),
            start_record(2, 10, &[0, 1]),
            start_record(1, 11, &[4, 5]),
        ];
        let folded = fold_moves(records.clone(), &held_before(&ledger, &records));
        assert_eq!(folded.len(), 2, "{folded:?}");
        assert!(
            matches!(
                folded.as_slice(),
                [
                    Record::Moved(Start { job: JobId(1), .. }),
                    Record::Moved(Start { job: JobId(2), .. })
                ]
            ),
            "{folded:?}"
        );
        assert_eq!(applied(&ledger, &folded), applied(&ledger, &records));
    }

    #[test]
    fn two_jobs_that_swap_gpus_cost_three_records_one_of_them_stopped_first() {
        let ledger = cluster_ledger(2, 2);
        let records = vec![
            stop_record(1),
            stop_record(2),
            start_record(1, 10, &[2, 3]),
            start_record(2, 11, &[0, 1]),
        ];
        let folded = fold_moves(records.clone(), &held_before(&ledger, &records));
        assert_eq!(
            folded,
            [
                stop_record(1),
                restart(start_record(2, 11, &[0, 1]), true),
                start_record(1, 10, &[2, 3]),
            ]
        );
        assert_eq!(applied(&ledger, &folded), applied(&ledger, &records));
    }

    /// Random decisions over 8 jobs and 12 GPUs (six slots of two): whatever moves, stops and starts
    /// a decision makes, and in whatever order the engine lists its starts, the folded records leave
    /// the ledger as the engine's do, break no invariant, and are never more.
    #[test]
    fn folded_records_leave_the_ledger_as_the_unfolded_ones_do() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let ledger = cluster_ledger(8, 5);
        let (mut moves, mut saved) = (0, 0);
        for _ in 0..2000 {
            // Each job's slot after the decision (None: it waits), no slot taken twice.
            let mut slots: Vec<Option<u32>> = (0..6).map(Some).chain([None, None]).collect();
            for k in (1..slots.len()).rev() {
                slots.swap(k, next(k + 1));
            }
            let mut records: Vec<Record> = Vec::new();
            let mut starts = Vec::new();
            for (k, slot) in slots.iter().enumerate() {
                let job = k as u32 + 1;
                let held = (job <= 5).then_some(job - 1);
                if held == *slot {
                    continue;
                }
                if held.is_some() {
                    records.push(stop_record(job));
                }
                if let Some(slot) = slot {
                    moves += usize::from(held.is_some());
                    starts.push(start_record(
                        job,
                        100 + u64::from(job),
                        &[2 * slot, 2 * slot + 1],
                    ));
                }
            }
            for k in (1..starts.len()).rev() {
                starts.swap(k, next(k + 1));
            }
            records.extend(starts);
            let expected = applied(&ledger, &records).expect("the engine's records are valid");
            let folded = fold_moves(records.clone(), &held_before(&ledger, &records));
            assert!(folded.len() <= records.len(), "{records:?}\n{folded:?}");
            saved += records.len() - folded.len();
            assert_eq!(
                applied(&ledger, &folded).as_ref(),
                Ok(&expected),
                "{records:?}\n{folded:?}"
            );
        }
        // Most moves were folded (rings keep one stop each).
        assert!(saved * 2 > moves, "{saved} records saved of {moves} moves");
    }
}
