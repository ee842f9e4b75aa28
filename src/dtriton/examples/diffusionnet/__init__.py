"""Mesh and operator layer for the DiffusionNet spatial-diffusion demo.

The demo reproduces the spectral diffusion layer of Sharp, Attaiki, Crane and
Ovsjanikov, "DiffusionNet: Discretization Agnostic Learning on Surfaces",
ACM TOG 2022 (arXiv:2012.00888), on real triangle meshes.

Submodules (import them explicitly; this package imports nothing on its own):

* ``meshes``    -- find real meshes shipped inside installed PyPI packages (or in
  ``$DTRITON_MESH_DIR``) and load them as normalised numpy arrays.
* ``operators`` -- cotangent Laplacian, lumped mass and the first K Laplacian
  eigenpairs (Sharp & Crane 2020, "A Laplacian for Nonmanifold Triangle Meshes"),
  cached on disk; plus a numpy-only synthetic mesh for tests.
"""
