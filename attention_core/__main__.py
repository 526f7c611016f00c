import sys

from attention_core.cli import run

sys.exit(run())
