"""What the tests share: the independent oracle, comparisons, stream processes, local clusters and stores."""
