"""The differential fuzzer's families (``benchmarks/fuzz_solve.py`` runs them); ``core``
holds what they share."""
