"""The console tools, installed as commands with the package (``[project.scripts]``).

=========================  ==============================================  =========================================
command                    what it does                                    module
=========================  ==============================================  =========================================
``chunkstore-inspect``     a file's arrays, codecs, ratios; a buffer in    :mod:`~sb3_integration.cli.inspect_store`
                           transitions and frames (``--json``, ``--plot``)
``chunkstore-verify``      every checksum, chunk and a buffer's state      :mod:`~sb3_integration.cli.verify`
``chunkstore-export``      stored frames or rebuilt observations as PNGs   :mod:`~sb3_integration.cli.export`
                           or a GIF (``--obs``, ``--episode``, ``--gif``)
``chunkstore-import-dqn``  a DQN Replay Dataset run into one file          :mod:`~sb3_integration.cli.import_dqn`
=========================  ==============================================  =========================================

Each module's ``main(argv=None)`` returns the exit status (0 fine, 1 corrupt or a request the file
cannot satisfy, 2 unreadable or bad arguments). ``python -m sb3_integration.cli <tool> ...`` runs
the same commands where the scripts are not on ``PATH``, and a clone's ``tools/inspect_store.py``,
``verify.py``, ``export.py`` and ``import_dqn_replay.py`` call these ``main`` functions.

They live in ``sb3_integration`` although inspect and verify read any chunkstore file: a saved
buffer's summary, its rebuilt observations and the DQN import need the buffer classes, and
``chunkstore`` does not import ``sb3_integration``. Importing this package loads nothing else.
"""

#: command name -> module under sb3_integration.cli; pyproject.toml's [project.scripts] lists the same
COMMANDS = {
    "chunkstore-inspect": "inspect_store",
    "chunkstore-verify": "verify",
    "chunkstore-export": "export",
    "chunkstore-import-dqn": "import_dqn",
}

__all__ = ["COMMANDS"]
