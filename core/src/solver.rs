//! Linear (and mixed-integer) programs for the policies that optimize, solved by HiGHS through `good_lp`.
//!
//! Policies state their program here in plain terms (variables with bounds, linear constraints, a linear
//! objective) and never see the solver: swapping the backend, or tuning it, happens in this module only.
//! HiGHS runs single-threaded, because the simulator already runs policies in parallel and HiGHS's thread
//! pool is global to the process.

use good_lp::solvers::highs::{HighsParallelType, HighsPresolveType, HighsSolverType};
use good_lp::{
    Expression, ProblemVariables, ResolutionError, Solution as _, SolverModel, Variable, variable,
};

/// Programs with at least this many variables are solved by the interior-point method.
const IPM_FROM_VARS: usize = 3000;

/// A variable of a [`Program`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var(usize);

/// How a constraint's left side compares with its right side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    AtMost,
    AtLeast,
    Equal,
}

/// Why a program has no solution.
#[derive(Debug, thiserror::Error)]
pub enum SolveError {
    #[error("the program is infeasible")]
    Infeasible,
    #[error("the program is unbounded")]
    Unbounded,
    #[error("the solver failed: {0}")]
    Solver(String),
}

/// A linear program under construction: `maximize` solves it.
#[derive(Default)]
pub struct Program {
    variables: ProblemVariables,
    handles: Vec<Variable>,
    /// Whether any variable is integer (a MILP, which HiGHS solves by branch and bound).
    has_integers: bool,
    constraints: Vec<(Expression, Relation, f64)>,
}

/// The values a solve found, by variable.
#[derive(Clone, Debug)]
pub struct Solution {
    values: Vec<f64>,
    pub objective: f64,
}

impl Solution {
    pub fn value(&self, var: Var) -> f64 {
        self.values[var.0]
    }
}

impl Program {
    pub fn new() -> Self {
        Program::default()
    }

    /// A continuous variable in `[lower, upper]` (either may be infinite).
    pub fn var(&mut self, lower: f64, upper: f64) -> Var {
        self.add(variable().bounds(lower..=upper))
    }

    /// An integer variable in `[lower, upper]` (for MILPs).
    pub fn integer(&mut self, lower: f64, upper: f64) -> Var {
        self.has_integers = true;
        self.add(variable().integer().bounds(lower..=upper))
    }

    fn add(&mut self, definition: good_lp::VariableDefinition) -> Var {
        self.handles.push(self.variables.add(definition));
        Var(self.handles.len() - 1)
    }

    /// Adds `sum(coefficient * var) relation rhs`.
    pub fn constrain(
        &mut self,
        terms: impl IntoIterator<Item = (f64, Var)>,
        relation: Relation,
        rhs: f64,
    ) {
        let expression = self.expression(terms);
        self.constraints.push((expression, relation, rhs));
    }

    fn expression(&self, terms: impl IntoIterator<Item = (f64, Var)>) -> Expression {
        let terms = terms.into_iter();
        let mut expression = Expression::with_capacity(terms.size_hint().0);
        for (coefficient, var) in terms {
            if coefficient != 0.0 {
                expression.add_mul(coefficient, self.handles[var.0]);
            }
        }
        expression
    }

    /// Maximizes `sum(coefficient * var)` subject to the constraints.
    pub fn maximize(
        self,
        terms: impl IntoIterator<Item = (f64, Var)>,
    ) -> Result<Solution, SolveError> {
        self.solve(terms, false)
    }

    /// [`Program::maximize`], exploring at most `nodes` branch-and-bound nodes (a MILP): the best
    /// solution found by then, which may be none or not optimal.
    pub fn maximize_within(
        self,
        terms: impl IntoIterator<Item = (f64, Var)>,
        nodes: u32,
    ) -> Result<Solution, SolveError> {
        self.solve_limited(terms, false, Some(nodes))
    }

    /// A point well inside the feasible region, not at one of its vertices: the interior-point method's
    /// answer to an empty objective, without crossover. Where many allocations are optimal, this spreads
    /// the slack among them as interior-point solvers such as ECOS (Gavel's) do.
    pub fn central_point(self) -> Result<Solution, SolveError> {
        self.solve([], true)
    }

    fn solve(
        self,
        terms: impl IntoIterator<Item = (f64, Var)>,
        central: bool,
    ) -> Result<Solution, SolveError> {
        self.solve_limited(terms, central, None)
    }

    fn solve_limited(
        self,
        terms: impl IntoIterator<Item = (f64, Var)>,
        central: bool,
        nodes: Option<u32>,
    ) -> Result<Solution, SolveError> {
        let objective = self.expression(terms);
        let Program {
            variables,
            handles,
            has_integers,
            constraints,
        } = self;
        let mut model = variables
            .maximise(objective.clone())
            .using(good_lp::highs)
            .set_threads(1)
            .set_parallel(HighsParallelType::Off);
        model.set_verbose(false);
        if let Some(nodes) = nodes {
            model = model.set_option("mip_max_nodes", nodes as i32);
        }
        // Dual simplex is fastest on small programs; from a few thousand variables the interior-point
        // method (with crossover to a vertex) is ten times faster on these allocation LPs.
        if central {
            // Presolve would fix variables with no cost at a bound before the interior-point method
            // starts.
            model = model
                .set_solver(HighsSolverType::Ipm)
                .set_presolve(HighsPresolveType::Off)
                .set_option("run_crossover", "off");
        } else if handles.len() >= IPM_FROM_VARS && !has_integers {
            model = model.set_solver(HighsSolverType::Ipm);
        }
        if has_integers {
            // The feasibility-jump heuristic took 40% of a goodput policy's round on its one-choice-per-
            // job programs, whose all-zero start (or the left-out choice) is already feasible.
            model = model.set_option("mip_heuristic_run_feasibility_jump", false);
        }
        for (expression, relation, rhs) in constraints {
            model = model.with(match relation {
                Relation::AtMost => expression.leq(rhs),
                Relation::AtLeast => expression.geq(rhs),
                Relation::Equal => expression.eq(rhs),
            });
        }
        let solution = model.solve().map_err(|e| match e {
            ResolutionError::Infeasible => SolveError::Infeasible,
            ResolutionError::Unbounded => SolveError::Unbounded,
            other => SolveError::Solver(other.to_string()),
        })?;
        let values: Vec<f64> = handles.iter().map(|&v| solution.value(v)).collect();
        Ok(Solution {
            objective: solution.eval(&objective),
            values,
        })
    }
}

/// The LP solver built in, by name (`None`: none is, and the policies that need one cannot be built).
pub fn available() -> Option<&'static str> {
    Some("HiGHS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_a_small_lp() {
        // max a + 2b, a + b <= 1.5, a, b in [0, 1]: b = 1, a = 0.5.
        let mut p = Program::new();
        let a = p.var(0.0, 1.0);
        let b = p.var(0.0, 1.0);
        p.constrain([(1.0, a), (1.0, b)], Relation::AtMost, 1.5);
        let s = p.maximize([(1.0, a), (2.0, b)]).unwrap();
        assert!((s.value(a) - 0.5).abs() < 1e-9 && (s.value(b) - 1.0).abs() < 1e-9);
        assert!((s.objective - 2.5).abs() < 1e-9);
    }

    #[test]
    fn a_central_point_lies_inside_the_feasible_region_not_at_a_vertex() {
        // x + y <= 1, x, y in [0, 1]: every point of the triangle is feasible; its vertices are (0, 0),
        // (1, 0) and (0, 1), and a central point stays well away from all three sides.
        let triangle = || {
            let mut p = Program::new();
            let x = p.var(0.0, 1.0);
            let y = p.var(0.0, 1.0);
            p.constrain([(1.0, x), (1.0, y)], Relation::AtMost, 1.0);
            (p, x, y)
        };
        let (p, x, y) = triangle();
        let s = p.central_point().unwrap();
        let (cx, cy) = (s.value(x), s.value(y));
        assert!(
            cx > 0.1 && cy > 0.1 && cx + cy < 0.9,
            "central point ({cx}, {cy})"
        );
        let (p, x, y) = triangle();
        let s = p.maximize([]).unwrap();
        let on_a_side = |v: f64| v.abs() < 1e-9 || (v - 1.0).abs() < 1e-9;
        assert!(
            on_a_side(s.value(x)) || on_a_side(s.value(y)) || on_a_side(s.value(x) + s.value(y)),
            "simplex gives a vertex: ({}, {})",
            s.value(x),
            s.value(y)
        );
    }

    #[test]
    fn solves_a_small_milp_and_reports_infeasibility() {
        // max x, 2x <= 3, x integer: x = 1.
        let mut p = Program::new();
        let x = p.integer(0.0, 10.0);
        p.constrain([(2.0, x)], Relation::AtMost, 3.0);
        assert!((p.maximize([(1.0, x)]).unwrap().value(x) - 1.0).abs() < 1e-9);
        let mut q = Program::new();
        let y = q.var(0.0, 1.0);
        q.constrain([(1.0, y)], Relation::AtLeast, 2.0);
        assert!(matches!(
            q.maximize([(1.0, y)]),
            Err(SolveError::Infeasible)
        ));
    }
}
