//! Picks that fit on servers. The goodput programs ([`super::pick`]) count GPUs per type, not per
//! server, so a pick can hold a gang on part of a server that no server has room for once the runs it
//! keeps stay where they are: granted as it is, that job would get nothing for a round. Before granting,
//! the pick is placed the way the engine will place it, through the round's placement probe (the
//! engine's placer, over the GPUs in service): runs that keep their configuration stay put, the rest
//! in grant order, largest first; a gang that finds no room takes its cheapest option that does, or
//! is left out.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::pick::{Candidate, Choices};
use super::{JobView, RoundInput};
use crate::cluster::GpuTypeId;
use crate::job::{IdMap, JobId};
use crate::placement::PlaceRequest;

/// Changes `picked` (an option per job of `program`, `jobs[k]` being job `k`'s id) so that every
/// granted gang has room: a gang of at most `node_size(type)` GPUs on one server, a larger one on
/// any free GPUs of its type.
pub fn make_placeable(
    input: &RoundInput<'_>,
    jobs: &[JobId],
    program: &[Choices],
    picked: &mut [Option<usize>],
    node_size: impl Fn(GpuTypeId) -> u32,
) {
    let views: IdMap<JobId, &JobView<'_>> = input.jobs.iter().map(|v| (v.id(), v)).collect();
    let mut tried: Vec<Vec<usize>> = vec![Vec::new(); program.len()];
    // A gang that falls back to the size it runs at keeps its GPUs, which the pass had given away:
    // place again from the start with it kept. Each fallback is taken once, so this ends.
    while place_in_order(input, &views, jobs, program, picked, &mut tried, &node_size) {}
}

/// One pass of placing `picked` on a copy of the free GPUs, changing the options that find no room.
/// Returns whether a job fell back to the configuration it runs now (and so keeps its GPUs).
fn place_in_order(
    input: &RoundInput<'_>,
    views: &IdMap<JobId, &JobView<'_>>,
    jobs: &[JobId],
    program: &[Choices],
    picked: &mut [Option<usize>],
    tried: &mut [Vec<usize>],
    node_size: &impl Fn(GpuTypeId) -> u32,
) -> bool {
    let keeps = |k: usize, option: Candidate| {
        views
            .get(&jobs[k])
            .and_then(|v| v.running)
            .filter(|r| r.gpu_type == option.gpu_type && r.gpus.len() == option.gpus as usize)
    };
    let mut scratch = input.placement.scratch();
    // Runs that keep their type and size keep their GPUs; every other run is stopped before placing.
    let mut queue = BinaryHeap::new();
    for (k, choice) in picked.iter().enumerate() {
        let Some(option) = choice.map(|o| program[k].options[o]) else {
            continue;
        };
        match keeps(k, option) {
            Some(running) => scratch.hold(running.gpus),
            None => queue.push((option.gpus, Reverse(k))),
        }
    }
    // In the engine's order: most GPUs first, then program order (the grants' stable sort).
    while let Some((gpus, Reverse(k))) = queue.pop() {
        let (Some(o), Some(view)) = (picked[k], views.get(&jobs[k])) else {
            continue;
        };
        let option = program[k].options[o];
        let request = PlaceRequest {
            job: view.job,
            gpu_type: option.gpu_type,
            gpus,
            previous: view.running.map_or(&[], |r| r.gpus),
            waited: 0.0,
            sensitivity: 0.0,
            consolidate: gpus <= node_size(option.gpu_type),
        };
        if scratch.place(&request).is_ok() {
            continue;
        }
        // No room: the cheapest untried option no larger (so that it still comes at or after this
        // point of the order), unless leaving the job out costs less.
        tried[k].push(o);
        let fallback = program[k]
            .options
            .iter()
            .enumerate()
            .filter(|(j, c)| c.gpus <= gpus && !tried[k].contains(j))
            .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
            .filter(|(_, c)| program[k].left_out.is_none_or(|out| c.cost < out));
        picked[k] = fallback.map(|(j, _)| j);
        if let Some((_, &c)) = fallback {
            if keeps(k, c).is_some() {
                return true;
            }
            queue.push((c.gpus, Reverse(k)));
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, GpuId, NodeId};
    use crate::job::Job;
    use crate::policy::{JobView, Running};
    use crate::throughput::DurationModel;

    /// Runs `make_placeable` on `views` over `cluster`, every job's view in program order.
    fn fit(
        cluster: &Cluster,
        views: &[JobView<'_>],
        program: &[Choices],
        picked: &mut [Option<usize>],
    ) {
        fit_with(
            cluster,
            &crate::placement::PackingProbe::new(cluster),
            views,
            program,
            picked,
        );
    }

    /// [`fit`], with what-if placements through `probe`.
    fn fit_with(
        cluster: &Cluster,
        probe: &dyn crate::placement::PlacementProbe,
        views: &[JobView<'_>],
        program: &[Choices],
        picked: &mut [Option<usize>],
    ) {
        let model = DurationModel::uniform(1);
        let input = RoundInput {
            now: 0.0,
            round_length: 60.0,
            cluster,
            capacity: cluster.capacity(),
            jobs: views,
            backlog: None,
            placement: probe,
            jobs_changed: true,
            type_order: &[GpuTypeId(0)],
            model: &model,
            usage: &[],
            paused: &[],
        };
        let ids: Vec<JobId> = views.iter().map(|v| v.id()).collect();
        make_placeable(&input, &ids, program, picked, |_| 4);
    }

    fn job(id: u32) -> Job {
        Job::new(JobId(id), 0.0, 1, 1.0)
    }

    /// A run on `gpus` of type 0, past its restart.
    fn running(gpus: &[GpuId]) -> Running<'_> {
        Running {
            gpu_type: GpuTypeId(0),
            gpus,
            batch: None,
            restarting: false,
        }
    }

    fn option(gpus: u32, cost: f64) -> Candidate {
        Candidate {
            gpu_type: GpuTypeId(0),
            gpus,
            cost,
        }
    }

    /// Two servers of 4: a run keeps 2 GPUs on each, so a new 3-GPU gang (which the per-type count
    /// lets through: 4 free) has no server; it falls back to its best option that fits, 2 GPUs.
    #[test]
    fn a_gang_without_a_server_takes_its_best_option_that_fits() {
        let cluster = Cluster::from_nodes([("t4", 4, 16, 64.0), ("t4", 4, 16, 64.0)]);
        let jobs: Vec<Job> = (0..3).map(job).collect();
        let gpus = cluster.gpus_of(NodeId(0)).collect::<Vec<_>>();
        let other = cluster.gpus_of(NodeId(1)).collect::<Vec<_>>();
        let rates = [1.0];
        let mut views: Vec<JobView> = jobs.iter().map(|j| JobView::arrived(j, &rates)).collect();
        views[0].running = Some(running(&gpus[..2]));
        views[1].running = Some(running(&other[..2]));
        let program = vec![
            Choices {
                options: vec![option(2, 1.0)],
                left_out: Some(10.0),
            },
            Choices {
                options: vec![option(2, 1.0)],
                left_out: Some(10.0),
            },
            Choices {
                options: vec![option(1, 3.0), option(2, 2.0), option(3, 1.0)],
                left_out: Some(10.0),
            },
        ];
        let mut picked = vec![Some(0), Some(0), Some(2)];
        fit(&cluster, &views, &program, &mut picked);
        assert_eq!(picked, [Some(0), Some(0), Some(1)]);

        // When leaving it out costs less than any option that fits, it is left out.
        let mut program = program;
        program[2].left_out = Some(1.5);
        let mut picked = vec![Some(0), Some(0), Some(2)];
        fit(&cluster, &views, &program, &mut picked);
        assert_eq!(picked, [Some(0), Some(0), None]);
    }

    /// A pick is placed as the engine places it: with one GPU of the only server out of service, a
    /// 4-GPU gang has no room (it once did, on a copy of every GPU, and then waited a round); and with
    /// a placer that spreads no gang, a 6-GPU gang that only two servers could hold takes 4.
    #[test]
    fn picks_are_placed_by_the_engines_placer_over_the_gpus_in_service() {
        use crate::placement::{EngineProbe, PackingPlacer, PlaceRequest, Placed, Placer};
        let one = Cluster::from_nodes([("t4", 4, 16, 64.0)]);
        let jobs: Vec<Job> = (0..1).map(job).collect();
        let rates = [1.0];
        let views: Vec<JobView> = jobs.iter().map(|j| JobView::arrived(j, &rates)).collect();
        let program = vec![Choices {
            options: vec![option(2, 2.0), option(4, 1.0)],
            left_out: Some(10.0),
        }];
        let mut placer = PackingPlacer;
        let in_service = [false; 4];
        let mut picked = vec![Some(1)];
        fit_with(
            &one,
            &EngineProbe::new(&one, &in_service, &mut placer),
            &views,
            &program,
            &mut picked,
        );
        assert_eq!(picked, [Some(1)], "all 4 in service: the gang fits");
        let cordoned = [true, false, false, false];
        let mut picked = vec![Some(1)];
        fit_with(
            &one,
            &EngineProbe::new(&one, &cordoned, &mut placer),
            &views,
            &program,
            &mut picked,
        );
        assert_eq!(
            picked,
            [Some(0)],
            "one out of service: 2 GPUs, not a gang that waits"
        );

        // A placer of the user's that never spreads a gang over servers (and cannot fork).
        struct OneServer;
        impl Placer for OneServer {
            fn place(
                &mut self,
                cluster: &Cluster,
                free: &crate::placement::FreeGpus,
                request: &PlaceRequest<'_>,
            ) -> Result<Placed, crate::placement::Unplaced> {
                if free.widest(request.gpu_type) < request.gpus {
                    return Err(crate::placement::Unplaced::Consolidation {
                        gpu_type: request.gpu_type,
                        wanted: request.gpus,
                        free: free.free_of_type(request.gpu_type),
                    });
                }
                PackingPlacer.place(cluster, free, request)
            }
        }
        let two = Cluster::from_nodes([("t4", 4, 16, 64.0), ("t4", 4, 16, 64.0)]);
        let program = vec![Choices {
            options: vec![option(4, 2.0), option(6, 1.0)],
            left_out: Some(10.0),
        }];
        let in_service = [false; 8];
        let mut picked = vec![Some(1)];
        fit_with(
            &two,
            &EngineProbe::new(&two, &in_service, &mut PackingPlacer),
            &views,
            &program,
            &mut picked,
        );
        assert_eq!(picked, [Some(1)], "best fit spreads 6 over the two servers");
        let mut strict = OneServer;
        let mut picked = vec![Some(1)];
        fit_with(
            &two,
            &EngineProbe::new(&two, &in_service, &mut strict),
            &views,
            &program,
            &mut picked,
        );
        assert_eq!(picked, [Some(0)], "a placer that keeps gangs whole: 4 GPUs");
    }

    /// A run that changes size gives its GPUs back first, and the largest gangs are placed first.
    #[test]
    fn runs_that_change_give_their_gpus_back_and_large_gangs_go_first() {
        let cluster = Cluster::from_nodes([("t4", 4, 16, 64.0), ("t4", 4, 16, 64.0)]);
        let jobs: Vec<Job> = (0..3).map(job).collect();
        let first = cluster.gpus_of(NodeId(0)).collect::<Vec<_>>();
        let rates = [1.0];
        let mut views: Vec<JobView> = jobs.iter().map(|j| JobView::arrived(j, &rates)).collect();
        // Job 0 holds 2 GPUs on the first server and grows to 4.
        views[0].running = Some(running(&first[..2]));
        let program: Vec<Choices> = [4, 3, 1]
            .iter()
            .map(|&g| Choices {
                options: vec![option(g, 1.0)],
                left_out: Some(10.0),
            })
            .collect();
        let mut picked = vec![Some(0); 3];
        fit(&cluster, &views, &program, &mut picked);
        assert_eq!(picked, [Some(0); 3], "4 + (3 + 1) fill both servers");
    }
}
