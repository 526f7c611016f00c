"""The expression and printed-tensor languages of case files: `expr` strings, the tensors a notebook prints, seeded draws."""
