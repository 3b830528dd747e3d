"""The report's PNG figures; a figure without data says why instead of failing the report."""
__all__ = ["PLOTS", "draw_plots", "PREDICTED"]

import os

from reporting.model import PREDICTED, SERIES, exchange_time


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def empty_plot(path, message):
    fig, ax = pyplot().subplots(figsize=(7, 2.5))
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    ax.set_axis_off()
    save(fig, path)


def style(label):
    """MPI hollow squares, factors triangles, weak dashed, plain async dotted: the series stay apart."""
    kind = dict(marker="^" if "factors" in label else "s" if " mpi " in label else "o",
                linestyle="--" if "weak" in label else ":" if "plain" in label else "-")
    return dict(kind, fillstyle="none") if " mpi " in label else kind


def log2_axis(ax, values):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(values)))
    ax.set_xticklabels([str(v) for v in sorted(set(values))])
    ax.minorticks_off()


def plot_series(results, path, x, y, serial_label, only=None, **axes):
    """Every parallel series' `y` against its `x` (entry keys), or those labelled in `only`; serial as a line."""
    labels = [l for l in results.labels("sync") + results.labels("async")
              if results.series(l) and (only is None or l in only)]
    if not labels:
        return empty_plot(path, "no successful parallel run")
    fig, ax = pyplot().subplots(figsize=(9, 6))
    for label in labels:
        series = results.series(label)
        ax.plot([e[x] for e in series], [e[y] for e in series], label=label, **style(label))
    if results.serial:
        ax.axhline(results.serial[y], color="k", label=serial_label.format(results.serial[y]))
    log2_axis(ax, [e[x] for l in labels for e in results.series(l)])
    ax.set(**axes)
    ax.legend(fontsize=7, ncol=2)
    save(fig, path)


def plot_time(results, path):
    """Training time against processes, serial as a horizontal line."""
    plot_series(results, path, "processes", "time", "serial ({:.2f} s)", yscale="log", xlabel="processes P "
                f"(more than {results.cores}: sharing the cores)", ylabel="training time (s, log scale)")


# Question 8's series: sync (with the ring, strong, and weak under both step rules) and async on 2 and 4 masters
ACCURACY_SERIES = ("sync ring strong", "sync ring weak", "sync ring weak capped", "async 2m", "async 4m",
                   "async 2m plain", "async 4m plain")


def plot_accuracy(results, path):
    """Final test accuracy against the number of workers (question 8)."""
    plot_series(results, path, "workers", "test_accuracy", "serial ({:.2f} %)", ACCURACY_SERIES, ylim=(0, 100),
                xlabel="workers (sync: P; async: P − masters)", ylabel="test accuracy (%)")


def plot_speedup(results, path):
    """Measured speed-ups (points) against the model's one-core-per-process prediction (lines), per scaling."""
    fig, axes = pyplot().subplots(1, 2, figsize=(12, 5), sharey=True)
    speed = results.model.predictions(results.shared_evaluation()) if results.model.ready else {}
    colour = lambda label: "C2" if "factors" in label else "C1" if "mpi" in label.lower() else "C0"  # noqa
    for ax, scaling in zip(axes, ("strong", "weak")):
        for series in (s for s in SERIES if s[0] == scaling and speed):
            name = f"{series[1]}, {series[2]}".replace("mpi", "MPI")
            values = [speed[(p, series)] for p in PREDICTED]
            ax.plot(PREDICTED, values, color=colour(name), label=f"model: {name}")
        for label in (l for l in results.labels("sync") if scaling in l):
            series = results.series(label)
            ax.plot([e["processes"] for e in series], [e["speedup"] for e in series], linestyle="none",
                    color=colour(label), marker=style(label)["marker"], label=f"measured: {label}")
        ax.axhline(1, color="k", linewidth=1)
        log2_axis(ax, PREDICTED)
        ax.set(yscale="log", xlabel="processes P", title=f"{scaling} scaling", ylabel="speed-up over serial")
        ax.legend(fontsize=7)
    save(fig, path)


def plot_allreduce(results, path):
    """Measured allreduce times (points) and the fitted alpha-beta forms (lines), a panel per P."""
    counts = sorted({row["processes"] for row in results.allreduce})
    if not counts:
        return empty_plot(path, "no allreduce_test.py results")
    fig, axes = pyplot().subplots(1, len(counts), figsize=(4.5 * len(counts), 4.2), squeeze=False, sharey=True)
    for ax, p in zip(axes[0], counts):
        rows = sorted((r for r in results.allreduce if r["processes"] == p), key=lambda r: r["size"])
        sizes = [r["size"] for r in rows]
        for index, name in enumerate(("ring", "naive", "mpi")):
            ax.plot(sizes, [1e3 * r[f"{name}_s"] for r in rows], "o", color=f"C{index}", label=f"{name} measured")
            if name in results.fits:
                ax.plot(sizes, [1e3 * exchange_time(results.fits, name, p, n) for n in sizes], color=f"C{index}")
        crowded = " (more processes than cores)" if p > results.cores else ""
        ax.set(xscale="log", yscale="log", xlabel="elements", title=f"P = {p}{crowded}")
    axes[0][0].set_ylabel("ms per allreduce (lines: alpha-beta fit)")
    axes[0][0].legend(fontsize=7)
    save(fig, path)


PLOTS = {"time_vs_processes.png": plot_time, "speedup.png": plot_speedup,  # file -> the function that draws it
         "accuracy_vs_workers.png": plot_accuracy, "allreduce_time.png": plot_allreduce}


def draw_plots(results, out):
    for name, draw in PLOTS.items():
        try:
            draw(results, os.path.join(out, name))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:  # e.g. a CSV column renamed
            empty_plot(os.path.join(out, name), f"{draw.__doc__.splitlines()[0]} Not drawn "
                                                f"({type(error).__name__}: {error})")
