"""`python -m compaction_assets.demo` (and scripts/demo.sh): runs the demo of compaction_assets/demo/__init__.py."""

import sys

from compaction_assets.demo import main

sys.exit(main())
