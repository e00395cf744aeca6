"""The fault matrix's rows, one module per area."""
