"""Argus Inductor's benchmarks (run from the repository root, on a GPU unless said otherwise).

The maintained ones, each writing its table under benchmarks/results/:
- ops.py: the GEMM, attention and MoE kernels against cuBLAS, SDPA (flash, cuDNN) and torch._grouped_mm;
- fp32_gemm.py: float32 GEMMs at float32 accuracy against cuBLAS SGEMM;
- sweep.py: hand-set policy grids per op (the references `argus warmup --reference` reads);
- e2e.py: Llama-3-8B and Mixtral-8x7B dims end to end against eager and Inductor (`--smoke` on the CPU), with
  e2e_profile.py (each workload's GPU time by kernel) and host_probe.py (a compiled call's host time by layer);
- overhead.py: host cost per call of KernelBench-format problems (replayed ops, inlined ops, CUDA graphs);
- compile_audit.py: every template kernel compiled for sm_90 and gfx942 on the CPU (registers, spills, shared memory);
- kernelbench/: KernelBench-format problems and their runner.

probes/ holds narrower measurements that settled a design question and may be run again (probes/README.md);
benchmarks/results/NOTES.md says where each op class stands and why.
"""
