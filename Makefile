# spark-barriered: every target creates/updates the virtualenv it needs first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JAR    := python/barriered/jars/barriered-shim.jar
KAFKA  := build/kafka/.installed
S3A    := build/hadoop-aws/.installed

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: install jar kafka s3a browser wheel demo test test-full test-fast lint bench docs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,plot,kafka,bench]"
	touch $(STAMP)

install: $(STAMP) $(JAR) $(KAFKA) $(S3A)

# The JVM state store provider (jvm-shim/), compiled with javac against the installed
# pyspark's jars; it ships inside the package (barriered/jars/).
$(JAR): $(STAMP) jvm-shim/build.sh $(wildcard jvm-shim/src/io/barriered/shim/*.java)
	jvm-shim/build.sh $(PY) $(JAR)

jar: $(JAR)

# The local Apache Kafka broker (python -m barriered kafka-broker, the tests' broker): its jars and
# their runtime dependencies, from Maven Central through tests/kafka/pom.xml (cached in ~/.m2),
# copied into build/kafka/ (git ignores build/).
$(KAFKA): tests/kafka/pom.xml
	@command -v mvn >/dev/null || { echo "make: mvn (Maven) is required to fetch the Kafka broker"; exit 1; }
	rm -rf build/kafka
	mvn -q -B -f tests/kafka/pom.xml package
	touch $(KAFKA)

kafka: $(KAFKA)

# Hadoop's s3a filesystem, for the JVM provider's operator tables on the local S3 server
# (tests/s3_server.py): hadoop-aws of pyspark's Hadoop and its AWS SDK bundle (about
# 700 MB), resolved from Maven Central through tests/hadoop-aws/pom.xml into ~/.m2 (once
# per machine) and named in build/hadoop-aws/classpath.txt, which the tests' sessions put
# on spark.driver.extraClassPath (tests/hadoop_aws.py): no copy in the worktree. The
# package never downloads anything.
$(S3A): tests/hadoop-aws/pom.xml
	@command -v mvn >/dev/null || { echo "make: mvn (Maven) is required to fetch hadoop-aws"; exit 1; }
	rm -rf build/hadoop-aws
	mvn -q -B -f tests/hadoop-aws/pom.xml package
	touch $(S3A)

s3a: $(S3A)

# Debian's chromium and chromium-driver, for the live checkpoint page's browser test
# (tests/integration/test_monitoring_page.py, Selenium from the test extra), which is
# skipped, saying why, without them. Installed with apt-get when run as root (CI does),
# else the command to run is printed.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  echo "make: chromium and chromedriver are installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	else \
	  echo "make: the browser test needs chromium and chromium-driver: sudo apt-get install -y chromium chromium-driver"; \
	fi

# The package as a wheel, the JVM provider's jar inside: dist/spark_barriered-<version>-py3-none-any.whl
# (pip install it into your own environment, or %pip install it on Databricks).
wheel: $(STAMP) $(JAR)
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .

demo: $(STAMP) $(JAR)  ## the main job: a local demo on real Spark
	$(PY) -m barriered demo --out $(or $(OUT),out/demo) --duration $(or $(DURATION),40)

test: install  ## lint, types, unit, and one representative Spark case per capability
	$(VENV)/bin/ruff check python tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -m "not full" --durations=15

test-full: install  ## everything: every mode x crash point x operator, soaks, cluster, Connect
	$(PY) -m pytest -q

test-fast: install  ## pure-Python tests only (no Spark)
	$(PY) -m pytest -q -m "not spark"

lint: $(STAMP) $(JAR)
	$(VENV)/bin/ruff check python tests benchmarks
	$(VENV)/bin/ruff format --check python tests benchmarks
	$(VENV)/bin/mypy

bench: $(STAMP) $(JAR)  ## the benchmark suite (ARGS=--quick for a smoke run, ARGS="--only NAME")
	$(PY) -m benchmarks.run $(ARGS)

docs: $(STAMP) $(JAR)
	$(PY) -m barriered.config_doc
