"""What the CLI runs: reproductions of the papers' tables, simulations, comparisons, training.

What this layer owns: turning command-line options into library calls and library results into
tables, JSON documents and plots (``cli_sim``: simulate/compare, with ``cli_traces`` for trace
files; ``cli_train``: train; ``cli_tune``: tune; ``cli_output``: plot paths, progress, warnings;
``reproduce`` and ``repro_*``: the REPRODUCTIONS registry of the papers' tables; ``gcdc_table1``
and ``gcdc_figures``: GC-DC's Monte Carlo experiments). It may import every layer below; nothing
below imports it. The typer app itself is ``gradcode.cli``.
"""
