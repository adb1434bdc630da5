"""Command-line entry points and the run driver (the only place with files).

    python -m experiments.main --config=configs/mnist_logreg.py --workdir=DIR
    python -m experiments.compare --workdirs DIR1 DIR2 ... --out DIR

From Python: `experiments.run.train.train_and_evaluate(config, workdir)`.
"""
