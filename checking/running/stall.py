"""The stall clock: a job's time, less the time other work on its cores kept its processes waiting.

A job is declared hung when none of its ranks has logged anything for `--timeout` seconds (jobs.py). On
a busy machine (the other submissions of a batch, another user, a Slurm node whose tasks are not bound)
a slow job's ranks wait for a core, and wall time would count that wait against them. So the clock
counts wall time less the time the job was held back, measured every HELD_EVERY seconds as the smaller of

- the share of its cores (its CPU affinity) busy with processes outside the job (/proc/stat less the
  job's own CPU time), and
- the longest any one of its processes waited runnable for a core (/proc/PID/schedstat),

so a job alone on its cores runs on wall time, its own ranks' crowding (5 ranks on 2 cores) holds
nothing back, and a job that sleeps (a deadlock that does not spin) is not held back by a busy
machine. Where /proc cannot be read the clock is wall time.
"""
import collections
import os
import time

__all__ = ["StallClock", "process_tree"]

TICK = os.sysconf("SC_CLK_TCK")  # /proc's CPU times are in these
HELD_EVERY = 0.5  # seconds between measurements (/proc is read then)
RESCAN_EVERY = 2.0  # seconds between walks of /proc for the job's processes (ranks start within the first)


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (state first)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def process_tree(root):
    """`root` and every process descended from it, read from /proc (parents first)."""
    children = collections.defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children[int(stat_fields(name)[1])].append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    tree, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def busy_seconds(cpus):
    """CPU seconds the cores `cpus` have spent busy since boot (user, nice, system, irq, softirq, steal)."""
    total = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *values = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                user, nice, system, _, _, irq, softirq, steal = map(int, values[:8])
                total += user + nice + system + irq + softirq + steal
    return total / TICK


def process_times(pid):
    """(CPU seconds, seconds spent runnable waiting for a core) of one process."""
    fields = stat_fields(pid)
    with open(f"/proc/{pid}/schedstat") as f:
        waited = int(f.read().split()[1]) / 1e9
    return (int(fields[11]) + int(fields[12])) / TICK, waited


class StallClock:
    """held_back(): the seconds a job (`root` and its descendants) has been kept waiting by other work."""

    def __init__(self, root):
        self.root = root
        try:
            self.cpus = os.sched_getaffinity(root)
            self.busy = busy_seconds(self.cpus)
        except OSError:
            self.cpus = None  # no /proc: wall time
        self.seen = {}  # pid -> (CPU seconds, waited) at its last reading; kept after it exits
        self.pids, self.scanned, self.measured, self.held = [], float("-inf"), time.monotonic(), 0.0

    def held_back(self):
        now = time.monotonic()
        if self.cpus is not None and now - self.measured >= HELD_EVERY:
            try:
                self.measure(now)
            except OSError:
                self.cpus = None
        return self.held

    def measure(self, now):
        if now - self.scanned >= RESCAN_EVERY:
            self.pids, self.scanned = process_tree(self.root), now
        own, waited = 0.0, 0.0
        for pid in self.pids:
            try:
                cpu, wait = process_times(pid)
            except (OSError, IndexError, ValueError):
                continue  # gone: its last reading stays in self.seen
            previous = self.seen.get(pid, (0.0, wait))
            own, waited = own + max(0.0, cpu - previous[0]), max(waited, wait - previous[1])
            self.seen[pid] = (cpu, wait)
        busy = busy_seconds(self.cpus)
        others = max(0.0, busy - self.busy - own) / len(self.cpus)
        self.busy, self.measured = busy, now
        self.held += min(others, waited)
