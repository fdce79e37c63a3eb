"""Netlink codecs written from the kernel uapi layouts (struct-based, no netlink library).

`core` frames nlmsghdr/nlattr/genlmsghdr and talks to the kernel through a `Transport`, so the
SMC codecs (`smc_pnet`, `smc_diag`) can be tested with byte fixtures and a stand-in kernel.
"""
