"""``python -m cli``: the ``world`` command (``cli.main.main``, which guards its own start-up)."""

from cli.main import main

main()
