"""Tests of the DiffusionNet mesh + operator layer (dtriton.examples.diffusionnet).

Operator facts checked here follow Sharp et al. 2022 (DiffusionNet) and Sharp & Crane 2020
(robust Laplacian): lumped mass > 0, eigenvalues >= 0 and ascending with a ~0 constant mode,
M-orthonormal basis, L @ 1 = 0.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

try:
    from dtriton.examples.diffusionnet import meshes, operators
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from dtriton.examples.diffusionnet import meshes, operators

from dtriton.examples.diffusionnet.meshes import list_meshes, load_mesh
from dtriton.examples.diffusionnet.operators import (
    Operators,
    cotan_laplacian,
    spectral_operators,
    synthetic_mesh,
)

HAVE_OPS = all(importlib.util.find_spec(m) is not None for m in ("scipy", "robust_laplacian"))
HAVE_TRIMESH = importlib.util.find_spec("trimesh") is not None
needs_ops = pytest.mark.skipif(not HAVE_OPS, reason="needs scipy and robust-laplacian "
                               "(pip install 'dtriton[mesh]')")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """Never touch the user's cache; start without an extra mesh folder."""
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "dtriton-cache"))
    monkeypatch.delenv("DTRITON_MESH_DIR", raising=False)


def _gram(ops: Operators) -> np.ndarray:
    b = ops.basis.astype(np.float64)
    return b.T @ (ops.mass.astype(np.float64)[:, None] * b)


def _check_operator_properties(ops: Operators, verts, faces):
    V, K = ops.V, ops.K
    assert ops.mass.shape == (V,) and ops.evals.shape == (K,) and ops.basis.shape == (V, K)
    assert ops.mass.dtype == ops.evals.dtype == ops.basis.dtype == np.float32
    assert np.all(ops.mass > 0)
    assert np.all(ops.evals >= 0)
    assert np.all(np.diff(ops.evals) >= 0)
    assert abs(ops.evals[0]) < 1e-4
    np.testing.assert_allclose(_gram(ops), np.eye(K), atol=1e-4)
    # Laplacian of a constant is zero, and the constant lies in the span of the basis
    L, mass = cotan_laplacian(verts, faces)
    assert np.abs(L @ np.ones(V)).max() < 1e-8 * max(1.0, abs(L).max())
    np.testing.assert_allclose(mass, ops.mass, rtol=1e-6)
    b = ops.basis.astype(np.float64)
    recon = b @ (b.T @ ops.mass.astype(np.float64))
    np.testing.assert_allclose(recon, np.ones(V), atol=1e-3)
    # eigen-equation residual, relative to the largest kept eigenvalue
    resid = L @ b - (mass[:, None] * b) * ops.evals.astype(np.float64)[None, :]
    scale = np.abs(mass[:, None] * b).max() * max(1.0, float(ops.evals[-1]))
    assert np.abs(resid).max() < 1e-4 * scale


# ---------------------------------------------------------------- synthetic meshes ----------


@pytest.mark.parametrize("kind", ["sphere", "grid"])
def test_synthetic_mesh_is_a_clean_manifold(kind):
    v, f = synthetic_mesh(300, kind)
    assert v.dtype == np.float64 and f.dtype == np.int64
    assert v.shape[1] == 3 and f.shape[1] == 3
    assert 250 <= len(v) <= 350
    assert set(np.unique(f)) == set(range(len(v)))
    edges = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]])
    directed = set(map(tuple, edges.tolist()))
    assert len(directed) == len(edges)  # consistent orientation: no directed edge twice
    if kind == "sphere":
        assert all((b, a) in directed for a, b in directed)  # closed
        tri = v[f]
        volume = np.einsum("ij,ij->i", tri[:, 0], np.cross(tri[:, 1], tri[:, 2])).sum() / 6
        assert 0.9 * 4 / 3 * np.pi < volume < 4 / 3 * np.pi  # outward, inscribed


def test_synthetic_mesh_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        synthetic_mesh(100, "torus")
    with pytest.raises(ValueError):
        synthetic_mesh(2)


# ---------------------------------------------------------------- operators -----------------


@needs_ops
@pytest.mark.parametrize("n,k", [(400, 32), (2000, 24)])  # dense path, then eigsh path
def test_sphere_operators(n, k, tmp_path):
    v, f = synthetic_mesh(n, "sphere")
    ops = spectral_operators(v, f, k=k, cache_dir=tmp_path)
    assert ops.K == k and not ops.from_cache
    _check_operator_properties(ops, v, f)
    assert abs(ops.mass.sum() - 4 * np.pi) < 0.05 * 4 * np.pi
    # unit sphere: l(l+1) with multiplicity 2l+1
    np.testing.assert_allclose(ops.evals[1:4], 2.0, rtol=0.03)
    np.testing.assert_allclose(ops.evals[4:9], 6.0, rtol=0.05)
    assert ops.evals[9] > 10.0


@needs_ops
def test_grid_operators_neumann_spectrum(tmp_path):
    v, f = synthetic_mesh(900, "grid")
    ops = spectral_operators(v, f, k=8, cache_dir=tmp_path)
    _check_operator_properties(ops, v, f)
    np.testing.assert_allclose(ops.evals[1:3], np.pi ** 2, rtol=0.02)
    np.testing.assert_allclose(ops.evals[3], 2 * np.pi ** 2, rtol=0.03)


@needs_ops
def test_k_larger_than_mesh_is_capped(tmp_path):
    v, f = synthetic_mesh(20, "sphere")
    ops = spectral_operators(v, f, k=128, cache_dir=tmp_path)
    assert ops.K == ops.V - 1 == len(v) - 1
    _check_operator_properties(ops, v, f)


@needs_ops
def test_operator_input_validation(tmp_path):
    v, f = synthetic_mesh(50)
    with pytest.raises(ValueError, match="shape"):
        spectral_operators(v[:, :2], f, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="face indices"):
        spectral_operators(v, f + len(v), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="k must"):
        spectral_operators(v, f, k=0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="not referenced"):
        spectral_operators(np.concatenate([v, [[5.0, 5.0, 5.0]]]), f, cache_dir=tmp_path)


@needs_ops
def test_eigsh_failure_retries_with_larger_shift_then_falls_back(tmp_path, monkeypatch):
    import scipy.sparse.linalg as sla

    real_eigsh = sla.eigsh
    v, f = synthetic_mesh(1500)  # large enough for the sparse path at k=8
    reference = spectral_operators(v, f, k=8, use_cache=False)
    shifts = []

    def flaky(A, k, M, sigma):
        shifts.append(sigma)
        if len(shifts) <= 2:
            raise sla.ArpackNoConvergence("simulated", np.zeros(0), np.zeros((A.shape[0], 0)))
        return real_eigsh(A, k=k, M=M, sigma=sigma)

    monkeypatch.setattr(sla, "eigsh", flaky)
    ops = spectral_operators(v, f, k=8, use_cache=False)
    np.testing.assert_allclose(shifts, [1e-8, 1e-7, 1e-6])
    np.testing.assert_allclose(ops.evals, reference.evals, rtol=1e-4, atol=1e-6)
    _check_operator_properties(ops, v, f)

    def broken(A, k, M, sigma):
        raise RuntimeError("Factor is exactly singular")

    monkeypatch.setattr(sla, "eigsh", broken)
    with pytest.warns(RuntimeWarning, match="dense"):
        ops = spectral_operators(v, f, k=8, use_cache=False)
    np.testing.assert_allclose(ops.evals, reference.evals, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- cache ---------------------


@needs_ops
def test_cache_hit_skips_the_solver(tmp_path, monkeypatch):
    v, f = synthetic_mesh(300)
    first = spectral_operators(v, f, k=16, cache_dir=tmp_path)
    files = list(tmp_path.glob("*.npz"))
    assert len(files) == 1 and not first.from_cache

    def boom(*args, **kwargs):
        raise AssertionError("recomputed despite a valid cache file")

    monkeypatch.setattr(operators, "_compute", boom)
    second = spectral_operators(v, f, k=16, cache_dir=tmp_path)
    assert second.from_cache
    for name in ("mass", "evals", "basis"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    # a different k or mesh is a different key
    with pytest.raises(AssertionError, match="recomputed"):
        spectral_operators(v, f, k=8, cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="recomputed"):
        spectral_operators(v * 1.0001, f, k=16, cache_dir=tmp_path)


@needs_ops
def test_default_cache_dir_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRITON_CACHE_DIR", str(tmp_path / "c"))
    assert operators.default_cache_dir() == tmp_path / "c" / "operators"
    v, f = synthetic_mesh(100)
    spectral_operators(v, f, k=4)
    assert len(list((tmp_path / "c" / "operators").glob("*.npz"))) == 1
    assert spectral_operators(v, f, k=4).from_cache
    assert not spectral_operators(v, f, k=4, use_cache=False).from_cache


@needs_ops
@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong_shapes", "empty"])
def test_corrupt_cache_is_recomputed_with_a_warning(tmp_path, damage):
    v, f = synthetic_mesh(300)
    good = spectral_operators(v, f, k=16, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.npz")
    raw = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"this is not a zip file" * 10)
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        with np.load(path) as z:
            key = z["key"]
        np.savez(path, key=key, mass=good.mass[:-1], evals=good.evals, basis=good.basis)
    with pytest.warns(RuntimeWarning, match="recomputing"):
        again = spectral_operators(v, f, k=16, cache_dir=tmp_path)
    assert not again.from_cache
    np.testing.assert_allclose(again.basis, good.basis, atol=1e-6)
    # the file was rewritten and is good again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert spectral_operators(v, f, k=16, cache_dir=tmp_path).from_cache


# ---------------------------------------------------------------- mesh files ----------------


def _write_obj_with_negative_indices(path: Path) -> None:
    # a unit cube as 6 quads, with texture coordinates and relative (negative) indices
    path.write_text(
        "# cube\nmtllib none.mtl\n"
        "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\n"
        "v 0 0 1\nv 1 0 1\nv 1 1 1\nv 0 1 1\n"
        "vt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
        "f -8/-4 -5/-1 -6/-2 -7/-3\n"       # bottom 1 4 3 2
        "f 5/1 6/2 7/3 8/4\n"               # top
        "f 1//1 2//1 6//1 5//1\n"
        "f 2 3 7 6\nf 3 4 8 7\n"
        "f -5 -8 \\\n -4 -1\n"              # left face 4 1 5 8, continued on a second line
    )


def test_obj_reader_negative_indices_and_quads(tmp_path):
    p = tmp_path / "cube.obj"
    _write_obj_with_negative_indices(p)
    v, f = load_mesh(p, normalize=False)
    assert v.shape == (8, 3) and f.shape == (12, 3)
    assert f.dtype == np.int64 and v.dtype == np.float64
    np.testing.assert_array_equal(f[0], [0, 3, 2])  # fan of "-8 -5 -6 -7" with 8 vertices read
    np.testing.assert_array_equal(f[1], [0, 2, 1])
    np.testing.assert_array_equal(f[-2], [3, 0, 4])  # "-5 -8 \\ -4 -1" (line continuation)
    assert set(np.unique(f)) == set(range(8))
    vn, _ = load_mesh(p)
    np.testing.assert_allclose(vn.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(vn, axis=1).max(), 1.0)


def test_obj_bad_index_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.obj"
    p.write_text("v 0 0 0\nv 1 0 0\nf -1 -2 -3\n")
    with pytest.raises(ValueError, match="relative index"):
        load_mesh(p)


@pytest.mark.skipif(not HAVE_TRIMESH, reason="trimesh is needed to read PLY (pip install trimesh)")
def test_ply_unreferenced_vertices_dropped_and_polygons_triangulated(tmp_path):
    p = tmp_path / "quad.ply"
    p.write_text(
        "ply\nformat ascii 1.0\nelement vertex 6\nproperty float x\nproperty float y\n"
        "property float z\nelement face 2\nproperty list uchar int vertex_indices\nend_header\n"
        "9 9 9\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n2 0.5 0\n4 1 2 3 4\n3 2 5 3\n"
    )
    assert meshes.MeshInfo("quad", p, "test").header_counts() == (6, 2)
    v, f = load_mesh(p, normalize=False)
    assert v.shape == (5, 3) and f.shape == (3, 3)
    assert not np.any(np.all(v == 9.0, axis=1))
    assert set(np.unique(f)) == set(range(5))


def test_mesh_dir_env_lists_and_loads_files(tmp_path, monkeypatch):
    d = tmp_path / "meshes"
    d.mkdir()
    _write_obj_with_negative_indices(d / "mycube.obj")
    (d / "notes.txt").write_text("ignored")
    monkeypatch.setenv("DTRITON_MESH_DIR", str(d))
    infos = {i.name: i for i in list_meshes()}
    assert "mycube" in infos and "notes" not in infos
    assert infos["mycube"].source == "$DTRITON_MESH_DIR"
    assert infos["mycube"].header_counts() == (8, 6)
    v, f = load_mesh("mycube")
    assert v.shape == (8, 3) and f.shape == (12, 3)


def test_unknown_mesh_error_names_mesh_and_known_names(tmp_path, monkeypatch):
    d = tmp_path / "meshes"
    d.mkdir()
    _write_obj_with_negative_indices(d / "mycube.obj")
    monkeypatch.setenv("DTRITON_MESH_DIR", str(d))
    with pytest.raises(ValueError) as exc:
        load_mesh("no_such_mesh_xyz")
    msg = str(exc.value)
    assert "no_such_mesh_xyz" in msg and "known meshes" in msg and "mycube" in msg
    with pytest.raises(ValueError, match="unsupported format"):
        (tmp_path / "x.stl").write_text("solid x\nendsolid x\n")
        load_mesh(tmp_path / "x.stl")


def test_no_meshes_at_all_gives_an_actionable_error(monkeypatch):
    monkeypatch.setattr(meshes, "_PACKAGE_MESHES", ())
    with pytest.raises(ValueError, match="DTRITON_MESH_DIR"):
        load_mesh("planar_mesh")
    assert list_meshes() == []


def test_listing_does_not_import_mesh_packages():
    before = {m for m in ("pymeshfix", "pymeshlab", "pyvista") if m in sys.modules}
    list_meshes()
    after = {m for m in ("pymeshfix", "pymeshlab", "pyvista") if m in sys.modules}
    assert after == before


# ---------------------------------------------------------------- real meshes ---------------

HAVE_PYMESHFIX = importlib.util.find_spec("pymeshfix") is not None
HAVE_PYMESHLAB = importlib.util.find_spec("pymeshlab") is not None


@pytest.mark.skipif(not (HAVE_PYMESHFIX and HAVE_TRIMESH),
                    reason="pymeshfix (ships examples/planar_mesh.ply) and trimesh are needed: "
                           "pip install 'dtriton[mesh]'")
def test_load_pymeshfix_planar_mesh(tmp_path, monkeypatch):
    infos = {i.name: i for i in list_meshes()}
    assert infos["planar_mesh"].source == "pymeshfix"
    assert infos["planar_mesh"].header_counts() == (1403, 2553)
    v, f = load_mesh("planar_mesh")
    assert v.shape == (1403, 3) and f.shape == (2553, 3)
    assert v.dtype == np.float64 and f.dtype == np.int64
    np.testing.assert_allclose(v.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1).max(), 1.0)
    assert load_mesh("PLANAR_MESH")[0].shape == (1403, 3)  # unique case-insensitive match

    # copy to a mesh folder (as for an offline GPU machine): same name, listed once
    d = tmp_path / "offline"
    written = meshes.copy_meshes(d, ["planar_mesh"])
    assert [p.name for p in written] == ["planar_mesh.ply"]
    monkeypatch.setenv("DTRITON_MESH_DIR", str(d))
    names = [i.name for i in list_meshes()]
    assert names.count("planar_mesh") == 1
    assert {i.name: i for i in list_meshes()}["planar_mesh"].source == "$DTRITON_MESH_DIR"
    np.testing.assert_array_equal(load_mesh("planar_mesh")[1], f)


@needs_ops
@pytest.mark.skipif(not (HAVE_PYMESHFIX and HAVE_TRIMESH), reason="pymeshfix and trimesh needed")
def test_planar_mesh_operators(tmp_path):
    v, f = load_mesh("planar_mesh")
    ops = spectral_operators(v, f, k=128, cache_dir=tmp_path)
    assert (ops.V, ops.K) == (1403, 128)
    _check_operator_properties(ops, v, f)


@pytest.mark.skipif(not HAVE_PYMESHLAB, reason="pymeshlab (optional, ~100 MB) not installed")
def test_pymeshlab_bunny_negative_obj_indices():
    v, f = load_mesh("bunny10k_textured")
    # positions only: texture seams must not split vertices (trimesh would give 6,451)
    assert v.shape == (5051, 3) and f.shape == (9999, 3)
