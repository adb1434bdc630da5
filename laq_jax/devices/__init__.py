"""Several devices and processes: the sharded mesh, JAX's multi-process
runtime, checkpoints."""
