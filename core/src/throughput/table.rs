//! Gavel's throughput table: `{gpu_type: {"('<job type>', <scale factor>)": {"null": steps_per_s,
//! "('<other type>', <sf>)": [steps_per_s_self, steps_per_s_other]}}}`.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use serde_json::Value;

use super::ThroughputModel;
use crate::cluster::{Cluster, GpuTypeId};
use crate::error::{InputError, Source};
use crate::job::{Job, JobId, JobTypeId, Names, Trace, WorkUnit};
use crate::limits;

/// A job type at a scale factor, as the table keys it.
pub type TableKey = (String, u32);

/// One row of the table: the rate alone, and the rates when packed with another job on the same GPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableEntry {
    pub alone: f64,
    pub packed: BTreeMap<TableKey, (f64, f64)>,
}

/// The whole table, by GPU type name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThroughputTable {
    /// Where it was read from, for messages.
    pub source: String,
    /// By GPU type name, then by job type and scale factor: the rates in steps per second.
    pub gpu_types: BTreeMap<String, BTreeMap<TableKey, TableEntry>>,
}

fn parse_key(source: &Source, key: &str) -> Result<TableKey, InputError> {
    let bad = || {
        InputError::whole(
            source,
            format!("key `{key}` is not of the form ('<job type>', <scale factor>)"),
        )
    };
    let inner = key
        .trim()
        .strip_prefix("('")
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(bad)?;
    let (name, sf) = inner.rsplit_once("',").ok_or_else(bad)?;
    let sf = sf.trim().parse::<u32>().map_err(|_| bad())?;
    Ok((name.to_owned(), sf))
}

impl ThroughputTable {
    /// Parses the JSON text of a table. Errors name the GPU type and key.
    pub fn parse(source: &Source, text: &str) -> Result<Self, InputError> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| InputError::row(source, e.line() as u64, format!("invalid JSON: {e}")))?;
        let root = root
            .as_object()
            .ok_or_else(|| InputError::whole(source, "expected an object of GPU types"))?;
        let mut gpu_types = BTreeMap::new();
        for (gpu_type, jobs) in root {
            let jobs = jobs.as_object().ok_or_else(|| {
                InputError::whole(
                    source,
                    format!("`{gpu_type}`: expected an object of job types"),
                )
            })?;
            let mut entries = BTreeMap::new();
            for (key, row) in jobs {
                let where_ = || format!("`{gpu_type}` / `{key}`");
                let row = row.as_object().ok_or_else(|| {
                    InputError::whole(source, format!("{}: expected an object", where_()))
                })?;
                let mut entry = TableEntry::default();
                for (other, value) in row {
                    if other == "null" {
                        entry.alone = positive(value).ok_or_else(|| {
                            InputError::whole(
                                source,
                                format!(
                                    "{}: `null`: `{value}` is not a rate ({})",
                                    where_(),
                                    limits::STEPS_PER_SECOND
                                ),
                            )
                        })?;
                        continue;
                    }
                    let pair = value
                        .as_array()
                        .filter(|a| a.len() == 2)
                        .and_then(|a| Some((positive(&a[0])?, positive(&a[1])?)))
                        .ok_or_else(|| {
                            InputError::whole(
                                source,
                                format!(
                                    "{} / `{other}`: expected [rate_self, rate_other], each a rate that {}",
                                    where_(),
                                    limits::STEPS_PER_SECOND
                                ),
                            )
                        })?;
                    entry.packed.insert(parse_key(source, other)?, pair);
                }
                entries.insert(parse_key(source, key)?, entry);
            }
            gpu_types.insert(gpu_type.to_ascii_lowercase(), entries);
        }
        Ok(ThroughputTable {
            source: source.to_string(),
            gpu_types,
        })
    }

    /// Steps per second of a job type at a scale factor alone on a GPU type.
    pub fn alone(&self, gpu_type: &str, job_type: &str, scale_factor: u32) -> Option<f64> {
        self.entry(gpu_type, job_type, scale_factor)
            .map(|e| e.alone)
    }

    /// Steps per second of two jobs packed on the same GPUs: `(rate of a, rate of b)`.
    pub fn packed(&self, gpu_type: &str, a: (&str, u32), b: (&str, u32)) -> Option<(f64, f64)> {
        self.entry(gpu_type, a.0, a.1)?
            .packed
            .get(&(b.0.to_owned(), b.1))
            .copied()
    }

    /// Every scale factor the table has for a job type on a GPU type, with its rate alone (positive only).
    fn sizes<'a>(
        &'a self,
        gpu_type: &str,
        job_type: &'a str,
    ) -> impl Iterator<Item = (&'a str, u32, f64)> + 'a {
        self.gpu_types
            .get(gpu_type)
            .into_iter()
            .flat_map(|jobs| jobs.iter())
            .filter(move |((name, _), e)| name == job_type && e.alone > 0.0)
            .map(|((name, sf), e)| (name.as_str(), *sf, e.alone))
    }

    fn entry(&self, gpu_type: &str, job_type: &str, scale_factor: u32) -> Option<&TableEntry> {
        self.gpu_types
            .get(gpu_type)?
            .get(&(job_type.to_owned(), scale_factor))
    }

    /// Job types (at scale factor 1) in the table, sorted, and whether each also runs distributed.
    pub fn job_types(&self) -> Vec<(String, bool)> {
        let mut types: BTreeMap<&str, bool> = BTreeMap::new();
        for (name, sf) in self.gpu_types.values().flat_map(|jobs| jobs.keys()) {
            let distributed = types.entry(name).or_default();
            *distributed |= *sf > 1;
        }
        types.into_iter().map(|(n, d)| (n.to_owned(), d)).collect()
    }
}

/// A rate in [`limits::STEPS_PER_SECOND`].
fn positive(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| limits::STEPS_PER_SECOND.contains(*x))
}

/// [`ThroughputTable`] resolved against one trace and one cluster, for O(1) look-ups.
#[derive(Clone, Debug)]
pub struct TableModel {
    rates: FxHashMap<(JobTypeId, GpuTypeId, u32), f64>,
    /// (a's type, b's type, GPU type, gang size) -> (a's rate, b's rate) when packed.
    packed: FxHashMap<(JobTypeId, JobTypeId, GpuTypeId, u32), (f64, f64)>,
}

impl TableModel {
    /// Resolves every (job type, scale factor) of `trace` on every GPU type of `cluster`. A job that runs
    /// on none of the cluster's GPU types is an error that names it.
    pub fn new(
        table: &ThroughputTable,
        trace: &Trace,
        cluster: &Cluster,
    ) -> Result<Self, InputError> {
        let mut rates = FxHashMap::default();
        let mut checked = std::collections::HashSet::new();
        for job in &trace.jobs {
            if !checked.insert((job.job_type, job.gpus)) {
                continue;
            }
            let name = trace.job_type_name(job.job_type);
            let mut runs_somewhere = false;
            for (t, gpu_type) in cluster.gpu_types().iter().enumerate() {
                if let Some(rate) = table.alone(gpu_type, name, job.gpus).filter(|r| *r > 0.0) {
                    rates.insert((job.job_type, GpuTypeId(t as u16), job.gpus), rate);
                    runs_somewhere = true;
                }
            }
            if !runs_somewhere {
                let message = format!(
                    "no throughput for job type `{name}` at scale factor {} (job {}) on any GPU type of the cluster ({})",
                    job.gpus,
                    job.id,
                    cluster.gpu_types().join(", ")
                );
                // At the job's row when the trace came from a file: that is what to fix, or the
                // table named beside it.
                let other_sizes = cluster
                    .gpu_types()
                    .iter()
                    .any(|gpu_type| table.sizes(gpu_type, name).next().is_some());
                let at = trace.rows.as_ref().and_then(|rows| {
                    let field = match other_sizes {
                        true => rows.columns.gpus,
                        false => rows.columns.job_type,
                    };
                    Some((rows.line_of(job.id)?, field))
                });
                return Err(match at {
                    Some((line, field)) => InputError::field(
                        &Source(trace.source.clone()),
                        line,
                        field,
                        format!("{message} in {}", table.source),
                    ),
                    None => InputError::whole(&Source(table.source.clone()), message),
                });
            }
        }
        // Rates at every other gang size the table knows, for policies that resize jobs (grow-shrink).
        let job_types: std::collections::BTreeSet<JobTypeId> =
            checked.iter().map(|&(job_type, _)| job_type).collect();
        for job_type in job_types {
            let name = trace.job_type_name(job_type);
            for (t, gpu_type) in cluster.gpu_types().iter().enumerate() {
                for (_, sf, rate) in table.sizes(gpu_type, name) {
                    rates
                        .entry((job_type, GpuTypeId(t as u16), sf))
                        .or_insert(rate);
                }
            }
        }
        // Pair rates for every two job types of the trace at a gang size they share.
        let mut packed = FxHashMap::default();
        let sizes: Vec<(JobTypeId, u32)> = checked.into_iter().collect();
        for &(a, gpus) in &sizes {
            for &(b, b_gpus) in &sizes {
                if b_gpus != gpus {
                    continue;
                }
                let (a_name, b_name) = (trace.job_type_name(a), trace.job_type_name(b));
                for (t, gpu_type) in cluster.gpu_types().iter().enumerate() {
                    if let Some(pair) = table.packed(gpu_type, (a_name, gpus), (b_name, gpus)) {
                        packed.insert((a, b, GpuTypeId(t as u16), gpus), pair);
                    }
                }
            }
        }
        Ok(TableModel { rates, packed })
    }
}

impl TableModel {
    /// The model for jobs not known in advance (the live control plane): every job type the table has,
    /// at every scale factor it has, on the cluster's GPU types; with the names that number them.
    pub fn for_every_job_type(table: &ThroughputTable, cluster: &Cluster) -> (Self, Names) {
        let mut trace = Trace::new(table.source.clone(), WorkUnit::Steps);
        let keys: std::collections::BTreeSet<&TableKey> = table
            .gpu_types
            .values()
            .flat_map(|jobs| jobs.keys())
            .collect();
        let tenant = trace.intern_tenant("default");
        for (name, scale_factor) in keys {
            let job_type = trace.intern_job_type(name);
            trace.jobs.push(
                Job::new(JobId(trace.jobs.len() as u32), 0.0, *scale_factor, 1.0)
                    .with_type(job_type)
                    .with_tenant(tenant),
            );
        }
        // Keys that run on none of the cluster's types are simply absent from the model.
        trace.jobs.retain(|job| {
            let name = trace.names.job_type(job.job_type);
            cluster
                .gpu_types()
                .iter()
                .any(|t| table.alone(t, name, job.gpus).is_some_and(|r| r > 0.0))
        });
        let model = TableModel::new(table, &trace, cluster)
            .expect("every job kept runs on some GPU type of the cluster");
        (model, trace.names)
    }
}

impl ThroughputModel for TableModel {
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
        self.rates.get(&(job.job_type, gpu_type, gpus)).copied()
    }

    fn packed_steps_per_second(
        &self,
        a: &Job,
        b: &Job,
        gpu_type: GpuTypeId,
        gpus: u32,
    ) -> Option<(f64, f64)> {
        self.packed
            .get(&(a.job_type, b.job_type, gpu_type, gpus))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"{"v100": {"('LM (batch size 5)', 1)": {"null": 10.0,
        "('LM (batch size 5)', 1)": [6.0, 6.0]}, "('LM (batch size 5)', 2)": {"null": 18.0}},
        "k80": {"('LM (batch size 5)', 1)": {"null": 2.5}}}"#;

    #[test]
    fn reads_rates_and_pairs() {
        let t = ThroughputTable::parse(&Source("t.json".into()), TABLE).unwrap();
        assert_eq!(t.alone("v100", "LM (batch size 5)", 2), Some(18.0));
        assert_eq!(t.alone("k80", "LM (batch size 5)", 2), None);
        assert_eq!(
            t.packed("v100", ("LM (batch size 5)", 1), ("LM (batch size 5)", 1)),
            Some((6.0, 6.0))
        );
        assert_eq!(t.job_types(), vec![("LM (batch size 5)".to_owned(), true)]);
    }

    #[test]
    fn bad_tables_say_where() {
        let err =
            ThroughputTable::parse(&Source("t.json".into()), r#"{"v100": {"LM": {"null": 1}}}"#)
                .unwrap_err()
                .to_string();
        assert!(err.contains("t.json") && err.contains("`LM`"), "{err}");
        let err = ThroughputTable::parse(
            &Source("t.json".into()),
            r#"{"v100": {"('LM', 1)": {"null": "fast"}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`v100` / `('LM', 1)`"), "{err}");
        let err = ThroughputTable::parse(&Source("t.json".into()), "{\n\"v100\": [}")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.json:2: invalid JSON"), "{err}");
        // A rate past any real job made it finish in no time.
        let err = ThroughputTable::parse(
            &Source("t.json".into()),
            r#"{"v100": {"('LM', 1)": {"null": 1e300}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`null`: `1e+300` is not a rate (must be at least 0 steps per second and at most 1000000 steps per second)"),
            "{err}"
        );
    }

    #[test]
    fn model_resolves_trace_types_on_cluster_types() {
        let table = ThroughputTable::parse(&Source("t.json".into()), TABLE).unwrap();
        let cluster = Cluster::parse_spec("v100=2,k80=2", 1).unwrap();
        let mut trace = Trace::new("x", crate::job::WorkUnit::Steps);
        let lm = trace.intern_job_type("LM (batch size 5)");
        let tenant = trace.intern_tenant("default");
        let job = Job::new(crate::job::JobId(0), 0.0, 1, 1.0)
            .with_type(lm)
            .with_tenant(tenant);
        trace.jobs.push(job.clone());
        let model = TableModel::new(&table, &trace, &cluster).unwrap();
        assert_eq!(model.steps_per_second(&job, GpuTypeId(1), 1), Some(2.5));
        trace.jobs.push(Job { gpus: 4, ..job });
        let err = TableModel::new(&table, &trace, &cluster)
            .unwrap_err()
            .to_string();
        assert!(err.contains("scale factor 4"), "{err}");
    }
}
