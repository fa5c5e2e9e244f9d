"""rl-zoo3 hyperparameters for PPO on Atari with chunkstore's rollout buffer.

A Python hyperparameter file, because rl-zoo3 evaluates only ``policy_kwargs``,
``replay_buffer_class`` and ``replay_buffer_kwargs`` from YAML strings: here the
dict holds the class itself. From the repository root::

    python -m rl_zoo3.train --algo ppo --env PongNoFrameskip-v4 -conf examples/rl_zoo3_ppo.py

rl-zoo3's own Atari PPO settings otherwise (see docs/rl-zoo3.md).
"""

from sb3_integration import CompressedRolloutBuffer

hyperparams = {
    "atari": {
        "env_wrapper": ["stable_baselines3.common.atari_wrappers.AtariWrapper"],
        "frame_stack": 4,
        "policy": "CnnPolicy",
        "n_envs": 8,
        "n_steps": 128,
        "n_epochs": 4,
        "batch_size": 256,
        "n_timesteps": 1e7,
        "learning_rate": "lin_2.5e-4",
        "clip_range": "lin_0.1",
        "vf_coef": 0.5,
        "ent_coef": 0.01,
        "rollout_buffer_class": CompressedRolloutBuffer,
        "rollout_buffer_kwargs": {"compression_method": "none"},  # frames stored once, no codec
    },
}
