import sys

from attention_core.cli import main

sys.exit(main())
