//! microlp: a pure-Rust simplex with branch and bound, for builds with no cmake or C++ compiler.
//!
//! It has no interior-point method, so a central point is [`SolveError::Unsupported`] (the policy that
//! asks for one takes a vertex instead), and where many allocations are optimal it answers another vertex
//! than HiGHS: results are microlp's, not the fidelity figures. The node limit is microlp's own, which
//! is deterministic, as HiGHS's is.

use std::sync::Once;

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOptions};

use super::{Goal, Program, Relation, SolveError, Var, VarDef};

pub(super) const NAME: Option<&str> = Some("microlp");

/// Solves `program` for `goal`: the value of every variable, in order.
pub(super) fn solve(program: &Program, goal: &Goal) -> Result<Vec<f64>, SolveError> {
    if goal.central {
        static SAID: Once = Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "the LP solver is microlp, which has no interior-point method: where a policy asks \
                 for a central point it takes a vertex instead, and its results differ from HiGHS's"
            );
        });
        return Err(SolveError::Unsupported(
            "microlp has no interior-point method to find a central point",
        ));
    }
    // microlp takes each variable's objective coefficient as the variable is added.
    let mut cost = vec![0.0; program.vars.len()];
    for &(coefficient, var) in &goal.objective {
        cost[var.0] += coefficient;
    }
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    let vars = program
        .vars
        .iter()
        .zip(cost)
        .map(|(definition, cost)| {
            Ok(if definition.integer {
                problem.add_integer_var(cost, integer_bounds(definition)?)
            } else {
                problem.add_var(cost, (definition.lower, definition.upper))
            })
        })
        .collect::<Result<Vec<_>, SolveError>>()?;
    let mut row = Vec::new();
    for (terms, relation, rhs) in program.constraints() {
        merge(terms, &mut row);
        let op = match relation {
            Relation::AtMost => ComparisonOp::Le,
            Relation::AtLeast => ComparisonOp::Ge,
            Relation::Equal => ComparisonOp::Eq,
        };
        problem.add_constraint(row.iter().map(|&(c, v)| (vars[v.0], c)), op, rhs);
    }
    let mut options = SolveOptions::default();
    options.node_limit = goal.nodes.map(u64::from);
    let solution = problem
        .solve_with(options)
        .map_err(|e| match e {
            microlp::Error::Infeasible => SolveError::Infeasible,
            microlp::Error::Unbounded => SolveError::Unbounded,
            other => SolveError::Solver(other.to_string()),
        })?
        .into_solution()
        .map_err(|_| {
            SolveError::Solver("the node limit was reached before any feasible solution".into())
        })?;
    // Raw values, as HiGHS gives them: callers round integers themselves.
    Ok(vars.iter().map(|&v| solution.var_value_raw(v)).collect())
}

/// An integer variable's bounds in microlp's `i32`: rounded inwards, infinite ones at `i32`'s ends; a
/// bound beyond them (or not a number) is an error, not a silent clamp.
fn integer_bounds(definition: &VarDef) -> Result<(i32, i32), SolveError> {
    let to_i32 = |bound: f64| {
        if bound == f64::INFINITY {
            Ok(i32::MAX)
        } else if bound == f64::NEG_INFINITY {
            Ok(i32::MIN)
        } else if (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&bound) {
            Ok(bound as i32)
        } else {
            Err(SolveError::Solver(format!(
                "the integer bound {bound} is outside microlp's range (32-bit integers)"
            )))
        }
    };
    let lower = to_i32(definition.lower.ceil())?;
    let upper = to_i32(definition.upper.floor())?;
    if lower > upper {
        return Err(SolveError::Infeasible);
    }
    Ok((lower, upper))
}

/// `terms` with each variable once (microlp panics on a repeated one), its coefficients summed, into
/// `row`.
fn merge(terms: &[(f64, Var)], row: &mut Vec<(f64, Var)>) {
    row.clear();
    row.extend_from_slice(terms);
    row.sort_by_key(|&(_, var)| var.0);
    row.dedup_by(|later, kept| {
        let same = later.1 == kept.1;
        if same {
            kept.0 += later.0;
        }
        same
    });
}
