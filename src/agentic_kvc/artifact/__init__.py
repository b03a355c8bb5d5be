"""Paper artifact evaluation: the claims registry (artifact/claims.yaml), one verdict per claim
(expected vs obtained), the generated appendix (ARTIFACT.md) and the archive's checksums."""
