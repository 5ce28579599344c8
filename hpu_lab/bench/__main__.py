"""``python -m hpu_lab.bench``: every section of the benchmark (see the package docstring)."""
from . import main

main()
