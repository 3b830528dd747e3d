"""REPORT.md and hw3.pdf: one dictionary of computed figures rendered by Jinja2 into REPORT.md.j2 and into
hw3.typ.j2, the Typst source of the course's five-page report.

The functions here compute figures and the comparisons the text turns on (booleans: faster or slower,
diverged or not); the template holds every word and every table, and chooses between two phrasings with the
`choose` filter. A group of figures that cannot be computed is named at the end of the report and its figures
read as dashes.
"""
__all__ = ["figures", "render", "write_report", "check_questions", "check_console", "ConsoleMismatch"]

import math
import os
import re
import statistics

import jinja2
import markupsafe
import pypdf
import typst

from reporting.model import FORMS, PREDICTED, SERIES, exchange_time, fit_rows
from reporting.plots import ZOOM
from reporting.results import DIVERGED_BELOW


class Dash(jinja2.ChainableUndefined):
    """A figure that was not computed: a dash in the text, nothing in a loop, false in a test."""

    def __str__(self):
        return "–"


def number(pattern, scale=1.0):
    """A filter writing a figure with `pattern`; a dash for one that was not measured."""
    return lambda value: "–" if value is None or isinstance(value, jinja2.Undefined) else pattern.format(
        scale * value)


def starred(cores):
    """A filter: '4*' when 4 processes exceed the cores (the run measures contention for them), else '4'."""
    return lambda p: "–" if p is None or isinstance(p, jinja2.Undefined) else f"{p}*" if p > cores else str(p)


def choose(condition, yes, no):
    """The phrase a comparison of figures calls for; a dash when the comparison could not be made."""
    return "–" if condition is None or isinstance(condition, jinja2.Undefined) else yes if condition else no


FILTERS = {"sec": number("{:.2f} s"), "ms": number("{:.3g} ms", 1e3), "pct": number("{:.2f} %"),
           "times": number("{:.2f}×"), "signed": number("{:+.0f} %", 100), "share": number("{:.0f} %", 100),
           "num": number("{:.3g}"), "thousands": number("{:,.0f}"), "fixed": number("{:.2f}"),
           "points": number("{:+.2f}"), "us": number("{:.1f}", 1e6), "ns": number("{:.3f}", 1e9),
           "MB": number("{:.2f} MB", 1e-6), "kB": number("{:,.0f}", 1e-3), "GB": number("{:.2f} GB", 1e-9),
           "signed_sec": number("{:+.2f} s"), "minutes": number("{:.1f} min", 1 / 60),
           "choose": choose,  # and for hw3.typ.j2, a run's console output as a Typst string literal:
           "string": lambda text: markupsafe.Markup('"{}"'.format(text.replace("\\", "\\\\").replace('"', '\\"')))}


def error(model, measured):
    return None if model is None or not measured else (model - measured) / measured


def median_error(errors):
    """The median absolute relative error, None when there is none."""
    errors = [abs(e) for e in errors if e is not None]
    return statistics.median(errors) if errors else None


def greater(a, b):
    """a > b, or None (a dash in the text) when either was not measured."""
    return None if a is None or b is None else a > b


def per_step(entry, key):
    return entry[key] / entry["steps"] if entry and entry.get(key) is not None and entry.get("steps") else None


def header(r, f):
    loads = [row["load_average"] for row in r.runs if row.get("load_average") is not None]
    traces = r.info.get("traces") or {}
    f.update(info=r.info, machine=r.machine, settings=r.settings, cores=r.cores, parameters=r.model.parameters,
             factor_break_even=round(r.model.parameters / r.model.factor_row),  # samples: factors then send more
             loads=(min(loads), max(loads)) if loads else None, failed=[x for x in r.runs if x["status"] != "ok"],
             traces={stem: t["png"] for stem, t in traces.items()
                     if t.get("png") and os.path.exists(os.path.join(r.out, t["png"]))})


def model_terms(r, f):
    """Appendix A's terms, and the most compute splitting the mini-batch can save (Q4)."""
    model, c = r.model, r.model.compute
    # The P whose ranks compute least: fewer rows are not always cheaper, BLAS picks kernels by shape.
    split = min(range(2, model.batch + 1), key=lambda p: model.step(p)[0])
    fewest = math.ceil(model.batch / split)
    f.update(tc={rows: c(rows) for rows in (1, 8, 16)}, tc8_share=c(8) / c(16),
             fewest=(fewest, c(fewest), split), removable=max(0.0, model.step(1)[0] - model.step(split)[0]),
             t_eval=model.evaluation, factor_row=model.factor_row,
             validation_rows=next(x["rows"] for x in r.compute_rows if x["kind"] == "evaluate"),
             shared_evaluation=r.shared_evaluation(), kappa=model.kappa, rule_update=model.rule_update,
             fit_processes=", ".join(map(str, sorted({x["processes"] for x in fit_rows(r.allreduce, r.cores)}))),
             constants=[dict(name=name, alpha=a, beta=b, bandwidth=b and 8e-9 / b, error=fit_error(r, name))
                        for name, (a, b) in r.fits.items()])


def fit_error(r, name):
    """Median |model - measured| / measured of an algorithm over allreduce_test.py's one-core-per-process rows."""
    return median_error(error(exchange_time(r.fits, name, x["processes"], x["size"]), x.get(f"{name}_s"))
                        for x in r.allreduce if x["processes"] <= r.cores)


def model_table(r, f):
    """Model against measurement for every serial and sync run, and the median errors."""
    cells, errors = [], {False: [], True: []}  # by whether the run's processes shared the cores
    for e in ([r.serial] if r.serial else []) + r.entries("sync"):
        model, share, (compute, exchange), evaluation = r.model.run(e)
        errors[share > 1].append(error(model, e["time"]))
        cells.append(dict(e=e, model=model, error=errors[share > 1][-1],
                          compute=(per_step(e, "compute_time"), compute),
                          exchange=(per_step(e, "communication_time"), exchange),
                          evaluation=(e.get("evaluation_time") and e["evaluation_time"] / e["epochs"], evaluation)))
    over = [e for e in errors[True] if e is not None]
    f.update(model_rows=cells, error_fair=median_error(errors[False]), error_over=median_error(errors[True]))
    if over:
        f["underestimates"] = statistics.median(over) < 0


def predictions(r, f):
    """The one-core-per-process table, and the figures Q3, Q4 and Q10 reason from."""
    model, speed = r.model, r.model.predictions(r.shared_evaluation())
    best = lambda series: max((speed[(p, series)], p) for p in PREDICTED)  # noqa: E731 - (speed-up, P)
    steps = {p: model.step(p) for p in [1] + PREDICTED}
    over = [p for p in PREDICTED if steps[p][1] > steps[p][0]]
    saved, exchange = steps[1][0] - steps[2][0], steps[2][1]
    transfer = 2 * exchange_time(model.fits, "naive", 2, model.parameters)  # push and pull: P = 2 is one message
    f.update(prediction_rows=[(p, [speed[(p, s)] for s in SERIES]) for p in PREDICTED],
             pred_strong=best(SERIES[0]), pred_weak=best(SERIES[3]), pred_factors=(best(SERIES[2]), best(SERIES[5])),
             crossover=over[0] if over else f"beyond {PREDICTED[-1]}", tx_ring2=exchange,
             saved_compute=abs(saved), split_saves=saved > 0, compute2=steps[2][0],
             tx_ring_limit=2 * model.parameters * model.fits["ring"][1],
             exchange_costs_more=exchange > saved, exchange_dominates=exchange > steps[2][0],
             tx_factors2=model.step(2, "factors")[1], factor_elements2=model.factor_row * model.batch,
             async_transfer=transfer)


def fastest(r, entries):
    """The entry of highest speed-up among `entries` with a core per process (among all if none has one)."""
    entries = list(entries)
    return max([e for e in entries if e["processes"] <= r.cores] or entries, key=lambda e: e["speedup"], default=None)


def runs(r, f):
    """Q2-Q9: the runs themselves, the fastest against serial, and which async runs diverged (course: the course's
    algorithm, main.py's defaults; many-workers: the departures beyond the assignment)."""
    s = r.serial
    async_runs = [dict(e, diverged=r.diverged(e["test_accuracy"]), course=BEYOND not in e["label"],
                       diverged_runs=sum(r.diverged(a) for a in e["run_accuracies"])) for e in r.entries("async")]
    course = sorted((e for e in async_runs if e["course"]), key=lambda e: e["workers"])
    beyond = [e for e in async_runs if not e["course"]]
    for e in beyond:  # the departures' measured gain over the course's run of the same masters and processes
        twin = next((c for c in course if (c["masters"], c["processes"]) == (e["masters"], e["processes"])), None)
        e.update(gain=twin and e["test_accuracy"] - twin["test_accuracy"], twin=twin)
    course_from = diverging_from(course)
    first = lambda key: next((e[key] for e in beyond if e.get(key) is not None), None)  # noqa: E731
    shares = r.info.get("test_label_shares")
    f.update(serial=s, serial_step=s["time"] / (s["epochs"] * s["batches"]), sync=r.entries("sync"),
             async_runs=course + sorted(beyond, key=lambda e: e["workers"]), diverged_below=DIVERGED_BELOW,
             compensation=first("compensation"), staleness_bound=first("max_staleness"),
             one_digit=shares and (min(shares), max(shares)),
             verdicts={"course": verdict(r, course), BEYOND: verdict(r, beyond)},
             accuracy_runs=[dict(e, gap=e["test_accuracy"] - s["test_accuracy"]) for e in
                            r.entries("serial") + r.entries("sync") + r.entries("async")],
             course_from=course_from, course_below=[e for e in course if course_from is None
                                                    or e["workers"] < course_from],
             strong_same_seed=same_seed_as_serial(r), seeds=(r.settings.get("seed") or 1, (r.settings.get("seed") or 1)
                                                             + (r.settings.get("repeats") or 1) - 1),
             ring_runs=[e for label in ("sync ring strong", "sync ring weak", "sync ring weak capped")
                        for e in r.series(label)])
    if isinstance(f["staleness_bound"], int):
        f["bounded_workers"] = f["staleness_bound"] + 1


def diverging_from(entries):
    """The fewest workers from which every run of every entry with as many workers or more diverged, else None."""
    gone = lambda w: all(e["diverged_runs"] == e["ok_runs"] for e in entries if e["workers"] >= w)  # noqa: E731
    return next((w for w in sorted({e["workers"] for e in entries}) if gone(w)), None)


def same_seed_as_serial(r):
    """Whether every strong-scaling sync run ended at the test accuracy of the serial run of its seed (None: no
    such pair): strong scaling computes serial's steps."""
    serial = {x.get("seed"): x["test_accuracy"] for x in r.runs if x["mode"] == "serial" and x["status"] == "ok"}
    pairs = [(x["test_accuracy"], serial[x.get("seed")]) for x in r.runs if x["mode"] == "sync" and x["status"] == "ok"
             and x.get("scaling") == "strong" and x.get("seed") in serial]
    return all(a == b for a, b in pairs) if pairs else None


def scaling(r, f):
    """Q3-Q4 and the takeaway: the course's algorithm (strong scaling, the gradient's ring allreduce: Q2's runs) at
    its fastest, the fastest strong and weak runs over every series, the fastest weak run under main.py's
    large-batch rule over every exchange, and that run's update per step against plain SGD's at its P."""
    sync = r.entries("sync")
    course = fastest(r, r.series("sync ring strong"))
    strong = fastest(r, (e for e in sync if e["scaling"] == "strong"))
    weak = fastest(r, (e for e in sync if e["scaling"] == "weak"))
    rule = fastest(r, (e for e in sync if e["scaling"] == "weak" and "capped" not in e["label"]))
    shown_weak = fastest(r, r.series("sync ring weak"))  # hw3's Q4 quotes only the runs of Q2's table
    f.update(shown_weak=shown_weak, shown_gustafson=shown_weak is not None and shown_weak["speedup"] > course["speedup"])
    f.update(strong_run=course, best_strong=strong, best_weak=weak, weak_rule_run=rule, course_fastest=course is strong,
             strong_faster=course["time"] < r.serial["time"], gustafson=weak["speedup"] > strong["speedup"],
             rule_beats_strong=rule is not None and rule["speedup"] > strong["speedup"])
    if rule is not None:
        plain = r.get("sync ring weak capped", rule["processes"])
        f["rule_update_step"] = (per_step(rule, "update_time"), per_step(plain, "update_time"))


def model_checks(r, f):
    """Q3-Q4: the model's speed-up of the course's fastest run and of sufficient factors at P = 2 against the
    measured speed-ups (model_check)."""
    factors = r.get("sync ring strong factors", 2)
    f.update(course_check=model_check(r, f["strong_run"]), factors_check=factors and model_check(r, factors))


def model_check(r, entry):
    """The model's speed-up of a measured sync run, its relative miss against the measured speed-up, whether the
    miss passes MISS, and its cause: the term behind most of it, with every term as (model, measured).

    The speed-up is serial's time over the run's (the same samples), so to first order the miss is serial's
    relative miss less each of the run's terms' misses over the run's measured time. The terms: compute and
    exchange per step, evaluation per epoch, and the rest of the run's time, which the model leaves out (a term
    the run did not measure falls into the rest, modelled and measured alike). Serial: the whole time.
    """
    serial = r.model.run(r.serial)[0]
    model, _, (compute, exchange), evaluation = r.model.run(entry)
    units = {"compute": entry["steps"], "exchange": entry["steps"], "evaluation": entry["epochs"]}
    modelled = {"compute": compute, "exchange": exchange, "evaluation": evaluation}
    measured = {"compute": entry.get("compute_time"), "exchange": entry.get("communication_time"),
                "evaluation": entry.get("evaluation_time")}
    terms = {name: (modelled[name], measured[name] / units[name]) for name in units if measured[name] is not None}
    rest = model - sum(units[name] * modelled[name] for name in terms)
    terms["rest"] = (rest, entry["time"] - sum(measured[name] for name in terms))
    shares = {name: units.get(name, 1) * (x - m) / entry["time"] for name, (m, x) in terms.items()}
    shares["serial"] = (serial - r.serial["time"]) / r.serial["time"]
    terms["serial"] = (serial, r.serial["time"])
    speedup = entry["speedup"] * serial / r.serial["time"] * entry["time"] / model
    miss = speedup / entry["speedup"] - 1
    return dict(model=speedup, measured=entry["speedup"], miss=miss, off=abs(miss) > MISS, terms=terms,
                cause=max(shares, key=lambda name: abs(shares[name])))


def verdict(r, entries):
    """(the median runs that diverged, the others that ended more than 5 points below serial)."""
    gone = [e for e in entries if e["diverged"]]
    return gone, [e for e in entries if e not in gone and e["test_accuracy"] < r.serial["test_accuracy"] - 5]


def async_compare(r, f):
    """6: the course's async runs compared with each other (time, accuracy, and the measured causes: the busiest
    master's share of the parameters and of the run's time, a worker's compute and wait); 8: accuracy by workers."""
    rows = [dict(e, sync=r.get("sync ring strong", e["processes"]), gap=e["test_accuracy"] - r.serial["test_accuracy"],
                 share=e.get("shard_sizes") and max(e["shard_sizes"]) / r.model.parameters,
                 busy=e.get("master_busy_fraction") and max(e["master_busy_fraction"]))
            for e in r.entries("async") if BEYOND not in e["label"]]
    asked = [e for e in rows if (e["masters"], e["processes"]) in COURSE_ASYNC]
    first = (asked or rows)[0]
    pick = lambda m, p: next((e for e in asked if (e["masters"], e["processes"]) == (m, p)), None)  # noqa: E731
    pairs = [(pick(m, p), pick(n, q)) for (m, p), (n, q) in COURSE_PAIRS]
    f.update(async_compare_rows=rows, async_asked=asked, async_first=first,
             async_pairs=[dict(a=a, b=b, faster=a["time"] < b["time"], better=a["test_accuracy"] > b["test_accuracy"],
                               waits_less=greater(b.get("worker_wait_per_batch"), a.get("worker_wait_per_batch")))
                          for a, b in pairs if a and b],
             async_speedups=(min(e["speedup"] for e in asked or rows), max(e["speedup"] for e in asked or rows)),
             async_wait_dominates=greater(first.get("worker_wait_per_batch"), first.get("worker_compute_per_batch")),
             transfer_dominates=greater(2 * exchange_time(r.model.fits, "naive", 2, r.model.parameters),
                                        first.get("worker_compute_per_batch")),
             async_pipelined=bool(first.get("pipeline")), async_first_crowded=first["processes"] > r.cores,
             async_gap=max(abs(e["gap"]) for e in rows), largest_layer=largest_layer(r))
    columns = ("sync ring strong", "sync ring weak", "sync ring weak capped", "async 2m", "async 4m")
    accuracy = {(e["label"], e["workers"]): e["test_accuracy"] for label in columns for e in r.series(label)}
    f["accuracy_by_workers"] = [(w, [accuracy.get((label, w)) for label in columns])
                                for w in sorted({w for _, w in accuracy})]


def largest_layer(r):
    """(its inputs, its outputs, its share of the parameters) of the layer with the most parameters."""
    layers = r.model.layers
    i, o = max(zip(layers[:-1], layers[1:]), key=lambda pair: pair[0] * pair[1] + pair[1])
    return i, o, (i * o + o) / r.model.parameters


def tradeoff(r, f):
    """Q10: sync against async at the async runs' process counts."""
    counts = sorted({e["processes"] for e in r.entries("async")})
    cells = [(p, [r.get("sync ring strong", p), r.get("async 2m", p), r.get("async 4m", p)]) for p in counts]
    p, sync_entry, async_entry = next((p, s, a) for p, (s, *asyncs) in cells for a in asyncs if s and a)
    weak = r.get("sync ring weak", p)
    f.update(tradeoff_rows=cells, tradeoff_p=p, tradeoff_sync=sync_entry["time"],
             tradeoff_masters=async_entry["masters"],
             tradeoff_async=async_entry["time"], async_faster=async_entry["time"] < sync_entry["time"],
             tradeoff_weak=weak and weak["time"], async_faster_than_weak=weak and async_entry["time"] < weak["time"])


def allreduce(r, f):
    """Q11-Q13: times against the fitted model, elements counted at the sends, bytes over the training runs."""
    model = lambda x, name: exchange_time(r.fits, name, x["processes"], x["size"])  # noqa: E731
    f["allreduce_rows"] = [dict(x, ratio=x["naive_s"] / x["ring_s"], naive_total=x["naive_sent"] * x["processes"],
                                errors=[error(model(x, n), x[f"{n}_s"]) for n in ("naive", "ring", "mpi")])
                           for x in sorted(r.allreduce, key=lambda x: (x["processes"], x["size"]))]
    shown = [x for x in f["allreduce_rows"] if x["processes"] > 2 and x["size"] in COURSE_SIZE_VALUES]
    f["ring_best"] = max(shown, key=lambda x: x["ratio"], default=None)  # where the volumes differ, on the page
    f["fit_miss_by_p"] = [(p, median_error(error(exchange_time(r.fits_by_p[p], name, p, x["size"]), x[f"{name}_s"])
                                           for x in r.allreduce if x["processes"] == p for name in ("naive", "ring")))
                          for p in sorted(r.fits_by_p)]
    f["ring_crossover"] = [(p, crossover(r, p), *measured_crossover(f["allreduce_rows"], p, crossover(r, p)))
                           for p in sorted({x["processes"] for x in r.allreduce})]
    f["crossovers_agree"] = all(agree for *_, agree in f["ring_crossover"])
    sent = lambda name, p: 8 * FORMS[name](p)[1] * r.model.parameters  # noqa: E731 - bytes per process and step
    f["gradient_sent"] = [(p, sent("naive", p), sent("ring", p)) for p in r.settings["processes"]]
    f["total_rows"] = [dict(e, ring_bytes=e["processes"] * sent("ring", e["processes"]) * e["steps"],
                            naive_bytes=e["processes"] * sent("naive", e["processes"]) * e["steps"])
                       for e in r.entries("sync")
                       if e.get("steps") and e["allreduce"] == "ring" and e.get("exchange") != "factors"]


def crossover(r, p):
    """The smallest array (a power of two) the ring, as fitted at P alone, allreduces faster than the naive one."""
    fits = r.fits_by_p.get(p, {})
    return next((n for n in (2 ** k for k in range(8, 28))
                 if exchange_time(fits, "ring", p, n) < exchange_time(fits, "naive", p, n)), None)


def measured_crossover(rows, p, fitted):
    """(the smallest measured array from which the ring was faster than naive at every larger size, None if it
    never was; whether the fitted crossover falls between that size and the measured size below it)."""
    sizes = sorted((x["size"], x["ring_s"] < x["naive_s"]) for x in rows if x["processes"] == p)
    since = next((i for i in range(len(sizes)) if all(faster for _, faster in sizes[i:])), None)
    if since is None:
        return None, fitted is None or fitted > sizes[-1][0]
    below = sizes[since - 1][0] if since else 0
    return sizes[since][0], fitted is not None and below < fitted <= sizes[since][0]


def consoles(r, f):
    """What the median runs printed, for 3, 6 and 11, copied from their output: serial and the course's sync and
    async configurations (any it lacks, and other series, for REPORT.md), each checked against its figures."""
    quoted = lambda pairs: [text for text in (r.console(*pair) for pair in pairs) if text]  # noqa: E731
    strong = [("serial", 1)] + [("sync ring strong", e["processes"]) for e in r.series("sync ring strong")]
    default = [(e["label"], e["processes"]) for e in r.entries("async") if BEYOND not in e["label"]]
    asked = [(f"async {m}m", p) for m, p in COURSE_ASYNC if (f"async {m}m", p) in default]
    for pair in strong + default:
        check_console(r.console(*pair), r.get(*pair))
    for p in {x["processes"] for x in r.allreduce}:
        check_timing_console(r.console("allreduce_test", p), [x for x in r.allreduce if x["processes"] == p])
    f.update(console_sync=quoted(strong), console_async=quoted(default),
             console_sync_asked=quoted(strong),  # the course's P and P = 2, the fastest that Q3 quotes
             sync_asked=[p for _, p in strong if p in COURSE_SYNC and r.console("sync ring strong", p)],
             console_async_asked=quoted(asked),
             console_allreduce=quoted([("allreduce_test", p) for p in sorted({x["processes"] for x in r.allreduce})]))
    f["allreduce_excerpts"] = [timing_rows(text) for text in f["console_allreduce"]]


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
    """Raise ConsoleMismatch unless every size allreduce_test.py's console times has the naive and ring times of
    the table's row of that size, in ms to 3 decimals as it prints them."""
    by_size = {x["size"]: x for x in rows}
    for match in filter(None, map(TIMED.match, timing_table(text or ""))):
        row = by_size.get(int(match.group(1).replace(",", "")))
        for name, printed in zip(("naive", "ring"), match.groups()[1:]):
            if row and f"{row[name + '_s'] * 1e3:.3f}" != printed:
                raise ConsoleMismatch(f"allreduce_test P={row['processes']}: its console prints {name} {printed} ms "
                                      f"at n = {match.group(1)}, the report quotes {row[name + '_s'] * 1e3:.3f}")


def timing_table(text):
    """allreduce_test.py's console up to its timing table's end (the first blank line), as lines."""
    lines = text.splitlines()
    return lines[:lines.index("")] if "" in lines else lines


def timing_rows(text):
    """allreduce_test.py's console condensed: its command, and its timing table's header and course-size rows."""
    return "\n".join(x for x in timing_table(text)
                     if x.startswith("$") or " elements " in x or any(n in x for n in COURSE_SIZES))


def split(r, f):
    """Q7: the parameter server on 1, 2 and 4 masters, balanced and by whole layers, against the bottleneck bound.

    Operational laws: the busiest master's service demand per update D_max bounds the updates per second by
    1/D_max whatever the workers; W workers, each cycling through Z (compute, a push, D_max and a pull, no
    queueing), give at most W/Z; the two meet at W* = Z/D_max workers.
    """
    transfer = 2 * exchange_time(r.model.fits, "naive", 2, r.model.parameters)  # push and pull of the model
    entries = [dict(e, d_max=max(d for d in e["master_service_time"] if d is not None),
                    share=max(e["shard_sizes"]) / r.model.parameters,
                    serving=sum(1 for size in e["shard_sizes"] if size)) for e in r.entries("split")]
    one = next(e for e in entries if e["masters"] == 1)
    for e in entries:
        compute, push = e["worker_compute_per_batch"], transfer / 2  # a pull costs as much, copied by the worker
        cycle = (max(compute, push + e["d_max"]) if e.get("pipeline") else compute + push + e["d_max"]) + push
        e.update(cycle=cycle, bound=1 / e["d_max"], predicted_bound=1 / (one["d_max"] * e["share"]), saturation=cycle / e["d_max"],
                 predicted=min(e["workers"] / cycle, 1 / e["d_max"]), messages=2 * e["serving"])
        e["reached"] = e["updates_per_second"] / e["predicted"]
    most = max(e["masters"] for e in entries if e["shard"] == "layers")
    balanced, layers = (next(e for e in entries if e["masters"] == most and e["shard"] == s)
                        for s in ("balanced", "layers"))
    f.update(split_rows=entries, split_one=one, split_balanced=balanced, split_layers=layers, split_transfer=transfer,
             split_helps=balanced["updates_per_second"] > one["updates_per_second"],
             layers_faster=layers["updates_per_second"] > balanced["updates_per_second"],
             split_bound_rises=balanced["bound"] > one["bound"],
             one_saturates=one["workers"] >= one["saturation"],
             split_oversubscribed=any(e["processes"] > r.cores for e in entries),
             split_reached=[pick(e["reached"] for e in entries) for pick in (min, max)])


def weak_rules(r, f):
    """4 and 8: weak scaling with main.py's large-batch rule next to the old capped step, and what the rule costs."""
    capped = {e["processes"]: e for e in r.series("sync ring weak capped")}
    rows = [dict(p=e["processes"], new=e, old=capped.get(e["processes"]),
                 update_step=(per_step(e, "update_time"), per_step(capped.get(e["processes"]), "update_time")))
            for e in r.series("sync ring weak")]
    largest = max((row for row in rows if row["old"]), key=lambda row: row["p"])
    smallest = min((row for row in rows if row["old"]), key=lambda row: row["p"])
    new, old = smallest["new"], smallest["old"]
    if all(e.get(k) is not None for e in (new, old) for k in ("compute_time", "update_time", "communication_time")):
        extra = {k: new[k] - old[k] for k in ("time", "update_time", "communication_time")}
        extra["other_compute"] = new["compute_time"] - new["update_time"] - old["compute_time"] + old["update_time"]
        f.update(weak_extra=extra, weak_smallest=smallest)
    f.update(weak_rule_rows=rows, weak_largest=largest, large_batch_rule=largest["new"].get("large_batch"),
             weak_new_worst=min(e["test_accuracy"] for e in r.entries("sync")  # every exchange under the rule
                                if e["scaling"] == "weak" and "capped" not in e["label"]),
             weak_old_worst=min(row["old"]["test_accuracy"] for row in rows if row["old"]),
             rule_helps=largest["new"]["test_accuracy"] > largest["old"]["test_accuracy"])


def first_step(r, f):
    """Q3: strong scaling at P = 2 against serial per step, from the runs' own measured spans (model_table's rows)."""
    cell = next(c for c in f["model_rows"] if c["e"]["label"] == "sync ring strong" and c["e"]["processes"] == 2)
    faster = cell["e"]["time"] < r.serial["time"]
    f.update(p2=cell, p2_faster=faster, zoom=ZOOM, serial_model_compute=r.model.step(1)[0],
             model_agrees=f["exchange_costs_more"] != faster)


GROUPS = [header, model_terms, model_table, predictions, runs, first_step, scaling, model_checks, async_compare,
          tradeoff, allreduce, consoles, split, weak_rules]
COURSE_SYNC = (4, 8, 16)  # the process counts of the course's synchronous runs (question 2)
COURSE_ASYNC = ((2, 4), (2, 8), (4, 8), (4, 16))  # its asynchronous runs, (masters, processes) (question 5)
# Question 6's comparisons, (masters, processes) against (masters, processes): one setting changed at a time
COURSE_PAIRS = (((2, 8), (2, 4)), ((4, 8), (2, 8)), ((4, 16), (4, 8)))
BEYOND = "many-workers"  # the label of the async runs with main.py's departures, beyond the assignment
QUESTIONS = 13  # the course's report questions, answered as sections 1-13 in its order
MAX_PAGES = 5  # the course's limit on hw3.pdf
MISS = 0.15  # a model figure further than this from its measurement says so beside it, with its cause
COURSE_SIZES = ("(2^12)", "(2^15)", "(2^18)", "(2^21)")  # the array sizes the course's allreduce_test.py times
COURSE_SIZE_VALUES = (2 ** 12, 2 ** 15, 2 ** 18, 2 ** 21)
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
    typst.compile(render(results, True, computed).encode(), output=path, root=out, ignore_system_fonts=True)
    pages = len(pypdf.PdfReader(path).pages)
    if pages > MAX_PAGES:  # written all the same, to show what overflows; never cut or shrunk to fit
        raise SystemExit(f"report.py: error: {path} has {pages} pages, more than the course's {MAX_PAGES}: "
                         "shorten reporting/hw3.typ.j2 or the runs it lists")
