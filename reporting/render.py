"""REPORT.md and hw3.pdf: one dictionary of computed figures rendered by Jinja2 into REPORT.md.j2 and into
hw3.typ.j2, the Typst source of the course's five-page report.

The functions here compute figures and the comparisons the text turns on (booleans: faster or slower,
collapsed or not); the template holds every word and every table, and chooses between two phrasings with the
`choose` filter. A group of figures that cannot be computed is named at the end of REPORT.md and its figures
read as dashes.
"""
__all__ = ["figures", "render", "write_report", "check_questions", "check_console", "ConsoleMismatch"]

import math
import os
import re

import jinja2
import markupsafe
import pypdf

try:
    import typst
except ImportError:  # a machine that only runs the experiments (bench/device_report.sh): hw3.pdf is typeset later
    typst = None

from reporting.model import FORMS, exchange_time
from reporting.plots import COURSE_SYNC
from reporting.results import COLLAPSED_FROM, mean


class Dash(jinja2.ChainableUndefined):
    """A figure that was not computed: a dash in the text, nothing in a loop, false in a test."""

    def __str__(self):
        return "–"


def number(pattern, scale=1.0):
    """A filter writing a figure with `pattern`; a dash for one that was not measured."""
    return lambda value: "–" if value is None or isinstance(value, jinja2.Undefined) else pattern.format(
        scale * value)


def starred(cores):
    """A filter: '4*' when 4 processes exceed the cores (they take turns on them), else '4'."""
    return lambda p: "–" if p is None or isinstance(p, jinja2.Undefined) else f"{p}*" if p > cores else str(p)


def choose(condition, yes, no):
    """The phrase a comparison of figures calls for (its apostrophes typographic); a dash when it could not be made."""
    return "–" if condition is None or isinstance(condition, jinja2.Undefined) else (yes if condition else no).replace("'", "’")


FILTERS = {"sec": number("{:.2f} s"), "ms": number("{:.3g} ms", 1e3), "pct": number("{:.2f} %"),
           "times": number("{:.2f}×"), "signed": number("{:+.0f} %", 100), "share": number("{:.0f} %", 100),
           "share1": number("{:.1f} %", 100), "num": number("{:.3g}"), "thousands": number("{:,.0f}"),
           "fixed": number("{:.2f}"), "one": number("{:.1f}"), "us": number("{:.1f} µs", 1e6),
           "ns": number("{:.3f} ns", 1e9), "MB": number("{:.2f} MB", 1e-6), "minutes": number("{:.1f} min", 1 / 60),
           "choose": choose, "abs": lambda value: value if value is None or isinstance(value, jinja2.Undefined) else abs(value),  # and for hw3.typ.j2, a run's console output as a Typst string literal:
           "string": lambda text: markupsafe.Markup('"{}"'.format(text.replace("\\", "\\\\").replace('"', '\\"')))}


def error(model, measured):
    return None if model is None or not measured else (model - measured) / measured


def per_step(entry, key):
    return entry[key] / entry["steps"] if entry and entry.get(key) is not None and entry.get("steps") else None


def per_steps(e):
    """A sync entry with its measured compute, allreduce and update per step, and its steps per epoch."""
    return dict(e, compute=per_step(e, "compute_time"), exchange=per_step(e, "communication_time"),
                update_step=per_step(e, "update_time"), steps_per_epoch=e.get("steps") and e["steps"] // e["epochs"])


def spread(values):
    """(lowest, highest) of the values that were measured, None if none was."""
    values = [v for v in values if v is not None]
    return (min(values), max(values)) if values else None


def header(r, f):
    """Page 1: the settings, the machine, what the quiet gate measured, the runs that failed."""
    traces, shares = r.info.get("traces") or {}, r.info.get("test_label_shares")
    seed, waits = r.settings.get("seed") or 1, lambda e: e.get("core_wait_per_rank") or []  # noqa: E731
    busy = [x for x in r.runs if x["status"] == "ok" and x.get("quiet") is not True]  # failed: listed as such
    f.update(info=r.info, machine=r.machine, settings=r.settings, cores=r.cores, parameters=r.model.parameters,
             serial=r.serial, failed=[x for x in r.runs if x["status"] != "ok"],
             seeds=(seed, seed + (r.settings.get("repeats") or 1) - 1),
             busy=busy, busy_compute=not (r.info.get("compute_quiet") or {}).get("quiet"),
             others=spread(x.get("others_cores") for x in r.runs), quiet_below=r.settings.get("quiet_below"),
             one_digit=shares and (min(shares), max(shares)), collapsed_from=COLLAPSED_FROM,
             every_run=[dict(e, core_wait_share=mean(waits(e)) / e["time"] if waits(e) else None)
                        for e in [r.serial] + r.entries("sync") + r.entries("async")],
             validation_rows=next((x["rows"] for x in r.compute_rows if x["kind"] == "evaluate"), None),
             traces={stem: t["png"] for stem, t in traces.items()
                     if t.get("png") and os.path.exists(os.path.join(r.out, t["png"]))})


def fastest(r, entries):
    """The entry of highest speed-up among `entries` with a core per process (among all if none has one)."""
    entries = list(entries)
    return max([e for e in entries if e["processes"] <= r.cores] or entries, key=lambda e: e["speedup"], default=None)


def sync(r, f):
    """Q2 and Q4: strong scaling; weak scaling with plain SGD on serial's steps, and with fewer under main.py's rule."""
    strong, plain, rule = ([per_steps(e) for e in r.series(label)]
                           for label in ("sync ring strong", "sync ring weak plain", "sync ring weak"))
    at = lambda series, p: next((e for e in series if e["processes"] == p), None)  # noqa: E731
    serial = {x.get("seed"): x["test_accuracy"] for x in r.serial["seed_runs"]}
    pairs = [(x["test_accuracy"], serial[x.get("seed")])
             for e in strong for x in e["seed_runs"] if x.get("seed") in serial]
    best_strong, best_weak = fastest(r, strong), fastest(r, plain)
    f.update(serial_step=r.serial["time"] / (r.serial["epochs"] * r.serial["batches"]),
             serial_seeds=sorted(serial.items()), strong_same_seed=all(a == b for a, b in pairs) if pairs else None,
             ring_rows=[(p, at(strong, p), at(plain, p), at(rule, p)) for p in r.settings["processes"]],
             strong_run=best_strong, best_weak=best_weak, strong_at_weak=at(strong, best_weak["processes"]) or best_strong,
             weak_speedups=[e["speedup"] for e in plain], strong_faster=best_strong["time"] < r.serial["time"])
    f["gustafson"] = best_weak["speedup"] > f["strong_at_weak"]["speedup"]  # at the same P
    f["weak_accuracy"] = spread(e.get("mean_accuracy") for e in plain)


def model(r, f):
    """Q3 and Q4: serial's and each strong run's step as the runs clocked it (compute and allreduce, wall and CPU),
    and each run's time accounted from serial's."""
    rows = []
    for e in [r.serial] + r.series("sync ring strong"):
        m, cpu, turns = r.model.run(e), e.get("cpu_time_per_rank"), e.get("core_turns_per_rank")
        rows.append(dict(e=e, m=m, compute=per_step(e, "compute_time"), exchange=per_step(e, "communication_time"), update_step=per_step(e, "update_time"),
                         compute_cpu=per_step(e, "compute_cpu_time"), exchange_cpu=per_step(e, "communication_cpu_time"),
                         busy_cores=cpu and sum(cpu) / e["time"],  # turns: times a rank was put on a core
                         turns=mean(turns) / m["steps"] if turns and None not in turns else None))
    f["model_rows"] = rows  # the table, even where a comparison below cannot be made
    serial, p2 = rows[0], next(c for c in rows if c["e"]["processes"] == 2)
    crowded = [c for c in rows if c["e"]["processes"] > r.cores]
    saved = r.model.compute(r.model.batch) - p2["m"]["compute"]
    f.update(p2=p2, p2_diff=p2["e"]["time"] / r.serial["time"] - 1, p2_slower=p2["e"]["time"] > r.serial["time"],
             saved_compute=abs(saved), split_saves=saved > 0, ring=r.fits.get("ring"),
             exchange_costs_more=p2["m"]["exchange"] > saved, p2_speed=speed(p2["e"]["time"], r.serial["time"]),
             t_eval=r.model.evaluation, validation_saved=r.model.evaluation and r.model.evaluation * p2["e"]["epochs"] / 2,
             crowded_last=crowded[-1] if crowded else None, p2_overlap=overlap(p2["e"]["time_range"], r.serial["time_range"]))
    if None not in (p2["compute"], p2["exchange"], serial["compute"]):  # serial's step timed in its run, P = 2's too
        f.update(p2_saved=serial["compute"] - p2["compute"], p2_split_saves=serial["compute"] > p2["compute"],
                 p2_exchange_more=p2["exchange"] > serial["compute"] - p2["compute"])
    for c in rows[1:]:  # every run from serial's: its steps' compute and allreduce for serial's, less validation saved
        c["predicted"] = None if None in (c["compute"], c["exchange"], serial["compute"], r.model.evaluation) else r.serial["time"] \
            + c["m"]["steps"] * (c["compute"] + c["exchange"] - serial["compute"]) - r.model.evaluation * c["e"]["epochs"] * (1 - 1 / c["e"]["processes"])
    f["account_miss"] = max((abs(error(c["predicted"], c["e"]["time"])) for c in rows[1:] if c["predicted"]), default=None)
    f["exchange_more_all"] = all(c["exchange"] > serial["compute"] - c["compute"] for c in rows[1:] if c["predicted"])
    f["last_busy"] = bool(crowded) and crowded[-1]["busy_cores"] >= BUSY * r.cores
    times = [c["e"]["time"] for c in rows[1:]]
    f["slower_with_p"] = all(a < b for a, b in zip(times[1:], times[2:])) and times[-1] > r.serial["time"]
    clocked = [c for c in crowded if None not in (c["exchange_cpu"], c["compute_cpu"])]
    f["exchange_cpu_most"] = all(c["exchange_cpu"] > c["compute_cpu"] for c in clocked) if clocked else None


def speed(time, reference):
    """"faster", "slower" or "tie": `time` against `reference`, a tie within TIE of it."""
    return "tie" if abs(time - reference) <= TIE * reference else "faster" if time < reference else "slower"


def causes(r, e):
    """An async run's measured causes of its time (Q6, Q7): the cores its ranks kept busy, their CPU per mini-batch
    (workers', masters'), their turns on a core; the busiest master's D_max, busy share and share of the parameters."""
    service = [d for d in e.get("master_service_time") or [] if d is not None]
    batches, masters = e["epochs"] * e["batches"], e["masters"]
    cpu, turns = e.get("cpu_time_per_rank"), e.get("core_turns_per_rank")
    waits = [e.get("worker_wait_cpu_time"), e.get("master_idle_cpu_time")]  # CPU inside every rank's waits
    return dict(e, d_max=max(service) if service else None, busy_cores=cpu and sum(cpu) / e["time"],
                wait_cpu=sum(map(sum, waits)) / batches if None not in waits else None,
                gradient_cpu=e.get("worker_compute_cpu_time") and sum(e["worker_compute_cpu_time"]) / batches,
                batch_cpu=cpu and sum(cpu) / batches, masters_cpu=cpu and sum(cpu[:masters]) / batches,
                batch_turns=sum(turns) / batches if turns and None not in turns else None,
                busy=e.get("master_busy_fraction") and max(e["master_busy_fraction"]), share=e.get("shard_sizes") and max(e["shard_sizes"]) / r.model.parameters)


def asynchronous(r, f):
    """Q5 and Q6: the course's async runs, their measured causes, and question 6's pairs (one setting changed)."""
    course = [causes(r, e) for e in r.entries("async") if is_course(e)]
    asked = [e for e in course if (e["masters"], e["processes"]) in COURSE_ASYNC]
    pick = lambda m, p: next((e for e in asked if (e["masters"], e["processes"]) == (m, p)), None)  # noqa: E731
    pairs = [(pick(*a), pick(*b)) for a, b in COURSE_PAIRS]
    f.update(async_course=course, async_asked=asked, weight_layers=len(r.model.layers) - 1,
             async_pairs=[dict(a=a, b=b, speed=speed(a["time"], b["time"]), overlap=overlap(
                 *(x["time_range"] for x in (a, b)))) for a, b in pairs if a and b],
             busy_range=spread(e["busy"] for e in asked))
    f["async_busy"] = all(e["busy_cores"] >= BUSY * r.cores for e in asked) if all(e["busy_cores"] for e in asked) else None
    f["busy_cores_range"] = spread(e["busy_cores"] for e in asked)
    f["busiest_share"] = sorted({(e["masters"], e["share"]) for e in asked if e["share"]})
    f["masters_idle"] = f["busy_range"] and f["busy_range"][1] < BUSY  # none busy (nearly) all the time: none capped
    grown = [x for x in f["async_pairs"] if x["a"]["masters"] == x["b"]["masters"] and x["a"].get("updates_per_second") and x["b"].get("updates_per_second")]
    f["wait_grows"] = all(x["a"]["worker_wait_per_batch"] > x["b"]["worker_wait_per_batch"] for x in grown if x["a"]["workers"] > x["b"]["workers"]) if grown else None
    if grown:  # Q7: the most workers added at one M; the masters set the rate when it grew < 1/4 as much as the workers
        x = max(grown, key=lambda x: (x["a"]["workers"] / x["b"]["workers"], x["a"]["workers"]))
        gain = x["a"]["updates_per_second"] / x["b"]["updates_per_second"] - 1
        f["rate_pair"] = dict(x, gain=gain, bound=gain < (x["a"]["workers"] / x["b"]["workers"] - 1) / 4)
    f.update(gradient_range=spread(e["gradient_cpu"] for e in asked), wait_share=spread(e["wait_cpu"] / e["batch_cpu"] for e in asked if e["wait_cpu"] and e["batch_cpu"]))
    f["wait_follows_time"] = (lambda known: known and all((x["a"]["wait_cpu"] > x["b"]["wait_cpu"]) == (x["a"]["time"] > x["b"]["time"]) for x in known))([x for x in f["async_pairs"] if None not in (x["a"]["wait_cpu"], x["b"]["wait_cpu"])] or None)


def collapse(r, f):
    """Q9: every course async run by workers, from how many workers on every run collapsed, and how --many-workers'
    runs ended (collapsed or not, the lowest accuracy)."""
    course = sorted((e for e in r.entries("async") if is_course(e)), key=lambda e: e["workers"])
    beyond = [e for e in r.entries("async") if BEYOND in e["label"]]
    known = all(e["collapsed_runs"] is not None for e in course)
    gone = lambda w: all(e["collapsed_runs"] == e["ok_runs"] for e in course if e["workers"] >= w)  # noqa: E731
    start = next((w for w in sorted({e["workers"] for e in course}) if gone(w)), None) if known else Dash()
    course_below = [e for e in course if start is None or not isinstance(start, Dash) and e["workers"] < start]
    counts = [e["collapsed_runs"] for e in beyond]
    f["same_workers"] = [dict(a=a, b=b, overlap=overlap(a["run_accuracies"], b["run_accuracies"]))
                         for a, b in zip(course, course[1:]) if a["workers"] == b["workers"] and a["masters"] != b["masters"]
                         and a["run_accuracies"] and b["run_accuracies"]]
    f.update(course_all=course, course_from=start, course_below=course_below, beyond_all=beyond,
        beyond_lowest=min((a for e in beyond for a in e["run_accuracies"]), default=None),
        beyond_collapsed=None if None in counts else sum(counts),
        staleness_bound=beyond[0].get("max_staleness") if beyond else None,
        compensation=beyond[0].get("compensation") if beyond else None)
    control = [(e, r.get(f"serial lr x{e['workers']}", 1)) for e in course if e["workers"] > 1]
    f["larger_by"] = {f"{e['processes']}/{e['masters']}": f"{c['mean_accuracy']:.2f} %, {c['collapsed_runs']} of {c['ok_runs']}"
                      for e, c in control if c}
    pairs = [(e["collapsed_runs"], c["collapsed_runs"]) for e, c in control if c]
    f["larger_step"] = dict(workers=sorted({e["workers"] for e, c in control if c}),
                            agree=all(abs(a - b) <= 1 for a, b in pairs) if pairs and None not in sum(pairs, ()) else None,
                            differ=sorted({e["workers"] for e, c in control if c and abs(e["collapsed_runs"] - c["collapsed_runs"]) > 1}),
                            stale_costs=sorted({e["workers"] for e, c in control if c and c["collapsed_runs"] == 0
                                                and e["mean_accuracy"] < c["mean_accuracy"] - SHORT}))
    f["larger_step"]["shortfall"] = spread(c["mean_accuracy"] - e["mean_accuracy"] for e, c in control
                                           if c and e["workers"] in f["larger_step"]["stale_costs"])


def tradeoff(r, f):
    """Q10: sync (strong scaling) against async with 2 and 4 masters at every P both ran, over the same seeds."""
    counts = sorted({e["processes"] for e in r.entries("async")} & {e["processes"] for e in r.entries("sync")})
    rows = [(p, [r.get(label, p) for label in ("sync ring strong", "async 2m", "async 4m")]) for p in counts]
    rows = [(p, cells) for p, cells in rows if cells[0] and any(cells[1:])]
    p, (sync_entry, *asyncs) = rows[0]
    async_entry = next(e for e in asyncs if e)
    f.update(tradeoff_rows=rows, tradeoff=dict(versus(sync_entry, async_entry), p=p))


def versus(sync_entry, async_entry):
    """Sync against async: which was faster, the gap in mean accuracy, whether the seeds' ranges overlap."""
    return dict(sync=sync_entry, asynchronous=async_entry, faster=async_entry["time"] < sync_entry["time"],
                more_accurate=async_entry["mean_accuracy"] > sync_entry["mean_accuracy"],
                accuracy_gap=abs(async_entry["mean_accuracy"] - sync_entry["mean_accuracy"]),
                overlap=overlap(async_entry["run_accuracies"], sync_entry["run_accuracies"]))


def overlap(a, b):
    """True when two runs' ranges of accuracies (every seed) overlap."""
    return not (max(a) < min(b) or max(b) < min(a))


def allreduce(r, f):
    """Q11-Q13: the times, where the ring overtakes naive, the alpha-beta-gamma constants at P = 2 and how much of
    naive's excess there the reduction explains, the ring against MPI's Allreduce, the elements counted."""
    rows = sorted((x for x in r.allreduce if x["processes"] in COURSE_ALLREDUCE), key=lambda x: (x["processes"], x["size"]))
    f["allreduce_rows"] = [dict(x, ratio=x["naive_s"] / x["ring_s"]) for x in rows]
    f["ring_from"] = [(p, ring_faster_from([x for x in rows if x["processes"] == p]))
                      for p in sorted({x["processes"] for x in rows})]
    largest = max(x["size"] for x in rows)
    f["sent_as_predicted"] = bool(rows) and all(x["sent_as_predicted"] for x in rows)
    sent = lambda name, p: 8 * FORMS[name](p)[1] * r.model.parameters  # noqa: E731 - bytes per process and step
    f["gradient_sent"] = [(p, sent("naive", p), sent("ring", p)) for p in r.settings["processes"]]
    two = next(x for x in rows if x["processes"] == 2 and x["size"] == largest)
    reduced = (FORMS["naive"](2)[2] - FORMS["ring"](2)[2]) * largest * r.gamma  # what naive reduces beyond the ring
    gap = two["naive_s"] - two["ring_s"]
    runs = [x["naive_s"] - x["ring_s"] for x in r.allreduce_all if x["processes"] == 2 and x["size"] == largest]
    f.update(fits=r.fits, gamma=r.gamma, gap=dict(n=largest, naive=two["naive_s"], ring=two["ring_s"], gap=gap, reduced=reduced,
                                     share=reduced / gap if gap > 0 else None, runs=spread(runs)))
    if {"naive", "ring"} <= set(r.fits):  # the link's α and β: the reduction, and the messages' shape
        model = exchange_time(r.fits, "naive", 2, largest) - exchange_time(r.fits, "ring", 2, largest)
        f["gap"].update(model=model, behind=model > 0, messages=model - reduced, messages_save=model < reduced,
                        explains=reduced >= f["gap"]["runs"][1])
    f["parts"] = taken_apart(r.info.get("breakdown") or {})
    f["model_at"] = [dict(x, model={name: exchange_time(r.fits, name, x["processes"], largest) for name in ("naive", "ring")}) for x in rows if x["size"] == largest and {"naive", "ring"} <= set(r.fits)]


def taken_apart(breakdown):
    """Q11: the P = 2 job that timed each allreduce whole, the reduction inside it and its messages alone -> per
    algorithm {allreduce, reduction, rest = allreduce - reduction, messages, per_element}, the gap naive - ring split
    the same way, each part's share of it, and whether the reduction's is most of it; None where it did not run."""
    seconds = {x["part"]: x["seconds"] for x in breakdown.get("rows") or []}
    if "naive allreduce" not in seconds:
        return None
    size = breakdown["rows"][0]["size"]
    parts = {name: {part: seconds[f"{name} {part}"] for part in ("allreduce", "reduction", "messages")}
             for name in ("naive", "ring")}
    for name, p in parts.items():
        p.update(rest=p["allreduce"] - p["reduction"], per_element=p["reduction"] / (size * FORMS[name](2)[2]))
    gap = {part: parts["naive"][part] - parts["ring"][part] for part in ("allreduce", "reduction", "rest", "messages")}
    share = {part: gap[part] / gap["allreduce"] if gap["allreduce"] > 0 else None for part in gap}
    return dict(parts, gap=gap, size=size, share=share)


def ring_faster_from(rows):
    """The smallest measured array from which the ring was faster than naive at every larger size, None if never."""
    sizes = sorted((x["size"], x["ring_s"] < (1 - TIE) * x["naive_s"]) for x in rows)  # a tie is not faster
    return next((size for i, (size, _) in enumerate(sizes) if all(faster for _, faster in sizes[i:])), None)


def consoles(r, f):
    """The median runs' consoles (serial, sync, async, allreduce_test.py), each checked against the figures quoted."""
    quoted = lambda pairs: [text for text in (r.console(*pair) for pair in pairs) if text]  # noqa: E731
    strong = [("serial", 1)] + [("sync ring strong", e["processes"]) for e in r.series("sync ring strong")]
    default = [(e["label"], e["processes"]) for e in r.entries("async") if is_course(e)]
    asked = [(f"async {m}m", p) for m, p in COURSE_ASYNC if (f"async {m}m", p) in default]
    for pair in strong + default:
        check_console(r.console(*pair), r.get(*pair))
    counts = sorted({x["processes"] for x in r.allreduce} & set(COURSE_ALLREDUCE))
    for p in counts:
        check_timing_console(r.console("allreduce_test", p), [x for x in r.allreduce if x["processes"] == p])
    two = (2,) if max(r.settings["processes"]) > r.cores else ()  # P = 2: on 2 cores the one run with a core each
    seeds = {(r.get(*pair) or {}).get("seed") for pair in strong[1:] if pair[1] in two + COURSE_SYNC}
    twin = next((x for x in r.serial["seed_runs"] if len(seeds) == 1 and x.get("seed") in seeds - {r.serial.get("seed")}), None)
    check_console(twin and r.console("serial", 1, twin), twin)  # serial's run with the one seed of the sync consoles
    f.update(console_sync=quoted(strong), console_async=quoted(default), console_async_asked=quoted(asked), serial_twin=twin,
             console_sync_asked=([r.console("serial", 1, twin)] if twin else quoted(strong[:1]))
             + quoted([pair for pair in strong[1:] if pair[1] in two + COURSE_SYNC]),
             sync_asked=[p for _, p in strong if p in two + COURSE_SYNC and r.console("sync ring strong", p)],
             console_allreduce=quoted([("allreduce_test", p) for p in counts]))


class ConsoleMismatch(Exception):
    """A run's console output disagrees with the figures the report quotes of it: never rendered."""


def check_console(text, entry):
    """Raise ConsoleMismatch unless the console's training time and test accuracy are the entry's to 2 decimals."""
    if not text or not entry:
        return
    printed = dict(time=re.search(r"^Time \w+: ([\d.]+)$", text, re.MULTILINE),
                   test_accuracy=re.search(r"^Test Accuracy: ([\d.]+)%$", text, re.MULTILINE))
    for key, match in printed.items():
        if match and match.group(1) != f"{entry[key]:.2f}":
            raise ConsoleMismatch(f"{entry['label']} P={entry['processes']}: its console prints {key} "
                                  f"{match.group(1)}, the report quotes {entry[key]:.2f}")


TIMED = re.compile(r"^ *([\d,]+)(?: \(2\^\d+\))? +([\d.]+) +([\d.]+) ")  # elements, naive ms, ring ms


def check_timing_console(text, rows):
    """Raise ConsoleMismatch unless allreduce_test.py's console prints each size's naive and ring ms as the table."""
    lines = (text or "").splitlines()
    by_size = {x["size"]: x for x in rows}
    for match in filter(None, map(TIMED.match, lines[:lines.index("")] if "" in lines else lines)):
        row = by_size.get(int(match.group(1).replace(",", "")))
        for name, printed in zip(("naive", "ring"), match.groups()[1:]):
            if row and f"{row[name + '_s'] * 1e3:.3f}" != printed:
                raise ConsoleMismatch(f"allreduce_test P={row['processes']}: its console prints {name} {printed} ms "
                                      f"at n = {match.group(1)}, the report quotes {row[name + '_s'] * 1e3:.3f}")


GROUPS = [header, sync, model, asynchronous, collapse, tradeoff, allreduce, consoles]
COURSE_ALLREDUCE = (2, 4, 8)  # the course's process counts for allreduce_test.py (Q11); COURSE_SYNC: its sync runs (Q2)
COURSE_ASYNC = ((2, 4), (2, 8), (4, 8), (4, 16))  # its asynchronous runs, (masters, processes) (question 5)
# Question 6's comparisons, (masters, processes) against (masters, processes): one setting changed at a time
COURSE_PAIRS = (((2, 8), (2, 4)), ((4, 8), (2, 8)), ((4, 16), (4, 8)))
SHORT = 5  # Q9: points of accuracy below serial's with lr × W from which staleness cost accuracy beyond the step
TIE = 0.03  # two times within 3 % of each other are called as fast: the same run varies more than that
BUSY = 0.85  # a run kept the cores busy when its ranks' CPU time came to 85 % of cores × its time or more
BEYOND = "many-workers"  # the label of the async runs with main.py's departures, beyond the assignment


def is_course(entry):
    """True for an async entry of the course's algorithm: its label names no variant ("async 2m")."""
    return re.fullmatch(r"async \d+m", entry["label"]) is not None
QUESTIONS = 13  # the course's report questions, answered as sections 1-13 in its order
MAX_PAGES = 5  # the course's limit on hw3.pdf
MARKUP = re.compile(r"([\\#$*_@<>\[\]`~=/+'\"-])")  # Typst's markup characters: escaped in text from the data


def figures(results):
    """The one dictionary REPORT.md is rendered from, and the groups of it that could not be computed."""
    f, missing = {}, []
    for group in GROUPS:
        try:
            group(results, f)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError,
                StopIteration) as why:
            missing.append(f"{group.__name__} ({type(why).__name__}: {why})")
    return f, missing


def render(results, pdf=False, computed=None):
    """REPORT.md's text, or with `pdf` hw3.pdf's Typst source; both from one `computed` = figures(results)."""
    f, missing = computed or figures(results)
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.dirname(os.path.abspath(__file__))),
                                     undefined=Dash, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                     finalize=typst_text if pdf else None)
    environment.filters.update(FILTERS, over=starred(results.cores))
    text = environment.get_template("hw3.typ.j2" if pdf else "REPORT.md.j2").render(f, missing=missing)
    return check_questions(text, "=" if pdf else "##")


def check_questions(text, heading="##"):
    """`text` if its numbered sections are the course's questions 1-13, once each and in order; else ValueError."""
    numbers = [int(n) for n in re.findall(rf"^{heading} (\d+)\. ", text, flags=re.MULTILINE)]
    if numbers != list(range(1, QUESTIONS + 1)):
        raise ValueError(f"the report must answer questions 1-{QUESTIONS} once each, in order; its sections: {numbers}")
    return text


def typst_text(value):
    """A value from the data as Typst text, its markup characters escaped; Typst source (Markup) as it is."""
    return value if isinstance(value, markupsafe.Markup) else MARKUP.sub(r"\\\1", str(value))


def write_report(results, out):
    """REPORT.md and hw3.pdf (figures from draw_plots in `out`); SystemExit if the PDF passes MAX_PAGES pages."""
    computed = figures(results)
    with open(os.path.join(out, "REPORT.md"), "w") as target:
        target.write(render(results, computed=computed))
    path = os.path.join(out, "hw3.pdf")
    if typst is None:
        raise SystemExit(f"report.py: error: typst is not installed: wrote {out}/REPORT.md, not hw3.pdf; "
                         "run report.py --report-only where it is")
    typst.compile(render(results, True, computed).encode(), output=path, root=out, ignore_system_fonts=True)
    pages = len(pypdf.PdfReader(path).pages)
    if pages > MAX_PAGES:  # written all the same, to show what overflows; never cut or shrunk to fit
        raise SystemExit(f"report.py: error: {path} has {pages} pages, more than the course's {MAX_PAGES}: "
                         "shorten reporting/hw3.typ.j2 or the runs it lists")
