"""xlalab.hlo.memory: peak live bytes over a scheduled entry computation (no TensorFlow needed)."""

from xlalab.hlo.memory import peak_live_bytes

# a (4 KiB) -> b = exp(a) (4 KiB) -> c = b + b (4 KiB) -> d = bitcast(c) -> root tuple(d).
TEXT = """HloModule m, is_scheduled=true

ENTRY %main (p: f32[1024]) -> (f32[32,32]) {
  %p = f32[1024]{0} parameter(0)
  %b = f32[1024]{0} exponential(%p)
  %c = f32[1024]{0} add(%b, %b)
  %e = f32[1024]{0} negate(%c)
  %d = f32[32,32]{1,0} bitcast(%e)
  ROOT %t = (f32[32,32]{1,0}) tuple(%d)
}
"""


def test_peak_counts_overlapping_buffers_only():
    r = peak_live_bytes(TEXT)
    # b and c are alive together (c reads b); then b dies, and c and e overlap; the root keeps e.
    assert r.peak_bytes == 2 * 4096
    assert r.parameter_bytes == 4096
    assert r.buffers == 3



def test_live_curve_peak_is_peak_live_bytes_and_names_the_buffers_alive_there():
    from xlalab.hlo.memory import live_curve

    curve = live_curve(TEXT)
    r = peak_live_bytes(TEXT)
    assert curve.peak_bytes == r.peak_bytes == max(s.live_bytes for s in curve.steps)
    assert curve.peak_at == r.peak_at == "c" and curve.steps[curve.peak_index].name == "c"
    assert [(n, b) for n, _, _, b in curve.alive_at_peak] == [("b", 4096), ("c", 4096)]
    assert [s.live_bytes for s in curve.steps] == [0, 4096, 8192, 8192, 4096, 4096]
    assert curve.steps[4].note == "view of e" and curve.steps[4].allocated == 0


# A loop-free update: u = dynamic-update-slice(z, row, i, 0) where z has no later use writes in place; the output
# o is aliased to parameter 0 (a variable the step updates), so it writes into that input.
INPLACE = """HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }

ENTRY %main (v: f32[256,256], row: f32[1,256], i: s32[]) -> (f32[256,256], f32[256,256]) {
  %v = f32[256,256]{1,0} parameter(0)
  %row = f32[1,256]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %zero = s32[] constant(0)
  %z = f32[256,256]{1,0} negate(%v)
  %u = f32[256,256]{1,0} dynamic-update-slice(%z, %row, %i, %zero)
  %o = f32[256,256]{1,0} add(%v, %v)
  ROOT %t = (f32[256,256]{1,0}, f32[256,256]{1,0}) tuple(%o, %u)
}
"""


def test_in_place_update_and_output_into_an_input_allocate_nothing():
    from xlalab.hlo.memory import live_curve

    curve = live_curve(INPLACE)
    by = {s.name: s for s in curve.steps}
    assert by["u"].allocated == 0 and by["u"].note == "in place into z"
    assert by["o"].allocated == 0 and by["o"].note.startswith("into parameter 0")
    assert curve.peak_bytes == 256 * 256 * 4 + 4       # z (then u, the same buffer) and the constant index


# A bitcast reshape (f32[1024] -> f32[32,32] row-major: every element stays where it was) is a view; a reshape whose
# result layout moves elements ({0,1}: column-major) is a copy into a new buffer, as xlalab.hlo.summary counts it.
RESHAPES = """HloModule m, is_scheduled=true

ENTRY %main (p: f32[1024]) -> (f32[32,32], f32[32,32]) {
  %p = f32[1024]{0} parameter(0)
  %a = f32[1024]{0} exponential(%p)
  %free = f32[32,32]{1,0} reshape(%a)
  %moved = f32[32,32]{0,1} reshape(%a)
  %n = f32[32,32]{1,0} negate(%free)
  ROOT %t = (f32[32,32]{1,0}, f32[32,32]{0,1}) tuple(%n, %moved)
}
"""


def test_a_bitcast_reshape_is_a_view_and_any_other_reshape_allocates():
    from xlalab import hlo
    from xlalab.hlo.memory import is_view, live_curve

    module = hlo.parse(RESHAPES)
    shapes = {i.name: i.shape for i in module.entry}
    # The one test both walks use: summary launches a kernel for the moving reshape only.
    assert hlo.reinterprets(module.find("free"), shapes) and not hlo.reinterprets(module.find("moved"), shapes)
    launched = {k["name"] for k in hlo.summary(module)["kernel_list"]}
    assert "moved" in launched and "free" not in launched
    assert is_view(module.find("free"), shapes) and not is_view(module.find("moved"), shapes)
    steps = {s.name: s for s in live_curve(RESHAPES).steps}
    assert steps["free"].allocated == 0 and steps["free"].note == "view of a"
    assert steps["moved"].allocated == 4096 and steps["moved"].note == ""
    # a (4 KiB) and the moved copy (4 KiB) are alive together, then n (4 KiB) joins them: 12 KiB, not 8.
    curve = live_curve(RESHAPES)
    assert curve.peak_bytes == 3 * 4096 and curve.buffers == 3
