"""xlalab.hlo_memory: peak live bytes over a scheduled entry computation (no TensorFlow needed)."""

from xlalab.hlo_memory import peak_live_bytes

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

