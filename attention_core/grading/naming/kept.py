"""A cache held to a size: what a grader keeps for a whole batch (the mistakes' results per check, the results
of replies already judged) stays within a known memory, however many submissions the batch grades."""

from collections import OrderedDict

import torch

from attention_core.grading.server import wire


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


def nbytes(value):
    """The bytes of the tensors ``value`` holds (nested in dicts, lists and tuples), or a Result's: its ``outputs``
    and what its failures keep of their own (the compared values and their allowance; not the expected values,
    which the check holds)."""
    outputs = getattr(value, "outputs", None)
    if not isinstance(outputs, dict):
        return wire.nbytes(value)
    kept = [getattr(f.mismatch, name, None) for f in value.failures for name in ("actual", "allowed")]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept if _on_cpu(t)}
    return wire.nbytes(outputs) + sum(storages.values())


def _on_cpu(value):
    return isinstance(value, torch.Tensor) and value.device.type == "cpu"
