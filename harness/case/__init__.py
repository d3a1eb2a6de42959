"""The case vocabulary: one attention call described as data (shape, dtype, device, layout, mask, window,
packing, KV cache, positional variants) and the real models whose layers make such calls.
"""
