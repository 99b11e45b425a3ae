"""Put on PYTHONPATH by the GPU placement tests: every Python process of the test's kernel, its Spark workers and
its ranks gets the CUDA stand-in of ``fakecuda`` when FAKE_CUDA_GPUS is set (tests only; nothing in the package
reads that variable)."""
import os

if os.environ.get("FAKE_CUDA_GPUS"):
    import fakecuda

    fakecuda.install_on_import()
