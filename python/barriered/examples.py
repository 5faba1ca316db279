"""Ready-made keyed processors, used by the demo, the notebooks and the tests.

A processor passed to :meth:`barriered.api.KeyedStream.process` is pickled to the
executors, so it must live in an importable module (or be defined in the notebook or
``__main__``, which cloudpickle ships by value).
"""

from __future__ import annotations

from typing import Any

import pandas as pd


class RunningTotals:
    """Running sum and count of ``amount`` per key; emits the new total per key.

    Vectorized: one call per partition's key groups and micro-batch (``process_batch``), a
    groupby and a merge, whatever the number of keys.
    """

    state_schema = "total long, count long"
    output_schema = "user_id string, total long"

    def process_batch(
        self, rows: pd.DataFrame, state: pd.DataFrame
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Add this batch's amounts to the totals of the keys present in ``rows``."""
        keys = [c for c in state.columns if c not in ("total", "count")]
        amounts = rows.groupby(keys, sort=False, dropna=False)["amount"]
        batch = pd.DataFrame({"total": amounts.sum(), "count": amounts.size()})
        before = state.set_index(keys)[["total", "count"]]
        new = batch.add(before, fill_value=0).astype("int64").reset_index()
        return new[[*keys, "total"]], new


class RecordNumbers:
    """Numbers each key's records: emits one row per record, ``(user_id, n)``.

    The ``n``-th record of a key (in the order the keyed operator sees them) gets ``n``,
    so the whole output of a run is ``(k, 1) .. (k, N_k)`` for every key ``k`` with
    ``N_k`` records, whatever the batching: a row missing or emitted twice shows.
    """

    state_schema = "count long"
    output_schema = "user_id string, n long"

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: Any) -> pd.DataFrame:
        """Emit the next numbers of this key."""
        start = int((state.get() or {"count": 0})["count"])
        state.update({"count": start + len(rows)})
        return pd.DataFrame(
            {"user_id": [key[0]] * len(rows), "n": range(start + 1, start + len(rows) + 1)}
        )
