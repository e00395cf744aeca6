"""The fault matrix's parts (``scripts/fault_matrix.py`` is the entry): the commands, the base,
the disk, a case and its run, the report, and the rows, one module per area (``rows``)."""
