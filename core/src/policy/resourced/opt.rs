//! `opt`: Synergy's two-phase program (Mohan et al., OSDI'22), on HiGHS.
//!
//! Phase 1 ([`choose_points`]) is a MILP over one binary per job and CPU x memory point of its
//! profile: exactly one point per job, at least as fast as its proportional share, the cluster's
//! CPUs and memory in total not exceeded; it maximizes the sum of the jobs' speeds (each job counts
//! once, whatever its GPUs, as in Synergy). Among equally fast points it takes the one with the fewest
//! resources, a deterministic tie-break Synergy lacks (its solver picks any optimum; GLPK and HiGHS
//! differ on 9 of 100 jobs of its dynamic trace).
//!
//! Phase 2 ([`assign_servers`]) puts the gangs on servers. Synergy solves its relaxation and then uses
//! none of it (its simulator only checks the cluster-wide totals); here it is an integer program whose
//! answer is what runs: per gang and server, how many GPUs it takes there, and one binary per gang, its
//! phase-1 point or its proportional share, so that a packing always exists; it maximizes the speed the
//! points keep, with a small cost per server a gang spans.

use std::time::Instant;

use super::{RoundInput, Spread, best, job_of, pack, share_of};
use crate::cluster::{Cluster, GpuTypeId, NodeId};
use crate::policy::Grant;
use crate::resources::Allotment;
use crate::solver::{Program, Relation, Var};
use crate::throughput::resources::ResourceAware;

/// Tie-break weight on resources in phase 1, and on servers spanned in phase 2: below any difference
/// in speed the profiles resolve (0.01).
const TIE: f64 = 1e-4;

/// Branch-and-bound nodes phase 2 may explore: a deterministic bound (a time limit would make runs
/// differ by machine), past which the greedy packing stands.
const PHASE2_NODES: u32 = 500;

/// Figures of the latest solve.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OptStats {
    /// Gangs the program chose points for: granted, sketched onto servers, alone, and with more
    /// than their share to choose from (the others run on their share).
    pub jobs: usize,
    /// Wall-clock seconds phase 1 (the points) took.
    pub phase1_seconds: f64,
    /// Wall-clock seconds phase 2 (the servers) took, the greedy packing included.
    pub phase2_seconds: f64,
    /// The greedy packing placed every phase-1 point, so the integer program was not needed.
    pub greedy_packed: bool,
    /// Phase 2 found no packing within its node limit, and the greedy packing (with its fallbacks)
    /// placed phase 1's points.
    pub phase2_fell_back: bool,
}

/// One gang for the program.
#[derive(Clone, Debug)]
pub struct Gang {
    pub gpu_type: GpuTypeId,
    pub gpus: u32,
    /// The points it may take per GPU with their speeds; the first is its share.
    pub points: Vec<(Allotment, f64)>,
    /// The servers it keeps, when it runs and keeps its GPUs.
    pub fixed: Option<Spread>,
}

/// Phase 1: the index of the chosen point of each gang, within `cpus` and `memory_gb` in total.
pub fn choose_points(gangs: &[Gang], cpus: f64, memory_gb: f64) -> Option<Vec<usize>> {
    let mut program = Program::new();
    let mut objective = Vec::new();
    let (mut cpu_terms, mut memory_terms) = (Vec::new(), Vec::new());
    let mut vars: Vec<Vec<Var>> = Vec::with_capacity(gangs.len());
    for gang in gangs {
        let g = f64::from(gang.gpus);
        let mine: Vec<Var> = gang
            .points
            .iter()
            .map(|_| program.integer(0.0, 1.0))
            .collect();
        program.constrain(mine.iter().map(|&v| (1.0, v)), Relation::Equal, 1.0);
        for (&v, (point, speed)) in mine.iter().zip(&gang.points) {
            let used = g * (point.cpus / cpus.max(1.0) + point.memory_gb / memory_gb.max(1.0));
            objective.push((speed - TIE * used, v));
            cpu_terms.push((g * point.cpus, v));
            memory_terms.push((g * point.memory_gb, v));
        }
        vars.push(mine);
    }
    program.constrain(cpu_terms, Relation::AtMost, cpus + 1e-6);
    program.constrain(memory_terms, Relation::AtMost, memory_gb + 1e-6);
    let solution = program.maximize(objective).ok()?;
    Some(
        vars.iter()
            .map(|mine| {
                mine.iter()
                    .enumerate()
                    .max_by(|a, b| solution.value(*a.1).total_cmp(&solution.value(*b.1)))
                    .map_or(0, |(k, _)| k)
            })
            .collect(),
    )
}

/// A gang's GPUs on one server in phase 2: at its point, and at its share.
type Cell = (NodeId, Var, Var);

/// Phase 2: for each gang, whether it keeps its phase-1 point (`chosen`) or falls to its share, and the
/// GPUs it takes on each server; `free_gpus` per server excludes the GPUs of kept gangs.
pub fn assign_servers(
    cluster: &Cluster,
    gangs: &[Gang],
    chosen: &[usize],
    free_gpus: &[u32],
) -> Option<Vec<(Allotment, Spread)>> {
    let mut program = Program::new();
    let mut objective = Vec::new();
    let nodes = cluster.nodes();
    let mut gpu_rows: Vec<Vec<(f64, Var)>> = vec![Vec::new(); nodes.len()];
    let mut cpu_rows = gpu_rows.clone();
    let mut memory_rows = gpu_rows.clone();
    // What kept gangs hold at least (their shares), per server.
    let mut cpu_held = vec![0.0; nodes.len()];
    let mut memory_held = vec![0.0; nodes.len()];
    // Per gang: its binary, and per server its GPUs at the point and at the share.
    let mut plan: Vec<(Var, Vec<Cell>)> = Vec::with_capacity(gangs.len());
    for (gang, &k) in gangs.iter().zip(chosen) {
        let (share, share_speed) = gang.points[0];
        let (point, speed) = gang.points[k];
        let keep = program.integer(0.0, 1.0);
        objective.push((speed - share_speed, keep));
        let g = f64::from(gang.gpus);
        let mut cells = Vec::new();
        match &gang.fixed {
            Some(spread) => {
                for &(node, count) in spread {
                    let n = node.0 as usize;
                    let c = f64::from(count);
                    // count * (share + keep * (point - share)), constant part on the right.
                    cpu_rows[n].push((c * (point.cpus - share.cpus), keep));
                    memory_rows[n].push((c * (point.memory_gb - share.memory_gb), keep));
                    cpu_held[n] += c * share.cpus;
                    memory_held[n] += c * share.memory_gb;
                }
            }
            None => {
                let (mut at_point, mut at_share) = (Vec::new(), Vec::new());
                for (n, node) in nodes.iter().enumerate() {
                    if node.gpu_type != gang.gpu_type || free_gpus[n] == 0 {
                        continue;
                    }
                    let most = f64::from(gang.gpus.min(free_gpus[n]));
                    let x1 = program.integer(0.0, most);
                    let x0 = program.integer(0.0, most);
                    gpu_rows[n].extend([(1.0, x1), (1.0, x0)]);
                    cpu_rows[n].extend([(point.cpus, x1), (share.cpus, x0)]);
                    memory_rows[n].extend([(point.memory_gb, x1), (share.memory_gb, x0)]);
                    if gang.gpus > 1 {
                        // Spanning a server costs a little.
                        let used = program.integer(0.0, 1.0);
                        program.constrain(
                            [(1.0, x1), (1.0, x0), (-g, used)],
                            Relation::AtMost,
                            0.0,
                        );
                        objective.push((-TIE, used));
                    }
                    at_point.push((1.0, x1));
                    at_share.push((1.0, x0));
                    cells.push((NodeId(n as u32), x1, x0));
                }
                // All its GPUs at the point when it keeps it, all at the share otherwise.
                at_point.push((-g, keep));
                program.constrain(at_point, Relation::Equal, 0.0);
                at_share.push((g, keep));
                program.constrain(at_share, Relation::Equal, g);
            }
        }
        plan.push((keep, cells));
    }
    for (n, node) in nodes.iter().enumerate() {
        let gpus = std::mem::take(&mut gpu_rows[n]);
        if !gpus.is_empty() {
            program.constrain(gpus, Relation::AtMost, f64::from(free_gpus[n]));
        }
        let cpus = std::mem::take(&mut cpu_rows[n]);
        if !cpus.is_empty() {
            program.constrain(
                cpus,
                Relation::AtMost,
                f64::from(node.cpus) - cpu_held[n] + 1e-6,
            );
        }
        let memory = std::mem::take(&mut memory_rows[n]);
        if !memory.is_empty() {
            program.constrain(
                memory,
                Relation::AtMost,
                node.memory_gb - memory_held[n] + 1e-6,
            );
        }
    }
    let solution = program.maximize_within(objective, PHASE2_NODES).ok()?;
    let on = |v: Var| solution.value(v).round().max(0.0) as u32;
    Some(
        gangs
            .iter()
            .zip(chosen)
            .zip(&plan)
            .map(|((gang, &k), (keep, cells))| {
                let allotment = if on(*keep) == 1 {
                    gang.points[k].0
                } else {
                    gang.points[0].0
                };
                let spread = match &gang.fixed {
                    Some(spread) => spread.clone(),
                    None => cells
                        .iter()
                        .map(|&(node, x1, x0)| (node, on(x1) + on(x0)))
                        .filter(|&(_, count)| count > 0)
                        .collect(),
                };
                (allotment, spread)
            })
            .collect::<Vec<_>>(),
    )
    // Stopped at its node limit, HiGHS may hold no packing yet: every gang must have all its GPUs.
    .filter(|assigned| {
        assigned
            .iter()
            .zip(gangs)
            .all(|((_, spread), gang)| spread.iter().map(|s| s.1).sum::<u32>() == gang.gpus)
    })
}

/// The points a gang of `gpus` GPUs may take on servers like `share`'s: its profile's grid points at
/// least as fast as its share that one server can feed, without the ones another point beats on speed
/// with no more of either resource, and its share first.
fn candidates(
    model: &dyn ResourceAware,
    job: &crate::job::Job,
    gpus: u32,
    cluster: &Cluster,
    gpu_type: GpuTypeId,
) -> Vec<(Allotment, f64)> {
    let share = share_of(cluster, gpu_type);
    let share_speed = model.speed(job, &share);
    let node = cluster.nodes().iter().find(|n| n.gpu_type == gpu_type);
    let per_server = node.map_or(1, |n| gpus.min(n.gpus).max(1));
    let (max_cpus, max_memory) = node.map_or((0.0, 0.0), |n| {
        let k = f64::from(per_server);
        (f64::from(n.cpus) / k, n.memory_gb / k)
    });
    let mut points: Vec<(Allotment, f64)> = model
        .points(job)
        .into_iter()
        .filter(|(p, speed)| {
            *speed >= share_speed && p.cpus <= max_cpus + 1e-9 && p.memory_gb <= max_memory + 1e-9
        })
        .collect();
    points.insert(0, (share, share_speed));
    let beaten = |k: usize| {
        let (p, s) = points[k];
        points.iter().enumerate().any(|(o, &(q, t))| {
            o != k
                && t >= s
                && q.cpus <= p.cpus + 1e-9
                && q.memory_gb <= p.memory_gb + 1e-9
                && (t > s || q.cpus < p.cpus - 1e-9 || q.memory_gb < p.memory_gb - 1e-9 || o < k)
        })
    };
    let keep: Vec<bool> = (0..points.len()).map(|k| k == 0 || !beaten(k)).collect();
    points
        .into_iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p))
        .collect()
}

pub(super) fn size(
    input: &RoundInput<'_>,
    model: &dyn ResourceAware,
    grants: &mut [Grant],
) -> OptStats {
    let cluster = input.cluster;
    // Which grants the engine can give GPUs to, in order, as a GPU-only sketch sees them.
    let (mut shadow, fixed) = super::sketch(input, &super::kept(input, grants));
    let mut gangs = Vec::new();
    let mut of_gang = Vec::new();
    let (mut cpus, mut memory) = cluster.nodes().iter().fold((0.0, 0.0), |(c, m), n| {
        (c + f64::from(n.cpus), m + n.memory_gb)
    });
    for (k, g) in grants.iter().enumerate() {
        let nodes = match &fixed[k] {
            Some(nodes) => nodes.clone(),
            None => match super::request_for(input, g).and_then(|r| shadow.find(&r, None)) {
                Some(nodes) => nodes,
                None => continue,
            },
        };
        let share = share_of(cluster, g.gpu_type);
        shadow.commit(k, nodes, None);
        let points = match (job_of(input, g), best(input, model, g)) {
            (Some(job), Some(_)) if g.partner().is_none() => {
                candidates(model, job, g.gpus, cluster, g.gpu_type)
            }
            _ => Vec::new(),
        };
        if points.len() <= 1 {
            // Nothing to choose: it runs on its share, which the totals lose.
            cpus -= f64::from(g.gpus) * share.cpus;
            memory -= f64::from(g.gpus) * share.memory_gb;
            continue;
        }
        gangs.push(Gang {
            gpu_type: g.gpu_type,
            gpus: g.gpus,
            points,
            fixed: fixed[k].clone(),
        });
        of_gang.push(k);
    }
    let mut stats = OptStats {
        jobs: gangs.len(),
        ..OptStats::default()
    };
    if gangs.is_empty() {
        return stats;
    }
    let started = Instant::now();
    let chosen = choose_points(&gangs, cpus.max(0.0), memory.max(0.0))
        .unwrap_or_else(|| vec![0; gangs.len()]);
    stats.phase1_seconds = started.elapsed().as_secs_f64();
    // Servers' free GPUs: those in service but those the runs kept hold and those the gangs without
    // a choice were sketched on (the engine places them beside the others; the greedy fallback covers
    // a clash): what the sketch left free, with the chosen gangs' GPUs given back for phase 2.
    let mut free: Vec<u32> = (0..cluster.nodes().len())
        .map(|n| shadow.free_on(NodeId(n as u32)))
        .collect();
    for s in &shadow.sketched {
        if fixed[s.grant].is_none() && of_gang.contains(&s.grant) {
            for &(node, count) in &s.nodes {
                free[node.0 as usize] += count;
            }
        }
    }
    let points: Vec<Option<Allotment>> = (0..grants.len())
        .map(|k| {
            of_gang
                .iter()
                .position(|&o| o == k)
                .map(|j| gangs[j].points[chosen[j]].0)
        })
        .collect();
    // Phase 2 is bin packing. Where the greedy packing already places every point no program can do
    // better, and it costs microseconds where HiGHS took up to a minute (docs/SYNERGY.md).
    let started = Instant::now();
    let mut greedy = grants.to_vec();
    if pack(input, &mut greedy, |k| points[k]) {
        grants.copy_from_slice(&greedy);
        stats.greedy_packed = true;
        stats.phase2_seconds = started.elapsed().as_secs_f64();
        return stats;
    }
    let assigned = assign_servers(cluster, &gangs, &chosen, &free);
    stats.phase2_seconds = started.elapsed().as_secs_f64();
    tracing::debug!(
        jobs = stats.jobs,
        phase1_s = stats.phase1_seconds,
        phase2_s = stats.phase2_seconds,
        solved = assigned.is_some(),
        "synergy opt round"
    );
    match assigned {
        Some(assigned) => {
            for ((allotment, spread), &k) in assigned.into_iter().zip(&of_gang) {
                let mut allotment = allotment;
                if fixed[k].is_none()
                    && let [(node, _)] = spread.as_slice()
                {
                    allotment = allotment.on(*node);
                }
                grants[k].allotment = Some(allotment);
            }
        }
        None => {
            stats.phase2_fell_back = true;
            grants.copy_from_slice(&greedy);
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gang whose speed grows with CPUs up to 12 per GPU, or an insensitive one.
    fn gang(gpus: u32, sensitive: bool) -> Gang {
        let share = Allotment::new(3.0, 62.5);
        let mut points = vec![(share, 1.0)];
        if sensitive {
            points.push((Allotment::new(6.0, 62.5), 1.75));
            points.push((Allotment::new(12.0, 125.0), 2.94));
        } else {
            points.push((Allotment::new(1.0, 20.83), 1.0));
        }
        Gang {
            gpu_type: GpuTypeId(0),
            gpus,
            points,
            fixed: None,
        }
    }

    #[test]
    fn phase_one_spends_spare_cpus_on_the_sensitive_and_phase_two_packs_servers() {
        // Two servers of 8 GPUs, 24 CPUs, 500 GB: 48 CPUs for 2 sensitive and 6 insensitive one-GPU jobs
        // and a 4-GPU sensitive gang.
        let cluster = Cluster::from_nodes([("v100", 8, 24, 500.0), ("v100", 8, 24, 500.0)]);
        let mut gangs = vec![gang(1, true), gang(1, true), gang(4, true)];
        gangs.extend((0..6).map(|_| gang(1, false)));
        let chosen = choose_points(&gangs, 48.0, 1000.0).unwrap();
        // The insensitive take 1 CPU each (the cheapest equally fast point).
        assert!(chosen[3..].iter().all(|&k| k == 1), "{chosen:?}");
        let cpus: f64 = gangs
            .iter()
            .zip(&chosen)
            .map(|(g, &k)| f64::from(g.gpus) * g.points[k].0.cpus)
            .sum();
        assert!(cpus <= 48.0 + 1e-9, "{cpus}");
        assert!(
            chosen[..2].iter().all(|&k| k == 2),
            "both one-GPU alexnets at their best: {chosen:?}"
        );
        let assigned = assign_servers(&cluster, &gangs, &chosen, &[8, 8]).unwrap();
        let mut used = [(0u32, 0.0f64, 0.0f64); 2];
        for ((allotment, spread), gang) in assigned.iter().zip(&gangs) {
            assert_eq!(spread.iter().map(|s| s.1).sum::<u32>(), gang.gpus);
            for &(node, count) in spread {
                let u = &mut used[node.0 as usize];
                u.0 += count;
                u.1 += f64::from(count) * allotment.cpus;
                u.2 += f64::from(count) * allotment.memory_gb;
            }
        }
        for (gpus, cpus, memory) in used {
            assert!(
                gpus <= 8 && cpus <= 24.0 + 1e-6 && memory <= 500.0 + 1e-6,
                "{used:?}"
            );
        }
    }
}
