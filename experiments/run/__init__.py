"""The run plumbing: a config into the library's parts, and what a run leaves.

    config.py, build.py     the config checked; a config -> data, model,
                            RunSpec, Hyper
    train.py, grid.py       one run / one sweep into a workdir
    outputs.py, events.py   files written whole, TensorBoard events
    progress.py, cli.py     progress, the launchers' one-line errors

Imports laq_jax (and configs/default.py, the schema), never a launcher or a
study; README.md ("How it is built") lists every module.
"""
