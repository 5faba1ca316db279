# spark-barriered: every target creates/updates the virtualenv it needs first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JAR    := python/barriered/jars/barriered-shim.jar

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: install jar demo test test-full test-fast lint bench docs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,plot]"
	touch $(STAMP)

install: $(STAMP) $(JAR)

# The JVM state store provider (jvm-shim/), compiled with javac against the installed
# pyspark's jars; it ships inside the package (barriered/jars/).
$(JAR): $(STAMP) jvm-shim/build.sh $(wildcard jvm-shim/src/io/barriered/shim/*.java)
	jvm-shim/build.sh $(PY) $(JAR)

jar: $(JAR)

demo: $(STAMP) $(JAR)  ## the main job: a local demo on real Spark
	$(PY) -m barriered demo --out $(or $(OUT),out/demo) --duration $(or $(DURATION),40)

test: $(STAMP) $(JAR)  ## lint, types, unit, and one representative Spark case per capability
	$(VENV)/bin/ruff check python tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -m "not full" --durations=15

test-full: $(STAMP) $(JAR)  ## everything: every mode x crash point x operator, soaks, cluster, Connect
	$(PY) -m pytest -q

test-fast: $(STAMP) $(JAR)  ## pure-Python tests only (no Spark)
	$(PY) -m pytest -q -m "not spark"

lint: $(STAMP) $(JAR)
	$(VENV)/bin/ruff check python tests benchmarks
	$(VENV)/bin/ruff format --check python tests benchmarks
	$(VENV)/bin/mypy

bench: $(STAMP) $(JAR)  ## the benchmark suite (ARGS=--quick for a smoke run, ARGS="--only NAME")
	$(PY) -m benchmarks.run $(ARGS)

docs: $(STAMP) $(JAR)
	$(PY) -m barriered.config_doc
