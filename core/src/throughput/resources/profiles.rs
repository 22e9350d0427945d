//! Synergy's sensitivity profiles (`synergy_model_profiles.json`, MIT; Synergy, Mohan et al., OSDI'22).
//!
//! Per model, a table of training speed by CPUs per GPU (rows: 1, 2, 3, 4, 5, 6, 9, 12, 24) and GB of
//! memory per GPU (columns: 20.83, 62.5, 125, 187.5, 250), relative to the GPU-proportional share of
//! Synergy's 3-CPU, 62.5-GB-per-GPU servers (so the table reads 1.0 at 3 CPUs and 62.5 GB); the
//! model's best case (`cpus`, `mem` per GPU, the fewest that reach its top speed), `speedup` there,
//! and `iter_time`, seconds per iteration at the share.
//!
//! Synergy uses a model's one-GPU profile (`<model>_1`) whatever the job's GPU count; so does this
//! reader, which skips the others. Language models give `mem` as the Python text `int(62.5 / 3)` (20).

use std::path::Path;

use serde_json::Value;

use crate::error::{InputError, Source, read_text};
use crate::resources::Allotment;

/// CPUs per GPU of the tables' rows.
pub const CPU_AXIS: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 24.0];
/// GB of memory per GPU of the tables' columns.
pub const MEMORY_AXIS: [f64; 5] = [20.83, 62.5, 125.0, 187.5, 250.0];

/// One model's profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceProfile {
    /// The model (`alexnet`), without the `_1`.
    pub name: String,
    /// Speed per (CPU row, memory column), row-major, relative to the proportional share.
    pub speed: Vec<f64>,
    /// Its best case per GPU.
    pub best: Allotment,
    /// Its speed there.
    pub speedup: f64,
    /// Seconds per iteration at the proportional share.
    pub iter_time: f64,
}

impl ResourceProfile {
    /// Speed at a grid point.
    pub fn at(&self, row: usize, column: usize) -> f64 {
        self.speed[row * MEMORY_AXIS.len() + column]
    }

    /// Speed at `cpus` and `memory_gb` per GPU, interpolated between the grid's points (bilinear) and
    /// held at its edges.
    pub fn speed_at(&self, cpus: f64, memory_gb: f64) -> f64 {
        let (r0, r1, fr) = bracket(&CPU_AXIS, cpus);
        let (c0, c1, fc) = bracket(&MEMORY_AXIS, memory_gb);
        let low = self.at(r0, c0) * (1.0 - fc) + self.at(r0, c1) * fc;
        let high = self.at(r1, c0) * (1.0 - fc) + self.at(r1, c1) * fc;
        low * (1.0 - fr) + high * fr
    }
}

/// The grid cells around `x`: the lower and upper index and how far `x` is between them.
fn bracket(axis: &[f64], x: f64) -> (usize, usize, f64) {
    let last = axis.len() - 1;
    // NaN counts as below the grid.
    if x.is_nan() || x <= axis[0] {
        return (0, 0, 0.0);
    }
    if x >= axis[last] {
        return (last, last, 0.0);
    }
    let upper = axis.iter().position(|&a| a >= x).unwrap_or(last);
    let lower = upper - 1;
    (
        lower,
        upper,
        (x - axis[lower]) / (axis[upper] - axis[lower]),
    )
}

/// A set of profiles (`models`: 3 CPUs per GPU; Synergy's `models-4/5/6` sets keep the 3-CPU tables).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceProfiles {
    /// One per model of the set (its `NAME_1` entries), in name order.
    pub profiles: Vec<ResourceProfile>,
}

impl ResourceProfiles {
    /// Reads the `set` of profiles (`models`) from Synergy's JSON.
    pub fn load(path: &Path, set: &str) -> Result<Self, InputError> {
        Self::parse(&Source::path(path), &read_text(path)?, set)
    }

    /// Reads the `set` of profiles from Synergy's JSON `text`, read from `source` (named in
    /// errors).
    pub fn parse(source: &Source, text: &str, set: &str) -> Result<Self, InputError> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| InputError::row(source, e.line() as u64, e.to_string()))?;
        let models = root.get(set).and_then(Value::as_object).ok_or_else(|| {
            InputError::whole(source, format!("no object `{set}` of model profiles"))
        })?;
        let mut profiles = Vec::new();
        for (key, entry) in models {
            let Some(name) = key.strip_suffix("_1") else {
                continue;
            };
            let bad = |field: &str, why: String| {
                InputError::whole(source, format!("{set}.{key}: field `{field}`: {why}"))
            };
            let number = |field: &str| -> Result<f64, InputError> {
                let value = entry
                    .get(field)
                    .ok_or_else(|| bad(field, "missing".into()))?;
                let n = match value {
                    Value::Number(n) => n.as_f64(),
                    // Synergy's language models say `int(62.5 / 3)`: 20 in Python.
                    Value::String(s) if s.replace(' ', "") == "int(62.5/3)" => Some(20.0),
                    _ => None,
                };
                n.filter(|n| n.is_finite() && *n >= 0.0)
                    .ok_or_else(|| bad(field, format!("`{value}` is not a number >= 0")))
            };
            let rows = entry
                .get("tput")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("tput", "missing or not a table".into()))?;
            if rows.len() != CPU_AXIS.len() {
                return Err(bad(
                    "tput",
                    format!(
                        "{} rows; expected {} (CPUs per GPU {CPU_AXIS:?})",
                        rows.len(),
                        CPU_AXIS.len()
                    ),
                ));
            }
            let mut speed = Vec::with_capacity(CPU_AXIS.len() * MEMORY_AXIS.len());
            for (r, row) in rows.iter().enumerate() {
                let cells = row
                    .as_array()
                    .filter(|c| c.len() == MEMORY_AXIS.len())
                    .ok_or_else(|| {
                        bad(
                            "tput",
                            format!("row {r}: expected {} numbers", MEMORY_AXIS.len()),
                        )
                    })?;
                for (c, cell) in cells.iter().enumerate() {
                    let v = cell
                        .as_f64()
                        .filter(|v| v.is_finite() && *v >= 0.0)
                        .ok_or_else(|| {
                            bad(
                                "tput",
                                format!("row {r}, column {c}: `{cell}` is not a speed >= 0"),
                            )
                        })?;
                    speed.push(v);
                }
            }
            let iter_time = crate::limits::STEP_SECONDS
                .check(number("iter_time")?)
                .map_err(|why| bad("iter_time", why))?;
            let best = Allotment::new(number("cpus")?, number("mem")?);
            if best.cpus <= 0.0 || best.memory_gb <= 0.0 {
                return Err(bad("cpus", "the best case needs CPUs and memory".into()));
            }
            profiles.push(ResourceProfile {
                name: name.to_owned(),
                speed,
                best,
                speedup: number("speedup")?,
                iter_time,
            });
        }
        if profiles.is_empty() {
            return Err(InputError::whole(
                source,
                format!("`{set}` has no one-GPU profiles (`<model>_1`)"),
            ));
        }
        profiles.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ResourceProfiles { profiles })
    }

    /// The profile of a job type: its name, or its name up to the first space or `(`
    /// (`alexnet (batch 512)`), case-insensitive.
    pub fn find(&self, job_type: &str) -> Option<usize> {
        let lower = job_type.trim().to_ascii_lowercase();
        let stem = lower
            .split([' ', '('])
            .next()
            .unwrap_or_default()
            .trim_end_matches("_1");
        self.profiles.iter().position(|p| p.name == stem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"{"models": {
        "__init__": {},
        "alexnet_1": {"cpus": 12, "mem": 125.0, "speedup": 2.94, "iter_time": 0.6,
            "tput": [[0.1,0.3,0.3,0.3,0.3],[0.1,0.66,0.66,0.66,0.66],[0.1,1,1,1,1],[0.1,1.25,1.25,1.25,1.25],
                     [0.1,1.53,1.53,1.53,1.53],[0.1,1.75,1.75,1.75,1.75],[0.1,2,2,2,2],[0.1,2,2.94,2.94,2.94],
                     [0.1,2,2.94,2.94,2.94]]},
        "alexnet_2": {"cpus": 9, "tput": []},
        "gnmt_1": {"cpus": 1, "mem": "int(62.5 / 3)", "speedup": 1, "iter_time": 0.12,
            "tput": [[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],[1,1,1,1,1],
                     [1,1,1,1,1],[1,1,1,1,1]]}}}"#;

    #[test]
    fn reads_one_gpu_profiles_and_interpolates() {
        let set = ResourceProfiles::parse(&Source("p.json".into()), TEXT, "models").unwrap();
        assert_eq!(set.profiles.len(), 2);
        let alexnet = &set.profiles[set.find("alexnet").unwrap()];
        assert_eq!(alexnet.speed_at(3.0, 62.5), 1.0);
        assert_eq!(alexnet.speed_at(12.0, 125.0), 2.94);
        // Halfway between 3 and 4 CPUs at 62.5 GB; held beyond the grid.
        assert!((alexnet.speed_at(3.5, 62.5) - 1.125).abs() < 1e-12);
        assert_eq!(alexnet.speed_at(48.0, 500.0), 2.94);
        assert_eq!(alexnet.speed_at(0.5, 62.5), 0.3);
        let gnmt = &set.profiles[set.find("GNMT (batch 128)").unwrap()];
        assert_eq!(gnmt.best, Allotment::new(1.0, 20.0));
        assert_eq!(gnmt.speed_at(1.0, 20.0), 1.0);
        assert_eq!(set.find("resnet"), None);
    }

    #[test]
    fn bad_profiles_name_the_model_and_field() {
        let source = Source("p.json".into());
        let text = TEXT.replace("\"iter_time\": 0.12", "\"iter_time\": \"fast\"");
        let err = ResourceProfiles::parse(&source, &text, "models")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("p.json: models.gnmt_1: field `iter_time`"),
            "{err}"
        );
        let text = TEXT.replace("[0.1,2,2.94,2.94,2.94]]", "[0.1,2,2.94]]");
        let err = ResourceProfiles::parse(&source, &text, "models")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("models.alexnet_1: field `tput`: row 8"),
            "{err}"
        );
        let err = ResourceProfiles::parse(&source, TEXT, "models-4")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no object `models-4`"), "{err}");
        // An iteration of 1e300 s made a job's work past any real one.
        let text = TEXT.replace("\"iter_time\": 0.12", "\"iter_time\": 1e300");
        let err = ResourceProfiles::parse(&source, &text, "models")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("models.gnmt_1: field `iter_time`: 1e300 is out of range: must be more than 0 seconds and at most 86400 seconds"),
            "{err}"
        );
        let err = ResourceProfiles::parse(&source, "{", "models")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("p.json:1:"), "{err}");
    }
}
