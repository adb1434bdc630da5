"""The successors of lazy aggregation against their papers: each section of
the "After LAQ" contract's reference experiments, and its report."""
