"""One round and the loop of rounds: the Hyper and its fields, the run's spec, the rule
step and the stages of a round, participation, the compiled loop."""
