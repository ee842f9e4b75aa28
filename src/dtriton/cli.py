"""The ``dtriton`` command line.

::

    dtriton explore FILE.py:ALGORITHM --shape M=4096,N=4096,K=4096 --dtype float16 --budget 60
    dtriton show FILE.py:ALGORITHM --shape M=64,N=64,K=64 [--schedule JSON | --tuned]
    dtriton bench FILE.py:ALGORITHM --shape M=64,N=1000 [--budget 60 | --tuned | --schedule JSON] [--plot FILE]
                  [--baseline FILE.py:FUNCTION] [--dtype L=int64]
    dtriton tuning [list | clear [--stale] | export FILE | import FILE] [--db FILE]
    dtriton demo [ARGS...]

``FILE.py:ALGORITHM`` names an ``@dt.algorithm`` in a Python file (``package.module:ALGORITHM``
also works). Inputs are random tensors made from the algorithm's signature (normal floats of
``--dtype``; ``--dtype NAME=DTYPE`` sets one input's dtype, e.g. ``--dtype L=int64``; integer
tensors get valid indices when they index a dim, else integers in [0, the largest size]), on
CUDA when it is available unless ``--device`` says otherwise.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import click
import torch

from .errors import DTritonError
from .ir import Algorithm, InputTensor, Load, topo_order
from .runtime import Kernel
from .schedule import Schedule
from .tune import (INTERPRETER, Space, TunedKernel, TuningDatabaseError, TuningDB, benchmark as run_benchmark, dtriton_version,
                   explore as run_explore, triton_version)

__all__ = ["main", "load_algorithm", "load_function", "parse_shape", "parse_dtypes", "make_inputs"]

_DTYPES = {"float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
           "float64": torch.float64, "fp64": torch.float64, "double": torch.float64}
_INT_DTYPES = {"int64": torch.int64, "long": torch.int64, "int32": torch.int32, "int": torch.int32,
               "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8}


def load_algorithm(spec: str):
    """Load ``"path/to/file.py:NAME"`` (or ``"package.module:NAME"``) and return the algorithm.

    Raises ``click.BadParameter`` when the file, module or name is missing or the object is not
    an ``@dt.algorithm``."""
    mod, where, name = _load_module(spec, "ALGORITHM", "kernels.py:matmul")
    obj = getattr(mod, name, None)
    if obj is None:
        algs = [k for k, v in vars(mod).items() if isinstance(v, Algorithm)]
        raise click.BadParameter(f"{where} has no {name!r}; algorithms there: {algs or 'none'}")
    if not isinstance(obj, Algorithm):
        raise click.BadParameter(f"{where}:{name} is a {type(obj).__name__}, not an @dt.algorithm")
    return obj


def load_function(spec: str):
    """Load the callable ``"path/to/file.py:NAME"`` (or ``"package.module:NAME"``): ``--baseline``.

    Raises ``click.BadParameter`` when the file, module or name is missing or not callable."""
    mod, where, name = _load_module(spec, "FUNCTION", "baseline.py:torch_softmax")
    obj = getattr(mod, name, None)
    if obj is None or not callable(obj):
        funcs = [k for k, v in vars(mod).items() if callable(v) and not k.startswith("_")]
        raise click.BadParameter(f"{where} has no function {name!r}; callables there: {funcs or 'none'}")
    return obj


def _load_module(spec: str, what: str, example: str):
    """``(module, where, name)`` of ``"WHERE:NAME"``, WHERE a file or an importable module."""
    if ":" not in spec:
        raise click.BadParameter(f"{spec!r}: expected FILE.py:{what}, e.g. {example}")
    where, _, name = spec.rpartition(":")
    path = Path(where)
    if where.endswith(".py") or path.exists():
        if not path.is_file():
            raise click.BadParameter(f"no such file: {where}")
        modname = f"dtriton_cli_{abs(hash(str(path.resolve())))}"
        sp = importlib.util.spec_from_file_location(modname, path)
        if sp is None or sp.loader is None:
            raise click.BadParameter(f"cannot import {where}")
        mod = importlib.util.module_from_spec(sp)
        sys.path.insert(0, str(path.resolve().parent))
        try:
            sys.modules[modname] = mod
            sp.loader.exec_module(mod)
        finally:
            try:
                sys.path.remove(str(path.resolve().parent))
            except ValueError:  # pragma: no cover
                pass
    else:
        try:
            mod = importlib.import_module(where)
        except ImportError as e:
            raise click.BadParameter(f"cannot import module {where!r}: {e}") from e
    return mod, where, name


def parse_shape(text: str | None) -> dict[str, int]:
    """``"M=4096,N=4096"`` (commas or spaces) -> ``{"M": 4096, "N": 4096}``.
    Raises ``click.BadParameter`` for malformed entries."""
    out: dict[str, int] = {}
    for part in (text or "").replace(",", " ").split():
        name, eq, val = part.partition("=")
        if not eq or not name:
            raise click.BadParameter(f"{part!r}: expected NAME=SIZE, e.g. M=4096")
        try:
            n = int(val)
        except ValueError as e:
            raise click.BadParameter(f"{part!r}: size must be an integer") from e
        if n < 0:
            raise click.BadParameter(f"{part!r}: size must be >= 0")
        out[name] = n
    return out


def _index_tensors(alg) -> dict[str, str]:
    """Tensors used as gather indices -> the size symbol of the dim they index."""
    idx: dict[str, str] = {}
    for n in topo_order([o.expr for o in alg.outputs]):
        if isinstance(n, Load):
            for d, e in zip(n.tensor.dims, n.index):
                for m in topo_order([e]):
                    if isinstance(m, Load):
                        idx.setdefault(m.tensor.name, d)
    return idx


def parse_dtypes(items) -> tuple[torch.dtype, dict[str, torch.dtype]]:
    """``--dtype`` values -> ``(float dtype, {input name: dtype})``: ``"float16"`` sets the float
    inputs' dtype (default float32), ``"L=int64"`` one input's (any float or integer dtype).
    Raises ``click.BadParameter`` for an unknown dtype or two global ones."""
    glob: list[torch.dtype] = []
    per: dict[str, torch.dtype] = {}
    for it in items or ():
        name, eq, val = it.rpartition("=")
        if not eq:
            if it not in _DTYPES:
                raise click.BadParameter(f"--dtype {it!r}: one of {sorted(set(_DTYPES))} (the float inputs' "
                                         "dtype), or NAME=DTYPE for one input, e.g. L=int64")
            glob.append(_DTYPES[it])
            continue
        dt_ = _DTYPES.get(val) or _INT_DTYPES.get(val)
        if not name or dt_ is None:
            raise click.BadParameter(f"--dtype {it!r}: expected NAME=DTYPE with DTYPE one of "
                                     f"{sorted(set(_DTYPES) | set(_INT_DTYPES))}, e.g. L=int64")
        per[name] = dt_
    if len(set(glob)) > 1:
        raise click.BadParameter(f"--dtype given {len(glob)} float dtypes; give one (and NAME=DTYPE per input)")
    return (glob[0] if glob else torch.float32), per


def make_inputs(alg, sizes: dict[str, int], dtype: torch.dtype, device: str, scalars: dict[str, float] | None = None,
                seed: int = 0, dtypes: dict[str, torch.dtype] | None = None) -> tuple:
    """Random arguments for ``alg``: ``torch.randn`` of ``dtype`` for float tensors, valid int64
    indices for gather-index tensors, ``scalars`` (default 1) for scalar parameters. ``dtypes``
    overrides one tensor input's dtype: a float one is normal, an integer one holds valid indices
    (``0..n-1``) when it indexes a dim of size ``n``, else integers in ``[0, largest size]``
    (lengths for a mask such as ``where(j < L[i], ...)``).

    Raises ``click.BadParameter`` when a size symbol of the signature is missing from ``sizes``
    or ``sizes`` names one the signature does not have, ``dtypes`` names no tensor input, or a
    scalar value is not an integer for an ``int`` parameter (``--scalar stride=1.5``)."""
    need = list(dict.fromkeys(d for p in alg.params if isinstance(p, InputTensor) for d in p.dims))
    missing = [d for d in need if d not in sizes]
    if missing:
        raise click.BadParameter(f"--shape misses {missing}; {alg.name} needs sizes for {need}")
    extra = [d for d in sizes if d not in need]
    if extra:
        raise click.BadParameter(f"--shape names {extra}, which {alg.name} does not use; its sizes are {need}")
    dtypes = dict(dtypes or {})
    names = [p.name for p in alg.params if isinstance(p, InputTensor)]
    bad = [n for n in dtypes if n not in names]
    if bad:
        raise click.BadParameter(f"--dtype names {bad}, which are not tensor inputs of {alg.name}; its tensor "
                                 f"inputs are {names}")
    g = torch.Generator().manual_seed(seed)
    idx = _index_tensors(alg)
    args: list[Any] = []
    for p in alg.params:
        if isinstance(p, InputTensor):
            shape = [sizes[d] for d in p.dims]
            want = dtypes.get(p.name, torch.int64 if p.name in idx else dtype)
            if want.is_floating_point:
                t = torch.randn(shape, generator=g, dtype=torch.float32).to(want)
            else:
                hi = max(1, sizes[idx[p.name]]) if p.name in idx else max(sizes.values(), default=0) + 1
                t = torch.randint(0, hi, shape, generator=g, dtype=torch.int64).to(want)
            args.append(t.to(device))
        else:
            v = (scalars or {}).get(p.name, 1.0)
            if p.pytype is int and not float(v).is_integer():
                raise click.BadParameter(f"--scalar {p.name}={v:g}: {p.name} is an int argument of {alg.name}; give "
                                         f"an integer")
            args.append(p.pytype(v))
    return tuple(args)


def _device(choice: str) -> str:
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise click.BadParameter("--device cuda but torch sees no CUDA device")
    return choice


def _scalars(items) -> dict[str, float]:
    """``--scalar`` values: ``NAME=VALUE`` each, several per option separated by commas or spaces
    (``--scalar stride=2,padding=1``, as ``--shape`` takes sizes). Raises ``click.BadParameter``
    for malformed entries."""
    out = {}
    for it in (part for item in items or () for part in item.replace(",", " ").split()):
        name, eq, val = it.partition("=")
        if not eq:
            raise click.BadParameter(f"--scalar {it!r}: expected NAME=VALUE")
        try:
            out[name] = float(val)
        except ValueError as e:
            raise click.BadParameter(f"--scalar {it!r}: VALUE must be a number") from e
    return out


def _inputs_from_options(spec, shape, dtype, device, scalar, seed):
    alg = load_algorithm(spec)
    glob, per = parse_dtypes(dtype)
    args = make_inputs(alg, parse_shape(shape), glob, _device(device), _scalars(scalar), seed, per)
    return alg, args


_common = [
    click.argument("spec", metavar="FILE.py:ALGORITHM"),
    click.option("--shape", default="", help="sizes of the signature's size symbols, e.g. M=4096,N=4096,K=4096"),
    click.option("--dtype", multiple=True, metavar="DTYPE|NAME=DTYPE",
                 help="dtype of the random float inputs (default float32), or of one input, e.g. L=int64 "
                      "(repeat the option; integer inputs hold valid indices or values in [0, largest size])"),
    click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
                 help="where the inputs live (cpu runs the Triton interpreter)"),
    click.option("--scalar", multiple=True, metavar="NAME=VALUE",
                 help="value of a scalar parameter (default 1); several separated by commas, e.g. stride=2,padding=1"),
    click.option("--seed", default=0, show_default=True, help="seed of the random inputs and of the sampler"),
]


def _with_common(f):
    for d in reversed(_common):
        f = d(f)
    return f


@click.group()
def main():
    """dtriton: Decoupled Triton. Explore schedules, show generated Triton, benchmark, run the demo."""


@main.command()
@_with_common
@click.option("--budget", default=60.0, show_default=True, help="seconds to search")
@click.option("--strategy", type=click.Choice(["auto", "exhaustive", "random", "tpe"]), default="auto",
              show_default=True)
@click.option("--max-trials", type=int, default=None, help="at most this many candidates compiled")
@click.option("--space", "space_json", default=None, help="a Space as JSON, e.g. '{\"tile\": {\"i\": [64, 128]}}'")
@click.option("--db", default=None, help="tuning database file (default: $DTRITON_CACHE_DIR/tuning.sqlite)")
@click.option("--store/--no-store", default=None, help="write results to the tuning database (default: on the GPU "
              "only; interpreter timings measure Python)")
@click.option("--plot", "plot_path", default=None, help="save the time-per-candidate plot here (PNG)")
@click.option("--json", "json_path", default=None, help="save the full result table here (JSON)")
@click.option("--quiet", is_flag=True, help="no progress bar")
def explore(spec, shape, dtype, device, scalar, seed, budget, strategy, max_trials, space_json, db, store,
            plot_path, json_path, quiet):
    """Search schedules of ALGORITHM for random inputs of --shape and store the best one (on the GPU; on the
    interpreter only with --store)."""
    alg, args = _inputs_from_options(spec, shape, dtype, device, scalar, seed)
    space = None
    if space_json:
        try:
            space = Space(**json.loads(space_json))
        except json.JSONDecodeError as e:
            raise click.BadParameter(f"--space is not JSON ({e}); expected an object such as "
                                     "'{\"tile\": {\"i\": [64, 128]}, \"num_warps\": [4, 8]}'") from e
        except (ValueError, TypeError) as e:
            raise click.BadParameter(f"--space: {e}") from e
    try:
        res = run_explore(alg, args, budget=budget, strategy=strategy, max_trials=max_trials, space=space, seed=seed,
                          db=db, store=store, progress=not quiet)
    except DTritonError as e:   # a Space that does not fit the algorithm, bad shapes: a message, not a traceback
        raise click.ClickException(str(e)) from e
    click.echo(res.summary())
    if res.best is not None:
        click.echo("")
        click.echo("best schedule (JSON, for --schedule or dt.Schedule.from_json):")
        click.echo(res.best.to_json())
    if plot_path:
        click.echo(f"plot: {res.plot(plot_path)}")
    if json_path:
        Path(json_path).write_text(res.to_json())
        click.echo(f"table: {json_path}")
    if res.best is None:
        sys.exit(1)


@main.command()
@_with_common
@click.option("--schedule", "schedule_json", default=None,
              help="a schedule as JSON, or a file holding one (default: the heuristic)")
@click.option("--tuned", is_flag=True, help="use the best stored schedule for these shapes")
@click.option("--db", default=None, help="tuning database for --tuned")
def show(spec, shape, dtype, device, scalar, seed, schedule_json, tuned, db):
    """Print the generated Triton source of ALGORITHM for --shape."""
    if schedule_json and tuned:
        raise click.UsageError("give --schedule or --tuned, not both")
    _check_db_exists(db)
    alg, args = _inputs_from_options(spec, shape, dtype, device, scalar, seed)
    if tuned:
        kern = TunedKernel(alg, db)
        click.echo(f"# schedule from: {kern.origin_for(*args)}")
        click.echo(kern.source_for(*args))
        return
    sched = _schedule_option(schedule_json)
    try:
        click.echo(Kernel(alg, sched).source_for(*args))
    except ValueError as e:  # ScheduleError / ShapeError
        raise click.ClickException(str(e)) from e


def _check_db_exists(db: str | None) -> None:
    """A --db given to read from must exist (a mistyped path would read as an empty database)."""
    if db is not None and not Path(db).exists():
        raise click.ClickException(f"tuning database {db} does not exist (nothing was created); check the --db "
                                   "path, or leave --db out for the default database")


def _schedule_option(text: str | None) -> Schedule | None:
    """A ``--schedule`` value (JSON, or a file holding it) as a Schedule; None when not given."""
    if not text:
        return None
    if not text.lstrip().startswith("{"):
        p = Path(text)
        if not p.is_file():
            raise click.BadParameter(f"--schedule {text!r} is neither JSON nor a file")
        text = p.read_text()
    try:
        return Schedule.from_json(text)
    except ValueError as e:
        raise click.BadParameter(f"--schedule: {e}") from e


@main.command()
@_with_common
@click.option("--budget", type=float, default=None, help="explore this many seconds first and time the winner")
@click.option("--schedule", "schedule_json", default=None, help="a schedule as JSON, or a file holding one")
@click.option("--tuned", is_flag=True, help="use the best stored schedule for these shapes")
@click.option("--db", default=None, help="tuning database for --tuned and --budget")
@click.option("--no-compile", is_flag=True, help="skip torch.compile (its first call compiles: ~10 s on a CPU)")
@click.option("--seconds", default=1.0, show_default=True, help="sampling time per implementation")
@click.option("--plot", "plot_path", default=None, help="save a bar chart here (PNG)")
@click.option("--json", "json_path", default=None, help="save the result here (JSON)")
@click.option("--baseline", "baseline_spec", default=None, metavar="FILE.py:FUNCTION",
              help="your own torch implementation (same arguments, same outputs): its own row, the speed reference")
def bench(spec, shape, dtype, device, scalar, seed, budget, schedule_json, tuned, db, no_compile, seconds, plot_path,
          json_path, baseline_spec):
    """Time ALGORITHM as a dtriton kernel beside your torch code (--baseline), its reference evaluator
    (alg.reference) and torch.compile, each checked against float64."""
    if sum(map(bool, (budget, schedule_json, tuned))) > 1:
        raise click.UsageError("give one of --budget, --schedule and --tuned")
    if not budget:   # --budget writes the database; reading one needs it to exist
        _check_db_exists(db)
    alg, args = _inputs_from_options(spec, shape, dtype, device, scalar, seed)
    baseline = load_function(baseline_spec) if baseline_spec else None
    sched = "tuned" if tuned else _schedule_option(schedule_json)
    try:
        res = run_benchmark(alg, args, schedule=sched, budget=budget, compile=not no_compile, seconds=seconds, db=db,
                            baseline=baseline)
    except (DTritonError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    from rich.console import Console
    Console().print(res.table())
    if plot_path:
        click.echo(f"plot: {res.plot(plot_path)}")
    if json_path:
        Path(json_path).write_text(res.to_json())
        click.echo(f"result: {json_path}")
    if any(r.status != "ok" for r in res.rows[:1]):
        sys.exit(1)


def _serves(rec) -> str:
    """Which calls a stored record serves in this installation (see dtriton.tune.db)."""
    if not rec.current:
        return (f"none (measured by dtriton {rec.dtriton}; this is {dtriton_version()})" if rec.dtriton else
                "none (stored before records carried dtriton's version)")
    if rec.key.triton != triton_version():
        return f"none (Triton {rec.key.triton}; this is {triton_version()})"
    return "its bucket" if rec.key.device == INTERPRETER else "its bucket and nearby ones"


@main.command()
@click.argument("action", type=click.Choice(["list", "clear", "export", "import"]), default="list")
@click.argument("file", required=False)
@click.option("--db", default=None, help="tuning database file (default: $DTRITON_TUNING_DB, else "
              "$DTRITON_CACHE_DIR/tuning.sqlite, else ~/.cache/dtriton/tuning.sqlite)")
@click.option("--stale", is_flag=True, help="clear: only the records that serve no call here (another dtriton "
              "or Triton version)")
def tuning(action, file, db, stale):
    """List the tuning database's records (and which calls each serves), clear them, or export them to /
    import them from FILE (JSON). Only import creates a database; a --db that does not exist is an
    error for the other actions (a mistyped path would otherwise show an empty database)."""
    tdb = TuningDB(db)
    if action in ("export", "import") and not file:
        raise click.UsageError(f"dtriton tuning {action} needs a FILE")
    if action != "import" and not tdb.path.exists():
        _check_db_exists(db)
        click.echo(f"{tdb.path}: no tuning database yet (dt.explore creates it); 0 record(s)")
        return
    if action == "export":
        n = len(tdb.export_json(file)["records"])
        click.echo(f"{n} record(s) of {tdb.path} written to {file}")
    elif action == "import":
        try:
            n = tdb.import_json(Path(file))
        except (TuningDatabaseError, OSError) as e:
            raise click.ClickException(str(e)) from e
        click.echo(f"{n} record(s) from {file} stored in {tdb.path}")
    elif action == "clear":
        recs = tdb.records()
        gone = [r for r in recs if not stale or _serves(r).startswith("none")]
        if stale:
            for r in gone:
                tdb.delete(r.key)
        else:
            tdb.clear()
        click.echo(f"{len(gone)} of {len(recs)} record(s) removed from {tdb.path}")
    else:
        recs = tdb.records()
        click.echo(f"{tdb.path}: {len(recs)} record(s); this is dtriton {dtriton_version()}, Triton {triton_version()}")
        for r in recs:
            med = f"{r.median_us:.1f} us" if r.median_us is not None else "-"
            click.echo(f"  {r.algorithm or r.key.fingerprint[:12]}  {r.key.bucket}  {r.key.dtypes}  {r.key.device}  "
                       f"{med}  serves: {_serves(r)}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def demo(args):
    """Run the DiffusionNet spatial-diffusion demo (every argument, --help too, goes to the demo)."""
    modname = "dtriton.examples.diffusionnet.demo"
    try:
        mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name and (modname.startswith(e.name) or e.name == modname):
            click.echo(f"dtriton demo: the DiffusionNet demo ({modname}) is not part of this installation yet.",
                       err=True)
        else:
            click.echo(f"dtriton demo: the demo needs the package {e.name!r}; install it with "
                       "pip install 'dtriton[mesh]'", err=True)
        sys.exit(2)
    fn = getattr(mod, "main", None)
    if fn is None:
        click.echo(f"dtriton demo: {modname} has no main(args) function", err=True)
        sys.exit(2)
    rc = fn(list(args))
    sys.exit(int(rc) if isinstance(rc, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
