"""``python -m dtriton``: the ``dtriton`` command line (:mod:`dtriton.cli`) without the installed script."""

from .cli import main

if __name__ == "__main__":  # pragma: no cover - run as a module
    main(prog_name="dtriton")
