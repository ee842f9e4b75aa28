"""Real triangle meshes for the DiffusionNet demo, found inside installed PyPI packages.

No file is downloaded at run time. The meshes come from:

* ``pymeshfix`` (small wheel, part of the ``mesh`` extra): ``examples/planar_mesh.ply`` and
  ``examples/StanfordBunny.ply``;
* ``pymeshlab`` (about 100 MB, optional, used only when installed): several files under
  ``tests/sample_meshes/``;
* ``pyvista`` (optional): ``examples/ant.ply`` and ``examples/airplane.ply``;
* every ``.ply`` / ``.obj`` file in the folder(s) named by ``$DTRITON_MESH_DIR``
  (``os.pathsep``-separated). This is how a machine without network access gets the meshes:
  :func:`copy_meshes` writes them under their canonical names, so the names stay the same there.

Package folders are located with :func:`importlib.util.find_spec` (which does not import a
top-level package) or, failing that, with :mod:`importlib.metadata`; the heavy packages are
never imported. PLY files are read with ``trimesh`` (``process=False``); OBJ files with a small
position-only reader in this module, because ``trimesh`` splits vertices along texture seams
(which would cut the surface open) and mishandles negative (relative) OBJ indices when asked to
keep the vertex order.

The meshes are used as inputs of the spectral diffusion layer of Sharp et al. 2022,
"DiffusionNet: Discretization Agnostic Learning on Surfaces", ACM TOG (arXiv:2012.00888), whose
reference code also centres and scales each shape before computing its operators.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

__all__ = [
    "MESH_DIR_ENV",
    "MeshInfo",
    "list_meshes",
    "load_mesh",
    "normalize_positions",
    "copy_meshes",
]

#: Environment variable naming extra mesh folder(s) (``os.pathsep``-separated).
MESH_DIR_ENV = "DTRITON_MESH_DIR"

_SUFFIXES = (".ply", ".obj")

# (package, file inside the package, canonical name, description).
# Ordered roughly by vertex count. Vertex counts are those after dropping unreferenced vertices.
_PACKAGE_MESHES: tuple[tuple[str, str, str, str], ...] = (
    ("pyvista", "examples/ant.ply", "ant", "ant (pyvista), 486 vertices"),
    ("pyvista", "examples/airplane.ply", "pyvista_airplane", "airplane (pyvista), 1,335 vertices"),
    ("pymeshfix", "examples/planar_mesh.ply", "planar_mesh",
     "planar patch with boundary (pymeshfix), 1,403 vertices"),
    ("pymeshlab", "tests/sample_meshes/bone.ply", "bone",
     "bone (pymeshlab), 1,513 referenced of 1,872 vertices in the file"),
    ("pymeshlab", "tests/sample_meshes/cow.obj", "cow", "cow (pymeshlab), 2,904 vertices"),
    ("pymeshlab", "tests/sample_meshes/bunny10k_textured.obj", "bunny10k_textured",
     "Stanford bunny, 10k faces, negative OBJ indices (pymeshlab), 5,051 vertices"),
    ("pymeshlab", "tests/sample_meshes/airplane.obj", "airplane",
     "airplane (pymeshlab), 5,400 referenced of 7,017 vertices in the file"),
    ("pymeshlab", "tests/sample_meshes/bunny.obj", "bunny",
     "Stanford bunny (pymeshlab), 28,088 vertices"),
    ("pymeshfix", "examples/StanfordBunny.ply", "StanfordBunny",
     "Stanford bunny with holes (pymeshfix), 50,000 vertices"),
    ("pymeshlab", "tests/sample_meshes/rangemaps/face000.ply", "face000",
     "range scan of a face (pymeshlab), 85,182 referenced of 85,849 vertices, 17 components"),
)


@dataclass(frozen=True)
class MeshInfo:
    """One mesh file that :func:`load_mesh` can read.

    Attributes:
        name: unique short name accepted by :func:`load_mesh` (the file stem for package meshes
            and for files in ``$DTRITON_MESH_DIR``, unless two files share a stem).
        path: absolute path of the ``.ply`` / ``.obj`` file.
        source: where it was found: a package name (``"pymeshfix"``, ``"pymeshlab"``,
            ``"pyvista"``) or ``"$DTRITON_MESH_DIR"``.
        description: free text (for package meshes: what it is and its vertex count).

    Source: the files shipped by pymeshfix / pymeshlab / pyvista, used as test shapes for the
    spectral diffusion layer of Sharp et al. 2022 (DiffusionNet).
    """

    name: str
    path: Path
    source: str
    description: str = ""

    def header_counts(self) -> tuple[int, int]:
        """Return ``(vertices, faces)`` as declared in the file, without building the mesh.

        For PLY this reads the header only; for OBJ it counts ``v`` and ``f`` lines (polygons,
        not triangles). Unreferenced vertices are included, so :func:`load_mesh` may return
        fewer vertices.

        Raises:
            OSError: if the file cannot be read.
            ValueError: if a PLY header is malformed.

        Source: PLY header (``element vertex N`` / ``element face N``) and Wavefront OBJ
        record formats.
        """
        return _header_counts(self.path)


# --------------------------------------------------------------------------------------------
# discovery
# --------------------------------------------------------------------------------------------


def _package_dirs(package: str) -> list[Path]:
    """Folders of an installed top-level package, found without importing it."""
    dirs: list[Path] = []
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        dirs.extend(Path(p) for p in spec.submodule_search_locations)
    if not dirs:
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            return []
        candidate = Path(str(dist.locate_file(package)))
        if candidate.is_dir():
            dirs.append(candidate)
    return dirs


def _find_package_file(package: str, relpath: str) -> Path | None:
    for d in _package_dirs(package):
        p = d / relpath
        if p.is_file():
            return p.resolve()
    return None


def _mesh_dir_files() -> list[Path]:
    value = os.environ.get(MESH_DIR_ENV, "")
    files: list[Path] = []
    for entry in value.split(os.pathsep):
        if not entry.strip():
            continue
        d = Path(entry).expanduser()
        if not d.is_dir():
            continue
        files.extend(
            p.resolve() for p in sorted(d.iterdir())
            if p.is_file() and p.suffix.lower() in _SUFFIXES
        )
    return files


def _same_size(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size
    except OSError:
        return False


def list_meshes() -> list[MeshInfo]:
    """List the real meshes available on this machine.

    Looks, in this order, at every ``.ply`` / ``.obj`` file directly inside the folder(s) named by
    ``$DTRITON_MESH_DIR`` (``os.pathsep``-separated; not recursive) and at the known files shipped
    inside the ``pymeshfix``, ``pymeshlab`` and ``pyvista`` packages. Packages that are not
    installed, and files missing from them, contribute nothing; no package is imported.

    Names are unique. A package mesh whose name is already taken by a file of the same size in
    ``$DTRITON_MESH_DIR`` is taken to be a copy of it and listed once; otherwise it is listed as
    ``"<package>_<name>"``. Two files in the mesh folders with the same stem are told apart by
    their file name (``"bunny.obj"``).

    Returns:
        list of :class:`MeshInfo`: mesh-folder files first (sorted by name), then package
        meshes roughly from small to large. Possibly empty.

    Errors: none raised for missing packages or folders.

    Source: package file locations as shipped in the pymeshfix / pymeshlab / pyvista wheels; the
    meshes span the 5k-12k vertex regime of the datasets of Sharp et al. 2022 (DiffusionNet).
    """
    out: list[MeshInfo] = []
    by_name: dict[str, MeshInfo] = {}

    def add(info: MeshInfo) -> None:
        out.append(info)
        by_name[info.name] = info

    for path in _mesh_dir_files():
        name = path.stem if path.stem not in by_name else path.name
        if name in by_name:
            continue  # same file reachable through two folders
        add(MeshInfo(name, path, "$" + MESH_DIR_ENV, f"file {path.name} in ${MESH_DIR_ENV}"))

    for package, relpath, name, description in _PACKAGE_MESHES:
        path = _find_package_file(package, relpath)
        if path is None:
            continue
        if name in by_name:
            if _same_size(by_name[name].path, path):
                continue
            name = f"{package}_{name}"
            if name in by_name:
                continue
        add(MeshInfo(name, path, package, description))
    return out


# --------------------------------------------------------------------------------------------
# readers
# --------------------------------------------------------------------------------------------

_PLY_ELEMENT = re.compile(rb"^element\s+(\S+)\s+(\d+)")


def _header_counts(path: Path) -> tuple[int, int]:
    path = Path(path)
    if path.suffix.lower() == ".ply":
        n_v = n_f = 0
        with open(path, "rb") as fh:
            if fh.readline().strip() != b"ply":
                raise ValueError(f"{path}: not a PLY file (missing 'ply' magic)")
            for _ in range(10_000):
                line = fh.readline()
                if not line:
                    raise ValueError(f"{path}: PLY header has no end_header")
                line = line.strip()
                if line == b"end_header":
                    return n_v, n_f
                m = _PLY_ELEMENT.match(line)
                if m and m.group(1) == b"vertex":
                    n_v = int(m.group(2))
                elif m and m.group(1) == b"face":
                    n_f = int(m.group(2))
        raise ValueError(f"{path}: PLY header too long")
    n_v = n_f = 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.startswith(b"v ") or line.startswith(b"v\t"):
                n_v += 1
            elif line.startswith(b"f ") or line.startswith(b"f\t"):
                n_f += 1
    return n_v, n_f


def _fan(polygon: list[int]) -> Iterable[tuple[int, int, int]]:
    a = polygon[0]
    for j in range(1, len(polygon) - 1):
        yield a, polygon[j], polygon[j + 1]


def _read_obj(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Positions and triangles of a Wavefront OBJ file.

    Only ``v`` and ``f`` records are used: texture and normal indices are ignored, so vertices
    are never split along UV seams. Negative indices are relative to the vertices read so far
    (OBJ specification). Polygons are fan-triangulated. Line continuations (``\\``) and comments
    are handled.
    """
    verts: list[tuple[float, float, float]] = []
    tris: list[tuple[int, int, int]] = []
    pending = ""
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.split("#", 1)[0].rstrip()
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line, pending = (pending + line).strip(), ""
            if not line:
                continue
            tok = line.split()
            if tok[0] == "v":
                if len(tok) < 4:
                    raise ValueError(f"{path}:{lineno}: vertex with fewer than 3 coordinates")
                verts.append((float(tok[1]), float(tok[2]), float(tok[3])))
            elif tok[0] == "f":
                poly: list[int] = []
                n = len(verts)
                for t in tok[1:]:
                    i = int(t.split("/", 1)[0])
                    if i > 0:
                        poly.append(i - 1)
                    elif i < 0:
                        if -i > n:
                            raise ValueError(
                                f"{path}:{lineno}: relative index {i} but only {n} vertices so far")
                        poly.append(n + i)
                    else:
                        raise ValueError(f"{path}:{lineno}: OBJ indices start at 1, got 0")
                if len(poly) >= 3:
                    tris.extend(_fan(poly))
    v = np.asarray(verts, dtype=np.float64).reshape(-1, 3)
    f = np.asarray(tris, dtype=np.int64).reshape(-1, 3)
    if f.size and f.max() >= len(v):
        raise ValueError(f"{path}: face index {int(f.max()) + 1} exceeds the {len(v)} vertices")
    return v, f


def _read_ply(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        import trimesh
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading PLY meshes needs trimesh: pip install 'dtriton[mesh]' (or pip install trimesh)"
        ) from e
    mesh = trimesh.load(str(path), file_type="ply", process=False, force="mesh")
    faces = getattr(mesh, "faces", None)
    if faces is None or len(faces) == 0:
        raise ValueError(f"{path}: no faces (a point cloud?); a triangle mesh is needed")
    verts = np.asarray(mesh.vertices, dtype=np.float64).reshape(-1, 3)
    faces = np.asarray(faces, dtype=np.int64)
    if faces.ndim != 2 or faces.shape[1] != 3:
        # trimesh triangulates polygon PLY faces; guard against anything else
        raise ValueError(f"{path}: expected triangle faces, got array of shape {faces.shape}")
    return verts, faces


def _clean(verts: np.ndarray, faces: np.ndarray, label: str) -> tuple[np.ndarray, np.ndarray]:
    """Drop degenerate (repeated-index) faces and unreferenced vertices; check values."""
    if faces.size == 0:
        raise ValueError(f"mesh {label!r} has no faces")
    if faces.min() < 0 or faces.max() >= len(verts):
        raise ValueError(f"mesh {label!r}: face indices out of range [0, {len(verts)})")
    ok = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    faces = faces[ok]
    if faces.size == 0:
        raise ValueError(f"mesh {label!r} has only degenerate faces")
    used, inverse = np.unique(faces.ravel(), return_inverse=True)
    verts = verts[used]
    faces = inverse.reshape(-1, 3).astype(np.int64)
    if not np.all(np.isfinite(verts)):
        raise ValueError(f"mesh {label!r} has non-finite vertex coordinates")
    return np.ascontiguousarray(verts, dtype=np.float64), np.ascontiguousarray(faces)


def normalize_positions(verts: np.ndarray) -> np.ndarray:
    """Centre vertices at their mean and scale them so the farthest one is at distance 1.

    The eigen-solver's shift (see :func:`dtriton.examples.diffusionnet.operators.spectral_operators`)
    is not scale-invariant, so DiffusionNet (Sharp et al. 2022) normalises every shape first.

    Args:
        verts: (V, 3) array of positions, any real dtype, any unit.

    Returns:
        (V, 3) float64 array, unitless, with mean 0 and max norm 1.

    Raises:
        ValueError: if ``verts`` is not (V, 3) with V >= 1, or all vertices coincide.
    """
    v = np.asarray(verts, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] != 3 or v.shape[0] == 0:
        raise ValueError(f"verts must have shape (V, 3) with V >= 1, got {v.shape}")
    v = v - v.mean(axis=0, keepdims=True)
    radius = float(np.sqrt((v * v).sum(axis=1)).max())
    if not np.isfinite(radius) or radius == 0.0:
        raise ValueError("cannot normalise: all vertices coincide (or are not finite)")
    return v / radius


def _known_names_text(infos: list[MeshInfo]) -> str:
    if not infos:
        return (
            "no meshes are available: install pymeshfix (pip install 'dtriton[mesh]') or "
            f"pymeshlab, or set ${MESH_DIR_ENV} to a folder of .ply/.obj files"
        )
    return "known meshes: " + ", ".join(i.name for i in infos)


def _resolve(name_or_path: str | os.PathLike) -> tuple[Path, str]:
    infos = list_meshes()
    if isinstance(name_or_path, str):
        key = name_or_path
        for info in infos:
            if info.name == key:
                return info.path, info.name
        folded = [i for i in infos if i.name.lower() == key.lower()]
        if len(folded) == 1:
            return folded[0].path, folded[0].name
    elif not isinstance(name_or_path, os.PathLike):
        raise TypeError(f"expected a mesh name or a path, got {type(name_or_path).__name__}")
    p = Path(name_or_path).expanduser()
    if p.is_file():
        if p.suffix.lower() not in _SUFFIXES:
            raise ValueError(f"mesh file {str(p)!r}: unsupported format {p.suffix!r} "
                             f"(supported: {', '.join(_SUFFIXES)})")
        return p, p.stem
    raise ValueError(
        f"unknown mesh {str(name_or_path)!r}: neither a known mesh name nor an existing "
        f".ply/.obj file; {_known_names_text(infos)}"
    )


def load_mesh(name_or_path: str | os.PathLike, *, normalize: bool = True
              ) -> tuple[np.ndarray, np.ndarray]:
    """Load a triangle mesh by name (see :func:`list_meshes`) or by file path.

    PLY files are read with ``trimesh`` (``process=False``: no merging or reordering of
    vertices); OBJ files with a position-only reader that resolves negative indices and ignores
    texture/normal indices (so UV seams do not cut the surface). Polygons are triangulated,
    faces with a repeated vertex are dropped, unreferenced vertices are dropped (faces are
    re-indexed, vertex order otherwise kept), and, when ``normalize`` is true, positions are
    centred and scaled to unit radius (:func:`normalize_positions`), as DiffusionNet
    (Sharp et al. 2022) does before computing operators.

    Args:
        name_or_path: a name from :func:`list_meshes` (exact, or case-insensitive if unique), or
            a path to a ``.ply`` / ``.obj`` file.
        normalize: centre and scale to unit radius (default). If false, the file's units are kept.

    Returns:
        ``(verts, faces)``: verts is a (V, 3) float64 array (unitless if normalised), faces a
        (F, 3) int64 array of vertex indices in [0, V); every vertex is referenced.

    Raises:
        ValueError: unknown name (the message lists the known names), unsupported file type,
            malformed file, no (non-degenerate) faces, non-finite coordinates.
        ImportError: a PLY file is requested and ``trimesh`` is not installed.
        TypeError: ``name_or_path`` is neither ``str`` nor path-like.
    """
    path, label = _resolve(name_or_path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".obj":
            verts, faces = _read_obj(path)
        else:
            verts, faces = _read_ply(path)
    except (ValueError, ImportError):
        raise
    except Exception as e:  # trimesh raises assorted types on malformed files
        raise ValueError(f"mesh {label!r} ({path}): cannot read: {type(e).__name__}: {e}") from e
    verts, faces = _clean(verts, faces, label)
    if normalize:
        verts = normalize_positions(verts)
    return verts, faces


def copy_meshes(dest: str | os.PathLike, names: Iterable[str] | None = None) -> list[Path]:
    """Copy mesh files into ``dest`` under their canonical names, for ``$DTRITON_MESH_DIR``.

    Use it to carry the meshes to a machine without network access: after
    ``copy_meshes(d)`` there, ``DTRITON_MESH_DIR=d`` makes :func:`list_meshes` list the same names.

    Args:
        dest: destination folder (created if missing).
        names: names from :func:`list_meshes`; all of them when ``None``.

    Returns:
        list of the written paths, in the order of ``names`` (or of :func:`list_meshes`).

    Raises:
        ValueError: an unknown name (the message lists the known names).
        OSError: the folder or a file cannot be written.

    Source: helper of this project (no algorithm); the files are inputs of DiffusionNet
    (Sharp et al. 2022).
    """
    infos = {i.name: i for i in list_meshes()}
    wanted = list(infos) if names is None else list(names)
    missing = [n for n in wanted if n not in infos]
    if missing:
        raise ValueError(f"unknown mesh(es) {missing}; {_known_names_text(list(infos.values()))}")
    out_dir = Path(dest).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for n in wanted:
        info = infos[n]
        target = out_dir / (n + info.path.suffix.lower() if not n.lower().endswith(_SUFFIXES) else n)
        if target.resolve() != info.path.resolve():
            shutil.copyfile(info.path, target)
        written.append(target)
    return written
