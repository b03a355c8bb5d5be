"""Records every backend writes, and the summaries computed from them."""
