# Two commands on a fresh machine (Python 3.9+ with pip):
#   make run    set up .venv (numpy, mpi4py, the mpich wheel) and train serially on the bundled MNIST
#   make test   set up .venv with the test tools too and run the whole test suite
# Other modes: make run MODE=sync NP=4, make run MODE="async 2" NP=4.
# Check a student's hw3: make check SUBMISSION=DIR (or SUBMISSION=hw3.zip CHECK="--skeleton DIR").
PYTHON ?= python3
VENV ?= .venv
MODE ?= serial
NP ?= 1
PY := $(VENV)/bin/python

.PHONY: run test check clean

run: $(VENV)/.runtime
	$(VENV)/bin/mpiexec -n $(NP) $(PY) main.py $(MODE)

test: $(VENV)/.dev
	$(PY) -m pytest

check: $(VENV)/.dev
	@test -n "$(SUBMISSION)" || { echo "make check: give SUBMISSION=DIR or SUBMISSION=hw3.zip" >&2; exit 2; }
	$(PY) check_submission.py $(SUBMISSION) $(CHECK)

$(VENV)/.runtime: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache results/quick
