"""Spectral operators of a triangle mesh for DiffusionNet's spatial diffusion layer.

DiffusionNet (Sharp, Attaiki, Crane, Ovsjanikov, "DiffusionNet: Discretization Agnostic Learning
on Surfaces", ACM TOG 2022, arXiv:2012.00888) diffuses features with the heat kernel in a truncated
Laplacian eigenbasis::

    spectral = exp(-evals[:, None] * t[None, :]) * (basis.T @ (x * mass[:, None]))   # (K, C)
    out      = basis @ spectral                                                     # (V, C)

This module precomputes, once per mesh, the lumped vertex masses ``mass`` (V), the first K
eigenvalues ``evals`` (K) and the M-orthonormal eigenvectors ``basis`` (V, K) of the generalised
problem ``L phi = lambda M phi``, where L is the cotangent Laplacian and M the lumped mass matrix of
the "robust Laplacian" (Sharp & Crane, "A Laplacian for Nonmanifold Triangle Meshes", SGP 2020;
PyPI ``robust-laplacian``). Everything is computed in float64 and returned as float32; results
are cached on disk as ``.npz``.

``scipy`` and ``robust_laplacian`` are imported lazily, so :func:`synthetic_mesh` needs numpy only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "CACHE_DIR_ENV",
    "Operators",
    "default_cache_dir",
    "cotan_laplacian",
    "spectral_operators",
    "synthetic_mesh",
]

#: Environment variable; operators are cached under ``$DTRITON_CACHE_DIR/operators``.
CACHE_DIR_ENV = "DTRITON_CACHE_DIR"

# Bump when the computation changes in a way that alters cached results.
_CACHE_VERSION = 1
# Initial diagonal shift and shift-invert target of the sparse eigen-solver, and retries.
_EPS0 = 1e-8
_EPS_RETRIES = 6
# Below this many vertices (or when K is a large fraction of V) use a dense solver.
_DENSE_MIN_V = 512
# If every sparse attempt fails, a dense solve is still tried up to this many vertices.
_DENSE_FALLBACK_MAX_V = 6000


@dataclass(frozen=True, eq=False)
class Operators:
    """Precomputed spectral operators of one mesh (inputs of DiffusionNet's diffusion layer).

    Attributes:
        mass: (V,) float32, lumped vertex areas (the diagonal of M), in squared units of the
            vertex positions; all > 0.
        evals: (K,) float32, Laplacian eigenvalues, ascending, >= 0 (negative round-off clipped
            to 0), in inverse squared units of the positions. ``evals[0]`` is ~0 (constant mode).
        basis: (V, K) float32, eigenvectors Phi, M-orthonormal: ``Phi.T @ diag(mass) @ Phi ~ I``.
            Column signs are fixed so that each column's entry of largest magnitude is positive.
        V: number of vertices.
        K: number of eigenpairs (``min(k, V - 1)``).
        from_cache: whether the arrays were read from the on-disk cache.

    Source: Sharp et al. 2022 (DiffusionNet), section on spectral acceleration; L and M from
    Sharp & Crane 2020 (robust Laplacian).
    """

    mass: np.ndarray
    evals: np.ndarray
    basis: np.ndarray
    V: int
    K: int
    from_cache: bool = False

    def as_torch(self, device=None, dtype=None) -> dict:
        """Return ``{"mass", "evals", "basis"}`` as torch tensors (imports torch lazily).

        Args:
            device: torch device (default: CPU).
            dtype: torch dtype (default: float32, the stored precision).

        Returns:
            dict of tensors with shapes (V,), (K,), (V, K), as the DiffusionNet layer
            (Sharp et al. 2022) consumes them.

        Raises:
            ImportError: torch is not installed.
        """
        import torch

        dtype = torch.float32 if dtype is None else dtype
        return {
            name: torch.as_tensor(getattr(self, name), dtype=dtype, device=device)
            for name in ("mass", "evals", "basis")
        }


# --------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------


def _check_mesh(verts, faces) -> tuple[np.ndarray, np.ndarray]:
    v = np.ascontiguousarray(verts, dtype=np.float64)
    f_in = np.asarray(faces)
    if v.ndim != 2 or v.shape[1] != 3:
        raise ValueError(f"verts must have shape (V, 3), got {v.shape}")
    if f_in.ndim != 2 or f_in.shape[1] != 3 or f_in.shape[0] == 0:
        raise ValueError(f"faces must have shape (F, 3) with F >= 1, got {f_in.shape}")
    if not np.issubdtype(f_in.dtype, np.integer):
        raise ValueError(f"faces must be integers, got dtype {f_in.dtype}")
    f = np.ascontiguousarray(f_in, dtype=np.int64)
    if not np.all(np.isfinite(v)):
        raise ValueError("verts contains non-finite values")
    if f.min() < 0 or f.max() >= len(v):
        raise ValueError(f"face indices must lie in [0, {len(v)}), got [{f.min()}, {f.max()}]")
    if len(v) < 2:
        raise ValueError("need at least 2 vertices for a non-trivial eigenbasis")
    referenced = np.zeros(len(v), dtype=bool)
    referenced[f.ravel()] = True
    if not referenced.all():
        missing = np.flatnonzero(~referenced)
        # robust_laplacian would give such vertices a small fake mass and a decoupled row of L
        raise ValueError(
            f"{missing.size} vertices are not referenced by any face (first: "
            f"{missing[:5].tolist()}); drop them first (load_mesh does)")
    return v, f


# --------------------------------------------------------------------------------------------
# Laplacian and eigenpairs
# --------------------------------------------------------------------------------------------


def cotan_laplacian(verts, faces):
    """Cotangent Laplacian and lumped mass of a triangle mesh (Sharp & Crane 2020).

    Thin wrapper over ``robust_laplacian.mesh_laplacian`` (intrinsic Delaunay "tufted cover"
    Laplacian, robust to nonmanifold and poorly shaped meshes), as recommended for DiffusionNet
    (Sharp et al. 2022).

    Args:
        verts: (V, 3) real array of positions (normalise them first; see
            :func:`dtriton.examples.diffusionnet.meshes.normalize_positions`).
        faces: (F, 3) integer array of vertex indices in [0, V).

    Returns:
        ``(L, mass)``: L is a (V, V) float64 ``scipy.sparse.csr_matrix``, the weak
        (integrated, symmetric positive semi-definite) Laplacian, with ``L @ 1 = 0``; mass is a
        (V,) float64 array of lumped vertex areas, in squared position units.

    Raises:
        ValueError: bad shapes, non-finite positions, indices out of range, unreferenced
            vertices (drop them first), or a vertex with no positive mass.
        ImportError: ``robust-laplacian`` or ``scipy`` is not installed.
    """
    v, f = _check_mesh(verts, faces)
    try:
        import robust_laplacian  # depends on scipy, whose sparse matrices it returns
    except ImportError as e:
        raise ImportError(
            "operators need robust-laplacian and scipy: pip install 'dtriton[mesh]'"
        ) from e
    L, M = robust_laplacian.mesh_laplacian(v, f)
    mass = np.asarray(M.diagonal(), dtype=np.float64)
    bad = np.flatnonzero(~(mass > 0))
    if bad.size:
        raise ValueError(
            f"{bad.size} vertices have no positive mass (first: {bad[:5].tolist()}); "
            "unreferenced or isolated vertices must be removed first"
        )
    return L.tocsr().astype(np.float64), mass


def _dense_eigenpairs(L, mass: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    import scipy.linalg

    A = L.toarray()
    A = 0.5 * (A + A.T)
    evals, basis = scipy.linalg.eigh(A, np.diag(mass), subset_by_index=[0, k - 1])
    return evals, basis


def _sparse_eigenpairs(L, mass: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, float]:
    import scipy.sparse
    import scipy.sparse.linalg

    n = L.shape[0]
    M = scipy.sparse.diags(mass).tocsc()
    eye = scipy.sparse.identity(n, format="csc")
    eps = _EPS0
    errors = []
    for _ in range(_EPS_RETRIES):
        try:
            A = (L + eps * eye).tocsc()
            evals, basis = scipy.sparse.linalg.eigsh(A, k=k, M=M, sigma=eps)
            if np.all(np.isfinite(evals)) and np.all(np.isfinite(basis)):
                return evals, basis, eps
            errors.append(f"shift {eps:g}: non-finite result")
        except (RuntimeError, ArithmeticError, np.linalg.LinAlgError) as e:
            # ArpackError / ArpackNoConvergence are RuntimeErrors; a singular factorisation
            # raises RuntimeError too.
            errors.append(f"shift {eps:g}: {type(e).__name__}: {e}")
        eps *= 10.0
    if n <= _DENSE_FALLBACK_MAX_V:
        warnings.warn(
            "sparse eigen-solver failed for every shift (" + "; ".join(errors)
            + "); falling back to a dense solve", RuntimeWarning, stacklevel=3)
        evals, basis = _dense_eigenpairs(L, mass, k)
        return evals, basis, 0.0
    raise RuntimeError("eigsh failed for every shift: " + "; ".join(errors))


def _finish(L, mass: np.ndarray, basis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """M-orthonormalise, recompute eigenvalues as Rayleigh quotients, sort, fix signs."""
    G = basis.T @ (mass[:, None] * basis)
    if np.abs(G - np.eye(G.shape[0])).max() > 1e-10:
        # symmetric (Loewdin) orthonormalisation: the smallest change that makes Phi M-orthonormal
        w, Q = np.linalg.eigh(0.5 * (G + G.T))
        if w.min() <= 1e-12:
            raise RuntimeError("eigenvectors are linearly dependent; cannot M-orthonormalise")
        basis = basis @ (Q @ (Q.T / np.sqrt(w)[:, None]))
    # Rayleigh quotients with the unshifted L remove the effect of the eps*I shift.
    evals = np.einsum("vk,vk->k", basis, L @ basis)
    evals = np.maximum(evals, 0.0)
    order = np.argsort(evals, kind="stable")
    evals, basis = evals[order], basis[:, order]
    idx = np.abs(basis).argmax(axis=0)
    signs = np.sign(basis[idx, np.arange(basis.shape[1])])
    signs[signs == 0] = 1.0
    return evals, basis * signs


def _compute(verts: np.ndarray, faces: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    L, mass = cotan_laplacian(verts, faces)
    n = L.shape[0]
    if n <= max(_DENSE_MIN_V, 4 * k):
        _, basis = _dense_eigenpairs(L, mass, k)
    else:
        _, basis, _ = _sparse_eigenpairs(L, mass, k)
    evals, basis = _finish(L, mass, basis)
    return mass, evals, basis


# --------------------------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """Folder of the operator cache: ``$DTRITON_CACHE_DIR/operators`` or ``~/.cache/dtriton/operators``.

    Returns:
        a ``Path`` (not created by this function).

    Errors: none. Source: this project's cache layout (DiffusionNet, Sharp et al. 2022, likewise
    precomputes and caches operators per shape).
    """
    root = os.environ.get(CACHE_DIR_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "dtriton"
    return base / "operators"


def _cache_key(verts: np.ndarray, faces: np.ndarray, k: int) -> str:
    h = hashlib.sha256()
    h.update(f"dtriton-spectral-v{_CACHE_VERSION}|V={len(verts)}|F={len(faces)}|k={k}|".encode())
    h.update(verts.tobytes())
    h.update(faces.tobytes())
    return h.hexdigest()


def _load_cached(path: Path, key: str, V: int, K: int) -> Operators:
    with np.load(path, allow_pickle=False) as z:
        stored_key = str(z["key"])
        mass, evals, basis = z["mass"], z["evals"], z["basis"]
    if stored_key != key:
        raise ValueError("key mismatch")
    if mass.shape != (V,) or evals.shape != (K,) or basis.shape != (V, K):
        raise ValueError(f"shapes {mass.shape}, {evals.shape}, {basis.shape} "
                         f"!= ({V},), ({K},), ({V}, {K})")
    for name, a in (("mass", mass), ("evals", evals), ("basis", basis)):
        if a.dtype != np.float32 or not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: dtype {a.dtype} or non-finite values")
    if not np.all(mass > 0) or not np.all(evals >= 0):
        raise ValueError("mass must be > 0 and evals >= 0")
    return Operators(mass=mass, evals=evals, basis=basis, V=V, K=K, from_cache=True)


def _save_cached(path: Path, key: str, ops: Operators) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, key=np.array(key), mass=ops.mass, evals=ops.evals, basis=ops.basis)
        os.replace(tmp, path)  # atomic: readers never see a half-written file
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------


def spectral_operators(verts, faces, k: int = 128, cache_dir: str | os.PathLike | None = None,
                       *, use_cache: bool = True) -> Operators:
    """Lumped mass and the first K Laplacian eigenpairs of a mesh, cached on disk.

    Follows DiffusionNet (Sharp et al. 2022, K = 128 in all its experiments): L and M are the
    cotangent Laplacian and lumped mass of Sharp & Crane 2020 (``robust_laplacian``); the pairs of
    ``L phi = lambda M phi`` nearest 0 are found in float64 with
    ``scipy.sparse.linalg.eigsh(L + eps*I, k, M=M, sigma=eps)`` (shift-invert, eps = 1e-8,
    multiplied by 10 on each failure, up to 6 tries, then a dense solve if V <= 6000). Meshes with
    V <= max(512, 4k) use a dense generalised ``scipy.linalg.eigh``. Afterwards the basis is
    M-orthonormalised, the eigenvalues are recomputed as Rayleigh quotients ``phi^T L phi``
    (undoing the eps shift), negative round-off is clipped to 0 and the pairs are sorted.

    Positions should be centred and scaled to unit radius first (the shift is not
    scale-invariant); :func:`dtriton.examples.diffusionnet.meshes.load_mesh` does that.

    Caching: the result is stored as ``spectral_V{V}_K{K}_{hash}.npz`` in ``cache_dir`` (default
    :func:`default_cache_dir`), keyed by a SHA-256 of the float64 positions, int64 faces and K. A
    cache file that cannot be read or fails validation is recomputed and overwritten, with a
    ``RuntimeWarning``; an unwritable cache folder also only warns.

    Args:
        verts: (V, 3) real array of positions (converted to float64).
        faces: (F, 3) integer array of vertex indices in [0, V); every vertex must be referenced.
        k: number of eigenpairs wanted (>= 1); K = min(k, V - 1) are returned.
        cache_dir: cache folder; ``None`` for the default.
        use_cache: set to False to neither read nor write the cache.

    Returns:
        :class:`Operators` with float32 ``mass`` (V,), ``evals`` (K,), ``basis`` (V, K).

    Raises:
        ValueError: bad shapes/dtypes/values, indices out of range, unreferenced vertices,
            k < 1, or a vertex without positive mass.
        ImportError: ``robust-laplacian`` or ``scipy`` is missing.
        RuntimeError: the eigen-solver failed for every shift and the mesh is too large for the
            dense fallback.
    """
    v, f = _check_mesh(verts, faces)
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    V = len(v)
    K = min(int(k), V - 1)

    path = key = None
    if use_cache:
        key = _cache_key(v, f, K)
        folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        path = folder / f"spectral_V{V}_K{K}_{key[:24]}.npz"
        if path.exists():
            try:
                return _load_cached(path, key, V, K)
            except Exception as e:  # any unreadable/invalid file: recompute, never crash
                warnings.warn(f"operator cache file {path} is unusable "
                              f"({type(e).__name__}: {e}); recomputing",
                              RuntimeWarning, stacklevel=2)

    mass, evals, basis = _compute(v, f, K)
    ops = Operators(
        mass=mass.astype(np.float32),
        evals=evals.astype(np.float32),
        basis=np.ascontiguousarray(basis, dtype=np.float32),
        V=V, K=K, from_cache=False,
    )
    if use_cache:
        try:
            _save_cached(path, key, ops)
        except OSError as e:
            warnings.warn(f"could not write operator cache {path}: {e}", RuntimeWarning,
                          stacklevel=2)
    return ops


# --------------------------------------------------------------------------------------------
# synthetic meshes
# --------------------------------------------------------------------------------------------


def synthetic_mesh(n: int = 500, kind: str = "sphere") -> tuple[np.ndarray, np.ndarray]:
    """A small triangle mesh built with numpy only, for tests and demos without mesh packages.

    Kinds:
        ``"sphere"``: closed, consistently outward-oriented latitude/longitude sphere of radius
            1 centred at 0, with about ``n`` vertices (m rings of 2m vertices plus two poles,
            m = round(sqrt((n - 2) / 2)) >= 2; alternate rings are offset by half a step). Its
            Laplacian eigenvalues approach l(l + 1) with multiplicity 2l + 1 (0, 2, 2, 2, 6, ...).
        ``"grid"``: the unit square [0, 1]^2 in the plane z = 0, an m x m vertex grid
            (m = round(sqrt(n)) >= 2), each cell split into two triangles. It has a boundary;
            its Neumann eigenvalues approach pi^2 (a^2 + b^2): 0, pi^2, pi^2, 2 pi^2, ...

    Args:
        n: approximate number of vertices (>= 4).
        kind: ``"sphere"`` or ``"grid"``.

    Returns:
        ``(verts, faces)``: (V, 3) float64 positions (unitless) and (F, 3) int64 indices;
        every vertex is referenced, no face is degenerate.

    Raises:
        ValueError: unknown ``kind`` or ``n < 4``.

    Source: built here for testing the operators of Sharp & Crane 2020 as used by DiffusionNet
    (Sharp et al. 2022); the reference spectra are the classical spherical-harmonic and
    Neumann-square eigenvalues.
    """
    if int(n) != n or n < 4:
        raise ValueError(f"n must be an integer >= 4, got {n!r}")
    if kind == "sphere":
        m = max(2, int(round(np.sqrt((n - 2) / 2.0))))
        nl = 2 * m
        i = np.arange(1, m + 1)[:, None]
        j = np.arange(nl)[None, :]
        theta = np.pi * i / (m + 1)
        phi = 2.0 * np.pi * (j + 0.5 * (i % 2)) / nl
        ring = np.stack(
            [np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi),
             np.broadcast_to(np.cos(theta), phi.shape)], axis=-1).reshape(-1, 3)
        verts = np.concatenate([[[0.0, 0.0, 1.0]], ring, [[0.0, 0.0, -1.0]]])
        north, south = 0, len(verts) - 1
        idx = 1 + np.arange(m * nl).reshape(m, nl)
        nxt = np.roll(idx, -1, axis=1)
        tris = [np.stack([np.full(nl, north), idx[0], nxt[0]], axis=1)]
        a, b = idx[:-1], nxt[:-1]          # upper ring: a -> b eastwards
        c, d = idx[1:], nxt[1:]            # lower ring
        tris.append(np.stack([a, c, d], axis=-1).reshape(-1, 3))
        tris.append(np.stack([a, d, b], axis=-1).reshape(-1, 3))
        tris.append(np.stack([np.full(nl, south), nxt[-1], idx[-1]], axis=1))
        faces = np.concatenate(tris).astype(np.int64)
        return verts.astype(np.float64), faces
    if kind == "grid":
        m = max(2, int(round(np.sqrt(n))))
        x, y = np.meshgrid(np.linspace(0.0, 1.0, m), np.linspace(0.0, 1.0, m), indexing="xy")
        verts = np.stack([x.ravel(), y.ravel(), np.zeros(m * m)], axis=1)
        idx = np.arange(m * m).reshape(m, m)
        a, b = idx[:-1, :-1], idx[:-1, 1:]
        c, d = idx[1:, :-1], idx[1:, 1:]
        faces = np.concatenate([np.stack([a, b, d], -1).reshape(-1, 3),
                                np.stack([a, d, c], -1).reshape(-1, 3)]).astype(np.int64)
        return verts, faces
    raise ValueError(f"unknown synthetic mesh kind {kind!r}; expected 'sphere' or 'grid'")
