import sys

from fsdp2_port.cli import main

sys.exit(main())
