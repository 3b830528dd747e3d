"""The sandbox every MPI job of a submission runs in: no network, a filesystem view of its own, limits.

    sandbox = Sandbox.choose("auto", limits)           once per run of check_submission.py
    command, environment = sandbox.wrap(launcher, processes, rank_command, environment, scratch, log_dir)

The job becomes `python3 -I -S sandbox.py job SPEC -- mpiexec -n P python3 -I -S sandbox.py rank LOG_DIR --
python3 -m checking.running.driver ...`: this file, run by path on the standard library alone, is both stages.

  job    (namespaces) new user, mount, network, IPC and PID namespaces. Inside, the job is JOB_ID (1000),
         never root: Open MPI refuses to run as root, and the kernel does not apply the process-count limit to
         uid 0. JOB_ID stands for the grader's uid (for root's: SANDBOX_ID, an unused uid, so that nothing
         inside is the host's root); uid 0 stands for no one. The root becomes a tree of empty mount points the
         grader made (scratch/views/), read-only, holding read-only binds of the system (/usr, /etc, /lib...,
         /sys), the interpreter and its packages, the checker package and the data file, and writable binds
         of the submission's work folder and this job's log folder only; a fresh /proc, a private /dev/shm, a
         few device nodes (HOME is the work folder, TMPDIR the job's own, in its log folder). The network namespace has only its own
         loopback, brought up (Open MPI's PMIx will not start without an interface; MPICH needs none, but
         both MPIs get the same sandbox, so that their verdicts agree); nothing outside is routed. Then every
         capability is dropped (nothing inside can undo a mount) and the limits are set; its process 1 reaps
         and, when mpiexec ends, takes every process of the job with it.
         (limits) the same limits, nothing else; the job runs as the grader.
  rank   one per rank, between the launcher's proxy and the driver: runs the rank as its child and writes
         usage.RANK.json (CPU seconds, peak memory, the signal that killed it) into the log folder, so the
         sheet can say which limit stopped which rank.

Modes, said on every sheet and in the JSON (MODES): "namespaces + limits"; "limits only" where unprivileged
user namespaces are off (or --sandbox limits); "none (--no-sandbox)". What the sandbox does not stop:
docs/checking.md, "The sandbox".
"""
import ctypes
import errno
import os
import signal
import sys

# Run as a script, this file is a stage every job and every rank start: it imports only what is cheap (json
# alone, through re and enum, costs a rank guard 15 ms); the grader's side imports the rest where it needs it.

__all__ = ["Sandbox", "MODES", "LIMITS", "SANDBOX_ID", "JOB_ID", "stops", "namespaces_available"]

HERE = os.path.abspath(__file__)
MODES = {"namespaces": "namespaces + limits", "limits": "limits only", "none": "none (--no-sandbox)"}
SANDBOX_ID = 2 ** 31 - 7  # the uid and gid a root grader's jobs run as (unused: no passwd entry needs it)
# The uid and gid a job has inside its user namespace: not 0, which Open MPI refuses (and whose process count
# the kernel does not limit); the namespace's capabilities, which the job stage needs, do not depend on it.
JOB_ID = 1000
GIB, MIB = 2 ** 30, 2 ** 20
# Per rank, from bench/sandbox_limits.txt (a --full check of the correct fixture on the shared 2-core machine):
# a rank used at most 23.4 CPU s (sync ring, P = 8; 10.6 s at the quick check's P = 4), 0.90 GB of address
# space (0.55 GB resident), 46 open files and 3 threads, and wrote at most 19.4 MB to one file (a call log);
# a job at P = 8 is about 35 tasks (ranks' threads, their guards, mpiexec, its proxy). The margins: CPU 5x
# (a silent runaway is stopped sooner, by the no-progress timeout), address space 4.5x, file size 6.6x,
# open files 11x, processes 7x.
LIMITS = {"cpu": 120, "address_space": 4 * GIB, "file_size": 128 * MIB, "processes": 256, "open_files": 512}
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DEVICES = ("null", "zero", "full", "random", "urandom")
KEEP = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH")  # the environment's allow-list
KEEP_PREFIXES = ("MPIR_CVAR_", "MPICH_", "HYDRA_", "OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_")  # the MPIs' tuning
# Open MPI's own switch for running as root: the grader's to set, kept only where the job runs as the grader
# (limits only); inside the namespaces the job is JOB_ID, never root.
ROOT_ALLOWED = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")  # MPICH's Hydra; Open MPI's (either)
TMPFS_SIZE = "size=64m"  # the job's /dev/shm


def real_python(path=sys.executable):
    """The interpreter's path with its folder resolved (a venv's bin/ stays a venv's: pyvenv.cfg is found)."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


class Sandbox:
    """How the jobs of one run are walled off: mode (MODES), limits per rank (LIMITS), why if it fell back."""

    def __init__(self, mode, limits=None, reason=""):
        self.mode, self.limits, self.reason = mode, dict(LIMITS, **(limits or {})), reason

    @classmethod
    def choose(cls, requested, limits=None):
        """requested: auto (namespaces where they work, else limits only), namespaces, limits or none."""
        if requested in ("auto", "namespaces"):
            works, why = namespaces_available()
            if works:
                return cls("namespaces", limits)
            if requested == "namespaces":
                raise RuntimeError(f"namespaces are not available here: {why}")
            return cls("limits", limits, f"namespaces are not available here: {why}")
        return cls(requested, limits)

    @property
    def description(self):
        """One line for the sheet: the mode, the limits, and why it fell back."""
        if self.mode == "none":
            return MODES["none"] + ": the submission runs with the grader's rights, its network and no limits"
        limits = self.limits
        text = (f"{MODES[self.mode]} (per rank: {limits['cpu']} CPU s, {limits['address_space'] / GIB:g} GiB of "
                f"address space, files up to {limits['file_size'] // MIB} MiB, {limits['open_files']} open files; "
                f"{limits['processes']} processes")
        if self.mode == "limits":
            text += (" beyond those the grader's user runs" if os.geteuid() else " (not enforced: the grader is root)")
            text += "; network, files and processes of the host reachable"
            return text + ")" + (f": {self.reason}" if self.reason else "")
        return text + " per job; no network; only its scratch folder writable)"

    def wrap(self, launcher, processes, rank_command, environment, scratch, log_dir):
        """-> (command, environment) that run `rank_command` on `processes` ranks in this sandbox; `launcher`:
        launcher.Launcher, the mpiexec and the options its MPI needs."""
        mpiexec = launcher.command(processes)
        if self.mode == "none":
            return [*mpiexec, *rank_command], dict(os.environ, **environment)
        python = real_python()
        rank = [python, "-I", "-S", HERE, "rank", log_dir, "--", real_python(rank_command[0]), *rank_command[1:]]
        # A TMPDIR of each job's own: Open MPI's launcher, process 2 of every PID namespace, names its session
        # folder there by its pid, and a killed job's folder would stop the next job's launcher from starting.
        tmp = os.path.join(log_dir, "tmp")
        os.makedirs(tmp, exist_ok=True)
        import json
        command = [python, "-I", "-S", HERE, "job", json.dumps(self.spec(scratch, log_dir)), "--",
                   real_python(mpiexec[0]), *mpiexec[1:], *rank]
        keep = KEEP + (ROOT_ALLOWED if self.mode == "limits" else ())
        kept = {k: v for k, v in os.environ.items() if k in keep or k.startswith(KEEP_PREFIXES)}
        return command, dict(kept, **environment, HOME=scratch.work, TMPDIR=tmp)

    def spec(self, scratch, log_dir):
        """What the job stage needs: the mode, the limits, and (namespaces) the view and the uid to map."""
        spec = {"mode": self.mode, "limits": self.limits, "log_dir": log_dir, "work": scratch.work}
        if self.mode == "limits":
            spec["limits"] = dict(self.limits, processes=self.limits["processes"] + tasks_of(os.getuid()))
            return spec
        uid = SANDBOX_ID if os.geteuid() == 0 else None
        if uid is not None:
            hand_over([scratch.work, log_dir], uid)
        binds = view(scratch, log_dir)
        root = os.path.join(scratch.root, "views", os.path.basename(log_dir))
        stage(root, binds)
        spec.update(uid=uid, binds=binds, root=root)
        return spec


def tasks_of(uid):
    """How many tasks (threads included) the user runs now: what RLIMIT_NPROC counts outside a namespace."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            pass
    return count


def hand_over(folders, uid):
    """Give the folders a job writes in (and their top-level entries, which the grader put there) to `uid`;
    never following a link a submission may have left."""
    for folder in folders:
        os.chown(folder, uid, uid)
        for entry in os.scandir(folder):
            os.chown(entry.path, uid, uid, follow_symlinks=False)


def stage(root, binds):
    """The staging tree of a job's view: a mount point for every bind, /proc, /dev and the system's links."""
    os.makedirs(root)
    for source, target, _ in binds:
        if os.path.isdir(source):
            os.makedirs(root + target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(root + target), exist_ok=True)
            open(root + target, "a").close()
    for path in (p for p in SYSTEM if os.path.islink(p)):
        os.symlink(os.readlink(path), root + path)
    for folder in ("proc", "tmp", "dev/shm"):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
    for name in DEVICES:
        open(f"{root}/dev/{name}", "a").close()
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")


def view(scratch, log_dir):
    """The job's filesystem: (source, target, writable) binds, the targets at the grader's paths."""
    readable = [p for p in SYSTEM + ("/sys",) if os.path.isdir(p) and not os.path.islink(p)]  # /sys: hwloc
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    for module in ("numpy", "mpi4py"):
        found = __import__("importlib.util").util.find_spec(module)
        if found is not None and found.origin:
            prefixes.add(os.path.dirname(os.path.dirname(os.path.realpath(found.origin))))
    prefixes |= {os.path.realpath(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p}
    package = os.path.dirname(os.path.dirname(HERE))  # the whole `checking` package, read-only
    inside = (lambda path: any(path.startswith(folder + "/") for folder in readable))  # already in the view
    binds = [(p, p, False) for p in readable + sorted(prefixes) if os.path.isdir(p) and not inside(p)]
    binds += [(os.path.realpath(package), package, False), (scratch.checker, scratch.checker, False),
              (scratch.data, scratch.data, False), (scratch.work, scratch.work, True), (log_dir, log_dir, True)]
    return sorted({target: (source, target, writable) for source, target, writable in binds}.values(),
                  key=lambda bind: bind[1].count("/"))


# ----------------------------------------------------------------------------- what stopped a job

SIGNALS = {signal.SIGXCPU: "the CPU time limit of {cpu} s", signal.SIGXFSZ: "the file-size limit of {file_size}"}
ERRORS = (("MemoryError", "the address-space limit of {address_space}"),
          ("Unable to allocate", "the address-space limit of {address_space}"),
          ("[Errno 27]", "the file-size limit of {file_size}"),
          ("[Errno 11] Resource temporarily unavailable", "the process limit of {processes}"),
          ("[Errno 24]", "the open-files limit of {open_files}"),
          ("[Errno 30] Read-only file system", "the sandbox's read-only view of the files"),
          ("[Errno 101] Network is unreachable", "the sandbox's network namespace (no network)"),
          # the host's 127.0.0.1 is, inside, the job's own loopback, where nothing listens
          ("[Errno 111] Connection refused", "the sandbox's network namespace (no network)"),
          ("[Errno 99] Cannot assign requested address", "the sandbox's network namespace (no network)"))


def sizes(limits):
    """The limits as the sheet writes them (bytes as MiB or GiB)."""
    def size(value):
        return f"{value / GIB:g} GiB" if value >= GIB else f"{value // MIB} MiB"
    return {key: (size(value) if key in ("address_space", "file_size") else value) for key, value in limits.items()}


OUTPUTS = ("stdout.txt", "stderr.txt")  # the job's output, as jobs.run_job names it
MISSING = r"No such file or directory: '(/[^']*)'"  # an absolute path: outside the view?


def stops(sandbox, log_dir, processes, results, work):
    """The lines that say which limit stopped which rank of a job: from the guards' usage.RANK.json, the
    ranks' errors, the job stage's job.json and the size of the job's output."""
    if sandbox.mode == "none":
        return []
    named = sizes(sandbox.limits)
    usages = [read_json(os.path.join(log_dir, f"usage.{rank}.json")) for rank in range(processes)]
    lines = [line for rank, usage in enumerate(usages) for line in signal_lines(rank, usage, sandbox.limits, named)]
    lines += [line for rank, records in enumerate(results) for record in records
              for line in error_lines(rank, record, sandbox.mode, work, named)]
    return list(dict.fromkeys(lines + job_lines(log_dir, usages, sandbox.limits, named, lines)))


def signal_lines(rank, usage, limits, named):
    """A rank killed by a limit's signal (others, e.g. a job's cleanup, are no limit's doing)."""
    number = usage.get("signal")
    if number in SIGNALS:
        return [f"rank {rank} was killed by {signal.Signals(number).name}: " + SIGNALS[number].format(**named)]
    if number == signal.SIGKILL and usage.get("cpu", 0) >= limits["cpu"]:
        return [f"rank {rank} was killed by SIGKILL: the CPU time limit of {named['cpu']} s (after ignoring SIGXCPU)"]
    return []


def error_lines(rank, record, mode, work, named):
    """A rank's error that a limit or the view caused (MemoryError, File too large, ...)."""
    message = str(record.get("error", ""))
    found = next((limit for key, limit in ERRORS if key in message), None)
    missing = __import__("re").search(MISSING, message)
    if not found and mode == "namespaces" and missing and not missing.group(1).startswith(work):
        found = "the sandbox's view (outside its scratch folder only the system and the checker are there)"
    if not found:
        return []
    return [f"rank {rank} stopped by {found.format(**named)}: {message[:160]}"
            + (f" at {record['at']}" if record.get("at") else "")]


def job_lines(log_dir, usages, limits, named, found):
    """The job's output over the file-size limit; mpiexec killed; else the first rank that lost its guard."""
    lines, stage = [], read_json(os.path.join(log_dir, "job.json"))
    if stage.get("output_full") or output_size(log_dir) >= limits["file_size"]:
        lines.append(f"the job's output reached the file-size limit of {named['file_size']}: mpiexec could "
                     f"write no more and the job was ended")
    if stage.get("signal") and not stage.get("output_full"):  # the sandbox's own kill said by the line above
        lines.append(f"mpiexec was killed by {signal.Signals(stage['signal']).name}")
    ranks = {usage.get("rank_pid"): rank for rank, usage in enumerate(usages)}
    orphans = [(ranks[pid], number) for pid, number in stage.get("orphans", []) if pid in ranks]
    if orphans and orphans[0][1] == signal.SIGKILL and not (found or lines):  # the first; the rest are cleanup
        lines.append(f"rank {orphans[0][0]} was killed by SIGKILL with its parent, the sandbox's guard of the rank, "
                     f"which a process of the job killed (no limit)")
    return lines


def output_size(log_dir):
    """The size of the job's larger output file (0 if none)."""
    sizes = [os.path.getsize(path) for path in (os.path.join(log_dir, name) for name in OUTPUTS)
             if os.path.exists(path)]
    return max(sizes, default=0)


def read_json(path):
    import json
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# ----------------------------------------------------------------------------- inside: the job stage

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWPID = 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 24, 28, 36, 38
SECURE_NOROOT_LOCKED = 0b101111  # noroot, no_setuid_fixup, keep_caps, each locked: root regains nothing on exec
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq as these two ioctls use it: the interface's name, its flags, the rest (40 bytes)

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def call(name, *args):
    """A libc call; OSError with the errno and the call's name if it fails."""
    if getattr(libc(), name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{name}{tuple(a.decode() if isinstance(a, bytes) else a for a in args[:2])}: "
                              f"{os.strerror(number)}")


def mount(source, target, fstype=None, flags=0, data=None):
    encode = (lambda text: text.encode() if text is not None else None)
    call("mount", encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def enter_namespaces(uid):
    """unshare() into new namespaces where JOB_ID stands for the grader's uid and gid (or `uid`, for a root
    grader); uid 0 there stands for no one. The process keeps every capability in them either way."""
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID
    if uid is None:
        outer_uid, outer_gid = os.geteuid(), os.getegid()
        call("unshare", flags)
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", f"{JOB_ID} {outer_uid} 1")
        write("/proc/self/gid_map", f"{JOB_ID} {outer_gid} 1")
        return
    # Only a process still outside the new user namespace may map other ids: a child writes ours.
    ready, done = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(done)
        os.read(ready, 1)
        try:
            write(f"/proc/{os.getppid()}/uid_map", f"{JOB_ID} {uid} 1")
            write(f"/proc/{os.getppid()}/gid_map", f"{JOB_ID} {uid} 1")
            os._exit(0)
        except OSError:
            os._exit(1)
    os.close(ready)
    try:
        call("unshare", flags)
    finally:
        os.write(done, b"x")
        os.close(done)
        _, status = os.waitpid(helper, 0)
    if status != 0:
        raise OSError(errno.EPERM, f"could not map uid {JOB_ID} to {uid} in the user namespace")


def become_job_user():
    """A root grader's process: take JOB_ID (until then it is no one in the namespace), with no supplementary
    groups. Its capabilities stay: the kernel clears them on a change of uid only when the process leaves the
    namespace's uid 0, and uid 0 is not mapped here."""
    os.setgroups([])
    os.setresgid(JOB_ID, JOB_ID, JOB_ID)
    os.setresuid(JOB_ID, JOB_ID, JOB_ID)


def loopback_up():
    """Bring up the new network namespace's loopback, down when made: Open MPI's PMIx will not start without an
    interface, even on one node. It is the namespace's own; nothing outside is routed."""
    import fcntl
    import socket
    import struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        asked = fcntl.ioctl(handle, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0))
        flags = struct.unpack(IFREQ, asked)[1]
        fcntl.ioctl(handle, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def kept_flags(path):
    """The mount flags a remount of `path` must keep (a user namespace may not clear them)."""
    flags = os.statvfs(path).f_flag
    return sum(bit for st, bit in ((os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME),
                                   (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))
               if flags & st)


def mount_view(spec):
    """Bind the job's files onto the staging tree the grader made, before this process takes the namespace's
    uid (a root grader's paths such as /root/.pyenv stay reachable only until then)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = spec["root"]
    mount(root, root, None, MS_BIND)
    for source, target, writable in spec["binds"]:
        inside = root + target
        mount(source, inside, None, MS_BIND | MS_REC)
        flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | kept_flags(inside)
        mount(None, inside, None, flags | (0 if writable else MS_RDONLY))
    for name in DEVICES:
        mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777," + TMPFS_SIZE)
    os.chdir(root)


def enter_view():
    """Process 1 of the new PID namespace, in the staging tree: a /proc of its own, then pivot into the tree."""
    mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is not None:
        call("syscall", ctypes.c_long(number), b".", b".")
        call("umount2", b".", MNT_DETACH)
    else:
        os.chroot(".")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/")


def drop_privileges():
    """No capability survives exec: nothing in the job can mount, unmount or remount."""
    call("prctl", PR_SET_SECUREBITS, ctypes.c_ulong(SECURE_NOROOT_LOCKED), 0, 0, 0)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for capability in range(last + 1):
        call("prctl", PR_CAPBSET_DROP, ctypes.c_ulong(capability), 0, 0, 0)
    call("prctl", PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0)


def set_limits(limits):
    """The limits, for the launcher and (inherited) every rank."""
    import resource
    for name, value, extra in (("RLIMIT_CPU", limits["cpu"], 5), ("RLIMIT_AS", limits["address_space"], 0),
                               ("RLIMIT_FSIZE", limits["file_size"], 0), ("RLIMIT_NPROC", limits["processes"], 0),
                               ("RLIMIT_NOFILE", limits["open_files"], 0), ("RLIMIT_CORE", 0, 0)):
        kind = getattr(resource, name)
        hard = resource.getrlimit(kind)[1]
        hard = value + extra if hard == resource.RLIM_INFINITY else min(value + extra, hard)
        resource.setrlimit(kind, (min(value, hard), hard))


def launch(spec, command):
    """Fork mpiexec under the limits, wait for it -> its exit code. job.json gets the signal that killed it and
    the orphans reaped meanwhile (a rank whose guard was killed), in order."""
    call("prctl", PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            os.chdir(spec["work"])
            set_limits(spec["limits"])
            os.execv(command[0], command)
        except OSError as error:
            print(f"sandbox (job): {command[0]}: {error}", file=sys.stderr, flush=True)
        finally:
            os._exit(127)
    full = watch_output(child, spec["limits"]["file_size"])
    orphans = []
    while True:  # a subreaper (process 1 of the namespace, too) reaps every orphan
        pid, status = os.wait()
        if pid == child:
            break
        orphans.append((pid, os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0))
    signal.setitimer(signal.ITIMER_REAL, 0)
    record = {"orphans": orphans, **({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {}),
              **({"output_full": True} if full else {})}
    with open(os.path.join(spec["log_dir"], "job.json"), "w") as f:
        __import__("json").dump(record, f)  # loaded already: the job stage read its spec with it
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def watch_output(child, limit):
    """Kill mpiexec (`child`) once the job's output (this stage's stdout or stderr, files) reaches the file-size
    limit -> a list that holds True once it has. MPICH's mpiexec ends the job itself when its write fails;
    Open MPI's drops the rest and lets the ranks write on. Checked 5 times a second, on a timer that os.wait()
    survives."""
    full = []

    def check(*_):
        try:
            if not full and max(os.fstat(1).st_size, os.fstat(2).st_size) >= limit:  # a pipe's size is 0
                full.append(True)
                os.kill(child, signal.SIGKILL)
        except OSError:
            pass
    signal.signal(signal.SIGALRM, check)
    signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
    return full


def job_stage(spec, command):
    """The job stage: namespaces (or not), the view, no capabilities, the limits, then mpiexec."""
    if spec["mode"] == "limits":
        return launch(spec, command)
    enter_namespaces(spec["uid"])
    loopback_up()
    mount_view(spec)
    if spec["uid"] is not None:
        become_job_user()
    init = os.fork()  # process 1 of the new PID namespace
    if init == 0:
        try:
            call("prctl", PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
            enter_view()
            drop_privileges()
            code = launch(spec, command)
        except BaseException as error:  # noqa: B902 - said, then the job fails
            print(f"sandbox: {error}", file=sys.stderr, flush=True)
            code = 125
        os._exit(code)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda received, _: os.kill(init, signal.SIGKILL))
    _, status = os.waitpid(init, 0)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


# ----------------------------------------------------------------------------- inside: one rank

def launcher_rank():
    """This rank's number as its launcher told it (utils.launcher_rank's loop: this stage imports nothing)."""
    for variable in RANK_VARIABLES:
        if variable in os.environ:
            return int(os.environ[variable])
    return 0


def rank_stage(log_dir, command):
    """Run one rank as a child; write its CPU time, peak memory and the signal that killed it, then end
    as it ended."""
    call("prctl", PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
    path = os.path.join(log_dir, f"usage.{launcher_rank()}.json")
    child = os.fork()
    if child == 0:
        try:
            call("prctl", PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
            os.execv(command[0], command)
        except OSError as error:
            print(f"sandbox (rank): {command[0]}: {error}", file=sys.stderr, flush=True)
        finally:
            os._exit(127)
    with open(path, "w") as f:
        f.write(f'{{"rank_pid": {child}}}')  # how the job stage knows this rank if it is orphaned
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(number, lambda received, _: os.kill(child, received))
    _, status, usage = os.wait4(child, 0)
    record = {"rank_pid": child, "cpu": round(usage.ru_utime + usage.ru_stime, 2),
              "rss_mb": round(usage.ru_maxrss / 1024, 1)}
    if os.WIFSIGNALED(status):
        record["signal"] = os.WTERMSIG(status)
    try:
        with open(path, "w") as f:
            f.write(str(record).replace("'", '"'))  # numbers only: JSON without json
    except OSError:
        pass
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


# ----------------------------------------------------------------------------- can this machine do it

_available = None


def namespaces_available():
    """-> (True, "") where an unprivileged user, mount, network and PID namespace can be made, else (False, why)."""
    global _available
    if _available is None:
        import subprocess
        probe = subprocess.run([real_python(), "-I", "-S", HERE, "probe"], capture_output=True, text=True,
                               timeout=60)
        _available = (probe.returncode == 0, (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1])
    return _available


def probe():
    """Enter the namespaces, bring the loopback up and mount a /proc there, as a job would."""
    uid = SANDBOX_ID if os.geteuid() == 0 else None
    enter_namespaces(uid)
    loopback_up()
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if uid is not None:
        become_job_user()
    child = os.fork()
    if child == 0:
        try:
            mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_SIZE)
            os.makedirs("/tmp/proc")
            mount("proc", "/tmp/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            os._exit(0)
        except OSError as error:
            print(error, file=sys.stderr)
            os._exit(1)
    status = os.waitpid(child, 0)[1]
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def main(argv):
    stage = argv[0]
    try:
        if stage == "probe":
            return probe()
        split = argv.index("--")
        if stage == "job":
            import json
            return job_stage(json.loads(argv[1]), argv[split + 1:])
        return rank_stage(argv[1], argv[split + 1:])
    except OSError as error:
        print(f"sandbox ({stage}): {error}", file=sys.stderr, flush=True)
        return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
