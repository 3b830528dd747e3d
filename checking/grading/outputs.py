"""Every file the checker writes for its user (sheet, JSON record, CSV, results.json, a batch's state),
written whole or not at all: a reader, or a batch resumed after a kill, never sees half a file."""
import os

__all__ = ["write_whole"]


def write_whole(path, text):
    """Write `text` to `path` whole or not at all (a temporary name, then renamed)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        f.write(text)
    os.replace(temporary, path)
