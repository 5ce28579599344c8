"""Where hpu_lab meets stock PyTorch: the "hpu" device's registration, ``torch.Generator``,
``torch.save``/``load``, run-time settings, and ``torch.compile``'s ``hpu_backend``.
"""
