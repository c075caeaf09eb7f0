"""fsdp2-port: move PyTorch training code from FSDP1 to FSDP2 without changing what it computes.

Importing this package imports no torch: ``fsdp2-port migrate`` runs where torch is absent.
"""

__version__ = "0.1.0"
