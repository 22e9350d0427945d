//! The same scenarios against every policy. `every_policy!` lists each policy once with whether it
//! promises fairness (a bound on how long a job can wait); a test checks the list against the registry,
//! so a new policy cannot be left out.

use gangway_core::cluster::{Cluster, GpuSet, GpuTypeId};
use gangway_core::engine::EngineConfig;
use gangway_core::job::{Job, JobId, JobTypeId, Trace, WorkUnit};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::sim::{SimConfig, SimResult, Simulation};
use gangway_core::throughput::ThroughputModel;

/// One step per second on every GPU type, at any gang size the job asked for; two jobs of one gang size
/// packed together run at 0.6 each (so packing beats time-slicing them, and packing policies pack).
struct Unit;

impl ThroughputModel for Unit {
    fn steps_per_second(&self, job: &Job, _: GpuTypeId, gpus: u32) -> Option<f64> {
        (gpus == job.gpus).then_some(1.0)
    }

    fn packed_steps_per_second(
        &self,
        a: &Job,
        b: &Job,
        _: GpuTypeId,
        gpus: u32,
    ) -> Option<(f64, f64)> {
        (a.gpus == gpus && b.gpus == gpus).then_some((0.6, 0.6))
    }
}

fn trace(jobs: &[(f64, u32, f64)]) -> Trace {
    let mut t = Trace::new("scenario", WorkUnit::Steps);
    t.intern_job_type("a");
    let tenant = t.intern_tenant("default");
    for (i, &(arrival, gpus, steps)) in jobs.iter().enumerate() {
        t.jobs
            .push(Job::new(JobId(i as u32), arrival, gpus, steps).with_tenant(tenant));
    }
    t
}

fn run(name: &str, trace: &Trace, cluster: &Cluster) -> SimResult {
    let mut sim = Simulation::new(trace, cluster, &Unit);
    sim.config = SimConfig {
        engine: EngineConfig {
            audit: true,
            preempt_cost: 10.0,
            restore_cost: 5.0,
            ..EngineConfig::default()
        },
        ..SimConfig::default()
    };
    let mut policy = policy::build(name, &PolicyConfig::seeded(1), &Unit).unwrap();
    sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {})
}

/// A policy that needs a goodput model is refused on a model without one, naming both: it never runs
/// as another policy under its name.
fn refused_without_goodput(name: &str) {
    let err = policy::build(name, &PolicyConfig::seeded(1), &Unit)
        .err()
        .unwrap_or_else(|| panic!("{name} was built without a goodput model"));
    assert!(
        matches!(err, policy::BuildError::Unmet { missing, .. } if missing.goodput),
        "{name}: {err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("policy `{name}` needs a goodput model")),
        "{err}"
    );
}

/// Many gangs of 1-8 GPUs compete for a fragmented cluster of 2- and 4-GPU servers: nothing deadlocks,
/// every job finishes, and the audit (run after every pass) sees no partial gang and no GPU held twice.
fn competing_gangs(name: &str) {
    let cluster = Cluster::from_nodes([
        ("v100", 4, 12, 1.0),
        ("v100", 2, 6, 1.0),
        ("v100", 4, 12, 1.0),
        ("v100", 2, 6, 1.0),
    ]);
    let jobs: Vec<(f64, u32, f64)> = (0..60)
        .map(|i| {
            (
                f64::from(i) * 37.0,
                [1, 2, 4, 8, 2, 3][i as usize % 6],
                500.0 + f64::from(i % 7) * 900.0,
            )
        })
        .collect();
    let result = run(name, &trace(&jobs), &cluster);
    assert!(
        result.records.iter().all(|r| r.finish.is_some()),
        "{name}: a gang never finished"
    );
}

/// A long job arrives into a stream of short ones on one GPU. Fair policies must start it within two
/// hours; unfair ones only have to finish everything.
fn long_job_amid_short_ones(name: &str, fair: bool) {
    let cluster = Cluster::parse_spec("v100=1", 1).unwrap();
    let mut jobs = vec![(0.0, 1, 1800.0), (100.0, 1, 36_000.0)];
    jobs.extend((0..40).map(|i| (200.0 + f64::from(i) * 1500.0, 1, 1500.0)));
    let result = run(name, &trace(&jobs), &cluster);
    assert!(result.records.iter().all(|r| r.finish.is_some()), "{name}");
    if fair {
        let start = result.records[1].first_start.unwrap();
        assert!(
            start - 100.0 <= 7200.0,
            "{name}: the long job waited {} s",
            start - 100.0
        );
    }
}

macro_rules! every_policy {
    (needs goodput: $($elastic:ident),+; $($name:ident: fair = $fair:expr;)+) => {
        $(
            mod $name {
                #[test]
                fn competing_gangs() {
                    super::competing_gangs(stringify!($name));
                }

                #[test]
                fn long_job_amid_short_ones() {
                    super::long_job_amid_short_ones(stringify!($name), $fair);
                }
            }
        )+

        $(
            mod $elastic {
                #[test]
                fn refused_without_goodput() {
                    super::refused_without_goodput(stringify!($elastic));
                }
            }
        )+

        #[test]
        fn the_list_covers_the_registry() {
            let mut listed = vec![$(stringify!($name)),+ , $(stringify!($elastic)),+];
            let mut registered: Vec<&str> =
                gangway_core::policy::builtin().entries().map(|p| p.name()).collect();
            listed.sort_unstable();
            registered.sort_unstable();
            assert_eq!(listed, registered);
        }
    };
}

every_policy! {
    // Run on goodput workloads in their own tests (core/src/policy/*, tests/elastic_fidelity.rs).
    needs goodput: optimus, sia, pollux;
    fifo: fair = false;
    fifo_perf: fair = false;
    yarn_cs: fair = false;
    sjf: fair = false;
    srtf: fair = false;
    max_min_fairness: fair = true;
    isolated: fair = true;
    finish_time_fairness: fair = true;
    tiresias: fair = true;
    tiresias_gittins: fair = false;
    // No starvation promotion, as Pollux runs it: a long job can wait behind short ones.
    tiresias_pollux: fair = false;
    dlas: fair = true;
    gandiva: fair = true;
    // Themis bounds rho, not waiting: a long job's ideal finish time grows with the queue, so its rho
    // can stay the lowest, and it can wait, for hours (see `themis_lowers_the_worst_rho`).
    themis: fair = false;
    max_min_fairness_perf: fair = true;
    finish_time_fairness_perf: fair = true;
    min_total_duration: fair = false;
    max_sum_throughput_perf: fair = false;
    max_sum_throughput_normalized_by_cost_perf: fair = false;
    allox: fair = false;
    hadar: fair = false;
    max_min_fairness_water_filling: fair = true;
    max_min_fairness_packed: fair = true;
    max_min_fairness_water_filling_packed: fair = true;
    finish_time_fairness_packed: fair = true;
    min_total_duration_packed: fair = false;
    max_sum_throughput_packed: fair = false;
    max_sum_throughput_normalized_by_cost_packed: fair = false;
    // Without a goodput model, Gavel's packed sum of throughputs, which bounds no wait.
    ramp: fair = false;
}

/// Rate 1 alone; `kept` of it each when two jobs share a GPU.
struct Packing {
    kept: f64,
}

impl ThroughputModel for Packing {
    fn steps_per_second(&self, _: &Job, _: GpuTypeId, _: u32) -> Option<f64> {
        Some(1.0)
    }

    fn packed_steps_per_second(
        &self,
        _: &Job,
        _: &Job,
        _: GpuTypeId,
        _: u32,
    ) -> Option<(f64, f64)> {
        Some((self.kept, self.kept))
    }
}

/// Two equal jobs on one GPU: Gandiva packs them when packing beats time-slicing (each keeps 60% of its
/// speed, so both finish at 3600 / 0.6 = 6000 s), and time-slices them when the pair interferes (40%).
#[test]
fn gandiva_packs_only_pairs_that_do_not_interfere() {
    let cluster = Cluster::parse_spec("v100=1", 1).unwrap();
    let trace = trace(&[(0.0, 1, 3600.0), (0.0, 1, 3600.0)]);
    let finishes = |kept: f64| {
        let model = Packing { kept };
        let mut sim = Simulation::new(&trace, &cluster, &model);
        sim.config.engine.audit = true;
        let mut policy = policy::build("gandiva", &PolicyConfig::seeded(0), &model).unwrap();
        let result = sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {});
        let mut f: Vec<f64> = result.records.iter().map(|r| r.finish.unwrap()).collect();
        f.sort_by(f64::total_cmp);
        (f, result.busy_gpu_seconds)
    };
    let (packed, busy) = finishes(0.6);
    assert!(
        packed.iter().all(|f| (f - 6000.0).abs() < 1e-6),
        "{packed:?}"
    );
    assert!(
        (busy - 6000.0).abs() < 1e-6,
        "one GPU busy for 6000 s, not {busy}"
    );
    let (sliced, _) = finishes(0.4);
    // Time-sliced in 360 s rounds, the second job ends at 7200 s and the first one round before.
    assert!((sliced[1] - 7200.0).abs() < 1e-6, "{sliced:?}");
    assert!(sliced[0] < 7200.0 - 300.0, "{sliced:?}");
}

/// When one job of a pair finishes, its partner speeds up to its rate alone on the same GPU at once.
#[test]
fn a_packed_job_runs_alone_when_its_partner_finishes() {
    let cluster = Cluster::parse_spec("v100=1", 1).unwrap();
    // Packed at 0.6: the short job ends at 600 s, when the long one has done 360 of its 1000 steps;
    // alone, the remaining 640 steps take 640 s.
    let trace = trace(&[(0.0, 1, 360.0), (0.0, 1, 1000.0)]);
    let model = Packing { kept: 0.6 };
    let mut sim = Simulation::new(&trace, &cluster, &model);
    sim.config.engine.audit = true;
    let mut policy = policy::build("gandiva", &PolicyConfig::seeded(0), &model).unwrap();
    let result = sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {});
    let finish = |i: usize| result.records[i].finish.unwrap();
    assert!((finish(0) - 600.0).abs() < 1e-6, "{}", finish(0));
    assert!((finish(1) - 1240.0).abs() < 1e-6, "{}", finish(1));
}

/// Worst rho (JCT over JCT under `isolated`) of `name` on `jobs`.
fn worst_rho(name: &str, jobs: &[(f64, u32, f64)], cluster: &Cluster) -> f64 {
    let trace = trace(jobs);
    let isolated = run("isolated", &trace, cluster);
    let summary = run(name, &trace, cluster).summary(name, Some(&isolated));
    summary.max_ftf.expect("every job finished")
}

/// A mix of long and short, small and large gangs arriving together on 8 GPUs: Themis, which serves the
/// worst rho first, ends with a lower worst rho than FIFO and than Tiresias. (LAS is not a fair yardstick
/// here: its shares are those of the `isolated` reference itself, so its rho stays near 1 by construction.)
#[test]
fn themis_lowers_the_worst_rho() {
    let cluster = Cluster::from_nodes([("v100", 4, 12, 1.0), ("v100", 4, 12, 1.0)]);
    let jobs: Vec<(f64, u32, f64)> = (0..40)
        .map(|i| {
            (
                f64::from(i) * 300.0,
                [1, 1, 2, 4][i as usize % 4],
                [900.0, 20_000.0, 3_000.0, 8_000.0, 1_500.0][i as usize % 5],
            )
        })
        .collect();
    let themis = worst_rho("themis", &jobs, &cluster);
    for other in ["fifo", "tiresias"] {
        let theirs = worst_rho(other, &jobs, &cluster);
        assert!(themis < theirs, "themis {themis:.2} vs {other} {theirs:.2}");
    }
}

/// Gandiva's defragmentation: a 2-GPU gang that had to start spread over two 4-GPU servers moves onto one
/// when a job leaves and a server has room; LAS leaves it where it is.
#[test]
fn gandiva_moves_a_spread_gang_onto_one_server_when_one_frees_up() {
    let cluster = Cluster::from_nodes([("v100", 4, 12, 1.0), ("v100", 4, 12, 1.0)]);
    // Two 3-GPU jobs fill one server each; the 2-GPU job gets the last GPU of each; the first job ends.
    let jobs = [(0.0, 3, 1000.0), (0.0, 3, 50_000.0), (10.0, 2, 50_000.0)];
    let migrations = |name: &str| run(name, &trace(&jobs), &cluster).records[2].migrations;
    assert_eq!(migrations("gandiva"), 1);
    assert_eq!(migrations("max_min_fairness"), 0);
}

/// Rate sqrt(gpus) at any power-of-two gang: a job runs faster on more GPUs, with diminishing returns.
struct Scaling;

impl ThroughputModel for Scaling {
    fn steps_per_second(&self, _: &Job, _: GpuTypeId, gpus: u32) -> Option<f64> {
        gpus.is_power_of_two().then(|| f64::from(gpus).sqrt())
    }
}

/// Gandiva's grow-shrink: a lone 1-GPU job grows into its 4-GPU server (twice as fast); when a second
/// job arrives, the first shrinks to make room, and both run grown on two GPUs each.
#[test]
fn gandiva_grows_into_idle_gpus_and_shrinks_for_newcomers() {
    let cluster = Cluster::from_nodes([("v100", 4, 12, 1.0)]);
    let run_with = |spec: &str, jobs: &[(f64, u32, f64)]| {
        let trace = trace(jobs);
        let mut sim = Simulation::new(&trace, &cluster, &Scaling);
        sim.config.engine.audit = true;
        let mut policy = policy::build(spec, &PolicyConfig::seeded(0), &Scaling).unwrap();
        sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {})
    };
    let alone = |spec: &str| {
        run_with(spec, &[(0.0, 1, 7200.0)]).records[0]
            .finish
            .unwrap()
    };
    assert!((alone("gandiva") - 7200.0).abs() < 1e-6);
    assert!(
        (alone("gandiva:grow=1") - 3600.0).abs() < 1e-6,
        "{}",
        alone("gandiva:grow=1")
    );
    let pair = run_with("gandiva:grow=1", &[(0.0, 1, 7200.0), (1000.0, 1, 7200.0)]);
    let first = &pair.records[0];
    // 1080 s on 4 GPUs (2160 steps), then sqrt(2) steps/s on 2 GPUs for the remaining 5040 steps.
    let expected = 1080.0 + 5040.0 / 2f64.sqrt();
    assert!(
        (first.finish.unwrap() - expected).abs() < 1e-6,
        "{:?}",
        first.finish
    );
    assert_eq!(
        first.migrations, 1,
        "the shrink from 4 GPUs to 2 moves the job once"
    );
}

/// Job type 0 runs at 1 step/s on v100 and 0.5 on p100; job type 1 at 1 step/s on both.
struct TwoSpeeds;

impl ThroughputModel for TwoSpeeds {
    fn steps_per_second(&self, job: &Job, t: GpuTypeId, gpus: u32) -> Option<f64> {
        let slow = job.job_type.0 == 0 && t.0 == 1;
        (gpus == job.gpus).then_some(if slow { 0.5 } else { 1.0 })
    }
}

/// Hadar's task-level heterogeneity: two short 3-GPU gangs (worth most per GPU) take a V100 server and a
/// P100 server, leaving one GPU of each; a 2-GPU gang that runs as fast on either type can then only run
/// across the two, and it does, at once. Without mixing it waits for a whole server.
#[test]
fn hadar_runs_a_gang_across_gpu_types() {
    let cluster = Cluster::from_nodes([("v100", 4, 12, 1.0), ("p100", 4, 12, 1.0)]);
    let mut trace = trace(&[(0.0, 3, 3600.0), (0.0, 3, 3600.0), (10.0, 2, 6000.0)]);
    trace.intern_job_type("b");
    trace.jobs[2].job_type = JobTypeId(1);
    let run_with = |spec: &str| {
        let mut sim = Simulation::new(&trace, &cluster, &TwoSpeeds);
        sim.config.engine.audit = true;
        let mut policy = policy::build(spec, &PolicyConfig::seeded(0), &TwoSpeeds).unwrap();
        sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {})
    };
    let mixed = run_with("hadar");
    let gang = &mixed.records[2];
    assert_eq!(
        gang.first_start,
        Some(360.0),
        "starts at the first round after it arrives"
    );
    assert!(
        gang.gpu_seconds.iter().all(|s| *s > 0.0),
        "it ran on both types: {:?}",
        gang.gpu_seconds
    );
    let whole = run_with("hadar:mixed=0");
    assert!(whole.records[2].first_start.unwrap() > 360.0);
}

/// A user's placement step, named by a user's grants, is what places them: the engine calls it
/// through the same trait as Gandiva's, Hadar's and Optimus' steps.
#[test]
fn a_users_placement_step_places_the_grants_that_name_it() {
    use gangway_core::placement::{PlaceRequest, Placed, PlacementStep, StepContext, Unplaced};
    use gangway_core::policy::{Grant, Policy, RoundInput};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Places gangs on one server only, and counts its calls.
    #[derive(Debug)]
    struct OneServer(AtomicUsize);
    impl PlacementStep for OneServer {
        fn name(&self) -> &'static str {
            "one_server"
        }
        fn place(
            &self,
            cx: &mut StepContext<'_>,
            request: &PlaceRequest<'_>,
        ) -> Result<Placed, Unplaced> {
            self.0.fetch_add(1, Ordering::Relaxed);
            cx.place(&PlaceRequest {
                consolidate: true,
                ..*request
            })
        }
    }
    static ONE_SERVER: OneServer = OneServer(AtomicUsize::new(0));

    /// FIFO's grants, each placed by the step.
    struct Stepped(Box<dyn Policy>);
    impl Policy for Stepped {
        fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
            let grants = self.0.allocate(input);
            grants
                .into_iter()
                .map(|g| g.placed_by(&ONE_SERVER))
                .collect()
        }
    }

    let cluster = Cluster::from_nodes([("v100", 4, 12, 1.0), ("v100", 4, 12, 1.0)]);
    let jobs: Vec<(f64, u32, f64)> = (0..12u32)
        .map(|i| (f64::from(i) * 50.0, [1, 2, 3, 4][i as usize % 4], 400.0))
        .collect();
    let trace = trace(&jobs);
    let mut sim = Simulation::new(&trace, &cluster, &Unit);
    sim.config.log_changes = true;
    let mut policy = Stepped(policy::build("fifo", &PolicyConfig::seeded(1), &Unit).unwrap());
    let result = sim.run(&mut policy, &mut PackingPlacer, &mut |_, _| {});
    assert!(result.records.iter().all(|r| r.finish.is_some()));
    assert!(ONE_SERVER.0.load(Ordering::Relaxed) >= jobs.len());
    for (_, change) in &result.changes {
        if let gangway_core::engine::Change::Started { gpus, .. } = change {
            let node = cluster.node_of(gpus[0]);
            assert!(
                gpus.iter().all(|&g| cluster.node_of(g) == node),
                "{change:?}"
            );
        }
    }
}

/// A placement step may join several of the placer's answers, as Hadar's does for a gang across GPU
/// types (each type's part placed apart): under a placer that keeps gangs even (Slurm's one torchrun
/// agent per server), the whole gang is held to it too. A 4-GPU gang that a step splits 3 + 1 over
/// two servers is placed by the placer instead, on one server; 2 + 2 stands; without the even rule
/// 3 + 1 stands.
#[test]
fn a_gang_a_step_joins_from_parts_keeps_the_placers_rules_for_a_whole_gang() {
    use gangway_core::placement::even::Even;
    use gangway_core::placement::{
        PlaceRequest, Placed, PlacementStep, Placer, StepContext, Unplaced,
    };
    use gangway_core::policy::{Grant, Policy, RoundInput};

    /// Places `.0` of a gang's GPUs on the first type and the rest on the second, each part by the
    /// placer.
    #[derive(Debug)]
    struct Split(u32);
    impl PlacementStep for Split {
        fn name(&self) -> &'static str {
            "split"
        }
        fn place(
            &self,
            cx: &mut StepContext<'_>,
            request: &PlaceRequest<'_>,
        ) -> Result<Placed, Unplaced> {
            let mut first = cx.place(&PlaceRequest {
                gpu_type: GpuTypeId(0),
                gpus: self.0,
                ..*request
            })?;
            let second = cx.place(&PlaceRequest {
                gpu_type: GpuTypeId(1),
                gpus: request.gpus - self.0,
                ..*request
            })?;
            first.gpus.extend(second.gpus);
            Ok(first)
        }
        fn spans_types(&self) -> bool {
            true
        }
    }
    static THREE_ONE: Split = Split(3);
    static TWO_TWO: Split = Split(2);

    /// FIFO's grants, each placed by the step.
    struct Stepped(Box<dyn Policy>, &'static Split);
    impl Policy for Stepped {
        fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
            let grants = self.0.allocate(input);
            grants.into_iter().map(|g| g.placed_by(self.1)).collect()
        }
    }

    let cluster = Cluster::from_nodes([("v100", 4, 12, 1.0), ("p100", 4, 12, 1.0)]);
    let trace = trace(&[(0.0, 4, 400.0)]);
    // How many GPUs of its first gang sit on each server.
    let first_gang = |step: &'static Split, placer: &mut dyn Placer| -> Vec<usize> {
        let mut sim = Simulation::new(&trace, &cluster, &Unit);
        sim.config.engine.audit = true;
        sim.config.log_changes = true;
        let fifo = policy::build("fifo", &PolicyConfig::seeded(1), &Unit).unwrap();
        let result = sim.run(&mut Stepped(fifo, step), placer, &mut |_, _| {});
        assert_eq!(result.records[0].first_start, Some(0.0));
        // It keeps its GPUs through the next round (at 360 s of its 400): started once.
        let starts: Vec<GpuSet> = (result.changes.iter())
            .filter_map(|(_, change)| match change {
                gangway_core::engine::Change::Started { gpus, .. } => Some(gpus.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(starts.len(), 1, "{starts:?}");
        let gpus = starts[0].clone();
        let mut per_server = vec![0; cluster.nodes().len()];
        for gpu in gpus {
            per_server[cluster.node_of(gpu).0 as usize] += 1;
        }
        per_server
    };
    assert_eq!(first_gang(&THREE_ONE, &mut PackingPlacer), [3, 1]);
    assert_eq!(first_gang(&TWO_TWO, &mut Even::new(PackingPlacer)), [2, 2]);
    let evened = first_gang(&THREE_ONE, &mut Even::new(PackingPlacer));
    assert!(
        evened == [4, 0] || evened == [0, 4],
        "3 + 1 is not a gang where gangs must be even: {evened:?}"
    );
}

/// Without a goodput model there is no size or batch for `ramp` to choose: it runs Gavel's packed sum
/// of normalized throughputs, re-solved as soon as a job arrives or leaves (at most once a 360 s
/// round), so it decides start for start as `max_sum_throughput_packed:realloc=360` does, and not as
/// that program at Gavel's cadence (a re-solve at most every 1,920 s).
#[test]
fn ramp_on_a_rigid_workload_runs_gavels_packed_throughput_program_every_round() {
    let cluster = Cluster::parse_spec("v100=4,k80=4", 1).unwrap();
    let jobs: Vec<(f64, u32, f64)> = (0..24)
        .map(|i| {
            (
                f64::from(i) * 400.0,
                1 + i % 2,
                2000.0 + f64::from(i % 5) * 1500.0,
            )
        })
        .collect();
    let trace = trace(&jobs);
    let starts = |name: &str| -> Vec<(Option<f64>, Option<f64>, u32)> {
        run(name, &trace, &cluster)
            .records
            .iter()
            .map(|r| (r.first_start, r.finish, r.preemptions))
            .collect()
    };
    let ramp = starts("ramp");
    assert!(
        ramp.iter().all(|(_, finish, _)| finish.is_some()),
        "{ramp:?}"
    );
    assert_eq!(ramp, starts("max_sum_throughput_packed:realloc=360"));
    assert_ne!(ramp, starts("max_sum_throughput_packed"));
}
