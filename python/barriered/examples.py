"""Ready-made keyed processors, used by the demo, the notebooks and the tests.

A processor passed to :meth:`barriered.api.KeyedStream.process` is pickled to the
executors, so it must live in an importable module (or be defined in the notebook or
``__main__``, which cloudpickle ships by value).
"""

from __future__ import annotations

import pandas as pd


class RunningTotals:
    """Running sum and count of ``amount`` per key; emits the new total per key.

    Vectorized: one call per key group and micro-batch (``process_batch``), a groupby
    and a merge, whatever the number of keys.
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
