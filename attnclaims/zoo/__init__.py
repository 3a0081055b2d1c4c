"""The zoo: implementations that are not the reference. Three correct styles written independently
(einsum, explicit loops, log-domain), single-bug mutants of them, and misbehaving implementations
(hangs, crashes, wrong types) that the harness must survive. Used by the meta tests, the negative
controls of the claim suite and ``attnclaims mutants``."""
