"""The wire format between the grader and a submission's process: framed JSON plus raw tensor bytes.

A message is a header ``!QQ`` (JSON length, blob length), the JSON text (UTF-8) and a blob.
Values nest as JSON: None, bool, int, float and str as themselves; a list as a JSON array;
a tuple as ``{"tuple": [...]}``; a tensor as ``{"tensor": [dtype, shape, offset, nbytes]}``,
whose bytes lie in the blob; ``{"device": "cpu"}``, ``{"dtype": "float32"}``; a str-keyed
dict as ``{"dict": {...}}``; anything else as ``{"opaque": type name}``. Nothing is ever
unpickled: the receiving side builds fresh plain tensors from the bytes, after checking the
dtype against an allow-list and the byte count against the shape. A tensor both sides already
hold (a large argument the grader stored in the worker server before it forked the child) goes
as ``{"shared": key}`` and arrives as a fresh copy of the receiver's own (:class:`Shared`).

Imports only the standard library and torch: the worker loads this file by path.
"""

import ctypes
import fcntl
import json
import math
import mmap
import os
import struct
import warnings

import torch

HEADER = struct.Struct("!QQ")
GO = b"g"  # the grader to a child set up ahead: import the submission now
JSON = json.JSONEncoder(separators=(",", ":"))  # allow_nan: NaN and inf as Python's json writes them
MAX_DIMS = 64

# dtype name -> dtype; the only dtypes that cross the wire.
DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.complex64,
        torch.complex128,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}


class WireError(ValueError):
    """A message that breaks the format: too large, malformed, or naming a dtype not allowed."""


class Opaque:
    """A value of a type the wire does not carry: the receiver learns its type's name only."""

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return f"Opaque({self.type_name!r})"

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.type_name == self.type_name

    __hash__ = None  # type: ignore[assignment]  # equal by type name: unhashable


def plain_tensor(t):
    """``t``'s values as a plain, detached, contiguous CPU tensor that no subclass code can touch afterwards:
    ``t`` itself (or its detached view) where it already is one, else a copy."""
    if type(t) is torch.Tensor and t.device.type == "cpu" and t.is_contiguous() and not t.is_conj() and not t.is_neg():
        return t.detach() if t.requires_grad else t  # already what the copy would be: its bytes are read in place
    t = torch.Tensor.as_subclass(t, torch.Tensor)  # torch_function ignores as_subclass: no subclass code runs
    return t.detach().cpu().resolve_conj().resolve_neg().clone(memory_format=torch.contiguous_format)


class ShapeOnly:
    """A tensor sent as its dtype and shape alone (a result no expectation reads); arrives on ``meta``."""

    def __init__(self, tensor):
        self.tensor = tensor


def encode(value, shared=None):
    """``value`` -> one message's bytes; a tensor whose ``id`` is a key of ``shared`` goes by its name there."""
    return b"".join(encode_parts(value, shared))


def encode_parts(value, shared=None):
    """``value`` -> one message as a list of buffers, each tensor's bytes read in place (not copied).

    The buffers keep their tensors alive; send them with :func:`send_parts`.
    """
    blob = []
    size = [0]

    def walk(v):
        if v is None or isinstance(v, (bool, str)):
            return str(v) if isinstance(v, str) else v
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return float(v)
        if isinstance(v, torch.Tensor):
            return {"shared": shared[id(v)]} if shared and id(v) in shared else tensor(v)
        if isinstance(v, tuple):
            return {"tuple": [walk(x) for x in v]}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict) and all(type(k) is str for k in v):
            return {"dict": {k: walk(x) for k, x in v.items()}}
        if isinstance(v, torch.device):
            return {"device": str(v)}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        if isinstance(v, Opaque):
            return {"opaque": v.type_name}
        if isinstance(v, ShapeOnly):
            t = torch.Tensor.as_subclass(v.tensor, torch.Tensor)
            return {"shape_only": [str(t.dtype).removeprefix("torch."), list(t.shape)]}
        return {"opaque": type(v).__qualname__}

    def tensor(t):
        if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
            return {"opaque": f"tensor ({t.layout}, {t.device.type})"}
        t = plain_tensor(t)
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES:
            return {"opaque": f"tensor of {name}"}
        nbytes = t.numel() * t.element_size()
        if nbytes:
            blob.append(raw_bytes(t, nbytes))
        size[0] += nbytes
        return {"tensor": [name, list(t.shape), size[0] - nbytes, nbytes]}

    text = JSON.encode(walk(value)).encode()
    return [HEADER.pack(len(text), size[0]), text, *blob]


def raw_bytes(tensor, nbytes):
    """A contiguous CPU tensor's bytes as a memoryview, read in place; the view keeps the tensor alive."""
    array = (ctypes.c_char * nbytes).from_address(tensor.data_ptr())
    array.tensor = tensor
    return memoryview(array).cast("B")


SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE  # a shared tensor's file never changes


class Shared:
    """A tensor the server keeps for every child: its bytes in a sealed memory file, mapped twice.

    The read-only shared mapping is the untouched original. A child's calls get tensors over the
    private mapping: reading it costs no copy, and a write (the submission changing its argument
    in place) copies the pages it touches into that child alone. Each call gets a new tensor
    object over the private bytes; the pages an earlier call wrote are dropped first, so that they
    read as the file holds them again.
    """

    def __init__(self, tensor, name):
        tensor = tensor.contiguous()
        self.dtype, self.shape = tensor.dtype, tuple(tensor.shape)
        self._private = None
        if not hasattr(os, "memfd_create"):  # not Linux: each call gets a copy
            self.original = tensor.clone()
            return
        size = tensor.numel() * tensor.element_size()
        fd = os.memfd_create(f"attention-shared-{name}", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
        try:
            data, written = raw_bytes(tensor, size), 0
            while written < size:
                written += os.write(fd, data[written:])
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
            self._mapped(fd, size)
        finally:
            os.close(fd)

    @classmethod
    def from_file(cls, fd, dtype, shape):
        """One over the bytes of the sealed memory file ``fd`` (the grader's own, sent with the request): the
        same pages as the grader's, not a copy. Raises ValueError where the file is not sealed against every
        change or its size is not the tensor's."""
        shared = cls.__new__(cls)
        shared.dtype, shared.shape = dtype, tuple(shape)
        size = math.prod(shared.shape) * torch.empty(0, dtype=dtype).element_size()
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS or os.fstat(fd).st_size != size or not size:
            raise ValueError("a shared tensor's file is not sealed, or not of its size")
        shared._mapped(fd, size)
        return shared

    def _mapped(self, fd, size):
        self._shared = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        self._private = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._address = self._view(self._private).data_ptr()  # where every fresh view's bytes start
        with warnings.catch_warnings():  # torch warns that the original's buffer is read-only, as meant
            warnings.simplefilter("ignore")
            self.original = self._view(self._shared)

    def _view(self, buffer):
        return torch.frombuffer(buffer, dtype=self.dtype).reshape(self.shape)

    def fresh(self):
        """A new tensor over the private bytes, as the original holds them."""
        if self._private is None:
            return self.original.clone()
        self._private.madvise(mmap.MADV_DONTNEED)  # an earlier call's writes, if any, are forgotten
        return self._view(self._private)

    def unwritten(self, tensor):
        """Whether ``tensor`` is still a view that :meth:`fresh` made, over every byte, none of which a
        write has reached since: then it holds the original's values without comparing them.

        Told by Linux's ``/proc/self/pagemap``: a written page of a private mapping of the (sealed)
        file is an anonymous copy (present and not a file page, or swapped out); an unwritten one is
        the file's own page or not mapped yet. False wherever that cannot be told.
        """
        if (
            self._private is None
            or type(tensor) is not torch.Tensor
            or tensor.data_ptr() != self._address
            or tensor.dtype != self.dtype
            or tuple(tensor.shape) != self.shape
            or not tensor.is_contiguous()
        ):
            return False
        size = len(self._private)
        first, last = self._address // mmap.PAGESIZE, (self._address + size - 1) // mmap.PAGESIZE
        try:
            fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            try:
                entries = os.pread(fd, (last - first + 1) * 8, first * 8)
            finally:
                os.close(fd)
        except OSError:
            return False
        if len(entries) != (last - first + 1) * 8:
            return False
        e = torch.frombuffer(bytearray(entries), dtype=torch.int64)  # bit 63 present, 62 swapped, 61 file page
        return not bool((((e < 0) & ((e >> 61) & 1 == 0)) | ((e >> 62) & 1 == 1)).any())


def send_parts(sock, parts, batch=256):
    """Send every buffer of ``parts`` on a blocking socket, without joining them."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        sent = sock.sendmsg(views[:batch])
        while sent:
            if sent >= len(views[0]):
                sent -= len(views.pop(0))
            else:
                views[0], sent = views[0][sent:], 0


def decode(text, blob, shared=None):
    """One message's JSON text and blob -> the value, with fresh plain tensors.

    ``shared``: a function from a name to a fresh copy of the tensor the receiver keeps under it
    (None where it keeps none); without it, nothing may be sent by name.
    """
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise WireError(f"the message is not JSON: {e}") from None

    def walk(v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [walk(x) for x in v]
        if not isinstance(v, dict) or len(v) != 1:
            raise WireError(f"unknown value in a message: {str(v)[:80]}")
        ((tag, body),) = v.items()
        if tag == "tuple" and isinstance(body, list):
            return tuple(walk(x) for x in body)
        if tag == "tensor":
            return tensor(body)
        if tag == "shared" and shared is not None and isinstance(body, str):
            found = shared(body)
            if found is None:
                raise WireError(f"no shared tensor {body[:40]!r}")
            return found
        if tag == "dict" and isinstance(body, dict):
            return {k: walk(x) for k, x in body.items()}
        if tag == "device" and isinstance(body, str):
            return torch.device(body)
        if tag == "dtype" and body in DTYPES:
            return DTYPES[body]
        if tag == "shape_only" and isinstance(body, list) and len(body) == 2:
            name, shape = _checked(*body)
            return torch.empty(shape, dtype=DTYPES[name], device="meta")
        if tag == "opaque" and isinstance(body, str):
            return Opaque(body[:200])
        raise WireError(f"unknown value in a message: {str(v)[:80]}")

    def tensor(body):
        if not (isinstance(body, list) and len(body) == 4):
            raise WireError("a tensor is [dtype, shape, offset, nbytes]")
        name, shape, offset, nbytes = body
        _checked(name, shape)
        dtype = DTYPES[name]
        numel = 1
        for n in shape:
            numel *= n
        if not (type(offset) is int and type(nbytes) is int and 0 <= offset and offset + nbytes <= len(blob)):
            raise WireError("a tensor's bytes lie outside the message")
        if nbytes != numel * dtype.itemsize:
            raise WireError(f"{nbytes} bytes for a {name} tensor of shape {tuple(shape)}")
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(blob, dtype=dtype, count=numel, offset=offset).reshape(shape).clone()

    try:
        return walk(tree)
    except RecursionError:
        raise WireError("a message nests too deeply") from None
    except WireError:
        raise
    except Exception as e:  # noqa: BLE001 (torch refusing a device name, a shape, …: the message is malformed)
        raise WireError(f"a value cannot be built: {type(e).__name__}: {str(e)[:120]}") from None


def _checked(name, shape):
    if name not in DTYPES:
        raise WireError(f"dtype not allowed on the wire: {str(name)[:40]}")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(type(n) is int and n >= 0 for n in shape)):
        raise WireError(f"bad tensor shape: {str(shape)[:80]}")
    return name, shape


def read_exact(sock, n):
    """Exactly ``n`` bytes from a blocking socket, or None at end of file."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def receive(sock, shared=None):
    """One message from a blocking socket (a trusted peer: the grader), or None at end of file."""
    header = read_exact(sock, HEADER.size)
    if header is None:
        return None
    n_text, n_blob = HEADER.unpack(header)
    body = read_exact(sock, n_text + n_blob)
    if body is None:
        return None
    return decode(bytes(body[:n_text]), memoryview(body)[n_text:], shared)


def projection(outputs, seed):
    """The scalar whose gradient a gradient check compares: sum over floating outputs of (output * w).sum().

    Each ``w`` has its output's shape, drawn as float64 standard normals from one CPU generator seeded
    with ``seed`` (in the order of ``outputs``, one draw per floating output whether or not it carries a
    gradient), then cast to the output's dtype. Returns None when no floating output carries a gradient.
    """
    generator = torch.Generator().manual_seed(seed)
    total = None
    for out in outputs:
        if not (isinstance(out, torch.Tensor) and out.is_floating_point()):
            continue
        w = torch.randn(out.shape, generator=generator, dtype=torch.float64).to(out.dtype)
        if out.requires_grad:
            term = (out * w).sum()
            total = term if total is None else total + term
    return total


def tensors_in(value):
    """The tensors in a nested value, in order (tuples, lists and dict values)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def nbytes(value):
    """The bytes of the tensors in a nested value (an instance record's state included)."""
    return sum(t.numel() * t.element_size() for t in tensors_in(value))
