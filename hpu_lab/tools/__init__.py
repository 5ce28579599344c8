"""Developer tools that run outside the lab: ``python -m hpu_lab.tools.bridge_suite`` runs Intel's
own bridge test suite on hpu_lab."""
