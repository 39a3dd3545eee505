"""``python -m etl.cli``: the ``etl`` command."""

from etl.cli.app import main

main()
