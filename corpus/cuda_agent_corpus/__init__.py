"""The cuda-agent corpus: tasks in the KernelBench format, their loaders and importers, and the
synthesis pipeline that grows new tasks from the installed torch's operators."""

__all__ = ["task", "loader", "importers", "catalogue", "compose", "filters", "dedup", "synth"]
