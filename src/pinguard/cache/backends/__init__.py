"""The shared layer cache's backends: bytes by name in a directory, Redis or a registry.

``directory`` (``file:///DIR``), ``redis`` (``redis://``, ``rediss://``, ``unix://``) and
``registry`` (``registry://HOST/REPO``) each implement ``pinguard.cache.interface``'s
``CacheBackend``; ``pinguard.cache.store.CacheSpec`` picks one by URL and loads it on use.
"""
