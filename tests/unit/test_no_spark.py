"""The pure core imports and runs with PySpark blocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_core_needs_no_spark() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["pyspark"] = None  # any import of pyspark now fails
        import barriered
        import barriered.barrier, barriered.coordinator, barriered.config
        import barriered.statestore.key_groups
        import barriered.cli, barriered.tools.contents, barriered.tools.plot
        from barriered.testing.conformance import run_scenario
        from barriered.datasource.planner import plan
        result = run_scenario({"channels": 2, "mode": "aligned", "events": ["b1@0", "b1@1"]})
        assert result["triggered"] == [[1, "aligned"]] or result["triggered"] == [(1, "aligned")]
        assert not any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules
                       if sys.modules[m] is not None)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
