"""The runtime under the ops: shape signatures (signature.py), the on-disk kernel cache (cache.py), recorded
launches replayed without the host function (replay.py), CUDA-graph replay of compiled graphs (cuda_graphs.py),
compiled graphs replaced once a background swap-in has measured (tiers.py), and the per-call report (reporting.py).

May import: config, dsl. Imported by ops, graph, agent and the top-level modules; never imports them.
"""
