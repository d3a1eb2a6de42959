"""The plugin contract: what an implementation declares (capabilities, conventions, signature), how it is
registered and found, and whether it can run a case here. Plain data that every command reads the same way.
"""
