//! Checks on a submitted command that both the control plane (before it journals a job) and the
//! launcher's process executor (before it runs one) apply: who submitted it, and whether a program it
//! would start may run.

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::worker::RunCommand;

/// A field of a request that is wrong, and how.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Invalid {
    /// The field, as the request names it (`run.cwd`, `gpus`).
    pub field: &'static str,
    /// What is wrong with it, for the client to read.
    pub problem: String,
}

/// An [`Invalid`] answer.
pub fn invalid<T>(field: &'static str, problem: impl Into<String>) -> Result<T, Invalid> {
    Err(Invalid {
        field,
        problem: problem.into(),
    })
}

/// A command the checks refuse ([`open_program`], [`check_library_path`]), and whether
/// the refusal says nothing of the command: its file system did not answer (an I/O error, a stale
/// handle, a server gone), and the same check may pass when made again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{invalid}")]
pub struct Refused {
    /// What is wrong, and where.
    pub invalid: Invalid,
    /// Whether the file system did not answer, rather than answered what fails the check.
    pub unanswered: bool,
    /// Whether this machine was short of what the check needed (file descriptors, or a thread to
    /// check on): unanswered too, and not the command's doing.
    pub host: bool,
}

impl From<Invalid> for Refused {
    fn from(invalid: Invalid) -> Refused {
        Refused {
            invalid,
            unanswered: false,
            host: false,
        }
    }
}

impl From<Refused> for Invalid {
    fn from(refused: Refused) -> Invalid {
        refused.invalid
    }
}

/// Why a path did not pass a check: what was found there, or that its file system did not answer
/// ([`Refused::unanswered`]).
#[derive(Debug)]
struct NotPassed {
    why: String,
    unanswered: bool,
    host: bool,
}

impl NotPassed {
    /// `e`, met at `what`: unanswered where the error says nothing of what is there.
    fn io(what: impl std::fmt::Display, e: &std::io::Error) -> NotPassed {
        NotPassed {
            why: format!("{what}: {e}"),
            unanswered: unanswered(e),
            host: out_of_descriptors(e),
        }
    }

    /// `e`, met starting a thread for the check, or giving it a descriptor table of its own (out
    /// of threads, memory or descriptors): this machine's.
    fn no_thread(what: impl std::fmt::Display, e: &std::io::Error) -> NotPassed {
        NotPassed::host(format!("{what}: {e}"))
    }

    /// What kept this machine from checking: its own, not the path's.
    fn host(why: String) -> NotPassed {
        NotPassed {
            why,
            unanswered: true,
            host: true,
        }
    }

    /// The same, said of `what`.
    fn of(self, what: impl std::fmt::Display) -> NotPassed {
        NotPassed {
            why: format!("{what}{}", self.why),
            ..self
        }
    }

    /// As a refusal of the request's `field`, `what` before its reason.
    fn refusal(self, field: &'static str, what: impl std::fmt::Display) -> Refused {
        Refused {
            invalid: Invalid {
                field,
                problem: format!("{what}{}", self.why),
            },
            unanswered: self.unanswered,
            host: self.host,
        }
    }
}

/// What a check found: the path fails it.
impl From<String> for NotPassed {
    fn from(why: String) -> NotPassed {
        NotPassed {
            why,
            unanswered: false,
            host: false,
        }
    }
}

impl From<&str> for NotPassed {
    fn from(why: &str) -> NotPassed {
        NotPassed::from(why.to_owned())
    }
}

/// Whether `e` says this process (EMFILE) or the system (ENFILE) is out of file descriptors, and
/// it is: a file system may answer any error it likes (a user's FUSE server says EMFILE as easily
/// as EIO), so the shortage is confirmed by opening `/dev/null`, which no user's server answers.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    let short = |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
    short(e) && std::fs::File::open("/dev/null").is_err_and(|probe| short(&probe))
}

/// Whether an error of the file system's says nothing of the path it was asked about: a disk or a
/// server that failed, a handle gone stale, a machine out of memory, threads or descriptors.
fn unanswered(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EIO
                | libc::ENOTCONN
                | libc::ESTALE
                | libc::ETIMEDOUT
                | libc::EAGAIN
                | libc::EINTR
                | libc::ENOMEM
                | libc::ENFILE
                | libc::EMFILE
                | libc::ECONNABORTED
                | libc::ECONNRESET
                | libc::EHOSTDOWN
                | libc::EHOSTUNREACH
                | libc::ENETDOWN
                | libc::ENETUNREACH
                | libc::ENOLINK
                | libc::EREMOTEIO
                | libc::ECOMM
        )
    )
}

/// Who submitted a request: the peer of a Unix socket, or, over TCP, the holder of the token (which
/// only the daemon's user can read, so the daemon's user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitter {
    /// The submitter's user id.
    pub uid: u32,
    /// The submitter's (primary) group id.
    pub gid: u32,
}

impl Submitter {
    /// This process's user.
    pub fn this_process() -> Submitter {
        // SAFETY: geteuid(2) and getegid(2) cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Submitter { uid, gid }
    }
}

/// The tenant a user without given ones submits under: their account's name, or `uid-N` for a user
/// id with no account. An error is the account database's (a directory server that did not
/// answer): the name is not known, and `uid-N` would put the user's jobs under another share.
pub fn own_tenant(uid: u32) -> std::io::Result<String> {
    Ok(account_name(uid)?.unwrap_or_else(|| tenant_without_account(uid)))
}

/// The tenant of user `uid`, who has no account: `uid-N`.
pub fn tenant_without_account(uid: u32) -> String {
    format!("uid-{uid}")
}

/// The tenant a client submits a job under: the one `given`, else its user's own ([`own_tenant`]);
/// the error says what to do.
pub fn tenant_to_submit(given: Option<String>, uid: u32) -> Result<String, String> {
    given.map_or_else(
        || {
            own_tenant(uid).map_err(|e| {
                format!(
                    "looking up your account's name, the tenant a job goes under unless given \
                     one: {e}; try again, or name a tenant with --tenant"
                )
            })
        },
        Ok,
    )
}

/// The name of user `uid`'s account, if it has one; an error when the account database did not
/// answer.
pub fn account_name(uid: u32) -> std::io::Result<Option<String>> {
    // SAFETY: getpwuid_r(3) with the buffer `lookup` gives it.
    let entry = lookup(|entry, buffer, found| unsafe {
        libc::getpwuid_r(uid, entry, buffer.as_mut_ptr().cast(), buffer.len(), found)
    })?;
    Ok(entry.map(|(entry, _strings)| {
        // SAFETY: on success pw_name points to a NUL-terminated string inside the buffer, which
        // lives beside the entry until this closure returns.
        let name = unsafe { CStr::from_ptr(entry.pw_name) };
        name.to_string_lossy().into_owned()
    }))
}

/// The user id of the account `name`, if there is one; an error when the account database did not
/// answer.
pub fn account_uid(name: &str) -> std::io::Result<Option<u32>> {
    let Ok(name) = CString::new(name) else {
        return Ok(None);
    };
    // SAFETY: getpwnam_r(3) with a NUL-terminated name and the buffer `lookup` gives it.
    let entry = lookup(|entry, buffer, found| unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            entry,
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            found,
        )
    })?;
    Ok(entry.map(|(entry, _strings)| entry.pw_uid))
}

/// Whether group `gid` is `uid`'s own (a user private group, as umask 002 systems make them): their
/// primary group, with no member but them. A directory that group may write is then theirs alone
/// to change, as OpenSSH's StrictModes allows on those systems. An error when the account
/// database did not answer: a "no" then would refuse a user's directory for good.
fn private_group(gid: u32, uid: u32) -> std::io::Result<bool> {
    // SAFETY: getpwuid_r(3) with the buffer `lookup` gives it.
    let Some((user, _user_strings)) = lookup(|entry: &mut libc::passwd, buffer, found| unsafe {
        libc::getpwuid_r(uid, entry, buffer.as_mut_ptr().cast(), buffer.len(), found)
    })?
    else {
        return Ok(false);
    };
    if user.pw_gid != gid {
        return Ok(false);
    }
    // SAFETY: getgrgid_r(3) with the buffer `lookup` gives it.
    let Some((group, _group_strings)) = lookup(|entry: &mut libc::group, buffer, found| unsafe {
        libc::getgrgid_r(gid, entry, buffer.as_mut_ptr().cast(), buffer.len(), found)
    })?
    else {
        return Ok(false);
    };
    // SAFETY: on success gr_mem is a NULL-terminated array of NUL-terminated strings, and pw_name
    // a NUL-terminated string, inside the buffers `lookup` returns alive beside the entries.
    unsafe {
        let owner = CStr::from_ptr(user.pw_name);
        let mut member = group.gr_mem;
        while !member.is_null() && !(*member).is_null() {
            if CStr::from_ptr(*member) != owner {
                return Ok(false);
            }
            member = member.add(1);
        }
    }
    Ok(true)
}

/// A password- or group-database entry found by `call` (getpwuid_r(3), getpwnam_r(3) or
/// getgrgid_r(3) given an entry, a buffer and where to say it found one), with the buffer its
/// strings live in: the buffer grows while the entry does not fit (an account with many fields
/// from LDAP, a large group), up to 1 MiB (then ERANGE). `None` where there is no such entry; an
/// error where the database did not answer (a directory server down, out of descriptors or
/// memory).
fn lookup<E>(
    mut call: impl FnMut(&mut E, &mut [u8], &mut *mut E) -> libc::c_int,
) -> std::io::Result<Option<(E, Vec<u8>)>> {
    let mut buffer = vec![0u8; 4096];
    loop {
        // SAFETY: the entries asked for (passwd, group) are plain C structs, for which all zeroes
        // is a valid out-parameter.
        let mut entry: E = unsafe { std::mem::zeroed() };
        let mut found: *mut E = std::ptr::null_mut();
        match call(&mut entry, &mut buffer, &mut found) {
            0 if !found.is_null() => return Ok(Some((entry, buffer))),
            // No such entry: glibc and musl say so with 0 and no entry. (The other C libraries'
            // ENOENT, ESRCH, EBADF or EPERM are, in glibc, a module's own error when its server is
            // unavailable: sssd's and nslcd's say ENOENT then.)
            0 => return Ok(None),
            libc::ERANGE if buffer.len() < 1 << 20 => buffer.resize(buffer.len() * 4, 0),
            e => return Err(std::io::Error::from_raw_os_error(e)),
        }
    }
}

/// Checks a program the command would start (an interpreter it names): see [`open_program`].
/// Returns where it is.
pub fn check_program(
    field: &'static str,
    program: &Path,
    run: &RunCommand,
    submitter: &Submitter,
) -> Result<PathBuf, Invalid> {
    open_program(field, program, run, submitter)
        .map(|checked| checked.path)
        .map_err(Invalid::from)
}

/// A program found and checked, held open: what runs is this descriptor, whatever happens at its path
/// afterwards.
#[derive(Debug)]
pub struct CheckedProgram {
    /// Where it was found (absolute, as named: links are not resolved, so that a virtualenv's
    /// interpreter keeps its name).
    pub path: PathBuf,
    /// The file itself, open path-only (`O_PATH`: never read through, and closed without a request
    /// to its file system, which may never answer one).
    pub file: OwnedFd,
    /// Whether it is a script (`#!`), which the kernel runs through the interpreter its first line
    /// names (checked too) and which must therefore be run by its path.
    pub script: bool,
}

/// How many links a path may cross, as the kernel allows.
const MAX_LINKS: u32 = 40;
/// How deep scripts may name scripts as their interpreters, as the kernel allows.
const MAX_INTERPRETERS: u32 = 4;

/// Finds a program the command would start (absolute, relative to its working directory, or on its
/// `PATH`) and checks it as sshd's StrictModes and sudo do, so that nobody but root and the submitter
/// can change what runs:
///
/// - every directory on its path, and every link crossed on the way (followed one by one, never by the
///   kernel), belongs to root or the submitter and is writable by nobody else (a directory writable
///   by others or by a group other than root's only if it is sticky, as `/tmp` is);
/// - the program is a regular, executable file of root's or the submitter's, writable by nobody else;
/// - a script's interpreter (its `#!` line) passes the same checks.
///
/// The file is returned open, path-only (a FIFO is refused, never waited on): the launcher runs that
/// descriptor, so a file swapped after the check never runs. What reading it takes (its first line)
/// is done on a thread with descriptors of its own: FUSE asks its server at every close of a file
/// open for reading, and a server that never answers would hold whoever closed it, or any child the
/// process started meanwhile (which inherits the descriptor and closes it at its `exec`).
pub fn open_program(
    field: &'static str,
    program: &Path,
    run: &RunCommand,
    submitter: &Submitter,
) -> Result<CheckedProgram, Refused> {
    let found = if program.components().count() > 1 || program.is_absolute() {
        Some(run.cwd.join(program))
    } else {
        // Without PATH, the C library searches its default one.
        let path = run.env.get("PATH").map_or("/bin:/usr/bin", String::as_str);
        let candidates = path.split(':').map(|dir| {
            run.cwd
                .join(if dir.is_empty() { "." } else { dir })
                .join(program)
        });
        // Where they may look, as their own search would, with their rights, name by name; a
        // directory whose file system does not answer is not passed over, since what it holds
        // may be what the search would find.
        let is_file = |candidate: &PathBuf| {
            let (dir, name) = walk_to(candidate, submitter, Walk::Reach)?;
            match stat_at(&dir, &name) {
                Ok(meta) => Ok(Entry::of(&meta).is_file()),
                Err(e) if unanswered(&e) => Err(NotPassed::io(candidate.display(), &e)),
                Err(_) => Ok(false),
            }
        };
        let search = || {
            for candidate in candidates {
                match is_file(&candidate) {
                    Ok(true) => return Ok(Some(candidate)),
                    Err(e) if e.unanswered => return Err(e),
                    Ok(false) | Err(_) => {}
                }
            }
            Ok(None)
        };
        with_rights(submitter, search).map_err(|why| why.refusal(field, ""))?
    };
    let Some(found) = found else {
        return Err(Invalid {
            field,
            problem: format!("{} is not on the submitted PATH", program.display()),
        }
        .into());
    };
    let mut checked = open_checked(&found, submitter, MAX_INTERPRETERS)
        .map_err(|why| why.refusal(field, format_args!("{}: ", found.display())))?;
    // Absolute, so that neither the program's name nor a worker started by it searches PATH again.
    if !checked.path.is_absolute() {
        checked.path = std::path::absolute(&checked.path).unwrap_or(checked.path);
    }
    Ok(checked)
}

/// Checks a directory as those on a program's path are checked ([`open_program`]): it, every
/// directory above it and every link on the way belong to root or `owner`, who may enter them, and
/// are writable by nobody else (a sticky directory excepted, as `/tmp` is). Nobody else can then
/// change what is at `path`.
pub fn check_directory(path: &Path, owner: &Submitter) -> Result<(), String> {
    with_rights(owner, || directory_checked(path, owner).map(drop))
        .map_err(|why: NotPassed| why.why)
}

/// [`check_directory`]'s checks, as [`as_submitter`] runs them; returns what the directory is.
fn directory_checked(path: &Path, owner: &Submitter) -> Result<libc::stat, NotPassed> {
    let shown = path.display();
    let entry = if path.parent().is_none() {
        open_at(
            libc::AT_FDCWD,
            OsStr::new("/"),
            libc::O_PATH | libc::O_DIRECTORY,
        )
    } else {
        let (dir, name) = walk_to(path, owner, Walk::Program)?;
        open_at(dir.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW)
    }
    .map_err(|e| NotPassed::io(&shown, &e))?;
    let meta = stat(&entry).map_err(|e| NotPassed::io(&shown, &e))?;
    if meta.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(format!("{shown} is {}, not a directory", kind(meta.st_mode)).into());
    }
    check_dir(&entry, path, owner, Walk::Program)?;
    Ok(meta)
}

/// The dynamic loader's search path: the one loader variable a submission may set without the
/// operator's leave (`gangway serve --allow-env`), its directories checked
/// ([`check_library_path`]). CUDA's images set it, and `elastic-run --daemon` sends the
/// environment it runs in.
pub const LIBRARY_PATH_VAR: &str = "LD_LIBRARY_PATH";

/// Checks an `LD_LIBRARY_PATH` that `submitter`'s job would run with, so that nobody else can add,
/// remove or rename what its programs load from those directories, as for the programs themselves
/// ([`open_program`]; what the directories hold, files and subdirectories, is root's or the
/// submitter's to keep, as the files a program opens are):
///
/// - every entry is an absolute path of at most `PATH_MAX` bytes, without control characters or the
///   names the loader expands (`$ORIGIN`, `$LIB`, `$PLATFORM`); an empty entry (a `:` at an end, or
///   two in a row) is refused, since glibc's loader reads it as the working directory of the
///   program when it loads a library (an empty value is no path at all, as for the loader);
/// - each directory passes [`check_directory`]'s checks and, since the libraries in it are loaded
///   as they are found, is writable by nobody else even where sticky;
/// - a directory that is not there passes where nobody else could make it: the nearest directory
///   above it that is there passes the same checks, and no `..` follows it (CUDA's images name
///   `/usr/local/nvidia/lib:/usr/local/nvidia/lib64`, often with only one of them there).
///
/// Says which entry is refused, and why.
pub fn check_library_path(value: &str, submitter: &Submitter) -> Result<(), Refused> {
    const FIELD: &str = "run.env";
    // The loader ignores an empty one, as if it were not set.
    if value.is_empty() {
        return Ok(());
    }
    // glibc's loader splits it at both.
    for entry in value.split([':', ';']) {
        let refused = |why: &str| {
            invalid(FIELD, format!("{LIBRARY_PATH_VAR} entry {entry:?} {why}"))
                .map_err(Refused::from)
        };
        if entry.is_empty() {
            return invalid(
                FIELD,
                format!(
                    "{LIBRARY_PATH_VAR} has an empty entry (a ':' at an end, or two in a row), \
                     which the loader reads as the program's working directory: remove it"
                ),
            )
            .map_err(Refused::from);
        }
        if !entry.starts_with('/') {
            return refused("is not an absolute path");
        }
        if entry.contains('$') {
            return refused("names what the loader expands ($ORIGIN, $LIB, $PLATFORM)");
        }
        // musl's loader splits at a newline too.
        if entry.chars().any(char::is_control) {
            return refused("holds a control character");
        }
        if entry.len() > libc::PATH_MAX as usize {
            return refused("is longer than a path may be");
        }
    }
    // Every directory on one thread with the submitter's rights, in order.
    with_rights(submitter, || {
        value.split([':', ';']).try_for_each(|entry| {
            library_dir_checked(Path::new(entry), submitter).map_err(|why| {
                why.of(format_args!(
                    "{LIBRARY_PATH_VAR} entry {entry:?} is refused: "
                ))
            })
        })
    })
    .map_err(|why: NotPassed| why.refusal(FIELD, ""))
}

/// Whether the operator's `gangway serve --allow-env` patterns (`NAME`, or `PREFIX*` for a prefix)
/// name the variable `name`.
pub fn env_allowed_by(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => a == name,
    })
}

/// [`check_library_path`]'s checks of one directory, as [`as_submitter`] runs them.
fn library_dir_checked(path: &Path, submitter: &Submitter) -> Result<(), NotPassed> {
    // Where nothing is there, what could make it is the nearest directory above that is; "/" is.
    let mut there = path;
    while let Some(above) = there.parent()
        && entry_at(there, submitter)?.is_none()
    {
        there = above;
    }
    // `..` after a directory that is not there would lead wherever that is made to lead (after one
    // that is, it is walked as the kernel walks it, and checked on the way).
    let beyond = path.strip_prefix(there).ok();
    if beyond.is_some_and(|b| b.components().any(|c| c == std::path::Component::ParentDir)) {
        return Err(format!(
            "names `..` after {}, which is not there: name the directory itself",
            path.display()
        )
        .into());
    }
    let checked = directory_checked(there, submitter).and_then(|meta| {
        let what = format!("the directory {}", there.display());
        check_writers(&meta, &what)
    });
    if there == path {
        return checked;
    }
    checked.map_err(|why| why.of(format_args!("{} is not there, and ", path.display())))
}

/// [`open_program`]'s checks of the file at `path`, and of its interpreter while `depth` allows.
fn open_checked(
    path: &Path,
    submitter: &Submitter,
    depth: u32,
) -> Result<CheckedProgram, NotPassed> {
    let found = with_rights(submitter, || find_program(path, submitter))?;
    let interpreter = match found.head {
        Head::Script(interpreter) => Some(interpreter),
        Head::Binary => None,
        // A file its submitter may not read runs all the same (root's 0711 binary), unless it is
        // a script, whose interpreter would read it as them and fail, and which would be run
        // through an interpreter nobody checked: looked at here, as this process.
        Head::Unreadable => {
            if let Head::Script(_) = read_head(&found)? {
                return Err("is a script its submitter may not read, so it could not run".into());
            }
            None
        }
    };
    if let Some(interpreter) = &interpreter {
        // The kernel looks for it from the process's working directory, which is not where it
        // would be checked.
        if interpreter.is_relative() {
            return Err(format!(
                "names a relative interpreter ({}), which the kernel looks for from the \
                 directory it runs in: give its absolute path",
                interpreter.display()
            )
            .into());
        }
        if depth == 0 {
            return Err("names scripts as interpreters too deeply".into());
        }
        open_checked(interpreter, submitter, depth - 1)
            .map_err(|why| why.of(format_args!("its interpreter {}: ", interpreter.display())))?;
    }
    Ok(CheckedProgram {
        path: path.to_owned(),
        file: found.link,
        script: interpreter.is_some(),
    })
}

/// A program found where its submitter could reach it.
struct Found {
    /// The directory that holds it, open.
    dir: OwnedFd,
    /// Its name there.
    name: OsString,
    /// It, open without being read (`O_PATH`).
    link: OwnedFd,
    /// What it was when checked.
    meta: libc::stat,
    /// What its first line says, as its submitter read it.
    head: Head,
}

/// What a program's first line says ([`read_head`]).
enum Head {
    /// A script, run through this interpreter.
    Script(PathBuf),
    /// Not a script.
    Binary,
    /// It may not be read.
    Unreadable,
}

/// Reads the first line of `found` with this thread's rights, on a thread whose descriptors are its
/// own (`unshare(CLONE_FILES)`). A file open for reading on a FUSE mount is closed with a request
/// its server may never answer: in the process's own table, it would be closed so by whichever
/// thread drops it (the executor's, at a launch) and by every child the process starts while it is
/// open (inherited, closed at their `exec`, which then never returns, nor the spawn waiting for
/// it). On a thread of its own, only that thread waits. The path-only descriptors the checks keep
/// are closed without a request.
fn read_head(found: &Found) -> Result<Head, NotPassed> {
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("gangway-check".into())
            .spawn_scoped(scope, || {
                // SAFETY: unshare(2) of this thread's descriptor table, which it then uses alone.
                // A container's seccomp profile may refuse it (Docker's, without CAP_SYS_ADMIN):
                // the file is then read in the process's table. Its users cannot mount a FUSE file
                // system there either, so nothing can hold the close.
                if unsafe { libc::unshare(libc::CLONE_FILES) } == 0 {
                    // A copy of the process's table: all but the directory closed, so that a read
                    // that never returns keeps none of the daemon's files open with it.
                    close_all_but(found.dir.as_raw_fd());
                } else {
                    let e = std::io::Error::last_os_error();
                    // Out of memory or descriptors for the copy: this machine's.
                    if !matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) {
                        return Err(NotPassed::no_thread(
                            "cannot read it apart from the daemon's files",
                            &e,
                        ));
                    }
                }
                let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
                match open_at(found.dir.as_raw_fd(), &found.name, flags) {
                    Ok(file) => {
                        let same = same_file(&file, &found.meta);
                        if !same.map_err(|e| NotPassed::io("looking at it again", &e))? {
                            return Err("changed while it was checked".into());
                        }
                        let head = shebang(&file).map_err(|e| NotPassed::io("reading it", &e))?;
                        Ok(head.map_or(Head::Binary, Head::Script))
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EACCES) => Ok(Head::Unreadable),
                    Err(e) => Err(NotPassed::io("reading it", &e)),
                }
            })
            .map_err(|e| NotPassed::no_thread("cannot start a thread to read it", &e))?;
        reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Closes every descriptor of this thread's own descriptor table but `keep` (see [`read_head`]).
fn close_all_but(keep: RawFd) {
    let keep_u32 = u32::try_from(keep).unwrap_or(0);
    // SAFETY: close_range(2) as a raw system call, on this thread's own table, whose descriptors
    // nothing else uses.
    let closed =
        |from: u32, to: u32| unsafe { libc::syscall(libc::SYS_close_range, from, to, 0u32) == 0 };
    if !((keep_u32 == 0 || closed(0, keep_u32 - 1)) && closed(keep_u32 + 1, u32::MAX)) {
        // Kernels before 5.9.
        close_listed_but(keep);
    }
}

/// [`close_all_but`] without `close_range`: this table's descriptors, as /proc lists this thread's
/// (the listing's own is closed as it ends, and closing it again fails harmlessly); without /proc,
/// every number below the process's limit on open files.
fn close_listed_but(keep: RawFd) {
    let Ok(listing) = std::fs::read_dir("/proc/thread-self/fd") else {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit(2) into a struct of its type.
        let most = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            RawFd::try_from(limit.rlim_cur).unwrap_or(RawFd::MAX)
        } else {
            1024
        };
        for fd in (0..most).filter(|&fd| fd != keep) {
            // SAFETY: close(2) of a descriptor number of this thread's own table.
            unsafe { libc::close(fd) };
        }
        return;
    };
    let open: Vec<RawFd> = listing
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open.into_iter().filter(|&fd| fd != keep) {
        // SAFETY: close(2) of a descriptor of this thread's own table.
        unsafe { libc::close(fd) };
    }
}

/// Walks to the program at `path` and checks it (see [`open_program`]), as [`as_submitter`] runs
/// it: with their rights.
fn find_program(path: &Path, submitter: &Submitter) -> Result<Found, NotPassed> {
    let (dir, name) = walk_to(path, submitter, Walk::Program)?;
    let at = |flags| open_at(dir.as_raw_fd(), &name, flags);
    let link = at(libc::O_PATH | libc::O_NOFOLLOW).map_err(|e| NotPassed::io("opening it", &e))?;
    let meta = stat(&link).map_err(|e| NotPassed::io("looking at it", &e))?;
    check_owner(&meta, submitter, "the program")?;
    if meta.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("is {}, not an executable file", kind(meta.st_mode)).into());
    }
    if meta.st_mode & 0o111 == 0 {
        return Err("is not an executable file".into());
    }
    let runs = may_run(&dir, &name, &meta, submitter);
    if !runs.map_err(|e| NotPassed::io("asking who may run it", &e))? {
        return Err(format!("is not a file uid {} may run", submitter.uid).into());
    }
    check_writers(&meta, "the program")?;
    let mut found = Found {
        dir,
        name,
        link,
        meta,
        head: Head::Unreadable,
    };
    // Read to see whether it is a script (which must be readable to run; a binary need not be):
    // the same file, and it runs from the path-only descriptor above either way.
    found.head = read_head(&found)?;
    Ok(found)
}

/// Whether `file` is the file `meta` describes.
fn same_file(file: &OwnedFd, meta: &libc::stat) -> std::io::Result<bool> {
    stat(file).map(|again| (again.st_dev, again.st_ino) == (meta.st_dev, meta.st_ino))
}

/// Whether the directory `dir` is one this thread may enter: looking up `.` in it asks the kernel
/// (every directory a path walk passes is checked so, ACLs included).
fn may_enter(dir: &OwnedFd) -> bool {
    !open_at(dir.as_raw_fd(), OsStr::new("."), libc::O_PATH)
        .is_err_and(|e| e.raw_os_error() == Some(libc::EACCES))
}

/// Whether this thread may run the file `name` in `dir` (`meta`), as the kernel decides it
/// (`faccessat2`, which checks this thread's file-system ids with `AT_EACCESS`). Kernels before
/// 5.8 lack it, and the C library's stand-in decides by the effective uid, root's: there the mode
/// bits are read for the submitter, as owner, group or other (the kernel still decides at launch).
/// An error that says nothing of the file ([`unanswered`]) is given back.
fn may_run(
    dir: &OwnedFd,
    name: &OsStr,
    meta: &libc::stat,
    submitter: &Submitter,
) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(name) = CString::new(name.as_bytes()) else {
        return Ok(false);
    };
    // SAFETY: faccessat2(2) as a raw system call, with an open directory and a NUL-terminated name.
    let asked = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::X_OK,
            libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if asked == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if unanswered(&e) {
        return Err(e);
    }
    // EPERM: a seccomp profile older than the call (X_OK never answers it otherwise).
    if !matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
        return Ok(false);
    }
    let shift = if submitter.uid == 0 {
        return Ok(true);
    } else if meta.st_uid == submitter.uid {
        6
    } else if meta.st_gid == submitter.gid {
        3
    } else {
        0
    };
    Ok((meta.st_mode >> shift) & 1 == 1)
}

/// Runs `check` with `submitter`'s rights on the file system where this process is root and they are
/// not: on a thread of its own whose file-system user and group are theirs, with no other group
/// (their jobs run so) and no capability, so that the kernel decides every permission on the way,
/// ACLs included, and nothing of what root could reach and they could not is opened or told of.
/// The identity is set by raw system calls, which change the calling thread's alone (the C
/// library's `setgroups` would change every thread's); the capabilities are dropped after it,
/// since a new file-system uid drops only the file-system ones (and not even those under
/// `SECBIT_NO_SETUID_FIXUP`), while `CAP_SYS_PTRACE` would open other users' `/proc` entries.
/// The thread ends with the check. Elsewhere `check` runs here, with this process's rights, which
/// are its jobs'. Refuses (rather than checks as root) where no such thread can be made.
pub fn as_submitter<T: Send>(
    submitter: &Submitter,
    check: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    with_rights(submitter, || check().map_err(NotPassed::from)).map_err(|not: NotPassed| not.why)
}

/// Whether this process, if root, can take another user's rights to check their paths
/// ([`as_submitter`]): the reason it cannot otherwise (confined without CAP_SETUID or CAP_SETGID),
/// for a daemon to say at its start. Until it can, another user's submissions are answered "submit
/// it again" (503) and their launches are put off, as when the machine is short of threads.
pub fn can_take_rights() -> Result<(), String> {
    let nobody = Submitter {
        uid: 65534,
        gid: 65534,
    };
    with_rights(&nobody, || Ok::<_, NotPassed>(())).map_err(|why| why.why)
}

/// [`as_submitter`], for checks that tell what they found from what did not answer: where no thread
/// with the submitter's rights can be made, that says nothing of their paths either.
fn with_rights<T: Send, E: Send + From<NotPassed>>(
    submitter: &Submitter,
    check: impl FnOnce() -> Result<T, E> + Send,
) -> Result<T, E> {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 || submitter.uid == 0 {
        return check();
    }
    let Submitter { uid, gid } = *submitter;
    std::thread::scope(|scope| {
        let checker = std::thread::Builder::new()
            .name("gangway-check".into())
            .spawn_scoped(scope, move || {
                // A daemon that cannot take the rights it needs (confined without CAP_SETGID or
                // CAP_SETUID) says so, once per check: the trouble is this machine's, not the
                // submitter's, whose command waits for an operator to fix it rather than fails.
                take_rights(uid, gid).map_err(NotPassed::host)?;
                check()
            })
            .map_err(|e| {
                NotPassed::no_thread(format_args!("a thread to check uid {uid}'s paths"), &e)
            })?;
        checker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Makes this thread's file-system identity `uid` and `gid`, with no other group and no
/// capability (see [`as_submitter`]); says why not where one step did not hold.
fn take_rights(uid: u32, gid: u32) -> Result<(), String> {
    /// `struct __user_cap_header_struct`.
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: i32,
    }
    /// `struct __user_cap_data_struct`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    /// `_LINUX_CAPABILITY_VERSION_3`: two data structs, 64 capabilities.
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let failed = |what: &str| {
        Err(format!(
            "cannot take uid {uid}'s rights to check its paths ({what}): {}",
            std::io::Error::last_os_error()
        ))
    };
    // SAFETY: setgroups(2), setfsgid(2) and setfsuid(2) as raw system calls change only this
    // thread's credentials; an id of -1 changes nothing and returns the current one.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0 {
            return failed("setgroups");
        }
        libc::syscall(libc::SYS_setfsgid, gid);
        if libc::syscall(libc::SYS_setfsgid, u32::MAX) != i64::from(gid) {
            return failed("setfsgid");
        }
        libc::syscall(libc::SYS_setfsuid, uid);
        if libc::syscall(libc::SYS_setfsuid, u32::MAX) != i64::from(uid) {
            return failed("setfsuid");
        }
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut caps = [CapData::default(); 2];
    // SAFETY: capset(2) and capget(2) as raw system calls, on this thread (pid 0), with a version 3
    // header and the two data structs it reads and writes.
    unsafe {
        if libc::syscall(libc::SYS_capset, &mut header, caps.as_ptr()) != 0 {
            return failed("capset");
        }
        caps[0].effective = u32::MAX;
        if libc::syscall(libc::SYS_capget, &mut header, caps.as_mut_ptr()) != 0
            || caps.iter().any(|c| c.effective != 0)
        {
            return failed("capget");
        }
    }
    Ok(())
}

/// Whether `submitter` may reach `path`: enter every directory above its last name, as a process
/// of theirs would, links followed one name at a time (the directories on a link's way count too).
/// Says which directory stops them. A root daemon asks this before it says anything else of a path
/// a submitter named, so that it tells them nothing of paths they could not look up themselves.
pub fn reachable_by(path: &Path, submitter: &Submitter) -> Result<(), String> {
    entry_for(path, submitter)
        .map(|_| ())
        .map_err(|why| why.why)
}

/// What a name is, as [`look_up`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    mode: u32,
    uid: u32,
}

impl Entry {
    fn of(meta: &libc::stat) -> Entry {
        Entry {
            mode: meta.st_mode,
            uid: meta.st_uid,
        }
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    /// Whether it is a symbolic link.
    pub fn is_link(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    /// Whose it is.
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

/// What `path`'s last name is (a link itself, not what it points to), or `None` where nothing is
/// there, looked up as `submitter` would (with their rights, see [`as_submitter`]) and name by name
/// as [`reachable_by`] walks, so that nothing is learnt through a link the kernel would follow
/// (`/proc/self/cwd`: the daemon's own directory). A refusal of the request's `field` says which
/// directory stops them, or that the file system did not answer ([`Refused::unanswered`]).
pub fn look_up(
    field: &'static str,
    path: &Path,
    submitter: &Submitter,
) -> Result<Option<Entry>, Refused> {
    entry_for(path, submitter).map_err(|why| why.refusal(field, ""))
}

/// [`look_up`]'s and [`reachable_by`]'s walk with `submitter`'s rights; why it stopped names `path`
/// first where it was a directory or a link on the way that stopped it.
fn entry_for(path: &Path, submitter: &Submitter) -> Result<Option<Entry>, NotPassed> {
    with_rights(submitter, || entry_at(path, submitter)).map_err(|why: NotPassed| {
        let named = path.display().to_string();
        let of_itself =
            (why.why.strip_prefix(named.as_str())).is_some_and(|rest| rest.starts_with(':'));
        if of_itself {
            why
        } else {
            why.of(format!("{named}: "))
        }
    })
}

/// [`entry_for`]'s walk, on the thread with the submitter's rights.
fn entry_at(path: &Path, submitter: &Submitter) -> Result<Option<Entry>, NotPassed> {
    let (dir, name) = match path.parent() {
        Some(_) => walk_to(path, submitter, Walk::Name)?,
        None => (
            open_at(libc::AT_FDCWD, OsStr::new("/"), libc::O_PATH)
                .map_err(|e| NotPassed::io("/", &e))?,
            OsString::from("."),
        ),
    };
    match stat_at(&dir, &name) {
        Ok(meta) => Ok(Some(Entry::of(&meta))),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(NotPassed::io(path.display(), &e)),
    }
}

/// What [`walk_to`] checks of the directories and links on its way.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// A program's way: each directory and link root's or the submitter's, writable by nobody
    /// else, and each directory one the submitter may enter.
    Program,
    /// Only that the submitter may enter each directory (a link at the end followed too).
    Reach,
    /// As `Reach`, up to the last name, which is left as it is (a link not followed, a name that
    /// may not be there; where a directory on the way is not there, its name is given instead).
    Name,
}

/// The interpreter a script's first line names (`#!/usr/bin/python3 -u`: `/usr/bin/python3`).
/// A read that fails is an error: what the kernel would run the file through is not known.
fn shebang(file: &OwnedFd) -> std::io::Result<Option<PathBuf>> {
    let mut head = [0u8; 256];
    // SAFETY: pread(2) into a buffer of the length given, on an open descriptor.
    let n = unsafe { libc::pread(file.as_raw_fd(), head.as_mut_ptr().cast(), head.len(), 0) };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    let interpreter = head[..n]
        .strip_prefix(b"#!")
        .map(|line| &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())])
        .and_then(|line| {
            line.split(|b| b.is_ascii_whitespace())
                .find(|word| !word.is_empty())
        });
    use std::os::unix::ffi::OsStrExt;
    Ok(interpreter.map(|i| PathBuf::from(std::ffi::OsStr::from_bytes(i))))
}

/// Follows `path` from `/` one name at a time, checking each directory and link on the way; returns
/// the directory that holds its last name, open, and that name.
fn walk_to(
    path: &Path,
    submitter: &Submitter,
    walk: Walk,
) -> Result<(OwnedFd, OsString), NotPassed> {
    use std::path::Component;
    let root = open_at(
        libc::AT_FDCWD,
        OsStr::new("/"),
        libc::O_PATH | libc::O_DIRECTORY,
    )
    .map_err(|e| NotPassed::io("/", &e))?;
    check_dir(&root, Path::new("/"), submitter, walk)?;
    // The directories walked into, from the root, with their names for messages.
    let mut dirs = vec![(root, PathBuf::from("/"))];
    let mut names: VecDeque<OsString> = VecDeque::new();
    let push_front = |names: &mut VecDeque<OsString>, path: &Path| {
        let parts: Vec<OsString> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_owned()),
                Component::ParentDir => Some(OsString::from("..")),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
            })
            .collect();
        for part in parts.into_iter().rev() {
            names.push_front(part);
        }
    };
    push_front(&mut names, path);
    let mut links = 0;
    while let Some(name) = names.pop_front() {
        // Left as it is, `..` too (the kernel takes it from the directory it is in).
        if names.is_empty() && walk == Walk::Name {
            let (dir, _) = dirs.pop().expect("the root stays");
            return Ok((dir, name));
        }
        if name == ".." {
            if dirs.len() > 1 {
                dirs.pop();
            }
            continue;
        }
        let (dir, dir_name) = dirs.last().expect("the root stays");
        let here = dir_name.join(&name);
        let entry = match open_at(dir.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW) {
            Ok(entry) => entry,
            // Nothing there, on the way to a name looked up as it is: what it is, is nothing.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && walk == Walk::Name => {
                let (dir, _) = dirs.pop().expect("the root stays");
                return Ok((dir, name));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(format!("{} does not exist", here.display()).into());
            }
            Err(e) => return Err(NotPassed::io(here.display(), &e)),
        };
        let meta = stat(&entry).map_err(|e| NotPassed::io(here.display(), &e))?;
        match meta.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                if walk == Walk::Program {
                    check_owner(&meta, submitter, &format!("the link {}", here.display()))?;
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!("{}: too many links", path.display()).into());
                }
                let target = read_link_at(dir.as_raw_fd(), &name)
                    .map_err(|e| NotPassed::io(here.display(), &e))?;
                if target.is_absolute() {
                    dirs.truncate(1);
                }
                push_front(&mut names, &target);
            }
            // The last name: the caller checks what it is.
            _ if names.is_empty() => {
                let (dir, _) = dirs.pop().expect("the root stays");
                return Ok((dir, name));
            }
            libc::S_IFDIR => {
                check_dir(&entry, &here, submitter, walk)?;
                dirs.push((entry, here));
            }
            mode => {
                return Err(
                    format!("{} is {}, not a directory", here.display(), kind(mode)).into(),
                );
            }
        }
    }
    // Only a `..` at the end leaves the walk in a directory: where it is, by its parent and its
    // name there.
    if dirs.len() >= 2 {
        let (_, here) = dirs.pop().expect("two");
        let (parent, _) = dirs.pop().expect("one");
        if let Some(name) = here.file_name() {
            return Ok((parent, name.to_owned()));
        }
    }
    Err(format!("{} names a directory, not a program", path.display()).into())
}

/// Checks a directory on a program's path (or, for [`Walk::Reach`] and [`Walk::Name`], only that
/// the submitter may enter it); none under /proc is entered.
fn check_dir(
    dir: &OwnedFd,
    name: &Path,
    submitter: &Submitter,
    walk: Walk,
) -> Result<(), NotPassed> {
    let what = format!("the directory {}", name.display());
    // What is in /proc names what processes hold (their directories, their open files), not places,
    // and the kernel lets every thread of a process into that process's own entries, whatever its
    // ids: the daemon's, for a thread checking as the submitter.
    if on_proc(dir) {
        return Err(format!(
            "{what} is in /proc, which names processes, not places: it is not walked into"
        )
        .into());
    }
    // Before anything else is said of it or of what is in it (a root daemon walks with the
    // submitter's rights, `as_submitter`).
    if !may_enter(dir) {
        return Err(format!("uid {} may not enter {what}", submitter.uid).into());
    }
    if walk != Walk::Program {
        return Ok(());
    }
    let meta = stat(dir).map_err(|e| NotPassed::io(name.display(), &e))?;
    check_owner(&meta, submitter, &what)?;
    // A sticky directory lets its users replace only their own entries (which are checked in turn).
    if meta.st_mode & libc::S_ISVTX == 0 {
        check_writers(&meta, &what)?;
    }
    Ok(())
}

/// Refuses an entry that belongs to neither root nor the submitter.
fn check_owner(meta: &libc::stat, submitter: &Submitter, what: &str) -> Result<(), NotPassed> {
    if meta.st_uid == 0 || meta.st_uid == submitter.uid {
        return Ok(());
    }
    Err(format!(
        "{what} belongs to uid {}: a program and the directories and links on its path must \
         belong to root or to the submitter (uid {})",
        meta.st_uid, submitter.uid
    )
    .into())
}

/// Refuses an entry that someone other than its owner (and root's group) may write.
fn check_writers(meta: &libc::stat, what: &str) -> Result<(), NotPassed> {
    let mode = meta.st_mode & 0o7777;
    let group_writes = mode & 0o020 != 0 && meta.st_gid != 0;
    let by = if mode & 0o002 != 0 {
        "everyone".to_owned()
    } else if group_writes
        && !private_group(meta.st_gid, meta.st_uid).map_err(|e| NotPassed {
            why: format!(
                "{what} is writable by group {} (mode {mode:o}), and whether that group is its \
                 owner's alone could not be looked up: {e}",
                meta.st_gid
            ),
            // The account database did not answer, unless the group is past any buffer.
            unanswered: e.raw_os_error() != Some(libc::ERANGE),
            host: out_of_descriptors(&e),
        })?
    {
        format!("group {}", meta.st_gid)
    } else {
        return Ok(());
    };
    Err(format!("{what} is writable by {by} (mode {mode:o}): they could change what runs").into())
}

/// What kind of file a mode is, for messages.
fn kind(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        libc::S_IFLNK => "a link",
        libc::S_IFREG => "a regular file",
        _ => "a special file",
    }
}

fn open_at(dir: RawFd, name: &OsStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: openat(2) with a NUL-terminated name; the descriptor returned is ours alone.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: openat(2) just returned this open descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The entry `name` in `dir`, not followed if it is a link.
fn stat_at(dir: &OwnedFd, name: &OsStr) -> std::io::Result<libc::stat> {
    use std::os::unix::ffi::OsStrExt;
    let name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: an all-zero stat is a valid value for fstatat(2) to overwrite.
    let mut meta: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat(2) on an open directory, a NUL-terminated name, into a stat of ours.
    let found = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut meta,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if found != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(meta)
}

/// Whether `dir` is on a proc file system.
fn on_proc(dir: &OwnedFd) -> bool {
    // SAFETY: an all-zero statfs is a valid value for fstatfs(2) to overwrite.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs(2) on an open descriptor into a statfs of ours.
    let read = unsafe { libc::fstatfs(dir.as_raw_fd(), &mut fs) } == 0;
    read && fs.f_type == libc::PROC_SUPER_MAGIC
}

fn stat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for fstat(2) to overwrite.
    let mut meta: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat(2) on an open descriptor into a stat of ours.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut meta) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(meta)
}

fn read_link_at(dir: RawFd, name: &OsStr) -> std::io::Result<PathBuf> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat(2) into a buffer of the length given, with a NUL-terminated name.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    buf.truncate(n);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn run_in(cwd: &Path) -> RunCommand {
        RunCommand {
            args: Vec::new(),
            cwd: cwd.to_owned(),
            env: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
            log: None,
            user: None,
        }
    }

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_library_path_names_only_directories_nobody_else_can_change() {
        let dir = tempfile::tempdir().unwrap();
        mode(dir.path(), 0o755);
        let me = Submitter::this_process();
        let check = |value: &str| check_library_path(value, &me).map_err(|e| e.to_string());
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        let shown = lib.display().to_string();
        // Its own, root's, and ones not there whose nearest directory is either: nobody else can
        // put a library there. Both separators.
        check(&format!(
            "{shown}:/usr/lib;{shown}/gone/deeper:/usr/no-such-dir"
        ))
        .unwrap();
        // A link is followed, and what it leads to checked.
        symlink(&lib, dir.path().join("link")).unwrap();
        check(&format!("{}/link", dir.path().display())).unwrap();
        // Writable by everyone, sticky or not: the libraries in it are loaded unchecked (a
        // program's directory may be sticky, since the program itself is checked).
        for open in [0o777, 0o1777] {
            mode(&lib, open);
            for (value, says) in [
                (
                    shown.clone(),
                    format!("the directory {shown} is writable by everyone"),
                ),
                (
                    format!("{shown}/gone"),
                    format!(
                        "{shown}/gone is not there, and the directory {shown} is writable by everyone"
                    ),
                ),
                (
                    format!("/usr/lib:{}/link", dir.path().display()),
                    format!("{}/link is writable by everyone", dir.path().display()),
                ),
            ] {
                let e = check(&value).unwrap_err();
                assert!(e.contains(&says), "{value}: {e}");
            }
        }
        assert!(check("/tmp").unwrap_err().contains("writable by everyone"));
        // An empty value is none, for the loader too.
        check("").unwrap();
        // `..` after directories that are there is walked as the kernel walks it (oneAPI's
        // `env/../lib`), also where what follows is not there.
        mode(&lib, 0o755);
        std::fs::create_dir(lib.join("env")).unwrap();
        check(&format!("{shown}/env/..:{shown}/env/../gone")).unwrap();
        mode(&lib, 0o777);
        let e = check(&format!("{shown}/env/../gone")).unwrap_err();
        assert!(e.contains("writable by everyone"), "{e}");
        mode(&lib, 0o755);
        mode(&lib, 0o755);
        // What the loader reads from wherever a program is, or expands, is refused by its entry.
        for (value, says) in [
            (format!("{shown}:"), "an empty entry"),
            (format!("::{shown}"), "an empty entry"),
            ("lib".to_owned(), "\"lib\" is not an absolute path"),
            ("$ORIGIN/lib".to_owned(), "not an absolute path"),
            (
                "/usr/$LIB".to_owned(),
                "\"/usr/$LIB\" names what the loader expands",
            ),
            // Once `gone` is made, this leads wherever it leads.
            (format!("{shown}/gone/../../x"), "names `..` after"),
            (format!("/usr/lib\n{shown}"), "holds a control character"),
            (
                format!("/{}", "x/".repeat(4096)),
                "is longer than a path may be",
            ),
        ] {
            let e = check(&value).unwrap_err();
            assert!(e.contains(says), "{value}: {e}");
        }
        // Another user's directory: only root may give one away.
        if me.uid == 0 {
            std::os::unix::fs::chown(&lib, Some(65534), None).unwrap();
            let e = check(&shown).unwrap_err();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
    }

    /// A directory `dir/name` with an executable `prog` of this user's in it.
    fn with_program(dir: &Path, name: &str, body: &str) -> PathBuf {
        let sub = dir.join(name);
        std::fs::create_dir(&sub).unwrap();
        let prog = sub.join("prog");
        std::fs::write(&prog, body).unwrap();
        mode(&prog, 0o755);
        prog
    }

    #[test]
    fn every_directory_and_link_on_a_programs_path_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let me = Submitter::this_process();
        let run = run_in(dir.path());
        let check = |p: &Path| open_program("run.args", p, &run, &me).map(|c| c.path);
        let prog = with_program(dir.path(), "bin", "\x7fELF");
        assert_eq!(check(&prog).unwrap(), prog);
        // The directory it is in, writable by everyone: anyone could swap it.
        mode(prog.parent().unwrap(), 0o777);
        let e = check(&prog).unwrap_err();
        assert!(
            e.invalid
                .problem
                .contains("bin is writable by everyone (mode 777)"),
            "{e}"
        );
        // Unless it is sticky, as /tmp is: then only the owner of an entry may replace it.
        mode(prog.parent().unwrap(), 0o1777);
        assert!(check(&prog).is_ok());
        // A group of someone else's that may write: the same.
        mode(prog.parent().unwrap(), 0o775);
        // Only root may give files away: only then are these tried.
        if me.uid == 0 {
            std::os::unix::fs::chown(prog.parent().unwrap(), None, Some(65534)).unwrap();
            let e = check(&prog).unwrap_err();
            assert!(e.invalid.problem.contains("writable by group 65534"), "{e}");
            // A directory of another user's, on the way.
            mode(prog.parent().unwrap(), 0o755);
            std::os::unix::fs::chown(prog.parent().unwrap(), Some(65534), None).unwrap();
            let e = check(&prog).unwrap_err();
            assert!(e.invalid.problem.contains("belongs to uid 65534"), "{e}");
        }
        // Links are followed one by one, each checked where it is: a link in an open directory to a
        // program in a safe one is refused for the link's directory.
        let safe = with_program(dir.path(), "safe", "\x7fELF");
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        symlink(&safe, open.join("python")).unwrap();
        assert!(check(&open.join("python")).is_ok());
        mode(&open, 0o777);
        let e = check(&open.join("python")).unwrap_err();
        assert!(
            e.invalid.problem.contains("open is writable by everyone"),
            "{e}"
        );
        // ... and a safe link to a program in an open directory, for the program's.
        mode(&open, 0o755);
        let unsafe_prog = with_program(&open, "loose", "\x7fELF");
        mode(unsafe_prog.parent().unwrap(), 0o777);
        symlink(&unsafe_prog, safe.parent().unwrap().join("python")).unwrap();
        let e = check(&safe.parent().unwrap().join("python")).unwrap_err();
        assert!(
            e.invalid.problem.contains("loose is writable by everyone"),
            "{e}"
        );
        // A relative link with `..` resolves from where it is.
        symlink("../safe/prog", open.join("relative")).unwrap();
        assert!(check(&open.join("relative")).is_ok());
    }

    /// A directory anyone may enter, `nobody` as a submitter, and a command run there: for the tests
    /// of a root daemon walking for another user (only root can make such a tree; CI runs as root).
    fn roots_tree_for_nobody() -> Option<(tempfile::TempDir, Submitter, RunCommand)> {
        if Submitter::this_process().uid != 0 {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        mode(dir.path(), 0o755);
        let nobody = Submitter {
            uid: 65534,
            gid: 65534,
        };
        let run = run_in(dir.path());
        Some((dir, nobody, run))
    }

    /// A root daemon that cannot take a submitter's rights (confined without CAP_SETGID, as a
    /// container may run it) cannot check their paths: that is its own trouble, put off as this
    /// machine's (`host`), not a refusal that would fail their job. Root only, as CI runs.
    #[test]
    fn a_daemon_that_cannot_take_a_submitters_rights_says_the_trouble_is_its_own() {
        let Some((dir, nobody, _)) = roots_tree_for_nobody() else {
            return;
        };
        assert_eq!(can_take_rights(), Ok(()));
        // A thread of the test's gives up its capabilities, and the checks' threads it starts
        // inherit that.
        let (probed, refused) = std::thread::scope(|scope| {
            let confined = scope.spawn(|| {
                take_rights(65534, 65534).unwrap();
                (can_take_rights(), look_up("run.cwd", dir.path(), &nobody))
            });
            let (probed, looked) = confined.join().unwrap();
            (probed, looked.unwrap_err())
        });
        // The daemon's probe, where it makes its executor, says so too.
        assert!(probed.unwrap_err().contains("(setgroups)"));
        assert!(refused.unanswered && refused.host, "{refused:?}");
        assert!(
            refused
                .invalid
                .problem
                .contains("cannot take uid 65534's rights to check its paths (setgroups)"),
            "{refused:?}"
        );
    }

    /// A root daemon hands a submitter's `elastic-run` the program's descriptor, path-only: never a
    /// readable one, which for a file the submitter may not read (root's 0711 binary) would let
    /// them read it. Only root can make such a file another user may run; CI runs as root.
    #[test]
    fn a_program_the_submitter_may_not_read_is_handed_over_unreadable() {
        let Some((dir, nobody, run)) = roots_tree_for_nobody() else {
            return;
        };
        let prog = with_program(dir.path(), "bin", "\x7fELF secret");
        let flags = |mode_bits: u32| {
            mode(&prog, mode_bits);
            let checked = open_program("run.args", &prog, &run, &nobody).unwrap();
            // SAFETY: fcntl(2) F_GETFL on an open descriptor.
            unsafe { libc::fcntl(checked.file.as_raw_fd(), libc::F_GETFL) }
        };
        assert_eq!(
            flags(0o711) & libc::O_PATH,
            libc::O_PATH,
            "root's alone to read"
        );
        // Path-only as well: a readable one could not be closed without asking its file system.
        assert_eq!(
            flags(0o755) & libc::O_PATH,
            libc::O_PATH,
            "readable by anyone"
        );
        // A script they may not read could not run, and its interpreter would go unchecked.
        let script = with_program(dir.path(), "scripts", "#!/bin/sh\necho secret\n");
        mode(&script, 0o711);
        let e = open_program("run.args", &script, &run, &nobody).unwrap_err();
        assert!(
            e.invalid
                .problem
                .contains("is a script its submitter may not read"),
            "{e}"
        );
    }

    /// A thread that reads a program's first line keeps none of the process's descriptors but the
    /// directory's: with `close_range`, and by the listing older kernels need.
    #[test]
    fn a_thread_with_its_own_table_keeps_only_the_directory() {
        for close in [close_all_but, close_listed_but] {
            let files: Vec<std::fs::File> = (0..3)
                .map(|_| std::fs::File::open("/dev/null").unwrap())
                .collect();
            let keep = files[1].as_raw_fd();
            let open_there = std::thread::scope(|scope| {
                let thread = scope.spawn(|| {
                    // SAFETY: unshare(2) of this thread's descriptor table.
                    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
                        // A container's seccomp profile may refuse it: nothing to test there.
                        eprintln!("skipped: {}", std::io::Error::last_os_error());
                        return None;
                    }
                    close(keep);
                    // SAFETY: fcntl(2) F_GETFD: whether a descriptor is open in this table.
                    let open = |f: &std::fs::File| unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFD) } >= 0;
                    Some(files.iter().map(open).collect::<Vec<_>>())
                });
                thread.join().unwrap()
            });
            let Some(open_there) = open_there else {
                return;
            };
            assert_eq!(open_there, [false, true, false]);
            // The process's own table keeps them all.
            for file in &files {
                // SAFETY: as above, in this thread's (the process's) table.
                assert!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFD) } >= 0);
            }
        }
    }

    #[test]
    fn a_program_is_a_regular_executable_file_and_a_scripts_interpreter_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let me = Submitter::this_process();
        let run = run_in(dir.path());
        let check = |p: &Path| open_program("run.args", p, &run, &me);
        let fifo = dir.path().join("fifo");
        let name = CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o755) }, 0);
        // Refused without blocking on it.
        let e = check(&fifo).unwrap_err();
        assert!(e.invalid.problem.contains("is a FIFO"), "{e}");
        let e = check(dir.path()).unwrap_err();
        assert!(e.invalid.problem.contains("is a directory"), "{e}");
        // A script runs by its path, through an interpreter that passes the same checks.
        let interpreter = with_program(dir.path(), "interp", "\x7fELF");
        let script = dir.path().join("script");
        std::fs::write(&script, format!("#! {} -u\nbody\n", interpreter.display())).unwrap();
        mode(&script, 0o755);
        let checked = check(&script).unwrap();
        assert!(checked.script);
        mode(interpreter.parent().unwrap(), 0o777);
        let e = check(&script).unwrap_err();
        assert!(e.invalid.problem.contains("its interpreter"), "{e}");
        assert!(!check(Path::new("/bin/sh")).unwrap().script);
        // A relative interpreter is looked for from where the script runs, not where it was
        // checked: refused.
        std::fs::write(&script, "#!bin/sh\nbody\n").unwrap();
        let e = check(&script).unwrap_err();
        assert!(
            e.invalid
                .problem
                .contains("names a relative interpreter (bin/sh)"),
            "{e}"
        );
    }

    /// A root daemon walks where a submitter may not: what they could not reach or run themselves
    /// is refused, and nothing is said of what lies beyond. Only root can make such a tree for
    /// another user; CI runs as root.
    #[test]
    fn a_program_the_submitter_could_not_reach_or_run_is_refused_saying_no_more() {
        let Some((dir, nobody, run)) = roots_tree_for_nobody() else {
            return;
        };
        let prog = with_program(dir.path(), "rootonly", "\x7fELF");
        assert!(open_program("run.args", &prog, &run, &nobody).is_ok());
        mode(prog.parent().unwrap(), 0o700);
        let hidden = format!(
            "uid 65534 may not enter the directory {}",
            prog.parent().unwrap().display()
        );
        let e = open_program("run.args", &prog, &run, &nobody).unwrap_err();
        assert!(e.invalid.problem.contains(&hidden), "{e}");
        // A name that is not there says the same as one that is.
        let e =
            open_program("run.args", &prog.with_file_name("absent"), &run, &nobody).unwrap_err();
        assert!(e.invalid.problem.contains(&hidden), "{e}");
        assert_eq!(
            reachable_by(&prog, &nobody).unwrap_err(),
            format!("{}: {hidden}", prog.display())
        );
        assert!(reachable_by(&prog, &Submitter { uid: 0, gid: 0 }).is_ok());
        // Through a link of their own, the directories on the link's way count too.
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        symlink(prog.parent().unwrap(), theirs.join("link")).unwrap();
        let e = reachable_by(&theirs.join("link/absent"), &nobody).unwrap_err();
        assert!(e.ends_with(&hidden), "{e}");
        // A directory their own private group may write is theirs alone (umask 002 systems).
        let shared = dir.path().join("nobodys");
        std::fs::create_dir(&shared).unwrap();
        std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
        mode(&shared, 0o775);
        let nobodys = shared.join("prog");
        std::fs::write(&nobodys, "\x7fELF").unwrap();
        std::os::unix::fs::chown(&nobodys, Some(65534), Some(65534)).unwrap();
        mode(&nobodys, 0o755);
        let private = super::private_group(65534, 65534).unwrap();
        assert!(
            !super::private_group(65534, 0).unwrap(),
            "not root's primary group"
        );
        let checked = open_program("run.args", &nobodys, &run, &nobody);
        assert_eq!(checked.is_ok(), private, "{checked:?}");
        // Reachable, but runnable by its owner alone.
        mode(prog.parent().unwrap(), 0o755);
        mode(&prog, 0o744);
        let e = open_program("run.args", &prog, &run, &nobody).unwrap_err();
        assert!(
            e.invalid
                .problem
                .contains("is not a file uid 65534 may run"),
            "{e}"
        );
        // On a PATH, a directory they may not enter is passed over, as their own search would.
        mode(&prog, 0o755);
        mode(prog.parent().unwrap(), 0o700);
        let mut on_path = run_in(dir.path());
        on_path.env.insert(
            "PATH".into(),
            format!("{}:/usr/bin:/bin", prog.parent().unwrap().display()),
        );
        let found = open_program("run.args", Path::new("prog"), &on_path, &nobody).unwrap_err();
        assert!(
            found
                .invalid
                .problem
                .contains("prog is not on the submitted PATH"),
            "{found}"
        );
    }

    /// Sets `path`'s access ACL (`system.posix_acl_access`, the kernel's format): its owner `rwx`,
    /// `nobody` `theirs`, its group and everyone else `others` (`r-x` is 5).
    fn set_acl(path: &Path, theirs: u16, others: u16) {
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (0x01u16, 7u16, u32::MAX), // the owner
            (0x02, theirs, 65534),     // nobody
            (0x04, others, u32::MAX),  // the owning group
            (0x10, 7, u32::MAX),       // the mask
            (0x20, others, u32::MAX),  // everyone else
        ] {
            acl.extend(tag.to_le_bytes());
            acl.extend(perm.to_le_bytes());
            acl.extend(id.to_le_bytes());
        }
        let name = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: setxattr(2) with NUL-terminated names and a buffer of the length given.
        let set = unsafe {
            libc::setxattr(
                name.as_ptr(),
                c"system.posix_acl_access".as_ptr(),
                acl.as_ptr().cast(),
                acl.len(),
                0,
            )
        };
        assert_eq!(
            set,
            0,
            "{}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }

    /// The kernel decides what a submitter may reach and run, ACLs included: a directory whose
    /// mode lets everyone in but whose ACL shuts them out stops them, and one whose mode lets its
    /// owner alone in but whose ACL lets them in does not (the checks once read the mode bits).
    /// Only root can make such a tree for another user; CI runs as root.
    #[test]
    fn the_kernel_decides_what_a_submitter_may_reach_acls_included() {
        let Some((dir, nobody, run)) = roots_tree_for_nobody() else {
            return;
        };
        let shut = with_program(dir.path(), "shut", "\x7fELF");
        set_acl(shut.parent().unwrap(), 0, 5);
        let e = open_program("run.args", &shut, &run, &nobody).unwrap_err();
        assert!(
            e.invalid.problem.contains(&format!(
                "uid 65534 may not enter the directory {}",
                shut.parent().unwrap().display()
            )),
            "{e}"
        );
        assert!(reachable_by(&shut, &nobody).is_err());
        let let_in = with_program(dir.path(), "let-in", "\x7fELF");
        set_acl(let_in.parent().unwrap(), 5, 0);
        assert!(reachable_by(&let_in, &nobody).is_ok());
        let checked = open_program("run.args", &let_in, &run, &nobody).unwrap();
        // SAFETY: fcntl(2) F_GETFL on an open descriptor.
        let flags = unsafe { libc::fcntl(checked.file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(
            flags & libc::O_PATH,
            libc::O_PATH,
            "it goes path-only, readable or not"
        );
        // A program whose ACL denies them running it, whatever its mode says.
        set_acl(&let_in, 0, 5);
        let e = open_program("run.args", &let_in, &run, &nobody).unwrap_err();
        assert!(
            e.invalid
                .problem
                .contains("is not a file uid 65534 may run"),
            "{e}"
        );
        // Root's own checks are root's: nothing above stops them.
        let root = Submitter { uid: 0, gid: 0 };
        assert!(open_program("run.args", &shut, &run, &root).is_ok());
        // The checking thread holds no capability: a new file-system uid drops only the
        // file-system ones, and CAP_SYS_PTRACE would open other users' /proc entries.
        let status = as_submitter(&nobody, || {
            std::fs::read_to_string("/proc/thread-self/status").map_err(|e| e.to_string())
        })
        .unwrap();
        assert!(
            status.lines().any(|l| l == "CapEff:\t0000000000000000"),
            "{status}"
        );
        // /proc names what processes hold (the daemon's own open files and descriptors, which
        // the kernel lets any thread of the daemon see), not places: never walked into, and a
        // link there from elsewhere is stopped at /proc.
        let into_proc = dir.path().join("into-proc");
        symlink("/proc/self/fd", &into_proc).unwrap();
        let daemons = format!("/proc/{}/fd/0", std::process::id());
        for path in [
            "/proc/self/cwd/absent",
            "/proc/1/cwd/absent",
            daemons.as_str(),
            &format!("{}/0", into_proc.display()),
        ] {
            let e = reachable_by(Path::new(path), &nobody).unwrap_err();
            assert!(e.contains("/proc is in /proc"), "{e}");
        }
        // Nor through a PATH: /proc/self/root/bin/sh is there for the kernel, not for the search.
        let mut through_proc = run.clone();
        through_proc
            .env
            .insert("PATH".into(), "/proc/self/root/bin".into());
        let e = open_program("run.args", Path::new("sh"), &through_proc, &nobody).unwrap_err();
        assert!(
            e.invalid.problem.contains("is not on the submitted PATH"),
            "{e}"
        );
        assert!(look_up("run.cwd", Path::new("/proc/self/root/etc"), &nobody).is_err());
        assert!(
            look_up("run.cwd", Path::new("/etc/passwd"), &nobody)
                .unwrap()
                .unwrap()
                .is_file()
        );
        assert_eq!(
            look_up("run.cwd", Path::new("/etc/absent"), &nobody),
            Ok(None)
        );
    }

    #[test]
    fn accounts_are_found_by_name_and_by_id() {
        assert_eq!(account_uid("root").unwrap(), Some(0));
        assert_eq!(account_name(0).unwrap().as_deref(), Some("root"));
        assert_eq!(own_tenant(0).unwrap(), "root");
        assert_eq!(account_uid("no such user, surely").unwrap(), None);
        assert_eq!(account_uid("nul\0inside").unwrap(), None);
        assert_eq!(own_tenant(4_000_000_000).unwrap(), "uid-4000000000");
        assert_eq!(
            tenant_to_submit(Some("team-a".into()), 0).as_deref(),
            Ok("team-a")
        );
        assert_eq!(tenant_to_submit(None, 0).as_deref(), Ok("root"));
    }

    /// A directory server that does not answer is an error, not an account or group that is not
    /// there: a user's tenant would change, or their own group's directory be refused for good.
    #[test]
    fn an_account_database_that_does_not_answer_is_not_a_missing_entry() {
        let answering =
            |rc: libc::c_int| lookup(|_: &mut libc::passwd, _, _| rc).map(|found| found.is_some());
        assert!(matches!(answering(0), Ok(false)));
        for down in [
            libc::EIO,
            libc::ETIMEDOUT,
            libc::EAGAIN,
            libc::EMFILE,
            libc::ENOENT,
        ] {
            let e = answering(down).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(down));
        }
        // A buffer too small grows, up to 1 MiB.
        let mut sizes = Vec::new();
        let e = lookup(|_: &mut libc::group, buffer: &mut [u8], _| {
            sizes.push(buffer.len());
            libc::ERANGE
        })
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ERANGE));
        assert_eq!(sizes, [4096, 16384, 65536, 262_144, 1_048_576]);
    }
}
