"""A submission's process from the trusted side: the worker client, the submission, its channel, replies
and timing, and the calls made into it."""
