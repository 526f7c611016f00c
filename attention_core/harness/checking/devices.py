"""Which devices a run covers, and why one of them is skipped here: one rule for the CLI and pytest."""

DEVICES = ("cpu", "cuda")
NO_CUDA = "CUDA is not available here (torch.cuda.is_available() is False)"


def covered(requested=None):
    """The devices a run covers: those requested (each once, in order), else every device.

    A device that cannot run here is still covered: its checks are reported skipped, with
    :func:`skip_reason`, rather than left out silently.
    """
    return tuple(dict.fromkeys(requested)) if requested else DEVICES


def skip_reason(device):
    """Why checks on ``device`` are skipped here, or None when they can run."""
    import torch  # noqa: PLC0415 (the command line lists the devices without loading torch)

    if device == "cuda" and not torch.cuda.is_available():
        return NO_CUDA
    return None
