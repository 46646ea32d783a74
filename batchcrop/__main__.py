"""`python -m batchcrop` is the `batchcrop` command."""

import sys

from batchcrop.cli import main

sys.exit(main())
