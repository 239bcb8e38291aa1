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
    assert module.entry.root.name == "r"
