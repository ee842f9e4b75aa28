"""``python -m dtriton.schedule [--write docs/knobs.md]``: print the knob table, or refresh the docs page's."""
import sys

from .knobs import main

sys.exit(main())
