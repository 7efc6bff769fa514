"""The torch device a ``features.device``, ``probes.device`` or ``analyses.device`` asks for."""

from __future__ import annotations

from contextlib import contextmanager

from imagenet_cog.core.failures import ExplainedError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


class DeviceError(ExplainedError, RuntimeError):
    """The device asked for is not there."""


def resolve_device(requested: str, setting: str):
    """``auto`` is the GPU when torch sees one, else the CPU; ``cuda`` without a GPU is an
    error naming ``setting`` (the config key the request comes from)."""
    # torch (~4 s) only when a device is resolved: light commands import core
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            f"{setting} is 'cuda' but PyTorch sees no GPU on this machine; "
            f"set {setting} to 'auto' or 'cpu', or run the job on a GPU node."
        )
    return torch.device(requested)


@contextmanager
def float32_matmul_precision(setting: str, device=None):
    """torch's float32 matrix-product precision (``highest``: full float32; ``high``: TF32 on a
    GPU) set to ``setting`` while the block runs, the process's previous one restored after.
    With ``device``, only when it is a GPU (a CPU job keeps the process's setting)."""
    import torch

    if device is not None and device.type != "cuda":
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(setting)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)
