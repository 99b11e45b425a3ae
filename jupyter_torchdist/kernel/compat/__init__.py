"""The peers' classes under our run path: pyspark's ``TorchDistributor`` and ``DeepspeedTorchDistributor``, with
their GPU sizing."""
