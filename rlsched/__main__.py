"""python -m rlsched."""

from rlsched.cli import main

raise SystemExit(main())
