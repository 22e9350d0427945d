//! One configuration per job, GPUs per type within capacity, at the least total cost: the program that
//! goodput policies (Sia, Pollux) solve every round, a multiple-choice knapsack on HiGHS.
//!
//! A job's options are ways to run it (a GPU type and count) with a cost each; leaving it out costs its
//! `left_out` cost, or is not allowed. The costs stay in the objective as they are, with an explicit
//! "left out" variable per job, rather than as savings over leaving each job out: savings would add a
//! large constant that hides the differences between options from the solver's relative gap.

use crate::cluster::GpuTypeId;
use crate::solver::{Program, Relation, SolveError};

/// One way to run a job: `gpus` GPUs of `gpu_type`, costing `cost`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub gpu_type: GpuTypeId,
    pub gpus: u32,
    pub cost: f64,
}

/// A job's options, and what leaving it out costs (`None`: it must get one of them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choices {
    pub options: Vec<Candidate>,
    pub left_out: Option<f64>,
}

/// The option each job gets (an index into its options), or `None` for a job left out, minimizing the
/// total cost with at most `capacity[t]` GPUs of each type `t`.
pub fn pick(jobs: &[Choices], capacity: &[u32]) -> Result<Vec<Option<usize>>, SolveError> {
    let mut program = Program::new();
    let mut objective = Vec::new();
    let mut per_type = vec![Vec::new(); capacity.len()];
    let mut vars = Vec::with_capacity(jobs.len());
    for job in jobs {
        let row: Vec<_> = job
            .options
            .iter()
            .map(|option| {
                let x = program.integer(0.0, 1.0);
                objective.push((-option.cost, x));
                if let Some(terms) = per_type.get_mut(option.gpu_type.0 as usize) {
                    terms.push((f64::from(option.gpus), x));
                }
                x
            })
            .collect();
        let mut once: Vec<_> = row.iter().map(|&x| (1.0, x)).collect();
        if let Some(cost) = job.left_out {
            let out = program.var(0.0, 1.0);
            objective.push((-cost, out));
            once.push((1.0, out));
        }
        if !once.is_empty() {
            program.constrain(once, Relation::Equal, 1.0);
        }
        vars.push(row);
    }
    for (terms, &gpus) in per_type.into_iter().zip(capacity) {
        if !terms.is_empty() {
            program.constrain(terms, Relation::AtMost, f64::from(gpus));
        }
    }
    let solution = program.maximize(objective)?;
    Ok(vars
        .iter()
        .map(|row| row.iter().position(|&x| solution.value(x) > 0.5))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(gpu_type: u16, gpus: u32, cost: f64) -> Candidate {
        Candidate {
            gpu_type: GpuTypeId(gpu_type),
            gpus,
            cost,
        }
    }

    #[test]
    fn cheapest_total_within_capacity() {
        // Four GPUs: both jobs on two beat one job on four and the other left out.
        let jobs = [
            Choices {
                options: vec![option(0, 2, 0.5), option(0, 4, 0.2)],
                left_out: Some(1.0),
            },
            Choices {
                options: vec![option(0, 2, 0.6)],
                left_out: Some(1.0),
            },
        ];
        assert_eq!(pick(&jobs, &[4]).unwrap(), [Some(0), Some(0)]);
        // With two GPUs only one runs: the one that saves more.
        assert_eq!(pick(&jobs, &[2]).unwrap(), [Some(0), None]);
    }

    #[test]
    fn a_job_that_must_run_displaces_a_cheaper_one() {
        let jobs = [
            Choices {
                options: vec![option(0, 2, 0.1)],
                left_out: Some(1.0),
            },
            Choices {
                options: vec![option(0, 2, 0.9)],
                left_out: None,
            },
        ];
        assert_eq!(pick(&jobs, &[2]).unwrap(), [None, Some(0)]);
    }

    #[test]
    fn capacity_is_per_type() {
        let jobs = [
            Choices {
                options: vec![option(0, 1, 0.1), option(1, 1, 0.5)],
                left_out: Some(1.0),
            },
            Choices {
                options: vec![option(0, 1, 0.2), option(1, 1, 0.3)],
                left_out: Some(1.0),
            },
        ];
        // One GPU of each type: job 0 gains more on type 0 (0.4 against 0.1).
        assert_eq!(pick(&jobs, &[1, 1]).unwrap(), [Some(0), Some(1)]);
    }
}
