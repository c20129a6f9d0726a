"""`python -m common.vram`: see common.vram.report."""

import sys

from common.vram.report import main

sys.exit(main())
