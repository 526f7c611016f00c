"""Hand-outs and platforms: the template, Gradescope's autograder, PrairieLearn's question, GitHub Classroom."""
