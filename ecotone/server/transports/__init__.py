"""I/O adapters that move frames between peers and the kernel (trio)."""
