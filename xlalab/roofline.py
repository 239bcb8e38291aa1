"""The roofline model: how fast a kernel can be, given its FLOPs, its bytes and the device's two peaks.

A kernel that performs ``flops`` operations and moves ``bytes`` bytes cannot finish sooner than
``max(flops / peak_flops, bytes / bandwidth)``. Its arithmetic intensity ``flops / bytes`` says which
term wins: below the ridge point ``peak_flops / bandwidth`` it is memory-bound.
Units throughout: FLOPs, bytes, seconds, FLOP/s and bytes/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte moved, e.g. ``arithmetic_intensity(2 * n * d, 4 * n * d) == 0.5`` for float32 GEMV."""
    if bytes_moved <= 0:
        raise ValueError("bytes_moved must be positive")
    return flops / bytes_moved


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) at which a kernel stops being memory-bound: ``peak_flops / bandwidth``."""
    return peak_flops / bandwidth


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roof at ``intensity``: ``min(peak_flops, intensity * bandwidth)`` in FLOP/s."""
    return min(peak_flops, intensity * bandwidth)


def roofline_time(flops: float, bytes_moved: float, peak_flops: float, bandwidth: float) -> float:
    """The least time in seconds: ``max(flops / peak_flops, bytes_moved / bandwidth)``."""
    return max(flops / peak_flops, bytes_moved / bandwidth)


def bound(flops: float, bytes_moved: float, peak_flops: float, bandwidth: float) -> str:
    """``"memory"`` or ``"compute"``: which roof limits this kernel."""
    return "memory" if bytes_moved / bandwidth >= flops / peak_flops else "compute"


@dataclass
class RooflinePoint:
    """A measured kernel placed on the roofline.

    Attributes:
        label: what was measured.
        flops: FLOPs per call; bytes: bytes per call (the fewest the computation must move); seconds: measured time.
    """

    label: str
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        return arithmetic_intensity(self.flops, self.bytes)

    @property
    def achieved_flops(self) -> float:
        """Achieved FLOP/s."""
        return self.flops / self.seconds

    @property
    def achieved_bandwidth(self) -> float:
        """Achieved bytes/s."""
        return self.bytes / self.seconds

    def fraction(self, peak_flops: float, bandwidth: float) -> float:
        """Fraction of the roof reached: roofline time over measured time (1.0 is on the roof)."""
        return roofline_time(self.flops, self.bytes, peak_flops, bandwidth) / self.seconds

    def to_dict(self, peak_flops: float, bandwidth: float) -> dict[str, Any]:
        return {"label": self.label, "flops": self.flops, "bytes": self.bytes, "seconds": self.seconds,
                "intensity": self.intensity, "achieved_tflops": self.achieved_flops / 1e12,
                "achieved_gbps": self.achieved_bandwidth / 1e9,
                "roofline_fraction": self.fraction(peak_flops, bandwidth),
                "bound": bound(self.flops, self.bytes, peak_flops, bandwidth)}


def achieved_fraction(flops: float, bytes_moved: float, seconds: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline time divided by measured time: 1.0 means the kernel runs at the roof."""
    return RooflinePoint("", flops, bytes_moved, seconds).fraction(peak_flops, bandwidth)


def plot_roofline(points: Sequence[RooflinePoint], peak_flops: float, bandwidth: float, ax: Any = None,
                  title: str | None = None, device: str = "") -> Any:
    """Draw the roof for one device and the measured points on it; return the matplotlib Axes."""
    from . import plot

    return plot.roofline(points, peak_flops, bandwidth, ax=ax, title=title, device=device)
