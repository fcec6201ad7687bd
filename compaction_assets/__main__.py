import sys

from compaction_assets.cli import run

sys.exit(run())
