"""Copies of a large argument that cost nothing until written: each call of the reference, a mistake or a
teacher's function in this process is handed its own copy of the check's arguments (it may write into them),
and a batch makes thousands of such calls on the same few tensors.

A large tensor of a batch's preparation is kept in a sealed memory file (:func:`kept`): the tensor itself and
each copy of it (:func:`copy`) are private mappings of that file, whose pages are the file's own until something
writes one, which then becomes that mapping's alone. Where the system has no memory files, or a tensor is not one
kept so, a copy is a clone. A copy's storage cannot grow (``resize_``), as a submission's own copies cannot in its
worker server; a write that does not count as one (through ``.data`` or NumPy) is not seen.
"""

import mmap
import os
import warnings
import weakref

import torch

try:
    import fcntl
except ImportError:  # (Windows has none: a copy there is a clone)
    fcntl = None  # type: ignore[assignment]

LARGE = 1 << 20  # bytes from which a prepared tensor is kept in a memory file
_FILES: dict = {}  # id of a kept tensor, while it lives -> its _File (a tensor's == is element-wise: no weak keys)


class _File:
    """A tensor's bytes in a sealed memory file (its size and bytes fixed): ``mapped()`` is a tensor over a
    private mapping of it. A process given the file (a worker server, see ``client.Worker.share``) maps the same
    pages rather than holding a copy of its own."""

    def __init__(self, tensor):
        self.dtype, self.shape, self.size = tensor.dtype, tuple(tensor.shape), tensor.numel() * tensor.element_size()
        self.fd = os.memfd_create("attention-argument", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, self.size)
            with mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED) as buffer:
                written = torch.frombuffer(buffer, dtype=self.dtype).reshape(self.shape)
                written.copy_(tensor)
                del written  # (the buffer is released before it is closed)
            fcntl.fcntl(
                self.fd,
                fcntl.F_ADD_SEALS,
                fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL,
            )
        except BaseException:
            os.close(self.fd)
            raise
        weakref.finalize(self, os.close, self.fd)

    def mapped(self):
        buffer = mmap.mmap(self.fd, self.size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        with warnings.catch_warnings():  # (torch warns where a buffer is not writable: this one is)
            warnings.simplefilter("ignore")
            return torch.frombuffer(buffer, dtype=self.dtype).reshape(self.shape)


def kept(value):
    """``value`` itself, or where it is a large CPU tensor that owns its storage, an equal tensor over a memory
    file (which :func:`copy` copies by mapping); never one that needs gradients (its graph is its own)."""
    if (
        type(value) is not torch.Tensor
        or fcntl is None
        or not hasattr(os, "memfd_create")
        or value.device.type != "cpu"
        or value.requires_grad
        or not value.is_contiguous()
        or value.storage_offset()
        or value.numel() * value.element_size() != value.untyped_storage().nbytes()
        or value.numel() * value.element_size() < LARGE
    ):
        return value
    try:
        file = _File(value)
    except OSError:  # (no memory file could be made: the tensor stays as it is)
        return value
    made = file.mapped()
    _FILES[id(made)] = file
    weakref.finalize(made, _FILES.pop, id(made), None)
    return made


def copy(value):
    """A tensor argument's own copy (a call may write into it); any other value itself."""
    if not isinstance(value, torch.Tensor):
        return value
    file = _unwritten(value)
    return file.mapped() if file is not None else value.clone()


def file_of(value):
    """The sealed memory file (its descriptor) that holds ``value``'s bytes, where ``value`` is a tensor
    :func:`kept` made and nothing has written into since; else None."""
    file = _unwritten(value) if isinstance(value, torch.Tensor) else None
    return file.fd if file is not None else None


def _unwritten(tensor):
    """The _File of a tensor :func:`kept` made, where nothing has written into it since (the file then holds its
    values); else None."""
    file = _FILES.get(id(tensor))
    return file if file is not None and not tensor._version else None
