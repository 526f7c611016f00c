"""Copies of a large argument that cost nothing until written: each call of the reference, a mistake or a
teacher's function in this process is handed its own copy of the check's arguments (it may write into them),
and a batch makes thousands of such calls on the same few tensors.

A large tensor of a batch's preparation is kept in a memory file (:func:`kept`); each copy of it
(:func:`copy`) is a private mapping of that file, whose pages are the file's own until the call writes one, which
then becomes the call's alone. Where the system has no memory files, or a tensor is not one kept so, a copy is
a clone.
"""

import mmap
import os
import warnings
import weakref

import torch

LARGE = 1 << 20  # bytes from which a prepared tensor is kept in a memory file
_FILES: dict = {}  # id of a kept tensor, while it lives -> its _File (a tensor's == is element-wise: no weak keys)


class _File:
    """A tensor's bytes in a memory file: ``mapped(shared)`` is a tensor over a mapping of it."""

    def __init__(self, tensor):
        self.dtype, self.shape, self.size = tensor.dtype, tuple(tensor.shape), tensor.numel() * tensor.element_size()
        self.fd = os.memfd_create("attention-argument", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.size)
            self.mapped(shared=True).copy_(tensor)
        except BaseException:
            os.close(self.fd)
            raise
        weakref.finalize(self, os.close, self.fd)

    def mapped(self, shared):
        flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
        buffer = mmap.mmap(self.fd, self.size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        with warnings.catch_warnings():  # (torch warns where a buffer is not writable: this one is)
            warnings.simplefilter("ignore")
            return torch.frombuffer(buffer, dtype=self.dtype).reshape(self.shape)


def kept(value):
    """``value`` itself, or where it is a large CPU tensor that owns its storage, an equal tensor over a memory
    file (which :func:`copy` copies by mapping); never one that needs gradients (its graph is its own)."""
    if (
        type(value) is not torch.Tensor
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
    made = file.mapped(shared=True)
    _FILES[id(made)] = file
    weakref.finalize(made, _FILES.pop, id(made), None)
    return made


def copy(value):
    """A tensor argument's own copy (a call may write into it); any other value itself."""
    if not isinstance(value, torch.Tensor):
        return value
    file = _FILES.get(id(value))
    if file is None or value._version:  # (written since it was kept: the file no longer holds its values)
        return value.clone()
    return file.mapped(shared=False)
