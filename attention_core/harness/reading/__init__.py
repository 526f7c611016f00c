"""Reading case files and assignments: YAML with lines, the case-file model, settling a case, a folder's items, an assignment and its settings."""
