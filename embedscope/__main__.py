import sys

from embedscope.cli import main

sys.exit(main())
