"""`python -m kvconform.conformance.cli ...`: the same as `kvconform ...`."""
import sys

from kvconform.conformance.cli.parser import main

sys.exit(main())
