"""``python -m hpu_lab.lab.bench``: every section of the benchmark (see the package docstring)."""
from . import main

main()
