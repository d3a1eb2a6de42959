"""Running cases and cells on a Ray cluster (``--executor ray``): connecting, placement, node identity.

The runners call this package through a small interface: :func:`~harness.runtime.cluster.connect.connect`
gives a :class:`~harness.runtime.cluster.connect.RayCluster`, :class:`~harness.runtime.cluster.stream.Submitter`
and :func:`~harness.runtime.cluster.stream.stream` run tasks and hand back
:class:`~harness.runtime.cluster.remote.NodeResult` s. Nothing here imports Ray at module level.
"""
