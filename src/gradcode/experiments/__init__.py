"""What the CLI runs: reproductions of the papers' tables, simulations, comparisons, training."""
