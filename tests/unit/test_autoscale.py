"""The autoscaling policy of a managed query: decisions from the backlog at completed
checkpoints (pure Python)."""

from __future__ import annotations

import json

from barriered.autoscale import AutoscalePolicy, backlog_of
from barriered.config import BarrieredConf


def _policy(**fields: object) -> AutoscalePolicy:
    base = {
        "autoscale_enabled": True,
        "autoscale_scale_up_backlog": 100,
        "autoscale_scale_down_backlog": 10,
        "autoscale_checkpoints": 3,
        "autoscale_cool_down_ms": 60_000,
        "autoscale_max_partitions": 8,
        "autoscale_min_partitions": 2,
        "max_parallelism": 16,
    }
    return AutoscalePolicy.from_record({**base, **fields})


def test_a_backlog_above_the_bound_for_n_checkpoints_doubles_the_partitions() -> None:
    policy = _policy()
    assert policy.observe(1, 500, 2, 0) is None
    assert policy.observe(2, 500, 2, 0) is None
    assert policy.observe(2, 500, 2, 0) is None  # the same checkpoint counts once
    decision = policy.observe(3, 500, 2, 0)
    assert decision is not None and decision.partitions == 4
    assert "above autoscale.scaleUpBacklog=100 at 3 checkpoints in a row" in decision.reason
    assert "500 at checkpoint 1, 500 at checkpoint 2, 500 at checkpoint 3" in decision.reason


def test_one_low_checkpoint_starts_the_count_again() -> None:
    policy = _policy()
    for cid, backlog in [(1, 500), (2, 500), (3, 50), (4, 500), (5, 500)]:
        assert policy.observe(cid, backlog, 2, 0) is None
    assert policy.observe(6, 500, 2, 0) is not None


def test_bounds_cool_down_and_scaling_down() -> None:
    policy = _policy()
    for cid in (1, 2):
        policy.observe(cid, 1000, 6, 0)
    up = policy.observe(3, 1000, 6, 0)
    assert up is not None and up.partitions == 8  # autoscale.maxPartitions
    policy.rescaled(1_000)
    for cid in (4, 5, 6):
        assert policy.observe(cid, 0, 8, 30_000) is None  # cooling down
    down = policy.observe(7, 0, 8, 61_000)
    assert down is not None and down.partitions == 4
    assert "below autoscale.scaleDownBacklog=10" in down.reason
    policy.rescaled(61_000)
    assert all(policy.observe(c, 5_000, 8, 999_999) is None for c in (8, 9, 10))  # at the top
    low = _policy(autoscale_max_partitions=0)
    for cid in (1, 2, 3):
        decision = low.observe(cid, 1000, 12, 0)
    assert decision is not None and decision.partitions == 16  # 0: maxParallelism


def test_off_by_default_and_the_backlog_of_a_progress_report() -> None:
    assert not AutoscalePolicy(BarrieredConf()).enabled
    report = {"barriered": {"available": [120, 40, 7], "delivered": [20, 40, 9]}}
    assert backlog_of(json.dumps(report)) == 100
    assert backlog_of(json.dumps({"rate": 3})) is None
    assert backlog_of(None) is None
