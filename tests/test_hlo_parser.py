"""Unit tests of xlalab.hlo's parser and summary on hand-written HLO covering the awkward cases."""

from xlalab import hlo

NESTED = """\
HloModule m, entry_computation_layout={(f32[2,3]{1,0}, bf16[4]{0})->(f32[2,3]{1,0}, pred[], s32[])}

%inner (p0: f32[2,3]) -> f32[2,3] {
  %p0 = f32[2,3]{1,0} parameter(0)
  ROOT %neg = f32[2,3]{1,0} negate(%p0)
}

%outer (q0: f32[2,3], q1: f32[]) -> f32[2,3] {
  %q0 = f32[2,3]{1,0} parameter(0)
  %q1 = f32[] parameter(1)
  %b = f32[2,3]{1,0} broadcast(%q1), dimensions={}
  %nested = f32[2,3]{1,0} fusion(%q0), kind=kLoop, calls=%inner
  ROOT %m = f32[2,3]{1,0} multiply(%nested, %b), metadata={op_type="Mul" op_name="model/mul, \\"quoted\\" (x)" source_file="a.py" source_line=3}
}

%cond (c: (s32[], f32[2,3])) -> pred[] {
  %c = (s32[], f32[2,3]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %lim = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %lim), direction=LT
}

%body (b0: (s32[], f32[2,3])) -> (s32[], f32[2,3]) {
  %b0 = (s32[], f32[2,3]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%b0), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %x = f32[2,3]{1,0} get-tuple-element(%b0), index=1
  %two = f32[] constant(2)
  %y = f32[2,3]{1,0} fusion(%x, %two), kind=kLoop, calls=%outer
  ROOT %t = (s32[], f32[2,3]{1,0}) tuple(%i2, %y)
}

%br_true (a: f16[4]) -> f16[4] {
  %a = f16[4]{0} parameter(0)
  ROOT %e = f16[4]{0} exponential(%a)
}

%br_false (a.1: f16[4]) -> f16[4] {
  %a.1 = f16[4]{0} parameter(0)
  ROOT %n = f16[4]{0} negate(%a.1)
}

ENTRY %main (x0: f32[2,3], h: bf16[4]) -> (f32[2,3], pred[], s32[]) {
  %x0 = f32[2,3]{1,0} parameter(0)
  %h = bf16[4]{0} parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[2,3]{1,0}) tuple(%zero, %x0)
  %loop = (s32[], f32[2,3]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"10"}}
  %res = f32[2,3]{1,0} get-tuple-element(%loop), index=1
  %p = pred[] constant(true)
  %hf = f16[4]{0} convert(%h)
  %cnd = f16[4]{0} conditional(%p, %hf, %hf), true_computation=%br_true, false_computation=%br_false
  %cnt = s32[] get-tuple-element(%loop), index=0
  ROOT %out = (f32[2,3]{1,0}, pred[], s32[]) tuple(%res, %p, %cnt)
}
"""


def test_parses_every_instruction_line():
    module = hlo.parse(NESTED)
    assert module.name == "m"
    assert module.entry_name == "main"
    assert sum(len(c.instructions) for c in module.computations.values()) == hlo.instruction_lines(NESTED)


def test_shapes_tuples_layouts_scalars_dtypes():
    assert hlo.parse_shape("f32[2,3]{1,0}").dims == (2, 3)
    assert hlo.parse_shape("f32[2,3]{1,0}").bytes == 24
    assert hlo.parse_shape("bf16[4]{0}").bytes == 8
    assert hlo.parse_shape("pred[]").bytes == 1 and hlo.parse_shape("pred[]").dims == ()
    tup = hlo.parse_shape("(s32[], (f16[8]{0}, f32[2]{0}))")
    assert tup.is_tuple and tup.bytes == 4 + 16 + 8
    assert hlo.parse_shape("f32[8,128]{1,0:T(8,128)}").dims == (8, 128)
    assert hlo.parse_shape("token[]").bytes == 0


def test_operands_attributes_and_metadata():
    module = hlo.parse(NESTED)
    m = module.find("m")
    assert m.operands == ["nested", "b"]
    assert m.op_type == "Mul"
    assert "quoted" in m.op_name
    loop = module.find("loop")
    assert loop.opcode == "while" and set(loop.called) == {"cond", "body"}
    c = module.find("cnd")
    assert c.opcode == "conditional" and c.called == ["br_true", "br_false"] and c.dtype == "f16"
    assert module.find("lt").attrs["direction"] == "LT"


def test_summary_descends_into_loops_and_nested_fusions():
    s = hlo.summary(NESTED)
    # The while body runs a fusion; the nested fusion's negate is counted as fused.
    assert s["fusions"] == 1
    assert s["fusions_by_kind"] == {"kLoop": 1}
    assert s["fused_ops_by_opcode"]["negate"] == 1
    assert s["fused_ops_by_opcode"]["multiply"] == 1
    # Branch computations run too: exponential and negate launch from the conditional's branches.
    assert s["ops_by_opcode"]["exponential"] == 1
    kernels = {k["name"] for k in s["kernel_list"]}
    assert {"y", "i2", "lt", "hf", "e", "n"} <= kernels
    assert "loop" not in kernels and "init" not in kernels  # control flow and tuples launch nothing
    assert s["kernels"] == len(s["kernel_list"])


def test_bytes_moved_counts_reads_and_writes():
    text = """HloModule k
ENTRY %e (a: f32[1024], b: f32[1024]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  %b = f32[1024]{0} parameter(1)
  %s = f32[1024]{0} add(%a, %b)
  ROOT %t = f32[1024]{0} multiply(%s, %s)
}
"""
    s = hlo.summary(text)
    # add reads 2 x 4 KiB and writes 4 KiB; multiply reads its one distinct operand and writes.
    assert s["bytes_moved"] == 3 * 4096 + 2 * 4096
    assert s["kernels"] == 2


def test_names_without_percent_and_old_operand_style():
    text = """HloModule new_style
ENTRY main {
  a = f32[4]{0} parameter(0)
  ROOT r = f32[4]{0} add(f32[4]{0} a, f32[4]{0} a)
}
"""
    module = hlo.parse(text)
    assert module.find("r").operands == ["a", "a"]
    root = module.entry.root
    assert root is not None and root.name == "r"


# ---------------------------------------------------------------------------------------------
# Every form named in issue 10, one unit test each.

import pytest  # noqa: E402


def _count(module):
    return sum(len(c.instructions) for c in module.computations.values())


def test_closing_comment_and_execution_thread():
    text = """HloModule m
%fused (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %a = f32[4]{0} negate(%p)
  %b = f32[4]{0} exponential(%a)
  ROOT %c = f32[4]{0} add(%a, %b)
} // fused

%wrapped (q: f32[4]) -> f32[4] {
  %q = f32[4]{0} parameter(0)
  ROOT %r = f32[4]{0} sqrt(%q)
}, execution_thread="thread"

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused
  %s = ((f32[4]{0}), f32[4]{0}, s32[]) async-start(%f), async_execution_thread="thread", calls=%wrapped
  ROOT %d = f32[4]{0} async-done(%s), async_execution_thread="thread", calls=%wrapped
} // main
"""
    m = hlo.parse(text)
    assert sorted(m.computations) == ["fused", "main", "wrapped"]
    assert [len(m.computations[c].instructions) for c in ("fused", "wrapped", "main")] == [4, 2, 4]
    assert m.computations["wrapped"].execution_thread == "thread" and m.entry_name == "main"
    s = hlo.summary(m)
    assert [k["opcode"] for k in s["kernel_list"]] == ["fusion", "sqrt"]


def test_unclosed_computation_raises_instead_of_merging():
    text = "HloModule m\n%a (p: f32[]) -> f32[] {\n  ROOT %p = f32[] parameter(0)\n%b (q: f32[]) -> f32[] {\n" \
           "  ROOT %q = f32[] parameter(0)\n}\n"
    with pytest.raises(ValueError, match="not closed"):
        hlo.parse(text)


def test_fusion_cycle_is_guarded():
    text = """HloModule cyc
%loop_a (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  ROOT %f = f32[2]{0} fusion(%p), kind=kLoop, calls=%loop_b
}
%loop_b (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  ROOT %g = f32[2]{0} fusion(%p), kind=kLoop, calls=%loop_a
}
ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  ROOT %y = f32[2]{0} fusion(%x), kind=kLoop, calls=%loop_a
}
"""
    s = hlo.summary(text)  # must terminate
    assert s["kernels"] == 1 and s["fusions"] == 1
    assert hlo.matrix_ops(text) == []


def test_continuation_lines_that_start_with_an_attribute():
    text = """HloModule m
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%f (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%p)
}
ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %fusion = f32[8]{0} fusion(%x),
    kind=kLoop, calls=f
  %cc = f32[8]{0} custom-call(%fusion), custom_call_target="foo",
    custom_call_has_side_effect=true,
    api_version=API_VERSION_STATUS_RETURNING
  %ar = f32[8]{0} all-reduce(%cc),
    replica_groups={{0,1}}, to_apply=%add,
    channel_id=1
  ROOT %t = f32[8]{0} copy(%ar)
}
"""
    m = hlo.parse(text)
    assert _count(m) == 10 == hlo.instruction_lines(text)  # 3 + 2 + 5
    f = m.find("fusion")
    assert f.fusion_kind == "kLoop" and f.called == ["f"]
    cc = m.find("cc")
    assert cc.attrs["custom_call_has_side_effect"] == "true" and cc.custom_call_target == "foo"
    ar = m.find("ar")
    assert ar.attrs["replica_groups"] == "{{0,1}}" and ar.called == ["add"] and ar.attrs["channel_id"] == "1"


@pytest.mark.parametrize("dtype,bits", [
    ("s1", 1), ("u1", 1), ("s2", 2), ("u2", 2), ("s4", 4), ("u4", 4), ("f8e5m2", 8), ("f8e4m3", 8),
    ("f8e4m3fn", 8), ("f8e4m3b11fnuz", 8), ("f8e5m2fnuz", 8), ("f8e4m3fnuz", 8), ("f8e3m4", 8),
    ("f8e8m0fnu", 8), ("f4e2m1fn", 4), ("f6e2m3fn", 6), ("f6e3m2fn", 6), ("c64", 64), ("c128", 128),
    ("bf16", 16), ("pred", 8)])
def test_every_primitive_type(dtype, bits):
    s = hlo.parse_shape(f"{dtype}[16]{{0}}")
    # In memory an element takes whole bytes (XLA's ByteWidth) unless the layout packs it with E(bits).
    assert s.bytes == 16 * max(1, bits // 8)
    packed = hlo.parse_shape(f"{dtype}[16]{{0:E({bits})}}")
    assert packed.bytes == (16 * bits + 7) // 8


def test_token_and_unknown_type():
    assert hlo.parse_shape("token[]").bytes == 0
    text = "HloModule m\nENTRY %e () -> token[] {\n  ROOT %t = token[] after-all()\n}\n"
    root = hlo.parse(text).entry.root
    assert root is not None and root.dtype == "token"
    with pytest.raises(ValueError, match="f9e9"):
        hlo.parse_shape("f9e9[4]{0}")
    with pytest.raises(ValueError, match="f9e9"):
        hlo.parse("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f9e9[] constant(0)\n}\n")


def test_dynamic_dimensions():
    bounded = hlo.parse_shape("f32[<=8,784]{1,0}")
    assert bounded.dims == (8, 784) and bounded.dynamic == (True, False) and bounded.bytes == 8 * 784 * 4
    unbounded = hlo.parse_shape("f32[?,784]")
    assert unbounded.bytes is None and unbounded.elements is None and unbounded.is_dynamic
    assert str(unbounded) == "f32[?,784]" and str(bounded) == "f32[<=8,784]"
    text = """HloModule d
ENTRY %e (p: f32[?,784], q: f32[<=8,784]) -> f32[<=8,784] {
  %p = f32[?,784]{1,0} parameter(0)
  %q = f32[<=8,784]{1,0} parameter(1)
  %n = f32[?,784]{1,0} negate(%p)
  ROOT %m = f32[<=8,784]{1,0} negate(%q)
}
"""
    s = hlo.summary(text)
    assert s["bytes_unknown"] == 1 and s["bytes_moved"] == 2 * 8 * 784 * 4
    assert [k["bytes"] for k in s["kernel_list"]] == [None, 2 * 8 * 784 * 4]


def test_layouts_tiles_memory_spaces_and_no_layout():
    s = hlo.parse_shape("f32[8,128]{1,0:T(8,128)(2,1)S(1)}")
    assert s.dims == (8, 128) and s.layout == "1,0:T(8,128)(2,1)S(1)" and s.memory_space == 1
    assert s.bytes == 8 * 128 * 4
    assert hlo.parse_shape("bf16[4,4]").layout == "" and hlo.parse_shape("bf16[4,4]").bytes == 32
    assert hlo.parse_shape("s32[]{:T(128)}").bytes == 4
    text = """HloModule tpu
ENTRY %main (p: bf16[512,1024]) -> bf16[512,1024] {
  %p = bf16[512,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %c = bf16[512,1024]{1,0:T(8,128)(2,1)S(1)} copy(%p)
  ROOT %n = bf16[512,1024]{1,0:T(8,128)(2,1)} negate(%c)
}
"""
    m = hlo.parse(text)
    assert m.find("c").shape.memory_space == 1
    assert hlo.summary(m)["bytes_moved"] == 4 * 512 * 1024 * 2


def test_shapeless_instructions():
    text = """HloModule m
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT add = add(a,b)
}
ENTRY main {
  x = s32[4] parameter(0)
  y = s32[4] parameter(1)
  s = s32[] reduce(x, y), dimensions={0}, to_apply=add
  d = s32[4] add(x, y)
  ROOT t = tuple(s, d)
}
"""
    m = hlo.parse(text)
    assert _count(m) == 8 == hlo.instruction_lines(text)
    assert m.find("add").shape == hlo.parse_shape("s32[]") and m.find("add").has_shape is False
    assert m.find("t").opcode == "tuple" and m.find("t").operands == ["s", "d"]


def test_index_markers_metadata_frontend_attributes_backend_config():
    text = """HloModule m
ENTRY %main (p: f32[2]) -> (f32[2], f32[2], f32[2], f32[2], f32[2], /*index=5*/f32[2]) {
  %p = f32[2]{0} parameter(0)
  %cc = (f32[2]{0}, s8[64]{0}) custom-call(%p), custom_call_target="__cublas$lt$matmul", metadata={op_type="MatMul" op_name="dense/MatMul {x}, \\"y\\"" source_file="a.py" source_line=3}, frontend_attributes={_xla_stream_annotation="1",compute_type="{a=b}"}, backend_config={"operation_queue_id":"0","note":"braces } and { and \\"quotes\\" inside","gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]}}}
  %g = f32[2]{0} get-tuple-element(%cc), index=0
  ROOT %t = (f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, /*index=5*/f32[2]{0}) tuple(%g, %g, %g, %g, %g, /*index=5*/%g)
}
"""
    m = hlo.parse(text)
    cc = m.find("cc")
    assert cc.op_type == "MatMul" and "dense/MatMul {x}" in cc.op_name
    assert cc.attrs["frontend_attributes"].startswith("{_xla_stream_annotation")
    assert cc.backend_config["note"] == 'braces } and { and "quotes" inside'
    assert len(m.find("t").operands) == 6 and len(m.find("t").shape.tuple_shapes or ()) == 6
    # The s8[64] workspace is not counted: reads 8 B, writes 8 B.
    assert hlo.summary(m)["bytes_moved"] == 16
    (op,) = hlo.matrix_ops(m)
    assert (op.impl, op.out.dims, op.flops) == ("cublaslt", (2,), 2 * 2 * 2)


def test_gather_charged_what_it_reads():
    # A 16-row gather from a 150000 x 512 f32 table (307 MB), bare and inside a fusion.
    text = """HloModule g
%fused (t: f32[150000,512], i: s32[16,1]) -> f32[16,512] {
  %t = f32[150000,512]{1,0} parameter(0)
  %i = s32[16,1]{1,0} parameter(1)
  %gather = f32[16,512]{1,0} gather(%t, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,512}
  ROOT %r = f32[16,512]{1,0} multiply(%gather, %gather)
}
ENTRY %main (table: f32[150000,512], idx: s32[16,1]) -> (f32[16,512], f32[16,512]) {
  %table = f32[150000,512]{1,0} parameter(0)
  %idx = s32[16,1]{1,0} parameter(1)
  %bare = f32[16,512]{1,0} gather(%table, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,512}
  %fusion = f32[16,512]{1,0} fusion(%table, %idx), kind=kInput, calls=%fused
  ROOT %t = (f32[16,512]{1,0}, f32[16,512]{1,0}) tuple(%bare, %fusion)
}
"""
    s = hlo.summary(text)
    rows = 16 * 512 * 4  # 32 KiB read through the gather, 32 KiB written
    assert [k["bytes"] for k in s["kernel_list"]] == [rows + 64 + rows, rows + 64 + rows]
    assert s["bytes_moved"] < 200_000


def test_while_known_trip_count_per_step():
    text = """HloModule w
%body (p: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %p = (s32[], f32[1024]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[1024]{0} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  %y = f32[1024]{0} exponential(%x)
  ROOT %t = (s32[], f32[1024]{0}) tuple(%j, %y)
}
%cond (p: (s32[], f32[1024])) -> pred[] {
  %p = (s32[], f32[1024]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
ENTRY %main (x: f32[1024]) -> (s32[], f32[1024]) {
  %x = f32[1024]{0} parameter(0)
  %z = s32[] constant(0)
  %init = (s32[], f32[1024]{0}) tuple(%z, %x)
  ROOT %w = (s32[], f32[1024]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"10"}}
}
"""
    s = hlo.summary(text)
    (loop,) = s["loops"]
    # Body: add (4 + 4 in, 4 out = 12 B) and exponential (4096 in, 4096 out); condition: compare (8 in, 1 out).
    assert loop == {"name": "w", "computation": "main", "trip_count": 10, "body_kernels": 2,
                    "body_bytes": 12 + 8192, "condition_kernels": 1}
    assert s["kernels"] == 3 and s["bytes_moved"] == 12 + 8192 + 9
    assert s["per_step"] == {"kernels": 10 * 2 + 11 * 1, "bytes": 10 * (12 + 8192) + 11 * 9, "exact": True}


def test_matrix_ops_forms():
    text = """HloModule mm
%fused_dot (a: bf16[64,32], b: bf16[32,16]) -> f32[64,16] {
  %a = bf16[64,32]{1,0} parameter(0)
  %b = bf16[32,16]{1,0} parameter(1)
  %d = f32[64,16]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %r = f32[64,16]{1,0} maximum(%d, %d)
}
ENTRY %main (a: bf16[64,32], b: bf16[32,16], x: f32[2,8,8,3], k: f32[3,3,3,4], g: f32[4,8,8,6], w: f32[3,3,3,6]) -> f32[64,16] {
  %a = bf16[64,32]{1,0} parameter(0)
  %b = bf16[32,16]{1,0} parameter(1)
  %x = f32[2,8,8,3]{3,2,1,0} parameter(2)
  %k = f32[3,3,3,4]{3,2,1,0} parameter(3)
  %g = f32[4,8,8,6]{3,2,1,0} parameter(4)
  %w = f32[3,3,3,6]{3,2,1,0} parameter(5)
  %conv = f32[2,8,8,4]{3,2,1,0} convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %grouped = f32[4,8,8,6]{3,2,1,0} convolution(%g, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=2
  %bd = f32[2,3,3]{2,1,0} dot(%x, %x), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={1,2}, rhs_contracting_dims={1,2}
  ROOT %f = f32[64,16]{1,0} fusion(%a, %b), kind=kOutput, calls=%fused_dot
}
"""
    ops = {op.name: op for op in hlo.matrix_ops(text)}
    assert set(ops) == {"conv", "grouped", "bd", "f"}
    assert ops["f"].impl == "fusion" and ops["f"].lhs.dtype == "bf16" and ops["f"].out.dtype == "f32"
    assert ops["f"].flops == 2 * 64 * 16 * 32 and ops["f"].computation == "main"
    assert ops["conv"].impl == "xla" and ops["conv"].flops == 2 * (2 * 8 * 8 * 4) * (3 * 3 * 3)
    # Two groups: each output feature sums over 3 of the 6 input features (the kernel's i dimension is 3).
    assert ops["grouped"].flops == 2 * (4 * 8 * 8 * 6) * (3 * 3 * 3)
    # Batch 2, contracting 8*8, result 3x3 per batch.
    assert ops["bd"].kind == "dot" and ops["bd"].flops == 2 * (2 * 3 * 3) * (8 * 8)
    assert hlo.summary(text)["matmuls_by_impl"] == {"xla": 3, "fusion": 1}


def test_bracket_helpers_skip_quoted_text():
    """Brackets and separators inside quoted strings (backend_config JSON, metadata) are text, not structure."""
    assert hlo._split_top('a, b{c,d}, "x,\\"y", f(1,2),') == ["a", "b{c,d}", '"x,\\"y"', "f(1,2)"]
    assert hlo._split_top("a;b(;);c", ";") == ["a", "b(;)", "c"]
    text = 'f(a, "(", {b})) tail'
    assert text[:hlo._match_brackets(text, 1, "(", ")")] == 'f(a, "(", {b})'
    assert hlo._depth_change('x = fusion(a, "{"') == 1 and hlo._depth_change('{ "}}}" (') == 2
    assert hlo._depth_change('backend_config="{\\"k\\": [1') == 0       # an unclosed quote runs to the end
    with pytest.raises(ValueError, match="unbalanced"):
        hlo._match_brackets('(a, ")"', 0, "(", ")")


DUS = """HloModule dus

%fused_dus (p0: f32[1024,1024], p1: f32[1,1024], p2: s32[]) -> f32[1024,1024] {
  %p0 = f32[1024,1024]{1,0} parameter(0)
  %p1 = f32[1,1024]{1,0} parameter(1)
  %n = f32[1,1024]{1,0} negate(%p1)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %d = f32[1024,1024]{1,0} dynamic-update-slice(%p0, %n, %p2, %z)
}

ENTRY %main (buf: f32[1024,1024], row: f32[1,1024], i: s32[]) -> (f32[1024,1024], f32[1024,1024]) {
  %buf = f32[1024,1024]{1,0} parameter(0)
  %row = f32[1,1024]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %zero = s32[] constant(0)
  %bare = f32[1024,1024]{1,0} dynamic-update-slice(%buf, %row, %i, %zero)
  %fused = f32[1024,1024]{1,0} fusion(%bare, %row, %i), kind=kLoop, calls=%fused_dus
  ROOT %t = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) tuple(%bare, %fused)
}
"""


def test_dynamic_update_slice_is_charged_its_update_not_its_operand():
    """An in-place update reads and writes the update (4 KiB here), not the 4 MiB buffer it updates (the old
    count charged 4 MiB read + 4 MiB written per kernel)."""
    s = hlo.summary(DUS)
    by_name = {k["name"]: k["bytes"] for k in s["kernel_list"]}
    row = 1024 * 4
    assert by_name["bare"] == row + 4 + 4 + row      # update read, two indices read, update written
    assert by_name["fused"] == row + 4 + row         # the fusion's parameter 0 is the buffer updated in place
    m = hlo.parse(DUS)
    reads, written = hlo.kernel_traffic(m, m.entry, m.find("bare"))
    assert dict(reads)["buf"] == 0 and written == row


SCATTER = """HloModule scatter

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_scatter (p0: f32[1000,64], p1: s32[8,1], p2: f32[8,64]) -> f32[1000,64] {
  %p0 = f32[1000,64]{1,0} parameter(0)
  %p1 = s32[8,1]{1,0} parameter(1)
  %p2 = f32[8,64]{1,0} parameter(2)
  %n = f32[8,64]{1,0} negate(%p2)
  ROOT %sc = f32[1000,64]{1,0} scatter(%p0, %p1, %n), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

ENTRY %main (table: f32[1000,64], ids: s32[8,1], g: f32[8,64]) -> (f32[1000,64], f32[1000,64]) {
  %table = f32[1000,64]{1,0} parameter(0)
  %ids = s32[8,1]{1,0} parameter(1)
  %g = f32[8,64]{1,0} parameter(2)
  %bare = f32[1000,64]{1,0} scatter(%table, %ids, %g), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  %fused = f32[1000,64]{1,0} fusion(%bare, %ids, %g), kind=kInput, calls=%fused_scatter
  ROOT %t = (f32[1000,64]{1,0}, f32[1000,64]{1,0}) tuple(%bare, %fused)
}
"""


def test_scatter_is_charged_its_updates_and_indices_not_its_operand():
    """A scatter updates its operand in place (bare, or as the root of a fusion whose operand is a fusion
    parameter): it reads its indices and updates and writes the updated rows, 2 KiB each here, not the 250 KiB
    table read and written (the old count charged 500 KiB more per kernel)."""
    s = hlo.summary(SCATTER)
    by_name = {k["name"]: k["bytes"] for k in s["kernel_list"]}
    updates, indices = 8 * 64 * 4, 8 * 4
    assert by_name["bare"] == indices + updates + updates        # indices and updates read, updates written
    assert by_name["fused"] == indices + updates + updates
    m = hlo.parse(SCATTER)
    reads, written = hlo.kernel_traffic(m, m.entry, m.find("fused"))
    assert dict(reads) == {"bare": 0, "ids": indices, "g": updates} and written == updates


def test_scatter_fusion_reading_its_operand_elsewhere_is_charged_the_operand():
    """When the fusion also reads the scattered-into parameter in full, it is not an update of that buffer
    alone: the whole operand is charged."""
    text = SCATTER.replace("%n = f32[8,64]{1,0} negate(%p2)",
                           "%r = f32[8,64]{1,0} slice(%p0), slice={[0:8], [0:64]}\n"
                           "  %m = f32[8,64]{1,0} negate(%p2)\n  %n = f32[8,64]{1,0} add(%m, %r)")
    s = hlo.summary(text)
    by_name = {k["name"]: k["bytes"] for k in s["kernel_list"]}
    assert by_name["fused"] == 1000 * 64 * 4 + 8 * 4 + 8 * 64 * 4 + 1000 * 64 * 4


IDENTITY_CONVERT = """HloModule mean

ENTRY %main (x: f32[512,512]) -> (f32[512,512], f16[512,512]) {
  %x = f32[512,512]{1,0} parameter(0)
  %same = f32[512,512]{1,0} convert(%x)
  %n = f32[512,512]{1,0} negate(%same)
  %half = f16[512,512]{1,0} convert(%x)
  ROOT %t = (f32[512,512]{1,0}, f16[512,512]{1,0}) tuple(%n, %half)
}
"""


def test_same_type_convert_is_free():
    """An f32->f32 convert (unoptimized HLO of ``Mean``) launches nothing and moves nothing; a real cast does."""
    s = hlo.summary(IDENTITY_CONVERT)
    assert [k["name"] for k in s["kernel_list"]] == ["n", "half"]
    assert s["kernels"] == 2 and s["per_step"]["kernels"] == 2
    n = 512 * 512
    assert s["bytes_moved"] == (4 * n + 4 * n) + (4 * n + 2 * n)


RESHAPES = """HloModule reshapes

ENTRY %main (x: f32[64,128], y: f32[64,128], z: f32[1,64,128]) -> (f32[8192], f32[128,64], f32[64,2,64], f32[64,128]) {
  %x = f32[64,128]{1,0} parameter(0)
  %y = f32[64,128]{0,1} parameter(1)
  %z = f32[1,64,128]{2,0,1} parameter(2)
  %flat = f32[8192]{0} reshape(%x)
  %copy = f32[128,64]{1,0} reshape(%y)
  %split = f32[64,2,64]{2,1,0} reshape(%x)
  %squeeze = f32[64,128]{1,0} reshape(%z)
  ROOT %t = (f32[8192]{0}, f32[128,64]{1,0}, f32[64,2,64]{2,1,0}, f32[64,128]{1,0}) tuple(%flat, %copy, %split, %squeeze)
}
"""


def test_reshape_is_free_only_when_it_is_a_bitcast():
    """A reshape whose layouts keep the physical order of the elements is a bitcast (free); one that does not
    (a column-major [64,128] read as [128,64] row-major) is a copy: a kernel reading and writing 32 KiB."""
    s = hlo.summary(RESHAPES)
    assert [k["name"] for k in s["kernel_list"]] == ["copy"]
    assert s["kernel_list"][0]["bytes"] == 2 * 64 * 128 * 4
    assert hlo.reshape_is_bitcast(hlo.parse_shape("f32[64,128]{1,0}"), hlo.parse_shape("f32[8192]{0}"))
    assert not hlo.reshape_is_bitcast(hlo.parse_shape("f32[64,128]{0,1}"), hlo.parse_shape("f32[128,64]{1,0}"))
    # Column-major, splitting the logically major dimension into two kept in the same physical order: a bitcast.
    assert hlo.reshape_is_bitcast(hlo.parse_shape("f32[64,128]{0,1}"), hlo.parse_shape("f32[8,8,128]{1,0,2}"))
    assert not hlo.reshape_is_bitcast(hlo.parse_shape("f32[64,128]{0,1}"), hlo.parse_shape("f32[8,8,128]{0,1,2}"))
    assert not hlo.reshape_is_bitcast(hlo.parse_shape("f32[64,128]{0,1}"), hlo.parse_shape("f32[8,8,128]{2,1,0}"))
    # Dimensions that do not split evenly ([2,3] -> [3,2]) are a bitcast only when both are row-major.
    assert hlo.reshape_is_bitcast(hlo.parse_shape("f32[2,3]{1,0}"), hlo.parse_shape("f32[3,2]{1,0}"))
    assert not hlo.reshape_is_bitcast(hlo.parse_shape("f32[2,3]{0,1}"), hlo.parse_shape("f32[3,2]{1,0}"))
    # No layout (unoptimized HLO): the default row-major layout, always a bitcast.
    assert hlo.reshape_is_bitcast(hlo.parse_shape("f32[6,4]"), hlo.parse_shape("f32[4,6]"))


def test_reshape_is_bitcast_agrees_with_element_positions():
    """Against a brute-force reference on random small shapes and layouts: the reshape is a bitcast exactly when
    every element keeps its place in memory (the logical row-major order maps memory positions the same way)."""
    import random

    import numpy as np

    def memory_order(dims: list[int], minor_to_major: list[int]) -> np.ndarray:
        """The logical (row-major) index of the element at each memory position."""
        index = np.arange(int(np.prod(dims))).reshape(dims)
        return np.transpose(index, list(reversed(minor_to_major))).reshape(-1)

    def text(dims: list[int], layout: list[int]) -> str:
        return f"f32[{','.join(map(str, dims))}]{{{','.join(map(str, layout))}}}"

    rng = random.Random(0)
    outcomes = set()
    for _ in range(1500):
        src = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4))]
        dst: list[int] = []
        rest = int(np.prod(src))
        while rest > 1 and len(dst) < 3:
            d = rng.choice([k for k in range(1, rest + 1) if rest % k == 0])
            dst.append(d)
            rest //= d
        dst.append(rest)
        sl, dl = rng.sample(range(len(src)), len(src)), rng.sample(range(len(dst)), len(dst))
        expected = bool(np.array_equal(memory_order(src, sl), memory_order(dst, dl)))
        got = hlo.reshape_is_bitcast(hlo.parse_shape(text(src, sl)), hlo.parse_shape(text(dst, dl)))
        assert got == expected, (text(src, sl), text(dst, dl))
        outcomes.add(expected)
    assert outcomes == {True, False}
