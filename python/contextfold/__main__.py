"""``python -m contextfold``: the ``contextfold`` command (see :mod:`contextfold.cli`)."""

import sys

from .cli import main

sys.exit(main())
