"""Draw a trace of main.py --trace as a Gantt chart: one row per rank, a colour per span kind.

    python3 bench/timeline.py TRACE.json -o timeline.png [--steps A:B]
    python3 bench/timeline.py TRACE.json --totals       (per rank and span kind: count, total, mean)

--steps A:B draws from the start of step A to the start of step B (0-based, B excluded), where
the steps are rank 0's `forward` spans (serial, sync: one per training step) or, when rank 0 has
none (async: rank 0 is a master), its `apply_gradient` spans. Without --steps the whole trace is drawn (the epoch spans
then show where validation falls). Spans nested in another (the ring's reduce_scatter and
allgather inside allreduce) are drawn as thinner bars inside their parent. Each kind of span keeps
one colour in every picture: computation blue and green, the exchange warm, waiting grey. In async
the trace's flow events, each gradient from a worker's push to a master's apply_gradient, are drawn
as arrows.
"""
import argparse
import json
import os
import sys

__all__ = ["load_spans", "load_flows", "step_window", "draw", "totals"]

STEP_SPANS = ("forward", "apply_gradient")
HIDDEN = ("epoch",)  # enclosing spans that would cover the whole window in one colour
COLOURS = {  # fixed, so that a kind looks the same in every picture; others get tab20's
    "sample": "#98df8a", "forward": "#1f77b4", "backward": "#6baed6", "update": "#2ca02c",
    "evaluate": "#9467bd", "epoch": "#eeeeee",
    "allreduce": "#ff7f0e", "reduce_scatter": "#d62728", "allgather": "#ffbb78",
    "compute": "#1f77b4", "push_gradients": "#ff7f0e", "pull_parameters": "#b0b0b0",
    "wait_gradient": "#d9d9d9", "apply_gradient": "#2ca02c", "send_parameters": "#d62728",
    "grant": "#8c564b", "snapshot": "#e377c2",
}


def load_spans(path):
    """-> (track names {rank: name}, spans [(rank, name, start µs, end µs, depth)])."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    spans = []
    for rank in sorted(tracks):
        mine = sorted((e for e in events if e["ph"] == "X" and e["pid"] == rank),
                      key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []  # ends of the spans that enclose the current one
        for e in mine:
            start, end = e["ts"], e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            spans.append((rank, e["name"], start, end, len(open_ends)))
            open_ends.append(end)
    return tracks, spans


def load_flows(path):
    """-> [(from rank, from µs, to rank, to µs)]: the trace's flow events (messages), start to finish."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ends = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            ends.setdefault(e["id"], {})[e["ph"]] = (e["pid"], e["ts"])
    return [(*flow["s"], *flow["f"]) for flow in ends.values() if len(flow) == 2]


def step_window(spans, steps):
    """(start, end) in µs of rank 0's steps A:B, or of the whole trace when steps is None."""
    if steps is None:
        return min(s[2] for s in spans), max(s[3] for s in spans)
    first, last = steps
    for kind in STEP_SPANS:
        starts = [s[2] for s in spans if s[0] == 0 and s[1] == kind]
        if starts:
            end = starts[last] if last < len(starts) else max(s[3] for s in spans)
            return starts[min(first, len(starts) - 1)], end
    raise SystemExit("timeline.py: rank 0 has no forward or apply_gradient spans to count steps by")


def draw(tracks, spans, window, path, title, flows=()):
    """Write the Gantt chart of `spans` (and arrows for `flows`) within `window` (µs) to `path` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    low, high = window
    shown = [s for s in spans if s[3] > low and s[2] < high and
             (s[1] not in HIDDEN or high - low > 0.9 * (s[3] - s[2]))]
    kinds = list(dict.fromkeys(s[1] for s in shown))
    colours = {kind: COLOURS.get(kind, plt.get_cmap("tab20")(i % 20)) for i, kind in enumerate(kinds)}
    ranks = sorted(tracks)
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.55 * len(ranks)))
    for rank, name, start, end, depth in shown:
        height = 0.8 * 0.6 ** depth
        ax.barh(ranks.index(rank), (min(end, high) - max(start, low)) / 1000, left=(max(start, low) - low) / 1000,
                height=height, color=colours[name], edgecolor="none")
    handles, labels = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds], list(kinds)
    if draw_flows(ax, flows, ranks, window):
        handles.append(plt.Line2D([0], [0], color="0.25", lw=0.8))
        labels.append("gradient message")
    ax.set_yticks(range(len(ranks)), [tracks[r] for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds")
    ax.set_title(title)
    axes_inches = fig.get_size_inches()[1] * (fig.subplotpars.top - fig.subplotpars.bottom)
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.5 / axes_inches),  # 0.5" below
              ncol=min(len(labels), 6), frameon=False)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def draw_flows(ax, flows, ranks, window):
    """An arrow per message whose both ends fall inside `window` -> how many were drawn."""
    low, high = window
    drawn = 0
    for source, start, target, end in flows:
        if low <= start <= high and low <= end <= high and source in ranks and target in ranks:
            ax.annotate("", xy=((end - low) / 1000, ranks.index(target)),
                        xytext=((start - low) / 1000, ranks.index(source)),
                        arrowprops={"arrowstyle": "->", "lw": 0.7, "color": "0.25", "alpha": 0.6})
            drawn += 1
    return drawn


def totals(tracks, spans):
    """Print, per rank and span kind, how many spans, their total seconds and mean microseconds."""
    sums = {}
    for rank, name, start, end, _ in spans:
        count, total = sums.get((rank, name), (0, 0.0))
        sums[rank, name] = (count + 1, total + end - start)
    for (rank, name), (count, total) in sorted(sums.items()):
        print(f"{tracks[rank]:8s} {name:16s} {count:6d} spans {total / 1e6:8.3f} s {total / count:9.1f} us each")


def steps_argument(text):
    """'A:B' -> (A, B) with 0 <= A < B."""
    try:
        first, last = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B, two integers, got {text!r}") from None
    if not 0 <= first < last:
        raise argparse.ArgumentTypeError(f"need 0 <= A < B, got {text!r}")
    return first, last


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a trace written by main.py --trace")
    parser.add_argument("-o", "--output", help="the PNG to write")
    parser.add_argument("--totals", action="store_true", help="print each rank's time per span kind")
    parser.add_argument("--steps", type=steps_argument, help="A:B, rank 0's steps A to B (B excluded)")
    parser.add_argument("--title", help="the chart's title (default: the trace's file name and window)")
    args = parser.parse_args()
    if not (args.output or args.totals):
        parser.error("give -o PNG, --totals, or both")
    try:
        tracks, spans = load_spans(args.trace)
    except (OSError, ValueError, KeyError) as error:
        sys.exit(f"timeline.py: {args.trace}: not a readable trace: {error}")
    if not spans:
        sys.exit(f"timeline.py: {args.trace}: no spans")
    if args.totals:
        totals(tracks, spans)
    if not args.output:
        return
    window = step_window(spans, args.steps)
    steps = f", steps {args.steps[0]}:{args.steps[1]}" if args.steps else ""
    draw(tracks, spans, window, args.output, args.title or f"{os.path.basename(args.trace)}{steps}",
         load_flows(args.trace))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
