"""Triton kernels. Import through :mod:`warpdecode` (which decides interpreter vs GPU first)."""
