"""Writing cases: a notebook imported as a draft, lint, record, and a new file's skeleton."""
