import sys

from tbr.cli import main

sys.exit(main())
