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

    Examples
    --------
    >>> start_local_ray(num_cpus=2)   # doctest: +SKIP
    """
    loopback_only()
    import ray

    # worker processes import this package from where this process does
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *[p for p in paths if p]])

    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", False)
    return ray.init(address="local", num_cpus=num_cpus, **kwargs)
