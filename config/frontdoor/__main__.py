import sys

from config.frontdoor.server import main

sys.exit(main())
