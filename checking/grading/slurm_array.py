"""A batch as a Slurm array (check_submission.py --slurm): one array task per submission still to check.

    sbatch --array=0-K[%N] --cpus-per-task=2 ... --wrap "python3 -m checking.grading.slurm_array TASKS.json"

TASKS.json (in the batch folder's .slurm/, with each task's output %A_%a.out) lists the submissions and
the options they share; task i runs check_submission.py on the i-th, on the cores Slurm gave it, with
its record and sheet written into the batch folder as a local batch writes them (batch.py); a task whose
submission could not run leaves a "not run" record and fails (exit status 1). The node
needs the same paths as the submitting machine (a shared file system, as a cluster's home). Slurm's
own settings come from the usual SBATCH_* variables (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT).
While the array runs (squeue lists it), the submitting process prints a progress line as each record
appears, then merges them like a local batch.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from checking.grading.child import CORES_PER_SUBMISSION, BatchError, Child, read_entry
from checking.grading.options import parse
from checking.grading.outputs import write_whole
from checking.grading.sheet import error_record
from checking.running.jobs import PROJECT_DIR

__all__ = ["run_slurm", "task"]


def submit(todo, folder, shared, jobs):
    """Write the task list and submit the array -> (its job id, the state folder)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None or shutil.which("squeue") is None:
        raise BatchError("--slurm: no sbatch or squeue on PATH")
    state = os.path.join(os.path.abspath(folder), ".slurm")
    tasks = os.path.join(state, f"tasks-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json")
    write_whole(tasks, json.dumps({"folder": os.path.abspath(folder), "shared": shared,
                                   "tasks": [list(pair) for pair in todo]}, indent=1) + "\n")
    array = f"0-{len(todo) - 1}" + (f"%{jobs}" if jobs else "")
    script = (f"exec env PYTHONPATH={shlex.quote(PROJECT_DIR)} {shlex.quote(sys.executable)} "
              f"-m checking.grading.slurm_array {shlex.quote(tasks)}")
    command = [sbatch, "--parsable", f"--array={array}", "--job-name=hw3-check",
               f"--cpus-per-task={CORES_PER_SUBMISSION}", f"--output={state}/%A_%a.out", f"--chdir={os.getcwd()}",
               "--wrap", script]
    submitted = subprocess.run(command, capture_output=True, text=True)
    job = submitted.stdout.strip().split(";")[0]
    if submitted.returncode != 0 or not job:
        raise BatchError(f"sbatch failed: {submitted.stderr.strip()}")
    return job, state


def queued(job):
    """Whether any task of array `job` is still pending or running."""
    listed = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True, text=True)
    return listed.returncode == 0 and bool(listed.stdout.strip())


def run_slurm(todo, folder, shared, options, progress):
    """Check `todo` ((source, name) pairs) as one Slurm array; a progress line as each record appears
    -> {name: record}."""
    if not todo:
        return {}
    job, state = submit(todo, folder, shared, options.jobs)
    print(f"check_submission.py: {len(todo)} to check as Slurm array job {job}"
          + (f", at most {options.jobs} at a time" if options.jobs else ""), file=sys.stderr)
    records, names = {}, [name for _, name in todo]
    try:
        while True:
            ended = not queued(job)
            for name in names:
                entry = None if name in records else read_entry(folder, name)  # "not run" ones too
                if entry is not None:
                    records[name] = entry
                    progress.finished(entry)
            if ended:
                break
            time.sleep(1.0)
    except KeyboardInterrupt:
        subprocess.run(["scancel", job], check=False)
        raise
    for source, name in todo:  # a task that left no record: what its output's last line says
        if name not in records:
            outputs = [os.path.join(state, f) for f in os.listdir(state) if f.startswith(f"{job}_{names.index(name)}.")]
            last = tail(outputs[0]) if outputs else "no output"
            records[name] = error_record(source, f"Slurm task {job}_{names.index(name)} left no record: {last}",
                                         options)
            progress.finished(records[name])
    return records


def tail(path):
    with open(path, errors="replace") as f:
        lines = f.read().strip().splitlines()
    return lines[-1] if lines else "no output"


def task(tasks_path, index):
    """Array task `index`: check its submission into the batch folder -> exit status (0: a record was written)."""
    with open(tasks_path) as f:
        spec = json.load(f)
    source, name = spec["tasks"][index]
    options = parse(spec["shared"] + [source])
    temporary_root = tempfile.mkdtemp(prefix="hw3-task-")
    try:
        child = Child(source, name, spec["folder"], spec["shared"], None, temporary_root)
        child.process.wait()
        entry, finished = child.settle(options)
    finally:
        shutil.rmtree(temporary_root, ignore_errors=True)
    why = entry.get("reason") or ", ".join(entry["failed"])
    print(f"{source}: {entry['verdict']}" + (f" ({why})" if why else ""))
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(task(sys.argv[1], int(os.environ["SLURM_ARRAY_TASK_ID"])))
