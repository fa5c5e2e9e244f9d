"""Compatibility with sb3-extra-buffers and rl-zoo3, a layer above the buffers and algorithms.

``compat``: sb3-extra-buffers' helper names (``GpuReplayBuffer``, ``find_buffer_dtypes``...);
``convert``: ``from_sb3_extra_buffers`` and ``load_replay_buffer``; ``zoo``: the rl-zoo3 plugin.
What every buffer itself takes and reads (sb3-extra-buffers' arguments and codec names, its
buffers and pickles read into ours) lives below, in :mod:`sb3_integration.buffers.extra_buffers`
and :mod:`sb3_integration.buffers.sources` (their paths here before 0.3 still import, with a
``DeprecationWarning``). This package imports nothing itself.
"""
