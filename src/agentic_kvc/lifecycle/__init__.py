"""The PD transfer lifecycle microbenchmark (t0..t10 timestamps)."""
