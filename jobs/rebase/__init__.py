"""The rebase family: stream -> backlog -> stream at a cut, and the changes of definition made the same way.

run: a rebase from its pause to its handoff; cut: the cut and what the backlog folds to reach it; checks: what it
refuses before its pause; requests: its requests in the log and their way on; reconciliation: the recomputed state
against the streamed one at the cut; redeploy: a changed definition switched in at a cut, and rollback; beside: a
redeploy's tiles made beside the live stream; reparse: its dead letters made again when records parse otherwise;
rekey: the updates topic at a cut that changes the key or the parse."""
