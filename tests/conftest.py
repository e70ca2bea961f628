"""Test set-up: on a machine without a GPU, Argus kernels run under the Triton interpreter.

ARGUS_TEST_DEVICE=cuda runs the kernel tests on the GPU at real sizes (see tests/kernels).
"""
import atexit
import os
import shutil
import tempfile

if os.environ.get("ARGUS_TEST_DEVICE", "cpu") == "cpu":
    os.environ["ARGUS_INTERPRET"] = "1"
    os.environ["TRITON_INTERPRET"] = "1"
if "ARGUS_CACHE_DIR" not in os.environ:  # a cache of the run's own, gone with it (not left in /tmp run after run)
    os.environ["ARGUS_CACHE_DIR"] = tempfile.mkdtemp(prefix="argus-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ARGUS_CACHE_DIR"], ignore_errors=True)
