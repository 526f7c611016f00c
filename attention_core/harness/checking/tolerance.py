"""Every allowance rule in one place: how far a computed value may be from what was expected.

* **Printed expectations** (what a notebook showed): half a unit of the last printed digit;
  plus a noise floor, the computation's own rounding noise (measured per check where it can
  be, see :class:`Numerics`); plus, for e-notation, ``finfo(float32).tiny`` (a float32
  subnormal such as 3.7835e-44 is 3.72e-44 in float64 and 0 under flush-to-zero); plus the
  propagated rounding of inputs that were themselves printed; plus ``atol + rtol * |printed|``
  where a case gives them.
* **Full-precision expectations** (values, oracles, snapshots): ``atol + rtol * |expected|``
  with torch.testing's per-dtype defaults (:data:`DEFAULT_TOLERANCES`), or an rtol and atol
  given together (a lone ``atol=0`` could still pass through rtol, so one without the other is
  refused where the case is read).
* **Low precision** (float16, bfloat16, against a float64 golden): :data:`LOW_PRECISION_K`
  times plain torch's own error in the same dtype, plus one unit in the last place at the
  golden's largest magnitude (:func:`low_precision_allowance`).
"""

import torch

# Rounding noise allowed on top of a printed unit: NOISE_K * eps(dtype) * |expected| per
# element, plus MEASURED_K times the computation's measured noise in that dtype (the largest
# |value in dtype - value in float64| over the tensor: a different BLAS, device or summation
# order moves results by about that much), plus one eps(dtype) * max|expected|. Without a
# measurement the floor is NOISE_K * eps(dtype) * max|expected|.
NOISE_K = 16
MEASURED_K = 8

# Printed inputs are rounded: their rounding is propagated by re-running a check in float64
# with every printed input moved within ±half its printed unit, PERTURBATIONS times; the
# largest change seen, times SAFETY, is added to the allowance.
PERTURBATIONS = 8
SAFETY = 2.0

# torch.testing.assert_close's defaults (its table in torch/testing/_comparison.py), keyed by
# the dtype of the value computed: (rtol, atol).
DEFAULT_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}

# FlashAttention's tests allow K times the error of plain torch in the same dtype against a
# float64 golden; the floor is their issue #1231 (where plain torch happens to be exact, a
# bound of K * 0 would fail a correct result one rounding away).
LOW_PRECISION_K = 2

_TINY = torch.finfo(torch.float32).tiny


def default_tolerance(dtype):
    """(rtol, atol) for full-precision comparisons in ``dtype``; exact for other dtypes."""
    return DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))


def full_allowance(expected, dtype, rtol=None, atol=None):
    """``atol + rtol * |expected|``: the case's pair, else the default of ``dtype``."""
    if rtol is None:
        rtol, atol = default_tolerance(dtype)
    return atol + rtol * expected.abs()


def printed_extra(printed, *, rtol=None, atol=None, spread=None, shape=None):
    """What a printed expectation allows beyond its digits and noise: a case's ``atol + rtol·|printed|``
    and the propagated rounding of printed inputs (``spread``, measured at the value's ``shape``), per
    shown element; None when neither applies."""
    extra = None
    if rtol is not None:
        extra = atol + rtol * printed.values.abs()
    if spread is not None and shape is not None and spread.shape == shape:
        gathered = spread[tuple(printed.index.T)] if printed.ndim else spread.reshape(1)
        extra = gathered if extra is None else extra + gathered
    return extra


# A gradient is compared with the float64 route's. A correct implementation in a lower dtype may
# round where the route does not (softmax through logsumexp loses |x| * eps in each exponent), so
# the allowance is not the route's own rounding alone: the gradient is also recomputed in float64
# with each floating input moved by ±eps(dtype) of itself (random signs, GRADIENT_PERTURBATIONS
# times), which is the error an algorithm that rounds once per input element makes; the larger of
# the two, times GRADIENT_K, widens the default (see grading's backward check). GRADIENT_K is wider
# than MEASURED_K: a backward pass compounds a forward's rounding, and correct styles were seen at up
# to 18 times the route's own rounding (softmax through logsumexp: its rows sum to 1 - eps * |lse|).
GRADIENT_PERTURBATIONS = 3
GRADIENT_K = 32


def gradient_tolerance(dtype, noise):
    """(rtol, atol) for a gradient against the float64 route: the dtype's default, widened by
    GRADIENT_K times ``noise``, the larger of the route's own rounding of that gradient in ``dtype``
    and its change under a relative ±eps(dtype) move of the inputs."""
    rtol, atol = default_tolerance(dtype)
    return rtol, atol + GRADIENT_K * noise


# A student's output and a known mistake's, computed in different processes and orders, agree
# when within this many times the per-dtype default tolerance (grading's diagnosis).
AGREEMENT = 10


def agreement_tolerance(dtype):
    """(rtol, atol) within which two implementations' outputs count as the same answer."""
    rtol, atol = default_tolerance(dtype)
    return AGREEMENT * rtol, AGREEMENT * atol


def noise_floor(dtype, expected):
    """``NOISE_K * eps(dtype) * max|expected|`` over the finite expected values."""
    if not dtype.is_floating_point:
        return 0.0
    finite = expected[torch.isfinite(expected)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return NOISE_K * torch.finfo(dtype).eps * scale


def printed_allowance(printed, dtype, extra=None, noise=None):
    """The allowed absolute difference for each element shown in ``printed``.

    Args:
        printed: a :class:`~attention_core.harness.languages.tensor_text.PrintedTensor`.
        dtype: the dtype the checked value was computed in (sets the noise floor).
        extra: a float64 tensor of shape ``(N,)`` (or a number) added on top: the
            propagated rounding of printed inputs, and a case's rtol/atol.
        noise: the computation's measured rounding noise in ``dtype`` (max |value in dtype -
            value in float64| over the tensor). Given, the floor is ``MEASURED_K * noise`` plus
            ``NOISE_K * eps * |expected|`` element by element plus ``eps * max|expected|``;
            absent, :func:`noise_floor`.
    """
    unit = printed.unit
    if printed.notation == "sci":
        # torch prints a value as 0.0000e+00 only when it is 0: no half unit for it.
        unit = torch.where(printed.values == 0, torch.zeros_like(unit), unit)
    if noise is None or not dtype.is_floating_point:
        floor = noise_floor(dtype, printed.values)
    else:
        relative = NOISE_K * torch.finfo(dtype).eps * torch.nan_to_num(printed.values.abs(), posinf=0.0)
        # One rounding at the tensor's scale besides: where this computation happened to come out
        # exact (a cancellation to 0), another summation order need not.
        floor = MEASURED_K * noise + relative + noise_floor(dtype, printed.values) / NOISE_K
    allowed = unit * 0.5 + floor
    if printed.notation == "sci":
        allowed = allowed + _TINY
    if extra is not None:
        allowed = allowed + extra
    return allowed


def low_precision_allowance(plain_error, golden, dtype):
    """The largest error a low-precision result may have against its float64 ``golden``.

    ``plain_error`` is plain torch's own largest error in ``dtype`` against the same golden.
    """
    finite = golden[torch.isfinite(golden)]
    floor = torch.finfo(dtype).eps * (float(finite.abs().max()) if finite.numel() else 0.0)
    return LOW_PRECISION_K * plain_error + floor


def max_change(a, b):
    """max |a - b| in float64, NaN and infinite differences left out (they are compared as such)."""
    change = torch.nan_to_num((a.to(torch.float64) - b.to(torch.float64)).abs(), nan=0.0, posinf=0.0)
    return float(change.max()) if change.numel() else 0.0


class Numerics:
    """What a check's own arithmetic allows, measured on the reference core and kept per check.

    One instance serves a run (:data:`NUMERICS`); tests call :meth:`clear` to measure afresh.
    ``targets(dtype, perturb)`` (given by the caller) runs the check's computation with the
    reference core on the CPU and returns its targets by name.
    """

    def __init__(self):
        self._measured = {}

    def clear(self):
        self._measured.clear()

    def measure(self, key, targets, *, dtype, rounded_inputs):
        """Per target: (rounding noise in ``dtype``, propagated spread of printed inputs).

        The noise is max |reference in ``dtype`` - reference in float64| over the target; the
        spread, when the case has printed inputs with digits after the point, is the largest
        change of each element over PERTURBATIONS float64 runs with the inputs moved within
        their printed rounding, times SAFETY.
        """
        if key not in self._measured:
            self._measured[key] = self._measure(targets, dtype, rounded_inputs)
        return self._measured[key]

    @staticmethod
    def _measure(targets, dtype, rounded_inputs):
        base = targets(torch.float64, None)
        own = targets(dtype, None)
        # Only where the float64 run really computed in float64 (an expression may cast with .float()).
        noise = {
            name: max_change(own[name], value)
            for name, value in base.items()
            if _comparable(own.get(name), value) and value.dtype == torch.float64
        }
        spread = {}
        if rounded_inputs:
            generator = torch.Generator().manual_seed(0)
            for _ in range(PERTURBATIONS):
                for name, value in targets(torch.float64, generator).items():
                    if _comparable(value, base.get(name)):
                        change = torch.nan_to_num((value - base[name]).abs(), nan=0.0, posinf=0.0)
                        spread[name] = torch.maximum(spread[name], change) if name in spread else change
        return noise, {name: change * SAFETY for name, change in spread.items()}


def _comparable(a, b):
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.is_floating_point()
        and b.is_floating_point()
        and a.shape == b.shape
    )


NUMERICS = Numerics()
