//! The Philly-derived CSV (as Pollux and Gavel derived it): `timestamp,duration,num_gpus,gpu_time,cluster`.
//!
//! Arrivals are seconds since the earliest timestamp; jobs are numbered in arrival order; the virtual
//! cluster becomes the tenant.

use chrono::NaiveDateTime;

use super::JobColumns;
use super::rows::{check_arrival, finish, for_each_row};
use crate::error::{InputError, Source};
use crate::job::{Job, JobId, Trace, WorkUnit};
use crate::limits;

pub(crate) fn parse(source: &Source, text: &str) -> Result<Trace, InputError> {
    let mut trace = Trace::new(source.to_string(), WorkUnit::Seconds);
    let job_type = trace.intern_job_type("philly");
    let mut stamps = Vec::new();
    let mut lines = Vec::new();
    for_each_row(source, text, b',', None, |row| {
        let stamp = row.text("timestamp")?;
        let when = NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S").map_err(|e| {
            InputError::field(
                source,
                row.line,
                "timestamp",
                format!("`{stamp}` is not a `YYYY-MM-DD HH:MM:SS` time ({e})"),
            )
        })?;
        stamps.push((when.and_utc().timestamp(), row.line));
        let tenant = match row.names.contains(&"cluster") {
            true => trace.intern_tenant(row.text("cluster")?),
            false => trace.intern_tenant("default"),
        };
        trace.jobs.push(
            Job::new(
                JobId(0),
                0.0,
                row.gpu_count("num_gpus")?,
                row.number_in("duration", &limits::WORK_SECONDS)?,
            )
            .with_type(job_type)
            .with_tenant(tenant),
        );
        lines.push(row.line);
        Ok(())
    })?;
    let start = stamps.iter().map(|s| s.0).min().unwrap_or(0);
    for (job, &(stamp, line)) in trace.jobs.iter_mut().zip(&stamps) {
        job.arrival = (stamp - start) as f64;
        check_arrival(source, line, "timestamp", job.arrival)?;
    }
    finish(
        &mut trace,
        lines,
        JobColumns {
            gpus: "num_gpus",
            work: "duration",
            // Durations run at any GPU count: only the count can leave a job without a rate.
            job_type: "num_gpus",
        },
        true,
    );
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_relative_and_ids_follow_arrival_order() {
        let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
            2017-10-09 07:01:55,66.0,1,66.0,11cb48\n\
            2017-10-09 06:13:03,2951.0,4,11804.0,6214e9\n";
        let t = parse(&Source("p.csv".into()), text).unwrap();
        assert_eq!(t.jobs[0].arrival, 0.0);
        assert_eq!(t.jobs[1].arrival, (48 * 60 + 52) as f64);
        assert_eq!(
            (t.jobs[0].id, t.jobs[0].gpus, t.jobs[0].total_steps),
            (JobId(0), 4, 2951.0)
        );
        assert_eq!(t.tenant_name(t.jobs[0].tenant), "6214e9");
        let bad = text.replace("2017-10-09 06:13:03", "yesterday");
        let err = parse(&Source("p.csv".into()), &bad)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("p.csv:3: field `timestamp`: `yesterday`"),
            "{err}"
        );
    }

    /// Durations of 1e300 (or 1e23) seconds were accepted, and the job never ran.
    #[test]
    fn durations_past_any_real_job_name_their_range_and_ids_keep_their_lines() {
        let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
            2017-10-09 07:01:55,66.0,1,66.0,11cb48\n\
            2017-10-09 06:13:03,2951.0,4,11804.0,6214e9\n";
        for duration in ["1e300", "1e23", "NaN"] {
            let bad = text.replace("2951.0,4", &format!("{duration},4"));
            let err = parse(&Source("p.csv".into()), &bad)
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("p.csv:3: field `duration`: ")
                    && err.ends_with("must be at least 0 seconds and at most 1e9 seconds"),
                "{duration}: {err}"
            );
        }
        let err = parse(&Source("p.csv".into()), &text.replace(",4,", ",2000000,"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("p.csv:3: field `num_gpus`: 2000000 is out of range"),
            "{err}"
        );
        // Renumbered by arrival, each job keeps the line it was read from.
        let t = parse(&Source("p.csv".into()), text).unwrap();
        let rows = t.rows.as_ref().unwrap();
        assert_eq!(rows.line_of(JobId(0)), Some(3));
        assert_eq!(rows.line_of(JobId(1)), Some(2));
        assert_eq!(rows.columns.gpus, "num_gpus");
    }
}
