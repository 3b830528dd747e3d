"""Many submissions: each checked by a `check_submission.py` process of its own, on cores of its own, side
by side (--jobs N) or as one Slurm array task each (--slurm); resumable; a progress line as each finishes.

The batch's folder (--sheet DIR; without it a temporary one, and the batch cannot be resumed) holds each
submission's sheet NAME.md and record NAME.json, each written whole under a temporary name and then
renamed, the record last: a record on disk is a finished submission, and a rerun of the same command
checks only the others. The folder keeps the options it was checked with (.batch.json) and refuses
others. --json and --summary are written at the end from every record, in the order given.

Each child is pinned (os.sched_setaffinity before it starts; mpiexec and the ranks inherit it) to a slot
of the batch's cores, N slots sharing them evenly: on 2 cores --jobs 2 gives one core each, and no two
children share a core while N <= cores. The default N is one per CORES_PER_SUBMISSION cores: the
checker's timeouts and figures were set on 2 cores, and a 2-process job then has a core per rank. A
crash of one child touches no other. A slow job on a busy slot is not taken for a hung one: the stall
clock (stall.py) discounts the time other work held it back. Times are each run's own: a submission's
seconds under --jobs or Slurm are not comparable with a run alone, and the sheet says on which cores it ran.
"""
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checking.running.stall import process_tree

__all__ = ["run_batch", "default_jobs", "core_slots", "shared_arguments", "error_record", "write_whole",
           "CORES_PER_SUBMISSION"]

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER = os.path.join(PROJECT_DIR, "check_submission.py")
CORES_PER_SUBMISSION = 2
BATCH_FILE = ".batch.json"
OWN_OPTIONS = {"--json": 1, "--sheet": 1, "--summary": 1, "--gradescope": 1, "--jobs": 1, "--slurm": 0}  # -> values
SCHEDULER_VARIABLES = ("SLURM_", "PMI_", "PMIX_", "HYDRA_")  # a child's mpiexec must start its ranks itself


class BatchError(Exception):
    """A batch that cannot start (one line)."""


def default_jobs(cores=None):
    """One submission per CORES_PER_SUBMISSION of the cores this process may use, at least one."""
    return max(1, len(os.sched_getaffinity(0) if cores is None else cores) // CORES_PER_SUBMISSION)


def core_slots(cores, jobs):
    """`jobs` sets of cores: an even split of `cores`, or one core each, shared, when jobs > cores."""
    cores = sorted(cores)
    if jobs <= len(cores):
        return [set(cores[i * len(cores) // jobs:(i + 1) * len(cores) // jobs]) for i in range(jobs)]
    return [{cores[i % len(cores)]} for i in range(jobs)]


def submission_name(source):
    """The name a submission's sheet and record get (as the scratch copy names it)."""
    return os.path.splitext(os.path.basename(os.path.normpath(source)))[0]


def shared_arguments(argv, submissions):
    """The options every submission's own run gets: `argv` less the submissions and the batch's own options."""
    shared, values, sources = [], 0, set(submissions)
    for token in argv:
        flag = token.split("=", 1)[0]
        if values:
            values -= 1
        elif flag in OWN_OPTIONS:
            values = 0 if "=" in token else OWN_OPTIONS[flag]
        elif token not in sources:
            shared.append(token)
    return shared


def error_record(source, message, options):
    """The record of a submission that could not be checked: no checks, no points."""
    return {"submission": submission_name(source), "source": source, "verdict": "error", "failed": [message],
            "seconds": 0.0, "checks": [], "jobs": [], "score": 0,
            "max_score": options.rubric.maximum(options.only), "rubric": options.rubric.source}


def write_whole(path, text):
    """Write `text` to `path` whole or not at all (a temporary name, then renamed)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        f.write(text)
    os.replace(temporary, path)


def read_record(folder, name):
    """A finished submission's record, or None."""
    try:
        with open(os.path.join(folder, name + ".json")) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and "verdict" in entry else None


def kill_tree(pid):
    """Stop `pid` and every process under it (mpiexec, the ranks), then kill them."""
    tree = process_tree(pid)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for member in tree:
            try:
                os.kill(member, sig)
            except ProcessLookupError:
                pass


class Child:
    """One submission's check_submission.py, pinned to `cores` (None: as started), in a TMPDIR of its own."""

    def __init__(self, source, name, folder, shared, cores, temporary_root):
        self.source, self.name, self.folder = source, name, folder
        self.tmp = tempfile.mkdtemp(prefix=f"{name}-", dir=temporary_root)
        environment = {key: value for key, value in os.environ.items() if not key.startswith(SCHEDULER_VARIABLES)}
        environment["TMPDIR"] = self.tmp  # its scratch copies: removed with it, even when it is killed
        self.stderr = open(os.path.join(self.tmp, "stderr.txt"), "w+")
        command = [sys.executable, CHECKER, source, *shared, "--json", os.path.join(folder, name + ".json"),
                   "--sheet", os.path.join(folder, name + ".md")]
        # A session of its own: a Ctrl-C reaches the batch alone, which then ends each child's whole tree.
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self.stderr, env=environment,
                                        start_new_session=True,
                                        preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores))

    def settle(self, options):
        """After it ended -> (its record, finished): a record on disk, or an error record (finished when the
        submission itself cannot be checked; a crash is not, so a rerun tries it again)."""
        self.stderr.seek(0)
        lines = self.stderr.read().strip().splitlines()
        self.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        code, last = self.process.returncode, lines[-1] if lines else ""
        entry = read_record(self.folder, self.name)
        if entry is not None and code in (0, 1):
            return entry, True
        if code == 2 and last.startswith("check_submission.py: error: "):
            entry = error_record(self.source, last.split(": error: ", 1)[1], options)
            write_whole(os.path.join(self.folder, self.name + ".json"), json.dumps(entry, indent=1) + "\n")
            return entry, True
        return error_record(self.source, f"the checker ended with exit status {code}: {last}", options), False

    def kill(self):
        kill_tree(self.process.pid)
        self.process.wait()
        self.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Progress:
    """One line per submission as it finishes: its verdict and points, then done, left, and time to go."""

    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.monotonic()

    def finished(self, entry):
        self.done += 1
        left = self.total - self.done
        each = (time.monotonic() - self.start) / self.done  # the batch's pace, all slots together
        to_go = f", about {duration(each * left)} to go" if left else ""
        failed = f" ({', '.join(entry['failed'])})" if entry["failed"] else ""
        print(f"{entry['source']}: {entry['verdict']}{failed}, {entry['score']:g}/{entry['max_score']:g} points, "
              f"{entry['seconds']:.0f} s [{self.done} done, {left} left{to_go}]", flush=True)


def duration(seconds):
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def run_local(todo, folder, shared, options, progress):
    """Check `todo` ((source, name) pairs) here, options.jobs at a time -> {name: record}."""
    if not todo:
        return {}
    jobs = min(options.jobs or default_jobs(), len(todo))
    slots, queue, running, records = core_slots(os.sched_getaffinity(0), jobs), collections.deque(todo), {}, {}
    print(f"check_submission.py: {len(todo)} to check, {jobs} at a time, on cores "
          f"{' | '.join(','.join(map(str, sorted(slot))) for slot in slots)}", file=sys.stderr)
    temporary_root = tempfile.mkdtemp(prefix="hw3-batch-")
    try:
        while queue or running:
            for slot in [s for s in range(jobs) if s not in running][:len(queue)]:
                source, name = queue.popleft()
                running[slot] = Child(source, name, folder, shared, slots[slot], temporary_root)
            time.sleep(0.2)
            for slot, child in list(running.items()):
                if child.process.poll() is not None:
                    del running[slot]
                    records[child.name], _ = child.settle(options)
                    progress.finished(records[child.name])
    finally:
        for child in running.values():
            child.kill()
        shutil.rmtree(temporary_root, ignore_errors=True)
    return records


def claim(folder, shared):
    """Mark `folder` as this batch's; BatchError if it holds a batch checked with other options."""
    path = os.path.join(folder, BATCH_FILE)
    try:
        with open(path) as f:
            before = json.load(f)["options"]
    except (OSError, ValueError, KeyError):
        before = None
    if before is not None and before != shared:
        raise BatchError(f"{folder} holds a batch checked with other options ({' '.join(before) or 'none'}): "
                         "rerun with those, or use another --sheet folder")
    write_whole(path, json.dumps({"options": shared}) + "\n")


def run_batch(options, argv):
    """Check options.submissions as a batch; write --json and --summary from every record -> exit status."""
    from checking.grading.sheet import write_summary
    from checking.grading.slurm_array import run_slurm
    names = [submission_name(source) for source in options.submissions]
    twice = sorted({name for name in names if names.count(name) > 1})
    folder = options.sheet or tempfile.mkdtemp(prefix="hw3-batch-sheets-")
    shared = shared_arguments(argv, options.submissions)
    stop = signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill ends the children too
    try:
        if twice:
            raise BatchError(f"two or more submissions named {', '.join(twice)}: their sheets would collide")
        os.makedirs(folder, exist_ok=True)
        claim(folder, shared)
        done = {name: read_record(folder, name) for name in names}
        todo = [(source, name) for source, name in zip(options.submissions, names) if done[name] is None]
        if len(todo) < len(names):
            print(f"check_submission.py: {len(names) - len(todo)} of {len(names)} already checked in {folder}",
                  file=sys.stderr)
        records = (run_slurm if options.slurm else run_local)(todo, folder, shared, options, Progress(len(todo)))
    except BatchError as error:
        print(f"check_submission.py: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"check_submission.py: stopped; the finished ones are in {folder}: run the same command again to "
              "check the rest", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, stop)
    entries = [records.get(name) or done[name] for name in names]
    if options.json:
        write_whole(options.json, json.dumps(entries, indent=1) + "\n")
    if options.summary:
        write_summary(options.summary, entries)
    if not options.sheet:
        shutil.rmtree(folder, ignore_errors=True)
    verdicts = collections.Counter(entry["verdict"] for entry in entries)
    print(f"check_submission.py: {', '.join(f'{n} {v}' for v, n in verdicts.items())}; each time is its own run's, "
          "not comparable with a run alone or under other --jobs", file=sys.stderr)
    return 0 if verdicts["pass"] == len(entries) else 1
