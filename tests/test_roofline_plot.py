"""xlalab.roofline arithmetic and xlalab.plot drawing."""

import matplotlib

matplotlib.use("Agg")

import pytest

from xlalab import plot, roofline


def test_gemv_is_memory_bound_on_a100():
    n, d = 1_000_000, 128
    flops, nbytes = 2 * n * d, 4 * n * d
    peak, bw = 19.5e12, 1555e9
    assert roofline.arithmetic_intensity(flops, nbytes) == pytest.approx(0.5)
    assert roofline.bound(flops, nbytes, peak, bw) == "memory"
    assert roofline.roofline_time(flops, nbytes, peak, bw) == pytest.approx(nbytes / bw)
    assert roofline.ridge_point(peak, bw) == pytest.approx(12.54, rel=1e-3)


def test_attainable_and_fraction():
    assert roofline.attainable_flops(1.0, 100.0, 10.0) == 10.0
    assert roofline.attainable_flops(100.0, 100.0, 10.0) == 100.0
    p = roofline.RooflinePoint("x", flops=100.0, bytes=100.0, seconds=20.0)
    assert p.fraction(peak_flops=1000.0, bandwidth=10.0) == pytest.approx(0.5)
    assert p.to_dict(1000.0, 10.0)["bound"] == "memory"
    with pytest.raises(ValueError):
        roofline.arithmetic_intensity(1.0, 0.0)


def test_plots_draw():
    pts = [roofline.RooflinePoint("gemv", 2e8, 4e8, 0.03), roofline.RooflinePoint("gemm", 2e10, 1e8, 0.2)]
    ax = roofline.plot_roofline(pts, 1e12, 20e9, device="test")
    assert len(ax.lines) >= 3
    ax = plot.speedup_bars({"graph": 1.0, "xla": 2.0}, {"graph": (1, 1), "xla": (1.8, 2.2)})
    assert len(ax.patches) == 2
    ax = plot.scaling([1, 2, 4], {"t": [1, 4, 16]}, "n", "ms", slopes=[2])
    assert ax.get_xscale() == "log"


def test_speedup_labels_sit_above_their_error_bars():
    """A value label starts above the top of its bar's confidence interval, inside the axes (issue 19)."""
    import matplotlib

    matplotlib.use("Agg")
    ax = plot.speedup_bars({"graph": 1.0, "xla": 2.0}, {"graph": (0.9, 1.1), "xla": (1.5, 2.6)})
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if t.get_text().endswith("x")]
    assert [t.get_text() for t in labels] == ["1.00x", "2.00x"]
    to_pixels = ax.transData.transform
    for text, top in zip(labels, (1.1, 2.6)):
        box = text.get_window_extent(renderer)
        assert box.y0 > to_pixels((0, top))[1], f"{text.get_text()} overlaps its error bar"
        assert box.y1 <= ax.get_window_extent(renderer).y1 + 1, f"{text.get_text()} leaves the axes"


def test_inline_svg_keeps_text():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title("a title to find")
    out = plot.inline_svg(fig, "xlalab-timeline")
    html = out._repr_html_()
    assert html.startswith('<div class="xlalab-timeline"') and "<svg" in html and "<?xml" not in html
    assert "a title to find" in html, "text must stay text (svg.fonttype none), not paths"
    assert fig.number not in plt.get_fignums(), "the figure is closed"
