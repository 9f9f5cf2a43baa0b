"""nvshmem_dsl.triton.do_bench, on CPU: the benchmark function that lets ``triton.autotune`` tune
kernels that synchronise PEs (tests/gpu/test_triton_gpu.py runs it on GPUs).

What must hold for those kernels not to hang and to keep one config everywhere: every config is
launched a fixed number of times whatever it costs (Triton's own do_bench launches as many as fit
a time budget), and what the autotuner compares is the team's agreed figure, not this PE's.
"""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")

import nvshmem_dsl.triton as nv  # noqa: E402
from nvshmem_dsl.errors import NvshmemArgumentError  # noqa: E402
from nvshmem_dsl.triton import _autotune  # noqa: E402


class _Event:
    def __init__(self, clock, enable_timing):
        assert enable_timing
        self.clock, self.at = clock, None

    def record(self):
        self.at = self.clock["now"]

    def elapsed_time(self, other):
        return other.at - self.at


class _Device:
    """A device interface whose launches take ``cost`` ms each (a clock the kernel call moves)."""

    def __init__(self):
        self.clock = {"now": 0.0}
        self.syncs = 0

    def Event(self, enable_timing=False):
        return _Event(self.clock, enable_timing)

    def synchronize(self):
        self.syncs += 1

    def current_stream(self):
        return "stream"


@pytest.fixture
def device(monkeypatch):
    dev = _Device()
    barriers = []
    monkeypatch.setattr(_autotune, "_device", lambda: dev)
    monkeypatch.setattr(_autotune, "_team_barrier", lambda team, stream: barriers.append((team, stream)))
    dev.barriers = barriers
    return dev


@pytest.mark.parametrize("cost", [0.001, 5.0, 400.0])
def test_every_config_is_launched_a_fixed_number_of_times(device, cost):
    """However long a launch takes (Triton's do_bench would launch a 1 us kernel thousands of
    times and a 400 ms one once): warmup + reps launches, after a barrier of the team."""
    calls = []

    def kernel_call():
        calls.append(1)
        device.clock["now"] += cost

    times = _autotune._time_launches(kernel_call, 2, 7, "team")
    assert len(calls) == 9
    assert times == pytest.approx([cost] * 7)
    assert device.barriers == [("team", "stream")]


def test_the_autotuner_gets_the_teams_figures(device, monkeypatch):
    """What bench returns is the max-reduction over the team of this PE's summary: the same
    figures on every PE, so every PE keeps the same config."""
    seen = []

    def agree(values, team):
        seen.append((list(values), team))
        return [v + 100.0 for v in values]   # another PE was slower

    monkeypatch.setattr(_autotune, "_max_over_team", agree)
    costs = iter([1.0, 1.0, 2.0, 3.0, 4.0, 5.0])

    def kernel_call():
        device.clock["now"] += next(costs)

    bench = nv.do_bench(warmup=1, reps=5, team="T")
    assert bench(kernel_call, quantiles=(0.5, 0.2, 0.8)) == pytest.approx([103.0, 101.8, 104.2])
    assert seen == [(pytest.approx([3.0, 1.8, 4.2]), "T")]

    costs = iter([1.0] * 6)
    assert bench(kernel_call) == pytest.approx(101.0)   # no quantiles: one float (the mean)


def test_two_pes_that_disagree_keep_the_same_config(device, monkeypatch):
    """Two PEs' timings of two configs, each PE faster with a different one: with the team's
    figures both keep the same (Triton keeps the first of the smallest)."""
    local = {0: {"A": 1.0, "B": 2.0}, 1: {"A": 3.0, "B": 2.5}}
    for pe in (0, 1):
        chosen = {}
        for cfg in ("A", "B"):
            monkeypatch.setattr(_autotune, "_time_launches", lambda *a, c=cfg, p=pe: [local[p][c]])
            monkeypatch.setattr(_autotune, "_max_over_team",
                                lambda v, team, c=cfg: [max(local[q][c] for q in local)])
            chosen[cfg] = nv.do_bench(reps=1)(lambda: None, quantiles=(0.5,))
        assert min(chosen, key=chosen.get) == "B"


def test_summaries_are_tritons():
    """Quantiles interpolate linearly (torch.quantile's default, which triton.testing uses)."""
    t = [4.0, 1.0, 3.0, 2.0]
    assert _autotune.summarize(t, (0.5, 0.2, 0.8), "mean") == pytest.approx([2.5, 1.6, 3.4])
    assert _autotune.summarize(t, None, "mean") == pytest.approx(2.5)
    assert _autotune.summarize(t, None, "median") == pytest.approx(2.5)
    assert _autotune.summarize(t, None, "min") == 1.0
    assert _autotune.summarize(t, None, "max") == 4.0
    assert _autotune.summarize([7.0], (0.0, 1.0), "mean") == [7.0, 7.0]


@pytest.mark.parametrize("kwargs, needle", [
    (dict(reps=0), "argument 'reps' must be >= 1, got 0"),
    (dict(warmup=-1), "argument 'warmup' must be >= 0, got -1"),
    (dict(reps=2.5), "argument 'reps' must be an int, not float"),
    (dict(return_mode="all"), "argument 'return_mode' must be one of"),
])
def test_bad_arguments_name_the_argument(kwargs, needle):
    with pytest.raises(NvshmemArgumentError, match="do_bench\\(\\)") as e:
        nv.do_bench(**kwargs)
    assert needle in str(e.value)


def test_a_quantile_outside_0_1_is_refused(device, monkeypatch):
    monkeypatch.setattr(_autotune, "_max_over_team", lambda v, team: v)
    with pytest.raises(NvshmemArgumentError, match="quantile 1.5"):
        nv.do_bench(reps=1)(lambda: None, quantiles=(1.5,))


def test_triton_autotune_takes_it():
    """triton.autotune accepts it and hands it to the autotuner as its benchmark."""
    bench = nv.do_bench(reps=3)

    @triton.autotune(configs=[triton.Config({"B": 1}), triton.Config({"B": 2})], key=["n"], do_bench=bench)
    @triton.jit
    def k(x, n, B: triton.language.constexpr):
        pass

    assert k.do_bench is bench
