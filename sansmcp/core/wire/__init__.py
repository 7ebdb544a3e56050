"""Byte-level HTTP/1.1 (h11) and HTTP/2 (h2) machines that count before they parse."""
