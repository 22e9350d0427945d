//! Linear (and mixed-integer) programs for the policies that optimize.
//!
//! Policies state their program here in plain terms (variables with bounds, linear constraints, a linear
//! objective) and never see the solver: which solver runs, and how it is tuned, is this module's business
//! alone. The backend is a feature of this crate:
//!
//! - `highs` (default): HiGHS through `good_lp`, the backend the fidelity figures in docs/FIDELITY.md
//!   were measured with. It is C++, built by cmake.
//! - `microlp`: a pure-Rust simplex and branch and bound, for builds with no cmake or C++ compiler. It
//!   has no interior-point method, so [`Program::central_point`] is [`SolveError::Unsupported`] there
//!   and results differ from HiGHS's where many allocations are optimal.
//!
//! HiGHS wins when both are on. Built with neither, [`available`] is `None` and every solve returns
//! [`SolveError::NoSolver`]: callers check [`available`] before they build a policy that needs a solver.

#[cfg(feature = "highs")]
mod highs;
#[cfg(all(feature = "microlp", not(feature = "highs")))]
mod microlp;

#[cfg(feature = "highs")]
use highs as backend;
#[cfg(all(feature = "microlp", not(feature = "highs")))]
use microlp as backend;

/// The backend of a build without one: nothing can be solved.
#[cfg(not(any(feature = "highs", feature = "microlp")))]
mod backend {
    use super::{Goal, Program, SolveError};

    pub(super) const NAME: Option<&str> = None;

    pub(super) fn solve(_: &Program, _: &Goal) -> Result<Vec<f64>, SolveError> {
        Err(SolveError::NoSolver)
    }
}

/// The name of the LP/MILP solver this build carries (`"highs"` or `"microlp"`), or `None` when it was
/// built without one, where every solve fails with [`SolveError::NoSolver`].
pub fn available() -> Option<&'static str> {
    backend::NAME
}

/// A variable of a [`Program`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var(usize);

/// How a constraint's left side compares with its right side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// `left <= right`.
    AtMost,
    /// `left >= right`.
    AtLeast,
    /// `left == right`.
    Equal,
}

/// Why a program has no solution.
#[derive(Debug, thiserror::Error)]
pub enum SolveError {
    /// No point satisfies every constraint.
    #[error("the program is infeasible")]
    Infeasible,
    /// The objective grows without limit.
    #[error("the program is unbounded")]
    Unbounded,
    /// The solver gave up or failed; the message is its own.
    #[error("the solver failed: {0}")]
    Solver(String),
    /// This build's solver cannot answer this kind of question (the message says which and why).
    #[error("{0}")]
    Unsupported(&'static str),
    /// This build has no LP solver at all.
    #[error(
        "gangway-core was built without an LP solver: enable its `highs` or `microlp` feature (the \
         `gangway` crate's `lp` or `lp-pure`)"
    )]
    NoSolver,
}

/// A variable's bounds and kind.
// Read by the backend only (none in a build without one).
#[cfg_attr(not(any(feature = "highs", feature = "microlp")), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
struct VarDef {
    lower: f64,
    upper: f64,
    integer: bool,
}

/// One constraint: `terms[start..end] relation rhs`, its terms in [`Program::terms`].
// Read by the backend only (none in a build without one).
#[cfg_attr(not(any(feature = "highs", feature = "microlp")), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
struct Row {
    start: usize,
    end: usize,
    relation: Relation,
    rhs: f64,
}

/// A linear program under construction: `maximize` solves it.
///
/// It holds only numbers, whatever the backend: the backend reads it when asked to solve. Terms with a
/// zero coefficient are dropped as they are added.
#[derive(Clone, Debug, Default)]
pub struct Program {
    vars: Vec<VarDef>,
    /// Whether any variable is integer (a MILP, solved by branch and bound).
    has_integers: bool,
    /// Every constraint's terms, one after the other (one allocation, not one per constraint).
    terms: Vec<(f64, Var)>,
    rows: Vec<Row>,
}

/// What a solve is asked for.
// Read by the backend only (none in a build without one).
#[cfg_attr(not(any(feature = "highs", feature = "microlp")), allow(dead_code))]
#[derive(Clone, Debug)]
struct Goal {
    /// Maximize `sum(coefficient * var)`, without zero coefficients.
    objective: Vec<(f64, Var)>,
    /// Ignore the objective and answer a point well inside the feasible region.
    central: bool,
    /// At most this many branch-and-bound nodes (a MILP).
    nodes: Option<u32>,
}

/// The values a solve found, by variable.
#[derive(Clone, Debug)]
pub struct Solution {
    values: Vec<f64>,
    /// The objective at those values.
    pub objective: f64,
}

impl Solution {
    /// The value of `var`.
    pub fn value(&self, var: Var) -> f64 {
        self.values[var.0]
    }
}

impl Program {
    /// An empty program.
    pub fn new() -> Self {
        Program::default()
    }

    /// A continuous variable in `[lower, upper]` (either may be infinite).
    pub fn var(&mut self, lower: f64, upper: f64) -> Var {
        self.add(VarDef {
            lower,
            upper,
            integer: false,
        })
    }

    /// An integer variable in `[lower, upper]` (for MILPs).
    pub fn integer(&mut self, lower: f64, upper: f64) -> Var {
        self.has_integers = true;
        self.add(VarDef {
            lower,
            upper,
            integer: true,
        })
    }

    fn add(&mut self, definition: VarDef) -> Var {
        self.vars.push(definition);
        Var(self.vars.len() - 1)
    }

    /// Adds `sum(coefficient * var) relation rhs`.
    pub fn constrain(
        &mut self,
        terms: impl IntoIterator<Item = (f64, Var)>,
        relation: Relation,
        rhs: f64,
    ) {
        let start = self.terms.len();
        self.terms.extend(nonzero(terms));
        self.rows.push(Row {
            start,
            end: self.terms.len(),
            relation,
            rhs,
        });
    }

    /// The constraints, as `(terms, relation, rhs)`, in the order they were added.
    #[cfg_attr(not(any(feature = "highs", feature = "microlp")), allow(dead_code))]
    fn constraints(&self) -> impl Iterator<Item = (&[(f64, Var)], Relation, f64)> {
        self.rows
            .iter()
            .map(|r| (&self.terms[r.start..r.end], r.relation, r.rhs))
    }

    /// Maximizes `sum(coefficient * var)` subject to the constraints.
    pub fn maximize(
        self,
        terms: impl IntoIterator<Item = (f64, Var)>,
    ) -> Result<Solution, SolveError> {
        self.solve(terms, false, None)
    }

    /// [`Program::maximize`], exploring at most `nodes` branch-and-bound nodes (a MILP): the best
    /// solution found by then, which may be none or not optimal.
    pub fn maximize_within(
        self,
        terms: impl IntoIterator<Item = (f64, Var)>,
        nodes: u32,
    ) -> Result<Solution, SolveError> {
        self.solve(terms, false, Some(nodes))
    }

    /// A point well inside the feasible region, not at one of its vertices: the interior-point method's
    /// answer to an empty objective, without crossover. Where many allocations are optimal, this spreads
    /// the slack among them as interior-point solvers such as ECOS (Gavel's) do. A backend without an
    /// interior-point method answers [`SolveError::Unsupported`].
    pub fn central_point(self) -> Result<Solution, SolveError> {
        self.solve([], true, None)
    }

    fn solve(
        self,
        terms: impl IntoIterator<Item = (f64, Var)>,
        central: bool,
        nodes: Option<u32>,
    ) -> Result<Solution, SolveError> {
        let goal = Goal {
            objective: nonzero(terms).collect(),
            central,
            nodes,
        };
        let values = backend::solve(&self, &goal)?;
        let objective = goal.objective.iter().map(|&(c, v)| c * values[v.0]).sum();
        Ok(Solution { values, objective })
    }
}

/// The terms whose coefficient is not zero: a backend never sees a zero.
fn nonzero(terms: impl IntoIterator<Item = (f64, Var)>) -> impl Iterator<Item = (f64, Var)> {
    terms
        .into_iter()
        .filter(|&(coefficient, _)| coefficient != 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_names_the_backend_this_build_carries() {
        let expected = if cfg!(feature = "highs") {
            Some("highs")
        } else if cfg!(feature = "microlp") {
            Some("microlp")
        } else {
            None
        };
        assert_eq!(available(), expected);
    }

    /// Without a backend every entry point answers `NoSolver`, and none panics.
    #[cfg(not(any(feature = "highs", feature = "microlp")))]
    #[test]
    fn without_a_backend_every_solve_is_a_typed_error() {
        let program = || {
            let mut p = Program::new();
            let a = p.var(0.0, 1.0);
            let b = p.integer(0.0, 3.0);
            p.constrain([(1.0, a), (1.0, b)], Relation::AtMost, 1.5);
            (p, a, b)
        };
        let (p, a, b) = program();
        assert!(matches!(
            p.maximize([(1.0, a), (2.0, b)]),
            Err(SolveError::NoSolver)
        ));
        let (p, a, _) = program();
        assert!(matches!(
            p.maximize_within([(1.0, a)], 10),
            Err(SolveError::NoSolver)
        ));
        let (p, _, _) = program();
        let e = p.central_point().unwrap_err();
        assert!(matches!(e, SolveError::NoSolver));
        assert!(e.to_string().contains("without an LP solver"), "{e}");
    }

    #[cfg(any(feature = "highs", feature = "microlp"))]
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

    /// A variable named twice in one constraint counts twice (microlp itself panics on a repeat).
    #[cfg(any(feature = "highs", feature = "microlp"))]
    #[test]
    fn a_variable_repeated_in_a_constraint_counts_twice() {
        // max a, a + a <= 1 (written as two terms), a in [0, 1]: a = 0.5.
        let mut p = Program::new();
        let a = p.var(0.0, 1.0);
        let b = p.var(0.0, 1.0);
        p.constrain([(1.0, a), (0.0, b), (1.0, a)], Relation::AtMost, 1.0);
        let s = p.maximize([(1.0, a)]).unwrap();
        assert!((s.value(a) - 0.5).abs() < 1e-9, "a = {}", s.value(a));
    }

    #[cfg(feature = "highs")]
    #[test]
    fn a_central_point_lies_inside_the_feasible_region_not_at_a_vertex() {
        // x + y <= 1, x, y in [0, 1]: every point of the triangle is feasible; its vertices are (0, 0),
        // (1, 0) and (0, 1), and a central point stays well away from all three sides.
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

    /// microlp has no interior-point method: it says so instead of passing a vertex off as central.
    #[cfg(all(feature = "microlp", not(feature = "highs")))]
    #[test]
    fn microlp_refuses_a_central_point() {
        let (p, _, _) = triangle();
        assert!(matches!(p.central_point(), Err(SolveError::Unsupported(_))));
        let (p, x, y) = triangle();
        let s = p.maximize([(1.0, x), (1.0, y)]).unwrap();
        assert!((s.objective - 1.0).abs() < 1e-9);
    }

    #[cfg(any(feature = "highs", feature = "microlp"))]
    fn triangle() -> (Program, Var, Var) {
        let mut p = Program::new();
        let x = p.var(0.0, 1.0);
        let y = p.var(0.0, 1.0);
        p.constrain([(1.0, x), (1.0, y)], Relation::AtMost, 1.0);
        (p, x, y)
    }

    #[cfg(any(feature = "highs", feature = "microlp"))]
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
        // Integer bounds with no integer between them.
        let mut r = Program::new();
        let z = r.integer(0.2, 0.8);
        assert!(matches!(
            r.maximize([(1.0, z)]),
            Err(SolveError::Infeasible)
        ));
    }

    #[cfg(any(feature = "highs", feature = "microlp"))]
    #[test]
    fn a_node_limited_milp_still_answers_a_feasible_point() {
        // max sum(x_i), sum(2 x_i) <= 9 over 8 binaries: 4 of them; with few nodes, still feasible.
        let mut p = Program::new();
        let xs: Vec<Var> = (0..8).map(|_| p.integer(0.0, 1.0)).collect();
        p.constrain(xs.iter().map(|&x| (2.0, x)), Relation::AtMost, 9.0);
        let s = p.maximize_within(xs.iter().map(|&x| (1.0, x)), 5).unwrap();
        let total: f64 = xs.iter().map(|&x| s.value(x)).sum();
        assert!((-1e-9..=4.5).contains(&total), "sum {total}");
    }
}
