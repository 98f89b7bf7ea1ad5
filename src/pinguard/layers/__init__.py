"""Layer streams: verify and inflate a blob, walk its tar headers, record whiteouts.

``blob`` (verifying reader, gzip/zstd/plain inflate), ``tar`` (the 512-byte header walk),
``analysis`` (``LayerAnalysis`` and producing one from a stream or a directory) and
``chunked`` (lazy zstd:chunked reads). Nothing in this package knows about Python packaging
or where analyses are kept (``pinguard.cache``): it hands the catalog the members a selector
asked for.
"""
