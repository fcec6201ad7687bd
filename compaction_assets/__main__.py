import sys

from compaction_assets.cli import main

sys.exit(main())
