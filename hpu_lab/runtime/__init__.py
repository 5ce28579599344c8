"""The emulated device: memory manager and the asynchronous executor."""
