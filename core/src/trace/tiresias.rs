//! The Tiresias simulator's job CSVs (`60_job.csv`, `tf_job.csv`): `job_id, num_gpu, submit_time, ..., duration`.

use super::JobColumns;
use super::rows::{JobIds, finish, for_each_row};
use crate::error::{InputError, Source};
use crate::job::{Job, Trace, WorkUnit};
use crate::limits;

pub(crate) fn parse(source: &Source, text: &str) -> Result<Trace, InputError> {
    let mut trace = Trace::new(source.to_string(), WorkUnit::Seconds);
    let tenant = trace.intern_tenant("default");
    let mut ids = JobIds::default();
    let mut lines = Vec::new();
    for_each_row(source, text, b',', None, |row| {
        let id = ids.take(row, "job_id")?;
        let job_type = match row.names.contains(&"model_name") {
            true => trace.intern_job_type(row.text("model_name")?),
            false => trace.intern_job_type("unknown"),
        };
        trace.jobs.push(
            Job::new(
                id,
                row.arrival("submit_time", 1.0)?,
                row.gpu_count("num_gpu")?,
                row.number_in("duration", &limits::WORK_SECONDS)?,
            )
            .with_type(job_type)
            .with_tenant(tenant),
        );
        lines.push(row.line);
        Ok(())
    })?;
    finish(
        &mut trace,
        lines,
        JobColumns {
            gpus: "num_gpu",
            work: "duration",
            job_type: "model_name",
        },
        false,
    );
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_sixty_job_format() {
        let text = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n\
            0,1,0,606,vgg19,164,30\n1,8,30,133,vgg11,147,23\n";
        let t = parse(&Source("60_job.csv".into()), text).unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(
            (t.jobs[1].gpus, t.jobs[1].arrival, t.jobs[1].total_steps),
            (8, 30.0, 147.0)
        );
        assert_eq!(t.job_type_name(t.jobs[1].job_type), "vgg11");
        let err = parse(
            &Source("60_job.csv".into()),
            &text.replace(",8,30,", ",0,30,"),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "60_job.csv:3: field `num_gpu`: a job needs at least one GPU"
        );
        let err = parse(
            &Source("60_job.csv".into()),
            &format!("{text}2,1,40,10,vgg19,10,1\n0,1,50,10,vgg19,10,1\n"),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(err, "60_job.csv:5: field `job_id`: duplicate of line 2");
    }

    /// Durations of 1e300 (or 1e23) seconds were accepted, and the job never ran.
    #[test]
    fn durations_past_any_real_job_name_their_range() {
        let text = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n\
            0,1,0,606,vgg19,164,30\n1,8,30,133,vgg11,147,23\n";
        for duration in ["1e300", "1e23", "-1"] {
            let err = parse(
                &Source("60_job.csv".into()),
                &text.replace(",147,", &format!(",{duration},")),
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.starts_with("60_job.csv:3: field `duration`: ")
                    && err.ends_with("must be at least 0 seconds and at most 1e9 seconds"),
                "{duration}: {err}"
            );
        }
        let t = parse(&Source("60_job.csv".into()), text).unwrap();
        assert_eq!(t.rows.unwrap().line_of(t.jobs[1].id), Some(3));
    }
}
