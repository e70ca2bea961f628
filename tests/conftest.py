"""Test set-up: on a machine without a GPU, Argus kernels run under the Triton interpreter.

ARGUS_TEST_DEVICE=cuda runs the kernel tests on the GPU at real sizes (see tests/kernels).
"""
import os
import tempfile

if os.environ.get("ARGUS_TEST_DEVICE", "cpu") == "cpu":
    os.environ["ARGUS_INTERPRET"] = "1"
    os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("ARGUS_CACHE_DIR", tempfile.mkdtemp(prefix="argus-test-cache-"))
