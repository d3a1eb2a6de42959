"""Reference maths: the float64 oracle, the pass rule and its tolerances, the inputs a case is fed, the
FLOPs a call does, and the checks that what came back is what was computed.
"""
