"""What the CLI runs: reproductions of the papers' tables, simulations, comparisons, training.

What this layer owns: turning command-line options into library calls and library results into
tables, JSON documents and plots (``cli_sim``: simulate/compare; ``cli_train``: train;
``reproduce`` and ``repro_*``: the REPRODUCTIONS registry of the papers' tables). It may import
every layer below; nothing below imports it. The typer app itself is ``gradcode.cli``.
"""
