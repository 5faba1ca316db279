"""The benchmark suite of spark-barriered: ``python -m benchmarks.run`` (or ``make bench``).

Four workloads on one local SparkSession (see :mod:`benchmarks.workloads`); each prints
one JSON object, appends it to ``benchmarks/results/<name>.jsonl`` and the suite
regenerates ``benchmarks/RESULTS.md``. Nothing here is a unit test: the numbers depend
on the machine and on what else runs on it.
"""
