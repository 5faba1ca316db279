"""Checkpoints where operators look: Prometheus, OpenTelemetry and a live page.

Everything is derived from the ``_checkpoints`` rows (one per finished checkpoint):

* :mod:`~barriered.monitoring.figures`: counts by status and failure reason, latest
  completed / failed / restored, a duration histogram and the history (:class:`Tally`);
* :mod:`~barriered.monitoring.phases`: a checkpoint's phases on a time line;
* :mod:`~barriered.monitoring.prometheus`: the figures as a ``prometheus_client``
  collector;
* :mod:`~barriered.monitoring.otel`: spans per checkpoint and phase, and OpenTelemetry
  metrics (``opentelemetry-api``, optional);
* :mod:`~barriered.monitoring.page`: the live checkpoint page (HTML and its JSON);
* :mod:`~barriered.monitoring.server`: the HTTP endpoint of the page and the metrics;
* :mod:`~barriered.monitoring.offline`: the figures of a snapshot path read from its
  files (``barriered ui PATH``);
* :mod:`~barriered.monitoring.hub`: the driver's monitoring, fed by one hook of the
  coordinator (:func:`~barriered.monitoring.hub.recorded`).

See ``docs/monitoring.md``. This package imports ``statestore``, ``control``, ``config``
and ``files``, never the coordinator or PySpark.
"""
