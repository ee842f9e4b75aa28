"""Which meshes the demo runs (:mod:`.demo`): names, paths and synthetic meshes, the CPU size limit."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CPU_MAX_VERTICES", "split_names", "load_named_mesh", "default_meshes", "header_vertices"]

#: largest mesh (vertices) the demo runs by default on the CPU interpreter
CPU_MAX_VERTICES = 3000


def split_names(values: list[str] | None) -> list[str] | None:
    """Mesh names from ``--meshes``-style values (each may be a comma-separated list); None stays None."""
    if values is None:
        return None
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


def load_named_mesh(name: str):
    """(verts, faces, source) for a mesh name, a path, or ``synthetic-KIND-N``.

    Raises ``ValueError`` for a malformed synthetic name (and what :func:`.meshes.load_mesh` raises)."""
    from .meshes import load_mesh
    from .operators import synthetic_mesh
    if name.startswith("synthetic-"):
        parts = name.split("-")
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"synthetic mesh names look like synthetic-sphere-1000, got {name!r}")
        v, f = synthetic_mesh(int(parts[2]), parts[1])
        return v, f, "synthetic_mesh (numpy)"
    v, f = load_mesh(name)
    return v, f, "file"


def default_meshes(gpu: bool) -> tuple[list[str], str]:
    """(mesh names, a note on the choice): every mesh found on the GPU; on the CPU those of at most
    :data:`CPU_MAX_VERTICES` vertices, padded with synthetic spheres to three; synthetic meshes
    when none is found."""
    from .meshes import list_meshes
    try:
        infos = list_meshes()
    except Exception as e:  # noqa: BLE001 - discovery must never stop the demo
        infos, err = [], f"{type(e).__name__}: {e}"
    else:
        err = ""
    if not gpu:
        def small(i):
            try:
                return i.header_counts()[0] <= CPU_MAX_VERTICES
            except (OSError, ValueError):
                return False
        infos = [i for i in infos if small(i)]
    if infos and (gpu or len(infos) >= 3):
        return [i.name for i in infos], ""
    if infos:
        # few small real meshes here (pymeshfix ships one): add synthetic spheres so the CPU plot of
        # time against V has more than one point; the report marks them synthetic
        fill = [f"synthetic-sphere-{n}" for n in (500, 2500)][: 3 - len(infos)]
        return [i.name for i in infos] + fill, (f"only {len(infos)} real mesh(es) of <= {CPU_MAX_VERTICES:,} vertices "
                                                f"found; adding {', '.join(fill)}")
    why = ("no mesh package found (pip install 'dtriton[mesh]' for pymeshfix/trimesh, or set "
           "$DTRITON_MESH_DIR)" + (f"; {err}" if err else ""))
    if not gpu:
        why = f"no real mesh of <= {CPU_MAX_VERTICES} vertices found: " + why
    return ["synthetic-sphere-1000", "synthetic-grid-900"], why + "; using synthetic meshes"


def header_vertices(name: str) -> int:
    """Vertex count of a mesh name without loading it (0 when unknown)."""
    if name.startswith("synthetic-"):
        tail = name.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else 0
    from .meshes import MeshInfo, list_meshes
    try:
        for i in list_meshes():
            if i.name == name:
                return i.header_counts()[0]
        p = Path(name)
        return MeshInfo(p.stem, p, "path").header_counts()[0] if p.is_file() else 0
    except (OSError, ValueError):
        return 0
