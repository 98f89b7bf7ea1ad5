"""Every cache pinguard keeps, in one package (as trivy's ``pkg/fanal/cache``).

``key`` makes every key (``digest_of`` over each key's parts: the layer, replay and result
keys; ``source_digest`` and ``package_digest``, the code and files a key covers); ``entry`` is
the one entry format (``seal``/``unseal``, checked on read) and ``EntryDir``, a directory of
entries by kind, where the replay cache (``audit/replay.py``) and the result cache
(``cli/warm.py``) keep theirs. The layer cache stands on the same ground: ``interface`` (the
``LayerStore`` the pipeline uses, what a backend is and how it fails), ``verified`` (the one
layer entry, checked on every read, over any backend: ``VerifiedCache``), ``signed`` (the
signed wrapper: DSSE envelopes with the fleet's keys), ``store`` (which store an audit
opens: ``LocalCache``, the directory backend unsigned, or a ``CacheSpec`` URL) and
``backends`` (directory, Redis, registry). ``key``, ``entry`` and ``interface`` load no other
pinguard module but ``errors`` and ``fileio``, so a warm audit reads its entry without the
pipeline or a layer reader.
"""
