"""Adapters that bring third-party attention code under the plugin contract (transformers: :mod:`.transformers_attention`)."""
