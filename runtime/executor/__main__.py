"""``python -m runtime.executor --host 127.0.0.1 --port P [--workers N]``."""

import sys

from runtime.executor.server import main

sys.exit(main())
