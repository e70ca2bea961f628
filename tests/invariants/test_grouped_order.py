"""The Triton tutorial's hand-written grouped program order (issue 42): its write-all came back NOT PROVED (undecided
after 120 s at fixed shapes). At a specialized grid the checker now solves, program by program, which element writes
an address, so the query has no quantifier: the correct order is proved in well under a second, and orders that leave
a tile unwritten or write one twice get counterexamples. Symbolic grids stay undecided, and say why."""
from __future__ import annotations

import pytest

from argus_inductor.dsl import Policy, kernels_from_source
from argus_inductor.invariants import verify

GROUPED = '''from argus_inductor.dsl import *


@kernel
def grouped_gemm(A: Tensor("M", "K"), B: Tensor("K", "N"), C: Tensor("M", "N"),
                 BM: constexpr = 32, BN: constexpr = 32, BK: constexpr = 32, GROUP_M: constexpr = 4):
    (pid,) = tile_grid(cdiv(M, BM) * cdiv(N, BN))
    num_pid_m = cdiv(M, BM)
    num_pid_n = cdiv(N, BN)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    rm = pid_m * BM + arange(BM)
    rn = pid_n * BN + arange(BN)
    acc = zeros((BM, BN), float32)
    for k in range(0, K, BK):
        rk = k + arange(BK)
        acc = mma(load(A[rm, rk]), load(B[rk, rn]), acc)
    store(C[rm, rn], acc)
'''
POL = Policy.make(BM=32, BN=32, BK=32, GROUP_M=4)


def _kernel(text: str = GROUPED):
    return kernels_from_source(text, "grouped.py")["grouped_gemm"]


@pytest.mark.parametrize("shapes", [dict(M=200, N=136, K=100), dict(M=96, N=300, K=64), dict(M=1000, N=64, K=32)])
def test_the_tutorials_grouped_order_is_proved(shapes):
    res = verify(_kernel(), POL, shapes)
    assert res.proved, res.text()
    assert res.seconds < 5.0


@pytest.mark.parametrize("old,new,kinds", [
    ("pid_n = (pid % num_pid_in_group) // group_size_m", "pid_n = (pid % num_pid_in_group) // GROUP_M",
     {"write-all", "write-once"}),
    ("group_size_m = minimum(num_pid_m - first_pid_m, GROUP_M)", "group_size_m = GROUP_M", {"write-all"}),
])
def test_a_grouped_order_that_misses_the_last_group_has_a_counterexample(old, new, kinds):
    res = verify(_kernel(GROUPED.replace(old, new)), POL, dict(M=200, N=136, K=100))
    assert not res.ok and kinds <= {v.kind for v in res.violations}, res.text()
    v = next(v for v in res.violations if v.kind == "write-all")
    assert "is never written" in v.message and v.values["addr0"] >= 128, v.text()


def test_a_symbolic_grouped_order_is_undecided_and_says_why():
    res = verify(_kernel(), POL, None, timeout_ms=1000)
    assert res.ok and not res.proved
    (u,) = [u for u in res.undecided if u.startswith("write-all")]
    assert "time limit" in u and "quantifies over program ids" in u, u
