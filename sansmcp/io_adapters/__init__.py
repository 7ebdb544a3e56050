"""Thin drivers that run the pure core on real sockets: one per runtime."""
