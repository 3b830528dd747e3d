"""The report's PNG figures; a figure without data says why instead of failing the report."""
__all__ = ["PLOTS", "draw_plots", "PREDICTED"]

import os

from reporting.model import FORMS, exchange_time

PLOTS = {  # file -> what it shows
    "time_vs_processes.png": "training time against processes, serial as a horizontal line",
    "speedup.png": "speed-up over serial, measured and predicted by the cost model",
    "accuracy_vs_workers.png": "final test accuracy against the number of workers (Q8)",
    "allreduce_time.png": "allreduce time against array size, measured and fitted",
}
PREDICTED = [2, 4, 8, 16, 32, 64]  # process counts of the one-core-per-process prediction
# The predicted series: (label, scaling, exchange, allreduce).
MODEL_SERIES = [("gradients, ring", "strong", "gradients", "ring"), ("gradients, MPI", "strong", "gradients", "mpi"),
                ("factors, ring", "strong", "factors", "ring"), ("gradients, ring", "weak", "gradients", "ring"),
                ("gradients, MPI", "weak", "gradients", "mpi"), ("factors, ring", "weak", "factors", "ring")]


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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 2.5))
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


def plot_series(results, path, x, y, serial_label, **axes):
    """Every parallel series' `y` against its `x` (entry keys), serial as a horizontal line."""
    labels = [l for l in results.labels("sync") + results.labels("async") if results.series(l)]
    if not labels:
        return empty_plot(path, "no successful parallel run")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
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
    plot_series(results, path, "processes", "time", "serial ({:.2f} s)", yscale="log", xlabel="processes P "
                f"(more than {results.cores}: sharing the cores)", ylabel="training time (s, log scale)")


def plot_accuracy(results, path):
    plot_series(results, path, "workers", "test_accuracy", "serial ({:.2f} %)", ylim=(0, 100),
                xlabel="workers (sync: P; async: P − masters)", ylabel="test accuracy (%)")


def plot_speedup(results, path):
    """Measured speed-ups (points) against the model's one-core-per-process prediction (lines), per scaling."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    shared = results.shared_evaluation()
    for ax, scaling in zip(axes, ("strong", "weak")):
        for index, (name, kind, exchange, allreduce) in enumerate(MODEL_SERIES):
            if kind == scaling and results.model.ready:
                values = [results.model.speedup(p, shared, exchange=exchange, allreduce=allreduce, scaling=scaling)
                          for p in PREDICTED]
                ax.plot(PREDICTED, values, color=f"C{index % 3}", label=f"model: {name}")
        for label in (l for l in results.labels("sync") if scaling in l):
            series = results.series(label)
            ax.plot([e["processes"] for e in series], [results.speedup(e) for e in series], linestyle="none",
                    color="C2" if "factors" in label else "C1" if " mpi " in label else "C0",
                    marker=style(label)["marker"], label=f"measured: {label}")
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
    plt = pyplot()
    fig, axes = plt.subplots(1, len(counts), figsize=(4.5 * len(counts), 4.2), squeeze=False, sharey=True)
    for ax, p in zip(axes[0], counts):
        rows = sorted((r for r in results.allreduce if r["processes"] == p), key=lambda r: r["size"])
        sizes = [r["size"] for r in rows]
        for index, name in enumerate(n for n in FORMS if n != "allgather"):
            ax.plot(sizes, [1e3 * r[f"{name}_s"] for r in rows], "o", color=f"C{index}", label=f"{name} measured")
            if name in results.fits:
                ax.plot(sizes, [1e3 * exchange_time(results.fits, name, p, n) for n in sizes], color=f"C{index}")
        crowded = " (more processes than cores)" if p > results.cores else ""
        ax.set(xscale="log", yscale="log", xlabel="elements", title=f"P = {p}{crowded}")
    axes[0][0].set_ylabel("ms per allreduce (lines: alpha-beta fit)")
    axes[0][0].legend(fontsize=7)
    save(fig, path)


def draw_plots(results, out):
    drawers = {"time_vs_processes.png": plot_time, "speedup.png": plot_speedup, "accuracy_vs_workers.png":
               plot_accuracy, "allreduce_time.png": plot_allreduce}
    for name, draw in drawers.items():
        try:
            draw(results, os.path.join(out, name))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:  # e.g. a CSV column renamed
            empty_plot(os.path.join(out, name), f"{PLOTS[name]}: not drawn ({type(error).__name__}: {error})")
