# The two commands a fresh machine needs (Python 3.11): `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VPY) examples/demo.py

test: $(STAMP)
	$(VPY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist
