"""The grading server and its sandbox: what the server runs, loaded by path (the server, the sandbox,
cgroups, a submission's process from inside, the wire format)."""
