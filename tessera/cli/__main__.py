"""``python -m tessera.cli``: the ``tessera`` command."""

import sys

from . import entry

sys.exit(entry())
