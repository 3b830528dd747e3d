"""REPORT.md: one dictionary of computed figures rendered into REPORT.md.template.

Every word that depends on the numbers (faster or slower, which term dominates, diverged or not) is chosen
by `pick`, comparing two figures in the function that computes them; the template holds all the prose.
"""
__all__ = ["figures", "write_report", "Figures"]

import os
import statistics
import string
from functools import partial

from reporting.model import exchange_time
from reporting.plots import PREDICTED

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "REPORT.md.template")
# Earlier implementations of this assignment (SPEC section 4), for comparison only.
EARLIER = {"serial": "7.7–8.8 s, 91.5–91.9 %", ("sync", 4): "34.1 s, 90.4 %", ("sync", 8): "42.0 s, 89.7 %",
           ("sync", 16): "58.1 s, 87.4 %", ("async", 2, 4): "4.4 s, 91.2 %", ("async", 2, 8): "3.7 s, 10.1 %",
           ("async", 4, 8): "3.3 s, 88.0 %", ("async", 4, 16): "3.8 s, 10.1 %"}


class Figures(dict):
    """The figures; one that could not be computed reads as a dash instead of failing the report."""

    def __missing__(self, key):
        return "–"


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


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]) + "\n"


def per_step(entry, key):
    return entry[key] / entry["steps"] if entry and entry.get(key) is not None and entry.get("steps") else None


def header(r, f):
    info, s, m = r.info, r.settings, r.machine
    f.update(command=info.get("command", "report.py"), started=info.get("started", "–"),
             duration=f"{info.get('duration', 0) / 60:.1f} min", cores=r.cores, parameters=f"{r.model.parameters:,}",
             quick_note=f.section("quick_note") if s.get("quick") else "",
             machine_table=table(["cores", "CPU", "MPI library", "mpi4py", "Python", "numpy"],
                                 [[m["cores"], m["cpu"], m["mpi_library"], m["mpi4py"], m["python"], m["numpy"]]]),
             layers=s["layers"], learning_rate=s["learning_rate"], batch_size=s["batch_size"], batches=s["batches"],
             epochs=s["epochs"], seed=s["seed"], data_dir=s["data_dir"], compute_repeats=s.get("compute_repeats"))
    loads = [row["load_average"] for row in r.runs if row.get("load_average") is not None]
    if loads:
        f["load_note"] = f.section("load_note", load_min=f"{min(loads):.1f}", load_max=f"{max(loads):.1f}")
    failed = [row for row in r.runs if row["status"] != "ok"]
    if failed:
        rows = [[row["label"], row["processes"], (row.get("error") or "").replace("|", "/")] for row in failed]
        f["failures"] = f.section("failures", failed_table=table(["run", "P", "error"], rows))


def model_terms(r, f):
    model, c = r.model, r.model.compute
    f.update(tc16=ms(c(16)), tc8=ms(c(8)), tc1=ms(c(1)), tc8_share=f"{100 * c(8) / c(16):.0f} %",
             validation_rows=f"{next(x['rows'] for x in r.compute_rows if x['kind'] == 'evaluate'):,}",
             t_eval=ms(model.evaluation),
             factor_row=f"{model.factor_row:,}")
    fewest = min(range(1, 17), key=c)  # fewer rows are not always cheaper: BLAS picks kernels by shape
    f.update(tc_min=ms(c(fewest)), tc_min_rows=fewest, compute_removable=ms(c(16) - c(fewest)))
    shared = r.shared_evaluation()
    f["evaluation_mode"] = pick(shared, "the sync runs evaluate on every rank, a P-th each",
                                "rank 0 evaluates alone while the other ranks wait")
    fair = sorted({row["processes"] for row in r.allreduce if 1 < row["processes"] <= r.cores}) or \
        sorted({row["processes"] for row in r.allreduce})
    f["fit_processes"] = ", ".join(map(str, fair))
    f["constants_table"] = table(["exchange", "form (n elements)", "α (µs)", "β (ns/element)", "GB/s", "fit error"],
                                 [[name, FORM_TEXT[name], f"{1e6 * a:.1f}", f"{1e9 * b:.3f}",
                                   f"{8e-9 / b:.2f}" if b else "–", fit_error(r, name)]
                                  for name, (a, b) in r.fits.items()])
    checks = [abs(error(model.parts(e)[0], per_step(e, "compute_time"))) for e in sync_entries(r)
              if per_step(e, "compute_time") and e["processes"] <= r.cores]  # time-shared runs compute slower
    f["compute_check"] = f"{100 * statistics.median(checks):.0f} %" if checks else "–"


FORM_TEXT = {"ring": "2(P−1)(α + βn/P)", "naive": "(P−1)(α + βn)", "mpi": "2⌈log₂P⌉α + 2(P−1)βn/P",
             "allgather": "(P−1)(α + βn/P), ring's α, β"}


def fit_error(r, name):
    """Median |model - measured| / measured of an algorithm over allreduce_test.py's one-core-per-process rows."""
    column = {"allgather": None}.get(name, f"{name}_s")
    errors = [abs(error(exchange_time(r.fits, name, x["processes"], x["size"]), x[column])) for x in r.allreduce
              if column and x.get(column) and x["processes"] <= r.cores]
    return f"{100 * statistics.median(errors):.0f} %" if errors else "–"


def sync_entries(r):
    return [e for label in r.labels("sync") for e in r.series(label)]


def model_table(r, f):
    rows, fair, over = [], [], []
    for e in ([r.serial] if r.serial else []) + sync_entries(r):
        model, share = r.model.run(e)
        compute, exchange, evaluation = r.model.parts(e)
        err = error(model, e["time"])
        if err is not None:
            (over if share > 1 else fair).append(err)
        rows.append([r.over(e["processes"]), e["label"], sec(e["time"]), sec(model), signed(err),
                     f"{ms(per_step(e, 'compute_time'))} / {ms(compute)}",
                     f"{ms(per_step(e, 'communication_time'))} / {ms(exchange)}",
                     f"{ms(e.get('evaluation_time') and e['evaluation_time'] / e['epochs'])} / {ms(evaluation)}"])
    f["model_table"] = table(["P", "run", "measured", "model", "error", "compute per step: measured / model",
                              "exchange per step: measured / model (one core each)",
                              "evaluation per epoch: measured / model"], rows)
    median = lambda errors: f"{100 * statistics.median(abs(e) for e in errors):.0f} %" if errors else "–"  # noqa
    f.update(error_fair=median(fair), error_over=median(over))
    if over:  # the whole sentence only when there are such runs; its verb chosen by the sign of the errors
        f["error_reading"] = f.section(pick(statistics.median(over) < 0, "underestimates", "overestimates"))


def predictions(r, f):
    """The one-core-per-process table, and the figures Q3, Q4 and Q10 reason from."""
    model, shared = r.model, r.shared_evaluation()
    kinds = [(s, x, a) for s in ("strong", "weak") for x, a in (("gradients", "ring"), ("gradients", "mpi"),
                                                              ("factors", "ring"))]
    speed = {(p, k): model.speedup(p, shared, scaling=k[0], exchange=k[1], allreduce=k[2]) for p in PREDICTED
             for k in kinds}
    f["prediction_table"] = table(["P"] + [f"{s}: {x}, {a}" for s, x, a in kinds],
                                  [[p] + [times(speed[(p, k)]) for k in kinds] for p in PREDICTED])
    best = lambda k: max(PREDICTED, key=lambda p: speed[(p, k)])  # noqa: E731
    describe = lambda k: f"{times(speed[(best(k), k)])} (P = {best(k)})"  # noqa: E731
    f.update(best_pred_strong=describe(kinds[0]), best_pred_weak=describe(kinds[3]),
             best_pred_factors=f"{describe(kinds[2])} strong and {describe(kinds[5])} weak")
    steps = {p: model.step(p) for p in [2] + PREDICTED}
    over = [p for p in PREDICTED if steps[p][1] > steps[p][0]]
    saved, exchange = model.compute(16) - model.compute(8), steps[2][1]
    f.update(crossover_p=over[0] if over else f"beyond {PREDICTED[-1]}", tx_ring2=ms(exchange),
             tx_ring_limit=ms(2 * model.parameters * model.fits["ring"][1]), saved_compute=ms(saved),
             exchange_vs_saving=pick(exchange > saved, "more", "less"),
             dominant_term=pick(exchange > steps[2][0], "exchange", "compute"),
             tx_factors2=ms(model.step(2, "factors")[1]), factor_elements2=f"{model.factor_row * model.batch:,}",
             factors_speedup2=times(speed[(2, kinds[2])]))
    transfer = 2 * exchange_time(model.fits, "naive", 2, model.parameters)  # push and pull: P = 2 is one message
    f.update(async_transfer=ms(transfer), async_dominant=pick(transfer > model.compute(16), "transfer", "compute"))
    seconds, epochs = model.epoch(1, False)[0], r.settings["epochs"]
    f["serial_model_epoch"] = f"{sec(seconds)} per epoch, {sec(seconds * epochs)} for {epochs} epochs"


def serial(r, f):
    s = r.serial
    f.update(serial_time=sec(s["time"]), serial_step=ms(s["time"] / (s["epochs"] * s["batches"])),
             serial_accuracy=pct(s["test_accuracy"]), earlier_serial=EARLIER["serial"],
             serial_epochs=", ".join(f"{a:.2f}" for a in s["epoch_accuracy"]) + " %")


def sync(r, f):
    s = r.serial
    f["sync_counts"] = ", ".join(map(str, r.settings["processes"]))
    f["sync_table"] = table(["P", "run", "time", "time / serial", "speed-up", "steps", "elements sent per step",
                             "wait", "test accuracy"],
                            [[r.over(e["processes"]), e["label"], sec(e["time"]), times(e["time"] / s["time"]),
                              times(r.speedup(e)), e.get("steps") or "–", e.get("elements_sent_per_step") or "–",
                              e.get("wait_policy") or "–", pct(e["test_accuracy"])] for e in sync_entries(r)])
    f["earlier_sync"] = "; ".join(EARLIER[("sync", p)] for p in (4, 8, 16))
    factors = r.get("sync ring strong factors", 2)
    f["factors_measured2"] = times(r.speedup(factors)) if factors else "not measured, see the failed runs"


def best_gradient_run(r, scaling):
    """The fastest run exchanging gradients with a core per process (any P if there is none)."""
    entries = [e for e in sync_entries(r) if e["scaling"] == scaling and e.get("exchange") != "factors"]
    fair = [e for e in entries if e["processes"] <= r.cores] or entries
    return max(fair, key=r.speedup)


def strong_scaling(r, f):
    best = best_gradient_run(r, "strong")
    p, speedup = best["processes"], r.speedup(best)
    f.update(best_strong_label=best["label"], best_strong_p=p, best_strong_time=sec(best["time"]),
             best_strong_speedup=times(speedup),
             best_strong_verdict=pick(best["time"] < r.serial["time"], "faster than", "slower than"))
    karp_flatt = (1 / speedup - 1 / p) / (1 - 1 / p) if p > 1 else None
    f["karp_flatt"] = "–" if karp_flatt is None else f"{karp_flatt:.2f}"
    f["karp_flatt_reading"] = f.section(pick(karp_flatt is not None and karp_flatt > 1, "above_one", "below_one"))
    oversubscribed(r, f, [e for e in sync_entries(r) if e["label"] == "sync ring strong"])


def weak_scaling(r, f):
    best, strong = best_gradient_run(r, "weak"), best_gradient_run(r, "strong")
    f.update(best_weak_speedup=times(r.speedup(best)), best_weak_p=best["processes"],
             scaling_law=pick(r.speedup(best) > r.speedup(strong), "Gustafson", "Amdahl"))


def oversubscribed(r, f, strong):
    """The paragraph on time-sharing, for the smallest strong ring run with more processes than cores."""
    over = [e for e in strong if e["processes"] > r.cores]
    if not over or not r.model.ready:
        return
    e = over[0]
    compute, exchange = r.model.step(e["processes"])
    measured = per_step(e, "communication_time")
    f["oversubscribed_paragraph"] = "\n" + f.section(
        "oversubscribed_paragraph", over_p=e["processes"], over_one_core=ms(compute + exchange),
        over_shared=ms((compute + exchange) * e["processes"] / r.cores), over_exchange=ms(measured),
        over_measured=ms(per_step(e, "compute_time") + measured), over_model_exchange=ms(exchange),
        over_wait_share=f"{100 * (1 - exchange / measured):.0f} %")


def async_tables(r, f):
    s = r.serial
    entries = [e for label in r.labels("async") for e in r.series(label)]
    for masters in (2, 4):
        rows = [[r.over(e["processes"]), e["workers"], e["label"], sec(e["time"]), times(e["time"] / s["time"]),
                 pct(e["test_accuracy"]), num(e.get("staleness_mean")),
                 EARLIER.get(("async", masters, e["processes"])) if "plain" in e["label"] else "–"]
                for e in entries if e["masters"] == masters]
        f[f"async{masters}_table"] = table(["P", "workers", "run", "time", "time / serial", "test accuracy",
                                            "mean staleness", "earlier reports"], rows)
    default = [e for e in entries if "plain" not in e["label"]]
    f.update(compensation=next((e["compensation"] for e in default if e.get("compensation") is not None), "–"),
             staleness_bound=next((e["max_staleness"] for e in default if e.get("max_staleness") is not None), "–"))
    f["bounded_workers"] = f["staleness_bound"] + 1 if isinstance(f["staleness_bound"], int) else "–"
    f["staleness_table"] = table(
        ["run", "P", "workers", "staleness mean / 90th pct / max", "masters idle", "test accuracy"],
        [[e["label"], r.over(e["processes"]), e["workers"],
          " / ".join(num(e.get(k)) for k in ("staleness_mean", "staleness_p90", "staleness_max")),
          pct(100 * e["master_idle_fraction"]) if e.get("master_idle_fraction") else "–",
          pct(e["test_accuracy"]) + pick(r.diverged(e["test_accuracy"]), " (diverged)", "")] for e in entries])
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
    s = r.serial
    rows = [[label, r.over(e["processes"]), e["workers"], pct(e["test_accuracy"]),
             f"{e['test_accuracy'] - s['test_accuracy']:+.2f}", " → ".join(f"{a:.1f}" for a in e["epoch_accuracy"])]
            for label in ["serial"] + r.labels("sync") + r.labels("async") for e in r.series(label)]
    f["accuracy_table"] = table(["run", "P", "workers", "test accuracy", "vs serial (points)",
                                 "validation per epoch (%)"], rows)
    strong = [e for e in sync_entries(r) if e["scaling"] == "strong"]
    f["strong_gap"] = f"{max(abs(e['test_accuracy'] - s['test_accuracy']) for e in strong):.2f}" if strong else "–"
    f["weak_accuracies"] = ", ".join(f"{pct(e['test_accuracy'])} at P = {e['processes']}" for e in
                                     r.series("sync ring weak"))


def tradeoff(r, f):
    rows, pairs = [], []
    for p in sorted({e["processes"] for label in r.labels("async") for e in r.series(label)}):
        sync_entry = r.get("sync ring strong", p)
        cells = [r.get(f"async {m}m", p) for m in (2, 4)]
        rows.append([r.over(p)] + [f"{sec(e['time'])}, {pct(e['test_accuracy'])}" if e else "–"
                                   for e in [sync_entry] + cells])
        pairs += [(p, sync_entry, a) for a in cells if a and sync_entry]
    f["tradeoff_table"] = table(["P", "sync, ring, strong", "async 2 masters", "async 4 masters"], rows)
    p, sync_entry, async_entry = pairs[0]
    f.update(tradeoff_p=r.over(p), tradeoff_sync=sec(sync_entry["time"]), tradeoff_async=sec(async_entry["time"]),
             async_vs_sync=pick(async_entry["time"] < sync_entry["time"], "faster", "slower"))


def allreduce(r, f):
    """Q11-Q12: times against the fitted model, elements counted at the sends against theory."""
    rows = sorted(r.allreduce, key=lambda x: (x["processes"], x["size"]))
    model = lambda x, name: exchange_time(r.fits, name, x["processes"], x["size"])  # noqa: E731
    f["allreduce_table"] = table(
        ["P", "elements", "naive", "ring", "MPI", "naive / ring", "model error naive / ring / MPI", "agree"],
        [[r.over(x["processes"]), f"{x['size']:,}", ms(x["naive_s"]), ms(x["ring_s"]), ms(x["mpi_s"]),
          f"{x['naive_s'] / x['ring_s']:.2f}", " / ".join(signed(error(model(x, n), x[f"{n}_s"]))
                                                            for n in ("naive", "ring", "mpi")),
          pick(x.get("naive_equals_mpi") and x.get("ring_equals_mpi"), "yes", "NO")] for x in rows])
    f["ring_crossover"] = "; ".join(f"P = {p}: {crossover(r, p)}" for p in sorted({x["processes"] for x in rows}))
    f["sent_table"] = table(
        ["P", "elements", "naive sent", "theory (P−1)n", "ring sent", "theory 2(P−1)n/P", "as predicted",
         "total naive / ring"],
        [[r.over(x["processes"]), f"{x['size']:,}", f"{x['naive_sent']:,}", f"{x['naive_theory']:,}",
          f"{x['ring_sent_min']:,}–{x['ring_sent_max']:,}", f"{x['ring_theory']:,.0f}",
          pick(x.get("sent_as_predicted"), "yes", "NO"),
          f"{x['naive_sent'] * x['processes']:,} / {x['ring_sent_total']:,}"] for x in rows])


def crossover(r, p):
    """The smallest array (powers of two) the fitted ring allreduces faster than the fitted naive one."""
    sizes = [n for n in (2 ** k for k in range(8, 28))
             if exchange_time(r.fits, "ring", p, n) < exchange_time(r.fits, "naive", p, n)]
    return f"from about {sizes[0]:,} elements" if sizes else "ring never faster up to 2^27 elements"


def data_sent(r, f):
    """Q12-Q13 for this network's gradient: per step and process, and over every sync run (float64)."""
    n = r.model.parameters
    f["gradient_sent"] = "; ".join(f"P = {p}: naive {8e-6 * (p - 1) * n:.2f} MB, ring {16e-6 * (p - 1) * n / p:.2f} MB"
                                   for p in r.settings["processes"])
    f["total_table"] = table(["run", "P", "steps", "ring, all processes", "naive would send", "elements sent per step "
                              "(counted)"], [[e["label"], r.over(e["processes"]), f"{e['steps']:,}",
                                              f"{16e-9 * (e['processes'] - 1) * n * e['steps']:.2f} GB",
                                              f"{8e-9 * e['processes'] * (e['processes'] - 1) * n * e['steps']:.2f} GB",
                                              e.get("elements_sent_per_step") or "–"]
                                             for e in sync_entries(r) if e.get("steps") and e["allreduce"] == "ring"
                                             and e.get("exchange") != "factors"])


def traces(r, f):
    """A picture, with the template's caption, for each traced run bench/timeline.py drew; none otherwise."""
    for stem, slot in (("serial", "serial"), ("sync_P2", "sync"), ("sync_P4", "sync"), ("factors_P2", "sync"),
                       ("async_2m_P4", "async")):
        png = (r.info.get("traces") or {}).get(stem, {}).get("png")
        if png and os.path.exists(os.path.join(r.out, png)):
            f[f"trace_{slot}"] += "\n" + f.section(f"trace_{stem}", trace_png=png)


class TemplateFigures(Figures):
    """Figures that can also render the template's named optional paragraphs (`@@ name` sections)."""

    def __init__(self, sections):
        super().__init__()
        self.sections = sections

    def section(self, name, **values):
        return string.Template(self.sections[name]).substitute(Figures(self, **values))


GROUPS = [header, model_terms, model_table, predictions, serial, sync, strong_scaling, weak_scaling, async_tables,
          accuracy, tradeoff, allreduce, data_sent, traces]


def figures(results):
    """The one dictionary REPORT.md is rendered from, and the groups that could not be computed."""
    with open(TEMPLATE) as source:
        main, *parts = source.read().split("\n@@ ")
    f = TemplateFigures(dict(part.split("\n", 1) for part in parts))
    f["failures"] = f["load_note"] = f["oversubscribed_paragraph"] = f["error_reading"] = ""
    f.update(trace_serial="", trace_sync="", trace_async="")
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
