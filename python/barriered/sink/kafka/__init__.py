"""The "barriered-kafka" sink: exactly-once Kafka output, published with the checkpoints.

Kafka transactions cannot be handed from one process to another, so the sink works like
the ``barriered-delta`` sink and shares its machinery:

1. *pre-commit*, per micro-batch: executors stage the batch's rows as Kafka records
   (``key``, ``value``, ``topic``, ``partition``, ``headers``) in Parquet files under
   ``<snapshotPath>/_sink/<sink>/data/`` and the driver records the staged batch
   (:mod:`barriered.sink.staging`, :mod:`barriered.sink.kafka.writer`);
2. *publish*, per checkpoint: when checkpoint ``n`` completes, the coordinator publishes
   the records of every staged batch up to its cut in **one** Kafka transaction
   (``transactional.id`` ``barriered.sink.<sinkId>``), which also commits the offset
   ``n`` of the sink's consumer group on partition 0 of the progress topic
   (:mod:`barriered.sink.kafka.publisher`). A ``read_committed`` consumer sees a whole
   checkpoint's records at once, or none.

A crash anywhere is finished by the next run: ``init_transactions`` aborts a transaction
the crashed run left open, and the group's offset says whether ``n`` was published.
The transactional id and the group belong to one snapshot path: a query of another
path with the same sink (a restore of another path or of a savepoint into a new one) is
refused before anything is staged or published (:func:`publisher.check_owner`).

The data source is :class:`barriered.sink.kafka.writer.BarrieredKafkaSink` (not imported
here: the shared staging module imports :mod:`barriered.sink.kafka.options`).
"""
