"""The studies: each report's code, one subpackage per study.

    paper/       the LAQ paper's experiments and REPORT.md (experiments.reproduce)
    family/      every preset of the family, and where each wins (experiments.family)
    federated/   the federated experiment and its report (experiments.federated)

A study imports the run plumbing (experiments.run), configs and laq_jax;
never a launcher or another study.
"""
