"""The drop-in SB3 buffers on the frame engine.

``replay`` (replay, dict replay, n-step), ``her``, ``rollout`` (rollout, dict rollout), ``prioritized``
(the prioritized replay mixin and buffers, with ``_prioritized_reads``); what they share: ``options``
(the store options), ``views`` (``ObservationView``), ``observations`` (what ``add()`` accepts),
``columns`` (SB3's small arrays), ``extra_buffers`` (sb3-extra-buffers' arguments and codec names, as
every buffer takes them), ``sources`` (sb3-extra-buffers' and SB3's buffers and pickles read into ours),
``files`` (``save`` / ``load`` / ``state_dict``, over the file format of :mod:`sb3_integration.persistence`),
``sb3_checks`` (SB3's own argument checks, replayed), ``sb3_front``
(those checks as a mixin for a buffer whose storage is elsewhere: the Ray service's),
``_closing``. The public names are exported by :mod:`sb3_integration`; this package imports nothing.
"""
