"""Compatibility with sb3-extra-buffers and rl-zoo3.

``extra_buffers``: sb3-extra-buffers' constructor arguments and codec names, as every buffer
takes them; ``sources``: reading sb3-extra-buffers' and SB3's buffers and pickles into ours;
``compat``: sb3-extra-buffers' helper names (``GpuReplayBuffer``, ``find_buffer_dtypes``...);
``convert``: ``from_sb3_extra_buffers`` and ``load_replay_buffer``; ``zoo``: the rl-zoo3 plugin.
``extra_buffers`` and ``sources`` sit below the buffers, the rest above them; this package
imports nothing, so the buffers can import the former without loading the latter.
"""
