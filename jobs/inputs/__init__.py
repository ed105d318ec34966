"""The demo pipeline's inputs: the reproducible backlog generator, the live producer and the one event encoder."""
