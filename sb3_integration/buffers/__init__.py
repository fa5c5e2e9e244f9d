"""The drop-in SB3 buffers on the frame engine.

``replay`` (replay, dict replay, n-step), ``her``, ``rollout`` (rollout, dict rollout), ``prioritized``
(the prioritized replay mixin and buffers, with ``_prioritized_reads``); what they share: ``options``
(the store options), ``views`` (``ObservationView``), ``observations`` (what ``add()`` accepts),
``columns`` (SB3's small arrays), ``sb3_checks`` (SB3's own argument checks, replayed), ``sb3_front``
(those checks as a mixin for a buffer whose storage is elsewhere: the Ray service's),
``_closing``. The public names are exported by :mod:`sb3_integration`; this package imports nothing.
"""
