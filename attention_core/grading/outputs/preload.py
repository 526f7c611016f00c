"""What the fork server of a batch's grader processes imports before it forks any: the grader's side (torch with
it), then its objects frozen out of the cyclic collector's passes, so that a grader process's collections do not
write to (and so copy) the pages it shares with the fork server and the other grader processes."""

from attention_core.grading.outputs import graders

graders.freeze()
