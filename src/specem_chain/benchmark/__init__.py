"""Speed measurements of the ensemble: ours, the reference design, and the members alone."""
