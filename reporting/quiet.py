"""Whether the machine is quiet: the CPU time other processes used over a short window, from the kernel's /proc/stat.

A run's time is the algorithm's only when nothing else runs beside it, so report.py measures before each run and waits,
a bounded time, until the others use less than a threshold. It measures the CPU time used now, not the load average:
the load average remembers the last minutes, so a run's own 16 time-shared ranks, just ended, would hold back the next
run for minutes, while their CPU time stops the moment they exit.
"""
__all__ = ["others_cores", "wait_for_quiet", "WINDOW"]

import os
import time

WINDOW = 0.5  # seconds over which the others' CPU time is measured


def busy_ticks():
    """(busy, total) clock ticks of all cores since boot: busy is all but idle and waiting for I/O; time the
    hypervisor gave to other machines (steal) counts as busy, since it was not ours."""
    with open("/proc/stat") as f:
        ticks = [int(t) for t in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def own_seconds():
    """CPU seconds of this process and of the children it has waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def others_cores(window=WINDOW):
    """Cores' worth of CPU time other processes used over `window` seconds (0.5: half a core busy on average), or
    None where /proc/stat cannot be read."""
    try:
        busy, total = busy_ticks()
        own, start = own_seconds(), time.perf_counter()
        time.sleep(window)
        busy_after, total_after = busy_ticks()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = time.perf_counter() - start
    used = (busy_after - busy) / max(total_after - total, 1) * (os.cpu_count() or 1)
    return max(0.0, used - (own_seconds() - own) / elapsed)


def wait_for_quiet(below, limit, window=WINDOW):
    """Measure until other processes use fewer than `below` cores, for at most `limit` seconds -> runs.csv's
    columns: others_cores (the last measure, in cores), quiet_wait (seconds measured and waited), quiet."""
    start = time.perf_counter()
    while True:
        others = others_cores(window)
        waited = time.perf_counter() - start
        quiet = others is not None and others < below
        if quiet or waited >= limit:
            return {"others_cores": None if others is None else round(others, 3), "quiet_wait": round(waited, 1),
                    "quiet": quiet}
