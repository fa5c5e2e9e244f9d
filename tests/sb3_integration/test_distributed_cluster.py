"""The replay service on a Ray cluster of this machine's processes: a node goes away.

Shard 1 is placed on the second node (a custom resource only that node has), with
checkpoints and one restart allowed. When that node is removed, sampling goes on from
shard 0 with one warning; a replacement node joins (as an autoscaler would bring one),
Ray restarts shard 1 there, it loads its checkpoint, its writer sends again what the
checkpoint lacks, and every transition is back exactly once. (Placement by resource, not
by soft node affinity: under load a soft placement fell back to the head node.)
A cluster of its own costs ~15 s, so this runs with the slow tests.
"""

from __future__ import annotations

import collections
import sys
import time
import warnings

import _ray_helpers as helpers
import numpy as np
import pytest
from gymnasium import spaces

from sb3_integration.distributed import GlobalSampler, ReplayService, ReplayWriter
from sb3_integration.distributed.local import loopback_only
from sb3_integration.distributed.sampler import ShardUnavailableWarning

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

OBS = spaces.Box(0, 255, (4, 8, 8), np.uint8)
ACT = spaces.Discrete(4)


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    loopback_only()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(helpers)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1},
                                                      "include_dashboard": False})
    node2 = c.add_node(num_cpus=1, resources={"node2": 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    probe = ray.remote(num_cpus=0, resources={"node2": 0.01})(lambda: ray.get_runtime_context().get_node_id())
    assert ray.get(probe.remote(), timeout=60) == node2.node_id  # the second node takes work
    try:
        yield c, node2
    finally:
        procs = helpers.our_ray_processes()  # the replacement node's included
        ray.shutdown()
        c.shutdown()
        assert not helpers.still_running(procs), "Ray processes outlived the tests"


def test_a_removed_node_leaves_sampling_going_and_its_shard_comes_back(cluster, tmp_path):
    c, node2 = cluster
    on_head = {"resources": {"head": 0.01}}
    on_node2 = {"resources": {"node2": 0.01}}
    svc = ReplayService.create("cluster", OBS, ACT, capacity=4000, n_shards=2, checkpoint_dir=str(tmp_path),
                               max_restarts=1, shard_options=[on_head, on_node2], coordinator_options=on_head)
    try:
        assert svc.info()[1]["node"] == node2.node_id
        steps = [helpers.stacked_steps(s, 150, 1, marker=s) for s in (1, 2)]
        writers = [ReplayWriter(svc, flush_every=16) for _ in steps]  # writer i feeds shard i
        for w, s in zip(writers, steps, strict=True):
            for step in s[:100]:
                w.add(*step)
            w.flush(wait=True)
        svc.checkpoint()
        for w, s in zip(writers, steps, strict=True):
            for step in s[100:120]:
                w.add(*step)
            w.flush(wait=True)  # acknowledged, not in the checkpoint
        sampler = GlobalSampler(svc, timeout=30)
        assert set(sampler.sample(64)["shard"].tolist()) == {0, 1}
        c.remove_node(node2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            deadline = time.monotonic() + 60
            while not any(issubclass(w.category, ShardUnavailableWarning) for w in caught):
                assert time.monotonic() < deadline, "the lost node was never noticed"
                assert len(sampler.sample(32)["obs"]) == 32
        assert sum(issubclass(w.category, ShardUnavailableWarning) for w in caught) == 1
        replacement = c.add_node(num_cpus=1, resources={"node2": 1})
        for w, s in zip(writers, steps, strict=True):
            for step in s[120:]:
                w.add(*step)
            w.close()  # writer 1 waits for its shard's restart and sends again what it lacks
        info = svc.info()[1]
        assert info["restored"] and info["node"] == replacement.node_id
        want = collections.Counter(r for s in steps for r in helpers.flat(s))
        got = collections.Counter()
        for i in range(2):
            rows = ray.get(svc.shard(i).live_rows.remote())  # ring positions of the rows held
            n = len(rows)
            reply = ray.get(svc.shard(i).read.remote(rows, True))
            got.update(helpers.key(reply.obs[j], reply.next_obs[j], reply.actions[j], reply.rewards[j],
                                   reply.dones[j], reply.timeouts[j]) for j in range(n))
        assert got == want
    finally:
        svc.close()
