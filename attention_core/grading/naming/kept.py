"""A cache held to a size: what a grader keeps for a whole batch (the mistakes' results per check, the results
of replies already judged) stays within a known memory, however many submissions the batch grades."""

from collections import OrderedDict

import torch


class Kept:
    """At most ``most_bytes`` of tensors and ``most_entries`` entries, the least recently used dropped first."""

    def __init__(self, most_bytes, most_entries=100_000):
        self.most_bytes, self.most_entries = most_bytes, most_entries
        self._entries: OrderedDict = OrderedDict()  # key -> (value, its bytes)
        self.bytes = 0

    def get(self, key, make):
        """The value kept under ``key``, else ``make()``'s (kept where it fits)."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key][0]
        value = make()
        size = nbytes(value)
        if size <= self.most_bytes:
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.most_bytes or len(self._entries) > self.most_entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
        return value

    def __len__(self):
        return len(self._entries)


def nbytes(value, _depth=0):
    """The bytes of the tensors ``value`` holds: itself, those of a dict, list or tuple, or of an object's
    ``outputs`` (a Result's), to a few levels."""
    if isinstance(value, torch.Tensor):
        return value.nelement() * value.element_size()
    if _depth > 3:
        return 0
    if isinstance(value, dict):
        return sum(nbytes(v, _depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v, _depth + 1) for v in value)
    outputs = getattr(value, "outputs", None)
    return nbytes(outputs, _depth + 1) if isinstance(outputs, dict) else 0
