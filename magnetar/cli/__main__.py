"""``python -m magnetar.cli``."""

import sys

from magnetar.cli import main

sys.exit(main())
