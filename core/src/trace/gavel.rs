//! Gavel's trace formats: the generated "continuous" CSV and the tab-separated 10- and 7-column traces.

use super::JobColumns;
use super::rows::{JobIds, Row, finish, for_each_row};
use crate::error::{InputError, Source};
use crate::job::{Job, JobId, Trace, WorkUnit};
use crate::limits;

/// Gavel's continuous CSV: arrivals are in units of the mean interarrival time, scaled by `rate` (jobs/hour).
pub(crate) fn parse_continuous(
    source: &Source,
    text: &str,
    rate: Option<f64>,
) -> Result<Trace, InputError> {
    let rate = rate.ok_or_else(|| {
        InputError::whole(
            source,
            "Gavel's continuous traces give arrivals in units: pass --rate JOBS_PER_HOUR (Gavel used 0.4 .. 6.0)",
        )
    })?;
    let rate = limits::RATE
        .check_option("--rate", rate)
        .map_err(|why| InputError::whole(source, why))?;
    let seconds_per_unit = 3600.0 / rate;
    let mut trace = Trace::new(source.to_string(), WorkUnit::Steps);
    let default_tenant = trace.intern_tenant("default");
    let mut ids = JobIds::default();
    let mut lines = Vec::new();
    for_each_row(source, text, b',', None, |row| {
        let id = ids.take(row, "job_id")?;
        let job_type = trace.intern_job_type(row.text("job_type")?);
        trace.jobs.push(
            Job::new(
                id,
                row.arrival("arrival_unit", seconds_per_unit)?,
                row.gpu_count("scale_factor")?,
                row.number_in("total_steps", &limits::STEPS)?,
            )
            .with_type(job_type)
            .with_tenant(default_tenant),
        );
        lines.push(row.line);
        Ok(())
    })?;
    finish(&mut trace, lines, COLUMNS, false);
    Ok(trace)
}

/// Where Gavel's traces keep what can keep a job from running.
const COLUMNS: JobColumns = JobColumns {
    gpus: "scale_factor",
    work: "total_steps",
    job_type: "job_type",
};

/// Column names of the tab-separated traces, in file order.
pub(crate) struct Columns(&'static [&'static str]);

impl Columns {
    pub const TEN: Columns = Columns(&[
        "job_type",
        "command",
        "working_directory",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "scale_factor",
        "priority_weight",
        "SLO",
        "arrival_time",
    ]);
    pub const SEVEN: Columns = Columns(&[
        "job_type",
        "command",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "arrival_time",
        "scale_factor",
    ]);
}

/// Gavel's tab-separated traces. Arrival times are in seconds; jobs are numbered in file order.
pub(crate) fn parse_tabbed(
    source: &Source,
    text: &str,
    columns: Columns,
) -> Result<Trace, InputError> {
    let mut trace = Trace::new(source.to_string(), WorkUnit::Steps);
    let default_tenant = trace.intern_tenant("default");
    let has_weight = columns.0.contains(&"priority_weight");
    let mut lines = Vec::new();
    for_each_row(source, text, b'\t', Some(columns.0), |row: &Row<'_>| {
        let job_type = trace.intern_job_type(row.text("job_type")?);
        let weight = if has_weight {
            row.number_in("priority_weight", &limits::WEIGHT)?
        } else {
            1.0
        };
        trace.jobs.push(
            Job::new(
                JobId(trace.jobs.len() as u32),
                row.arrival("arrival_time", 1.0)?,
                row.gpu_count("scale_factor")?,
                row.number_in("total_steps", &limits::STEPS)?,
            )
            .with_type(job_type)
            .with_weight(weight)
            .with_tenant(default_tenant),
        );
        lines.push(row.line);
        Ok(())
    })?;
    finish(&mut trace, lines, COLUMNS, false);
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTINUOUS: &str = "job_id,arrival_unit,job_type,scale_factor,duration_s_on_v100,total_steps\n\
        0,0.000000,ResNet-18 (batch size 64),1,68344.350,1646636.276\n\
        1,0.5,Transformer (batch size 16),2,31016.609,343170.469\n";

    #[test]
    fn continuous_arrivals_scale_with_rate() {
        let src = Source("c.csv".into());
        let t = parse_continuous(&src, CONTINUOUS, Some(2.0)).unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(t.jobs[1].arrival, 0.5 * 1800.0);
        assert_eq!(t.jobs[1].gpus, 2);
        assert_eq!(
            t.job_type_name(t.jobs[1].job_type),
            "Transformer (batch size 16)"
        );
        assert_eq!(t.jobs[0].total_steps, 1646636.276);
        let err = parse_continuous(&src, CONTINUOUS, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--rate"), "{err}");
    }

    #[test]
    fn bad_row_names_file_line_and_field() {
        let bad = CONTINUOUS.replace(
            "1,0.5,Transformer (batch size 16),2",
            "1,0.5,Transformer (batch size 16),two",
        );
        let err = parse_continuous(&Source("c.csv".into()), &bad, Some(1.0))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "c.csv:3: field `scale_factor`: `two` is not a valid whole number"
        );
        let twice = format!("{CONTINUOUS}0,2.0,LM (batch size 80),1,10.0,100.0\n");
        let err = parse_continuous(&Source("c.csv".into()), &twice, Some(1.0))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "c.csv:4: field `job_id`: duplicate of line 2");
        let err = parse_continuous(&Source("c.csv".into()), CONTINUOUS, Some(1e-300))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "c.csv:3: field `arrival_unit`: 0.5 units of 3.6e303 s is an arrival at 1.8e303 s"
            ),
            "{err}"
        );
        let neg = CONTINUOUS.replace("0,0.000000", "0,-1");
        let err = parse_continuous(&Source("c.csv".into()), &neg, Some(1.0))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("c.csv:2: field `arrival_unit`"), "{err}");
        let short = format!("{CONTINUOUS}2,3.0,LM\n");
        let err = parse_continuous(&Source("c.csv".into()), &short, Some(1.0))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "c.csv:4: expected 6 fields, found 3");
    }

    #[test]
    fn reads_ten_and_seven_column_traces() {
        let ten = "ResNet-50 (batch size 64)\tpython3 main.py\timagenet\t--n\t1\t2931\t4\t2\t-1.000000\t30\n\
                   LM (batch size 40)\tpython main.py\tlm\t--steps\t1\t127021\t1\t1\t-1\t0\n";
        let t = parse_tabbed(&Source("p.trace".into()), ten, Columns::TEN).unwrap();
        assert_eq!(t.jobs.len(), 2);
        // Sorted by arrival: the LM job (arrival 0) comes first but keeps its file-order id.
        assert_eq!(t.jobs[0].id, JobId(1));
        assert_eq!(
            (t.jobs[1].gpus, t.jobs[1].weight, t.jobs[1].arrival),
            (4, 2.0, 30.0)
        );
        let seven = "LM (batch size 40)\tcmd\t--steps\t1\t127021\t1511.0\t1\n";
        let t = parse_tabbed(&Source("m.trace".into()), seven, Columns::SEVEN).unwrap();
        assert_eq!(
            (t.jobs[0].arrival, t.jobs[0].total_steps),
            (1511.0, 127021.0)
        );
        let err = parse_tabbed(
            &Source("m.trace".into()),
            "LM\tcmd\t--s\t1\tmany\t0\t1\n",
            Columns::SEVEN,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "m.trace:1: field `total_steps`: `many` is not a valid number"
        );
    }

    /// Steps of 1e300 (or 1e23) were accepted: the job never ran, reported as needing more GPUs than
    /// the cluster has, and the run exited 0.
    #[test]
    fn steps_and_weights_past_any_real_job_name_their_range() {
        for steps in ["1e300", "1e23", "inf"] {
            let text = CONTINUOUS.replace("343170.469", steps);
            let err = parse_continuous(&Source("c.csv".into()), &text, Some(1.0))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("c.csv:3: field `total_steps`: ")
                    && err.ends_with(
                        "is out of range: must be at least 0 steps and at most 1e12 steps"
                    ),
                "{steps}: {err}"
            );
        }
        let ten = "LM\tpython main.py\tlm\t--steps\t1\t1e300\t1\t1\t-1\t0\n";
        let err = parse_tabbed(&Source("p.trace".into()), ten, Columns::TEN)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("p.trace:1: field `total_steps`: 1e300"),
            "{err}"
        );
        let heavy = ten.replace("\t1e300\t1\t1\t", "\t100\t1\t1e300\t");
        let err = parse_tabbed(&Source("p.trace".into()), &heavy, Columns::TEN)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("p.trace:1: field `priority_weight`: 1e300 is out of range"),
            "{err}"
        );
        let seven = "LM\tcmd\t--steps\t1\t1e23\t0\t1\n";
        let err = parse_tabbed(&Source("m.trace".into()), seven, Columns::SEVEN)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("m.trace:1: field `total_steps`: 1e23"),
            "{err}"
        );
        let err = parse_continuous(&Source("c.csv".into()), CONTINUOUS, Some(1e300))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "c.csv: --rate must be more than 0 jobs per hour and at most 1000000 jobs per hour (got 1e300)"
        );
    }
}
