"""`python -m batchcrop` is the `batchcrop` command."""

import sys

from batchcrop.cli.main import main

sys.exit(main())
