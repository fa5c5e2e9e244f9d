"""The buffers as SB3's algorithms, callbacks and client code use them (what other test files do not cover)."""

from __future__ import annotations

import numpy as np
import torch as th
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import CheckpointCallback

from chunkstore import HybridTier
from sb3_integration import CompressedReplayBuffer


def test_a_model_whose_buffer_is_on_a_tier_instance_checkpoints_and_loads(tmp_path, one_torch_thread):
    """model.save() pickles replay_buffer_kwargs: a tier instance there used to fail it (a lock)."""
    tier = HybridTier(1 << 14, tmp_path / "spill", segment_bytes=1 << 12)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=300, learning_starts=50, batch_size=16, seed=0,
                device="cpu", policy_kwargs={"net_arch": [16]}, replay_buffer_class=CompressedReplayBuffer,
                replay_buffer_kwargs={"tier": tier, "chunk_len": 4, "compression_method": "zstd1"})
    model.learn(120, callback=CheckpointCallback(60, str(tmp_path / "ckpt"), save_replay_buffer=True))
    assert tier.nbytes > 0
    loaded = DQN.load(tmp_path / "ckpt" / "rl_model_120_steps.zip", env=model.get_env(), device="cpu")
    new_tier = loaded.replay_buffer.store_options.tier
    assert isinstance(new_tier, HybridTier) and new_tier is not tier  # a new, empty tier of the same settings
    assert (new_tier.ram_budget_bytes, new_tier.segment_bytes) == (1 << 14, 1 << 12)
    assert new_tier.path.parent == tier.path.parent and new_tier.nbytes == 0
    loaded.load_replay_buffer(tmp_path / "ckpt" / "rl_model_replay_buffer_120_steps.pkl")
    buffer = loaded.replay_buffer
    # SB3 calls the callback after env.step, before it stores that step's transition
    assert isinstance(buffer, CompressedReplayBuffer) and buffer.size() == 119
    assert np.array_equal(buffer.observations[:119], model.replay_buffer.observations[:119])
    loaded.learn(40, reset_num_timesteps=False)
    assert loaded.num_timesteps == 160 and buffer.size() == 159
    assert all(th.isfinite(p).all() for p in loaded.policy.parameters())
