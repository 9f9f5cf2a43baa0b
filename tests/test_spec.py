"""The expanded spec, checked against facts of the NVSHMEM API (no library needed)."""
import collections


def test_device_op_count_matches_nvshmem_3_8(spec):
    assert len(spec.ops["device"]) == 2731


def test_group_totals_match_the_reference(spec):
    # From shared/reference/nvshmem-c-api.md, "Group totals".
    by_group = collections.Counter(op.group for op in spec.ops["device"])
    signal_family = sum(1 for op in spec.ops["device"] if op.group == "signal")
    assert by_group["collectives"] == 1063
    assert by_group["qp"] == 507
    assert by_group["wait"] == 196
    assert signal_family == 190
    assert by_group["amo"] == 138
    assert by_group["rma"] == 602


def test_symbol_spelling_of_each_axis(spec):
    dev = {op.symbol: op for op in spec.ops["device"]}
    assert dev["nvshmemx_int32_put_nbi_block"].api == "put_nbi_block"
    assert dev["nvshmem_put64_nbi"].dtype == "64"
    assert dev["nvshmemx_getmem_warp"].scope == "warp"
    assert dev["nvshmemx_uint64_xor_reducescatter_warp"].op == "xor"
    assert dev["nvshmemx_barrier_warpgroup"].scope == "warpgroup"
    assert dev["nvshmemx_qp_float_put_nbi_warp"].params[-1].role == "qp"
    assert dev["nvshmemx_half_atomic_fetch_add"].api == "atomic_fetch_add"


def test_half_and_bfloat16_abi_quirks(spec):
    dev = {op.symbol: op for op in spec.ops["device"]}
    byval = sorted(op.symbol for op in spec.ops["device"] if any(p.byval for p in op.params))
    assert byval == sorted(["nvshmem_half_p", "nvshmem_bfloat16_p", "nvshmemx_qp_half_p",
                            "nvshmemx_qp_bfloat16_p", "nvshmemx_half_atomic_add",
                            "nvshmemx_half_atomic_fetch_add"])
    aggregate = sorted(op.symbol for op in spec.ops["device"] if op.ret_llvm.startswith("%struct"))
    assert aggregate == sorted(["nvshmem_half_g", "nvshmem_bfloat16_g", "nvshmemx_qp_half_g",
                                "nvshmemx_qp_bfloat16_g", "nvshmemx_half_atomic_fetch_add"])
    assert dev["nvshmem_half_p"].llvm_type == "void (ptr, ptr, i32)"
    assert dev["nvshmem_bfloat16_g"].llvm_type == "%struct.__nv_bfloat16 (ptr, i32)"


def test_canonical_argument_order_destination_source_count_pe(spec):
    order = {"sym_dest": 0, "local_dest": 0, "local_src": 1, "sym_src": 1, "count": 2, "pe": 3}
    for op in spec.ops["device"]:
        if op.family in ("put", "get", "put_signal", "qp_put", "qp_get"):
            roles = [p.role for p in op.params if p.role in order]
            assert [order[r] for r in roles] == sorted(order[r] for r in roles), op.symbol


def test_every_param_role_is_documented(spec):
    for side in ("device", "host"):
        for op in spec.ops[side]:
            for p in op.params:
                assert p.role in spec.roles, (op.symbol, p.name)


def test_stream_scope_appends_a_stream_parameter(spec):
    host = {op.symbol: op for op in spec.ops["host"]}
    op = host["nvshmemx_float_put_signal_nbi_on_stream"]
    assert [p.name for p in op.params][-2:] == ["pe", "stream"]
    assert op.api == "put_signal_nbi_on_stream"
    assert host["nvshmemx_putmem_on_stream"].dtype == "mem"
