"""Layer streams: verify and inflate a blob, walk its tar headers, record whiteouts, cache.

``blob`` (verifying reader, gzip/zstd/plain inflate), ``tar`` (the 512-byte header walk),
``analysis`` (``LayerAnalysis`` and producing one from a stream or a directory) and ``cache``
(the per-layer cache and its full key). Nothing in this package knows about Python
packaging: it hands the catalog the members a selector asked for.
"""
