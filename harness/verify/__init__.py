"""harness/verify"""
