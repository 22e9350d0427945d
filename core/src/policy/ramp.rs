//! `ramp`: gangway's own goodput policy, for average job completion time on elastic workloads.
//!
//! It runs Sia's program (one mixed-integer program per round over each job's GPU type, count and
//! batch, by normalized goodput; [`super::sia`]) through the door any user has, [`Sia::with`], with
//! four changes found by replaying the peers' own workloads (docs/POLICIES.md, "`ramp`"):
//!
//! - **It prices the batch it runs.** Sia prices configurations with batches up to the workload's tuned
//!   batch, then runs the chosen one at the best batch up to the application's largest; `ramp` prices
//!   with that same range, so a large configuration is not undervalued.
//! - **It starts wide and grows fast**: a job may start on up to `first` GPUs (Sia: 1) and grow to
//!   `growth` times the most it has held (Sia: 2), so that a short job is not over by the time it
//!   has doubled its way up, and pays fewer restarts on the way.
//! - **It moves a job only when the move pays**: the restart factor is raised to `restarts` (a job
//!   that has restarted often pays more for the next), and any change must beat staying by `margin`
//!   (a near tie between GPU types no longer moves a job back and forth each round).
//! - **A flatter fairness power** (`p`, Sia: -0.5): a job's large speedup counts for more.
//!
//! It knows what Sia knows: no job's duration or remaining work; throughputs from the profiles, or
//! learned from the runs with `learned=1`, as `sia:learned=1`.
//!
//! **Rigid workloads** (no goodput model: each job runs on the GPUs it asked for, at the throughput
//! table's rates, as in Gavel's traces) have no batch or size to choose, and Sia's program has nothing
//! to price. There `ramp` runs Gavel's sum of normalized throughputs over jobs and packed pairs
//! ([`hetero::program`], the door Gavel's policies are made through), re-solved whenever a job arrived
//! or left, at most once per `realloc` seconds (default 360, Gavel's round; Gavel's policies wait at
//! least 1,920 s). On Gavel's continuous-single trace the earlier re-solves are what beat every Gavel
//! policy at Gavel's cadence (docs/POLICIES.md). It knows what Gavel's policies know: the table, not
//! durations. Which program runs is chosen when the policy is built, from what the registry found the
//! run offers ([`PolicyConfig::capabilities`]).

use super::hetero::{self, Objective};
use super::sia::{LEARNED, Settings, Sia};
use super::{Knob, KnobRange, Needs, Policy, PolicyConfig, PolicyEntry, Registry, RegistryError};

const POWER: Knob = Knob {
    name: "p",
    default: -0.1,
    range: KnobRange::Between(-2.0, -0.01),
    help: "elastic workloads: the fairness power on each job's normalized goodput: nearer 0, a large speedup counts for more",
};

const FIRST: Knob = Knob {
    name: "first",
    default: 8.0,
    range: KnobRange::Between(1.0, 1024.0),
    help: "elastic workloads: the most GPUs a job may start on",
};

const GROWTH: Knob = Knob {
    name: "growth",
    default: 3.0,
    range: KnobRange::Between(1.0, 16.0),
    help: "elastic workloads: the most GPUs a job may take, as a multiple of the most it has held",
};

const RESTARTS: Knob = Knob {
    name: "restarts",
    default: 3.0,
    range: KnobRange::Between(1.0, 10.0),
    help: "elastic workloads: the power of the restart factor: above 1, a job that has restarted often pays more for the next",
};

const MARGIN: Knob = Knob {
    name: "margin",
    default: 0.1,
    range: KnobRange::Between(0.0, 0.9),
    help: "elastic workloads: the fraction of goodput by which a change of configuration must beat staying",
};

const REALLOC: Knob = Knob {
    name: "realloc",
    default: 360.0,
    range: KnobRange::SECONDS,
    help: "rigid workloads: seconds between re-solves, at least (Gavel: 1,920)",
};

/// `ramp` as the run allows: Sia's program, changed as the module docs say, on elastic workloads;
/// Gavel's packed sum of normalized throughputs, re-solved early, on rigid ones.
pub fn build(config: &PolicyConfig) -> Box<dyn Policy> {
    if config.capabilities.goodput {
        Box::new(Sia::with(settings(config)))
    } else {
        hetero::program(
            Objective::SumThroughput,
            true,
            config.knob("realloc"),
            config,
        )
    }
}

/// `ramp`'s settings of Sia's program from its knobs.
pub fn settings(config: &PolicyConfig) -> Settings {
    Settings {
        power: config.knob("p"),
        left_out: Settings::SIA.left_out,
        price_full_batch_range: true,
        first_gpus: config.knob("first") as u32,
        growth: config.knob("growth"),
        restart_exponent: config.knob("restarts"),
        move_margin: config.knob("margin"),
        learns: config.knob("learned") == 1.0,
    }
}

/// Enters `ramp` (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("ramp", build)
            .summary(
                "gangway's own: on elastic workloads, Sia's program priced at the batch it runs, \
                 jobs starting wide and growing fast, moved only when the move pays; on rigid ones, \
                 Gavel's packed throughput program re-solved every round",
            )
            .knob(POWER)
            .knob(FIRST)
            .knob(GROWTH)
            .knob(RESTARTS)
            .knob(MARGIN)
            .knob(LEARNED)
            .knob(REALLOC)
            .needs(Needs::LP_SOLVER),
    )?;
    Ok(())
}
