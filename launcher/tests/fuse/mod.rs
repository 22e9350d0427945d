//! A FUSE file system that never answers, for the tests of what must not wait on a job's paths.
//! Shared by the launcher's tests and the daemon's (`#[path]`): a directory module, not a test
//! target of its own.

use std::path::{Path, PathBuf};

/// A FUSE file system whose server answers the kernel's handshake and then reads every request
/// without answering it, until dropped: a process that asks it anything waits in the kernel, where
/// not even SIGKILL reaches it (a submitter's FUSE mount that hangs does this). Mounting one takes
/// root. Dropped, it answers what it swallowed with an error, which lets those processes go, and is
/// unmounted.
pub struct Swallowing {
    dir: PathBuf,
    /// Requests read and not answered.
    pub swallowed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    released: std::sync::Arc<std::sync::atomic::AtomicBool>,
    server: Option<std::thread::JoinHandle<()>>,
}

/// FUSE's opcodes: the handshake, and those [`Swallowing::holding`] answers or may swallow.
const FUSE_INIT: u32 = 26;
/// Looking a name up.
pub const FUSE_LOOKUP: u32 = 1;
const FUSE_GETATTR: u32 = 3;
const FUSE_OPEN: u32 = 14;
/// Reading a file.
pub const FUSE_READ: u32 = 15;
const FUSE_RELEASE: u32 = 18;
/// Closing a descriptor of a file (every `close(2)` of one open for reading asks it).
pub const FUSE_FLUSH: u32 = 25;
const FUSE_STATFS: u32 = 17;
const FUSE_ACCESS: u32 = 34;
/// Requests the kernel expects no answer to (forgets, interrupts).
const UNANSWERED: [u32; 3] = [2, 36, 42];
/// The node of the one file a [`Swallowing::holding`] file system holds (its root is 1).
const PROGRAM_NODE: u64 = 2;
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;

impl Swallowing {
    /// Mounts one at `dir`; `None` where this process may not mount (not root, or not allowed to
    /// by its container).
    pub fn mount(dir: &Path) -> Option<Swallowing> {
        Self::serving(dir, None)
    }

    /// Mounts one at `dir` that holds one file, `program` (root's, mode 0755), and answers what
    /// looking it up, checking it, opening, reading and closing it take, except the requests in
    /// `swallow` ([`FUSE_READ`], [`FUSE_FLUSH`]), which it swallows with every other. `None` as for
    /// [`Self::mount`].
    pub fn holding(dir: &Path, program: &[u8], swallow: &[u32]) -> Option<Swallowing> {
        Self::serving(
            dir,
            Some(Held {
                program: program.to_vec(),
                swallow: swallow.to_vec(),
                failing: None,
            }),
        )
    }

    /// As [`Self::holding`], swallowing nothing but answering `opcode` ([`FUSE_READ`]) with
    /// `errno` at once, as a disk or a server that fails does (EIO), or one that says what it likes.
    pub fn failing(dir: &Path, program: &[u8], opcode: u32, errno: i32) -> Option<Swallowing> {
        Self::serving(
            dir,
            Some(Held {
                program: program.to_vec(),
                swallow: Vec::new(),
                failing: Some((opcode, errno)),
            }),
        )
    }

    fn serving(dir: &Path, program: Option<Held>) -> Option<Swallowing> {
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::OpenOptionsExt;
        // Without blocking: a request its caller gave up on (a fatal signal while it was pending)
        // leaves nothing to read, and the server must still see that it was released.
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/fuse")
            .ok()?;
        let target = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        let options = std::ffi::CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fuse.as_raw_fd()
        ))
        .unwrap();
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
        let mounted = unsafe {
            libc::mount(
                c"swallowing".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            return None;
        }
        let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swallowed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let server = {
            let (released, swallowed) = (released.clone(), swallowed.clone());
            std::thread::spawn(move || serve_swallowing(fuse, &released, &swallowed, program))
        };
        Some(Swallowing {
            dir: dir.to_owned(),
            swallowed,
            released,
            server: Some(server),
        })
    }
}

/// `struct fuse_attr` (protocol 7.9 on) of node `node`: the root directory or the program of `size`
/// bytes, both root's and writable by root alone.
fn attributes(node: u64, size: usize) -> Vec<u8> {
    let mode = if node == PROGRAM_NODE {
        libc::S_IFREG | 0o755
    } else {
        libc::S_IFDIR | 0o755
    };
    let mut attr = Vec::with_capacity(88);
    // ino, size, blocks, atime, mtime, ctime
    for value in [node, size as u64, 1, 0, 0, 0] {
        attr.extend_from_slice(&value.to_ne_bytes());
    }
    // atimensec, mtimensec, ctimensec, mode, nlink, uid, gid, rdev, blksize, flags
    for value in [0, 0, 0, mode, 1, 0, 0, 0, 4096, 0u32] {
        attr.extend_from_slice(&value.to_ne_bytes());
    }
    attr
}

/// What a [`Swallowing::holding`] file system holds, and how it answers.
struct Held {
    /// Its one file's contents.
    program: Vec<u8>,
    /// Requests it swallows.
    swallow: Vec<u32>,
    /// A request it answers with an error, and which.
    failing: Option<(u32, i32)>,
}

/// The answer a [`Swallowing::holding`] file system gives `opcode` about `node` (`name`: a lookup's
/// body), or `None` to swallow it.
fn answer_for(
    opcode: u32,
    node: u64,
    body: &[u8],
    Held {
        program,
        swallow,
        failing,
    }: &Held,
) -> Option<(i32, Vec<u8>)> {
    if swallow.contains(&opcode) {
        return None;
    }
    if let Some((_, errno)) = failing.filter(|&(failing, _)| failing == opcode) {
        return Some((-errno, Vec::new()));
    }
    // A minute's validity: asked once.
    let valid = 60u64.to_ne_bytes();
    Some(match opcode {
        FUSE_LOOKUP if body.split(|&b| b == 0).next() == Some(b"program") => {
            let mut entry = Vec::with_capacity(128);
            for value in [PROGRAM_NODE, 0] {
                entry.extend_from_slice(&value.to_ne_bytes());
            }
            entry.extend_from_slice(&valid);
            entry.extend_from_slice(&valid);
            entry.extend_from_slice(&[0; 8]);
            entry.extend(attributes(PROGRAM_NODE, program.len()));
            (0, entry)
        }
        FUSE_LOOKUP => (-libc::ENOENT, Vec::new()),
        FUSE_GETATTR => {
            let mut out = valid.to_vec();
            out.extend_from_slice(&[0; 8]);
            out.extend(attributes(node, program.len()));
            (0, out)
        }
        FUSE_ACCESS | FUSE_RELEASE | FUSE_FLUSH => (0, Vec::new()),
        FUSE_OPEN => (0, vec![0; 16]),
        // `struct fuse_kstatfs`, all but the block size and the longest name zero.
        FUSE_STATFS => {
            let mut out = vec![0; 80];
            out[40..44].copy_from_slice(&4096u32.to_ne_bytes());
            out[44..48].copy_from_slice(&255u32.to_ne_bytes());
            (0, out)
        }
        FUSE_READ => {
            let offset = u64::from_ne_bytes(body[8..16].try_into().unwrap()) as usize;
            let size = u32::from_ne_bytes(body[16..20].try_into().unwrap()) as usize;
            let from = offset.min(program.len());
            (0, program[from..(from + size).min(program.len())].to_vec())
        }
        _ => return None,
    })
}

/// The server of a [`Swallowing`] file system: the handshake answered, and with a `program` what
/// [`answer_for`] answers; every other request read and kept unanswered until `released`, then
/// answered with EIO.
fn serve_swallowing(
    mut fuse: std::fs::File,
    released: &std::sync::atomic::AtomicBool,
    count: &std::sync::atomic::AtomicUsize,
    program: Option<Held>,
) {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let answer = |fuse: &mut std::fs::File, unique: u64, error: i32, body: &[u8]| {
        let mut out = Vec::with_capacity(OUT_HEADER + body.len());
        out.extend_from_slice(&((OUT_HEADER + body.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&error.to_ne_bytes());
        out.extend_from_slice(&unique.to_ne_bytes());
        out.extend_from_slice(body);
        let _ = fuse.write_all(&out);
    };
    let mut swallowed = Vec::new();
    let mut request = vec![0u8; 1 << 20];
    while !released.load(std::sync::atomic::Ordering::SeqCst) {
        let mut ready = libc::pollfd {
            fd: fuse.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one descriptor this thread owns.
        if unsafe { libc::poll(&mut ready, 1, 20) } <= 0 {
            continue;
        }
        let n = match fuse.read(&mut request) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => break,
        };
        if n < IN_HEADER {
            continue;
        }
        let opcode = u32::from_ne_bytes(request[4..8].try_into().unwrap());
        let unique = u64::from_ne_bytes(request[8..16].try_into().unwrap());
        if opcode == FUSE_INIT {
            // Protocol 7.31; everything else zero: no options, the smallest writes.
            let mut init = [0u8; 64];
            init[0..4].copy_from_slice(&7u32.to_ne_bytes());
            init[4..8].copy_from_slice(&31u32.to_ne_bytes());
            init[20..24].copy_from_slice(&4096u32.to_ne_bytes());
            answer(&mut fuse, unique, 0, &init);
        } else if UNANSWERED.contains(&opcode) {
        } else if let Some((error, body)) = program.as_ref().and_then(|program| {
            let node = u64::from_ne_bytes(request[16..24].try_into().unwrap());
            answer_for(opcode, node, &request[IN_HEADER..n], program)
        }) {
            answer(&mut fuse, unique, error, &body);
        } else {
            swallowed.push(unique);
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    for unique in swallowed {
        answer(&mut fuse, unique, -libc::EIO, &[]);
    }
}

impl Drop for Swallowing {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
        let target = std::ffi::CString::new(self.dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: umount2(2) with a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}
