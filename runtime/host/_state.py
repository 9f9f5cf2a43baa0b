"""The runtime's process-wide state: initialised or not, this PE's place, its device; and the two
queries answered from it alone, :func:`my_pe` and :func:`n_pes`."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..errors import NvshmemStateError

__all__ = ["STATE", "require", "lock", "fake", "my_pe", "n_pes"]

lock = threading.RLock()


@dataclass
class State:
    initialized: bool = False
    finalizing: bool = False
    fake: bool = False  #: set by tests: no C library behind the state
    failed_init: str | None = None  #: why the last hostlib init failed (it cannot be undone)
    mode: str = ""
    my_pe: int = -1  #: -1 and 0 exactly when not initialised (the queries test these alone)
    n_pes: int = 0
    local_rank: int = 0
    device_id: int = -1
    device: Any = None  #: the cuda.core Device
    bootstrap: Any = None
    attr_version: int = 0
    pes_per_gpu: int = 1  #: PEs of the job on this PE's GPU (NVSHMEM's TEAM_SAME_GPU)
    mps: bool = False  #: this PE's CUDA context runs under MPS
    limited_mpg: bool = False  #: several PEs per GPU without MPS: NVSHMEM rejects collectives
    generation: int = 0  #: bumped at every init, so stale objects can tell
    extra: dict = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _MIRRORED:  # what my_pe() / n_pes() read: a module global, kept with the field
            globals()[_MIRRORED[name]] = value


#: State fields mirrored as module globals for :func:`my_pe` / :func:`n_pes` (a call reads one global)
_MIRRORED = {"my_pe": "_MY_PE", "n_pes": "_N_PES"}
_MY_PE = -1
_N_PES = 0


STATE = State()


def require(what: str) -> State:
    """The state, or NvshmemStateError when the runtime is not initialised."""
    s = STATE
    if not s.initialized:
        raise NvshmemStateError(
            f"{what}: nvshmem_dsl is not initialised; call nvshmem_dsl.init() first "
            "(or use `with nvshmem_dsl.init(): ...`)"
        )
    return s


@contextlib.contextmanager
def fake(*, n_pes: int = 4, my_pe: int = 0) -> Iterator[State]:
    """Test hook: pretend the runtime is initialised with ``n_pes`` PEs (no C library).

    Combine with :func:`nvshmem_dsl.host._lib` interception so that no C call is made.
    """
    with lock:
        if STATE.initialized:
            raise NvshmemStateError("fake(): the runtime is really initialised")
        STATE.initialized, STATE.fake = True, True
        STATE.my_pe, STATE.n_pes, STATE.mode = my_pe, n_pes, "fake"
        STATE.generation += 1
    try:
        yield STATE
    finally:
        with lock:
            STATE.initialized, STATE.fake = False, False
            STATE.my_pe, STATE.n_pes, STATE.mode = -1, 0, ""
            STATE.generation += 1


def my_pe() -> int:
    """This PE's number in TEAM_WORLD (known since init: no C call; NvshmemStateError outside init)."""
    pe = _MY_PE  # -1 exactly when not initialised
    if pe < 0:
        require("my_pe()")
    return pe


def n_pes() -> int:
    """Number of PEs in TEAM_WORLD (known since init; NvshmemStateError outside init)."""
    n = _N_PES  # 0 exactly when not initialised
    if n <= 0:
        require("n_pes()")
    return n
