"""The typed, DSL-agnostic model of the NVSHMEM API.

`Spec` holds the shared tables and the families as written; `Op` is one concrete C
function after axis expansion. Emitters read only these classes, never the YAML.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Dtype:
    """An element type: a NVSHMEM TYPENAME (float, int64, ...), an untyped size (32) or mem."""
    name: str
    ctype: str            # C spelling; 'void' for sized/mem forms
    llvm: str             # LLVM type of a by-value value ('' for sized/mem)
    bits: int             # element width; 0 for mem (byte counts)
    kind: str             # signed | unsigned | float | pair | sized | mem
    numpy: str = ""
    numba: str = ""
    cute: str = ""
    triton: str = ""
    abi: str = "scalar"   # struct: half/bfloat16 travel as byval pointers / aggregate returns

    @property
    def typed(self) -> bool:
        return self.kind not in ("sized", "mem")

    @property
    def symbol_T(self) -> str:
        """The {T_} part of a symbol: 'float_' for typed forms, '' otherwise."""
        return f"{self.name}_" if self.typed else ""

    @property
    def symbol_N(self) -> str:
        """The {N} part of a symbol: '32' for sized forms, 'mem' for mem, '' for typed."""
        return "" if self.typed else self.name


@dataclass(frozen=True)
class Scope:
    name: str
    prefix: str
    suffix: str
    doc: str
    side: str = "both"
    convergent: bool = False               # called by a group of threads together
    extra_params: tuple["ParamSpec", ...] = ()


@dataclass(frozen=True)
class ParamSpec:
    """A parameter as the spec writes it: the type may mention the placeholder T."""
    name: str
    role: str
    type: str
    required: bool = False   # a count that may not default to the smallest array size


@dataclass(frozen=True)
class AxisGroup:
    dtype_sets: tuple[str, ...]
    scopes: tuple[str, ...]
    nbi: tuple[bool, ...] = (False,)
    ops: tuple[str | None, ...] = (None,)
    prefix: str | None = None


@dataclass(frozen=True)
class Family:
    name: str
    group: str
    api: str
    symbol: str
    side: str
    axes: tuple[AxisGroup, ...]
    host_axes: tuple[AxisGroup, ...] | None
    params: tuple[ParamSpec, ...]
    returns: str
    summary: str
    semantics: str
    source: str           # spec file it came from
    limited_mpg: bool = True  # False: NVSHMEM rejects its host calls in limited-MPG runs


@dataclass(frozen=True)
class Param:
    """A concrete parameter of one C function."""
    name: str
    role: str
    ctype: str            # C spelling, e.g. 'const float *'
    llvm: str             # LLVM parameter type, e.g. 'ptr', 'i64'
    byval: str = ""       # '%struct.__half' when passed as `ptr byval(...)`
    pointer: bool = False
    elem: str = ""        # dtype name the pointer/value refers to ('' when none)
    required: bool = False  # a count the DSLs must not default


@dataclass(frozen=True)
class Op:
    """One concrete C function of the NVSHMEM API."""
    symbol: str
    api: str              # DSL-level name, e.g. put_nbi_block
    family: str
    group: str
    side: str             # device | host
    scope: str
    nbi: bool
    dtype: str | None
    op: str | None
    params: tuple[Param, ...]
    ret_ctype: str
    ret_llvm: str
    summary: str
    semantics: str
    limited_mpg: bool = True  # False: NVSHMEM rejects it (host side) in limited-MPG runs

    @property
    def llvm_type(self) -> str:
        """The LLVM function type as llvmlite prints it: 'void (ptr, ptr, i64, i32)'."""
        return f"{self.ret_llvm} ({', '.join(p.llvm for p in self.params)})"

    @property
    def c_declaration(self) -> str:
        args = ", ".join(f"{p.ctype}{'' if p.ctype.endswith('*') else ' '}{p.name}" for p in self.params)
        ret = self.ret_ctype
        return f"{ret}{'' if ret.endswith('*') else ' '}{self.symbol}({args or 'void'});"


@dataclass(frozen=True)
class ConstantValue:
    name: str
    c: str
    value: int
    doc: str


@dataclass(frozen=True)
class ConstantGroup:
    name: str
    doc: str
    c_type: str
    values: tuple[ConstantValue, ...]


@dataclass(frozen=True)
class Struct:
    name: str
    size: int
    fields: tuple[str, ...]
    version_major: int | None = None

    @property
    def version(self) -> int | None:
        """The version word the C initializer writes: (major << 16) + sizeof."""
        return None if self.version_major is None else (self.version_major << 16) + self.size


@dataclass(frozen=True)
class Exclusion:
    symbol: str
    reason: str


@dataclass
class Spec:
    dtypes: dict[str, Dtype]
    dtype_sets: dict[str, tuple[str, ...]]
    scopes: dict[str, Scope]
    ctypes: dict[str, str]                 # C type -> LLVM type
    constants: dict[str, ConstantGroup]
    structs: tuple[Struct, ...]
    roles: dict[str, str]
    groups: dict[str, str]                 # group -> doc
    families: tuple[Family, ...]
    exclusions: dict[str, tuple[Exclusion, ...]]
    digest: str                            # sha256 of every spec file, for provenance
    ops: dict[str, tuple[Op, ...]] = field(default_factory=dict)  # side -> ops, filled by expand

    def ops_for(self, side: str) -> tuple[Op, ...]:
        return self.ops[side]
