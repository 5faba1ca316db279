"""Upstreams of the "barriered" source: where each channel's records come from."""

from __future__ import annotations

from collections.abc import Mapping

from barriered.datasource.upstreams.base import Upstream
from barriered.errors import ConfigError


def make_upstream(options: Mapping[str, str], state_dir: str) -> Upstream:
    """Create the upstream named by option ``upstream`` (rate, files or delta).

    Parameters
    ----------
    options : Mapping[str, str]
        The source options (case as given by the user).
    state_dir : str
        A folder under the snapshot path where the upstream may keep its own manifest.
    """
    name = str(options.get("upstream", "rate")).lower()
    if name == "rate":
        from barriered.datasource.upstreams.rate import RateUpstream

        return RateUpstream.from_options(options, state_dir)
    if name == "files":
        from barriered.datasource.upstreams.files import FilesUpstream

        return FilesUpstream.from_options(options, state_dir)
    if name == "delta":
        from barriered.datasource.upstreams.delta import DeltaUpstream

        return DeltaUpstream.from_options(options, state_dir)
    raise ConfigError(f"option 'upstream' must be one of 'rate', 'files', 'delta', got {name!r}")


__all__ = ["Upstream", "make_upstream"]
