//! Holding a job's workers to the CPUs and memory they were allotted (Synergy's point: CPUs and memory
//! are sized per job, so they must also be kept per job).
//!
//! - **CPUs**: [`CorePool`] hands each attempt whole cores of those the daemon may use, the fewest
//!   shared first; the attempt's first process is pinned to them before it starts ([`pin`]), so
//!   torchrun and every worker inherit the set; a change in place re-pins every thread ([`repin`]).
//! - **Processes and memory**: [`Cgroups`] puts each attempt in a cgroup of its own, which holds every
//!   process it starts (so that none outlives it, [`kill`]) and its memory limit (`memory.max` on
//!   cgroup v2, `memory.limit_in_bytes` on v1's memory hierarchy), when this process may create
//!   one; otherwise processes are found by their environment marker, the allotment is only advised
//!   to the workers (`GANGWAY_MEMORY_GB`), and the reason is kept for the operator.
//! - **Tasks**: the same cgroup (v2) or one of its own in v1's pids hierarchy bounds how many
//!   processes and threads an attempt may have (`pids.max`), and all attempts together leave the
//!   daemon's cgroup half of what it may hold ([`Tasks`]): jobs run through a root daemon escape their users' own
//!   limits (no login session sets them), so without it one job forking without end would take
//!   every pid, the daemon's next fork included.

use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::Pinned;

/// How many cores the workers are pinned to.
pub const CPUS_VAR: &str = "GANGWAY_CPUS";
/// Which cores (`0,1,5`).
pub const CPU_LIST_VAR: &str = "GANGWAY_CPU_LIST";
/// The GB of memory allotted (a limit where a cgroup enforces it, advice otherwise).
pub const MEMORY_GB_VAR: &str = "GANGWAY_MEMORY_GB";

/// The cores this process may run on.
pub fn usable_cores() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    if !ok {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return (0..n).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// This machine's memory in GB (10^9 bytes), from `/proc/meminfo`.
pub fn machine_memory_gb() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024.0 / 1e9)
}

/// Whole cores handed to attempts, each core counted by how many attempts hold it.
#[derive(Clone, Debug)]
pub struct CorePool {
    cores: Vec<usize>,
    holders: Vec<u32>,
}

impl CorePool {
    /// A pool of `cores` (CPU numbers), none held.
    pub fn new(cores: Vec<usize>) -> Self {
        let holders = vec![0; cores.len()];
        CorePool { cores, holders }
    }

    /// The cores this process may run on.
    pub fn of_this_process() -> Self {
        CorePool::new(usable_cores())
    }

    /// How many cores the pool has, held or not.
    pub fn len(&self) -> usize {
        self.cores.len()
    }

    /// Whether the pool has no cores at all.
    pub fn is_empty(&self) -> bool {
        self.cores.is_empty()
    }

    /// `n` cores (at most all of them): the least held first, then the lowest. Attempts get cores of
    /// their own while there are enough; the scheduler never allots more CPUs than the pool has, so
    /// only allotments rounded up to one whole core share.
    pub fn take(&mut self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.cores.len()).collect();
        order.sort_by_key(|&i| (self.holders[i], i));
        order.truncate(n.max(1));
        order.sort_unstable();
        for &i in &order {
            self.holders[i] += 1;
        }
        order.into_iter().map(|i| self.cores[i]).collect()
    }

    /// Counts `cores` as held again (an attempt re-adopted after a restart); cores not in the pool
    /// are ignored.
    pub fn hold(&mut self, cores: &[usize]) {
        for c in cores {
            if let Some(i) = self.cores.iter().position(|x| x == c) {
                self.holders[i] += 1;
            }
        }
    }

    /// Gives back what [`CorePool::take`] or [`CorePool::hold`] counted.
    pub fn give_back(&mut self, cores: &[usize]) {
        for c in cores {
            if let Some(i) = self.cores.iter().position(|x| x == c) {
                self.holders[i] = self.holders[i].saturating_sub(1);
            }
        }
    }
}

fn cpu_set(cores: &[usize]) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET is given indices below CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// `0,1,5`.
pub fn core_list(cores: &[usize]) -> String {
    let names: Vec<String> = cores.iter().map(usize::to_string).collect();
    names.join(",")
}

/// Pins the command's process to `cores` before it runs its program: everything it starts inherits
/// the set.
pub fn pin(command: &mut Command, cores: &[usize]) {
    let set = cpu_set(cores);
    // SAFETY: between fork and exec the closure only calls sched_setaffinity(2) on the child itself,
    // on a set built before the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Re-pins every thread of the processes `pids` to `cores`; returns how many threads moved.
pub fn repin(pids: &[i32], cores: &[usize]) -> usize {
    let set = cpu_set(cores);
    let mut moved = 0;
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for tid in tasks.filter_map(|t| t.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
            // SAFETY: sched_setaffinity(2) on a thread id, with a valid set.
            if unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) } == 0 {
                moved += 1;
            }
        }
    }
    moved
}

/// Which cgroup version a hierarchy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy.
    V2,
    /// One of v1's hierarchies (the memory controller's, here).
    V1,
}

impl Version {
    /// The file that limits memory in a cgroup of this version.
    fn limit_file(self) -> &'static str {
        match self {
            Version::V2 => "memory.max",
            Version::V1 => "memory.limit_in_bytes",
        }
    }
}

/// Where the number of an attempt's tasks (processes and threads) is bounded, and how many all
/// attempts together may have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tasks {
    /// In the attempt's cgroup itself (cgroup v2 with the pids controller).
    InCgroup {
        /// The bound on all attempts together.
        all: u64,
    },
    /// In a cgroup of the attempt's own in cgroup v1's pids hierarchy (v1 keeps each controller in
    /// a hierarchy of its own).
    Apart {
        /// The directory under which each attempt's is made.
        root: PathBuf,
        /// The bound on all attempts together.
        all: u64,
    },
    /// Nowhere, and why.
    Unbounded(String),
}

impl Tasks {
    /// The bound on all attempts together, where there is one.
    pub fn all(&self) -> Option<u64> {
        match self {
            Tasks::InCgroup { all } | Tasks::Apart { all, .. } => Some(*all),
            Tasks::Unbounded(_) => None,
        }
    }
}

/// The file that bounds a cgroup's tasks, in both versions.
const TASKS_LIMIT_FILE: &str = "pids.max";

/// The most tasks the machine can have: the smaller of the kernel's pid and thread limits.
pub fn machine_tasks() -> u64 {
    ["/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok()?.trim().parse::<u64>().ok())
        .min()
        .unwrap_or(32_768)
}

/// The most tasks the daemon's cgroup `dir` may hold: the smallest `pids.max` of it and of the
/// cgroups above it (a service manager bounds the daemon's unit: systemd's `TasksMax`), and the
/// machine's. Its jobs' tasks count against every one of them.
fn available_tasks(dir: &Path) -> u64 {
    let mut least = machine_tasks();
    let mut at = Some(dir);
    // Up to the hierarchy's root, the last directory with cgroup files.
    while let Some(dir) = at.filter(|d| d.join("cgroup.procs").exists()) {
        if let Some(max) = std::fs::read_to_string(dir.join(TASKS_LIMIT_FILE))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            least = least.min(max);
        }
        at = dir.parent();
    }
    least
}

/// Cgroups for the attempts of jobs: each attempt gets one, which holds every process it starts (a
/// process cannot leave a cgroup the daemon made: its files are the daemon's), so that ending the
/// attempt ends all of them, whatever they did to their environment or session; where the
/// hierarchy has the memory controller, its allotment is its limit there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cgroups {
    /// Each attempt gets a cgroup under `root`.
    Made {
        /// The directory under which each attempt's cgroup is made.
        root: PathBuf,
        /// The hierarchy's cgroup version.
        version: Version,
        /// Whether memory limits are enforced there (the hierarchy has the memory controller).
        memory: bool,
        /// Where an attempt's tasks are bounded.
        tasks: Tasks,
    },
    /// None can be made here, and why: processes are found by their environment marker only, and
    /// memory allotments are only told to the workers.
    Unavailable(String),
}

impl Cgroups {
    /// Cgroups under this process's own, when it may make them (a daemon run as root, or in a
    /// delegated cgroup): with the memory controller where one is on (v2, else v1's memory
    /// hierarchy), else in cgroup v2 for tracking alone.
    pub fn detect() -> Self {
        let mut why = Vec::new();
        for (version, memory) in [
            (Version::V2, true),
            (Version::V1, true),
            (Version::V2, false),
        ] {
            match find_cgroup(version, memory).and_then(|dir| prepare_root(&dir, version, memory)) {
                Ok(root) => {
                    let tasks = match version {
                        Version::V2 => bound_all_tasks(&root, true),
                        Version::V1 => find_v1("pids")
                            .and_then(|dir| prepare_root(&dir, version, false))
                            .map_or_else(Tasks::Unbounded, |apart| bound_all_tasks(&apart, false)),
                    };
                    return Cgroups::Made {
                        root,
                        version,
                        memory,
                        tasks,
                    };
                }
                Err(e) => why.push(e),
            }
        }
        why.dedup();
        Cgroups::Unavailable(why.join("; "))
    }

    /// Makes the cgroup `name`, limited to `memory_bytes` where limits are enforced; `Ok(None)` where
    /// no cgroup can be made.
    pub fn create(
        &self,
        name: &str,
        memory_bytes: Option<u64>,
    ) -> std::io::Result<Option<PathBuf>> {
        let Cgroups::Made { root, .. } = self else {
            return Ok(None);
        };
        let dir = root.join(name);
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        if let Some(bytes) = memory_bytes {
            self.set_limit(&dir, bytes)?;
        }
        Ok(Some(dir))
    }

    /// Changes the memory limit of a cgroup [`Cgroups::create`] made (nothing where limits are not
    /// enforced).
    pub fn set_limit(&self, cgroup: &Path, bytes: u64) -> std::io::Result<()> {
        match self {
            Cgroups::Made {
                version,
                memory: true,
                ..
            } => std::fs::write(cgroup.join(version.limit_file()), bytes.to_string()),
            _ => Ok(()),
        }
    }

    /// Whether memory allotments are enforced as limits.
    pub fn limits_memory(&self) -> bool {
        matches!(self, Cgroups::Made { memory: true, .. })
    }

    /// The default bound on one attempt's tasks: a quarter of what the daemon's cgroup may hold, so
    /// that no one job takes more than the others running beside it leave (the largest torch jobs,
    /// eight workers of a hundred threads and their data loaders, need a few thousand).
    pub fn default_max_tasks(&self) -> u64 {
        let all = match self {
            Cgroups::Made { tasks, .. } => tasks.all(),
            Cgroups::Unavailable(_) => None,
        };
        // All attempts' bound is half of what the daemon's cgroup may hold.
        all.map_or(machine_tasks() / 4, |all| all / 2)
    }

    /// Whether an attempt's tasks are bounded in a cgroup apart from its own (cgroup v1's pids
    /// hierarchy), which a warm pool's workers do not join.
    pub fn bounds_tasks_apart(&self) -> bool {
        matches!(
            self,
            Cgroups::Made {
                tasks: Tasks::Apart { .. },
                ..
            }
        )
    }

    /// Bounds the tasks of the attempt whose cgroup [`Cgroups::create`] made as `cgroup` (named
    /// `name`) to `max` (at most what all attempts together may have): in that cgroup, or in one
    /// it makes in v1's pids hierarchy, which it returns (the attempt joins it too, and it goes
    /// when the attempt has; it is removed again where its bound cannot be written).
    pub fn bound_tasks(
        &self,
        name: &str,
        cgroup: &Path,
        max: u64,
    ) -> std::io::Result<Option<PathBuf>> {
        let Cgroups::Made { tasks, .. } = self else {
            return Ok(None);
        };
        let (dir, apart, all) = match tasks {
            Tasks::InCgroup { all } => (cgroup.to_owned(), None, *all),
            Tasks::Apart { root, all } => {
                let dir = root.join(name);
                match std::fs::create_dir(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                    _ => {}
                }
                (dir.clone(), Some(dir), *all)
            }
            Tasks::Unbounded(_) => return Ok(None),
        };
        if let Err(e) = std::fs::write(dir.join(TASKS_LIMIT_FILE), max.min(all).to_string()) {
            if let Some(apart) = &apart {
                remove(apart);
            }
            return Err(e);
        }
        Ok(apart)
    }

    /// Whether attempts' tasks are bounded.
    pub fn bounds_tasks(&self) -> bool {
        matches!(
            self,
            Cgroups::Made {
                tasks: Tasks::InCgroup { .. } | Tasks::Apart { .. },
                ..
            }
        )
    }

    /// A one-line description for the operator.
    pub fn describe(&self) -> String {
        let tasks = |tasks: &Tasks| match tasks {
            Tasks::InCgroup { all } => {
                format!("its tasks are bounded there (pids.max; all jobs' together to {all})")
            }
            Tasks::Apart { root, all } => format!(
                "its tasks are bounded in {} (pids.max; all jobs' together to {all})",
                root.display()
            ),
            Tasks::Unbounded(why) => format!(
                "its tasks are not bounded ({why}): a job that forks without end can take every \
                 pid of the machine"
            ),
        };
        match self {
            Cgroups::Made {
                root,
                version,
                memory: true,
                tasks: bound,
            } => format!(
                "a cgroup per attempt in {} holds its processes and its memory limit ({}); {}",
                root.display(),
                version.limit_file(),
                tasks(bound)
            ),
            Cgroups::Made {
                root, tasks: bound, ..
            } => format!(
                "a cgroup per attempt in {} holds its processes; memory allotments are advisory \
                 (no memory controller there); {}",
                root.display(),
                tasks(bound)
            ),
            Cgroups::Unavailable(why) => format!(
                "no cgroup can be made ({why}): a job's processes are found by their environment \
                 marker only, so one that clears its environment can outlive its job, memory \
                 allotments are advisory, and its tasks are not bounded: a job that forks without \
                 end can take every pid of the machine"
            ),
        }
    }
}

/// The processes in `cgroup` (none when it is gone).
pub fn processes(cgroup: &Path) -> Vec<i32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGKILLs every process in `cgroup`, without waiting: at once through `cgroup.kill` on cgroup v2
/// (which also catches a process forked meanwhile), else one by one, each pinned and then found in
/// the cgroup still (its pid may have passed to a process outside); `false` while some remain (call
/// it again: a process forked between the listing and its parent's death, or one that could not be
/// killed, is tried then).
pub fn kill(cgroup: &Path) -> bool {
    if std::fs::write(cgroup.join("cgroup.kill"), "1").is_err() {
        // One that cannot be pinned (ended, or the daemon short of descriptors) stays listed if
        // it lives: the next call tries again.
        let pinned: Vec<Pinned> = processes(cgroup)
            .into_iter()
            .filter_map(|pid| Pinned::open(pid).ok().flatten())
            .collect();
        let still: HashSet<i32> = processes(cgroup).into_iter().collect();
        for process in pinned.iter().filter(|p| still.contains(&p.pid())) {
            // One that could not be killed stays listed: the next call tries again.
            if let Err(error) = process.signal(libc::SIGKILL) {
                tracing::warn!(pid = process.pid(), %error, "killing a process of a cgroup");
            }
        }
    }
    processes(cgroup).is_empty()
}

/// Puts the command's process in `cgroup` before it runs its program, so that everything it starts
/// is held to the cgroup's limit from its first instruction. Keep the returned file until the command
/// has been spawned: the child writes to its copy of it.
pub fn join(command: &mut Command, cgroup: &Path) -> std::io::Result<std::fs::File> {
    // Opened here, by the daemon, which made the cgroup (close-on-exec: the program never sees it).
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(cgroup.join("cgroup.procs"))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&procs);
    // SAFETY: between fork and exec the closure only calls write(2) on a descriptor opened before
    // the fork and still open in the child, and allocates nothing. ("0" moves the writer itself.)
    unsafe {
        command.pre_exec(move || {
            if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    Ok(procs)
}

/// Removes a cgroup once its processes are gone; false while it still holds some.
pub fn remove(cgroup: &Path) -> bool {
    match std::fs::remove_dir(cgroup) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// This process's cgroup directory in its hierarchy of `version`, with the memory controller there
/// when `memory` is asked for.
fn find_cgroup(version: Version, memory: bool) -> Result<PathBuf, String> {
    match version {
        Version::V2 => {
            let membership = std::fs::read_to_string("/proc/self/cgroup")
                .map_err(|e| format!("reading /proc/self/cgroup: {e}"))?;
            let path = membership
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .ok_or("this process is in no cgroup v2")?;
            let mount =
                mount_of(&|fstype, _| fstype == "cgroup2")?.ok_or("no cgroup v2 is mounted")?;
            let dir = mount.join(path.trim_start_matches('/'));
            if memory && !lists(&dir, "cgroup.controllers", "memory").unwrap_or(false) {
                return Err("cgroup v2 has no memory controller here".into());
            }
            Ok(dir)
        }
        Version::V1 => find_v1("memory"),
    }
}

/// Where the first file system `wanted` (given its type and options) accepts is mounted.
fn mount_of(wanted: &dyn Fn(&str, &str) -> bool) -> Result<Option<PathBuf>, String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    Ok(mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        let mut right = right.split(' ');
        let (fstype, options) = (right.next()?, right.nth(1).unwrap_or(""));
        wanted(fstype, options).then(|| PathBuf::from(mount_point))
    }))
}

/// Whether a cgroup v2 directory's list of controllers `file` (`cgroup.controllers`: those its
/// children may have; `cgroup.subtree_control`: those they have) names `controller`.
fn lists(dir: &Path, file: &str, controller: &str) -> std::io::Result<bool> {
    let listed = std::fs::read_to_string(dir.join(file))?;
    Ok(listed.split_whitespace().any(|c| c == controller))
}

/// This process's cgroup directory in cgroup v1's hierarchy of `controller`.
fn find_v1(controller: &str) -> Result<PathBuf, String> {
    let membership = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("reading /proc/self/cgroup: {e}"))?;
    let path = membership
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then_some(path)
        })
        .ok_or_else(|| format!("no cgroup v1 {controller} hierarchy"))?;
    let mount = mount_of(&|fstype, options| {
        fstype == "cgroup" && options.split(',').any(|o| o == controller)
    })?
    .ok_or_else(|| format!("no cgroup v1 {controller} hierarchy is mounted"))?;
    Ok(mount.join(path.trim_start_matches('/')))
}

/// Makes `dir/gangway`, under which each attempt gets its cgroup (with the memory controller on for
/// its children, when `memory`).
fn prepare_root(dir: &Path, version: Version, memory: bool) -> Result<PathBuf, String> {
    let root = dir.join("gangway");
    let shown = root.display().to_string();
    let v2_memory = version == Version::V2 && memory;
    if v2_memory {
        enable(dir, "memory").map_err(|e| {
            format!(
                "cannot turn on the memory controller for {}'s children: {e} (a cgroup v2 that \
                 holds processes cannot; run the daemon in a delegated cgroup of its own)",
                dir.display()
            )
        })?;
    }
    match std::fs::create_dir(&root) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(format!("cannot create {shown}: {e}"));
        }
        _ => {}
    }
    if v2_memory {
        enable(&root, "memory").map_err(|e| format!("cannot turn on memory in {shown}: {e}"))?;
    }
    // A cgroup made and (with memory) a limit written prove the files are ours to write.
    let probe = root.join(format!("probe-{}", std::process::id()));
    let written = std::fs::create_dir(&probe).and_then(|()| {
        if memory {
            std::fs::write(probe.join(version.limit_file()), "1000000000")
        } else {
            Ok(())
        }
    });
    let _ = std::fs::remove_dir(&probe);
    written.map_err(|e| format!("cannot make a cgroup under {shown}: {e}"))?;
    Ok(root)
}

/// Turns on `controller` for `dir`'s children (cgroup v2).
fn enable(dir: &Path, controller: &str) -> std::io::Result<()> {
    if lists(dir, "cgroup.subtree_control", controller)? {
        return Ok(());
    }
    std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}"))
}

/// Bounds the tasks of all attempts together, under `root` (made in the daemon's own cgroup), to
/// half of what the daemon's cgroup may hold, so that the daemon and everything else keep the other
/// half; `in_cgroup` (v2) with the pids controller turned on for the daemon's cgroup and `root`,
/// so that each attempt's cgroup has its own bound too. Where that does not hold, says why.
fn bound_all_tasks(root: &Path, in_cgroup: bool) -> Tasks {
    let shown = root.display();
    let Some(daemons) = root.parent() else {
        return Tasks::Unbounded(format!("{shown} has no parent"));
    };
    let turned_on = if in_cgroup {
        enable(daemons, "pids")
            .and_then(|()| enable(root, "pids"))
            .map_err(|e| format!("cannot turn on the pids controller for {shown}: {e}"))
    } else {
        Ok(())
    };
    let all = available_tasks(daemons) / 2;
    let written = turned_on.and_then(|()| {
        std::fs::write(root.join(TASKS_LIMIT_FILE), all.to_string())
            .map_err(|e| format!("cannot bound the tasks of {shown}: {e}"))
    });
    match written {
        Err(why) => Tasks::Unbounded(why),
        Ok(()) if in_cgroup => Tasks::InCgroup { all },
        Ok(()) => Tasks::Apart {
            root: root.to_owned(),
            all,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_hands_out_disjoint_cores_while_it_has_them() {
        let mut pool = CorePool::new(vec![0, 1, 2, 3]);
        let a = pool.take(2);
        let b = pool.take(1);
        let c = pool.take(1);
        assert_eq!(
            (a.as_slice(), b.as_slice(), c.as_slice()),
            (&[0, 1][..], &[2][..], &[3][..])
        );
        // Full: the next one shares the least held cores, never none.
        pool.give_back(&b);
        assert_eq!(pool.take(2), vec![0, 2]);
        assert_eq!(pool.take(0).len(), 1);
        assert_eq!(pool.take(9).len(), 4);
    }

    #[test]
    fn re_adopted_cores_count_as_held() {
        let mut pool = CorePool::new(vec![4, 5]);
        pool.hold(&[4, 7]);
        assert_eq!(pool.take(1), vec![5]);
    }

    #[test]
    fn this_process_has_cores_and_memory() {
        assert!(!usable_cores().is_empty());
        assert!(machine_memory_gb().is_some_and(|gb| gb > 0.0));
    }

    #[test]
    fn a_process_over_its_memory_limit_is_killed_where_limits_are_enforced() {
        let cgroups = Cgroups::detect();
        if !cgroups.limits_memory() {
            // Nothing to enforce with; the operator is told why.
            assert!(
                cgroups
                    .describe()
                    .contains("memory allotments are advisory"),
                "{cgroups:?}"
            );
            return;
        }
        let cgroup = cgroups
            .create(&format!("test-{}", std::process::id()), Some(64_000_000))
            .unwrap()
            .unwrap();
        let run = |megabytes: u32| {
            let mut command = Command::new("python3");
            command.args([
                "-c",
                &format!("b = bytearray({megabytes} * 10**6); b[::4096] = b'x' * len(b[::4096])"),
            ]);
            let _procs = join(&mut command, &cgroup).unwrap();
            command.status().unwrap()
        };
        let within = run(16);
        let over = run(300);
        assert!(
            remove(&cgroup),
            "the cgroup is empty once its processes are gone"
        );
        assert!(within.success(), "{within:?}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(over.signal(), Some(libc::SIGKILL), "{over:?}");
    }

    #[test]
    fn a_process_that_leaves_its_session_and_environment_is_still_killed_with_its_cgroup() {
        let cgroups = Cgroups::detect();
        let Cgroups::Made { .. } = &cgroups else {
            assert!(
                cgroups.describe().contains("environment marker only"),
                "{cgroups:?}"
            );
            return;
        };
        let cgroup = cgroups
            .create(&format!("test-orphan-{}", std::process::id()), None)
            .unwrap()
            .unwrap();
        // The shell starts an orphan in a session of its own with an empty environment, and exits.
        let mut command = Command::new("sh");
        command.args(["-c", "env -i setsid sleep 600 >/dev/null 2>&1 & echo $!"]);
        let procs = join(&mut command, &cgroup).unwrap();
        let out = command.output().unwrap();
        drop(procs);
        let orphan: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(
            processes(&cgroup),
            vec![orphan],
            "the orphan is held by the cgroup"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !kill(&cgroup) {
            assert!(
                std::time::Instant::now() < deadline,
                "the orphan outlived its kill"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(remove(&cgroup));
        // SAFETY: kill(2) with signal 0 only asks whether the pid is in use.
        let alive = unsafe { libc::kill(orphan, 0) } == 0;
        assert!(
            !alive
                || !std::fs::read_to_string(format!("/proc/{orphan}/cmdline"))
                    .unwrap_or_default()
                    .contains("sleep")
        );
    }

    #[test]
    fn an_attempts_tasks_are_bounded_and_its_bound_goes_with_it() {
        let cgroups = Cgroups::detect();
        if !cgroups.bounds_tasks() {
            // The operator is told the bound is missing, and what that risks.
            assert!(
                cgroups.describe().contains("can take every pid"),
                "{cgroups:?}"
            );
            return;
        }
        let name = format!("test-tasks-{}", std::process::id());
        let cgroup = cgroups.create(&name, None).unwrap().unwrap();
        let apart = cgroups.bound_tasks(&name, &cgroup, 16).unwrap();
        // Forks until refused, holding every child, then says how many it got and ends them.
        let mut command = Command::new("python3");
        command.args([
            "-c",
            "import os, signal\n\
             kids = []\n\
             try:\n\
             \x20   for _ in range(200):\n\
             \x20       pid = os.fork()\n\
             \x20       if pid == 0:\n\
             \x20           signal.pause()\n\
             \x20       kids.append(pid)\n\
             except OSError:\n\
             \x20   pass\n\
             print(len(kids))\n\
             for pid in kids:\n\
             \x20   os.kill(pid, signal.SIGKILL)\n",
        ]);
        let joined: Vec<_> = [Some(&cgroup), apart.as_ref()]
            .into_iter()
            .flatten()
            .map(|c| join(&mut command, c).unwrap())
            .collect();
        let out = command.output().unwrap();
        drop(joined);
        let forked: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(
            (1..16).contains(&forked),
            "{forked} children under a bound of 16: {out:?}"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !(kill(&cgroup) && remove(&cgroup) && apart.as_deref().is_none_or(remove)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the attempt's cgroups outlived it"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // All attempts together leave the machine half its pids.
        let Cgroups::Made { root, tasks, .. } = &cgroups else {
            unreachable!()
        };
        let bounded = match tasks {
            Tasks::Apart { root, .. } => root,
            _ => root,
        };
        let all = std::fs::read_to_string(bounded.join(TASKS_LIMIT_FILE)).unwrap();
        assert_eq!(Some(all.trim().parse().unwrap()), tasks.all());
        assert_eq!(
            tasks.all(),
            Some(available_tasks(bounded.parent().unwrap()) / 2)
        );
    }

    /// A job's tasks count against every cgroup above the daemon's (systemd's `TasksMax` on its
    /// unit): the smallest bound on the way up is what the daemon's cgroup may hold.
    #[test]
    fn what_the_daemons_cgroup_may_hold_is_the_least_bound_above_it() {
        let tree = tempfile::tempdir().unwrap();
        let unit = tree.path().join("system.slice/gangway.service");
        let daemons = unit.join("daemon");
        std::fs::create_dir_all(&daemons).unwrap();
        for (dir, max) in [
            (tree.path().join("system.slice"), Some("max")),
            (unit.clone(), Some("40")),
            (daemons.clone(), None),
        ] {
            std::fs::write(dir.join("cgroup.procs"), "").unwrap();
            if let Some(max) = max {
                std::fs::write(dir.join(TASKS_LIMIT_FILE), max).unwrap();
            }
        }
        assert_eq!(available_tasks(&daemons), 40.min(machine_tasks()));
        // Above the hierarchy's root (no cgroup files) nothing is read.
        std::fs::write(tree.path().join(TASKS_LIMIT_FILE), "7").unwrap();
        assert_eq!(available_tasks(&daemons), 40.min(machine_tasks()));
    }

    #[test]
    fn pinned_children_run_on_their_cores_only() {
        let cores = usable_cores();
        let mut command = Command::new("sh");
        command.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        pin(&mut command, &cores[..1]);
        let out = command.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.split_whitespace().nth(1),
            Some(cores[0].to_string().as_str()),
            "{text}"
        );
    }
}
