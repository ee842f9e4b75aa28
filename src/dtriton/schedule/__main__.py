"""``python -m dtriton.schedule [--write README.md]``: print the knob table, or refresh the README's."""
import sys

from .knobs import main

sys.exit(main())
