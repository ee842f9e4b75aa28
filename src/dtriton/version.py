"""dtriton's version: the one place it is written (``pyproject.toml`` reads it from here).

Tuning records carry the version that measured them (:mod:`dtriton.tune.db`): a record from
another version is ignored, since its schedule ran through another compiler."""

__version__ = "0.1.0"
