"""The ``world`` command line: one module per command group, rendering with rich."""
