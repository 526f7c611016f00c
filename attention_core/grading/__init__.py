"""Grading students' implementations, in rooms from the ground up (each imports only those beneath it):

``intake``      taking submissions in: regular files only, zips and notebooks under bounds, a folder's rule, ids;
``server``      the grading server and its sandbox, loaded by path in a fresh interpreter, and the wire format;
``process``     a submission's process from the trusted side: the client, the submission, its calls and replies;
``properties``  the properties a graded name keeps (shapes, batching, permutation...) and their points;
``naming``      naming mistakes: the library, the slips and operators made on a reference, the diagnosis;
``judging``     judging a submission: the grader, its grades, backward and property checks, a run's options;
``outputs``     what people read: results.json, the gradebook, records, summaries, learning platforms' files;
``platforms``   hand-outs and platforms: the template, Gradescope, PrairieLearn, GitHub Classroom.
"""
