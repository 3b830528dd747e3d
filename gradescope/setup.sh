#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu): Python and the
# checker's requirements into /autograder/venv. The autograder zip (docs/checking.md, "On Gradescope")
# holds this project's checker at its root, the course's skeleton in skeleton/, and these two scripts.
set -euo pipefail
apt-get install -y --no-install-recommends python3 python3-venv python3-pip
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --quiet -r /autograder/source/requirements.txt \
    "pypdf==7.1.0; python_version >= '3.10'" "pypdf==6.21.4; python_version < '3.10'"
