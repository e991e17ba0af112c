"""benchmarks/plugin_overhead.py's statistic (issue 24: a plugin that costs nothing when unused):
the median of paired ratios and its distribution-free 95% interval. No benchmark is run here."""

from __future__ import annotations

import importlib.util
import math
import os
from types import ModuleType

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "plugin_overhead.py")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_plugin_overhead", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _coverage(n: int, k: int) -> float:
    """The sign-test interval [x(k), x(n+1-k)]'s coverage: 1 - 2 P(Bin(n, 1/2) < k)."""
    return 1 - 2 * sum(math.comb(n, j) for j in range(k)) / 2**n


@pytest.mark.parametrize("n", [6, 7, 10, 20, 30, 40])
def test_the_interval_is_the_narrowest_order_statistics_that_cover_95_percent(
    bench: ModuleType, n: int
) -> None:
    xs = [1.0 + i / 100 for i in range(n)][::-1]  # sorted inside, whatever the order
    med, lo, hi = bench.median_ci(xs)
    k = round((lo - 1.0) * 100) + 1  # lo is x(k)
    assert hi == pytest.approx(1.0 + (n - k) / 100)  # and hi is x(n + 1 - k)
    assert med == pytest.approx(1.0 + (n - 1) / 200)
    assert _coverage(n, k) >= 0.95
    assert _coverage(n, k + 1) < 0.95  # one step narrower would not cover


def test_too_few_pairs_give_the_whole_range_and_the_halfwidth_is_the_wider_side(
    bench: ModuleType,
) -> None:
    assert bench.median_ci([1.2, 1.0, 1.1]) == (1.1, 1.0, 1.2)
    assert bench._halfwidth((1.0, 0.99, 1.04)) == pytest.approx(0.04)
