"""Upstreams of the "barriered" source: where each channel's records come from."""

from __future__ import annotations

from collections.abc import Mapping

from barriered.datasource.upstreams.base import Upstream
from barriered.errors import ConfigError


def make_upstream(
    options: Mapping[str, str], state_dir: str, required_by: str | None = None
) -> Upstream:
    """Create the upstream named by option ``upstream`` (rate, files, delta or kafka).

    Nothing is written: an upstream that keeps a manifest writes it when the query
    starts (:meth:`Upstream.persist`) or when it first finds records.

    Parameters
    ----------
    options : Mapping[str, str]
        The source options (case as given by the user).
    state_dir : str
        A folder under the snapshot path where the upstream may keep its own manifest: a
        local (or mounted) path or a URI of any store (every upstream writes it through
        :mod:`barriered.files.fileio`).
    required_by : str or None
        What already refers to this stream's positions (a restore point, the snapshot
        path's configuration or checkpoints): a manifest upstream then refuses to start
        without its manifest instead of building a new one.
    """
    from barriered.config.upstream_options import UPSTREAM

    name = str(UPSTREAM.read(options))  # declared with a default
    if name == "rate":
        from barriered.datasource.upstreams.rate import RateUpstream

        return RateUpstream.from_options(options, state_dir)
    if name == "files":
        from barriered.datasource.upstreams.files import FilesUpstream

        return FilesUpstream.from_options(options, state_dir, required_by)
    if name == "delta":
        from barriered.datasource.upstreams.delta import DeltaUpstream

        return DeltaUpstream.from_options(options, state_dir, required_by)
    if name == "kafka":
        from barriered.datasource.upstreams.kafka import KafkaUpstream

        return KafkaUpstream.from_options(options, state_dir, required_by)
    raise ConfigError(f"{UPSTREAM.where} must be one of {UPSTREAM.choices}, got {name!r}")


__all__ = ["Upstream", "make_upstream"]
