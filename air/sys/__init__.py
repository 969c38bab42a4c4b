"""Built-in ``sys/`` definitions (schemas, effects, capability types) shipped with the package."""
