"""`python -m glowsdk` is the `glowsdk` command."""
import sys

from .cli.main import main

sys.exit(main())
