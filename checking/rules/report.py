"""report: hw3.pdf, at most 5 pages, with a numbered heading for each of questions 1-13, in order."""
import os
import re

from checking.running.jobs import REPORT

__all__ = ["check_report", "questions_in_order", "MOST_PAGES"]


HEADING = re.compile(r"^\s*(?:Q(?:uestion)?\s*)?(\d{1,2})\s*[.):]\s*\S", re.IGNORECASE | re.MULTILINE)
QUESTIONS = range(1, 14)
MOST_PAGES = 5


def check_report(check, scratch):
    """hw3.pdf, if submitted: at most 5 pages (pypdf), and headings numbered 1 to 13 in its text, in order."""
    path = os.path.join(scratch.work, REPORT)
    if REPORT not in scratch.submitted:
        return check.cannot("no hw3.pdf in the submission")
    try:
        import pypdf
        reader = pypdf.PdfReader(path)
        pages = len(reader.pages)
        text = "\n".join(page.extract_text() or "" for page in reader.pages)
    except ImportError:
        return check.skip("pypdf is not installed (make check, or pip install -r requirements-dev.txt)")
    except Exception as error:  # a file that is no PDF is the student's finding, not the checker's crash
        return check.judge([f"hw3.pdf cannot be read as a PDF: {type(error).__name__}: {error}"], "unreadable")
    answered = questions_in_order(text)
    failures = [f"hw3.pdf has {pages} pages, more than the course's {MOST_PAGES}"] if pages > MOST_PAGES else []
    unanswered = [q for q in QUESTIONS if q not in answered]
    if not text.strip():
        failures.append("hw3.pdf has no text layer: its question numbers cannot be read")
    elif unanswered:
        failures.append("no numbered heading found for question(s) " + ", ".join(map(str, unanswered))
                        + " (a line starting '7.', '7)', 'Q7' or 'Question 7', in order)")
    return check.judge(failures, f"{pages} page(s); questions found: {len(answered)} of 13")


def questions_in_order(text):
    """The question numbers 1-13 found as headings, each after the one before it."""
    found, position = [], 0
    for question in QUESTIONS:
        for match in HEADING.finditer(text, position):
            if int(match.group(1)) == question:
                found.append(question)
                position = match.end()
                break
    return found
