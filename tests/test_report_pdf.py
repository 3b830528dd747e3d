"""hw3.pdf: the course's report in at most five A4 pages, typeset by Typst from the same figures as REPORT.md."""
import csv
import re
import statistics

import pypdf
import pytest

from conftest import run_python
from reporting.plots import draw_plots
from reporting.render import MAX_PAGES, render, write_report
from test_report_claims import fake_results, matrix

ODD = "CPU #1 *fast* $5 _x_ @y <z> [w] `v` \\u ~t = - + / 'q' \"d\""  # Typst's markup characters, all of them


def pdf_facts(path):
    """(pages, its text with whitespace collapsed, its headings) of a PDF, read back with pypdf; quotes straight."""
    reader = pypdf.PdfReader(path)
    text = " ".join(" ".join(page.extract_text() for page in reader.pages).split())
    straight = lambda s: s.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')  # noqa: E731
    return len(reader.pages), straight(text), [straight(item.title) for item in reader.outline]


def check_pdf(out):
    """hw3.pdf has at most five pages, questions 1-13 as headings in order, and serial's time and accuracy as its
    median run's in runs.csv (the run of median time) -> its text."""
    pages, text, headings = pdf_facts(out / "hw3.pdf")
    assert 1 <= pages <= MAX_PAGES
    assert [int(h.split(".")[0]) for h in headings] == list(range(1, 14)), headings
    places = [text.find(" ".join(h.split())) for h in headings]
    assert -1 not in places and places == sorted(places), headings
    with open(out / "runs.csv", newline="") as f:
        serial = [row for row in csv.DictReader(f) if row["label"] == "serial" and row["status"] == "ok"]
    median = sorted(serial, key=lambda row: float(row["time"]))[(len(serial) - 1) // 2]
    time, accuracy = float(median["time"]), float(median["test_accuracy"])
    assert time == statistics.median_low(float(row["time"]) for row in serial)
    assert re.search(rf"1 \(serial\) {time:.2f} s 1\.00× {accuracy:.2f} %", text)  # question 2's first row
    return text


def test_pdf_from_synthetic_results_quotes_data_verbatim(tmp_path):
    """Text from the data (a CPU's name, a run's console output) reaches the PDF as it is: markup escaped."""
    out = tmp_path / "out"
    results = fake_results(out, matrix())
    results.machine["cpu"] = ODD
    (out / "records").mkdir()
    (out / "records" / "serial_P1_r0.txt").write_text(f"$ python3 main.py serial\n{ODD}\nTime serial: 2.00\n")
    (out / "records" / "allreduce_test_P2_r0.txt").write_text(
        "$ mpiexec -n 2 python3 allreduce_test.py\n elements naive ms\n 4,096 (2^12) 0.1\n 8,192 (2^13) 0.2\n\nmore\n")
    draw_plots(results, str(out))
    write_report(results, str(out))
    text = check_pdf(out)
    assert text.count(ODD) == 2  # the header's machine and the console of question 3
    assert "4,096 (2^12) 0.1 8,192 (2^13) 0.2 more" in text  # allreduce_test.py's console whole, as printed


def test_report_stops_naming_the_page_count_when_the_pdf_cannot_fit(tmp_path):
    """Question 3 quotes the serial run's console output whole: 300 epochs of it need more than five pages."""
    out = tmp_path / "out"
    fake_results(out, matrix())
    (out / "records").mkdir()
    epochs = "".join(f"Epoch {n}, accuracy 91.00 %.\n" for n in range(1, 301))
    (out / "records" / "serial_P1_r0.txt").write_text(f"$ python3 main.py serial --epochs 300\n{epochs}")
    result = run_python("report.py", "--report-only", "--out", out, timeout=120)
    assert result.returncode != 0
    pages = int(re.search(r"hw3\.pdf has (\d+) pages, more than the course's 5", result.stderr).group(1))
    assert pages == pdf_facts(out / "hw3.pdf")[0] > MAX_PAGES
    assert (out / "REPORT.md").exists()


@pytest.mark.parametrize("settings, phrase", [
    (dict(sync_time=2.5), "*In short:* with a core per rank (P = 2) sync is slower than serial (2.50 s against 2.00 s, 25.0 % slower):"),
    (dict(sync_time=1.5, weak_time=1.0), "*In short:* with a core per rank (P = 2) sync is faster than serial (1.50 s against 2.00 s, 25.0 % faster):"),
    (dict(sync_time=2.02), "*In short:* with a core per rank (P = 2) sync is within 3 % of serial (2.02 s against 2.00 s, 1.0 %"),
    (dict(course_accuracy=9.58), "The course's algorithm *collapsed in every run with 2 or more workers*."),
    (dict(course_accuracy=91.0), "The course's algorithm *collapsed in every run at no worker count*."),
    (dict(sync_time=2.5), "At P = 2: 2.00 s + 60 × (20.8 ms + 16.7 ms − 16.7 ms) − 0.05 s = 3.20 s."),
    (dict(sync_time=2.5), "Here the allreduce even grows with P, beyond a fixed serial part, and with the compute that did "
                          "not shrink it outweighed the saving at every P (question 3): the best sync run was 0.80× (P = 2)."),
])
def test_the_pdf_says_what_the_numbers_say(tmp_path, settings, phrase):
    """The PDF's claims turn on the same comparisons as REPORT.md's: synthetic results on both sides of each."""
    assert phrase in " ".join(render(fake_results(tmp_path / "out", matrix(**settings)), pdf=True).split())
