"""Offline datasets as compressed buffers: the DQN Replay Dataset and Minari.

* :func:`import_dqn_replay` (:mod:`~sb3_integration.offline.dqn_import`) streams dopamine
  ``OutOfGraphReplayBuffer`` checkpoints (the DQN Replay Dataset's files) into one chunkstore
  file; :class:`DQNReplayBuffer` (:mod:`~sb3_integration.offline.dqn_replay`) reads it lazily
  or from RAM and samples dopamine's transitions or SB3's ``ReplayBufferSamples``;
  :mod:`~sb3_integration.offline.dopamine` holds the file layout and dopamine's sampling rules.
* :mod:`~sb3_integration.offline.minari_io`: Minari datasets in and out (needs the
  ``offline`` extra: ``minari[hdf5]``).
"""

from sb3_integration.offline._npy_stream import CheckpointError
from sb3_integration.offline.dqn_import import import_dqn_replay
from sb3_integration.offline.dqn_replay import DQNReplayBuffer

__all__ = ["CheckpointError", "DQNReplayBuffer", "import_dqn_replay"]
