"""The report's figures, drawn once at their printed size: PNG for REPORT.md, SVG beside it for hw3.pdf. A figure
without data says why instead of failing the report."""
__all__ = ["PLOTS", "draw_plots"]

import os

from reporting.model import exchange_time


WIDTH = 6.7  # inches: an A4 page's text width in hw3.pdf, so that 8-point labels print at 8 points


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"font.size": 8, "legend.fontsize": 7, "svg.hashsalt": "report"})  # stable SVG ids
    import matplotlib.pyplot as plt
    return plt


def figure(height, panels=1, **options):
    return pyplot().subplots(1, panels, figsize=(WIDTH, height), layout="constrained", **options)


def save(fig, path):
    fig.savefig(path, dpi=150)
    fig.savefig(os.path.splitext(path)[0] + ".svg", metadata={"Date": None})  # no date: same runs, same file
    pyplot().close(fig)


def empty_plot(path, message):
    fig, ax = figure(1.5)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    ax.set_axis_off()
    save(fig, path)


# A colour and a marker of its own for each series of figures 1 and 2: colours far apart on white
COLOURS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#9a6324", "#469990",
           "#800000", "#808000", "#000075", "#bfef45")
MARKERS = ("o", "s", "^", "v", "D", "<", ">", "p", "h", "*", "X", "P", "d")
NAMES = {"sync ring strong": "sync, strong scaling", "sync ring weak plain": "sync, weak scaling, plain SGD",
         "sync ring weak": "sync, weak scaling, large-batch rule", "async 2m": "async, 2 masters",
         "async 4m": "async, 4 masters"}  # the legend's words; other series by their label


def line(label):
    return "--" if "weak" in label else ":" if "many-workers" in label else "-"


def series_style(label, order):
    """The series' own colour and marker by its place in `order` (every series of the run), its line by kind."""
    index = order.index(label) % len(COLOURS)
    return dict(color=COLOURS[index], marker=MARKERS[index], markersize=4, linestyle=line(label))


def log2_axis(ax, values):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(values)), [str(v) for v in sorted(set(values))])
    ax.minorticks_off()


def plot_series(results, path, x, y, serial_label, only=None, bands=((None, None),), keep=lambda e: True, **axes):
    """Every parallel series' `y` against its `x` (entry keys; y "mean_accuracy": the seeds' mean, each seed's own
    accuracy a hollow marker), or those labelled in `only`; serial as a line. A panel per (low, high) limits of y
    in `bands`, the legend beside the last; only the entries `keep` accepts."""
    order = results.labels("sync") + results.labels("async")
    labels = [l for l in order if results.series(l) and (only is None or l in only)]
    if not labels:
        return empty_plot(path, "no successful parallel run")
    fig, panels = figure(2.0, len(bands), squeeze=False)
    for ax, band in zip(panels[0], bands):
        for label in labels:
            series = [e for e in results.series(label) if keep(e)]
            values, style = [e[y] for e in series], series_style(label, order)
            ax.plot([e[x] for e in series], values, label=NAMES.get(label, label), zorder=3, **style)
            if y == "mean_accuracy":  # every seed too, hollow, each series nudged apart on the log axis to stay legible
                nudge = 2 ** (0.05 * (labels.index(label) - (len(labels) - 1) / 2))
                ax.scatter([e[x] * nudge for e in series for _ in e["run_accuracies"]],
                           [a for e in series for a in e["run_accuracies"]], s=36, marker=style["marker"],
                           facecolors="none", edgecolors=style["color"], linewidths=0.7, zorder=2)
        if results.serial:  # thin and dashed, over the series: visible where a series lies on serial's value
            ax.axhline(results.serial[y], color="k", linewidth=1.2, linestyle=(0, (3, 3)), zorder=4,
                       label=serial_label.format(results.serial[y]))
        log2_axis(ax, [e[x] for l in labels for e in results.series(l) if keep(e)])
        ax.set(**{key: value for key, value in axes.items() if key not in ("xlabel", "ylabel")})
        if band != (None, None):
            ax.set_ylim(*band)
        ax.set_ylabel(axes.get("ylabel"))
    fig.supxlabel(axes.get("xlabel"), fontsize=8)
    panels[0][-1].legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    save(fig, path)


# Question 8's series: sync with the ring (strong scaling), async on 2 and 4 masters (the course's algorithm)
ACCURACY_SERIES = ("sync ring strong", "async 2m", "async 4m")
COURSE_SYNC = (4, 8, 16)  # the course's sync runs (question 2)


def plot_accuracy(results, path):
    """Final test accuracy against the number of workers (question 8), the seeds' mean and each seed."""
    alone = results.cores >= max(results.settings["processes"])  # a core per rank: the course's P alone, as question 2
    plot_series(results, path, "workers", "mean_accuracy", "serial ({:.2f} %)", ACCURACY_SERIES, bands=((0, 100),),
                keep=lambda e: not alone or e["mode"] != "sync" or e["processes"] in COURSE_SYNC,
                xlabel="workers (log₂ scale; sync: P, async: P − masters)",
                ylabel="test accuracy (%)")


def plot_allreduce(results, path):
    """Measured naive and ring allreduce times (points) and the alpha-beta-gamma forms (lines): the ping-pong's alpha and beta, gamma timed."""
    counts = sorted({row["processes"] for row in results.allreduce})
    if not counts:
        return empty_plot(path, "no allreduce_test.py results")
    fig, axes = figure(2.0, len(counts), squeeze=False, sharey=True)
    for ax, p in zip(axes[0], counts):
        rows = sorted((r for r in results.allreduce if r["processes"] == p), key=lambda r: r["size"])
        sizes, fits = [r["size"] for r in rows], results.fits  # one link's constants, for every P
        for index, name in enumerate(("ring", "naive")):
            ax.plot(sizes, [1e3 * r[f"{name}_s"] for r in rows], "o", color=f"C{index}", markersize=3,
                    label=f"{name}: measured")
            if name in fits:
                ax.plot(sizes, [1e3 * exchange_time(fits, name, p, n) for n in sizes], color=f"C{index}",
                        label=f"{name}: α-β-γ, P = 2 fit")
        crowded = "* (cores shared)" if p > results.cores else ""
        ax.set(xscale="log", yscale="log", xlabel="elements n (log scale)", title=f"P = {p}{crowded}")
    axes[0][0].set_ylabel("ms per allreduce (log scale)")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    save(fig, path)


PLOTS = {"accuracy_vs_workers.png": plot_accuracy, "allreduce_time.png": plot_allreduce}  # file -> what draws it


def draw_plots(results, out):
    for name, draw in PLOTS.items():
        try:
            draw(results, os.path.join(out, name))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:  # e.g. a CSV column renamed
            empty_plot(os.path.join(out, name), f"{draw.__doc__.splitlines()[0]} Not drawn "
                                                f"({type(error).__name__}: {error})")
