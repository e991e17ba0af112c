"""Process control: spawn an agent in its own session, kill its whole tree, reap it."""
