"""`python -m tickgpu` is the `tickgpu` command."""
from tickgpu.cli import main

raise SystemExit(main())
