"""Everything that touches the node: sysfs, /dev, /proc, commands, netlink.

Every reader takes a root path (`/` in production, a fixture tree in tests) and every command
goes through a `Runner`, so tests can record what would have run.
"""
