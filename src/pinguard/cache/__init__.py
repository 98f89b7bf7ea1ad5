"""Every cache pinguard keeps, in one package (as trivy's ``pkg/fanal/cache``).

``key`` names entries (``digest_of``: the sha256 over a key's parts; ``source_digest`` and
``package_digest``: the code and files a key covers); ``entry`` is the sealed JSON every
local entry is written in (``seal``/``unseal``, checked on read) and ``EntryDir``, a
directory of such entries by kind. On that ground stand the layer cache: ``local`` (the
per-user directory, ``LayerCache``), ``interface`` (what a backend is and how it fails),
``store`` (``VerifiedCache``, the signed and verified store over a shared backend, and
``CacheSpec``) and ``backends`` (directory, Redis, registry); the replay cache
(``audit/replay.py``) and the result cache (``cli/warm.py``) keep ``EntryDir`` entries.
``key``, ``entry`` and ``interface`` import nothing above ``fileio``, so a warm audit reads
its entry without loading the pipeline or a layer reader.
"""
