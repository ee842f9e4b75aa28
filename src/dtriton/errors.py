"""Exceptions raised by dtriton.

Every error names the argument, axis or stage at fault, what was expected and how to fix it.
All derive from :class:`DTritonError`, so ``except dt.DTritonError`` catches any of them.
"""

from __future__ import annotations


class DTritonError(Exception):
    """Base class of every error dtriton raises on purpose."""


class AlgorithmError(DTritonError, ValueError):
    """The algorithm (index-notation program) is malformed: e.g. an axis indexes two differently
    sized dimensions, an output leaves an axis free, or an operand is not an expression."""


class MethodError(AlgorithmError, AttributeError):
    """A torch tensor method called on an expression while an algorithm is traced (``X[i].exp()``,
    ``.sum()``, ``.float()``, ``.item()``): the message says which ``dt`` function to write. An
    :class:`AttributeError` too, so ``hasattr(expr, "sum")`` is False and ``getattr`` with a
    default returns it, as for any attribute an expression does not have."""


class ShapeError(DTritonError, ValueError):
    """Call-time arguments do not match the algorithm's signature: wrong number of dims,
    inconsistent symbolic sizes, unsupported dtypes, or tensors on different devices."""


class DTypeError(ShapeError, TypeError):
    """A call-time tensor of the wrong dtype: an ``out=`` tensor whose dtype is not the output's
    (torch's result dtype of the algorithm for the call's inputs), an input of a dtype dtriton does
    not compute with (complex, ``uint16``), a float tensor used as a gather index. The message names
    the argument or output, the dtype expected and the one given, and how to fix it. A
    :class:`ShapeError` too (dtriton raised that for these before, so ``except dt.ShapeError`` still
    catches them), and a :class:`TypeError`, as Python's own error for a value of the wrong type is."""


class IndexRangeError(ShapeError, IndexError):
    """An index reads outside a dimension of a tensor: ``X[i, j + 1]`` on the last column, a gather
    index out of range. The message names the tensor, the dim, the index expression and the values
    it takes, and how to fix it (pad the tensor, guard the read with ``dt.where``, or change the
    sizes). Raised before anything runs when the sizes prove it, else when the call is checked
    (always on the interpreter and in the reference; on the GPU with ``check_indices=True``; unchecked,
    a GPU kernel reads NaN there for a floating-point tensor, never memory outside it). An
    :class:`IndexError` too, as torch's own indexing error is."""


class IntegerOpError(AlgorithmError, ShapeError):
    """``//`` or ``%`` of a value that is not an integer (``X_float[i] // 2.0``): they are integer
    arithmetic in dtriton (indices such as ``h // G``, ``i % W``). Raised when the call types the
    operands. An :class:`AlgorithmError` (the algorithm asks for what dtriton does not compute), and
    a :class:`ShapeError` too (dtriton raised that for it before, so ``except dt.ShapeError`` still
    catches it)."""


class ZeroDivisorError(ShapeError, ZeroDivisionError):
    """An integer ``//`` or ``%`` meets a divisor that is 0 on the call's data or arguments
    (``X[i // g]`` called with ``g = 0``, ``A[i] % B[i]`` where ``B`` holds a 0): torch raises
    ZeroDivisionError there, and so do the reference evaluator and kernels on the interpreter
    (on the GPU the result is undefined unless the kernel checks its call, ``check_indices=True``).
    The message names the expression, the divisor, where it is 0 and how to fix it. A literal
    divisor 0 is an :class:`AlgorithmError` when the algorithm is defined. A
    :class:`ZeroDivisionError` too, as Python's own error is."""


class ScheduleError(DTritonError, ValueError):
    """The schedule is illegal for the algorithm: unknown axis or stage, tile that is not a power
    of two, split of a non-reduction axis, an output axis neither on the grid nor tiled, or an
    illegal fusion."""


class UnknownFieldError(ScheduleError, TypeError):
    """A keyword that :class:`~dtriton.Schedule`, :class:`~dtriton.StageSchedule` or
    :class:`~dtriton.Space` does not have (a misspelling such as ``Schedule(tiles=...)``). The
    message names the keyword, the closest field and every valid one. It is a :class:`TypeError`
    too, as Python's own error for an unexpected keyword is, so ``except TypeError`` still works."""


class CompileError(DTritonError, RuntimeError):
    """Triton failed to compile generated source that passed validation (a dtriton bug or a
    resource limit such as shared memory). The message carries the kernel name and the cause."""


class ResourceError(ScheduleError, CompileError):
    """A kernel of the schedule exceeds a resource limit of the backend: a block over Triton's
    2**20 elements, or shared memory or registers at compile time. A default schedule (no
    schedule given) shrinks its tiles and stages and retries, with a :class:`ScheduleWarning`;
    a given schedule needs smaller tiles or fewer stages. Both a :class:`ScheduleError` and a
    :class:`CompileError`, so code catching either still does."""


class ScheduleWarning(UserWarning):
    """A schedule knob that cannot take effect for this call and was dropped (the kernel is still
    correct), e.g. ``warp_specialize=True`` on a loop whose loads are not all TMA, or
    ``split_mode="partials"`` on a call that splits no reduction axis."""


def article(word: str) -> str:
    """The indefinite article of ``word`` in a message: "an" before a vowel (an argmax, an int), else "a"."""
    return "an" if word[:1].lower() in "aeiou" else "a"
