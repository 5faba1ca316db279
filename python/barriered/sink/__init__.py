"""The "barriered-delta" sink: exactly-once output, committed with the checkpoints.

Flink's two-phase commit, in micro-batch terms:

1. *pre-commit*, per micro-batch: executors write the batch's Parquet data files into
   the output table's folder (:mod:`barriered.sink.writer`), invisible to readers
   because no Delta commit names them, and the driver-side ``commit`` of the batch
   records them in one staged-batch file under the snapshot path
   (:mod:`barriered.sink.staging`);
2. *commit*, per checkpoint: when checkpoint ``n`` completes, the coordinator adds the
   files of every staged batch up to ``n``'s cut batch to the table in one Delta commit
   carrying the app transaction ``(barriered.sink.<sink>, n)``
   (:mod:`barriered.sink.committer`), so a commit repeated after a crash changes nothing.

The sink owns its output table (:mod:`barriered.sink.owner`): a second query's sink, a
table no sink wrote or one with other columns (:mod:`barriered.sink.schema`) is refused
before anything is staged or committed.

A restore discards what the crashed run staged after the restored cut (retention
deletes those files after ``retention.minAge``); a crash between a checkpoint's
completion and its sink commit is finished by the next run.
"""

from barriered.sink.writer import BarrieredDeltaSink

__all__ = ["BarrieredDeltaSink"]
