"""``python -m soloist`` is the ``soloist`` command."""

from soloist.cli import main

main()
