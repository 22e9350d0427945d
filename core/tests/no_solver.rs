//! gangway-core built without an LP solver (`--no-default-features`): the goodput pick still solves
//! small programs (its table needs no solver), the solver says what is missing with a typed error, the registry refuses to build a policy that solves LPs (naming the policy and
//! the feature to build with), and such a policy forced past that check neither panics nor stalls the
//! simulator.
#![cfg(not(any(feature = "highs", feature = "microlp")))]

use gangway_core::cluster::{Cluster, GpuTypeId};
use gangway_core::job::{Job, JobId, Trace, WorkUnit};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::pick::{Candidate, Choices, pick};
use gangway_core::policy::{self, BuildError, Capabilities, PolicyConfig};
use gangway_core::sim::Simulation;
use gangway_core::solver::{self, SolveError};
use gangway_core::throughput::ThroughputModel;

/// One step per second on every GPU type, a little faster on the second.
struct Unit;

impl ThroughputModel for Unit {
    fn steps_per_second(&self, job: &Job, t: GpuTypeId, gpus: u32) -> Option<f64> {
        (gpus == job.gpus).then_some(1.0 + f64::from(t.0))
    }
}

#[test]
fn the_solver_is_missing_and_says_so() {
    assert_eq!(solver::available(), None);
    // Two jobs want the one GPU: a small program, which the pick's table solves without a solver.
    let one_gpu = Choices {
        options: vec![Candidate {
            gpu_type: GpuTypeId(0),
            gpus: 1,
            cost: -1.0,
        }],
        left_out: Some(0.0),
    };
    assert_eq!(
        pick(&[one_gpu.clone(), one_gpu], &[1]).unwrap(),
        [Some(0), None]
    );
    // Three jobs that each want 200 GPUs of any of three types of 300: the table would have 301^3
    // states, too many, and 9 candidates are too few to price, so only a solver can choose, and
    // there is none.
    let two_hundred = Choices {
        options: (0..3)
            .map(|t| Candidate {
                gpu_type: GpuTypeId(t),
                gpus: 200,
                cost: 0.1,
            })
            .collect(),
        left_out: Some(1.0),
    };
    let e = pick(
        &[two_hundred.clone(), two_hundred.clone(), two_hundred],
        &[300, 300, 300],
    )
    .unwrap_err();
    assert!(matches!(e, SolveError::NoSolver), "{e:?}");
    assert!(e.to_string().contains("without an LP solver"), "{e}");
}

/// Gavel's programs (`policy/hetero.rs`), each of which solves an LP every round.
const LP_POLICIES: [&str; 12] = [
    "max_min_fairness_perf",
    "finish_time_fairness_perf",
    "min_total_duration",
    "max_min_fairness_water_filling",
    "max_sum_throughput_perf",
    "max_sum_throughput_normalized_by_cost_perf",
    "max_min_fairness_packed",
    "max_min_fairness_water_filling_packed",
    "finish_time_fairness_packed",
    "min_total_duration_packed",
    "max_sum_throughput_packed",
    "max_sum_throughput_normalized_by_cost_packed",
];

/// Each LP policy of Gavel's family is refused by name, saying it needs a solver; the rest build.
#[test]
fn lp_policies_are_refused_naming_the_solver_they_need() {
    for name in LP_POLICIES {
        let Err(e) = policy::build(name, &PolicyConfig::seeded(0), &Unit) else {
            panic!("{name} was built without a solver");
        };
        assert!(
            matches!(&e, BuildError::Unmet { policy, missing } if policy == name && missing.lp_solver),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains("an LP solver"), "{e}");
    }
    for name in [
        "fifo",
        "tiresias",
        "max_min_fairness",
        "isolated",
        "gandiva",
    ] {
        assert!(
            policy::build(name, &PolicyConfig::seeded(0), &Unit).is_ok(),
            "{name}"
        );
    }
}

/// Every LP policy of Gavel's family, forced past the registry's check, runs a whole small trace
/// without a solver: no panic, every job finishes.
#[test]
fn lp_policies_forced_to_run_without_a_solver_do_not_panic() {
    let mut trace = Trace::new("scenario", WorkUnit::Steps);
    trace.intern_job_type("a");
    let tenant = trace.intern_tenant("default");
    for i in 0..12u32 {
        trace.jobs.push(Job {
            tenant,
            ..Job::new(JobId(i), f64::from(i) * 100.0, 1 + i % 2, 2000.0)
        });
    }
    let cluster = Cluster::parse_spec("v100=4,k80=4", 2).unwrap();
    for name in LP_POLICIES {
        let mut p = policy::builtin()
            .build(name, &PolicyConfig::seeded(0), &Capabilities::ALL)
            .unwrap();
        let result = Simulation::new(&trace, &cluster, &Unit).run(
            p.as_mut(),
            &mut PackingPlacer,
            &mut |_, _| {},
        );
        assert_eq!(result.summary(name, None).measured_jobs, 12, "{name}");
    }
}
