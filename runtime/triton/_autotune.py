"""Autotuning NVSHMEM kernels on every PE alike: a ``do_bench`` for ``triton.autotune``.

Triton's autotuner times each config with :func:`triton.testing.do_bench`, which launches a
kernel as many times as fit in a time budget measured on the spot, and keeps the config that ran
fastest *on this PE*.  A kernel that only puts, gets or updates atomics at other PEs tunes fine
that way.  A kernel that synchronises with other PEs (barriers, collectives, waits on signals
another PE's launch sends) does not: each PE launches it a different number of times, so the PE
that launches more waits for partners that never come (a hang), and PEs may keep different
configs, so their launches no longer match.

:func:`do_bench` returns a benchmark function for ``triton.autotune(..., do_bench=...)`` that
launches every config the same number of times on every PE of a team (``warmup`` launches, then
``reps`` timed ones, after a barrier), and agrees on the figures: each quantile is the largest
any PE of the team measured (a host-side max-reduction), so every PE gets the same timings and
keeps the same config.  All PEs of the team must tune the same kernel with the same configs, as
they must launch the same collectives.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..errors import NvshmemArgumentError, int_argument

__all__ = ["do_bench"]

#: What ``return_mode`` may ask, as triton.testing.do_bench takes it.
RETURN_MODES = ("mean", "median", "min", "max")


def do_bench(*, warmup: int = 3, reps: int = 10, team: Any = None,
             return_mode: str = "mean") -> Callable[..., Any]:
    """A benchmark function for ``triton.autotune(configs, key, do_bench=nv.do_bench())``.

    ``warmup``, ``reps``: launches of each config before timing and timed (the same on every
    PE); ``team``: the PEs that tune together (default ``TEAM_WORLD``); ``return_mode``: the
    statistic returned when the autotuner asks for no quantiles (``"mean"``, ``"median"``,
    ``"min"``, ``"max"``).  Times are in milliseconds, as Triton's.  NVSHMEM must be initialised
    when the autotuner runs (the first launch of the tuned kernel).
    """
    warmup = int_argument(warmup, "do_bench", "warmup", least=0)
    reps = int_argument(reps, "do_bench", "reps", least=1)
    if return_mode not in RETURN_MODES:
        raise NvshmemArgumentError(f"do_bench(): argument 'return_mode' must be one of {RETURN_MODES}, "
                                   f"got {return_mode!r}")

    if team is None:
        from .._generated.constants import Team

        team = Team.TEAM_WORLD

    def bench(kernel_call: Callable[[], Any], quantiles: Sequence[float] | None = None) -> Any:
        times = _time_launches(kernel_call, warmup, reps, team)
        local = summarize(times, quantiles, return_mode)
        agreed = _max_over_team(local if isinstance(local, list) else [local], team)
        return agreed if isinstance(local, list) else agreed[0]

    bench.warmup, bench.reps, bench.team = warmup, reps, team
    return bench


def summarize(times: Sequence[float], quantiles: Sequence[float] | None, return_mode: str) -> Any:
    """``quantiles`` of ``times`` as a list (linear interpolation, as torch.quantile), or one
    statistic (``return_mode``) when no quantiles are asked."""
    if not times:
        raise ValueError("no times to summarize")
    ordered = sorted(times)
    if quantiles is not None:
        return [_quantile(ordered, float(q)) for q in quantiles]
    if return_mode == "mean":
        return sum(ordered) / len(ordered)
    if return_mode == "median":
        return _quantile(ordered, 0.5)
    return ordered[0] if return_mode == "min" else ordered[-1]


def _quantile(ordered: Sequence[float], q: float) -> float:
    if not 0.0 <= q <= 1.0:
        raise NvshmemArgumentError(f"do_bench(): quantile {q} is outside [0, 1]")
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _device():
    from triton import runtime
    return runtime.driver.active.get_device_interface()


def _team_barrier(team: Any, stream: Any) -> None:
    from ..host import operations
    operations.barrier(team, stream=stream)


def _time_launches(kernel_call: Callable[[], Any], warmup: int, reps: int, team: Any) -> list[float]:
    """Milliseconds of each of ``reps`` launches, after ``warmup`` untimed ones; every PE of the
    team starts together."""
    di = _device()
    stream = di.current_stream()
    di.synchronize()
    _team_barrier(team, stream)
    for _ in range(warmup):
        kernel_call()
    starts = [di.Event(enable_timing=True) for _ in range(reps)]
    ends = [di.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        start.record()
        kernel_call()
        end.record()
    di.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _max_over_team(values: list[float], team: Any) -> list[float]:
    """Each value's largest over the PEs of the team (all PEs get the same list)."""
    import numpy as np

    from ..host import memory, operations

    di = _device()
    stream = di.current_stream()
    src = memory.array((len(values),), np.float64, like="torch")
    dst = memory.array((len(values),), np.float64, like="torch")
    try:
        src.copy_(src.new_tensor(values))
        operations.reduce(team, dst, src, "max", stream=stream)
        di.synchronize()
        return [float(v) for v in dst.cpu().tolist()]
    finally:
        memory.free(src)
        memory.free(dst)
