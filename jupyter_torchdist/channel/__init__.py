"""The live channel between the kernel and the ranks: wire format, handshake, TLS, the kernel's server.

Imported on both sides; nothing here imports torch or pyspark.
"""
