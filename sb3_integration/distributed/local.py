"""Ray on this machine only: every address on the loopback interface.

By default Ray binds its servers to the machine's network interface address. For
tests, benchmarks and single-machine runs, :func:`loopback_only` makes Ray use
127.0.0.1 instead (Ray's own switch, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read by
every Ray process it starts), and :func:`start_local_ray` starts a local instance
that way. A multi-machine cluster is started with Ray's own tools instead.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["loopback_only", "start_local_ray"]


def loopback_only() -> None:
    """Make Ray processes started from now on (and this one) use 127.0.0.1."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants  # the flag is read at import: set it there too

    ray_constants.ENABLE_RAY_CLUSTER = False


def start_local_ray(num_cpus: int | None = None, **kwargs: Any) -> Any:
    """``ray.init`` of a local instance on the loopback interface, without the dashboard.

    Returns of up to 1 MiB are sent inline (Ray's ``max_direct_call_object_size``; its
    default, 100 KiB, sends a sample reply through the object store). On a cluster
    started with ``ray start``, pass ``--system-config='{"max_direct_call_object_size": 1048576}'``
    to the head node for the same effect.

    Examples
    --------
    >>> # needs: ray
    >>> import ray
    >>> _ = start_local_ray(num_cpus=1)
    >>> ray.is_initialized()
    True
    >>> ray.shutdown()
    """
    loopback_only()
    import ray

    # worker processes import this package from where this process does
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *[p for p in paths if p]])

    kwargs.setdefault("include_dashboard", False)
    # replies up to 1 MiB travel inline with the call instead of through the object store: a
    # sample(256) of compressed Atari chunks is ~0.3 MB (measured: 300 KB returns 2.3 ms -> 1.0 ms)
    kwargs.setdefault("_system_config", {"max_direct_call_object_size": 1 << 20})
    kwargs.setdefault("log_to_driver", False)
    return ray.init(address="local", num_cpus=num_cpus, **kwargs)
