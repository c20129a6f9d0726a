"""`python -m common.vram`: see common.vram.report."""

import os
import sys

from common.vram.report import main

try:
    sys.exit(main())
except BrokenPipeError:  # `python -m common.vram | head`: the reader left; stop quietly
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1)
