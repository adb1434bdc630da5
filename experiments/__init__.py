"""Command-line entry points, the run driver and the studies (the only place
with files), in three layers, each importing only those below it:

    experiments/*.py       the launchers: absl flags, then one call
    experiments/run/       the run plumbing: config -> the library's parts,
                           files, TensorBoard events, progress (laq_jax)
    experiments/studies/   each study's code: paper/, family/, federated/

    python -m experiments.main --config=configs/mnist_logreg.py --workdir=DIR
    python -m experiments.compare --workdirs DIR1 DIR2 ... --out DIR

From Python: `experiments.run.train.train_and_evaluate(config, workdir)`.
"""
