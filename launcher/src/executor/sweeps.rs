//! What ended attempts leave: their cores given back, their processes and cgroups swept until
//! none is left, and at the first poll, what an earlier life of the executor left that no attempt
//! accounts for.

use std::time::Instant;

use super::kills::Kills;
use super::{
    Confinement, Hosts, LINGERING_SWEEP_BUDGET, LINGERING_SWEEP_EVERY, ProcessExecutor, QueueSweep,
    Run, RunRecord, marker, slurm_job_name,
};
use crate::confine;

impl ProcessExecutor {
    /// Gives back an ended attempt's cores, and ends whatever it left, without waiting: what does
    /// not go at once is swept again later ([`LINGERING_SWEEP_EVERY`]). (On Slurm, its step is
    /// cancelled by an `scancel` reaped at later polls: this runs in `poll`, on the control plane's
    /// thread.)
    pub(super) fn release(&mut self, marker: &str, confinement: &Confinement) {
        self.release_with(marker, confinement, &mut Kills::default());
    }

    /// [`ProcessExecutor::release`], its sweep one of `kills`' where that pass's scan covers it.
    pub(super) fn release_with(
        &mut self,
        marker: &str,
        confinement: &Confinement,
        kills: &mut Kills,
    ) {
        self.cores.give_back(&confinement.cores);
        if let Hosts::Slurm(_) = self.hosts {
            match crate::slurm::start_cancel(&slurm_job_name(marker)) {
                Ok(scancel) => self.unreaped.push(scancel),
                Err(error) => {
                    tracing::warn!(%error, attempt = marker, "starting scancel for an ended attempt")
                }
            }
        }
        if !Self::sweep_once(marker, confinement, kills) {
            self.linger(marker.to_owned(), confinement.clone());
        }
    }

    /// One pass at ending an attempt's processes: its cgroup's (then the cgroup itself, and the one
    /// that bounds its tasks apart) or, without one, those carrying its marker. Whether nothing of
    /// it is left.
    fn sweep_once(marker: &str, confinement: &Confinement, kills: &mut Kills) -> bool {
        kills.kill(marker, confinement) == Some(true)
            && confinement.cgroup.as_deref().is_none_or(confine::remove)
            // The pids hierarchy's cgroup empties with the other.
            && confinement.tasks.as_deref().is_none_or(confine::remove)
    }

    /// Keeps an ended attempt that a sweep just left something of, to be swept again
    /// [`LINGERING_SWEEP_EVERY`] on.
    fn linger(&mut self, marker: String, confinement: Confinement) {
        if self.lingering.is_empty() {
            self.lingering_swept_at = Some(Instant::now());
        }
        self.lingering.push((marker, confinement));
    }

    /// Sweeps what ended attempts left, every [`LINGERING_SWEEP_EVERY`], for a while: on the
    /// control plane's thread, a sweep without a cgroup may take up to a scan's patience, and users
    /// whose processes answer slowly could otherwise make a poll last as long as they have
    /// attempts lingering. Those not reached go first at the next sweep.
    pub(super) fn sweep_lingering(&mut self) {
        let began = Instant::now();
        if self.lingering.is_empty()
            || (self.lingering_swept_at).is_some_and(|at| began < at + LINGERING_SWEEP_EVERY)
        {
            return;
        }
        self.lingering_swept_at = Some(began);
        let lingering = std::mem::take(&mut self.lingering);
        // One scan of each user's processes for all of what their ended attempts left.
        let mut kills = Kills::of(lingering.iter().map(|(m, c)| (m.as_str(), c)), |_| true);
        let (mut unreached, mut left) = (Vec::new(), Vec::new());
        for (marker, confinement) in lingering {
            if began.elapsed() >= LINGERING_SWEEP_BUDGET
                && !kills.scanned_for(&marker, &confinement)
            {
                unreached.push((marker, confinement));
            } else if !Self::sweep_once(&marker, &confinement, &mut kills) {
                left.push((marker, confinement));
            }
        }
        unreached.append(&mut left);
        self.lingering = unreached;
    }

    /// The attempts it runs or still stops.
    fn attempts(&self) -> impl Iterator<Item = &Run> {
        self.runs
            .values()
            .chain(self.stopping.iter().map(|s| &s.run))
    }

    /// Ends what an earlier life of this executor left that no attempt it runs accounts for (the
    /// control plane re-adopted what it knows before the first poll): attempts whose run files
    /// remain (one stopped in the background when the daemon died, whose workers would hold GPUs
    /// the control plane gives to others), and on Slurm, steps whose `elastic-run` died with the
    /// daemon or that the journal never knew.
    pub(super) fn sweep_orphans(&mut self) {
        self.swept = true;
        self.end_unaccounted_attempts();
        if matches!(self.hosts, Hosts::Slurm(_)) {
            self.slurm_queue = QueueSweep::Due;
        }
    }

    /// Kills the processes of every attempt with a run file in the state directory that no attempt
    /// it runs or stops accounts for, and removes its files. (Its checkpoint in progress, if it
    /// was stopping, is lost: the job resumes from the last one its workers saved whole.)
    fn end_unaccounted_attempts(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.state_dir) else {
            return;
        };
        let known: Vec<String> = self
            .attempts()
            .map(|r| marker(r.launch.job, r.attempt))
            .collect();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".run")) else {
                continue;
            };
            if known.iter().any(|k| k == stem) {
                continue;
            }
            let path = entry.path();
            // The state directory is the daemon's own (private): its run files are its own.
            let record: Option<RunRecord> = std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok());
            tracing::warn!(
                attempt = stem,
                "ending an attempt an earlier life of this daemon left, which no job accounts for"
            );
            // A run file it cannot read: its processes by this executor's marker for the name.
            let (marker, confinement, files) = match record {
                // Run files of before it named the executor: the attempt's own name.
                Some(r) => (
                    r.marker.unwrap_or_else(|| stem.to_owned()),
                    r.confinement,
                    r.files,
                ),
                None => (
                    format!("{}-{stem}", self.instance),
                    Confinement::default(),
                    None,
                ),
            };
            if !Self::sweep_once(&marker, &confinement, &mut Kills::default()) {
                self.linger(marker, confinement);
            }
            if let Some(files) = files {
                files.remove();
            }
            let _ = std::fs::remove_file(&path);
        }
    }

    /// Lists Slurm's queue when due (a thread that cannot start now is tried again at the next
    /// poll), and once it is in, starts cancelling this executor's jobs there that no attempt
    /// accounts for (an attempt launched since the listing began accounts for its own), by id and
    /// whoever's they are (another user's attempts run as them), without waiting for `scancel`:
    /// the children are reaped at later polls.
    pub(super) fn cancel_unaccounted_steps(&mut self) {
        let listing = match std::mem::replace(&mut self.slurm_queue, QueueSweep::Done) {
            QueueSweep::Listing(listing) if listing.is_finished() => listing,
            QueueSweep::Due => {
                let listing = std::thread::Builder::new()
                    .name("gangway-squeue".into())
                    .spawn(crate::slurm::queue);
                self.slurm_queue = match listing {
                    Ok(listing) => QueueSweep::Listing(listing),
                    Err(error) => {
                        tracing::warn!(%error, "starting to list Slurm's queue");
                        QueueSweep::Due
                    }
                };
                return;
            }
            waiting => {
                self.slurm_queue = waiting;
                return;
            }
        };
        let jobs = match listing.join() {
            Ok(Ok(jobs)) => jobs,
            Ok(Err(error)) => {
                tracing::warn!(%error, "listing Slurm's jobs to cancel orphans");
                return;
            }
            Err(_) => {
                tracing::warn!("listing Slurm's jobs to cancel orphans panicked");
                return;
            }
        };
        let prefix = slurm_job_name(&format!("{}-", self.instance));
        let known: Vec<String> = self.attempts().map(|r| slurm_job_name(&r.marker)).collect();
        for (id, name) in jobs {
            if name.starts_with(&prefix) && !known.contains(&name) {
                tracing::warn!(slurm_job = %id, %name, "cancelling a Slurm job no attempt accounts for");
                match crate::slurm::start_cancel_id(&id) {
                    Ok(scancel) => self.unreaped.push(scancel),
                    Err(error) => tracing::warn!(%error, %name, "starting scancel for an orphan"),
                }
            }
        }
    }
}
