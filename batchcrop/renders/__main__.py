"""`python -m batchcrop.renders CONN LIFE`: a render child (`child.main`), started by
`spawn.spawn` with both descriptors inherited; not a command for people."""

from __future__ import annotations

import sys

from batchcrop.renders.child import main

if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
