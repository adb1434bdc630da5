"""The run plumbing: a config into the library's parts, and what a run leaves.

    config.py    the config schema, its validation, a sweep's grid points
    build.py     a config -> data, model, RunSpec, Hyper
    train.py     one run into a workdir (train_and_evaluate)
    grid.py      one sweep into a workdir (sweep_and_evaluate)
    outputs.py, events.py, progress.py, ...   files, TensorBoard, progress

Imports laq_jax (and configs/default.py, the schema), never a launcher or a
study.
"""
