"""The op path: the router, eager mode, the CPU fallback, special ops, views, host ops and
the object model of a dense device (docs/ARCHITECTURE.md, "The op path").
"""
