"""Writing outputs for people: results.json and the gradebook, records, summaries, learning platforms' files,
and the batch command that writes them."""
