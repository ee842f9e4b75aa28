"""The fast launcher: re-launching a call signature seen before with as little host work as the
launch itself (issue 15).

Shapes, strides and dtypes are part of the call key, so every integer argument of every kernel is
a constant of the signature; only the tensors' addresses change. A :class:`FastLauncher` is built
once per signature from the slow path's plan and compiled kernels, and per call it only
allocates the outputs, reads the addresses, and calls Triton's compiled launcher:

- **Addresses, not tensors.** Pointer arguments are passed as ints (``data_ptr()``): Triton's C
  launcher then skips the ``data_ptr`` method call and the driver query
  (``cuPointerGetAttribute``) it makes per tensor argument. The call key holds each tensor's
  device and 16-byte alignment, which that query and Triton's pointer specialisation check.
- **Triton's C entry point.** Where the compiled kernel needs no per-launch scratch memory, the
  launcher calls the C ``launch`` function of Triton's ``CudaLauncher`` directly with the
  arguments packed as it expects (the Python ``CudaLauncher.__call__`` in between only computes
  the two scratch allocations, both empty then); otherwise ``CompiledKernel.run``.
- **One allocation for what only dtriton reads** (:meth:`FastLauncher.packed`): a step's saved
  statistics and intermediate buffers live in one byte buffer, each at an aligned offset; the
  kernels get ``base + offset`` as their pointer, and a later launcher reading them (the
  backward's) takes the buffer and the offsets (``remap``). Returned outputs stay separate tensors.

Zero-initialised buffers (split-K atomics into a partial sum) share one zero-filled allocation: one
allocation and one fill kernel instead of one each (an int32 one: the fill kernel of a float32 buffer
of the same bytes, not a byte-wise one). Zero-initialised outputs and tensors a host TMA
descriptor reads stay separate tensors (a descriptor needs the tensor). Arrival counters
(``split_mode="last"``) are no allocation: the stream's counter memory, which the kernels leave
zero (:mod:`dtriton.backends.triton.counters`), its address read per call.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from ...ir import InputTensor
from .counters import counter_address
from .launch import descriptor

__all__ = ["FastLauncher", "PACK_ALIGN", "C_ENTRY_MIDDLE"]

#: byte alignment of each value inside a packed buffer (Triton specialises pointers on 16 bytes;
#: 256 keeps every value on its own 128-byte line as separate allocations are)
PACK_ALIGN = 256
#: arguments between the stream and the kernel's own in a call of Triton 3.6's C ``launch``
#: (:func:`_entry`): the function, cooperative grid, PDL, the two scratch buffers, the packed
#: metadata (num_warps, num_ctas, shared bytes), the launch metadata and the two hooks
C_ENTRY_MIDDLE = 9


def _entry(ck) -> tuple[Any, tuple]:
    """``(function, arguments between the stream and the kernel's own)`` calling compiled kernel
    ``ck``: Triton 3.6's C ``launch`` of its ``CudaLauncher`` when the kernel needs no scratch
    memory per launch, else ``CompiledKernel.run`` (which allocates it)."""
    run = ck.run
    c_launch = getattr(run, "launch", None)
    if (c_launch is not None and getattr(run, "global_scratch_size", 1) == 0
            and getattr(run, "profile_scratch_size", 1) == 0):
        return c_launch, (ck.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                          ck.packed_metadata, None, None, None)
    return run, (ck.function, ck.packed_metadata, None, None, None)


class FastLauncher:
    """Re-launch a call signature seen before without re-binding or re-specialising.

    ``launcher(args)`` runs every kernel on ``args`` (the call's arguments, positional, of the
    signature it was built for) and returns the outputs: one tensor for a single output, else a
    tuple; a :meth:`packed` launcher returns its kept outputs followed by the packed buffer.

    Args:
        alg: the algorithm.
        plan: the runtime's plan of the call (its program and launches).
        b: the call's binding (sizes, dtypes, device).
        compiled: the kernels the slow path compiled, in launch order.
        args: the call's arguments (their strides are constants of the launcher).
    """

    def __init__(self, alg, plan, b, compiled: list, args: Sequence[Any]):
        sizes = b.axis_sizes
        self.device = b.device
        from triton.runtime import driver
        self.get_stream = driver.active.get_current_stream
        self.dev_index = b.device.index if b.device.index is not None else torch.cuda.current_device()
        zero = set(plan.program.output_direct)
        # slots: ("arg", position) an argument; ("new", k) allocation k (the outputs, then the buffers)
        slot_of: dict[str, tuple[str, int]] = {}
        strides: dict[str, tuple] = {}
        allocs = []   # (shape, dtype, zero-initialised)
        for pos, p in enumerate(alg.params):
            if isinstance(p, InputTensor):
                slot_of[p.name] = ("arg", pos)
                strides[p.name] = tuple(args[pos].stride())
        named = [(o.name, [sizes[a] for a in o.layout], dt, o.name in zero) for o, dt in zip(alg.outputs, b.out_dtypes)]
        named += [(n, bs.lead + [sizes[a] for a in bs.axes], bs.torch_dtype, bs.zero) for n, bs in plan.program.buffers.items()
                  if not bs.counter]
        # arrival counters (split_mode="last"): the stream's zero counter memory, read per call
        self.counter_numel = 0
        for n, bs in plan.program.buffers.items():
            if bs.counter:
                shape = [sizes[a] for a in bs.axes]
                slot_of[n] = ("ctr", 0)
                strides[n] = tuple(torch.empty(shape, device="meta").stride())
                self.counter_numel = max(self.counter_numel, math.prod(shape))
        for name, shape, dt, z in named:
            slot_of[name] = ("new", len(allocs))
            allocs.append((tuple(shape), dt, z))
            strides[name] = tuple(torch.empty(shape, device="meta").stride())
        self.n_out = len(alg.outputs)
        self.out_dtypes = tuple(b.out_dtypes)   # of the outputs, in order
        self.allocs = allocs
        self.scal_types = {pos: p.pytype for pos, p in enumerate(alg.params) if not isinstance(p, InputTensor)}
        scal = {f"s_{p.name}": pos for pos, p in enumerate(alg.params) if not isinstance(p, InputTensor)}
        # per launch: (entry, grid, middle arguments, pointer slots, constant tail, per-call extras)
        self.kernels = []
        #: per kept kernel, its parameters' Triton types (``src.signature``'s values, constexprs
        #: included), or None when its launch is not Triton's C entry point
        #: (:mod:`dtriton.backends.triton.native` packs the parameters from them)
        self.param_types: list[tuple | None] = []
        self.desc_slots: set[tuple[str, int]] = set()
        for L, ck in zip(plan.launches, compiled):
            m = L.meta
            grid = L.grid(sizes)
            if math.prod(grid) == 0:
                continue   # nothing to do on this signature
            ptrs = tuple(slot_of[t] for t in m.tensors)
            tail: list = []
            for t in m.tensors:
                tail.extend(strides[t][: m.tensor_ndim[t]])
            tail.extend(b.sizes[x[4:]] if x.startswith("dim_") else sizes[x[5:]] for x in m.sizes)
            extras = []   # (index in the call, ("scalar", position) | ("desc", (slot, box, perm)))
            for x in m.scalars:
                extras.append((len(ptrs) + len(tail), ("scalar", scal[x])))
                tail.append(None)
            for _, t, box, perm in m.descs:   # rebuilt per call: the tensor's address changes
                extras.append((len(ptrs) + len(tail), ("desc", (slot_of[t], box, perm))))
                self.desc_slots.add(slot_of[t])
                tail.append(None)
            tail.extend(m.consts[c] for c in sorted(m.consts))
            fn, mid = _entry(ck)
            sig = getattr(getattr(ck, "src", None), "signature", None)
            self.param_types.append(tuple(sig.values()) if len(mid) == C_ENTRY_MIDDLE and isinstance(sig, dict)
                                    else None)
            self.kernels.append((fn, grid + (1,) * (3 - len(grid)), mid, ptrs, tuple(tail), tuple(extras)))
        self._layout(len(allocs), {}, None)

    # -- packing ---------------------------------------------------------------------------------
    def _layout(self, keep: int, remap: dict[int, tuple[int, int]], packed: dict[int, int] | None,
                zeroed: dict[int, int] | None = None) -> None:
        """Fix the per-call plan: allocations ``< keep`` and those in neither ``packed`` nor
        ``zeroed`` are separate tensors; ``packed`` maps an allocation to its byte offset in the
        packed buffer (None: no buffer), ``zeroed`` a zero-initialised buffer to its offset in one
        zero-filled buffer (one fill instead of one per buffer); ``remap`` maps an argument position
        to ``(position of a packed buffer among the arguments, byte offset)``."""
        self.keep, self.remap = keep, dict(remap)
        #: packed allocation -> (byte offset in the packed buffer, shape, dtype); None: no buffer
        self.offsets = {k: (off, *self.allocs[k][:2]) for k, off in packed.items()} if packed else None
        sep = [k for k in range(len(self.allocs)) if k not in (packed or {}) and k not in (zeroed or {})]
        where = {k: (i, 0) for i, k in enumerate(sep)}
        self.separate = [(torch.zeros if self.allocs[k][2] else torch.empty, self.allocs[k][0], self.allocs[k][1])
                         for k in sep]
        for group, alloc in ((packed, torch.empty), (zeroed, torch.zeros)):
            if group:
                nbytes = max(off + _nbytes(*self.allocs[k][:2]) for k, off in group.items())
                where.update({k: (len(self.separate), off) for k, off in group.items()})
                if alloc is torch.zeros:   # only kernels read it: 4-byte words, filled as a float32 buffer is
                    self.separate.append((alloc, (-(-nbytes // 4),), torch.int32))
                else:   # bytes: the backward's general path views the statistics in it (ForwardStep.unpacked)
                    self.separate.append((alloc, (nbytes,), torch.uint8))
        # the values a call reads addresses from: the arguments used as pointers, then the allocations
        used = sorted({self.remap.get(k, (k, 0))[0] for *_, ptrs, _, _ in self.kernels for kind, k in ptrs
                       if kind == "arg"})
        self.arg_reads = tuple(used)
        index = {("arg", p): i for i, p in enumerate(used)}
        for k in range(len(self.separate)):
            index[("new", k)] = len(used) + k

        def source(slot):
            kind, k = slot
            if kind == "ctr":   # the counters' address, after the allocations'
                return len(used) + len(self.separate), 0
            if kind == "arg":
                pos, off = self.remap.get(k, (k, 0))
                return index[("arg", pos)], off
            i, off = where[k]
            return index[("new", i)], off
        self.calls = [(fn, grid, mid, tuple(source(s) for s in ptrs), tail, extras)
                      for fn, grid, mid, ptrs, tail, extras in self.kernels]
        self.where = where
        # returned: the kept outputs (allocations < keep are separate: their index is their position)
        self.returns = tuple(where[k][0] for k in range(min(keep, self.n_out)))
        if packed:
            self.returns += (len(sep),)   # the packed buffer (the zero-filled one holds buffers only)
        self.single = len(self.returns) == 1
        self.call = None if self.desc_slots else _generated(self)

    def packed(self, keep: int, remap: dict[int, tuple[int, int]] | None = None,
               buffers: bool = True) -> "FastLauncher | None":
        """A copy whose allocations after the first ``keep`` outputs (the rest of the outputs, and
        the intermediate buffers when ``buffers``) live in one byte buffer, returned after the
        kept outputs; ``remap`` maps an argument position to ``(position of a packed buffer among
        the new arguments, byte offset)``: that argument's value is read from another launcher's
        packed buffer. Zero-initialised buffers share one zero-filled allocation (one fill); a
        zero-initialised output and tensors a TMA descriptor reads stay separate; None when such
        an output is beyond ``keep`` (it could not be returned) or a descriptor reads a remapped
        argument. :attr:`offsets` then maps each packed allocation to
        ``(byte offset, shape, dtype)``."""
        new = object.__new__(FastLauncher)
        new.__dict__.update(self.__dict__)
        remap = dict(remap or {})
        if any(("arg", k) in self.desc_slots for k in remap):
            return None
        offsets, zeroed, ends = {}, {}, [0, 0]
        for k in range(keep, len(self.allocs)):
            shape, dt, z = self.allocs[k]
            if (z and k < self.n_out) or ("new", k) in self.desc_slots:
                if k < self.n_out:
                    return None   # a saved output that cannot be packed: keep the plain launcher
                continue
            if k >= self.n_out and not buffers:
                continue
            group = zeroed if z else offsets
            group[k] = ends[z]
            ends[z] += -(-_nbytes(shape, dt) // PACK_ALIGN) * PACK_ALIGN
        new._layout(keep, remap, offsets or None, zeroed or None)
        return new

    # -- calls -----------------------------------------------------------------------------------
    def __call__(self, args):
        """Launch every kernel on ``args`` (positional); returns the outputs (see the class).
        ``self.call``, where there is one, is the same as a function printed for this launcher."""
        if self.call is not None:
            return self.call(args)
        dev = self.device
        new = [alloc(shape, dtype=dt, device=dev) for alloc, shape, dt in self.separate]
        return self._launch(args, new)

    def takes(self, outs: Sequence[torch.Tensor]) -> bool:
        """Whether ``outs`` (one tensor per output, an ``out=`` call's) can stand for the outputs this
        launcher allocates: each has its output's shape and dtype, is on its device, contiguous and
        16-byte aligned, as a fresh allocation is (the kernels were compiled, and TMA descriptors are
        built, for such addresses). Only a plain launcher (not :meth:`packed`) takes them. The caller
        checks that they overlap no input (an in-place call takes the slow path's checks)."""
        if self.offsets is not None or self.remap or len(outs) != self.n_out:
            return False
        return all(tuple(t.shape) == shape and t.dtype == dt and t.device == self.device and t.is_contiguous()
                   and t.data_ptr() % 16 == 0 for t, (shape, dt, _) in zip(outs, self.allocs))

    def into(self, args, outs: Sequence[torch.Tensor]):
        """Launch every kernel on ``args`` writing the outputs into ``outs`` (which :meth:`takes`
        accepted; a zero-initialised output, accumulated by atomics, is zeroed first). Returns the
        output tensor, or the tuple of them, as a call does."""
        dev = self.device
        new = [(outs[k].zero_() if alloc is torch.zeros else outs[k]) if k < self.n_out
               else alloc(shape, dtype=dt, device=dev) for k, (alloc, shape, dt) in enumerate(self.separate)]
        return self._launch(args, new)

    def _launch(self, args, new: list):
        """The launches of :meth:`__call__` with the allocations ``new`` (separate tensors, in order)."""
        addr = [args[p].data_ptr() for p in self.arg_reads]
        addr += [t.data_ptr() for t in new]
        stream = self.get_stream(self.dev_index)
        if self.counter_numel:
            addr.append(counter_address(self.device, self.counter_numel, stream))
        for fn, grid, mid, srcs, tail, extras in self.calls:
            ptrs = [addr[i] + off for i, off in srcs]
            if extras:
                tail = self._extras(list(tail), len(ptrs), extras, args, new)
            fn(*grid, stream, *mid, *ptrs, *tail)
        if self.single:
            return new[self.returns[0]]
        return tuple(new[i] for i in self.returns)

    def _extras(self, tail: list, n_ptrs: int, extras, args, new) -> list:
        """Scalars (converted as the slow path does) and TMA descriptors into ``tail``."""
        for idx, (kind, k) in extras:
            if kind == "desc":
                (src, pos), box, perm = k
                t = args[pos] if src == "arg" else new[self.where[pos][0]]   # never packed nor remapped
                tail[idx - n_ptrs] = descriptor(t, box, perm)
            else:
                tail[idx - n_ptrs] = float(args[k]) if self.scal_types[k] is float else int(args[k])
        return tail


def _nbytes(shape: tuple, dtype: torch.dtype) -> int:
    """Bytes of a contiguous tensor of ``shape`` and ``dtype``."""
    n = dtype.itemsize
    for s in shape:
        n *= s
    return n


def _template(shape: tuple, dtype: torch.dtype, device) -> torch.Tensor | None:
    """A one-element tensor expanded to ``shape``: ``torch.empty_like`` of it allocates a
    contiguous ``shape`` tensor without parsing a shape, dtype and device per call (0.98 against
    1.73 us on the CPU); None where torch would not give contiguous strides."""
    like = torch.empty((), dtype=dtype, device=device).expand(shape)
    got = torch.empty_like(like, device="meta") if device.type == "cuda" else torch.empty_like(like)
    want = torch.empty(shape, device="meta").stride()
    return like if tuple(got.stride()) == tuple(want) and tuple(got.shape) == tuple(shape) else None


def _literal(v) -> bool:
    """Whether ``v`` prints as itself (an int, a bool or None)."""
    return v is None or type(v) in (int, bool)


def _generated(fl: FastLauncher):
    """The function ``call(args)`` doing what :meth:`FastLauncher.__call__` does for ``fl``'s
    layout, printed with every constant in place: one straight sequence of allocations, address
    reads and launch calls (about a third of the generic loop's Python work per call). Launchers
    with TMA descriptors keep the generic loop."""
    env: dict[str, Any] = {"get_stream": fl.get_stream, "dev_index": fl.dev_index, "dev": fl.device,
                           "counter_address": counter_address,
                           "empty_like": torch.empty_like, "zeros_like": torch.zeros_like}

    def name(v, hint: str) -> str:
        if _literal(v):
            return repr(v)
        key = f"{hint}{len(env)}"
        env[key] = v
        return key
    lines = ["def call(args):"]
    lines += [f"    a{p} = args[{p}].data_ptr()" for p in fl.arg_reads]
    for k, (alloc, shape, dt) in enumerate(fl.separate):
        like = _template(shape, dt, fl.device) if alloc in (torch.empty, torch.zeros) else None
        if like is not None:
            lines.append(f"    n{k} = {'empty' if alloc is torch.empty else 'zeros'}_like({name(like, 'like')})")
        else:
            lines.append(f"    n{k} = {name(alloc, 'alloc')}({shape!r}, dtype={name(dt, 'dtype')}, device=dev)")
        lines.append(f"    p{k} = n{k}.data_ptr()")
    lines.append("    s = get_stream(dev_index)")
    addr = [f"a{p}" for p in fl.arg_reads] + [f"p{k}" for k in range(len(fl.separate))]
    if fl.counter_numel:   # the stream's zero counter memory (split_mode="last")
        lines.append(f"    c = counter_address(dev, {fl.counter_numel}, s)")
        addr.append("c")
    for fn, grid, mid, srcs, tail, extras in fl.calls:
        scal = {idx - len(srcs): k for idx, (kind, k) in extras}   # only scalars here: no descriptors
        ptrs = [addr[i] + (f" + {off}" if off else "") for i, off in srcs]
        rest = [(f"{'float' if fl.scal_types[scal[j]] is float else 'int'}(args[{scal[j]}])" if j in scal
                 else name(v, "c")) for j, v in enumerate(tail)]
        vals = [*map(str, grid), "s", *(name(v, "m") for v in mid), *ptrs, *rest]
        lines.append(f"    {name(fn, 'launch')}({', '.join(vals)})")
    ret = [f"n{i}" for i in fl.returns]
    lines.append(f"    return {ret[0] if fl.single else '(' + ', '.join(ret) + ',)'}")
    exec(compile("\n".join(lines) + "\n", "<dtriton fast launcher>", "exec"), env)   # noqa: S102
    call = env["call"]
    call.source = "\n".join(lines)
    return call
