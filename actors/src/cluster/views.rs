//! Read-only views: what the API and an embedding program read, published by the actor after each
//! round, each batch of worker events and each submission batch (one that comes while a batch of
//! changes is carried out adds only its jobs: that batch's end publishes the rest), and read
//! without asking the actor (so a read never waits behind a round). Jobs' moves go out on the event
//! stream right after the view that shows them: a client that hears of a move and reads finds it.
//!
//! Publishing costs what changed: a job's entry (its [`JobInfo`] and that as JSON) is rebuilt when
//! something of it changed, the servers' list when a lease or a GPU's service did, and the rest of
//! the active jobs a share at a time, so that a running job's progress is at most
//! [`RUNNING_SWEEP_SECONDS`] old and a waiting job's reason (how many GPUs are free) at most
//! [`WAITING_SWEEP_SECONDS`]. Entries live in a persistent map: a published view shares them with the
//! next one, so publishing copies only the map's nodes it changes (and never an entry).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use actix::prelude::*;
use bytes::Bytes;
use gangway_core::cluster::{Cluster, GpuId, NodeId};
use gangway_core::job::{JobId, Sizes};
use tokio::sync::{broadcast, watch};

use super::ClusterActor;
use super::jobs::JobHandle;
use super::messages::{
    ClusterSample, GetStats, GetViews, GpuCount, JobInfo, JobSizes, LearnedSteps, ListJobs,
    ListNodes, NodeInfo, OTHER_TENANTS, Outlook, Peek, QUEUE_SHOWN, QueueBy, QueueOrder, Refusal,
    RunsAs, ShowJob, Subscribe, Timeline,
};
use crate::job::JobEvent;
use crate::ledger::Standing;
use crate::lifecycle::Phase;
use crate::stats::StatsSnapshot;
use crate::{IdMap, IdSet};

/// Jobs per piece of a streamed job list.
pub const JOBS_PER_PIECE: usize = 256;

/// The longest a published running job's progress lags behind the actor's.
pub const RUNNING_SWEEP_SECONDS: f64 = 1.0;

/// The longest a published waiting job's reason lags behind the actor's (it changes with every
/// round's free GPUs; what makes a job wait or run is published at once).
pub const WAITING_SWEEP_SECONDS: f64 = 5.0;

/// Wall seconds between two samples of the cluster's history (`GET /history`).
pub const HISTORY_EVERY_SECONDS: f64 = 5.0;

/// The most samples the history keeps: an hour's.
pub const HISTORY_SAMPLES: usize = 720;

/// The most tenants a sample names (those holding the most GPUs); the rest are summed.
pub const HISTORY_TENANTS: usize = 8;

/// Jobs refreshed a share at a time, each at least once per `period` seconds.
struct Sweep {
    period: f64,
    left: Vec<JobId>,
}

impl Sweep {
    fn new(period: f64) -> Self {
        Sweep {
            period,
            left: Vec::new(),
        }
    }

    /// This publication's share, `elapsed` seconds after the last one, of a sweep over `jobs`
    /// (`count` of them), which starts again once done.
    fn share(
        &mut self,
        elapsed: f64,
        count: usize,
        jobs: impl FnOnce() -> Vec<JobId>,
    ) -> std::vec::Drain<'_, JobId> {
        if self.left.is_empty() {
            self.left = jobs();
        }
        let share = ((count as f64 * elapsed / self.period).ceil() as usize).min(self.left.len());
        let kept = self.left.len() - share;
        self.left.drain(kept..)
    }
}

/// A job as a view holds it: what the API shows, and the same as JSON, made once, off the actor's
/// thread (by a blocking task right after publication, or by its first reader if that comes first).
struct Entry {
    info: JobInfo,
    /// The GPUs it held over time (not in `info`: lists do not carry it).
    gpu_history: Arc<Vec<GpuCount>>,
    json: OnceLock<Bytes>,
    /// About how long its JSON will be (the entry it replaced's, set by the thread that makes the
    /// JSON, just before): the buffer it is written into is made that large at once, instead of
    /// grown (and copied) twice from serde_json's 128 bytes.
    json_capacity: AtomicUsize,
}

/// A job's JSON is about this long when no earlier entry tells (a running job's, with its placement).
const ENTRY_JSON_CAPACITY: usize = 384;

/// Entries whose JSON is worth a thread of its own: about a millisecond of serializing.
const ENTRIES_PER_JSON_THREAD: usize = 2048;

impl Entry {
    fn new(info: JobInfo, gpu_history: Arc<Vec<GpuCount>>) -> Self {
        Entry {
            info,
            gpu_history,
            json: OnceLock::new(),
            json_capacity: AtomicUsize::new(ENTRY_JSON_CAPACITY),
        }
    }

    /// Sizes its JSON's buffer after the entry it replaces, if that one's JSON was made.
    fn replaces(&self, old: &Entry) {
        if let Some(json) = old.json.get() {
            // Room for a counter or two to grow by a digit, so that it is not grown after all.
            (self.json_capacity).store(json.len() + 16, AtomicOrdering::Relaxed);
        }
    }

    fn json(&self) -> &Bytes {
        self.json.get_or_init(|| {
            let capacity = self.json_capacity.load(AtomicOrdering::Relaxed);
            let mut json = Vec::with_capacity(capacity);
            serde_json::to_writer(&mut json, &self.info).expect("a job serializes");
            Bytes::from(json)
        })
    }
}

/// An entry just published, and the one it replaced (whose JSON sizes its buffer).
type Fresh = (Arc<Entry>, Option<Arc<Entry>>);

/// Makes the JSON of entries just published, in runs of ids, highest id first in each: a reader
/// streams the list lowest id first, so the two meet once rather than one waiting behind the other
/// entry by entry. After a round that moved many jobs, the runs are shared out over several threads,
/// so that a reader arriving right after the publication finds them made (or makes few itself).
/// Sizing each buffer here rather than as the entry is published spares the actor's thread a read
/// of every replaced entry (a cache miss each, thousands after a las round).
fn make_json(fresh: &mut [Fresh]) {
    static CORES: OnceLock<usize> = OnceLock::new();
    // The publication lists them in id order already; a guard, cheap on a sorted list.
    fresh.sort_unstable_by_key(|(e, _)| e.info.id);
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let threads = (fresh.len() / ENTRIES_PER_JSON_THREAD).clamp(1, cores.min(8));
    let make = |part: &[Fresh]| {
        part.iter().rev().for_each(|(e, replaced)| {
            if let Some(old) = replaced {
                e.replaces(old);
            }
            e.json();
        })
    };
    let mut parts = fresh.chunks(fresh.len().div_ceil(threads).max(1));
    let first = parts.next().unwrap_or_default();
    std::thread::scope(|scope| {
        for part in parts {
            scope.spawn(move || make(part));
        }
        make(first);
    });
}

/// How the bytes of a publication's entries' JSON differ from the view's before: its new entries'
/// less those they replaced and those it removed (making any JSON not made yet).
fn json_bytes_changed(fresh: &[Fresh], removed: &[Arc<Entry>]) -> isize {
    let bytes = |e: &Arc<Entry>| e.json().len() as isize;
    let replaced = fresh.iter().filter_map(|(_, old)| old.as_ref());
    let added: isize = fresh.iter().map(|(e, _)| bytes(e)).sum();
    added - replaced.chain(removed).map(bytes).sum::<isize>()
}

/// Tells each published view that changed its entries the bytes of their JSON, summed
/// ([`View::json_bytes`]), from the view before's and its change, in publication order whatever
/// order the threads that count the changes finish in. The whole list's reader (`GET /jobs`, which
/// says its length first) then walks no entry to tell it: at 50,000 jobs that walk was a cache
/// miss per entry on every read of a new view.
#[derive(Default)]
struct Tally {
    /// The next publication to be told.
    next: u64,
    /// The sum told to the one before it.
    bytes: usize,
    /// Changes counted before those of publications before them.
    early: BTreeMap<u64, (isize, Arc<OnceLock<usize>>)>,
    /// It miscounted, or a publication's count was lost: it tells no more.
    stopped: bool,
}

/// The most changes a [`Tally`] holds for publications whose predecessors have not been counted: far
/// more than the threads counting at once (a count lost is reported by [`Counting`]; this is the
/// backstop).
const TALLY_EARLY: usize = 4096;

fn lock(tally: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    tally.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One publication's count, owed to the tally by the thread that makes its JSON: if that thread
/// ends without counting (it panicked), the tally hears the count is lost and stops, rather than
/// wait for it.
struct Counting {
    tally: Arc<Mutex<Tally>>,
    seq: u64,
    told: Option<Arc<OnceLock<usize>>>,
}

impl Counting {
    /// The publication's entries differ from the last one's by `change` bytes: tells it, and those
    /// after it that were waiting on it. The cells are set outside the tally's lock: a reader
    /// counting a view for itself holds that view's cell until done. A reader's count that differs
    /// from the tally's stops the tally, and the views after it are left to their readers.
    fn count(mut self, change: isize) {
        let told = self.told.take().expect("counted once");
        let ready = lock(&self.tally).counted(self.seq, change, told);
        for (told, bytes) in ready {
            if *told.get_or_init(|| bytes) != bytes {
                lock(&self.tally).stop(self.seq, "reader counted another length");
                break;
            }
        }
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        if self.told.is_some() {
            lock(&self.tally).stop(self.seq, "publication's count was lost");
        }
    }
}

impl Tally {
    /// Publication `seq`'s entries differ from the last one's by `change` bytes: the cells to tell
    /// now, with their sums (its own, and those after it that counted theirs first, once every
    /// earlier one is counted). A change that would make the sum negative (a miscount), or more
    /// than [`TALLY_EARLY`] changes waiting for one that never came, stops the telling: readers
    /// then count for themselves, rather than be told a wrong length, and nothing more is kept.
    fn counted(
        &mut self,
        seq: u64,
        change: isize,
        told: Arc<OnceLock<usize>>,
    ) -> Vec<(Arc<OnceLock<usize>>, usize)> {
        let mut ready = Vec::new();
        if self.stopped {
            return ready;
        }
        self.early.insert(seq, (change, told));
        while let Some((change, told)) = self.early.remove(&self.next) {
            let Some(bytes) = self.bytes.checked_add_signed(change) else {
                self.stop(self.next, "publication's count is wrong");
                return Vec::new();
            };
            self.bytes = bytes;
            ready.push((told, bytes));
            self.next += 1;
        }
        if self.early.len() > TALLY_EARLY {
            self.stop(self.next, "publication's count never came");
        }
        ready
    }

    fn stop(&mut self, publication: u64, why: &str) {
        tracing::error!(
            publication,
            "the job list's length is no longer told (each reader counts it): a {why}"
        );
        self.stopped = true;
        self.early.clear();
    }
}

/// Which jobs a page of the job list holds (`GET /jobs?phase=..&after=..&limit=..`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobPage {
    /// Only jobs in these phases (none: any).
    pub phases: Vec<Phase>,
    /// Only jobs after this one.
    pub after: Option<JobId>,
    /// At most this many.
    pub limit: Option<usize>,
}

/// What the control plane looked like when the actor published it.
pub struct View {
    jobs: imbl::OrdMap<JobId, Arc<Entry>>,
    nodes: Arc<Vec<Arc<NodeInfo>>>,
    stats: StatsSnapshot,
    history: Arc<Vec<ClusterSample>>,
    queue: Arc<QueueOrder>,
    /// The bytes of its entries' JSON, summed: told by the threads that make a publication's JSON
    /// ([`Tally`]), or counted by the first reader that asks before they have. Shared with the
    /// views before it while no entry changes.
    json_bytes: Arc<OnceLock<usize>>,
}

impl View {
    /// Every job the control plane knows, in id order (the most recent ended ones included).
    pub fn jobs(&self) -> impl Iterator<Item = &JobInfo> {
        self.jobs.values().map(|e| &e.info)
    }

    /// One job.
    pub fn job(&self, id: JobId) -> Option<&JobInfo> {
        self.jobs.get(&id).map(|e| &e.info)
    }

    /// The GPUs one job held over time since the control plane started (its last
    /// [`GPU_HISTORY_POINTS`](gangway_protocol::api::GPU_HISTORY_POINTS) changes).
    pub fn gpu_history(&self, id: JobId) -> Option<&[GpuCount]> {
        self.jobs.get(&id).map(|e| e.gpu_history.as_slice())
    }

    /// One job as JSON (what `GET /jobs/{id}` answers).
    pub fn job_json(&self, id: JobId) -> Option<Bytes> {
        self.jobs.get(&id).map(|e| e.json().clone())
    }

    /// Every job as a JSON array, whole.
    pub fn jobs_json(self: &Arc<Self>) -> Bytes {
        let pieces: Vec<Bytes> = Arc::clone(self).jobs_json_pieces().collect();
        Bytes::from(pieces.concat())
    }

    /// The length in bytes of [`View::jobs_json`]: as told from the view before this one and what
    /// changed since (by the threads that make the changed entries' JSON), or, if it has not been
    /// told yet, counted over every entry (making each entry's JSON that is not made yet).
    pub fn jobs_json_len(&self) -> usize {
        self.list_len(*self.json_bytes.get_or_init(|| self.entries_json_bytes()))
    }

    /// The bytes of every entry's JSON, summed, counted entry by entry.
    fn entries_json_bytes(&self) -> usize {
        self.jobs.values().map(|e| e.json().len()).sum()
    }

    /// The length of the list whose entries' JSON sums to `entries` bytes: `[`, `]` and the commas.
    fn list_len(&self, entries: usize) -> usize {
        2 + entries + self.jobs.len().saturating_sub(1)
    }

    /// [`View::jobs_json_len`] as the tally told it (`None` until it has), and as counted entry by
    /// entry.
    #[cfg(test)]
    pub(super) fn told_and_counted_json_len(&self) -> (Option<usize>, usize) {
        let told = self.json_bytes.get().map(|&bytes| self.list_len(bytes));
        (told, self.list_len(self.entries_json_bytes()))
    }

    /// Every job as a JSON array, in pieces of up to [`JOBS_PER_PIECE`] jobs each, made as they
    /// are asked for (what `GET /jobs` streams: a large list is never joined whole): `[`, the
    /// entries' own JSON in id order, comma-separated, `]`.
    pub fn jobs_json_pieces(self: Arc<Self>) -> impl Iterator<Item = Bytes> + Send {
        let mut after: Option<JobId> = None;
        let mut ended = false;
        std::iter::from_fn(move || {
            if ended {
                return None;
            }
            let entries: Vec<&Arc<Entry>> = match after {
                None => self.jobs.values().take(JOBS_PER_PIECE).collect(),
                Some(last) => (self.jobs.range((Excluded(last), Unbounded)))
                    .map(|(_, e)| e)
                    .take(JOBS_PER_PIECE)
                    .collect(),
            };
            let mut piece = Vec::with_capacity(entries.iter().map(|e| e.json().len() + 1).sum());
            match after {
                None => piece.push(b'['),
                // A list of a whole number of pieces ends with a piece of its own: `]`.
                Some(_) if !entries.is_empty() => piece.push(b','),
                Some(_) => {}
            }
            for (k, entry) in entries.iter().enumerate() {
                if k > 0 {
                    piece.push(b',');
                }
                piece.extend_from_slice(entry.json());
            }
            if entries.len() < JOBS_PER_PIECE {
                piece.push(b']');
                ended = true;
            }
            after = entries.last().map(|e| e.info.id).or(after);
            Some(Bytes::from(piece))
        })
    }

    /// A page of the job list as a JSON array: the jobs `page` selects, in id order, and the last
    /// one listed when more remain (the next page starts after it).
    pub fn jobs_page_json(&self, page: &JobPage) -> (Bytes, Option<JobId>) {
        let from = page.after.map_or(Unbounded, Excluded);
        let mut selected = (self.jobs.range((from, Unbounded)))
            .map(|(_, e)| e)
            .filter(|e| page.phases.is_empty() || page.phases.contains(&e.info.phase))
            .peekable();
        let mut out = vec![b'['];
        let mut last = None;
        let mut listed = 0;
        while listed < page.limit.unwrap_or(usize::MAX) {
            let Some(entry) = selected.next() else {
                break;
            };
            if listed > 0 {
                out.push(b',');
            }
            out.extend_from_slice(entry.json());
            last = Some(entry.info.id);
            listed += 1;
        }
        out.push(b']');
        let more = selected.peek().is_some();
        (Bytes::from(out), last.filter(|_| more))
    }

    /// Every server, its GPUs and what runs on them, in server order (each entry shared with the
    /// views before and after this one until that server changes).
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// The control plane's counters and gauges.
    pub fn stats(&self) -> &StatsSnapshot {
        &self.stats
    }

    /// The cluster over the last hour: a sample every [`HISTORY_EVERY_SECONDS`] while it changes,
    /// oldest first.
    pub fn history(&self) -> &[ClusterSample] {
        &self.history
    }

    /// The waiting jobs in the order they are to be served (at most [`RUNNING_SWEEP_SECONDS`] old).
    pub fn queue(&self) -> &QueueOrder {
        &self.queue
    }
}

/// Where the published views are read: cheap to clone, never waits on the actor.
#[derive(Clone)]
pub struct Views(watch::Receiver<Arc<View>>);

impl Views {
    /// The view published last.
    pub fn latest(&self) -> Arc<View> {
        Arc::clone(&self.0.borrow())
    }
}

/// The actor's side: the entries as last published, and what changed since.
pub(super) struct Publisher {
    sender: watch::Sender<Arc<View>>,
    /// Where jobs' moves are published, each once a view shows it.
    events: broadcast::Sender<JobEvent>,
    moves: Vec<JobEvent>,
    jobs: imbl::OrdMap<JobId, Arc<Entry>>,
    /// Each server's entry, by server index, as last published (none before the first
    /// publication).
    nodes: Arc<Vec<Arc<NodeInfo>>>,
    /// GPUs whose server's entry is stale.
    stale_gpus: Vec<GpuId>,
    /// Jobs whose entry is stale.
    dirty: IdSet<JobId>,
    /// Running and waiting jobs still to refresh in their sweeps, and when the last full
    /// publication was ([`Scope::Changed`]).
    running_sweep: Sweep,
    waiting_sweep: Sweep,
    last: Instant,
    /// The cluster's samples, and when the last was taken.
    history: Arc<Vec<ClusterSample>>,
    sampled: Option<Instant>,
    /// The waiting jobs' order, and when it was last taken.
    queue: Arc<QueueOrder>,
    queue_taken: Option<Instant>,
    /// The last view's [`View::json_bytes`], the publications that changed entries so far, and
    /// where their changes are counted.
    json_bytes: Arc<OnceLock<usize>>,
    changed: u64,
    tally: Arc<Mutex<Tally>>,
}

impl Publisher {
    pub fn new(events: broadcast::Sender<JobEvent>) -> Self {
        let empty = View {
            jobs: imbl::OrdMap::new(),
            nodes: Arc::default(),
            stats: StatsSnapshot::default(),
            history: Arc::default(),
            queue: Arc::default(),
            json_bytes: Arc::new(OnceLock::from(0)),
        };
        Publisher {
            sender: watch::channel(Arc::new(empty)).0,
            events,
            moves: Vec::new(),
            jobs: imbl::OrdMap::new(),
            nodes: Arc::default(),
            stale_gpus: Vec::new(),
            dirty: IdSet::default(),
            running_sweep: Sweep::new(RUNNING_SWEEP_SECONDS),
            waiting_sweep: Sweep::new(WAITING_SWEEP_SECONDS),
            last: Instant::now(),
            history: Arc::default(),
            sampled: None,
            queue: Arc::default(),
            queue_taken: None,
            json_bytes: Arc::new(OnceLock::from(0)),
            changed: 0,
            tally: Arc::default(),
        }
    }

    /// A reader of what this publishes.
    pub fn views(&self) -> Views {
        Views(self.sender.subscribe())
    }

    /// Job `job`'s entry is stale.
    pub fn touch(&mut self, job: JobId) {
        self.dirty.insert(job);
    }

    /// A job moved: published with the next view.
    pub fn moved(&mut self, event: JobEvent) {
        self.moves.push(event);
    }

    /// How long ago the last full view was published ([`Scope::Changed`]; a view of submissions
    /// only shows none of the moves).
    pub fn since_last(&self) -> std::time::Duration {
        self.last.elapsed()
    }

    /// The entries of the servers of `gpus` are stale (a lease, a cordon or a GPU's health
    /// changed).
    pub fn touch_gpus(&mut self, gpus: impl IntoIterator<Item = GpuId>) {
        self.stale_gpus.extend(gpus);
    }
}

/// The first `n` of `items` in `order`, sorted: found in linear time, and only they are sorted (the
/// queue shows the first thousand of tens of thousands).
fn first_in_order<T>(mut items: Vec<T>, n: usize, order: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    if items.len() > n {
        items.select_nth_unstable_by(n, &order);
        items.truncate(n);
    }
    items.sort_unstable_by(order);
    items
}

/// The GPUs each tenant holds, from what each running job holds: the [`HISTORY_TENANTS`] holding the
/// most by name (ties by name), the rest summed under [`OTHER_TENANTS`].
fn tenant_shares<'a>(held: impl Iterator<Item = (&'a str, u32)>) -> BTreeMap<String, u32> {
    let mut by_tenant: IdMap<&str, u32> = IdMap::default();
    for (tenant, gpus) in held {
        *by_tenant.entry(tenant).or_default() += gpus;
    }
    let mut held: Vec<(&str, u32)> = by_tenant.into_iter().collect();
    held.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut tenants: BTreeMap<String, u32> = (held.iter().take(HISTORY_TENANTS))
        .map(|&(t, n)| (t.to_owned(), n))
        .collect();
    let others: u32 = held.iter().skip(HISTORY_TENANTS).map(|&(_, n)| n).sum();
    if others > 0 {
        *tenants.entry(OTHER_TENANTS.to_owned()).or_default() += others;
    }
    tenants
}

/// The ids whose entries are read ahead of a publication's changes at a time: a few of the
/// persistent map's leaves (of up to 64 entries; job ids are handed out in turn, so they are dense).
const WARM_SPAN: u32 = 256;

/// A publication that changes at least one entry in this many usually copies most leaves (a las
/// round's moves are spread over the ids), and reads their entries ahead ([`warm`]); one that
/// changes fewer copies a leaf here and there, and would read many entries for nothing. Either
/// way, only the [`WARM_SPAN`] ids from a changed one are read ahead.
const WARM_DENSITY: usize = 16;

/// Reads the reference counts of `jobs`' entries in `ids`. Changing an entry of a leaf the last
/// view shares copies the leaf, which counts each of its entries once more: an atomic add on an
/// entry's count, far apart in memory, that waits for its cache line and holds up the next one.
/// Plain reads of the same counts go out together, so that the adds then find them in cache (a
/// las round at 16,384 GPUs changes some 10,000 entries, and its publication copies nearly every
/// leaf).
fn warm(jobs: &imbl::OrdMap<JobId, Arc<Entry>>, ids: std::ops::Range<JobId>) {
    for (_, entry) in jobs.range(ids) {
        std::hint::black_box(Arc::strong_count(entry));
    }
}

/// What a publication shows anew.
pub(super) enum Scope<'a> {
    /// Everything that changed since the last full publication, and the sweeps' shares: a full
    /// publication.
    Changed,
    /// Only these jobs, just submitted, so that their submitters read them once answered: the
    /// rest (the other entries, the servers, the counters, the history, the queue) is the last
    /// view's, and the moves not shown yet wait for the next full publication. For submissions
    /// that come while a batch is carried out: a full publication then would rebuild the entries
    /// of the jobs the batch moves, which its end rebuilds again.
    Submitted(&'a [JobId]),
}

impl ClusterActor {
    /// Publishes a view with what changed since the last one (see the module's doc).
    pub(super) fn publish(&mut self) {
        self.publish_view(Scope::Changed);
    }

    /// Takes the jobs a full publication at `now` rebuilds, in id order: those touched since the
    /// last one, and its shares of the sweeps over the running and the waiting jobs (which it
    /// advances).
    fn take_changed(&mut self, now: Instant) -> Vec<JobId> {
        let elapsed = now.duration_since(self.views.last).as_secs_f64();
        self.views.last = now;
        let jobs = &self.jobs;
        // In id order, so that a share's entries sit together in the persistent map: each of its
        // nodes a publication changes is copied once (the last view shares it), and a share of
        // ids in the map's hash order touched a node per entry.
        let running = |want: bool| {
            let of = move |h: &JobHandle| (h.phase() == Phase::Running) == want;
            move || {
                let mut ids: Vec<JobId> = (jobs.iter())
                    .filter(|(_, h)| of(h))
                    .map(|(&id, _)| id)
                    .collect();
                ids.sort_unstable();
                ids
            }
        };
        let (busy, idle) = (self.running, self.jobs.len() - self.running);
        let mut stale: Vec<JobId> = (self.views.running_sweep)
            .share(elapsed, busy, running(true))
            .collect();
        stale.extend((self.views.waiting_sweep).share(elapsed, idle, running(false)));
        stale.extend(self.views.dirty.drain());
        stale.sort_unstable();
        stale.dedup();
        stale
    }

    /// Takes `submitted` out of the jobs the next full publication rebuilds, in id order.
    fn take_submitted(&mut self, submitted: &[JobId]) -> Vec<JobId> {
        let mut ids = submitted.to_vec();
        ids.sort_unstable();
        ids.dedup();
        for id in &ids {
            self.views.dirty.remove(id);
        }
        ids
    }

    /// Publishes a view of what `scope` says.
    pub(super) fn publish_view(&mut self, scope: Scope) {
        // Between rounds only (the engine is away while one solves; nothing else runs then).
        if self.sched.is_none() {
            return;
        }
        let now = Instant::now();
        self.stats.counters.views_published += 1;
        let full = matches!(scope, Scope::Changed);
        let stale = match scope {
            Scope::Changed => self.take_changed(now),
            Scope::Submitted(ids) => self.take_submitted(ids),
        };
        let mut fresh = Vec::with_capacity(stale.len());
        let mut removed = Vec::new();
        let dense = stale.len() * WARM_DENSITY >= self.views.jobs.len();
        let mut warm_until = JobId(0);
        for job in stale {
            if dense && job >= warm_until {
                warm_until = JobId(job.0.saturating_add(WARM_SPAN));
                warm(&self.views.jobs, job..warm_until);
            }
            match self.info(job) {
                Some(info) => {
                    // An ended job's handle is gone: its history is the one last published.
                    let gpu_history = match self.jobs.get(&job) {
                        Some(handle) => Arc::clone(&handle.gpu_history),
                        None => (self.views.jobs.get(&job))
                            .map_or_else(Arc::default, |e| Arc::clone(&e.gpu_history)),
                    };
                    let entry = Arc::new(Entry::new(info, gpu_history));
                    let replaced = self.views.jobs.insert(job, Arc::clone(&entry));
                    fresh.push((entry, replaced));
                }
                None => removed.extend(self.views.jobs.remove(&job)),
            }
        }
        let stats = if full {
            self.refresh_nodes();
            let stats = self.stats_now();
            self.refresh_history_and_queue(now, &stats);
            stats
        } else {
            // The counters a full view showed, as its entries: now's would count moves it does
            // not show yet.
            self.views.sender.borrow().stats.clone()
        };
        let changed = !fresh.is_empty() || !removed.is_empty();
        if changed {
            self.views.json_bytes = Arc::new(OnceLock::new());
        }
        let view = View {
            jobs: self.views.jobs.clone(),
            nodes: Arc::clone(&self.views.nodes),
            stats,
            history: Arc::clone(&self.views.history),
            queue: Arc::clone(&self.views.queue),
            json_bytes: Arc::clone(&self.views.json_bytes),
        };
        let replaced = self.views.sender.send_replace(Arc::new(view));
        self.stats.counters.publish_seconds += now.elapsed().as_secs_f64();
        // On a blocking thread, while the actor goes on: the new entries' JSON is made (rather than
        // by the first reader), and the view this one replaced is dropped (when no reader holds
        // it, that frees the entries they replace: thousands after a round that moves many jobs).
        // Its entries' JSON bytes are counted there too, and told to the view. A view that rebuilt
        // no entry and removed none shares the last one's entries and their count.
        if changed {
            let (seq, told) = (self.views.changed, Arc::clone(&self.views.json_bytes));
            self.views.changed += 1;
            let counting = Counting {
                tally: Arc::clone(&self.views.tally),
                seq,
                told: Some(told),
            };
            tokio::task::spawn_blocking(move || {
                make_json(&mut fresh);
                counting.count(json_bytes_changed(&fresh, &removed));
                drop((fresh, removed, replaced));
            });
        }
        // Nobody listening is fine: the stream is for observers. A view of submissions only
        // shows none of the moves.
        if full {
            for event in self.views.moves.drain(..) {
                let _ = self.views.events.send(event);
            }
        }
    }

    /// Takes a sample of the cluster for its history, and the queue's order, when they are due.
    fn refresh_history_and_queue(&mut self, now: Instant, stats: &StatsSnapshot) {
        if (self.views.sampled)
            .is_none_or(|at| now.duration_since(at).as_secs_f64() >= HISTORY_EVERY_SECONDS)
        {
            self.views.sampled = Some(now);
            let sample = self.sample(stats);
            // Copy-on-write: readers of earlier views keep theirs.
            let history = Arc::make_mut(&mut self.views.history);
            if history.len() == HISTORY_SAMPLES {
                history.remove(0);
            }
            history.push(sample);
        }
        if (self.views.queue_taken)
            .is_none_or(|at| now.duration_since(at).as_secs_f64() >= RUNNING_SWEEP_SECONDS)
        {
            self.views.queue_taken = Some(now);
            self.views.queue = Arc::new(self.queue_order());
        }
    }

    /// The waiting jobs in the policy's order, then those its queue does not hold (paused after
    /// failed starts, out of its sight) oldest first; or all in arrival order when it keeps none.
    fn queue_order(&self) -> QueueOrder {
        let waiting = |id: &JobId| {
            (self.jobs.get(id))
                .is_some_and(|h| matches!(h.phase(), Phase::Pending | Phase::Preempted))
        };
        let arrival = |id: &JobId| (self.store.ledger.jobs.get(id)).map_or(0.0, |e| e.spec.arrival);
        let oldest_first = |among: Vec<JobId>, n: usize| {
            first_in_order(among, n, |a, b| {
                arrival(a).total_cmp(&arrival(b)).then(a.cmp(b))
            })
        };
        let policy = self.sched.as_ref().map(|s| &s.policy);
        let Some(order) = policy.and_then(|p| p.queue_order(self.jobs.len())) else {
            let jobs = oldest_first(
                self.jobs.keys().copied().filter(waiting).collect(),
                QUEUE_SHOWN,
            );
            return QueueOrder {
                by: QueueBy::Arrival,
                jobs,
            };
        };
        let mut jobs: Vec<JobId> = order
            .iter()
            .copied()
            .filter(waiting)
            .take(QUEUE_SHOWN)
            .collect();
        if jobs.len() < QUEUE_SHOWN {
            let queued: HashSet<JobId> = order.into_iter().collect();
            let unqueued = |id: &JobId| waiting(id) && !queued.contains(id);
            let rest = self.jobs.keys().copied().filter(unqueued).collect();
            jobs.extend(oldest_first(rest, QUEUE_SHOWN - jobs.len()));
        }
        QueueOrder {
            by: QueueBy::Policy,
            jobs,
        }
    }

    /// The cluster now, for its history: the GPUs each tenant holds (the largest by name).
    fn sample(&self, stats: &StatsSnapshot) -> ClusterSample {
        let held = self.jobs.iter().filter_map(|(job, handle)| {
            let (gang, entry) = (handle.gang.as_ref()?, self.store.ledger.jobs.get(job)?);
            Some((entry.spec.tenant.as_str(), gang.gpus.len() as u32))
        });
        ClusterSample {
            at: self.clock.now(),
            busy_gpus: stats.busy_gpus,
            queued_jobs: stats.queued_jobs,
            running_jobs: stats.running_jobs,
            round_latency_p50: stats.round_latency_p50,
            round_latency_p99: stats.round_latency_p99,
            tenants: tenant_shares(held),
        }
    }

    /// The counters, with the gauges as they are now.
    fn stats_now(&mut self) -> StatsSnapshot {
        let gpus = self.gpus.gpus() as u32;
        let running = self.running;
        let engine = self.engine();
        let (active, busy) = (engine.active_jobs(), engine.busy_gpus());
        // Cordons journaled on a larger cluster than this one name GPUs it does not have.
        let cordoned_only = (self.store.ledger.cordoned.iter())
            .filter(|&&g| g < gpus && !self.unhealthy.contains_key(&GpuId(g)))
            .count();
        let draining_only = self
            .gpus_draining()
            .filter(|&g| {
                !self.unhealthy.contains_key(&g) && !self.store.ledger.cordoned.contains(&g.0)
            })
            .count();
        StatsSnapshot {
            gpus_out_of_service: (self.unhealthy.len() + cordoned_only + draining_only) as u32,
            stops_in_background: self.stops_in_background() as u32,
            gpus_unwatched: self.unwatched.len() as u32,
            ..self.stats.snapshot(active, running, busy, gpus)
        }
    }

    /// Every server: its GPUs, those out of service and why, and the jobs running on it.
    pub(super) fn nodes(&self) -> Vec<NodeInfo> {
        let Some(sched) = self.sched.as_ref() else {
            return Vec::new();
        };
        let cluster = sched.engine.cluster();
        (0..cluster.nodes().len())
            .map(|n| self.node(cluster, NodeId(n as u32)))
            .collect()
    }

    /// Rebuilds the entries of the servers whose GPUs changed hands or service since the last
    /// publication (every server's, the first time): a round that moves a few jobs rebuilds a few
    /// servers' of thousands, and the published list shares the rest.
    fn refresh_nodes(&mut self) {
        let Some(sched) = self.sched.as_ref() else {
            return;
        };
        let cluster = sched.engine.cluster();
        let count = cluster.nodes().len();
        let mut stale: Vec<u32> = if self.views.nodes.len() == count {
            let gpus = self.views.stale_gpus.iter();
            gpus.map(|&g| cluster.node_of(g).0).collect()
        } else {
            (0..count as u32).collect()
        };
        self.views.stale_gpus.clear();
        if stale.is_empty() {
            return;
        }
        stale.sort_unstable();
        stale.dedup();
        let fresh: Vec<(usize, NodeInfo)> = (stale.iter())
            .map(|&n| (n as usize, self.node(cluster, NodeId(n))))
            .collect();
        let mut nodes = Vec::clone(&self.views.nodes);
        for (n, info) in fresh {
            match nodes.get_mut(n) {
                Some(entry) => *entry = Arc::new(info),
                None => nodes.push(Arc::new(info)),
            }
        }
        self.views.nodes = Arc::new(nodes);
    }

    /// Server `n`: its GPUs, those out of service and why, those whose health is no longer
    /// checked, and the jobs holding them (both partners of a packed pair), as the ledger has them.
    fn node(&self, cluster: &Cluster, n: NodeId) -> NodeInfo {
        let gpus: Vec<u32> = cluster.gpus_of(n).map(|g| g.0).collect();
        let holders =
            |g: u32| (self.store.ledger.holders.get(&g)).map_or(&[][..], |h| h.as_slice());
        let out_of_service: Vec<(u32, String)> = gpus
            .iter()
            .filter_map(|&g| Some((g, self.out_of_service(GpuId(g))?.into_owned())))
            .collect();
        let unwatched: Vec<(u32, String)> = gpus
            .iter()
            .filter_map(|&g| Some((g, self.unwatched.get(&GpuId(g))?.clone())))
            .collect();
        let mut jobs: Vec<JobId> = gpus.iter().flat_map(|&g| holders(g)).copied().collect();
        jobs.sort_unstable();
        jobs.dedup();
        let free = gpus
            .iter()
            .filter(|&&g| holders(g).is_empty() && !out_of_service.iter().any(|(o, _)| *o == g))
            .count() as u32;
        let node = cluster.node(n);
        NodeInfo {
            name: (self.settings.node_names.get(n.0 as usize).cloned())
                .unwrap_or_else(|| format!("server-{}", n.0)),
            gpu_type: cluster.gpu_types()[node.gpu_type.0 as usize].clone(),
            gpus,
            free,
            out_of_service,
            unwatched,
            jobs,
        }
    }

    pub(super) fn info(&mut self, id: JobId) -> Option<JobInfo> {
        let entry = self.store.ledger.jobs.get(&id)?;
        let handle = self.jobs.get(&id);
        // A job that ended has no handle (it is retired at once).
        if handle.is_none()
            && let Some(info) = self.ended.get(&id)
        {
            return Some(info.clone());
        }
        let spec = &entry.spec;
        let phase = handle.map_or(
            entry.standing.ended_phase().unwrap_or(Phase::Pending),
            |h| h.phase(),
        );
        let checkpoint = entry.checkpoint;
        let engine = &self.sched.as_ref().expect("the scheduler is home").engine;
        let status = engine.status(id);
        // A job whose stop goes on in the background waits too, for its workers to go.
        let held = phase == Phase::Checkpointing && self.stopping.contains_key(&id);
        let waiting = (matches!(phase, Phase::Pending | Phase::Preempted) || held)
            .then(|| {
                let failed = handle
                    .and_then(|h| h.start_failed.as_ref())
                    .map(|f| &*f.why);
                match (engine.waiting_reason(id), failed) {
                    (Some(why), Some(failed)) => {
                        Some(format!("{why}; its last start failed: {failed}"))
                    }
                    (None, Some(failed)) => Some(format!("its last start failed: {failed}")),
                    (why, None) => why,
                }
            })
            .flatten();
        let resources = status.as_ref().and_then(|s| s.resources);
        let (done, started, finished, placement, preemptions, migrations) = match &status {
            Some(s) => (
                s.steps_done,
                s.record.first_start,
                s.record.finish,
                s.gpus.into_iter().flatten().map(|g| g.0).collect(),
                s.record.preemptions,
                s.record.migrations,
            ),
            // Ended before a restart: what the ledger remembers.
            None => {
                let finished = match entry.standing {
                    Standing::Finished { at } => Some(at),
                    _ => None,
                };
                (checkpoint, entry.first_start, finished, Vec::new(), 0, 0)
            }
        };
        Some(JobInfo {
            id,
            job_type: spec.job_type.clone(),
            tenant: spec.tenant.clone(),
            gpus: spec.gpus,
            phase,
            submitted: spec.arrival,
            started,
            finished,
            progress: if spec.total_steps > 0.0 {
                (done / spec.total_steps).clamp(0.0, 1.0)
            } else {
                1.0
            },
            placement,
            resources,
            preemptions,
            migrations,
            measured: handle.and_then(|h| h.measured),
            learned: self.learned_of(id),
            sizes: self
                .store
                .shapes
                .get(&id)
                .filter(|s| s.sizes != Sizes::rigid(spec.gpus) || !s.pp_by_type.is_empty())
                .map(|s| JobSizes {
                    min: s.sizes.min,
                    max: s.sizes.max,
                    multiple: s.sizes.multiple,
                    multiple_by_type: (s.pp_by_type.iter())
                        .map(|(t, pp)| (t.clone(), s.tp * pp))
                        .collect(),
                }),
            resizes: handle.map_or(0, |h| h.restarts.resizes),
            last_resize: handle.and_then(|h| h.restarts.last_resize.clone()),
            last_restart_seconds: handle.and_then(|h| h.restarts.last_seconds),
            last_restart_phases: handle.and_then(|h| h.restarts.last_phases),
            batch: handle.and_then(|h| h.batch),
            waiting,
        })
    }

    fn learned_of(&self, job: JobId) -> Vec<LearnedSteps> {
        let (Some(learned), Some(sched)) = (self.store.learned.get(&job), self.sched.as_ref())
        else {
            return Vec::new();
        };
        let names = sched.engine.cluster().gpu_types();
        learned
            .types()
            .map(|t| LearnedSteps {
                gpu_type: names
                    .get(t as usize)
                    .cloned()
                    .unwrap_or_else(|| t.to_string()),
                configurations: learned.measured_on(t) as u32,
            })
            .collect()
    }
}

impl Handler<Peek> for ClusterActor {
    type Result = MessageResult<Peek>;

    fn handle(&mut self, _: Peek, _: &mut Context<Self>) -> Self::Result {
        // Busy stopping workers: what it said last.
        if let Ok(executor) = self.executor.try_lock() {
            self.next_event = executor.next_event();
        }
        let next_event = self.next_event;
        let engine = self.engine();
        MessageResult(Outlook {
            next_event,
            idle: engine.is_idle(),
            busy_gpus: engine.busy_gpus(),
        })
    }
}

impl Handler<ListJobs> for ClusterActor {
    type Result = MessageResult<ListJobs>;

    fn handle(&mut self, _: ListJobs, _: &mut Context<Self>) -> Self::Result {
        let ids = self.store.ledger.ids();
        MessageResult(ids.into_iter().filter_map(|id| self.info(id)).collect())
    }
}

impl Handler<ListNodes> for ClusterActor {
    type Result = MessageResult<ListNodes>;

    fn handle(&mut self, _: ListNodes, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.nodes())
    }
}

impl Handler<RunsAs> for ClusterActor {
    type Result = Result<Option<u32>, Refusal>;

    fn handle(&mut self, RunsAs(job): RunsAs, _: &mut Context<Self>) -> Self::Result {
        let entry = self
            .store
            .ledger
            .jobs
            .get(&job)
            .ok_or(Refusal::NoSuchJob(job))?;
        Ok(entry.spec.runs_as())
    }
}

impl Handler<ShowJob> for ClusterActor {
    type Result = MessageResult<ShowJob>;

    fn handle(&mut self, ShowJob(id): ShowJob, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.info(id))
    }
}

impl Handler<GetStats> for ClusterActor {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.stats_now())
    }
}

impl Handler<GetViews> for ClusterActor {
    type Result = MessageResult<GetViews>;

    fn handle(&mut self, _: GetViews, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.views.views())
    }
}

impl Handler<Subscribe> for ClusterActor {
    type Result = MessageResult<Subscribe>;

    fn handle(&mut self, _: Subscribe, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.views.events.clone())
    }
}

impl Handler<Timeline> for ClusterActor {
    type Result = MessageResult<Timeline>;

    fn handle(&mut self, _: Timeline, _: &mut Context<Self>) -> Self::Result {
        let ids = self.store.ledger.ids();
        MessageResult(
            ids.into_iter()
                .filter_map(|id| self.info(id).map(|i| (id, (i.started, i.finished))))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of jobs 0 to `count - 1`.
    fn view_of(count: u32) -> Arc<View> {
        let jobs = (0..count)
            .map(|id| {
                let info: JobInfo = serde_json::from_value(serde_json::json!({
                    "id": id, "job_type": "toy", "tenant": "a", "gpus": 1, "phase": "pending",
                    "submitted": 0.0, "started": null, "finished": null, "progress": 0.0,
                    "placement": [], "resources": null, "preemptions": 0, "migrations": 0,
                    "resizes": 0
                }))
                .unwrap();
                (JobId(id), Arc::new(Entry::new(info, Arc::default())))
            })
            .collect();
        Arc::new(View {
            jobs,
            nodes: Arc::default(),
            stats: StatsSnapshot::default(),
            history: Arc::default(),
            queue: Arc::default(),
            json_bytes: Arc::default(),
        })
    }

    #[test]
    fn the_first_in_order_are_the_head_of_the_whole_sort() {
        // Keys with many ties (by key, then by position), in a scrambled order.
        let items: Vec<(u32, u32)> = (0..500u32).map(|k| ((k * 7919) % 37, k)).collect();
        let order = |a: &(u32, u32), b: &(u32, u32)| a.cmp(b);
        let mut sorted = items.clone();
        sorted.sort();
        for n in [0, 1, 36, 499, 500, 501, 1000] {
            let expected = &sorted[..n.min(sorted.len())];
            assert_eq!(first_in_order(items.clone(), n, order), expected, "n = {n}");
        }
    }

    #[test]
    fn a_sample_names_the_tenants_holding_the_most_and_sums_the_rest() {
        let names: Vec<String> = (0..12).map(|k| format!("t{k:02}")).collect();
        // Tenant k holds k + 1 GPUs, in two runs of jobs.
        let held =
            (names.iter().enumerate()).flat_map(|(k, t)| [(t.as_str(), 1), (t.as_str(), k as u32)]);
        let shares = tenant_shares(held);
        assert_eq!(shares.len(), HISTORY_TENANTS + 1);
        assert_eq!(shares["t11"], 12);
        assert_eq!(shares["t04"], 5, "the eighth largest");
        assert!(!shares.contains_key("t03"));
        assert_eq!(shares[OTHER_TENANTS], 4 + 3 + 2 + 1);
        assert_eq!(shares.values().sum::<u32>(), (1..=12).sum::<u32>());
        let few = tenant_shares([("a", 2), ("b", 1)].into_iter());
        assert!(!few.contains_key(OTHER_TENANTS), "no others, no entry");
    }

    #[test]
    fn entries_made_over_several_threads_hold_each_its_own_json() {
        let count = 5 * ENTRIES_PER_JSON_THREAD as u32 + 3;
        let view = view_of(count);
        // Scrambled, as a publication lists them.
        let mut fresh: Vec<Fresh> = (view.jobs.values())
            .map(|e| (Arc::clone(e), None))
            .collect();
        fresh.reverse();
        fresh.rotate_left(count as usize / 3);
        make_json(&mut fresh);
        for (id, entry) in &view.jobs {
            let made = entry
                .json
                .get()
                .unwrap_or_else(|| panic!("job {id} not made"));
            assert_eq!(**made, serde_json::to_vec(&entry.info).unwrap(), "job {id}");
        }
        // An entry that replaces one is written into a buffer of its predecessor's size.
        let old = &view.jobs[&JobId(7)];
        let next = Arc::new(Entry::new(old.info.clone(), Arc::default()));
        make_json(&mut [(Arc::clone(&next), Some(Arc::clone(old)))]);
        let capacity = next.json_capacity.load(AtomicOrdering::Relaxed);
        assert_eq!(capacity, old.json().len() + 16);
        assert_eq!(next.json(), old.json());
        assert!(next.json.get().unwrap().len() <= capacity);
    }

    #[test]
    fn the_tally_tells_each_publication_in_order_whatever_order_its_changes_come_in() {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let cells: Vec<Arc<OnceLock<usize>>> = (0..5).map(|_| Arc::default()).collect();
        let count = |seq: u64, change: isize, cell: &Arc<OnceLock<usize>>| {
            let counting = Counting {
                tally: Arc::clone(&tally),
                seq,
                told: Some(Arc::clone(cell)),
            };
            counting.count(change);
        };
        let told = |k: usize| cells[k].get().copied();
        let stopped = || lock(&tally).stopped;
        // Publication 1 counted before 0: told only once 0 is.
        count(1, 30, &cells[1]);
        assert_eq!(told(1), None);
        count(0, 100, &cells[0]);
        assert_eq!((told(0), told(1)), (Some(100), Some(130)));
        // A reader that counted publication 2 for itself first, and agrees.
        cells[2].set(110).unwrap();
        count(3, 5, &cells[3]);
        count(2, -20, &cells[2]);
        assert_eq!((told(2), told(3)), (Some(110), Some(115)));
        assert!(!stopped());
        // A reader that counted another length: the tally stops, tells none of the views
        // waiting on that one, and keeps nothing more.
        let waiting: Arc<OnceLock<usize>> = Arc::default();
        count(5, 0, &waiting);
        cells[4].set(1).unwrap();
        count(4, 0, &cells[4]);
        assert!(stopped());
        assert_eq!(waiting.get(), None);
        let later = Arc::default();
        count(6, 1, &later);
        assert_eq!(later.get(), None);
        assert!(lock(&tally).early.is_empty());
    }

    #[test]
    fn a_miscount_or_a_lost_count_stops_the_tally() {
        // A change below nothing is a miscount: neither it nor any later one is told.
        let mut tally = Tally::default();
        assert!(tally.counted(0, -1, Arc::default()).is_empty());
        assert!(tally.stopped && tally.early.is_empty());
        // A count whose thread ended without it (it panicked) is reported lost.
        let tally = Arc::new(Mutex::new(Tally::default()));
        drop(Counting {
            tally: Arc::clone(&tally),
            seq: 0,
            told: Some(Arc::default()),
        });
        assert!(lock(&tally).stopped);
        // A count that never comes: those after it are kept up to a bound, then dropped.
        let mut tally = Tally::default();
        for seq in 1..=TALLY_EARLY as u64 {
            tally.counted(seq, 1, Arc::default());
        }
        assert_eq!((tally.early.len(), tally.stopped), (TALLY_EARLY, false));
        // The missing one comes as the bound is reached: every one is told.
        let cell: Arc<OnceLock<usize>> = Arc::default();
        let ready = tally.counted(0, 1, Arc::clone(&cell));
        assert_eq!(ready.len(), TALLY_EARLY + 1);
        assert_eq!(ready.last().map(|(_, bytes)| *bytes), Some(TALLY_EARLY + 1));
        assert!(!tally.stopped && tally.early.is_empty());
        for seq in TALLY_EARLY as u64 + 2..=2 * TALLY_EARLY as u64 + 2 {
            tally.counted(seq, 1, Arc::default());
        }
        assert!(tally.stopped && tally.early.is_empty());
    }

    #[test]
    fn a_streamed_list_is_valid_json_of_its_told_length_at_every_size() {
        for count in [
            0,
            1,
            JOBS_PER_PIECE as u32 - 1,
            JOBS_PER_PIECE as u32,
            2 * JOBS_PER_PIECE as u32,
            2 * JOBS_PER_PIECE as u32 + 1,
        ] {
            let view = view_of(count);
            let whole = view.jobs_json();
            assert_eq!(whole.len(), view.jobs_json_len(), "{count} jobs");
            let listed: Vec<JobInfo> = serde_json::from_slice(&whole).unwrap_or_else(|e| {
                panic!("{count} jobs: {e}: {}", String::from_utf8_lossy(&whole))
            });
            let ids: Vec<u32> = listed.iter().map(|j| j.id.0).collect();
            assert_eq!(ids, (0..count).collect::<Vec<_>>());
        }
    }
}
