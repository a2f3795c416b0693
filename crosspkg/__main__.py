import sys

from safetyrepro.crosspkg.cli import main

sys.exit(main())
