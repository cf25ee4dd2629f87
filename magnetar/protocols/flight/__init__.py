"""The storage node's bulk reader: Arrow Flight streams of a partition's offset range."""
