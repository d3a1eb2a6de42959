"""Running cases and cells on a Ray cluster (``--executor ray``): connecting, placement, node identity.

The runners call this package through a small interface: :func:`~harness.cluster.connect.connect`
gives a :class:`~harness.cluster.connect.RayCluster`, :class:`~harness.cluster.stream.Submitter`
and :func:`~harness.cluster.stream.stream` run tasks and hand back
:class:`~harness.cluster.remote.NodeResult` s. Nothing here imports Ray at module level.
"""
