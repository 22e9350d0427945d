//! Replays a trace through a control plane in virtual time, event by event, in the simulator's order:
//! worker completions, then arrivals, then the round boundary. With the simulated executor this is the
//! live control plane doing exactly what `gangway simulate` does, which the parity test checks.

use std::sync::Arc;

use actix::prelude::*;
use gangway_core::engine::EngineConfig;
use gangway_core::job::{Trace, WorkUnit};

use crate::clock::VirtualClock;
use crate::cluster::{ClusterActor, GetStats, JobRequest, Peek, Poll, Round, Submit};

/// Scheduling passes with every GPU idle, jobs waiting and no arrivals left, before giving up.
const STALL_ROUNDS: u32 = 1000;

/// How a replay ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// Round boundaries the replay passed (scheduling passes on arrivals or completions not counted).
    pub rounds: u64,
    /// Virtual time of the last event.
    pub end: f64,
    /// The control plane refused these jobs (they cannot run on its cluster).
    pub refused: Vec<gangway_core::job::JobId>,
    /// Whether it gave up: jobs were left waiting with every GPU idle and no arrivals left, pass after
    /// pass.
    pub stalled: bool,
}

/// Feeds `trace` to `cluster`, advancing `clock` from event to event until every job has ended.
pub async fn replay(
    cluster: &Addr<ClusterActor>,
    clock: &Arc<VirtualClock>,
    trace: &Trace,
    config: &EngineConfig,
) -> Result<Replay, MailboxError> {
    let jobs = &trace.jobs;
    let round = config.round_length.max(1e-6);
    let mut next_arrival = 0;
    let mut next_round = jobs.first().map_or(0.0, |j| j.arrival);
    let mut report = Replay {
        rounds: 0,
        end: next_round,
        refused: Vec::new(),
        stalled: false,
    };
    let mut idle_rounds = 0;
    // The peers' goodput workloads (work counted in progress) are elastic without bound: their jobs
    // run on as many GPUs as a resizing policy gives, so they are replayed as elastic up to the whole
    // cluster.
    let elastic_up_to = match trace.work_unit() {
        WorkUnit::Progress => Some(cluster.send(GetStats).await?.gpus),
        _ => None,
    };
    loop {
        let outlook = cluster.send(Peek).await?;
        let arrival_at = jobs.get(next_arrival).map(|j| j.arrival);
        if outlook.idle && outlook.next_event.is_none() {
            match arrival_at {
                // Nothing to do: jump to the next arrival and restart rounds there.
                Some(t) => next_round = next_round.max(t),
                None => break,
            }
        }
        let now = [outlook.next_event, arrival_at, Some(next_round)]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        clock.set(now);
        report.end = report.end.max(now);
        let mut pass = false;
        if outlook.next_event.is_some_and(|t| t <= now) {
            cluster.send(Poll).await?;
            pass |= config.schedule_on_completion;
        }
        while let Some(job) = jobs.get(next_arrival).filter(|j| j.arrival <= now) {
            next_arrival += 1;
            let request = JobRequest {
                id: Some(job.id),
                job_type: trace.job_type_name(job.job_type).to_owned(),
                tenant: trace
                    .names
                    .tenants
                    .get(job.tenant.0 as usize)
                    .cloned()
                    .unwrap_or_else(|| "default".to_owned()),
                gpus: match (job.sizes, elastic_up_to) {
                    (Some(sizes), _) => sizes.max,
                    (None, Some(all)) => all.max(job.gpus),
                    (None, None) => job.gpus,
                },
                min_gpus: match (job.sizes, elastic_up_to) {
                    (Some(sizes), _) => Some(sizes.min),
                    (None, Some(_)) => Some(1),
                    (None, None) => None,
                },
                tp: job.sizes.map_or(1, |s| s.multiple),
                pp: 1,
                pp_by_type: Default::default(),
                batch: job.batch,
                min_batch: job.min_batch,
                work: job.total_steps,
                weight: job.weight,
                run: None,
            };
            match cluster
                .send(Submit {
                    request,
                    at: Some(job.arrival),
                    key: None,
                })
                .await?
            {
                Ok(_) => pass |= config.schedule_on_arrival,
                Err(_) => report.refused.push(job.id),
            }
        }
        if now >= next_round {
            pass = true;
            report.rounds += 1;
            next_round = now + round;
        }
        if pass {
            cluster.send(Round).await?;
            let after = cluster.send(Peek).await?;
            let stalled = !after.idle && after.busy_gpus == 0 && next_arrival == jobs.len();
            idle_rounds = if stalled { idle_rounds + 1 } else { 0 };
            if idle_rounds > STALL_ROUNDS {
                report.stalled = true;
                break;
            }
        }
    }
    Ok(report)
}
