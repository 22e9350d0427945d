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

/// FUSE's opcode for the handshake, and the sizes of a request's and an answer's headers.
const FUSE_INIT: u32 = 26;
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;

impl Swallowing {
    /// Mounts one at `dir`; `None` where this process may not mount (not root, or not allowed to
    /// by its container).
    pub fn mount(dir: &Path) -> Option<Swallowing> {
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
            std::thread::spawn(move || serve_swallowing(fuse, &released, &swallowed))
        };
        Some(Swallowing {
            dir: dir.to_owned(),
            swallowed,
            released,
            server: Some(server),
        })
    }
}

/// The server of a [`Swallowing`] file system: the handshake answered, every other request read and
/// kept unanswered until `released`, then answered with EIO.
fn serve_swallowing(
    mut fuse: std::fs::File,
    released: &std::sync::atomic::AtomicBool,
    count: &std::sync::atomic::AtomicUsize,
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
