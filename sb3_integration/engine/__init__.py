"""The frame engine: each distinct frame of an observation stream stored once, read back in batches.

:class:`~sb3_integration.engine.frames.FrameStore` (``frames``) is the one store every buffer
keeps its observations in; ``api`` is what a buffer may ask of it (``FrameStoreAPI``), ``stacking``
finds the stack layout, ``frame_state`` is the store as data (state, pickles, checks), ``frame_ids``
turns stack descriptors into frame ids, ``options`` is how a store keeps its frames
(``StoreOptions``, given to it whole), ``device_stacks`` assembles stacks of a device store,
``packing`` compresses small arrays for pickles; ``_frame_writes``, ``_native_put``,
``_native_frames`` and ``_outputs`` are its write path, its kernels and its reused output blocks.
Nothing here knows SB3's buffers: the layers above (``buffers``, ``distributed``) use this one.
Imports nothing, so a process that needs one module loads only that one.
"""
