"""The pytest glue: options, the case checks as test items, and the syrupy snapshot extension."""
