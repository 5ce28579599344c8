"""Pending graph -> torch.fx graph -> passes -> Recipe; and the recipe cache."""
from .recipe import Recipe, GraphKey          # noqa: F401
from .build import compile_graph              # noqa: F401
from .cache import lookup, store, clear, recipes  # noqa: F401
