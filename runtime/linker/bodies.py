"""Which function bodies of an LLVM bitcode file LLVM reads: all but the ones you keep can be
turned into declarations in the file's bytes, before LLVM parses it.

LLVM's bitcode reader finds each function body through the offsets in the module's symbol
table; a function whose ``MODULE_CODE_FUNCTION`` record says *prototype* gets none, and its body
block is skipped unread.  That flag (``isproto``) is a field of the record that is 0 or 1 in the
same number of bits, so it can be set in place: no offset in the file changes.  NVSHMEM's
device bitcode is almost all bodies of its ~2200 API functions (each carries its whole
implementation inlined; all other functions together are 0.2% of it in 3.4.5, 4% in 3.8:
tests/gpu/records/2026-11-22/closure-parse.txt), so a first kernel that
keeps just the API functions it calls lets LLVM parse a small part of the file.

One exception: the reader ties the first function block it meets to the first function record
with a body, by position; that function keeps its body whatever it is.

:func:`functions` lists the file's functions; :func:`keep_bodies` returns a copy of the file in
which only the named functions (and that first one) keep their bodies; :func:`defined_globals`
names the global variables it defines.  Both raise
:class:`BitcodeLayoutError` for a file they do not understand (an old layout without a string
table, an abbreviation that makes ``isproto`` a literal); the caller then parses the whole file.
Format: https://llvm.org/docs/BitCodeFormat.html (the module block's records, read here without
descending into any other block).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["BitcodeLayoutError", "Function", "defined_globals", "functions", "keep_bodies"]

_MAGIC = b"BC\xc0\xde"
_WRAPPER = b"\xde\xc0\x17\x0b"
_END_BLOCK, _ENTER_SUBBLOCK, _DEFINE_ABBREV, _UNABBREV_RECORD = 0, 1, 2, 3
_BLOCKINFO, _MODULE, _STRTAB = 0, 8, 23
_MODULE_CODE_VERSION, _MODULE_CODE_GLOBALVAR, _MODULE_CODE_FUNCTION = 1, 7, 8
_CODES = (_MODULE_CODE_GLOBALVAR, _MODULE_CODE_FUNCTION)
_SETBID = 1
_ISPROTO = 4  # [strtab offset, strtab size, type, callingconv, isproto, linkage, ...]
_INITID = 4  # a global variable's [strtab offset, strtab size, type, isconst, initid (0: none), linkage, ...]
_LITERAL, _FIXED, _VBR, _ARRAY, _CHAR6, _BLOB = "literal", 1, 2, 3, 4, 5


class BitcodeLayoutError(ValueError):
    """The bitcode is laid out in a way this module does not handle."""


# Codes of the linkage field (LLVM's getDecodedLinkage; the old codes included)
_EXTERNAL = frozenset({0, 5, 6, 15})
_LOCAL = frozenset({3, 9, 13, 14})  # internal, private


@dataclass(frozen=True)
class Function:
    name: str
    has_body: bool
    linkage: int  # the record's linkage code
    isproto_bit: int | None  # the bit of the file that holds isproto, where it can be set

    @property
    def external(self) -> bool:
        """External linkage (of any visibility)."""
        return self.linkage in _EXTERNAL

    @property
    def local(self) -> bool:
        """Internal or private linkage."""
        return self.linkage in _LOCAL


class _Bits:
    """A little-endian bit cursor over ``data`` (LLVM's bitstream order)."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data, pos: int, end: int):
        self.data, self.pos, self.end = data, pos, end

    def read(self, width: int) -> int:
        if width == 0:
            return 0
        pos = self.pos
        if pos + width > self.end:
            raise BitcodeLayoutError("read past the end of the bitcode")
        chunk = int.from_bytes(self.data[pos >> 3:(pos >> 3) + 9], "little")
        self.pos = pos + width
        return (chunk >> (pos & 7)) & ((1 << width) - 1)

    def vbr(self, width: int) -> int:
        hi, value, shift = 1 << (width - 1), 0, 0
        while True:
            piece = self.read(width)
            value |= (piece & (hi - 1)) << shift
            if not piece & hi:
                return value
            shift += width - 1

    def align32(self) -> None:
        self.pos = (self.pos + 31) & ~31


def _define_abbrev(bits: _Bits) -> list:
    ops = []
    for _ in range(bits.vbr(5)):
        if bits.read(1):
            ops.append((_LITERAL, bits.vbr(8)))
            continue
        enc = bits.read(3)
        if enc in (_FIXED, _VBR):
            ops.append((enc, bits.vbr(5)))
        elif enc in (_ARRAY, _CHAR6, _BLOB):
            ops.append((enc, 0))
        else:
            raise BitcodeLayoutError(f"unknown abbreviation encoding {enc}")
    return ops


def _scalar(bits: _Bits, op) -> tuple[int, int | None]:
    """(value, bit position where it can be set from 0 to 1, or None) of one scalar field."""
    enc, width = op
    if enc == _LITERAL:
        return width, None
    pos = bits.pos
    if enc == _FIXED:
        return bits.read(width), (pos if width >= 1 else None)
    if enc == _VBR:
        return bits.vbr(width), (pos if width >= 2 else None)
    if enc == _CHAR6:
        return bits.read(6), None
    raise BitcodeLayoutError(f"encoding {enc} is not a scalar")


def _record(bits: _Bits, abbrev_id: int, abbrevs: list):
    """(code, [(value, settable bit position or None)], blob or None) of the record next."""
    if abbrev_id == _UNABBREV_RECORD:
        code = bits.vbr(6)
        fields = []
        for _ in range(bits.vbr(6)):
            pos = bits.pos
            fields.append((bits.vbr(6), pos))
        return code, fields, None
    try:
        ops = abbrevs[abbrev_id - 4]
    except IndexError:
        raise BitcodeLayoutError(f"undefined abbreviation {abbrev_id}") from None
    values, blob, i = [], None, 0
    while i < len(ops):
        enc = ops[i][0]
        if enc == _ARRAY:
            element = ops[i + 1]
            values += [(_scalar(bits, element)[0], None) for _ in range(bits.vbr(6))]
            i += 2
            continue
        if enc == _BLOB:
            n = bits.vbr(6)
            bits.align32()
            start = bits.pos >> 3
            blob = bytes(bits.data[start:start + n])
            bits.pos += 8 * n
            bits.align32()
        else:
            values.append(_scalar(bits, ops[i]))
        i += 1
    if not values:
        raise BitcodeLayoutError("a record without a code")
    return values[0][0], values[1:], blob


def _enter(bits: _Bits) -> tuple[int, int, int]:
    """(block id, abbreviation width, end bit) of the block whose ENTER_SUBBLOCK was just read."""
    block_id, width = bits.vbr(8), bits.vbr(4)
    bits.align32()
    words = bits.read(32)
    return block_id, width, bits.pos + 32 * words


def _block(bits: _Bits, width: int, end: int, abbrevs: list, blockinfo: dict, on_record, block_id: int,
           on_abbrev=None):
    """Read one block's records (``on_record(code, fields, blob)``), skipping its sub-blocks except
    BLOCKINFO, which is read into ``blockinfo`` (block id -> abbreviations).  The block's own
    abbreviations go to ``abbrevs``, or to ``on_abbrev(ops)`` when given."""
    while True:
        aid = bits.read(width)
        if aid == _END_BLOCK:
            bits.align32()
            return
        if aid == _ENTER_SUBBLOCK:
            sub, sub_width, sub_end = _enter(bits)
            if sub == _BLOCKINFO:
                _blockinfo(bits, sub_width, sub_end, blockinfo)
            else:
                bits.pos = sub_end
            continue
        if aid == _DEFINE_ABBREV:
            (on_abbrev or abbrevs.append)(_define_abbrev(bits))
            continue
        code, fields, blob = _record(bits, aid, abbrevs)
        on_record(code, fields, blob)
        if bits.pos > end:
            raise BitcodeLayoutError(f"block {block_id} overruns its length")


def _blockinfo(bits: _Bits, width: int, end: int, blockinfo: dict) -> None:
    """A BLOCKINFO block: its abbreviations, by the block id its SETBID records name."""
    current: list = []

    def on_record(code, fields, blob):
        if code == _SETBID:
            current[:] = [fields[0][0]]

    def on_abbrev(ops):
        if not current:
            raise BitcodeLayoutError("an abbreviation in BLOCKINFO before SETBID")
        blockinfo.setdefault(current[0], []).append(ops)

    _block(bits, width, end, [], blockinfo, on_record, _BLOCKINFO, on_abbrev)


def _start(data) -> tuple[int, int]:
    """(first bit after the magic, end bit) of the bitstream in ``data``."""
    offset, size = 0, len(data)
    if bytes(data[:4]) == _WRAPPER:
        offset, size = struct.unpack_from("<II", data, 8)
    if bytes(data[offset:offset + 4]) != _MAGIC:
        raise BitcodeLayoutError("not LLVM bitcode")
    return 8 * (offset + 4), 8 * (offset + size)


def _module_records(data) -> tuple[dict, bytes]:
    """The records of the (single-module) bitcode ``data``'s module block, by code (of
    :data:`_CODES`), in order, and its string table."""
    pos, end = _start(data)
    bits = _Bits(data, pos, end)
    blockinfo: dict = {}
    records: dict = {code: [] for code in _CODES}
    strtab, version = None, []

    def on_module(code, fields, blob):
        if code == _MODULE_CODE_VERSION:
            version.append(fields[0][0])
        elif code in records:
            records[code].append(fields)

    def on_strtab(code, fields, blob):
        nonlocal strtab
        if blob is not None:
            strtab = blob

    modules = 0
    while bits.pos + 32 <= end:
        if bits.read(2) != _ENTER_SUBBLOCK:
            raise BitcodeLayoutError("expected a block at the top level")
        block_id, width, block_end = _enter(bits)
        if block_id == _MODULE:
            modules += 1
            _block(bits, width, block_end, list(blockinfo.get(_MODULE, [])), blockinfo, on_module, block_id)
        elif block_id == _STRTAB:
            _block(bits, width, block_end, list(blockinfo.get(_STRTAB, [])), blockinfo, on_strtab, block_id)
        else:
            bits.pos = block_end
    if modules != 1 or version[:1] != [2] or strtab is None:
        raise BitcodeLayoutError("not one module of bitcode version 2 with a string table")
    return records, strtab


def _name(strtab: bytes, fields) -> str:
    (off, _), (size, _) = fields[0], fields[1]
    return strtab[off:off + size].decode("utf-8", errors="surrogateescape")


def functions(data) -> list[Function]:
    """The functions of the (single-module) bitcode ``data``, in record order."""
    records, strtab = _module_records(data)
    out = []
    for fields in records[_MODULE_CODE_FUNCTION]:
        if len(fields) <= _ISPROTO:
            raise BitcodeLayoutError("a function record without isproto")
        isproto, bit = fields[_ISPROTO]
        linkage = fields[_ISPROTO + 1][0] if len(fields) > _ISPROTO + 1 else 0
        out.append(Function(_name(strtab, fields), not isproto, linkage, bit if not isproto else None))
    return out


def defined_globals(data) -> frozenset:
    """The names of the global variables the (single-module) bitcode ``data`` defines (gives an
    initializer: not those it only declares)."""
    records, strtab = _module_records(data)
    bad = [f for f in records[_MODULE_CODE_GLOBALVAR] if len(f) <= _INITID]
    if bad:
        raise BitcodeLayoutError("a global variable record without initid")
    return frozenset(_name(strtab, f) for f in records[_MODULE_CODE_GLOBALVAR] if f[_INITID][0])


def keep_bodies(data, keep, listed: list[Function] | None = None) -> bytes:
    """A copy of bitcode ``data`` in which only the functions named in ``keep`` (and the first
    function with a body, see the module docstring) have bodies; the others are declarations.
    ``listed``: what :func:`functions` gives for ``data``, if already known."""
    keep = set(keep)
    out = bytearray(data)
    first = True
    for fn in functions(data) if listed is None else listed:
        if not fn.has_body:
            continue
        if first:
            first = False
            continue
        if fn.name in keep:
            continue
        if fn.isproto_bit is None:
            raise BitcodeLayoutError(f"cannot make {fn.name} a declaration in place")
        out[fn.isproto_bit >> 3] |= 1 << (fn.isproto_bit & 7)
    return bytes(out)
