"""Benchmarks of the grid program (pytest-benchmark). Figures only: nothing here asserts a timing.

Run them with

    .venv/bin/python -m pytest benchmarks --benchmark-enable -p no:randomly -q     # `make bench`

which times every benchmark at full size (published grid: 18 conditions × 5 seeds,
100 inner steps per timed iteration; scaling up to 360 runs) and writes
artifacts/bench/bench.json and artifacts/bench/bench.md. Modes:

- disabled (`make test-all`, where pyproject's addopts carry --benchmark-disable): each
  benchmark body runs once at untimed size (1 seed, 2 steps, runs [1, 2], a 2-condition
  subset of the published grid) to check the code works; nothing is written.
- COEVOLAB_BENCH_QUICK=1 with --benchmark-enable: real code paths at reduced sizes
  (1 seed, 10 steps, runs [1, 2, 4], 3 rounds); the files are written and marked "quick".

The figures (see each test module):
- test_compile: cold and warm (persistent cache) compile of the grid program.
- test_throughput: µs per run-step of the published grid; scaling with the number of
  runs; batched vs one-run-at-a-time programs.
- test_flops: XLA's FLOPs per run-step vs an analytic matmul count, achieved GFLOP/s vs
  the CPU's FP32 peak.
- test_padding: the grid as one program vs the same runs grouped by shape.
"""
