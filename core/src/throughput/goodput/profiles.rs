//! Measured profiles of deep-learning applications: step times per placement and per-replica batch on
//! each GPU type, and the gradient statistics of a training run at each batch size, epoch by epoch.
//!
//! Two layouts are read, both from the peers' published data:
//! - Pollux's (`<app>/placements.csv`, `scalability.csv`, `validation-<bsz>.csv`), measured on 4xT4
//!   nodes; it is the profile of GPU types `t4` and `aws`.
//! - Sia's (`<app>/placements-<type>.csv`, `scalability-<type>.csv`), one pair per GPU type (aws, rtx,
//!   dgx-ext, quad, azure), with the statistical-efficiency files from Pollux's folder beside it.
//!
//! An application's constants follow Pollux's simulator (Qiao et al., OSDI'21; petuum/adaptdl
//! osdi21-artifact): its initial batch size M0 is the smallest validated batch, its largest batch the
//! largest validated one, its per-replica batch range the range profiled, and its epochs the rows of the
//! validation files. Progress is counted in iterations at M0 ("scale-invariant" progress), and a job is
//! done when it has made the progress its application makes in all its epochs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{InputError, Source};
use crate::limits;
use crate::trace::rows::for_each_row;

/// One measured step: per-replica batch, seconds per step, of which seconds of synchronization.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// Per-replica batch, in samples.
    pub local_bsz: f64,
    /// Seconds per step, synchronization included.
    pub step_time: f64,
    /// Seconds of the step spent synchronizing gradients.
    pub sync_time: f64,
}

/// The step times of one application on one GPU type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TypeProfile {
    /// By canonical placement (GPUs per node, smallest rotation, as digits): steps by batch.
    pub placements: BTreeMap<u64, Vec<Step>>,
    /// (nodes, replicas) -> steps by batch, from the scalability file and the placements averaged.
    pub shapes: BTreeMap<(u32, u32), Vec<Step>>,
    /// Smallest per-replica batch profiled, in samples.
    pub min_local: u32,
    /// Largest per-replica batch profiled, in samples.
    pub max_local: u32,
}

impl TypeProfile {
    /// Samples per second of one replica on `group` GPUs of one server (1 for a data-parallel job; a
    /// pipeline's stages for a hybrid-parallel one), as Sia reckons it to scale between types: the
    /// largest batch profiled there over the longest step (0 when that placement was not profiled).
    pub fn replica_throughput(&self, group: u32) -> f64 {
        let Some(steps) = self.placements.get(&placement_id(&[group])) else {
            return 0.0;
        };
        let batch = steps.iter().map(|s| s.local_bsz).fold(0.0, f64::max);
        let step = steps.iter().map(|s| s.step_time).fold(0.0, f64::max);
        if step > 0.0 { batch / step } else { 0.0 }
    }
}

/// Gradient statistics of one epoch at one batch size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradStats {
    /// The gradient's squared norm (Pollux's `grad_sqr`).
    pub sqr: f64,
    /// The gradient's noise, its variance (Pollux's `grad_var`): the larger against `sqr`, the more
    /// progress a larger batch makes per step.
    pub var: f64,
    /// Iterations (at that batch size) done by the end of the epoch.
    pub iteration: f64,
}

/// One application's profiles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Application {
    /// Its name, the folder its profiles are in (`cifar10`, `bert`, ...).
    pub name: String,
    /// Its initial (smallest validated) batch size, M0: progress is counted in iterations at M0.
    pub init_batch: u32,
    /// Its largest validated batch size.
    pub max_batch: u32,
    /// Progress at the end of each epoch (`epoch_end[e]` ends epoch e + 1): the least any validated
    /// batch size needed.
    pub epoch_end: Vec<f64>,
    /// By validated batch size: its gradient statistics per epoch.
    pub validation: BTreeMap<u32, Vec<GradStats>>,
    /// By GPU type key (`aws`, `rtx`, ...).
    pub types: BTreeMap<String, TypeProfile>,
    /// A global batch the peers never tune, with the job kept on one replica: Pollux's simulator runs
    /// ncf so, at 32,768.
    pub fixed_batch: Option<u32>,
}

impl Application {
    /// Progress at which the job is done: the end of its last epoch.
    pub fn total_progress(&self) -> f64 {
        self.epoch_end.last().copied().unwrap_or(0.0)
    }

    /// The epoch a job at `progress` is in (0-based), and the progress at which it ends.
    pub fn epoch_at(&self, progress: f64) -> (usize, f64) {
        let e = self.epoch_end.partition_point(|&end| end <= progress);
        let e = e.min(self.epoch_end.len().saturating_sub(1));
        (e, self.epoch_end.get(e).copied().unwrap_or(f64::INFINITY))
    }

    /// Gradient statistics at global batch `batch` in `epoch`: interpolated linearly in batch size
    /// between the validated sizes around it (clamped to the validated range).
    pub fn grad_stats(&self, batch: f64, epoch: usize) -> (f64, f64) {
        let at = |b: u32| {
            let rows = &self.validation[&b];
            rows[epoch.min(rows.len() - 1)]
        };
        let lo = self.validation.range(..=batch.max(0.0) as u32).next_back();
        let hi = self.validation.range(batch.ceil().max(0.0) as u32..).next();
        match (lo, hi) {
            (Some((&l, _)), Some((&h, _))) if l != h => {
                let (a, b) = (at(l), at(h));
                let w = (batch - f64::from(l)) / f64::from(h - l);
                (a.sqr + (b.sqr - a.sqr) * w, a.var + (b.var - a.var) * w)
            }
            (Some((&b, _)), _) | (None, Some((&b, _))) => {
                let s = at(b);
                (s.sqr, s.var)
            }
            (None, None) => (1.0, 0.0),
        }
    }

    /// Progress per optimizer step at global batch `batch` in `epoch` (Pollux's gain, in iterations at
    /// M0): `(var + sqr) / (var / scale + sqr)` with `scale = batch / M0`.
    pub fn gain(&self, batch: f64, epoch: usize) -> f64 {
        let (sqr, var) = self.grad_stats(batch, epoch);
        gain(sqr, var, batch / f64::from(self.init_batch))
    }

    /// The iterations (at fixed batch `batch`) still to do after `epoch` to finish (Optimus' remaining
    /// work), interpolated in batch size like the gradient statistics.
    pub fn remaining_iterations(&self, batch: f64, epoch: usize) -> f64 {
        let last = self.epoch_end.len().saturating_sub(1);
        if epoch >= last {
            return 1.0;
        }
        let iteration = |e: usize| {
            let lo = self.validation.range(..=batch.max(0.0) as u32).next_back();
            let hi = self.validation.range(batch.ceil().max(0.0) as u32..).next();
            let at = |b: &Vec<GradStats>| b[e.min(b.len() - 1)].iteration;
            match (lo, hi) {
                (Some((&l, a)), Some((&h, b))) if l != h => {
                    let w = (batch - f64::from(l)) / f64::from(h - l);
                    at(a) + (at(b) - at(a)) * w
                }
                (Some((_, a)), _) | (None, Some((_, a))) => at(a),
                (None, None) => 0.0,
            }
        };
        (iteration(last) - iteration(epoch)).max(1.0)
    }
}

/// Pollux's statistical gain: progress (in iterations at M0) of one step at `scale` times M0.
pub fn gain(sqr: f64, var: f64, scale: f64) -> f64 {
    let denominator = var / scale + sqr;
    if denominator > 0.0 {
        (var + sqr) / denominator
    } else {
        1.0
    }
}

/// The canonical id of a placement (GPUs per node): its lexicographically smallest rotation, as digits.
/// Pollux's profiles key placements so: (4, 2) and (2, 4) are the same placement.
pub fn placement_id(placement: &[u32]) -> u64 {
    let n = placement.len();
    if n == 0 {
        return 0;
    }
    // Compared in place rather than collected: whole-server placements span up to hundreds of nodes.
    let rotation = |k: usize| placement[k..].iter().chain(&placement[..k]).copied();
    let uniform = placement.iter().all(|&g| g == placement[0]);
    let smallest = if uniform {
        0
    } else {
        (1..n).fold(0, |best, k| {
            if rotation(k).lt(rotation(best)) {
                k
            } else {
                best
            }
        })
    };
    rotation(smallest).fold(0u64, |id, g| {
        id.saturating_mul(10).saturating_add(u64::from(g))
    })
}

/// Every application's profiles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profiles {
    /// Each application, by name.
    pub apps: BTreeMap<String, Application>,
    /// Where they were read from.
    pub source: String,
    /// Sia's layout (profiles per GPU type), rather than Pollux's (one type, T4).
    pub per_type: bool,
}

/// GPU type keys that Pollux's profiles (measured on T4s, as Sia's `aws`) stand for.
pub const POLLUX_TYPES: &[&str] = &["t4", "aws"];

impl Profiles {
    /// Reads the profiles under `dir`, in either layout; Sia's takes its validation files from
    /// `validation_dir/<app>/` when its own folder has none (Pollux's `profiles/`).
    pub fn load(dir: &Path, validation_dir: Option<&Path>) -> Result<Profiles, InputError> {
        let entries = std::fs::read_dir(dir).map_err(|e| InputError::io(dir, e))?;
        let mut apps = BTreeMap::new();
        let mut folders: Vec<PathBuf> = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| InputError::io(dir, e))?.path();
            if path.is_dir() {
                folders.push(path);
            }
        }
        folders.sort();
        for folder in folders {
            let name = folder
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let app = load_app(&name, &folder, validation_dir)?;
            apps.insert(name, app);
        }
        if apps.is_empty() {
            return Err(InputError::whole(
                &Source::path(dir),
                "no application profiles (folders of placements and validation files) here",
            ));
        }
        let per_type = apps
            .values()
            .any(|a| a.types.keys().any(|k| !POLLUX_TYPES.contains(&k.as_str())));
        Ok(Profiles {
            apps,
            source: dir.display().to_string(),
            per_type,
        })
    }
}

fn read(path: &Path) -> Result<String, InputError> {
    crate::error::read_text(path)
}

fn load_app(
    name: &str,
    dir: &Path,
    validation_dir: Option<&Path>,
) -> Result<Application, InputError> {
    let mut app = Application {
        name: name.to_owned(),
        ..Application::default()
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| InputError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let has_validation = files
        .iter()
        .any(|f| file_name(f).starts_with("validation-"));
    if !has_validation && let Some(other) = validation_dir {
        let theirs = other.join(name);
        if let Ok(entries) = std::fs::read_dir(&theirs) {
            let mut more: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            more.sort();
            files.extend(
                more.into_iter()
                    .filter(|f| file_name(f).starts_with("validation-")),
            );
        }
    }
    for path in &files {
        let file = file_name(path);
        if let Some(batch) = file
            .strip_prefix("validation-")
            .and_then(|s| s.strip_suffix(".csv"))
            .and_then(|s| s.parse::<u32>().ok())
        {
            // Progress is counted at the smallest validated batch, so a batch of 0 would divide by 0.
            limits::BATCH.check(f64::from(batch)).map_err(|why| {
                InputError::whole(
                    &Source::path(path),
                    format!("the batch size its name gives, {why}"),
                )
            })?;
            app.validation.insert(batch, read_validation(path)?);
        } else if file == "placements.csv" {
            let table = read_placements(path)?;
            for key in POLLUX_TYPES {
                app.types.entry((*key).to_owned()).or_default().placements = table.clone();
            }
        } else if file == "scalability.csv" {
            let rows = read_scalability(path)?;
            for key in POLLUX_TYPES {
                app.types.entry((*key).to_owned()).or_default().shapes = rows.clone();
            }
        } else if let Some(key) = file
            .strip_prefix("placements-")
            .and_then(|s| s.strip_suffix(".csv"))
        {
            app.types.entry(key.to_owned()).or_default().placements = read_placements(path)?;
        } else if let Some(key) = file
            .strip_prefix("scalability-")
            .and_then(|s| s.strip_suffix(".csv"))
        {
            app.types.entry(key.to_owned()).or_default().shapes = read_scalability(path)?;
        }
    }
    let source = Source::path(dir);
    if app.validation.is_empty() {
        return Err(InputError::whole(
            &source,
            format!("application `{name}` has no validation-<batch>.csv files"),
        ));
    }
    if app.types.is_empty() {
        return Err(InputError::whole(
            &source,
            format!("application `{name}` has no placements files"),
        ));
    }
    app.init_batch = *app.validation.keys().next().expect("checked");
    app.max_batch = *app.validation.keys().next_back().expect("checked");
    let epochs = app.validation.values().map(Vec::len).min().unwrap_or(0);
    // A file's progress column counts the progress made by each epoch's end: the least any batch size
    // needed ends the epoch.
    let progress: Vec<Vec<f64>> = files
        .iter()
        .filter(|f| file_name(f).starts_with("validation-"))
        .map(|f| read_progress(f))
        .collect::<Result<_, _>>()?;
    app.epoch_end = (0..epochs)
        .map(|e| {
            progress
                .iter()
                .filter_map(|p| p.get(e))
                .fold(f64::INFINITY, |a, &b| a.min(b))
        })
        .collect();
    for (key, profile) in &mut app.types {
        merge_placements_into_shapes(profile);
        let batches = profile.placements.values().flatten().map(|s| s.local_bsz);
        let (lo, hi) = batches.fold((f64::INFINITY, 0.0f64), |(lo, hi), b| {
            (lo.min(b), hi.max(b))
        });
        if !lo.is_finite() {
            return Err(InputError::whole(
                &source,
                format!("application `{name}` on `{key}`: the placements file has no rows"),
            ));
        }
        profile.min_local = lo as u32;
        profile.max_local = hi as u32;
    }
    // Limits the peers set by hand where the profiles measured more than a job may use: Pollux caps
    // yolov3 at 8 per replica, and Sia deepspeech2 on RTX 2080Ti at 57.
    if name == "yolov3" {
        for key in POLLUX_TYPES {
            if let Some(p) = app.types.get_mut(*key) {
                p.max_local = p.max_local.min(8);
            }
        }
    }
    if name == "ncf" {
        app.fixed_batch = Some(32768.min(app.max_batch));
    }
    if name == "deepspeech2"
        && let Some(p) = app.types.get_mut("rtx")
    {
        p.max_local = p.max_local.min(57);
    }
    Ok(app)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn read_validation(path: &Path) -> Result<Vec<GradStats>, InputError> {
    let mut rows = Vec::new();
    for_each_row(&Source::path(path), &read(path)?, b',', None, |row| {
        rows.push(GradStats {
            sqr: row.number_in("grad_sqr", &limits::GRAD_STAT)?,
            var: row.number_in("grad_var", &limits::GRAD_STAT)?,
            iteration: row.number_in("iteration", &limits::PROGRESS)?,
        });
        Ok(())
    })?;
    at_least_one_epoch(path, rows)
}

fn read_progress(path: &Path) -> Result<Vec<f64>, InputError> {
    let mut rows = Vec::new();
    for_each_row(&Source::path(path), &read(path)?, b',', None, |row| {
        rows.push(row.number_in("progress", &limits::PROGRESS)?);
        Ok(())
    })?;
    at_least_one_epoch(path, rows)
}

/// A validation profile's rows, one per epoch: an empty one would give a job no work and no statistics.
fn at_least_one_epoch<T>(path: &Path, rows: Vec<T>) -> Result<Vec<T>, InputError> {
    if rows.is_empty() {
        return Err(InputError::whole(
            &Source::path(path),
            "a validation profile needs a row per epoch, and this one has none",
        ));
    }
    Ok(rows)
}

fn read_placements(path: &Path) -> Result<BTreeMap<u64, Vec<Step>>, InputError> {
    let mut table: BTreeMap<u64, Vec<Step>> = BTreeMap::new();
    let source = Source::path(path);
    for_each_row(&source, &read(path)?, b',', None, |row| {
        let text = row.text("placement")?;
        let digits: Option<Vec<u32>> = text.chars().map(|c| c.to_digit(10)).collect();
        let Some(digits) = digits.filter(|d| !d.is_empty() && d.iter().all(|&g| g > 0)) else {
            return Err(InputError::field(
                &source,
                row.line,
                "placement",
                format!("`{text}` is not a list of GPUs per node (digits 1-9)"),
            ));
        };
        table
            .entry(placement_id(&digits))
            .or_default()
            .push(step(row)?);
        Ok(())
    })?;
    for steps in table.values_mut() {
        steps.sort_by(|a, b| a.local_bsz.total_cmp(&b.local_bsz));
    }
    Ok(table)
}

fn read_scalability(path: &Path) -> Result<BTreeMap<(u32, u32), Vec<Step>>, InputError> {
    let mut shapes: BTreeMap<(u32, u32), Vec<Step>> = BTreeMap::new();
    for_each_row(&Source::path(path), &read(path)?, b',', None, |row| {
        let key = (row.gpu_count("num_nodes")?, row.gpu_count("num_replicas")?);
        shapes.entry(key).or_default().push(step(row)?);
        Ok(())
    })?;
    Ok(shapes)
}

/// One measured step. A step of 0 s would make every rate infinite (and every submission of the
/// application a 422), and a batch past [`limits::MAX_BATCH`] one no job ever reaches.
fn step(row: &crate::trace::rows::Row<'_>) -> Result<Step, InputError> {
    Ok(Step {
        local_bsz: row.number_in("local_bsz", &limits::BATCH)?,
        step_time: row.number_in("step_time", &limits::STEP_SECONDS)?,
        sync_time: row.number_in("sync_time", &limits::SYNC_SECONDS)?,
    })
}

/// Adds the placements, averaged per (nodes, replicas, batch), to the shapes that stand for placements
/// not measured exactly (Pollux interpolates over both).
fn merge_placements_into_shapes(profile: &mut TypeProfile) {
    /// Sums of batch, step time and sync time, and their count.
    type Sums = (f64, f64, f64, u32);
    let mut sums: BTreeMap<(u32, u32, u64), Sums> = BTreeMap::new();
    for (&id, steps) in &profile.placements {
        let digits: Vec<u32> = id
            .to_string()
            .chars()
            .filter_map(|c| c.to_digit(10))
            .collect();
        let (nodes, replicas) = (digits.len() as u32, digits.iter().sum::<u32>());
        for s in steps {
            let e = sums
                .entry((nodes, replicas, s.local_bsz.to_bits()))
                .or_insert((0.0, 0.0, 0.0, 0));
            e.0 += s.local_bsz;
            e.1 += s.step_time;
            e.2 += s.sync_time;
            e.3 += 1;
        }
    }
    for ((nodes, replicas, _), (b, st, sy, n)) in sums {
        let n = f64::from(n);
        profile
            .shapes
            .entry((nodes, replicas))
            .or_default()
            .push(Step {
                local_bsz: b / n,
                step_time: st / n,
                sync_time: sy / n,
            });
    }
    for steps in profile.shapes.values_mut() {
        steps.sort_by(|a, b| a.local_bsz.total_cmp(&b.local_bsz));
        steps.dedup_by(|a, b| a.local_bsz == b.local_bsz);
    }
}

/// Step and sync time at per-replica batch `local`, interpolated linearly between measured batches
/// (clamped to the measured range: no extrapolation).
pub fn interpolate(steps: &[Step], local: f64) -> Option<(f64, f64)> {
    let first = steps.first()?;
    let last = steps.last()?;
    if local <= first.local_bsz {
        return Some((first.step_time, first.sync_time));
    }
    if local >= last.local_bsz {
        return Some((last.step_time, last.sync_time));
    }
    let k = steps.partition_point(|s| s.local_bsz <= local);
    let (a, b) = (steps[k - 1], steps[k]);
    let w = (local - a.local_bsz) / (b.local_bsz - a.local_bsz);
    Some((
        a.step_time + (b.step_time - a.step_time) * w,
        a.sync_time + (b.sync_time - a.sync_time) * w,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_are_keyed_by_their_smallest_rotation() {
        assert_eq!(placement_id(&[4, 2]), 24);
        assert_eq!(placement_id(&[2, 4]), 24);
        assert_eq!(placement_id(&[3, 1]), 13);
        // A rotation, not a sort.
        assert_eq!(placement_id(&[1, 3, 2, 4]), 1324);
        assert_eq!(placement_id(&[2, 4, 1, 3]), 1324);
        assert_ne!(placement_id(&[1, 2, 3, 4]), 1324);
        // Equal rotations: the first smallest, as a uniform placement is its own.
        assert_eq!(placement_id(&[2, 1, 2, 1]), 1212);
        assert_eq!(placement_id(&[8; 3]), 888);
    }

    proptest::proptest! {
        /// The id is the smallest rotation's digits, for any placement.
        #[test]
        fn the_id_is_the_smallest_rotation(placement in proptest::collection::vec(1u32..9, 1..12)) {
            let smallest = (0..placement.len())
                .map(|k| [&placement[k..], &placement[..k]].concat())
                .min()
                .unwrap();
            let digits = smallest.iter().fold(0u64, |id, &g| id.saturating_mul(10).saturating_add(u64::from(g)));
            proptest::prop_assert_eq!(placement_id(&placement), digits);
        }
    }

    #[test]
    fn interpolation_is_linear_between_batches_and_clamped_outside() {
        let steps = [
            Step {
                local_bsz: 32.0,
                step_time: 0.1,
                sync_time: 0.01,
            },
            Step {
                local_bsz: 64.0,
                step_time: 0.2,
                sync_time: 0.03,
            },
        ];
        let (step, sync) = interpolate(&steps, 48.0).unwrap();
        assert!((step - 0.15).abs() < 1e-12 && (sync - 0.02).abs() < 1e-12);
        assert_eq!(interpolate(&steps, 8.0), Some((0.1, 0.01)));
        assert_eq!(interpolate(&steps, 100.0), Some((0.2, 0.03)));
    }

    #[test]
    fn a_validation_profile_without_epochs_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("validation-64.csv");
        std::fs::write(&path, "progress,iteration,metric,grad_sqr,grad_var\n").unwrap();
        let err = read_validation(&path).unwrap_err().to_string();
        assert!(
            err.contains("validation-64.csv") && err.contains("has none"),
            "{err}"
        );
        assert!(read_progress(&path).is_err());
    }

    #[test]
    fn gain_grows_with_batch_and_is_one_at_the_initial_batch() {
        assert!((gain(2.0, 3.0, 1.0) - 1.0).abs() < 1e-12);
        let g2 = gain(2.0, 3.0, 2.0);
        let g4 = gain(2.0, 3.0, 4.0);
        assert!(1.0 < g2 && g2 < g4 && g4 < 4.0, "{g2} {g4}");
    }

    /// One application's profiles in Pollux's layout, with `placements` as its placements file.
    fn app_dir(placements: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("cifar10");
        std::fs::create_dir(&app).unwrap();
        std::fs::write(
            app.join("validation-64.csv"),
            "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1.0,2.0\n",
        )
        .unwrap();
        std::fs::write(app.join("placements.csv"), placements).unwrap();
        dir
    }

    /// A step time of 0 loaded, and every submission of the application was then refused (a 422
    /// about rates); a per-replica batch of 1e20 left an elastic job waiting for ever.
    #[test]
    fn step_times_and_batches_past_any_real_step_name_their_range() {
        let good = "placement,local_bsz,step_time,sync_time\n1,64,0.1,0.0\n";
        assert!(Profiles::load(app_dir(good).path(), None).is_ok());
        for (row, says) in [
            (
                "1,64,0,0.0",
                "placements.csv:2: field `step_time`: 0 is out of range: must be more than 0 seconds and at most 86400 seconds",
            ),
            (
                "1,64,1e300,0.0",
                "placements.csv:2: field `step_time`: 1e300 is out of range",
            ),
            (
                "1,1e20,0.1,0.0",
                "placements.csv:2: field `local_bsz`: 1e20 is out of range: must be at least 1 sample and at most 16777216 samples",
            ),
            (
                "1,64,0.1,inf",
                "placements.csv:2: field `sync_time`: inf is out of range",
            ),
        ] {
            let dir = app_dir(&good.replace("1,64,0.1,0.0", row));
            let err = Profiles::load(dir.path(), None).unwrap_err().to_string();
            assert!(err.contains(says), "{row}: {err}");
        }
        // A validation file named for a batch of 0 would divide progress by 0.
        let dir = app_dir(good);
        std::fs::copy(
            dir.path().join("cifar10/validation-64.csv"),
            dir.path().join("cifar10/validation-0.csv"),
        )
        .unwrap();
        let err = Profiles::load(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("validation-0.csv: the batch size its name gives, 0 is out of range"),
            "{err}"
        );
    }

    /// A FIFO in place of a profile CSV hung `simulate --profiles` and `serve --goodput-profiles`.
    #[test]
    fn a_fifo_among_the_profiles_is_refused_without_blocking() {
        let dir = app_dir("placement,local_bsz,step_time,sync_time\n1,64,0.1,0.0\n");
        let placements = dir.path().join("cifar10/placements.csv");
        std::fs::remove_file(&placements).unwrap();
        crate::error::testing::fifo(&placements);
        // A blocking open would hang: the read is bounded in time.
        let root = dir.path().to_path_buf();
        let err = crate::error::testing::at_once(move || {
            Profiles::load(&root, None).unwrap_err().to_string()
        });
        assert_eq!(
            err,
            format!(
                "{}: is a FIFO (named pipe), not a regular file",
                placements.display()
            )
        );
    }
}
