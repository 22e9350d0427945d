//! HiGHS through `good_lp`: the default backend, and the one the fidelity figures were measured with.
//!
//! HiGHS runs single-threaded, because the simulator already runs policies in parallel and HiGHS's thread
//! pool is global to the process.

use good_lp::solvers::highs::{HighsParallelType, HighsPresolveType, HighsSolverType};
use good_lp::{
    Expression, ProblemVariables, ResolutionError, Solution as _, SolverModel, Variable, variable,
};

use super::{Goal, Program, Relation, SolveError, Var};

pub(super) const NAME: Option<&str> = Some("highs");

/// Programs with at least this many variables are solved by the interior-point method.
const IPM_FROM_VARS: usize = 3000;

/// Solves `program` for `goal`: the value of every variable, in order.
pub(super) fn solve(program: &Program, goal: &Goal) -> Result<Vec<f64>, SolveError> {
    let mut variables = ProblemVariables::new();
    let handles: Vec<Variable> = program
        .vars
        .iter()
        .map(|v| {
            let definition = variable().bounds(v.lower..=v.upper);
            variables.add(if v.integer {
                definition.integer()
            } else {
                definition
            })
        })
        .collect();
    let expression = |terms: &[(f64, Var)]| {
        let mut expression = Expression::with_capacity(terms.len());
        for &(coefficient, var) in terms {
            expression.add_mul(coefficient, handles[var.0]);
        }
        expression
    };
    let mut model = variables
        .maximise(expression(&goal.objective))
        .using(good_lp::highs)
        .set_threads(1)
        .set_parallel(HighsParallelType::Off);
    model.set_verbose(false);
    if let Some(nodes) = goal.nodes {
        model = model.set_option("mip_max_nodes", nodes as i32);
    }
    // Dual simplex is fastest on small programs; from a few thousand variables the interior-point
    // method (with crossover to a vertex) is ten times faster on these allocation LPs.
    if goal.central {
        // Presolve would fix variables with no cost at a bound before the interior-point method starts.
        model = model
            .set_solver(HighsSolverType::Ipm)
            .set_presolve(HighsPresolveType::Off)
            .set_option("run_crossover", "off");
    } else if handles.len() >= IPM_FROM_VARS && !program.has_integers {
        model = model.set_solver(HighsSolverType::Ipm);
    }
    if program.has_integers {
        // The feasibility-jump heuristic took 40% of a goodput policy's round on its one-choice-per-job
        // programs, whose all-zero start (or the left-out choice) is already feasible.
        model = model.set_option("mip_heuristic_run_feasibility_jump", false);
    }
    for (terms, relation, rhs) in program.constraints() {
        let left = expression(terms);
        model = model.with(match relation {
            Relation::AtMost => left.leq(rhs),
            Relation::AtLeast => left.geq(rhs),
            Relation::Equal => left.eq(rhs),
        });
    }
    let solution = model.solve().map_err(|e| match e {
        ResolutionError::Infeasible => SolveError::Infeasible,
        ResolutionError::Unbounded => SolveError::Unbounded,
        other => SolveError::Solver(other.to_string()),
    })?;
    Ok(handles.iter().map(|&v| solution.value(v)).collect())
}
