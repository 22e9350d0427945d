# gangway's warm worker pool: `elastic-run --spawn pool` runs this with the job's Python, as
#     PYTHON -u -c SOURCE SOCKET OWNER_PID OWNER_START IDLE_SECONDS CGROUP
# with the launch's fingerprint (what must be equal for a fork to stand in for a fresh launch) on
# its stdin. It imports torch once, then serves SOCKET: each connection from its own user gets a
# *leader*, forked at once, which takes the spawner's request (its descriptors by SCM_RIGHTS), puts
# itself in the spawner's cgroup, CPUs and directory, forks one process per rank that runs the
# script as `python -u SCRIPT ARGS` would, and relays their exits. It exits when its owner (the
# daemon, or a standalone elastic-run) exits, or after IDLE_SECONDS without a launch.
#
# Everything the spawner cannot apply after a fork (user, limits, umask, namespaces, environment
# other than the launch's own variables...) is in the fingerprint: a launch that differs is
# refused here, and the spawner starts the workers directly.

import ctypes
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback

PR_SET_PDEATHSIG = 1
POOL_VAR = "GANGWAY_POOL"
# What finds a launch's processes in /proc: its run token, its attempt, its job.
MARKERS = ["GANGWAY_RUN_TOKEN", "GANGWAY_ATTEMPT", "GANGWAY_JOB_ID"]
PR_SET_CHILD_SUBREAPER = 36
REQUEST_LIMIT = 16 << 20
REQUEST_TIMEOUT = 30
MAX_INHERITED = 200  # as the spawner's limit
# What workers import first, and what torch imports lazily at common calls
# (`use_deterministic_algorithms`, `compile`: about 1 s on its own). GANGWAY_POOL_PRELOAD adds a
# job's own heavy imports.
PRELOAD = ["torch.distributed", "torch.nn.parallel", "torch._inductor.config"]
_libc = ctypes.CDLL(None, use_errno=True)


def log(message):
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} gangway-pool[{os.getpid()}]: {message}",
          file=sys.stderr, flush=True)


def stat_fields(pid="self"):
    """/proc/PID/stat's fields, indexed as proc(5) numbers them (from 1; the command's name, field
    2, may hold spaces and parentheses, so fields are counted after its last ")")."""
    with open(f"/proc/{pid}/stat") as f:
        return [None, None, None] + f.read().rsplit(")", 1)[1].split()


def start_time(pid):
    """Field 22 of /proc/PID/stat: tells a process apart from a later one with its pid."""
    return stat_fields(pid)[22]


def stranger(conn):
    """Why the peer is not this pool's own user with its own groups, or None."""
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid():
        return f"uid {uid}"
    if gid != os.getgid():
        return f"uid {uid} with gid {gid}"
    try:
        with open(f"/proc/{pid}/status") as f:
            groups = [line for line in f if line.startswith("Groups:")]
    except OSError:
        return f"uid {uid}, pid {pid} unreadable"
    with open("/proc/self/status") as f:
        if groups != [line for line in f if line.startswith("Groups:")]:
            return f"uid {uid} with other groups"
    return None


def threads():
    return len(os.listdir("/proc/self/task"))


def fork_safe(torch):
    """Why forking now would give workers a broken runtime, or None."""
    if torch.cuda.is_initialized():
        return "CUDA is initialised in the pool (it does not survive fork)"
    if threads() != 1:
        # Libraries that stop their threads for a fork (OpenBLAS, which numpy loads, starts one per
        # core at import and registers pthread_atfork handlers) have them stopped by a first fork,
        # and start them again only when used, which the pool never does.
        canary = os.fork()
        if canary == 0:
            os._exit(0)
        os.waitpid(canary, 0)
    if threads() != 1:
        return f"the pool has {threads()} threads that a fork does not stop (locks they hold would be copied)"
    return None


def die_with_parent(parent):
    """Has this just-forked process killed when its parent exits; whether `parent` is still its
    parent (else it exited before this could be set, and no signal will come)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent


def watch_while_starting(owner):
    """Forks a process that kills this one as soon as `owner` (a pidfd) exits, and returns its pid.
    Importing torch can take many seconds on a loaded machine, and only the serving loop watches
    the owner itself: a pool whose owner died meanwhile would outlive it by that long. A process,
    not a thread: the pool must have one thread when it forks workers."""
    pool = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            if die_with_parent(pool):
                select.select([owner], [], [])
                os.kill(pool, signal.SIGKILL)
        finally:
            os._exit(0)
    return pid


def main():
    sock_path, owner_pid, owner_start, idle, cgroup = sys.argv[1:6]
    owner_pid, idle = int(owner_pid), float(idle)
    if cgroup:
        # Out of the attempt that started it, whose end would end the pool.
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write("0")
    fingerprint = sys.stdin.read()
    # The pool's own directory is not the script's: never import from it.
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    owner = os.pidfd_open(owner_pid)
    if start_time(owner_pid) != owner_start:
        log("its owner exited before it started")
        return 1
    began = time.monotonic()
    watcher = watch_while_starting(owner)
    try:
        try:
            import torch
        except Exception as e:
            log(f"cannot import torch: {e!r}")
            return 1
        extra = [m.strip() for m in os.environ.get("GANGWAY_POOL_PRELOAD", "").split(",") if m.strip()]
        for name in PRELOAD + extra:
            try:
                importlib.import_module(name)
            except Exception as e:  # the workers import it themselves, and meet the error there
                log(f"did not preload {name}: {e!r}")
            why = fork_safe(torch)
            if why:
                log(f"cannot serve after importing {name}: {why}")
                return 1
    finally:
        os.kill(watcher, signal.SIGKILL)
        try:
            os.waitpid(watcher, 0)
        except ChildProcessError:
            pass  # a preloaded module ignores SIGCHLD: the watcher was reaped already
    preloaded = sorted({name.split(".")[0] for name in sys.modules})
    log(f"imported torch {torch.__version__} in {time.monotonic() - began:.2f} s")
    old = os.umask(0o077)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under a private name and renamed over a stale socket: a client never meets a half-made one.
    staging = f"{sock_path}.{os.getpid()}"
    server.bind(staging)
    os.umask(old)
    server.listen(64)
    os.rename(staging, sock_path)
    inode = os.stat(sock_path).st_ino
    leaders = set()
    last = time.monotonic()
    while True:
        readable, _, _ = select.select([server, owner], [], [], 1.0)
        while leaders:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            leaders.discard(pid)
        if owner in readable:
            log("its owner exited")
            break
        if server in readable:
            conn, _ = server.accept()
            who = stranger(conn)
            if who:
                log(f"refused a connection from {who}")
                conn.close()
                continue
            why = fork_safe(torch)
            if why:
                log(f"stopping: {why}")
                conn.close()
                break
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    server.detach()
                    os.close(owner)
                    code = Leader(conn, fingerprint, preloaded, torch).run()
                except BaseException:  # the leader's own failure, never a worker's
                    traceback.print_exc()
                finally:
                    os._exit(code)
            leaders.add(pid)
            conn.close()
            last = time.monotonic()
        elif not leaders and time.monotonic() - last > idle:
            log(f"idle for {idle:.0f} s")
            break
    try:
        if os.stat(sock_path).st_ino == inode:
            os.unlink(sock_path)
            # A clean end leaves nothing behind (a failed start keeps its log, for the reason).
            for suffix in (".lock", ".log"):
                os.unlink(sock_path[: -len(".sock")] + suffix)
    except FileNotFoundError:
        pass
    return 0


class Refused(Exception):
    """A launch this pool cannot stand in for; the spawner starts its workers directly."""


class Leader:
    """One launch: applies the spawner's context, forks its ranks, relays their exits."""

    def __init__(self, conn, fingerprint, preloaded, torch):
        self.name = os.environ.get(POOL_VAR, "")
        self.conn = conn
        self.fingerprint = fingerprint
        self.preloaded = preloaded
        self.torch = torch
        self.ranks = {}  # pid -> (rank, pidfd)
        self.gate = None  # (read, write): the pipe the ranks wait on until the spawner has their pids
        self.inherited = []  # (number in a direct worker, descriptor here)
        self.pending = b""  # the start of a message from the spawner

    def send(self, **message):
        """Sends `message`; whether it went (a spawner that is gone ends the launch at the next look
        at the connection)."""
        try:
            self.conn.sendall(json.dumps(message).encode() + b"\n")
            return True
        except BrokenPipeError:
            return False

    def receive(self):
        # A client that connects and says nothing does not keep a leader for ever.
        self.conn.settimeout(REQUEST_TIMEOUT)
        data, fds, _, _ = socket.recv_fds(self.conn, 1 << 16, 8 + MAX_INHERITED)
        while not data.endswith(b"\n"):
            more = self.conn.recv(1 << 16)
            if not more or len(data) > REQUEST_LIMIT:
                raise Refused("the request was cut short")
            data += more
        self.conn.settimeout(None)
        return json.loads(data), fds

    def run(self):
        try:
            request, fds = self.receive()
            self.enter(request, fds)
        except (Refused, OSError, ValueError, KeyError, TypeError) as why:
            self.send(refused=str(why) or type(why).__name__)
            return 0
        # The ranks wait at this gate for a byte each, written once their pids are on their way to
        # the spawner: a leader that dies before that leaves them an empty pipe, and they exit
        # without running any of the script (so the spawner's direct start is their first run, not
        # a second beside it). A byte, not the pipe's end: a dying leader's files close before its
        # children get their parent-death signal.
        self.gate = os.pipe()
        pids = [self.fork_rank(request, rank) for rank in range(len(request["ranks"]))]
        os.close(self.gate[0])
        for _, fd in self.inherited:
            os.close(fd)  # the ranks' now: a pipe among them must see its end when they close it
        if self.send(started=pids):
            os.write(self.gate[1], b"g" * len(pids))
        os.close(self.gate[1])
        return self.supervise()

    def enter(self, request, fds):
        if request.get("version") != 1:
            raise Refused(f"protocol version {request.get('version')} is not 1")
        if request["fingerprint"] != self.fingerprint:
            raise Refused("the launch's context differs from the pool's")
        expected = 4 + bool(request["cgroup_fd"]) + len(request["inherited"])
        if len(fds) != expected:
            raise Refused(f"{len(fds)} descriptors came, {expected} expected")
        # Those a direct worker would inherit, at their numbers there: moved into place per rank.
        self.inherited = list(zip(request["inherited"], fds[expected - len(request["inherited"]):]))
        script_dir = os.path.dirname(os.path.realpath(request["script"]))
        shadowed = [m for m in self.preloaded
                    if os.path.exists(os.path.join(script_dir, m + ".py"))
                    or os.path.isdir(os.path.join(script_dir, m))]
        if shadowed:
            raise Refused(f"the script's directory shadows modules the pool imported: {', '.join(shadowed)}")
        os.setsid()
        if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise Refused("no child subreaper")
        if request["cgroup_fd"]:
            os.write(fds[4], b"0")
            os.close(fds[4])
        with open("/proc/self/cgroup") as f:
            if f.read() != request["cgroup"]:
                raise Refused("the pool cannot enter the launch's cgroup")
        os.sched_setaffinity(0, request["cpus"])
        os.fchdir(fds[0])
        os.close(fds[0])
        for target, fd in zip((0, 1, 2), fds[1:4]):
            os.dup2(fd, target)
            os.close(fd)

    def fork_rank(self, request, rank):
        leader = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                self.become_rank(request, rank, leader)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
        try:
            os.setpgid(pid, pid)  # as the rank does itself: whichever comes first
        except OSError:
            pass
        self.ranks[pid] = (rank, os.pidfd_open(pid))
        return pid

    def become_rank(self, request, rank, leader):
        # The leader's pid from before the fork: read after it, a leader that died in between would
        # pass for the parent (the process that adopted the rank would be there instead).
        if not die_with_parent(leader):
            os._exit(1)
        gate, held = self.gate
        os.close(held)
        if os.read(gate, 1) != b"g":  # the spawner does not have the pids: the launch is over
            os._exit(1)
        os.close(gate)
        os.setpgid(0, 0)
        self.conn.detach()
        # Above every number in use, so that moving one into place never lands on another.
        high = max([int(fd) for fd in os.listdir("/proc/self/fd")] + [n for n, _ in self.inherited]) + 1
        moved = [(number, os.dup2(fd, high + k, inheritable=False))
                 for k, (number, fd) in enumerate(self.inherited)]
        for fd in os.listdir("/proc/self/fd"):
            if 2 < int(fd) < high:
                try:
                    os.close(int(fd))
                except OSError:
                    pass
        for number, fd in moved:
            os.dup2(fd, number)
            os.close(fd)
        env = dict(request["env"])
        env.update(request["ranks"][rank])
        os.environ.clear()
        os.environ.update(env)
        script = request["script"]
        # What `ps` and /proc show, as for a direct worker: its command line, and its environment
        # with the launch's markers first (what sweeps and the guardian look for), then the pool's.
        argv = [request["argv0"], "-u", script] + request["args"]
        marks = [k for k in MARKERS if k in env]
        shown = [f"{k}={env[k]}" for k in marks + sorted(set(env) - set(marks))]
        rewrite_proc_strings(48, 49, argv)  # arg_start, arg_end
        rewrite_proc_strings(50, 51, shown[:len(marks)] + [f"{POOL_VAR}={self.name}"] + shown[len(marks):])
        # libgomp counted threads (OMP_NUM_THREADS, else the CPUs it may use) when the pool
        # imported torch; a fresh worker counts now. Set only if it differs: setting starts
        # OpenMP's threads, which a fresh worker has not yet.
        threads = env.get("OMP_NUM_THREADS", "")
        threads = int(threads) if threads.isdigit() else len(os.sched_getaffinity(0))
        if threads != self.torch.get_num_threads():
            self.torch.set_num_threads(threads)
        # A fresh worker's random streams are its own (`random` reseeds itself at a fork).
        self.torch.default_generator.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        sys.argv = [script] + request["args"]
        sys.orig_argv = argv
        sys.path[0:0] = [os.path.dirname(os.path.realpath(script))]
        run_as_main(script)

    def supervise(self):
        """Relays each rank's exit, and the spawner's signals to the ranks; a closed connection
        (the spawner is gone) kills them all."""
        while self.ranks:
            by_fd = {pidfd: pid for pid, (_, pidfd) in self.ranks.items()}
            readable, _, _ = select.select([self.conn] + list(by_fd), [], [], 1.0)
            self.reap_orphans()
            for fd in readable:
                if fd is self.conn:
                    if not self.relay():
                        self.kill_all()
                        return 0
                    continue
                pid = by_fd[fd]
                rank, pidfd = self.ranks.pop(pid)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                self.send(exited=rank, pid=pid, code=os.waitstatus_to_exitcode(status))
        # What the ranks left behind (a DataLoader worker that outlived its rank) goes with them.
        self.kill_all()
        self.send(done=True)
        return 0

    def relay(self):
        data = self.conn.recv(1 << 12)
        if not data:
            return False
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if message.get("signal") in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
                for pid in self.ranks:
                    try:
                        os.kill(pid, message["signal"])
                    except ProcessLookupError:
                        pass
        return True

    def children(self):
        pids = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        return pids

    def reap_orphans(self):
        for pid in self.children():
            if pid not in self.ranks:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def kill_all(self):
        """SIGKILLs the ranks, their process groups and every descendant adopted here, and reaps them."""
        for pid in self.ranks:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = self.children()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass


def rewrite_proc_strings(start_field, end_field, strings):
    """Writes `strings` over this process's own argument or environment area (fields
    `start_field`..`end_field` of /proc/self/stat), as many as fit, in order. The pool's were made
    large enough; where the kernel refuses, /proc keeps showing the pool's."""
    fields = stat_fields()
    start, end = int(fields[start_field]), int(fields[end_field])
    blob = b""
    for item in strings:
        item = item.encode(errors="replace") + b"\0"
        if len(blob) + len(item) > end - start:
            break
        blob += item
    try:
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(blob.ljust(end - start, b"\0"))
    except OSError:
        pass


def run_as_main(script):
    """Runs `script` as `python SCRIPT` does, and exits as it would."""
    import atexit
    import builtins
    import io
    import types
    from importlib.machinery import SourceFileLoader
    # Joined, not normalised: CPython's own `__file__` for a script.
    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    main = types.ModuleType("__main__")
    main.__dict__.update(__loader__=SourceFileLoader("__main__", path), __annotations__={},
                         __builtins__=builtins, __file__=path, __cached__=None)
    sys.modules["__main__"] = main
    code = 0
    try:
        with io.open_code(path) as f:
            source = f.read()
        exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    if code == -signal.SIGINT:
        # As CPython does after an uncaught KeyboardInterrupt: die by the signal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    code = main()
    # Ended without the interpreter's teardown, which with torch imported takes seconds (more on a
    # loaded machine): a pool whose owner is gone goes at once, and it has nothing left to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
