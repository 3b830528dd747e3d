"""Many submissions: each checked by a `check_submission.py` process of its own, on cores of its own, side
by side (--jobs N) or as one Slurm array task each (--slurm); resumable; a progress line as each finishes.

The batch's folder (--sheet DIR; without it a temporary one, and the batch cannot be resumed) holds each
submission's sheet NAME.md and record NAME.json, each written whole under a temporary name and then
renamed, the record last: a record on disk is a finished submission, and a rerun of the same command
checks only the others. A submission that could not run (its record says "not run": the launcher, the MPI
runtime or the sandbox failed before its code ran) is not finished and not scored: the batch ends with
exit status 2, and a rerun checks it again. The folder keeps the options it was checked with (.batch.json)
and refuses others. --json and --summary are written at the end from every record, in the order given.

Each child (child.py) is pinned to a slot of the batch's cores; a crash of one touches no other. A slow
job on a busy slot is not taken for a hung one: the stall clock (running/stall.py) discounts the time
other work held it back. Times are each run's own: a submission's seconds under --jobs or Slurm are not
comparable with a run alone, and the sheet says on which cores it ran.
"""
import collections
import json
import os
import shutil
import signal
import sys
import tempfile
import time

from checking.grading.child import (BatchError, Child, core_slots, default_jobs, forget_not_run, read_record,
                                    shared_arguments)
from checking.grading.outputs import write_whole
from checking.grading.sheet import NOT_RUN, write_summary
from checking.grading.slurm_array import run_slurm
from checking.running.jobs import submission_name

__all__ = ["run_batch"]

BATCH_FILE = ".batch.json"


class Progress:
    """One line per submission as it finishes: its verdict and points (or why it could not run), then done,
    left, and time to go."""

    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.monotonic()

    def finished(self, entry):
        self.done += 1
        left = self.total - self.done
        each = (time.monotonic() - self.start) / self.done  # the batch's pace, all slots together
        to_go = f", about {duration(each * left)} to go" if left else ""
        print(f"{verdict_text(entry)}, {entry['seconds']:.0f} s [{self.done} done, {left} left{to_go}]", flush=True)


def verdict_text(entry):
    """'SOURCE: fail (files.import), 17/20 points', or 'SOURCE: not run (why)': it has no points."""
    if entry["verdict"] == NOT_RUN:
        return f"{entry['source']}: {NOT_RUN} ({entry['reason']})"
    failed = f" ({', '.join(entry['failed'])})" if entry["failed"] else ""
    return f"{entry['source']}: {entry['verdict']}{failed}, {entry['score']:g}/{entry['max_score']:g} points"


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
    # Without --cache, the batch's own: the data and each skeleton's serial baseline made once for all of it.
    own = shared if options.cache else shared + ["--cache", os.path.join(temporary_root, "cache")]
    try:
        while queue or running:
            for slot in [s for s in range(jobs) if s not in running][:len(queue)]:
                source, name = queue.popleft()
                running[slot] = Child(source, name, folder, own, slots[slot], temporary_root)
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
        for _, name in todo:
            forget_not_run(folder, name)
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
    if verdicts[NOT_RUN]:
        print(f"check_submission.py: {verdicts[NOT_RUN]} could not run (not graded): once the cause is mended, run "
              "the same command again to check them", file=sys.stderr)
        return 2
    return 0 if verdicts["pass"] == len(entries) else 1
