"""REPORT.md: one dictionary of computed figures rendered into REPORT.md.template.

Every word that depends on the numbers (faster or slower, which term dominates, diverged or not) is chosen
by `pick`, comparing two figures in the function that computes them; the template holds all the prose and
the tables' headers, the functions here their rows.
"""
__all__ = ["figures", "write_report", "Figures"]

import os
import statistics
import string
from functools import partial

from reporting.model import FORMS, PREDICTED, SERIES, exchange_time, fit_rows

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "REPORT.md.template")
# Earlier implementations' plain async runs (SPEC section 4) by (masters, processes), for comparison only.
EARLIER_ASYNC = {(2, 4): "4.4 s, 91.2 %", (2, 8): "3.7 s, 10.1 %", (4, 8): "3.3 s, 88.0 %",
                 (4, 16): "3.8 s, 10.1 %"}
FORM_TEXT = {"ring": "2(P−1)(α + βn/P)", "naive": "(P−1)(α + βn)", "mpi": "2⌈log₂P⌉α + 2(P−1)βn/P",
             "allgather": "(P−1)(α + βn/P), ring's α, β"}


class Figures(dict):
    """The figures, able to render the template's named optional paragraphs (`@@ name` sections); a figure
    that could not be computed reads as a dash instead of failing the report."""

    def __init__(self, sections=None, **values):
        super().__init__(values)
        self.sections = sections or {}

    def __missing__(self, key):
        return "–"

    def section(self, name, **values):
        return string.Template(self.sections[name]).substitute(Figures(self.sections, **dict(self, **values)))


def pick(condition, yes, no):
    """The word a comparison of figures calls for: the one place where numbers choose words."""
    return yes if condition else no


def fmt(pattern, value, scale=1.0):
    """A figure as text; a dash for one that was not measured."""
    return "–" if value is None else pattern.format(scale * value)


sec, pct, times = partial(fmt, "{:.2f} s"), partial(fmt, "{:.2f} %"), partial(fmt, "{:.2f}×")
ms, signed, num = partial(fmt, "{:.3g} ms", scale=1e3), partial(fmt, "{:+.0f} %", scale=100), partial(fmt, "{:.3g}")


def error(model, measured):
    return None if model is None or not measured else (model - measured) / measured


def median_error(errors):
    """The median absolute relative error in %, a dash when there is none."""
    errors = [abs(e) for e in errors if e is not None]
    return f"{100 * statistics.median(errors):.0f} %" if errors else "–"


def rows(cells):
    """Markdown table rows under a header the template holds."""
    return "".join("| " + " | ".join(str(c) for c in row) + " |\n" for row in cells)


def per_step(entry, key):
    return entry[key] / entry["steps"] if entry and entry.get(key) is not None and entry.get("steps") else None


def header(r, f):
    info, s = r.info, r.settings
    f.update({**r.machine, **s}, command=info.get("command", "report.py"), started=info.get("started", "–"),
             duration=f"{info.get('duration', 0) / 60:.1f} min", cores=r.cores, parameters=f"{r.model.parameters:,}",
             quick_note=f.section("quick_note") if s.get("quick") else "")
    loads = [row["load_average"] for row in r.runs if row.get("load_average") is not None]
    if loads:
        f["load_note"] = f.section("load_note", load_min=f"{min(loads):.1f}", load_max=f"{max(loads):.1f}")
    failed = [row for row in r.runs if row["status"] != "ok"]
    if failed:
        f["failures"] = f.section("failures", failed_rows=rows(
            [row["label"], row["processes"], (row.get("error") or "").replace("|", "/")] for row in failed))


def model_terms(r, f):
    model, c = r.model, r.model.compute
    fewest = min(range(1, 17), key=c)  # fewer rows are not always cheaper: BLAS picks kernels by shape
    f.update(tc16=ms(c(16)), tc8=ms(c(8)), tc1=ms(c(1)), tc8_share=f"{100 * c(8) / c(16):.0f} %",
             tc_min=ms(c(fewest)), tc_min_rows=fewest, compute_removable=ms(c(16) - c(fewest)),
             validation_rows=f"{next(x['rows'] for x in r.compute_rows if x['kind'] == 'evaluate'):,}",
             t_eval=ms(model.evaluation), factor_row=f"{model.factor_row:,}",
             evaluation_mode=pick(r.shared_evaluation(), "the sync runs evaluate on every rank, a P-th each",
                                  "rank 0 evaluates alone while the other ranks wait"),
             fit_processes=", ".join(map(str, sorted({x["processes"] for x in fit_rows(r.allreduce, r.cores)}))),
             constants_rows=rows([name, FORM_TEXT[name], f"{1e6 * a:.1f}", f"{1e9 * b:.3f}",
                                  f"{8e-9 / b:.2f}" if b else "–", fit_error(r, name)]
                                 for name, (a, b) in r.fits.items()),
             compute_check=median_error(error(model.run(e)[2][0], per_step(e, "compute_time"))  # time-shared
                                        for e in r.entries("sync") if e["processes"] <= r.cores))  # runs: slower


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
        measured_evaluation = e.get("evaluation_time") and e["evaluation_time"] / e["epochs"]
        cells.append([r.over(e["processes"]), e["label"], sec(e["time"]), sec(model),
                      signed(errors[share > 1][-1]),
                      f"{ms(per_step(e, 'compute_time'))} / {ms(compute)}",
                      f"{ms(per_step(e, 'communication_time'))} / {ms(exchange)}",
                      f"{ms(measured_evaluation)} / {ms(evaluation)}"])
    f.update(model_rows=rows(cells), error_fair=median_error(errors[False]), error_over=median_error(errors[True]))
    over = [e for e in errors[True] if e is not None]
    if over:  # the whole sentence only when there are such runs; its verb chosen by the sign of the errors
        f["error_reading"] = f.section(pick(statistics.median(over) < 0, "underestimates", "overestimates"))


def predictions(r, f):
    """The one-core-per-process table, and the figures Q3, Q4 and Q10 reason from."""
    model, speed = r.model, r.model.predictions(r.shared_evaluation())

    def best(series):
        p = max(PREDICTED, key=lambda p: speed[(p, series)])
        return f"{times(speed[(p, series)])} (P = {p})"

    steps = {p: model.step(p) for p in PREDICTED}
    over = [p for p in PREDICTED if steps[p][1] > steps[p][0]]
    saved, exchange = model.compute(16) - model.compute(8), steps[2][1]
    seconds, epochs = model.epoch(1, False)[0], r.settings["epochs"]
    f.update(prediction_rows=rows([p] + [times(speed[(p, s)]) for s in SERIES] for p in PREDICTED),
             best_pred_strong=best(SERIES[0]), best_pred_weak=best(SERIES[3]),
             best_pred_factors=f"{best(SERIES[2])} strong and {best(SERIES[5])} weak",
             crossover_p=over[0] if over else f"beyond {PREDICTED[-1]}", tx_ring2=ms(exchange),
             tx_ring_limit=ms(2 * model.parameters * model.fits["ring"][1]), saved_compute=ms(saved),
             exchange_vs_saving=pick(exchange > saved, "more", "less"),
             dominant_term=pick(exchange > steps[2][0], "exchange", "compute"),
             tx_factors2=ms(model.step(2, "factors")[1]), factor_elements2=f"{model.factor_row * model.batch:,}",
             factors_speedup2=times(speed[(2, SERIES[2])]),
             serial_model_epoch=f"{sec(seconds)} per epoch, {sec(seconds * epochs)} for {epochs} epochs")
    transfer = 2 * exchange_time(model.fits, "naive", 2, model.parameters)  # push and pull: P = 2 is one message
    f.update(async_transfer=ms(transfer), async_dominant=pick(transfer > model.compute(16), "transfer", "compute"))


def serial(r, f):
    s = r.serial
    f.update(serial_time=sec(s["time"]), serial_step=ms(s["time"] / (s["epochs"] * s["batches"])),
             serial_accuracy=pct(s["test_accuracy"]),
             serial_epochs=", ".join(f"{a:.2f}" for a in s["epoch_accuracy"]) + " %")


def sync(r, f):
    factors = r.get("sync ring strong factors", 2)
    f.update(sync_counts=", ".join(map(str, r.settings["processes"])),
             sync_rows=rows([r.over(e["processes"]), e["label"], sec(e["time"]),
                             times(e["time"] / r.serial["time"]), times(r.speedup(e)), e.get("steps") or "–", e.get("elements_sent_per_step") or "–",
                             e.get("wait_policy") or "–", pct(e["test_accuracy"])] for e in r.entries("sync")),
             factors_measured2=times(r.speedup(factors)) if factors else "not measured, see the failed runs")


def best_gradient_run(r, scaling):
    """The fastest run exchanging gradients with a core per process (any P if there is none)."""
    entries = [e for e in r.entries("sync") if e["scaling"] == scaling and e.get("exchange") != "factors"]
    return max([e for e in entries if e["processes"] <= r.cores] or entries, key=r.speedup)


def scaling(r, f):
    """Q3-Q4: the fastest strong run against serial, Karp-Flatt, time-sharing, then Amdahl or Gustafson."""
    strong = best_gradient_run(r, "strong")
    p, speedup = strong["processes"], r.speedup(strong)
    karp_flatt = (1 / speedup - 1 / p) / (1 - 1 / p) if p > 1 else None
    f.update(best_strong_label=strong["label"], best_strong_p=p, best_strong_time=sec(strong["time"]),
             best_strong_speedup=times(speedup), karp_flatt=fmt("{:.2f}", karp_flatt),
             best_strong_verdict=pick(strong["time"] < r.serial["time"], "faster than", "slower than"),
             karp_flatt_reading=f.section(pick(karp_flatt and karp_flatt > 1, "above_one", "below_one")))
    oversubscribed(r, f)
    weak = best_gradient_run(r, "weak")
    f.update(best_weak_speedup=times(r.speedup(weak)), best_weak_p=weak["processes"],
             scaling_law=pick(r.speedup(weak) > speedup, "Gustafson", "Amdahl"))


def oversubscribed(r, f):
    """The paragraph on time-sharing, for the smallest strong ring run with more processes than cores."""
    over = [e for e in r.series("sync ring strong") if e["processes"] > r.cores]
    if not over or not r.model.ready:
        return
    e, (compute, exchange) = over[0], r.model.step(over[0]["processes"])
    measured = per_step(e, "communication_time")
    f["oversubscribed_paragraph"] = "\n" + f.section(
        "oversubscribed_paragraph", over_p=e["processes"], over_one_core=ms(compute + exchange),
        over_shared=ms((compute + exchange) * e["processes"] / r.cores), over_exchange=ms(measured),
        over_measured=ms(per_step(e, "compute_time") + measured), over_model_exchange=ms(exchange),
        over_wait_share=f"{100 * (1 - exchange / measured):.0f} %")


def async_tables(r, f):
    """Q5, Q6 and Q9's tables, main.py's async settings and which runs diverged."""
    entries = r.entries("async")
    for masters in (2, 4):
        f[f"async{masters}_rows"] = rows(
            [r.over(e["processes"]), e["workers"], e["label"], sec(e["time"]),
             times(e["time"] / r.serial["time"]), pct(e["test_accuracy"]), num(e.get("staleness_mean")),
             EARLIER_ASYNC.get((masters, e["processes"]), "–") if "plain" in e["label"] else "–"]
            for e in entries if e["masters"] == masters)
    default = [e for e in entries if "plain" not in e["label"]]
    first = lambda key: next((e[key] for e in default if e.get(key) is not None), "–")  # noqa: E731
    f.update(compensation=first("compensation"), staleness_bound=first("max_staleness"))
    f["bounded_workers"] = f["staleness_bound"] + 1 if isinstance(f["staleness_bound"], int) else "–"
    f["staleness_rows"] = rows(
        [e["label"], r.over(e["processes"]), e["workers"],
         " / ".join(num(e.get(k)) for k in ("staleness_mean", "staleness_p90", "staleness_max")),
         pct(100 * e["master_idle_fraction"]) if e.get("master_idle_fraction") else "–",
         pct(e["test_accuracy"]) + pick(r.diverged(e["test_accuracy"]), " (diverged)", "")] for e in entries)
    verdicts(r, f, entries)


def verdicts(r, f, entries):
    """Q9's words: which runs diverged (one digit for every image), which only ended far below serial."""
    shares = r.info.get("test_label_shares") or []
    f["one_digit_range"] = f"{min(shares):.2f}–{max(shares):.2f} %" if shares else "about 10 %"
    words = lambda es: ", ".join(f"{e['workers']} workers ({pct(e['test_accuracy'])})" for e in es)  # noqa: E731
    for variant in ("plain", "default"):
        mine = [e for e in entries if ("plain" in e["label"]) == (variant == "plain")]
        gone = [e for e in mine if r.diverged(e["test_accuracy"])]
        short = [e for e in mine if e not in gone and e["test_accuracy"] < r.serial["test_accuracy"] - 5]
        f[f"{variant}_verdict"] = pick(gone, f"diverged with {words(gone)}", "did not diverge") + pick(
            short, f" and ended more than 5 points below serial with {words(short)}", "")


def accuracy(r, f):
    s, strong = r.serial, [e for e in r.entries("sync") if e["scaling"] == "strong"]
    f.update(accuracy_rows=rows([e["label"], r.over(e["processes"]), e["workers"], pct(e["test_accuracy"]),
                                 f"{e['test_accuracy'] - s['test_accuracy']:+.2f}",
                                 " → ".join(f"{a:.1f}" for a in e["epoch_accuracy"])]
                                for e in r.entries("serial") + r.entries("sync") + r.entries("async")),
             strong_gap=fmt("{:.2f}", max((abs(e["test_accuracy"] - s["test_accuracy"]) for e in strong),
                                         default=None)),
             weak_accuracies=", ".join(f"{pct(e['test_accuracy'])} at P = {e['processes']}"
                                       for e in r.series("sync ring weak")))


def tradeoff(r, f):
    """Q10: sync against async at the async runs' process counts."""
    cells, pairs = [], []
    for p in sorted({e["processes"] for e in r.entries("async")}):
        sync_entry, async_entries = r.get("sync ring strong", p), [r.get(f"async {m}m", p) for m in (2, 4)]
        cells.append([r.over(p)] + [f"{sec(e['time'])}, {pct(e['test_accuracy'])}" if e else "–"
                                    for e in [sync_entry] + async_entries])
        pairs += [(p, sync_entry, a) for a in async_entries if a and sync_entry]
    f["tradeoff_rows"] = rows(cells)
    p, sync_entry, async_entry = pairs[0]
    f.update(tradeoff_p=r.over(p), tradeoff_sync=sec(sync_entry["time"]), tradeoff_async=sec(async_entry["time"]),
             async_vs_sync=pick(async_entry["time"] < sync_entry["time"], "faster", "slower"))


def allreduce(r, f):
    """Q11-Q12: times against the fitted model, elements counted at the sends against theory."""
    measured = sorted(r.allreduce, key=lambda x: (x["processes"], x["size"]))
    model = lambda x, name: exchange_time(r.fits, name, x["processes"], x["size"])  # noqa: E731
    f["allreduce_rows"] = rows(
        [r.over(x["processes"]), f"{x['size']:,}", ms(x["naive_s"]), ms(x["ring_s"]), ms(x["mpi_s"]),
         f"{x['naive_s'] / x['ring_s']:.2f}", " / ".join(signed(error(model(x, n), x[f"{n}_s"]))
                                                       for n in ("naive", "ring", "mpi")),
         pick(x.get("naive_equals_mpi") and x.get("ring_equals_mpi"), "yes", "NO")] for x in measured)
    f["ring_crossover"] = "; ".join(f"P = {p}: {crossover(r, p)}" for p in sorted({x["processes"] for x in measured}))
    f["sent_rows"] = rows(
        [r.over(x["processes"]), f"{x['size']:,}", f"{x['naive_sent']:,}", f"{x['naive_theory']:,}",
         f"{x['ring_sent_min']:,}–{x['ring_sent_max']:,}", f"{x['ring_theory']:,.0f}",
         pick(x.get("sent_as_predicted"), "yes", "NO"),
         f"{x['naive_sent'] * x['processes']:,} / {x['ring_sent_total']:,}"] for x in measured)


def crossover(r, p):
    """The smallest array (powers of two) the fitted ring allreduces faster than the fitted naive one."""
    sizes = [n for n in (2 ** k for k in range(8, 28))
             if exchange_time(r.fits, "ring", p, n) < exchange_time(r.fits, "naive", p, n)]
    return f"from about {sizes[0]:,} elements" if sizes else "ring never faster up to 2^27 elements"


def data_sent(r, f):
    """Q12-Q13 for this network's gradient: per step and process, and over every sync run (float64)."""
    sent = lambda name, p: 8 * FORMS[name](p)[1] * r.model.parameters  # noqa: E731 - bytes per process and step
    f["gradient_sent"] = "; ".join(f"P = {p}: naive {1e-6 * sent('naive', p):.2f} MB, ring "
                                   f"{1e-6 * sent('ring', p):.2f} MB" for p in r.settings["processes"])
    f["total_rows"] = rows([e["label"], r.over(e["processes"]), f"{e['steps']:,}",
                            f"{1e-9 * e['processes'] * sent('ring', e['processes']) * e['steps']:.2f} GB",
                            f"{1e-9 * e['processes'] * sent('naive', e['processes']) * e['steps']:.2f} GB",
                            e.get("elements_sent_per_step") or "–"] for e in r.entries("sync")
                           if e.get("steps") and e["allreduce"] == "ring" and e.get("exchange") != "factors")


def traces(r, f):
    """A picture, with the template's caption, for each traced run bench/timeline.py drew; none otherwise."""
    for stem, slot in (("serial", "serial"), ("sync_P2", "sync"), ("sync_P4", "sync"), ("factors_P2", "sync"),
                       ("async_2m_P4", "async")):
        png = (r.info.get("traces") or {}).get(stem, {}).get("png")
        if png and os.path.exists(os.path.join(r.out, png)):
            f[f"trace_{slot}"] += "\n" + f.section(f"trace_{stem}", trace_png=png)


GROUPS = [header, model_terms, model_table, predictions, serial, sync, scaling, async_tables, accuracy, tradeoff,
          allreduce, data_sent, traces]


def figures(results):
    """The one dictionary REPORT.md is rendered from, the template's main text, and the groups that could not
    be computed."""
    with open(TEMPLATE) as source:
        main, *parts = source.read().split("\n@@ ")
    f = Figures(dict(part.split("\n", 1) for part in parts), failures="", load_note="", error_reading="",
                oversubscribed_paragraph="", trace_serial="", trace_sync="", trace_async="")
    missing = []
    for group in GROUPS:
        try:
            group(results, f)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError) as why:
            missing.append(f"{group.__name__} ({type(why).__name__}: {why})")
    return f, main, missing


def write_report(results, out):
    f, main, missing = figures(results)
    text = string.Template(main).substitute(f)
    if missing:  # say which figures are dashes and why, rather than leave the reader guessing
        text += "\n## Figures not computed\n\n" + "\n".join(f"- {m}" for m in missing) + "\n"
    with open(os.path.join(out, "REPORT.md"), "w") as target:
        target.write(text)
