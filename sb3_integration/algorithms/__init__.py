"""Algorithms that use the prioritized buffers: ``per_dqn`` (``PrioritizedDQN``), ``per_qrdqn``
(``PrioritizedQRDQN``, sb3-contrib), and their shared learner step (``_per_learner``)."""
