"""The live checkpoint page: Flink's Checkpoints tab as server-rendered HTML.

:func:`render` draws, for every snapshot path it is given, the counts, the latest
completed and failed checkpoint and what the run was restored from, the failures by
reason, the history with a timing bar per checkpoint (its phases,
:mod:`barriered.monitoring.phases`), sizes over time and the configuration. A small inline
script polls ``/checkpoints.json`` and, when a checkpoint finished since, fetches the page
again and swaps its content: no build step, nothing but the page itself.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from barriered.monitoring.figures import Figures
from barriered.monitoring.phases import bounds, phases

__all__ = ["PathView", "as_json", "render", "stamp"]

#: Colours of the phases in the timing bars.
PHASE_COLOURS = {
    "start_delay": "#9e9e9e",
    "alignment": "#ff9800",
    "state_write": "#2196f3",
    "acknowledge_commit": "#4caf50",
    "abort": "#e53935",
}

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}
.tiles{display:flex;gap:1em;flex-wrap:wrap}
.tile{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;min-width:9em}
.tile b{display:block;font-size:1.6em}
table{border-collapse:collapse;font-size:.9em}
td,th{border-bottom:1px solid #eee;padding:.25em .6em;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.aborted td{background:#fff3f3}
.bar{display:flex;width:240px;height:12px;background:#f5f5f5}
.bar span{display:block;height:12px}
.legend span{display:inline-block;width:10px;height:10px;margin:0 .3em 0 1em}
.muted{color:#888}
"""

_SCRIPT = """
(function(){
  var main=document.getElementById('page');
  var every=parseInt(main.dataset.refreshMs,10);
  if(!every){return;}
  function tick(){
    fetch('checkpoints.json',{cache:'no-store'}).then(function(r){return r.json();})
    .then(function(data){
      if(data.stamp===main.dataset.stamp){return;}
      return fetch(location.pathname,{cache:'no-store'}).then(function(r){return r.text();})
      .then(function(text){
        var fresh=new DOMParser().parseFromString(text,'text/html').getElementById('page');
        if(fresh){main.innerHTML=fresh.innerHTML;main.dataset.stamp=fresh.dataset.stamp;}
      });
    }).catch(function(){}).then(function(){setTimeout(tick,every);});
  }
  setTimeout(tick,every);
})();
"""


@dataclass(frozen=True)
class PathView:
    """What the page shows of one snapshot path.

    Attributes
    ----------
    figures : Figures
        Its checkpoint figures.
    configuration : dict
        The query's settings (session key -> value string), as ``config.json`` records
        them (secrets redacted).
    inflight : dict
        Per completed checkpoint id, its in-flight ranges ``{channel: [start, end)}`` (the
        state table's commit metadata), when known.
    """

    figures: Figures
    configuration: Mapping[str, str] = field(default_factory=dict)
    inflight: Mapping[int, Mapping[str, Sequence[int]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The figures' JSON and the configuration."""
        return {**self.figures.to_json(), "configuration": dict(self.configuration)}


def stamp(views: Sequence[PathView]) -> str:
    """A token that changes whenever a checkpoint finishes on one of ``views`` (the
    script reloads the page's content when it does)."""
    parts = []
    for view in views:
        f = view.figures
        last = f.history[-1] if f.history else {}
        parts.append(
            f"{f.snapshot_path}:{f.total}:{last.get('checkpoint_id')}:{last.get('status')}"
        )
    return "|".join(parts)


def render(views: Sequence[PathView], refresh_ms: int = 2000, title: str = "") -> str:
    """The page of ``views``.

    Parameters
    ----------
    views : sequence of PathView
        One per snapshot path.
    refresh_ms : int, default 2000
        How often the script polls for new checkpoints (0: never).
    title : str, optional
        The heading (default: "Checkpoints").

    Returns
    -------
    str
        A complete HTML document.
    """
    heading = title or "Checkpoints"
    body = "".join(_path_section(v) for v in views) or (
        '<p class="muted">No snapshot path is monitored yet.</p>'
    )
    now = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{_e(heading)}</title><style>{_STYLE}</style></head><body>"
        f"<main id='page' data-stamp='{_e(stamp(views))}' data-refresh-ms='{int(refresh_ms)}'>"
        f"<h1>{_e(heading)}</h1><p class='muted'>as of {_e(now)}"
        f"{', refreshing as checkpoints finish' if refresh_ms else ''}</p>{body}</main>"
        f"<script>{_SCRIPT}</script></body></html>"
    )


def _path_section(view: PathView) -> str:
    f = view.figures
    restored = f.restored or {}
    tiles = [
        ("total", "Finished", f.total),
        ("completed", "Completed", f.completed),
        ("failed", "Failed", f.failed),
        ("restored", "Restored from", restored.get("checkpoint_id", "-")),
    ]
    tile_html = "".join(
        f"<div class='tile count-{k}'>{_e(label)}<b>{_e(value)}</b></div>"
        for k, label, value in tiles
    )
    return (
        f"<section class='snapshot' data-snapshot-path='{_e(f.snapshot_path)}'>"
        f"<h2>{_e(f.snapshot_path)}</h2><div class='tiles'>{tile_html}</div>"
        f"{_latest(f)}{_reasons(f)}{_history(f.history, view.inflight)}{_sizes(f.history)}"
        f"{_configuration(view.configuration)}</section>"
    )


def _latest(f: Figures) -> str:
    rows = []
    done = f.latest_completed
    if done is not None:
        rows.append(
            f"<tr class='latest-completed'><th>Latest completed</th><td>{_e(done['checkpoint_id'])}"
            f"</td><td>{_time(done.get('end_timestamp_ms'))}</td><td>"
            f"{_dur(done.get('end_to_end_duration_ms'))}</td><td>"
            f"{_bytes(done.get('state_bytes'))}</td>"
            f"<td>{_e(done.get('effective_mode') or done.get('mode'))}</td></tr>"
        )
    bad = f.latest_failed
    if bad is not None:
        rows.append(
            f"<tr class='latest-failed'><th>Latest failed</th><td>{_e(bad['checkpoint_id'])}</td>"
            f"<td>{_time(bad.get('end_timestamp_ms'))}</td>"
            f"<td colspan='3' class='reason'>{_e(bad.get('failure_reason'))}</td></tr>"
        )
    if f.restored:
        took = f.restored.get("duration_ms")
        loaded = f.restored.get("state_bytes")
        rows.append(
            f"<tr class='latest-restored'><th>Restored</th><td>"
            f"{_e(f.restored.get('checkpoint_id') or '-')}</td>"
            f"<td>{_time(f.restored.get('ready_ms') or f.restored.get('started_ms'))}</td>"
            f"<td>{'' if took is None else _dur(took)}</td>"
            f"<td>{'' if loaded is None else _bytes(loaded)}</td>"
            f"<td>from {_e(f.restored.get('from'))}</td></tr>"
        )
    if not rows:
        return "<p class='muted'>No checkpoint has finished yet.</p>"
    return "<h2>Latest</h2><table>" + "".join(rows) + "</table>"


def _reasons(f: Figures) -> str:
    if not f.failed_by_reason:
        return ""
    cells = "".join(
        f"<tr><td>{_e(label)}</td><td class='n'>{n}</td></tr>"
        for label, n in sorted(f.failed_by_reason.items())
    )
    return f"<h2>Failures by reason</h2><table class='failures'>{cells}</table>"


def _history(
    history: Sequence[Mapping[str, Any]], inflight: Mapping[int, Mapping[str, Sequence[int]]]
) -> str:
    if not history:
        return ""
    longest = max(max(1, bounds(r)[1] - bounds(r)[0]) for r in history)
    head = (
        "<tr><th>id</th><th>status</th><th>kind</th><th>mode</th><th>trigger time</th>"
        "<th>end to end</th><th>phases</th><th>start delay</th><th>alignment</th>"
        "<th>state write</th><th>state</th><th>in-flight</th><th>acks</th><th>channels</th>"
        "<th>reason</th></tr>"
    )
    lines = []
    for row in reversed(history):
        status = str(row.get("status"))
        lines.append(
            f"<tr class='checkpoint {_e(status)}' data-checkpoint-id='{_e(row['checkpoint_id'])}'"
            f" data-status='{_e(status)}'><td class='n'>{_e(row['checkpoint_id'])}</td>"
            f"<td>{_e(status)}</td><td>{_e(row.get('kind'))}</td>"
            f"<td>{_e(row.get('effective_mode') or row.get('mode'))}</td>"
            f"<td>{_time(row.get('trigger_timestamp_ms'))}</td>"
            f"<td class='n'>{_dur(row.get('end_to_end_duration_ms'))}</td>"
            f"<td>{_bar(row, longest)}</td>"
            f"<td class='n'>{_dur(row.get('start_delay_ms'))}</td>"
            f"<td class='n'>{_dur(row.get('alignment_duration_ms'))}</td>"
            f"<td class='n'>{_dur(row.get('state_write_ms'))}</td>"
            f"<td class='n'>{_bytes(row.get('state_bytes'))}</td>"
            f"<td class='n'>{_e(row.get('inflight_rows') or 0)} rows / "
            f"{_bytes(row.get('inflight_bytes'))}</td>"
            f"<td class='n'>{_e(row.get('num_acknowledged'))}/{_e(row.get('num_expected'))}</td>"
            f"<td>{_channels(row, inflight.get(int(row['checkpoint_id'])))}</td>"
            f"<td class='reason'>{_e(row.get('failure_reason') or '')}</td></tr>"
        )
    legend = "".join(
        f"<span style='background:{c}'></span>{_e(n.replace('_', ' '))}"
        for n, c in PHASE_COLOURS.items()
    )
    return (
        f"<h2>History</h2><p class='legend muted'>{legend}</p>"
        f"<table class='history'>{head}{''.join(lines)}</table>"
    )


def _channels(row: Mapping[str, Any], inflight: Mapping[str, Sequence[int]] | None) -> str:
    """Per channel: the barrier position and the in-flight range ``[start, end)`` of
    upstream positions the checkpoint holds (when known)."""
    try:
        barriers = json.loads(row.get("barrier_positions") or "{}")
    except ValueError:
        return ""
    if not barriers:
        return ""
    lines = []
    for channel in sorted(barriers, key=lambda c: int(c)):
        held = (inflight or {}).get(str(channel))
        extra = ""
        if held:
            extra = f"<td class='n inflight'>[{_e(held[0])}, {_e(held[1])})</td>"
        lines.append(
            f"<tr data-channel='{_e(channel)}'><td>{_e(channel)}</td>"
            f"<td class='n'>{_e(barriers[channel])}</td>{extra}</tr>"
        )
    return (
        f"<details><summary>{len(barriers)}</summary><table class='channels'><tr><th>channel"
        "</th><th>barrier</th><th>in flight [start, end)</th></tr>"
        f"{''.join(lines)}</table></details>"
    )


def _bar(row: Mapping[str, Any], longest: int) -> str:
    spans = "".join(
        f"<span class='phase {p.name}' title='{_e(p.name)} {p.duration_ms} ms' style='width:"
        f"{100.0 * p.duration_ms / longest:.2f}%;background:{PHASE_COLOURS[p.name]}'></span>"
        for p in phases(row)
    )
    return f"<div class='bar'>{spans}</div>"


def _sizes(history: Sequence[Mapping[str, Any]]) -> str:
    done = [r for r in history if r.get("status") == "completed"]
    if len(done) < 2:
        return ""
    width, height = 480, 80
    series = {
        "state bytes": ("#2196f3", [int(r.get("state_bytes") or 0) for r in done]),
        "in-flight bytes": ("#ff9800", [int(r.get("inflight_bytes") or 0) for r in done]),
    }
    top = max(1, *(max(v) for _, v in series.values()))
    lines = []
    for name, (colour, values) in series.items():
        step = width / (len(values) - 1)
        points = " ".join(
            f"{i * step:.1f},{height - height * v / top:.1f}" for i, v in enumerate(values)
        )
        lines.append(
            f"<polyline fill='none' stroke='{colour}' stroke-width='2' points='{points}'>"
            f"<title>{_e(name)}</title></polyline>"
        )
    return (
        f"<h2>Sizes over time</h2><p class='muted'>completed checkpoints "
        f"{_e(done[0]['checkpoint_id'])} to {_e(done[-1]['checkpoint_id'])}; up to "
        f"{_bytes(top)}; <span style='color:#2196f3'>state</span>, "
        f"<span style='color:#ff9800'>in-flight</span></p>"
        f"<svg class='sizes' width='{width}' height='{height}' "
        f"style='border:1px solid #eee'>{''.join(lines)}</svg>"
    )


def _configuration(configuration: Mapping[str, str]) -> str:
    if not configuration:
        return ""
    cells = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in sorted(configuration.items())
    )
    return f"<h2>Configuration</h2><table class='configuration'>{cells}</table>"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _time(ms: Any) -> str:
    if ms is None:
        return "-"
    stamp_ = dt.datetime.fromtimestamp(int(ms) / 1000.0).astimezone()
    return _e(stamp_.strftime("%H:%M:%S.%f")[:-3])


def _dur(ms: Any) -> str:
    if ms is None:
        return "-"
    value = int(ms)
    return f"{value} ms" if value < 10_000 else f"{value / 1000.0:.1f} s"


def _bytes(count: Any) -> str:
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def as_json(views: Sequence[PathView]) -> str:
    """The ``/checkpoints.json`` document of ``views``: their :data:`stamp` and
    figures."""
    return json.dumps(
        {"stamp": stamp(views), "snapshot_paths": [v.to_json() for v in views]}, default=str
    )
