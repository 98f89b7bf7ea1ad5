"""The cache's shared ground: one key function and one entry format for every cache entry.

``key`` names entries (``digest_of``: the sha256 over a key's parts; ``source_digest`` and
``package_digest``: the code and files a key covers) and ``entry`` is the sealed JSON every
local entry is written in (``seal``/``unseal``, checked on read) and ``EntryDir``, a directory
of such entries by kind: the layer cache (``layers/cache.py``), the replay cache
(``audit/replay.py``) and the result cache (``cli/warm.py``) all use these. Nothing here
imports above ``fileio``, so a warm audit reads its entry without loading the pipeline.
"""
