"""The workloads study: the family on Fashion-MNIST's CNN and Shakespeare's
clients, and its report."""
