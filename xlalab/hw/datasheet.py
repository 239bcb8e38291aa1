"""The datasheet table: published peaks of each exact GPU model, and the names that find its row.

:class:`DevicePeaks` (a device's roofs), :data:`GPU_PEAKS` (dense datasheet peaks per model, sources cited),
:data:`GPU_COMPUTE_CAPABILITY`, and :func:`gpu_key` / :func:`gpu_peaks` (a device name to its row). Data only:
nothing here imports TensorFlow or measures anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DevicePeaks:
    """Peak rates of one device.

    Attributes:
        name: device name, e.g. ``"A100 SXM4 40GB"`` or the CPU model.
        bandwidth_gbps: the memory roof in GB/s (10**9 bytes per second): the datasheet figure on a GPU,
            the measured multi-threaded copy bandwidth on a CPU.
        tflops: dense peak in TFLOP/s per dtype key (``"fp32"``, ``"tf32"``, ``"fp16"``, ``"bf16"``);
            a dtype the device has no fast path for is absent.
        source: where the numbers come from (a datasheet, or what was measured and which figure is the roof).
        measured: figures measured on this machine beside the roof, e.g. ``{"copy_gbps": ...}``
            (empty for a table entry).
        roof: where the roof itself comes from: ``"datasheet"`` (a :data:`GPU_PEAKS` row) or ``"measured"``
            (a CPU, or a GPU without a row: see :func:`measured_gpu_peaks`).
        note: one line for the reader where the roof is not what the page would expect (a GPU without a
            datasheet row: which row is missing and how to add it); ``""`` otherwise.
    """

    name: str
    bandwidth_gbps: float
    tflops: dict[str, float]
    source: str
    measured: dict[str, float] = field(default_factory=dict)
    roof: str = "datasheet"
    note: str = ""

    @property
    def is_measured(self) -> bool:
        """True when the roof was measured on this machine (no datasheet figure): a floor under the true peak."""
        return self.roof == "measured"

    def peak_flops(self, dtype: str = "fp32") -> float:
        """Peak FLOP/s for ``dtype``; falls back to fp32 where the device has no faster path."""
        return self.tflops.get(dtype, self.tflops["fp32"]) * 1e12

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth in bytes per second."""
        return self.bandwidth_gbps * 1e9

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the fp32 compute roof meets the memory roof."""
        return self.peak_flops("fp32") / self.bandwidth


_SPARSE = "tensor-core rates halved from the datasheet's 'with sparsity' figures"
_T4 = "NVIDIA T4 Tensor Core GPU datasheet (2019), https://www.nvidia.com/en-us/data-center/tesla-t4/"
_V100 = ("NVIDIA Tesla V100 GPU datasheet (2020), "
         "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf")
_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (2021), https://www.nvidia.com/content/dam/en-zz/Solutions/"
         "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf; " + _SPARSE)
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (2023), https://www.nvidia.com/en-us/data-center/l4/; " + _SPARSE
_L40 = "NVIDIA L40 GPU datasheet (2022), https://www.nvidia.com/en-us/data-center/l40/; " + _SPARSE
_L40S = "NVIDIA L40S GPU datasheet (2023), https://www.nvidia.com/en-us/data-center/l40s/; " + _SPARSE
_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (2023), https://www.nvidia.com/en-us/data-center/h100/; "
         + _SPARSE)
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024), https://www.nvidia.com/en-us/data-center/h200/; " + _SPARSE
_P100 = ("NVIDIA Tesla P100 datasheet (2016), "
         "https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-PCIe-datasheet.pdf; no tensor cores, fp16 is "
         "the half-precision rate")
_P100_SXM = ("NVIDIA Tesla P100 datasheet (2016), https://images.nvidia.com/content/tesla/pdf/"
             "nvidia-tesla-p100-datasheet.pdf; no tensor cores, fp16 is the half-precision rate")
# GeForce cards run fp16/bf16 tensor-core math with an fp32 accumulator (what TensorFlow's matmuls use) at half the
# fp16-accumulate rate; the whitepapers list both, and the fp32-accumulate figure is stored.
_FP32_ACC = "fp16/bf16: the 'with FP32 Accumulate' tensor rate"
_RTX3090 = ("NVIDIA Ampere GA102 GPU Architecture whitepaper (2021), Table: GeForce RTX 3090, https://www.nvidia.com/"
            "content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf; " + _SPARSE + "; " + _FP32_ACC)
_RTX4090 = ("NVIDIA Ada GPU Architecture whitepaper (2023), Table: GeForce RTX 4090, https://images.nvidia.com/aem-dam/"
            "Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf; " + _SPARSE + "; " + _FP32_ACC)
_RTX5090 = ("NVIDIA RTX Blackwell GPU Architecture whitepaper (2025), Table: GeForce RTX 5090, https://images.nvidia.com/"
            "aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf; " + _SPARSE + "; "
            + _FP32_ACC)
_A6000 = ("NVIDIA RTX A6000 datasheet (2021), specifications at https://www.nvidia.com/en-us/design-visualization/"
          "rtx-a6000/; " + _SPARSE)
_B200 = ("NVIDIA Blackwell Architecture Technical Brief (2024), HGX B200 (1000 W) per-GPU rates, "
         "https://resources.nvidia.com/en-us-blackwell-architecture; " + _SPARSE)


def _ampere_plus(fp32: float, tf32: float, bf16: float) -> dict[str, float]:
    return {"fp32": fp32, "tf32": tf32, "fp16": bf16, "bf16": bf16}


class _PeaksTable(dict):
    """The GPU table; the keys of earlier versions (``"A100-40GB"``, ``"V100"``) still look up their SXM entry."""

    _OLD_KEYS = {"A100-40GB": "A100-SXM-40GB", "A100-80GB": "A100-SXM-80GB", "V100": "V100-SXM2"}

    def __missing__(self, key: str) -> DevicePeaks:
        if key in self._OLD_KEYS:
            return self[self._OLD_KEYS[key]]
        raise KeyError(key)


# Dense (no sparsity) datasheet peaks, one entry per exact model: PCIe and SXM boards of one chip differ in
# clocks, power and memory, so they differ in peaks. NVIDIA quotes Ampere and later tensor-core figures
# "with sparsity", twice the dense rate; the dense halves are stored. fp16 on T4/V100 is the tensor-core rate.
GPU_PEAKS: dict[str, DevicePeaks] = _PeaksTable({
    "T4": DevicePeaks("T4", 320, {"fp32": 8.1, "fp16": 65.0}, _T4),
    "V100-PCIE": DevicePeaks("V100 PCIe", 900, {"fp32": 14.0, "fp16": 112.0}, _V100 + ", PCIe"),
    "V100-SXM2": DevicePeaks("V100 SXM2", 900, {"fp32": 15.7, "fp16": 125.0}, _V100 + ", SXM2"),
    "A100-PCIE-40GB": DevicePeaks("A100 PCIe 40GB", 1555, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; PCIe 40GB"),
    "A100-PCIE-80GB": DevicePeaks("A100 PCIe 80GB", 1935, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; PCIe 80GB"),
    "A100-SXM-40GB": DevicePeaks("A100 SXM4 40GB", 1555, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; SXM 40GB"),
    "A100-SXM-80GB": DevicePeaks("A100 SXM4 80GB", 2039, _ampere_plus(19.5, 156.0, 312.0), _A100 + "; SXM 80GB"),
    "L4": DevicePeaks("L4", 300, _ampere_plus(30.3, 60.0, 121.0), _L4),
    "L40": DevicePeaks("L40", 864, _ampere_plus(90.5, 90.5, 181.0), _L40),
    "L40S": DevicePeaks("L40S", 864, _ampere_plus(91.6, 183.0, 362.0), _L40S),
    "H100-PCIE": DevicePeaks("H100 PCIe", 2000, _ampere_plus(51.0, 378.0, 756.0), _H100 + "; PCIe"),
    "H100-SXM": DevicePeaks("H100 SXM5", 3350, _ampere_plus(67.0, 494.5, 989.5), _H100 + "; SXM"),
    "H100-NVL": DevicePeaks("H100 NVL", 3900, _ampere_plus(60.0, 417.5, 835.5), _H100 + "; NVL (one GPU)"),
    "H200": DevicePeaks("H200 SXM", 4800, _ampere_plus(67.0, 494.5, 989.5), _H200 + "; SXM"),
    "H200-NVL": DevicePeaks("H200 NVL", 4800, _ampere_plus(60.0, 417.5, 835.5), _H200 + "; NVL (one GPU)"),
    "B200": DevicePeaks("B200 (HGX)", 8000, _ampere_plus(80.0, 1100.0, 2250.0), _B200),
    "P100-PCIE-16GB": DevicePeaks("Tesla P100 PCIe 16GB", 732, {"fp32": 9.3, "fp16": 18.7}, _P100 + "; PCIe 16GB"),
    "P100-PCIE-12GB": DevicePeaks("Tesla P100 PCIe 12GB", 549, {"fp32": 9.3, "fp16": 18.7}, _P100 + "; PCIe 12GB"),
    "P100-SXM2": DevicePeaks("Tesla P100 SXM2", 732, {"fp32": 10.6, "fp16": 21.2}, _P100_SXM + "; SXM2 (NVLink)"),
    "RTX-A6000": DevicePeaks("RTX A6000", 768, _ampere_plus(38.7, 77.4, 154.8), _A6000),
    "RTX-3090": DevicePeaks("GeForce RTX 3090", 936, _ampere_plus(35.6, 35.6, 71.0), _RTX3090),
    "RTX-4090": DevicePeaks("GeForce RTX 4090", 1008, _ampere_plus(82.6, 82.6, 165.2), _RTX4090),
    "RTX-5090": DevicePeaks("GeForce RTX 5090", 1792, _ampere_plus(104.8, 104.8, 209.5), _RTX5090),
})

# Compute capability of each table entry (CUDA C Programming Guide, "Compute Capabilities").
GPU_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "T4": (7, 5), "V100-PCIE": (7, 0), "V100-SXM2": (7, 0),
    "A100-PCIE-40GB": (8, 0), "A100-PCIE-80GB": (8, 0), "A100-SXM-40GB": (8, 0), "A100-SXM-80GB": (8, 0),
    "L4": (8, 9), "L40": (8, 9), "L40S": (8, 9),
    "H100-PCIE": (9, 0), "H100-SXM": (9, 0), "H100-NVL": (9, 0), "H200": (9, 0), "H200-NVL": (9, 0),
    "B200": (10, 0), "P100-PCIE-16GB": (6, 0), "P100-PCIE-12GB": (6, 0), "P100-SXM2": (6, 0),
    "RTX-A6000": (8, 6), "RTX-3090": (8, 6), "RTX-4090": (8, 9), "RTX-5090": (12, 0),
}

# Patterns over the normalized device name (upper case, every run of non-alphanumerics one space), first
# match wins. Recorded names: nvidia-smi --query-gpu=name and TensorFlow's device_name, e.g.
# "Tesla T4", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 PCIe",
# "NVIDIA H100 80GB HBM3" (the SXM board), "NVIDIA H100 NVL", "NVIDIA L40S", "NVIDIA H200".
_GPU_PATTERNS: list[tuple[str, str]] = [
    (r"\bH200\b.*\bNVL\b", "H200-NVL"),
    (r"\bH200\b", "H200"),
    (r"\bH100\b.*\bNVL\b", "H100-NVL"),
    (r"\bH100\b.*\bPCIE\b", "H100-PCIE"),
    (r"\bH100\b.*\b(SXM5?|HBM3)\b", "H100-SXM"),
    (r"\bA100\b(?=.*\bSXM4?\b).*\b80GB\b", "A100-SXM-80GB"),
    (r"\bA100\b(?=.*\bSXM4?\b).*\b40GB\b", "A100-SXM-40GB"),
    (r"\bA100\b(?=.*\bPCIE\b).*\b80GB\b", "A100-PCIE-80GB"),
    (r"\bA100\b(?=.*\b80GB\b).*\bPCIE\b", "A100-PCIE-80GB"),
    (r"\bA100\b(?=.*\bPCIE\b).*\b40GB\b", "A100-PCIE-40GB"),
    (r"\bV100\b.*\bSXM2\b", "V100-SXM2"),
    (r"\bV100\b.*\bPCIE\b", "V100-PCIE"),
    (r"\bL40S\b", "L40S"),
    (r"\bL40\b", "L40"),
    (r"\bL4\b", "L4"),
    (r"\bT4\b", "T4"),
    # "NVIDIA B200"; never the GB200 superchip (its own token) or the B200A.
    (r"\bB200$", "B200"),
    # "Tesla P100-PCIE-16GB" (Kaggle), "Tesla P100-PCIE-12GB", "Tesla P100-SXM2-16GB".
    (r"\bP100\b.*\bPCIE\b.*\b12GB\b", "P100-PCIE-12GB"),
    (r"\bP100\b.*\bPCIE\b", "P100-PCIE-16GB"),
    (r"\bP100\b.*\bSXM2\b", "P100-SXM2"),
    # "NVIDIA RTX A6000"; the desktop GeForce boards exactly ("NVIDIA GeForce RTX 4090"), never a Ti, a D or a
    # Laptop GPU, which differ in clocks and memory.
    (r"\bRTX A6000$", "RTX-A6000"),
    (r"\bRTX 3090$", "RTX-3090"),
    (r"\bRTX 4090$", "RTX-4090"),
    (r"\bRTX 5090$", "RTX-5090"),
]


def _normalize_gpu_name(name: str) -> str:
    import re

    return " ".join(re.sub(r"[^A-Za-z0-9]+", " ", name).upper().split())


def gpu_key(name: str) -> str | None:
    """The :data:`GPU_PEAKS` key of a device name as nvidia-smi or TensorFlow reports it, else ``None``.

    Example:
        >>> gpu_key("NVIDIA A100-SXM4-40GB"), gpu_key("NVIDIA H100 80GB HBM3"), gpu_key("NVIDIA L40S")
        ('A100-SXM-40GB', 'H100-SXM', 'L40S')
    """
    import re

    norm = _normalize_gpu_name(name)
    for pattern, key in _GPU_PATTERNS:
        if re.search(pattern, norm):
            return key
    return None


def gpu_peaks(name: str) -> DevicePeaks | None:
    """The datasheet peaks of the GPU model a device name names exactly (see :func:`gpu_key`), else ``None``."""
    key = gpu_key(name)
    return GPU_PEAKS[key] if key else None
