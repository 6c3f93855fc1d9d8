"""The starter corpus's source: patterns (task program, ModelNew, C++ and CUDA kernels,
binding) from which write_starter.py writes corpus/tasks/{smoke,bench} and corpus/demos."""
